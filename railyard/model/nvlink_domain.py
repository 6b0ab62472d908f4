"""The NVLink domains of a plan: a rack-scale SKU (one compute tray of an NVL72, catalog
`nvlink_domain`) comes in whole racks, and each rack is one NVLink domain whose GPUs reach each
other over the rack's NVLink switch trays rather than the compute fabric.

A pool of such a SKU is cut into domains of `compute_trays` consecutive nodes: node `index` is in
domain `index // compute_trays`. Validation (spec/rules.py) makes every pool a whole number of
racks and every scalable unit a whole number of racks, so a domain never spans two pools or two
scalable units, and every placement layer can put the domain one level below the unit:
- Kueue: a Topology level between the scalable unit and the node (kubernetes/kueue.py);
- Slurm: one topology/block block per domain, or on a Slurm before 23.11 (no topology/block) the
  leaf switch of topology/tree (slurm.py);
- NCCL and IMEX: the tuning of every tray (host_tuning.py, playbooks/roles/nvlink_domain).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from railyard.model.fabric.names import unit_name
from railyard.model.plan_types import NvlinkDomain, PlanView

if TYPE_CHECKING:
    from railyard.model.catalog import NodeSku

# What /etc/nccl.conf says on a compute tray (fixtures/nvlink_domain/nccl_mnnvl_source_excerpt.txt).
# NCCL's multi-node NVLink check returns with MNNVL off, and the rack's traffic goes over the compute
# fabric unannounced, when cuMem is off; its default (-2) leaves cuMem to detection, so it is set.
# With cuMem on, a tray whose IMEX channel is broken fails with an error naming the channel.
# NCCL_MNNVL_ENABLE keeps its default (2: checked for every communicator spanning trays): 1 would
# run the check for single-tray jobs too, and fail them on a tray whose IMEX is not up yet.
NCCL_MNNVL = {"NCCL_CUMEM_ENABLE": "1"}

LABEL = "nvlink-domain"
"""The Kubernetes label (under the stack's prefix) and Kueue level naming a node's domain."""


def domain_name(pool: str, index: int) -> str:
    """A pool's `index`th rack; a pure function of (pool, index), so growth renames nothing."""
    return f"{pool}-rack{index}"


def domain_index(sku: NodeSku, node_index: int) -> int | None:
    """The domain of node `node_index` of a pool of `sku`; None for a SKU that is not rack-scale."""
    spec = sku.nvlink_domain
    return None if spec is None else node_index // spec.compute_trays


def plan_domains(plan: PlanView) -> tuple[NvlinkDomain, ...]:
    """Every NVLink domain of the stack, pool by pool, rack by rack."""
    out = []
    placed = {pl.pool.name for pl in plan.fabric.layouts}
    for pool in plan.spec.node_pools:
        sku = plan.catalog.nodes[pool.sku]
        spec = sku.nvlink_domain
        if spec is None:
            continue
        hosts = plan.pool_nodes(pool.name)
        for i in range(len(hosts) // spec.compute_trays):
            trays = hosts[i * spec.compute_trays:(i + 1) * spec.compute_trays]
            # Slurm's name for the unit (railyard.model.slurm): a pool off the fabric is its own.
            unit = unit_name(pool.name, plan.fabric.scalable_unit(pool.name, trays[0].index)) \
                if pool.name in placed else pool.name
            out.append(NvlinkDomain(domain_name(pool.name, i), pool.name, i, pool.sku,
                                    tuple(h.name for h in trays), tuple(h.management_ip for h in trays),
                                    spec.gpus, spec.switch_trays, unit))
    return tuple(out)


def imex_nodes_config(domain: NvlinkDomain) -> str:
    """/etc/nvidia-imex/nodes_config.cfg of every tray of the domain: its trays' addresses, one a line."""
    return "".join(f"{a}\n" for a in domain.addresses)
