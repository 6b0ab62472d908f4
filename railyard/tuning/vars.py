"""The variables of the site playbook's roles for one host, from the validated spec and its plan.

`host_vars(spec, plan, node)` is what an inventory renderer puts under a host: every number comes
from the plan and model layer (railyard.model.host_tuning, the pairing rule), the roles only apply
them. Keys are the roles' public variables (see each role's meta/argument_specs.yml); nothing
secret is in here (object-store credentials reach the dataset_cache role from the environment or
from the caller's own no_log variables).
"""

from __future__ import annotations

from typing import Any

from railyard.model import host_tuning
from railyard.model.fabric import compute_nics

# What the iommu role writes for each vendor (kernel-parameters.txt: intel_iommu=, amd_iommu=, iommu=pt).
CPU_VENDORS = {"intel": "intel", "amd": "amd"}


def _cpu_vendor(sku: Any) -> str:
    model = (sku.cpus.model or "").lower()
    for word, vendor in CPU_VENDORS.items():
        if word in model:
            return vendor
    return "auto"  # the role reads the host's /proc/cpuinfo


def host_vars(spec: Any, plan: Any, node: Any, *, object_endpoint: str | None = None,
              dataset_prefix: str = "") -> dict[str, Any]:
    """Role variables for `node` (a NodePlan or a host name from plan.nodes).

    object_endpoint: the S3 endpoint URL of the object tier when the spec leaves it to the driver
                     (the lab's own server); default: the spec's `storage.object.endpoint`.
    dataset_prefix:  the object-store prefix staged into the local cache ("" = the whole bucket).
    """
    if isinstance(node, str):
        node = next((n for n in plan.iter_nodes() if n.name == node), None) or _missing(node, plan)
    sku = plan.catalog.nodes[node.sku]
    tuning = spec.tuning
    nics = [n.rdma for n in compute_nics(sku)]
    numa_ids = sorted(n.id for n in sku.numa_nodes)
    out: dict[str, Any] = {"railyard_node": node.name, "railyard_sku": sku.id, "railyard_stack": spec.stack}

    # --- hugepages: in proportion to the GPUs each NUMA node serves (those given to VMs, if any)
    hp = tuning.hugepages
    pages = hp.pages_for(sku.memory_gib) if (hp.count is not None or sku.memory_gib is not None) else 0
    gpu_names = [g for vm in node.vms for g in vm.gpus] if node.vms else [g.name for g in sku.gpus]
    weights = dict.fromkeys(numa_ids, 0)
    for name in gpu_names:
        numa = sku.gpu(name).numa
        if numa is not None:
            weights[numa] = weights.get(numa, 0) + 1
    out["hugepages_size"] = hp.size
    if hp.per_numa and weights:
        split = host_tuning.split_pages(pages, weights)
        out["hugepages_per_node"] = {str(n): c for n, c in split.items()}
        out["hugepages_total"] = 0
    else:
        out["hugepages_per_node"] = {}
        out["hugepages_total"] = pages

    # --- SR-IOV: vfsPerPf VFs on every compute PF, the plan's VFs given to its VMs
    vfs_per_pf = tuning.sriov.vfs_per_pf or 0
    assignments = host_tuning.vf_assignments(spec.stack, node, vfs_per_pf, nics) if vfs_per_pf else []
    out["sriov_pfs"] = [
        {"name": pf, "numvfs": vfs_per_pf,
         "vfs": [{"index": a.index, "mac": a.mac, "trust": False, "spoofchk": True}
                 for a in assignments if a.pf == pf]}
        for pf in nics
    ] if vfs_per_pf else []

    # --- IOMMU: passthrough when VFs or GPUs go to VMs
    out["iommu_mode"] = tuning.iommu
    out["iommu_cpu_vendor"] = _cpu_vendor(sku)

    # --- GPU/NIC affinity: the pairing is computed on the host from its PCIe tree; the plan's is
    # what the verify role compares it with.
    fabric = spec.fabric.compute
    out["gpu_nic_affinity_compute_nics"] = nics
    out["gpu_nic_affinity_nvlink_class"] = sku.nvlink_class or ""
    out["gpu_nic_affinity_nccl_cross_nic"] = 0 if fabric.topology == "rail-optimized" else 2
    out["gpu_nic_affinity_vms"] = [
        {"name": vm.name, "gpus": list(vm.gpus),
         "vfs": [{"name": a.vm_vf, "pf": a.pf, "index": a.index, "mac": a.mac, "ip": a.ip, "prefixlen": a.prefixlen}
                 for a in assignments if a.vm == vm.name]}
        for vm in node.vms
    ]
    out["verify_expected_pairing"] = dict(plan.pairing(sku.id))

    # --- dataset cache: the local NVMe tier and the object tier it is filled from
    cache = spec.storage.local_cache
    out["dataset_cache_mount"] = cache.mount
    out["dataset_cache_fstype"] = cache.fs
    obj = spec.storage.object
    out["dataset_cache_bucket"] = obj.bucket if obj is not None else ""
    out["dataset_cache_endpoint"] = object_endpoint if object_endpoint is not None else (obj.endpoint if obj else "")
    out["dataset_cache_prefix"] = dataset_prefix
    return out


def _missing(name: str, plan: Any):
    raise KeyError(f"no host {name!r} in the plan; hosts: {', '.join(n.name for n in plan.iter_nodes())}")
