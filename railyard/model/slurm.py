"""Slurm as the plan sees it (railyard:slurm): its nodes with their SKU's counts, and the switches
of its topology/tree plugin, from the fabric plan.

Slurm's tree wants every node under exactly one leaf switch, and a rail-optimized node hangs off
one leaf per rail. A Slurm leaf is therefore a scalable unit: the leaves of every rail serving its
nodes, which reach each other in one switch hop on every rail. Above it is the unit's spine group
(three tiers), and one root: the spines of a two-tier fabric, the cores of a three-tier one. Nodes
of pools outside the compute fabric hang off a switch of their own, under the root, so every node
stays schedulable. `--switches=1` therefore means "one scalable unit".

A stack with rack-scale pools (railyard.model.nvlink_domain) adds the NVLink domain below that.
Slurm 23.11 and later place jobs in it with topology/block: one block per rack, BlockSizes from
the rack's trays up to a scalable unit of racks (`blocks`, `block_sizes`). Slurm before 23.11 has
no topology/block; there the rack becomes the tree's leaf, under its scalable unit, so
`--switches=1` means "one rack". The role picks by the slurmctld it finds (playbooks/roles/slurm).
Nodes of other pools are a block per scalable unit; where one of those would be smaller than a
rack, which topology/block refuses, the stack keeps to topology/tree on every Slurm.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from railyard.model.fabric.names import group_name, unit_name
from railyard.model.spec import os_reserve_gib

if TYPE_CHECKING:
    from railyard.model.catalog import NodeSku
    from railyard.model.plan_types import PlanView

# The root of the tree: what connects the scalable units (or the spine groups).
ROOT_TWO_TIERS = "spine"
ROOT_THREE_TIERS = "core"

# A GPU's Slurm type: its model's product token (H100, A100, GB200), lowercased.
_GPU_TYPE = re.compile(r"\b([A-Z]{1,2}[0-9]{2,4}[A-Z]?)\b")


@dataclass(frozen=True)
class SlurmNode:
    name: str
    address: str
    switch: str
    """The Slurm leaf it hangs off (its scalable unit)."""
    cpus: int | None
    sockets: int | None
    cores_per_socket: int | None
    threads_per_core: int | None
    memory_mib: int | None
    """RealMemory: the SKU's memory less what the OS keeps (os_reserve_gib); None when unknown."""
    gpus: int
    gpu_type: str | None


@dataclass(frozen=True)
class SlurmSwitch:
    name: str
    level: int
    """0 for a leaf (a scalable unit), one more per tier above."""
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlurmBlock:
    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class SlurmPlan:
    cluster_name: str
    controller: SlurmNode
    partition: str
    max_switch_wait: int
    nodes: tuple[SlurmNode, ...]
    switches: tuple[SlurmSwitch, ...]
    """Leaves first, then each tier above, the root last: the order topology.conf lists them."""
    blocks: tuple[SlurmBlock, ...] = ()
    """topology/block's blocks: one per NVLink domain, one per scalable unit of other nodes;
    empty on a stack without rack-scale pools, which uses topology/tree alone."""
    block_sizes: tuple[int, ...] = ()
    health_check_interval: int = 0
    """Seconds between slurmd's runs of Railyard's health check (railyard.model.health_check); 0: none."""
    health_check_node_state: str = "ANY"

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({n.gpu_type for n in self.nodes if n.gpus and n.gpu_type}))

    def to_json(self) -> dict[str, Any]:
        """The role's view (playbooks/roles/slurm's slurm_* variables): nodes grouped by their
        counts (one NodeName=DEFAULT each), switch members as Slurm hostlists."""
        groups: dict[tuple, list[dict[str, str]]] = {}
        for n in self.nodes:
            groups.setdefault(_counts(n), []).append({"name": n.name, "address": n.address})
        return {
            "cluster_name": self.cluster_name, "controller": self.controller.name,
            "controller_address": self.controller.address, "partition": self.partition,
            "partition_nodes": hostlist(n.name for n in self.nodes), "max_switch_wait": self.max_switch_wait,
            "gpu_types": list(self.gpu_types),
            "health_check_interval": self.health_check_interval,
            "health_check_node_state": self.health_check_node_state,
            "node_groups": [{**dict(counts), "hosts": hostlist(m["name"] for m in members), "nodes": members}
                            for counts, members in groups.items()],
            "switches": [{"name": s.name, "level": s.level,
                          **({"nodes": hostlist(s.nodes)} if s.nodes else {"switches": hostlist(s.switches)})}
                         for s in self.switches],
            **({"blocks": [{"name": b.name, "nodes": hostlist(b.nodes)} for b in self.blocks],
                "block_sizes": list(self.block_sizes)} if self.blocks else {}),
        }


