"""The kernel command-line arguments a node's tuning asks for at boot, from the plan.

The hugepages and iommu roles write them into bootloader drop-ins (their templates format the
same values); a host reboots when its running kernel lacks one of them (the hosts driver's rolling
reboot), and preview says so from the host's running /proc/cmdline. Pure: no Pulumi, no I/O.
tests/unit/model/test_boot_args.py renders the roles' own variables and checks both agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from railyard.model.sysfs_discovery import format_cpulist

if TYPE_CHECKING:
    from railyard.model.catalog import NodeSku
    from railyard.model.host_tuning import CpuIsolation
    from railyard.model.plan import NodePlan, Plan
    from railyard.model.spec.types import Spec

# What the iommu role writes for each vendor and mode (kernel-parameters.txt: intel_iommu=,
# amd_iommu=, iommu=pt); "off" adds nothing.
IOMMU_ARGS = {
    "intel": {"passthrough": ("intel_iommu=on", "iommu=pt"), "on": ("intel_iommu=on",), "off": ()},
    "amd": {"passthrough": ("amd_iommu=on", "iommu=pt"), "on": ("amd_iommu=on",), "off": ()},
}


def cpu_vendor(sku: NodeSku) -> str:
    """intel or amd from the catalog's CPU model; "auto" where it does not say (the iommu role
    then reads the host's /proc/cpuinfo)."""
    model = (sku.cpus.model or "").lower()
    for vendor in IOMMU_ARGS:
        if vendor in model:
            return vendor
    return "auto"


def hugepage_args(size: str, per_numa: dict[int, int], total: int) -> tuple[str, ...]:
    """default_hugepagesz, hugepagesz and hugepages (per NUMA node as node:count, in the string
    order of the node ids, as the role's dictsort writes them); nothing when no page is reserved."""
    pages = sum(per_numa.values()) if per_numa else total
    if pages <= 0:
        return ()
    count = ",".join(f"{n}:{c}" for n, c in sorted(((str(n), c) for n, c in per_numa.items()))) \
        if per_numa else str(total)
    return (f"default_hugepagesz={size}", f"hugepagesz={size}", f"hugepages={count}")


def isolation_args(isolation: CpuIsolation | None) -> tuple[str, ...]:
    """isolcpus (off the scheduler's load balancing, and managed interrupts off them), nohz_full and
    rcu_nocbs for the CPUs pinned to VMs, and irqaffinity for the host's own, under cpuIsolation:
    kernel (kernel-parameters.txt)."""
    if isolation is None or isolation.mode != "kernel" or not isolation.isolated:
        return ()
    cpus = format_cpulist(isolation.isolated)
    # irqaffinity: where an interrupt made after boot starts (vfio's, once a VM turns MSI-X on).
    return (f"isolcpus=managed_irq,domain,{cpus}", f"nohz_full={cpus}", f"rcu_nocbs={cpus}",
            f"irqaffinity={format_cpulist(isolation.housekeeping)}")


def kernel_args(spec: Spec, plan: Plan, node: NodePlan | str) -> tuple[str, ...]:
    """What `node`'s next boot must have on its command line: the hugepage reservation, then the
    IOMMU mode (none for a vendor the catalog does not name: the role decides that on the host),
    then the CPU isolation of a hypervisor."""
    if isinstance(node, str):
        node = plan.node_named(node)
    targets = plan.tuning(node)
    out = hugepage_args(targets.hugepage_size, dict(targets.hugepages_per_numa), targets.hugepages_total)
    vendor = cpu_vendor(plan.catalog.nodes[node.sku])
    if vendor != "auto":
        out += IOMMU_ARGS[vendor][spec.tuning.iommu]
    return out + isolation_args(targets.cpu_isolation)


def missing(wanted: tuple[str, ...] | list[str], cmdline: str) -> list[str]:
    """The wanted arguments a running kernel's command line lacks."""
    have = set(cmdline.split())
    return [a for a in wanted if a not in have]
