"""Host tuning targets: the arithmetic the roles apply, done once here from the spec and the plan.

The roles in playbooks/ only apply numbers; they never compute them. This module says how many
hugepages each NUMA node of a host reserves, how many VFs each compute PF gets and which VF goes to
which VM with which MAC. railyard/tuning/vars.py turns these into role variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from railyard.model.mac import hashed_mac
from railyard.model.numa_split import cell_weights, split_pages


def vf_mac(stack: str, node: str, pf: str, vf: int) -> str:
    """A stable, locally administered unicast MAC for VF `vf` of PF `pf` on `node` of `stack`.

    A VF keeps its MAC across runs and re-creations, so a VM's network config and its neighbours'
    ARP entries stay valid; the stack is part of the name so two stacks never share one.
    """
    return hashed_mac("railyard-vf", stack, node, pf, str(vf))


@dataclass(frozen=True)
class VfAssignment:
    pf: str  # the compute NIC (RDMA name) carrying the VF
    index: int  # VF number on that PF (the `vf N` of `ip link set <pf> vf N`)
    mac: str
    vm: str | None
    vm_vf: str | None  # the VF's name inside the VM (vf0, vf1...)
    ip: str | None
    prefixlen: int | None


def vf_assignments(stack: str, node_plan, vfs_per_pf: int, compute_nics: list[str]) -> list[VfAssignment]:
    """Every VF of a host: those the plan gives to VMs, then the spare ones (no VM), PF by PF."""
    given: dict[tuple[str, int], tuple] = {}
    for vm in node_plan.vms:
        for vf in vm.vfs:
            given[(vf.pf, vf.slot)] = (vm.name, vf.name, vf.ip, vf.prefixlen)
    out = []
    for pf in compute_nics:
        for i in range(vfs_per_pf):
            vm, name, ip, plen = given.get((pf, i), (None, None, None, None))
            out.append(VfAssignment(pf, i, vf_mac(stack, node_plan.name, pf, i), vm, name, ip, plen))
    missing = [f"{pf} slot {slot}" for (pf, slot) in given if slot >= vfs_per_pf or pf not in compute_nics]
    if missing:
        raise ValueError(f"{node_plan.name}: the plan gives VMs VFs that the host does not create: "
                         f"{', '.join(sorted(missing))} (vfsPerPf is {vfs_per_pf})")
    return out


@dataclass(frozen=True)
class CpuIsolation:
    """A hypervisor's CPUs split between its VMs and itself (railyard:nodePools[].cpuIsolation)."""

    mode: str
    """`kernel` (isolcpus, nohz_full, rcu_nocbs) or `systemd` (CPUAffinity of its services)."""
    isolated: tuple[int, ...]
    """Exactly the CPUs pinned to its VMs (railyard.model.guest_topology)."""
    housekeeping: tuple[int, ...]
    """Every other CPU of the host: its services, interrupts and the VMs' emulator threads."""
    irq_cpus: tuple[tuple[int, tuple[int, ...]], ...] = ()
    """Per host NUMA node, its housekeeping CPUs: where the interrupts of the node's GPUs, NICs and
    VFs go (the role cpu_isolation places them there, and tells irqbalance to leave them)."""


@dataclass(frozen=True)
class TuningTargets:
    """Everything host tuning sets on one host, as numbers and names the roles only apply."""

    hugepage_size: str
    hugepages_per_numa: dict[int, int]
    """NUMA node -> pages, when the stack splits hugepages per NUMA node; else empty."""
    hugepages_total: int
    """Pages for the whole host when they are not split per NUMA node; else 0."""
    compute_pfs: tuple[str, ...]
    """The compute NICs (RDMA names), rail order."""
    vfs_per_pf: int
    vfs: tuple[VfAssignment, ...]
    """Every VF of every compute PF: those the plan gives VMs, then the spare ones."""
    pairing: dict[str, str]
    """GPU -> NIC, the one pairing rule's answer for the SKU (what verify compares with)."""
    cache_drives: int
    """The SKU's data NVMe drives that make up the local cache (0: none in the catalog)."""
    nccl_cross_nic: int
    """NCCL_CROSS_NIC: 0 on a rail-optimized fabric (a GPU talks to its own rail's peers), else 2
    (NCCL decides)."""
    cpu_isolation: CpuIsolation | None = None
    nvlink_domain: str | None = None
    """A compute tray's NVLink domain (railyard.model.nvlink_domain); None off rack-scale pools."""
    imex_nodes: tuple[str, ...] = ()
    """Its domain's trays' management addresses, IMEX's node list; empty off rack-scale pools."""