def _counts(n: SlurmNode) -> tuple:
    out = [(key, getattr(n, key)) for key in ("cpus", "sockets", "cores_per_socket", "threads_per_core", "memory_mib")
           if getattr(n, key) is not None]
    if n.gpus:
        out += [("gpus", n.gpus)] + ([("gpu_type", n.gpu_type)] if n.gpu_type else [])
    return tuple(out)


def gpu_type(model: str | None) -> str | None:
    m = _GPU_TYPE.search(model or "")
    return m.group(1).lower() if m else None


def sku_counts(sku: NodeSku) -> dict[str, int | None]:
    """What slurm.conf says of a node of the SKU: CPUs, and sockets x cores x threads when the
    catalog knows all three (Slurm wants all of them or none), RealMemory in MiB."""
    cpu = sku.cpus
    sockets = cpu.sockets
    cores = cpu.cores // sockets if cpu.cores and sockets and cpu.cores % sockets == 0 else None
    threads = sku.threads_per_core
    if not (sockets and cores and threads):
        sockets = cores = threads = None
    # Below the memory the host reports, or slurmd's registration drains it (Low RealMemory).
    memory = int((sku.memory_gib - os_reserve_gib(sku.memory_gib)) * 1024) if sku.memory_gib else None
    return {"cpus": cpu.threads or cpu.cores, "sockets": sockets, "cores_per_socket": cores,
            "threads_per_core": threads, "memory_mib": memory}


def plan_slurm(plan: PlanView) -> SlurmPlan | None:
    """The stack's Slurm (None without railyard:slurm)."""
    spec = plan.spec.slurm
    if spec is None:
        return None
    fabric = plan.fabric
    pooled = {pl.pool.name for pl in fabric.layouts}
    nodes: list[SlurmNode] = []
    leaves: dict[str, list[str]] = {}
    groups: dict[str, dict[str, None]] = {}
    counts = {sku_id: sku_counts(sku) for sku_id, sku in plan.catalog.nodes.items()
              if any(p.sku == sku_id for p in plan.spec.node_pools)}
    units: dict[str, dict[str, None]] = {}  # with racks: a scalable unit's racks, the leaves under it
    tops: dict[str, None] = {}  # what hangs under the groups or the root: units (or leaves), in plan order
    for host in plan.nodes:
        sku = plan.catalog.nodes[host.sku]
        if host.pool in pooled:
            switch = unit_name(host.pool, fabric.scalable_unit(host.pool, host.index))
            group = fabric.spine_group(host.pool, host.index)
            if group is not None:
                groups.setdefault(group_name(host.pool, group), {})[switch] = None
        else:
            switch = host.pool  # off the compute fabric: a switch of the pool's own, under the root
        tops[switch] = None
        domain = plan.nvlink_domain(host)
        if domain is not None:
            units.setdefault(switch, {})[domain.name] = None
            switch = domain.name
        leaves.setdefault(switch, []).append(host.name)
        gpus = getattr(sku, "gpus", ())
        nodes.append(SlurmNode(host.name, host.management_ip, switch, **counts[host.sku], gpus=len(gpus),
                               gpu_type=gpu_type(gpus[0].model) if gpus else None))
    switches = [SlurmSwitch(name, 0, nodes=tuple(members)) for name, members in leaves.items()]
    # The racks add a level below the scalable units, which keep their place under the groups or root.
    up = 1 if units else 0
    switches += [SlurmSwitch(unit, 1, switches=tuple(racks)) for unit, racks in units.items()]
    if groups:
        grouped = {leaf for members in groups.values() for leaf in members}
        switches += [SlurmSwitch(name, 1 + up, switches=tuple(members)) for name, members in groups.items()]
        top = list(groups) + [name for name in tops if name not in grouped]
        switches.append(SlurmSwitch(ROOT_THREE_TIERS, 2 + up, switches=tuple(top)))
    elif len(tops) > 1:
        switches.append(SlurmSwitch(ROOT_TWO_TIERS, 1 + up, switches=tuple(tops)))
    by_name = {n.name: n for n in nodes}
    blocks, block_sizes = _blocks(plan, leaves if units else {})
    return SlurmPlan(spec.cluster_name, by_name[spec.controller], spec.partition, spec.max_switch_wait,
                     tuple(nodes), tuple(switches), blocks, block_sizes,
                     health_check_interval=spec.health_check_interval,
                     health_check_node_state=spec.health_check_node_state)


