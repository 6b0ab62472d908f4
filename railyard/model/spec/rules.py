"""The cross-field rules: what no single key can tell (a pool's hugepages against its SKU's memory,
its VMs against the host, its NICs against the fabric, networks against each other), and the
planners' own limits (check_plan: the fabric planned once, then the address sizing).

They are a mixin of the parser (load._Parser): they read its catalog and record through its
problem(), so their problems join the others in the same SpecError.
"""

from __future__ import annotations

import abc
import ipaddress
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from railyard.model import addressing, guest_topology
from railyard.model.errors import Problem
from railyard.model.fabric import FabricError, FabricPlan, group_name, plan_fabric, unit_name
from railyard.model.nvlink_domain import domain_name
from railyard.model.spec.show import _fmt, _one_of, _show
from railyard.model.topology import Topology
from railyard.model.spec.types import (
    NAMESPACE, ComputeFabric, Fabric, Hugepages, NodePool, Spec, Sriov, TuningSpec, host_reserve_threads,
    os_reserve_gib,
)

if TYPE_CHECKING:
    from railyard.model.catalog import Catalog, NodeSku

# Reading the catalog (railyard/model/catalog.py). A fact the catalog marks unknown (None) skips the
# rule that needs it: the rule cannot be decided, and the entry's `assumptions` say what is missing.

_NIC_KINDS = {"infiniband": {"infiniband"}, "ethernet": {"roce"}, "vpi": {"infiniband", "roce"}}


def _gpu_family(model: str | None) -> str | None:
    """`NVIDIA H100 SXM5 80GB` -> `H100`: the part two catalog entries name alike."""
    m = re.search(r"\b([A-Z]\d{2,3})\b", model or "")
    return m.group(1) if m else None


def _feeds_plan(path: str) -> bool:
    """Whether a problem at path leaves the planners without a value they read."""
    return (path.startswith((f"{NAMESPACE}:nodePools", f"{NAMESPACE}:fabric.", f"{NAMESPACE}:layout"))
            or path == f"{NAMESPACE}:fabric")


@dataclass
class _PoolFacts:
    """What the cross-field checks need to know about a pool beyond its NodePool."""

    path: str
    sku: NodeSku | None = None
    vm_keys: frozenset = frozenset()

    @property
    def known_sku(self) -> NodeSku:
        """The SKU, for the checks check_pools runs only on pools whose SKU the catalog has."""
        assert self.sku is not None, "check_pools checks only the pools whose SKU the catalog has"
        return self.sku


