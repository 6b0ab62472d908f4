"""The variables of the site playbook's roles for one host, from the validated spec and its plan.

`host_vars(spec, plan, node)` is what an inventory renderer puts under a host: every number comes
from the plan's tuning targets (Plan.tuning, railyard.model.host_tuning), the roles only apply
them. Keys are the roles' public variables (see each role's meta/argument_specs.yml); nothing
secret is in here (object-store credentials reach the dataset_cache role from the environment or
from the caller's own no_log variables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from railyard import guests
from railyard.model.boot_args import cpu_vendor
from railyard.model.health_check import expect_of
from railyard.model.nvlink_domain import NCCL_MNNVL
from railyard.model.sysfs_discovery import format_cpulist

if TYPE_CHECKING:
    from railyard.model.host_tuning import TuningTargets
    from railyard.model.plan import NodePlan, Plan
    from railyard.model.spec.types import Spec


def host_vars(spec: Spec, plan: Plan, node: NodePlan | str, *, object_endpoint: str | None = None,
              dataset_prefix: str = "") -> dict[str, Any]:
    """Role variables for `node` (a NodePlan or a host name from plan.nodes): the plan's tuning
    targets (Plan.tuning) as the roles' variables, formatted, never computed here.

    object_endpoint: the S3 endpoint URL of the object tier when the spec leaves it to the driver
                     (the lab's own server); default: the spec's `storage.object.endpoint`.
    dataset_prefix:  the object-store prefix staged into the local cache ("" = the whole bucket).
    """
    if isinstance(node, str):
        node = plan.node_named(node)
    sku = plan.catalog.nodes[node.sku]
    targets = plan.tuning(node)
    tuning = spec.tuning
    nics = list(targets.compute_pfs)
    out: dict[str, Any] = {"railyard_node": node.name, "railyard_sku": sku.id, "railyard_stack": spec.stack}

    out.update(_hugepage_vars(targets))

    # --- SR-IOV: vfsPerPf VFs on every compute PF, the plan's VFs given to its VMs
    vfs_per_pf = targets.vfs_per_pf
    out["sriov_pfs"] = [
        {"name": pf, "numvfs": vfs_per_pf,
         "vfs": [{"index": a.index, "mac": a.mac, "trust": False, "spoofchk": True}
                 for a in targets.vfs if a.pf == pf]}
        for pf in nics
    ] if vfs_per_pf else []

    # --- IOMMU: passthrough when VFs or GPUs go to VMs
    out["iommu_mode"] = tuning.iommu
    out["iommu_cpu_vendor"] = cpu_vendor(sku)

    # --- CPU isolation of a hypervisor: only where its pool asks for it (no variable otherwise, so
    # the other stacks' tuning inputs stay as they were)
    if targets.cpu_isolation is not None:
        out["cpu_isolation_mode"] = targets.cpu_isolation.mode
        out["cpu_isolation_cpus"] = format_cpulist(targets.cpu_isolation.isolated)
        out["cpu_isolation_housekeeping"] = format_cpulist(targets.cpu_isolation.housekeeping)
        # There the role owns interrupt affinity: GPU, NIC and VF interrupts on the housekeeping
        # CPUs of their node, which gpu_nic_affinity (the node's CPUs, pinned ones too) would undo.
        out["cpu_isolation_irq_cpus"] = {str(n): format_cpulist(c) for n, c in targets.cpu_isolation.irq_cpus}

    # --- GPU/NIC affinity: the pairing is computed on the host from its PCIe tree; the plan's is
    # what the verify role compares it with.
    out["gpu_nic_affinity_compute_nics"] = nics
    out["gpu_nic_affinity_nvlink_class"] = sku.nvlink_class or ""
    out["gpu_nic_affinity_nccl_cross_nic"] = targets.nccl_cross_nic
    if targets.cpu_isolation is not None:
        out["gpu_nic_affinity_irqs"] = False
    out["gpu_nic_affinity_vms"] = [
        {"name": vm.name, "gpus": list(vm.gpus),
         "vfs": [{"name": a.vm_vf, "pf": a.pf, "index": a.index, "mac": a.mac, "ip": a.ip, "prefixlen": a.prefixlen}
                 for a in targets.vfs if a.vm == vm.name]}
        for vm in node.vms
    ]
    out["verify_expected_pairing"] = dict(targets.pairing)

    # --- a compute tray of a rack: NCCL told of its NVLink domain, IMEX given the domain's trays
    # (only there, so other stacks' tuning inputs stay as they were)
    if targets.nvlink_domain is not None:
        out["gpu_nic_affinity_nccl_extra"] = dict(NCCL_MNNVL)
        out["nvlink_domain_name"] = targets.nvlink_domain
        out["nvlink_domain_imex_nodes"] = list(targets.imex_nodes)

    # --- LLDP on an Ethernet fabric's rails, read back by `railyard verify` (only there, so other
    # stacks' tuning inputs stay as they were)
    if plan.fabric.cabling_by_lldp:
        out["lldp_interfaces"] = [nic.netdev for nic in node.nics if nic.netdev]

    # --- dataset cache: the local NVMe tier and the object tier it is filled from
    cache = spec.storage.local_cache
    out["dataset_cache_mount"] = cache.mount
    out["dataset_cache_fstype"] = cache.fs
    obj = spec.storage.object
    out["dataset_cache_bucket"] = obj.bucket if obj is not None else ""
    out["dataset_cache_endpoint"] = object_endpoint if object_endpoint is not None else (obj.endpoint if obj else "")
    out["dataset_cache_prefix"] = dataset_prefix

    # --- Slurm: every node its name and the controller; the controller the whole configuration
    slurm = plan.slurm
    if slurm is not None:
        out["slurm_node_name"] = node.name
        out["slurm_gpus"] = len(getattr(sku, "gpus", ()))
        out["slurm_controller"] = slurm.controller.name
        out["slurm_controller_address"] = slurm.controller.address
        if slurm.health_check_interval:
            out["slurm_health_check_expect"] = expect_of(sku).to_json()
        if node.name == slurm.controller.name:
            out["slurm_cluster"] = slurm.to_json()
    return out


def guest_vars(spec: Spec, plan: Plan, vm: str) -> dict[str, Any]:
    """Role variables inside VM `vm` (guest tuning, playbooks/guest.yml): the plan's guest targets
    (Plan.guest_tuning) for the same roles a host runs, read against the guest's own hardware."""
    host, _ = plan.vm_named(vm)
    topology, sku = plan.guest(vm)
    targets = plan.guest_tuning(vm)
    out: dict[str, Any] = {"railyard_node": vm, "railyard_sku": sku.id, "railyard_stack": spec.stack}
    # Only where the stack asks for guest hugepages: the role would otherwise release what the
    # guest's image reserves (guest.yml runs it only when these are given).
    vm_spec = spec.pool(host.pool).vm
    assert vm_spec is not None, "a pool whose hosts run VMs has its vm"
    if vm_spec.hugepages is not None:
        out.update(_hugepage_vars(targets))
    out["gpu_nic_affinity_compute_nics"] = list(targets.compute_pfs)
    out["gpu_nic_affinity_nvlink_class"] = sku.nvlink_class or ""
    out["gpu_nic_affinity_nccl_cross_nic"] = targets.nccl_cross_nic
    # The planned NCCL topology, not the guest's emulated ports: each GPU and its VF as far apart
    # as on the host, at the catalog's PCIe links.
    out["gpu_nic_affinity_topo_xml"] = guests.nccl_topology_xml(plan.catalog.nodes[host.sku], topology)
    out["verify_expected_pairing"] = dict(targets.pairing)
    return out


def _hugepage_vars(targets: TuningTargets) -> dict[str, Any]:
    """The hugepages role's variables from a host's or a guest's tuning targets."""
    return {"hugepages_size": targets.hugepage_size,
            "hugepages_per_node": {str(n): c for n, c in targets.hugepages_per_numa.items()},
            "hugepages_total": targets.hugepages_total}