def _blocks(plan: PlanView, members: dict[str, list[str]]) -> tuple[tuple[SlurmBlock, ...], tuple[int, ...]]:
    """topology/block's blocks and BlockSizes, or none where the plugin cannot hold the stack.

    The base is a rack's trays, the smallest block a job is planned in; topology.conf(5) wants
    every block at least that big, so a stack whose other pools give a smaller block keeps to
    topology/tree. Each larger size doubles the one before ("a power of two larger"), and Slurm
    pairs blocks in the order they are listed, so a size is kept only while it pairs racks of one
    scalable unit: its racks count divides every unit's. Racks are listed first, unit by unit."""
    if not members:
        return (), ()
    domains = plan.nvlink_domains
    base = min(len(d.nodes) for d in domains)
    racks = {d.name for d in domains}
    if any(len(nodes) < base for name, nodes in members.items() if name not in racks):
        return (), ()
    per_unit: dict[str, int] = {}
    for d in domains:
        per_unit[d.unit] = per_unit.get(d.unit, 0) + 1
    sizes, pair = [base], 2
    while all(n % pair == 0 for n in per_unit.values()):
        sizes.append(base * pair)
        pair *= 2
    ordered = [d.name for d in domains] + [name for name in members if name not in racks]
    return tuple(SlurmBlock(name, tuple(members[name])) for name in ordered), tuple(sizes)


def hostlist(names: Iterable[str]) -> str:
    """Slurm's compressed hostlist of names, in their order: gpu-0..gpu-3, gpu-7 -> gpu-[0-3,7].
    A run of names that differ only in a rising trailing number is folded; x01, x02 -> x0[1-2]."""
    out: list[str] = []
    run_prefix: str | None = None
    run: list[int] = []

    def flush() -> None:
        if run_prefix is None:
            return
        if len(run) == 1:
            out.append(f"{run_prefix}{run[0]}")
            return
        ranges: list[str] = []
        start: int | None = run[0]
        for prev, cur in zip(run, [*run[1:], None]):
            if cur != prev + 1:
                ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
                start = cur
        out.append(f"{run_prefix}[{','.join(ranges)}]")

    for name in names:
        m = re.fullmatch(r"(.*?)(0|[1-9][0-9]*)", name)
        if m and m.group(1) and m.group(1) == run_prefix and int(m.group(2)) > run[-1]:
            run.append(int(m.group(2)))
            continue
        flush()
        if m and m.group(1):
            run_prefix, run = m.group(1), [int(m.group(2))]
        else:
            out.append(name)
            run_prefix, run = None, []
    flush()
    return ",".join(out)