class CrossFieldRules(abc.ABC):
    """The rules that read several sections at once, mixed into the parser (load._Parser), which
    provides problem() and these attributes."""

    catalog: Catalog
    problems: list[Problem]
    fabric_plan: FabricPlan | None

    @abc.abstractmethod
    def problem(self, path: str, found: str, allowed: str, hint: str = "") -> None:
        """Record a problem (the parser's, so that the rules' problems join its own)."""

    def check_pools(self, pools: list[NodePool], facts: list[_PoolFacts], layout: str | None,
                    tuning: TuningSpec, fabric: Fabric | None) -> None:
        compute = fabric.compute if fabric is not None else None
        for pool, fact in zip(pools, facts):
            if pool.name is not None and pool.count is not None:
                longest = addressing.node_name(pool.name, pool.count - 1)
                if layout == "virtual" and pool.vms_per_host:
                    longest = addressing.vm_name(pool.name, pool.count - 1, pool.vms_per_host - 1)
                if len(longest) > 63:
                    self.problem(fact.path + ".name", _show(pool.name),
                                 f"at most {63 - (len(longest) - len(pool.name))} characters for this count",
                                 f"the name {longest!r} would exceed a 63-character DNS label")
            if fact.sku is None:
                continue
            if fact.sku.nvlink_domain is not None:
                self.check_rack(pool, fact, layout, pools, facts)
            self.check_hugepages(pool, fact, tuning.hugepages, layout)
            self.check_sriov(pool, fact, layout, tuning.sriov)
            if layout == "virtual" and pool.vm is not None:
                self.check_vm(pool, fact, compute, tuning.hugepages)
            if compute is not None and compute.kind and compute.speed:
                self.check_nics(pool, fact, compute)

    def check_rack(self, pool: NodePool, fact: _PoolFacts, layout: str | None,
                   pools: list[NodePool], facts: list[_PoolFacts]) -> None:
        """A rack-scale SKU (railyard.model.nvlink_domain) comes in whole racks, on bare metal."""
        sku = fact.known_sku
        domain = sku.nvlink_domain
        assert domain is not None, "check_pools checks racks only for rack-scale SKUs"
        if layout == "virtual" and pool.vms_per_host:
            self.problem(fact.path + ".sku", _show(pool.sku), "a SKU that runs VMs in the virtual layout",
                         f"{sku.id} is a compute tray of an {domain.name} rack; the one kept source of such VMs (a "
                         "cloud's IMEX guide) gives each VM a whole tray and runs IMEX in the guests, which "
                         f"Railyard's guests do not model: set {NAMESPACE}:layout: bare-metal")
        trays = domain.compute_trays
        if pool.count is None or pool.count % trays == 0:
            return
        others = [(p.name, f.path) for p, f in zip(pools, facts)
                  if p is not pool and p.sku == pool.sku and p.count and p.count % trays]
        split = sum(p.count or 0 for p in pools if p.sku == pool.sku) % trays == 0 and others
        hint = (f"an NVLink domain cannot be split across pools (with {', '.join(n or path for n, path in others)}): "
                f"each pool of {sku.id} holds whole racks" if split else
                f"{sku.id} is one compute tray of an {domain.name} rack of {trays} trays ({domain.gpus} GPUs), "
                "and the rack is one NVLink domain")
        self.problem(fact.path + ".count", _show(pool.count),
                     f"a multiple of {trays} (whole {domain.name} racks: {trays} compute trays each)", hint)

    def check_hugepages(self, pool: NodePool, fact: _PoolFacts, hp: Hugepages, layout: str | None) -> None:
        mem = fact.known_sku.memory_gib
        if mem is None or hp.size is None or (hp.count is None and hp.percent_of_memory is None):
            return
        reserve = os_reserve_gib(mem)
        want = hp.gib_for(mem)
        hpath = f"{NAMESPACE}:tuning.hugepages"
        key = "count" if hp.count is not None else "percentOfMemory"
        vm = pool.vm
        if (layout == "virtual" and want > 0 and vm is not None and vm.memory_gib and pool.vms_per_host
                and want < vm.memory_gib * pool.vms_per_host):
            # A guest backed by hugepages needs all of its memory in them, or it does not start.
            self.problem(f"{hpath}.{key}", _show(hp.count if key == "count" else hp.percent_of_memory),
                         f"enough hugepages for the VMs of pool {pool.name}, or none",
                         f"{_fmt(want)} GiB of hugepages on {pool.sku} cannot back {pool.vms_per_host} x "
                         f"{vm.memory_gib} GiB of VM memory; lower vm.memoryGiB or raise the hugepages")
        if want > mem - reserve:
            most = _most_hugepages(hp, key, mem, reserve)
            self.problem(f"{hpath}.{key}", _show(hp.count if key == "count" else hp.percent_of_memory),
                         f"at most {most} on {pool.sku} (pool {pool.name})",
                         f"{_fmt(want)} GiB of hugepages on a {_fmt(mem)} GiB host leaves less than the "
                         f"{_fmt(reserve)} GiB OS reserve (max(16 GiB, 10%))")

    def check_sriov(self, pool: NodePool, fact: _PoolFacts, layout: str | None, sriov: Sriov) -> None:
        n = sriov.vfs_per_pf
        if n is None:
            return
        spath = f"{NAMESPACE}:tuning.sriov.vfsPerPf"
        nics = fact.known_sku.compute_nics
        if layout == "virtual" and n == 0:
            self.problem(spath, "0 (SR-IOV off)", "at least 1 in the virtual layout",
                         "VMs reach the compute fabric through SR-IOV VFs")
            return
        known = [(nic, nic.sriov_total_vfs) for nic in nics if nic.sriov_total_vfs is not None]
        if known:
            nic, total = min(known, key=lambda k: k[1])
            if n > total:
                self.problem(spath, _show(n), f"0..{total} on {pool.sku} (pool {pool.name})",
                             f"{nic.name} on {pool.sku} supports at most {total} VFs (sriov_total_vfs)")
                return
        if layout == "virtual" and pool.vm is not None and pool.vm.vfs and pool.vms_per_host:
            need = addressing.vf_slots_per_pf(pool.vms_per_host, pool.vm.vfs, len(nics))
            if need > n:
                self.problem(f"{fact.path}.vm.vfs", _show(pool.vm.vfs),
                             f"at most {len(nics) * n // pool.vms_per_host} VFs per VM",
                             f"{pool.vms_per_host} VM(s) x {pool.vm.vfs} VFs over {len(nics)} compute PFs need "
                             f"{need} VFs per PF on {pool.sku}; raise {NAMESPACE}:tuning.sriov.vfsPerPf")

    def check_vm(self, pool: NodePool, fact: _PoolFacts, compute: ComputeFabric | None, hp: Hugepages) -> None:
        vm, sku, vms = pool.vm, fact.known_sku, pool.vms_per_host
        assert vm is not None, "check_pools checks the VMs of a pool that has them"
        if vms is None:
            return
        before = len(self.problems)
        vpath = f"{fact.path}.vm"

        def where(key: str) -> str:
            if "shape" in fact.vm_keys:
                return f"{vpath}.shape"
            return f"{vpath}.{key}" if key in fact.vm_keys else f"{fact.path}.vmsPerHost"

        what = f"shape {vm.shape}" if vm.shape else "VM"
        host_gpus = len(sku.gpus)
        if vm.gpus is not None and vm.gpus * vms > host_gpus:
            self.problem(where("gpus"), _show(vm.shape or vm.gpus),
                         f"vmsPerHost x vm.gpus <= {host_gpus} ({pool.sku} GPUs)",
                         f"{vms} x {vm.gpus} GPUs ({what}) = {vm.gpus * vms} > {host_gpus}")
        elif vm.gpus is not None and vm.gpus < 1:
            self.problem(where("gpus"), _show(vm.gpus), "at least 1 GPU per VM")
        threads = sku.threads
        if vm.vcpus is not None and threads is not None:
            most = threads - host_reserve_threads(threads)
            if vm.vcpus * vms > most:
                self.problem(where("vcpus"), _show(vm.shape or vm.vcpus),
                             f"vmsPerHost x vm.vcpus <= {most}",
                             f"{pool.sku} has {threads} threads and keeps {threads - most} for the hypervisor; "
                             f"{vms} x {vm.vcpus} vCPUs ({what}) = {vm.vcpus * vms}")
        mem = sku.memory_gib
        if vm.memory_gib is not None and mem is not None:
            most_gib = mem - os_reserve_gib(mem)
            if vm.memory_gib * vms > most_gib:
                self.problem(where("memoryGiB"), _show(vm.shape or vm.memory_gib),
                             f"vmsPerHost x vm.memoryGiB <= {math.floor(most_gib)}",
                             f"{pool.sku} has {_fmt(mem)} GiB and keeps {_fmt(os_reserve_gib(mem))} GiB for the "
                             f"hypervisor; {vms} x {vm.memory_gib} GiB ({what}) = {vm.memory_gib * vms} GiB")
        guest_hp = vm.hugepages
        if guest_hp is not None and vm.memory_gib and (guest_hp.count or guest_hp.percent_of_memory):
            # The guest's own kernel and services need memory outside its hugepages, as a host's do.
            want, reserve = guest_hp.gib_for(vm.memory_gib), os_reserve_gib(vm.memory_gib)
            key = "count" if guest_hp.count is not None else "percentOfMemory"
            if want > vm.memory_gib - reserve:
                most = _most_hugepages(guest_hp, key, vm.memory_gib, reserve)
                most = most if key == "count" else max(0, most)
                self.problem(f"{vpath}.hugepages.{key}", _show(guest_hp.count if key == "count"
                                                               else guest_hp.percent_of_memory),
                             f"at most {most} in a {vm.memory_gib} GiB VM",
                             f"{_fmt(want)} GiB of guest hugepages leave the guest less than its "
                             f"{_fmt(reserve)} GiB OS reserve (max(16 GiB, 10%)) of {vm.memory_gib} GiB")
        if len(self.problems) == before and vm.gpus and vm.vcpus and vm.memory_gib and vm.vfs:
            self.check_guests(pool, fact, hp)
        shape = self.catalog.vm_shapes.get(vm.shape) if vm.shape else None
        if shape is None:
            return
        host_family = _gpu_family(sku.gpus[0].model if sku.gpus else None)
        shape_family = _gpu_family(shape.gpu_model)
        if host_family and shape_family and host_family != shape_family:
            self.problem(f"{vpath}.shape", _show(vm.shape), f"a shape with {host_family} GPUs",
                         f"{vm.shape} is a {shape_family} shape; {pool.sku} has {host_family} GPUs")
        if compute is not None and compute.kind and shape.fabric and shape.fabric != compute.kind:
            self.problem(f"{vpath}.shape", _show(vm.shape), f"a shape whose compute NICs join {compute.kind}",
                         f"{vm.shape} reaches a {shape.fabric} fabric; {NAMESPACE}:fabric.compute.kind is {compute.kind}")

    def check_guests(self, pool: NodePool, fact: _PoolFacts, hp: Hugepages) -> None:
        """The VMs laid out on their host (railyard.model.guest_topology): vCPUs pinned beside their
        devices, a cell's memory, the guest's PCIe tree."""
        try:
            pool_guests(pool, fact.known_sku, hp, key=f"{fact.path}.vm")
        except guest_topology.GuestTopologyError as exc:
            key = exc.key
            if "shape" in fact.vm_keys and key.rsplit(".", 1)[-1] in ("vcpus", "memoryGiB"):
                key = f"{fact.path}.vm.shape"
            self.problem(key, exc.found, exc.allowed, exc.why)

    def check_nics(self, pool: NodePool, fact: _PoolFacts, compute: ComputeFabric) -> None:
        # The catalog refuses a SKU without compute NICs, so every pool here has at least one.
        cpath = f"{NAMESPACE}:fabric.compute"
        for nic in fact.known_sku.compute_nics:
            kinds = _NIC_KINDS.get(nic.link or "")
            if kinds is not None and compute.kind not in kinds:
                self.problem(cpath + ".kind", _show(compute.kind), _one_of(sorted(kinds)) + f" for {pool.sku}",
                             f"{nic.name} on {pool.sku} is an {nic.link} NIC")
                return
            if nic.speed_gbps is not None and compute.speed_gbps > nic.speed_gbps:
                self.problem(cpath + ".speed", _show(compute.speed), f"at most {nic.speed_gbps} Gb/s for {pool.sku}",
                             f"the compute NICs of {pool.sku} ({nic.name}) run at {nic.speed_gbps} Gb/s at most")
                return


    def check_networks(self, fabric: Fabric | None) -> None:
        """CIDRs apart from each other (sizes: check_plan; a driver's own range: its DriverRules)."""
        if fabric is None:
            return
        path = f"{NAMESPACE}:fabric"
        nets = {
            f"{path}.management.cidr": fabric.management.cidr,
            f"{path}.storage.cidr": fabric.storage.cidr,
            f"{path}.compute.cidr": fabric.compute.cidr,
            f"{path}.compute.loopbackCidr": fabric.compute.loopback_cidr,
        }
        seen: list[tuple[str, ipaddress.IPv4Network]] = []
        for p, net in nets.items():
            if net is None:
                continue
            for q, other in seen:
                if net.overlaps(other):
                    self.problem(p, str(net), f"a network apart from {other}", f"it overlaps {q}")
            seen.append((p, net))

    def check_plan(self, spec: Spec) -> None:
        """What only the planners can tell: network sizes (addressing.py), fabric limits (railyard.model.fabric).

        They need a whole spec, so they run once the keys they read are valid; their problems join
        the others in the same SpecError. The fabric is planned here, once: the address sizing
        reads it, and the plan reuses it (parse returns it).
        """
        fabric_problems: Sequence[Problem] = []
        try:
            self.fabric_plan = plan_fabric(spec, self.catalog)
        except FabricError as exc:
            fabric_problems = exc.problems
        self.problems.extend(addressing.address_problems(spec, self.catalog, self.fabric_plan))
        self.problems.extend(p for p in fabric_problems if p not in self.problems)
        if self.fabric_plan is not None:
            self.check_racks_in_units(spec, self.fabric_plan)

    def check_racks_in_units(self, spec: Spec, fabric: FabricPlan) -> None:
        """A rack (an NVLink domain) under one scalable unit's leaves, so that the placement layers
        can nest the domain inside the unit (railyard.model.nvlink_domain)."""
        placed = {pl.pool.name for pl in fabric.layouts}
        for pool in spec.node_pools:
            sku = self.catalog.nodes.get(pool.sku)
            domain = sku.nvlink_domain if sku is not None else None
            if domain is None or pool.name not in placed:
                continue
            trays = domain.compute_trays
            for rack in range(pool.count // trays):
                first, last = rack * trays, (rack + 1) * trays - 1
                if fabric.scalable_unit(pool.name, first) == fabric.scalable_unit(pool.name, last):
                    continue
                # The user's own reservation kept where a unit of whole racks fits under it.
                fits = (fabric.su_nodes if fabric.su_nodes >= trays else fabric.half) // trays * trays
                allowed = (f"{fabric.half - fits}, so that a unit is {fits // trays} whole racks ({fits} of a leaf's "
                           f"{fabric.half} node ports)" if fits else f"a switch with {2 * trays} ports or more")
                self.problem(f"{NAMESPACE}:fabric.compute." + ("reservedLeafPorts" if fits else "switch"),
                             str(fabric.reserved_leaf_ports if fits else spec.fabric.compute.switch), allowed,
                             f"pool {pool.name}: rack {rack} (trays {first}-{last}) would span two scalable units of "
                             f"{fabric.su_nodes} nodes; an {domain.name} rack must sit under one unit's leaves")
                break

    def check_topology_labels(self, pools: list[NodePool], facts: list[_PoolFacts]) -> None:
        """With railyard:kubernetes, a node's scalable unit and spine group are label values,
        which Kubernetes caps at 63 characters (the node names themselves are checked above)."""
        fabric = self.fabric_plan
        assert fabric is not None, "parse() checks the labels once check_plan() has planned the fabric"
        for pool, fact in zip(pools, facts):
            if pool.name is None or not pool.count:
                continue
            last = pool.count - 1
            values = [unit_name(pool.name, fabric.scalable_unit(pool.name, last))]
            domain = fact.sku.nvlink_domain if fact.sku is not None else None
            if domain is not None:
                values.append(domain_name(pool.name, last // domain.compute_trays))
            group = fabric.spine_group(pool.name, last) if fabric.tiers == 3 else None
            if group is not None:
                values.append(group_name(pool.name, group))
            longest = max(values, key=len)
            if len(longest) > 63:
                self.problem(fact.path + ".name", _show(pool.name),
                             f"at most {63 - (len(longest) - len(pool.name))} characters with railyard:kubernetes",
                             f"the label value {longest!r} (its scalable unit, spine group or rack) would exceed 63 characters")


def _most_hugepages(hp: Hugepages, key: str, memory_gib: float, reserve_gib: float) -> int:
    """The largest `count` (pages) or `percentOfMemory` that leaves a machine of memory_gib its
    OS reserve (a host's, or a guest's own)."""
    if key == "count":
        return int((memory_gib - reserve_gib) * (1 << 30)) // hp.page_bytes
    return math.floor((memory_gib - reserve_gib) / memory_gib * 100)


def pool_guests(pool: NodePool, sku: NodeSku, hugepages: Hugepages, key: str = "") -> tuple[guest_topology.GuestTopology, ...]:
    """The VMs of one of a pool's hosts laid out on it (railyard.model.guest_topology) from the
    pool's spec alone, as validation and a driver checking its own shapes need them before there
    is a plan; GuestTopologyError naming `key` where they do not fit."""
    vm = pool.vm
    assert vm is not None, "a pool whose hosts run VMs has its vm"
    return guest_topology.plan_guests(
        sku, guest_topology.vm_devices(sku, pool.vms_per_host, vm.gpus, vm.vfs), Topology.from_sku(sku).pairing(),
        vcpus=vm.vcpus, memory_gib=vm.memory_gib,
        reserve_threads=host_reserve_threads(sku.threads) if sku.threads else 0,
        hugepage_kib=hugepages.guest_page_kib, key=key)