def tuning_targets(spec, sku, node_plan, pairing: Mapping[str, str], cache_drives: int,
                   cpu_isolation: CpuIsolation | None = None, domain=None) -> TuningTargets:
    """The targets of `node_plan` (a NodePlan of `sku`) under the stack's tuning settings;
    cpu_isolation: the plan's, from its VMs' pinning; domain: its NVLink domain (an NvlinkDomain)."""
    hp = spec.tuning.hugepages
    pages = hp.pages_for(sku.memory_gib) if (hp.count is not None or sku.memory_gib is not None) else 0
    # In proportion to the GPUs each NUMA node serves (those given to VMs, if any).
    gpu_names = [g for vm in node_plan.vms for g in vm.gpus] if node_plan.vms else [g.name for g in sku.gpus]
    weights = dict.fromkeys(sorted(n.id for n in sku.numa_nodes), 0)
    for name in gpu_names:
        numa = sku.gpu(name).numa
        if numa is not None:
            weights[numa] = weights.get(numa, 0) + 1
    per_numa = split_pages(pages, weights) if (hp.per_numa and weights) else {}
    pfs = tuple(n.rdma for n in sku.compute_nics)
    vfs_per_pf = spec.tuning.sriov.vfs_per_pf or 0
    vfs = tuple(vf_assignments(spec.stack, node_plan, vfs_per_pf, list(pfs))) if vfs_per_pf else ()
    return TuningTargets(hugepage_size=hp.size, hugepages_per_numa=per_numa,
                         hugepages_total=0 if per_numa else pages, compute_pfs=pfs, vfs_per_pf=vfs_per_pf,
                         vfs=vfs, pairing=dict(pairing), cache_drives=cache_drives,
                         nccl_cross_nic=_cross_nic(spec), cpu_isolation=cpu_isolation,
                         nvlink_domain=domain.name if domain is not None else None,
                         imex_nodes=tuple(domain.addresses) if domain is not None else ())


def _cross_nic(spec) -> int:
    """NCCL_CROSS_NIC: 0 on a rail-optimized fabric (a GPU talks to its own rail's peers), else 2."""
    return 0 if spec.fabric.compute.topology == "rail-optimized" else 2


def guest_pages(hp, memory_gib: float, gpus_per_cell: Mapping[int, int]) -> tuple[dict[int, int], int]:
    """A guest's own hugepages (nodePools[].vm.hugepages; None: none) as (pages per guest cell,
    pages in all when they are not split per cell). Split as the guest's memory is split over its
    cells (numa_split.cell_weights), so each cell's pages come out of that cell's memory."""
    pages = hp.pages_for(memory_gib) if hp is not None else 0
    if hp is not None and hp.per_numa and pages and gpus_per_cell:
        return split_pages(pages, cell_weights(dict(gpus_per_cell))), 0
    return {}, pages


def guest_targets(spec, vm_spec, guest, pairing: Mapping[str, str]) -> TuningTargets:
    """What guest tuning sets inside a VM of the virtual layout, whose hardware is `guest` (its
    guest SKU, railyard.model.guest_sku): the VM's own hugepages (guest_pages), its VFs as the
    compute NICs in GPU order, the pairing of its GPUs with them. A guest has no SR-IOV, cache
    drives or CPU isolation of its own."""
    hp = vm_spec.hugepages
    gpus = {n.id: sum(1 for g in guest.gpus if g.numa == n.id) for n in guest.numa_nodes}
    per_cell, total = guest_pages(hp, guest.memory_gib, gpus)
    return TuningTargets(hugepage_size=hp.size if hp is not None else spec.tuning.hugepages.size,
                         hugepages_per_numa=per_cell, hugepages_total=total,
                         compute_pfs=tuple(n.rdma for n in guest.compute_nics), vfs_per_pf=0, vfs=(),
                         pairing=dict(pairing), cache_drives=0, nccl_cross_nic=_cross_nic(spec))
