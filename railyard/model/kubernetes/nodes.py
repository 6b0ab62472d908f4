"""The Kubernetes Nodes of a plan: which machines are nodes, the labels that carry each one's place
in the fabric, and the capacity its SKU and tuning give it.

Every label comes from a plan field (docs/kubernetes.md lists them): the scalable unit and spine
group from the fabric planner, the SKU and pool from the node pool, the fabric's kind and speed
from the compute fabric. In the virtual layout the nodes are the VMs, never their hypervisors, so
no GPU is counted twice; a VM carries its hypervisor's place and, one level below it, the
hypervisor itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from railyard.model.fabric import group_name, unit_name
from railyard.model.nvlink_domain import LABEL as NVLINK_DOMAIN
from railyard.model.spec import os_reserve_gib

if TYPE_CHECKING:
    from railyard.model.catalog import NodeSku
    from railyard.model.plan_types import NodePlan, PlanView

HOSTNAME = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
# The RDMA shared device plugin's prefix: without SR-IOV a pod takes a rail's whole HCA.
RDMA_PREFIX = "rdma"
PODS_PER_NODE = 110


@dataclass(frozen=True)
class KubeNode:
    name: str
    pool: str
    labels: dict[str, str]
    capacity: dict[str, str]
    """Kubernetes quantities, as a kubelet with the GPU, SR-IOV and RDMA device plugins reports."""
    allocatable: dict[str, str]
    hypervisor: str | None = None

    @property
    def gpus(self) -> int:
        return int(self.capacity.get(GPU_RESOURCE, "0"))


_BINARY = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


def binary_quantity(n_bytes: int) -> str:
    """A byte count as Kubernetes writes it back (the largest binary suffix that divides it), so
    the API server's canonical form is what the plan says and a second up shows no diff."""
    for suffix, shift in _BINARY:
        if n_bytes and n_bytes % (1 << shift) == 0:
            return f"{n_bytes >> shift}{suffix}"
    return str(n_bytes)


def gib(n: float) -> str:
    return binary_quantity(int(n * (1 << 30)))


def label_keys(prefix: str) -> dict[str, str]:
    """Each Railyard label's key under `prefix`."""
    return {name: f"{prefix}/{name}" for name in
            ("pool", "sku", "su", "spine-group", NVLINK_DOMAIN, "host", "fabric", "fabric-speed")}


def cordon_reason_key(label_prefix: str) -> str:
    """The annotation holding acceptance's reason for a cordoned Node."""
    return f"{label_prefix}/cordon-reason"


def unhealthy_key(label_prefix: str) -> str:
    """The taint (NoSchedule) and annotation (the reason) of a Node the repair loop took out."""
    return f"{label_prefix}/unhealthy"


def cordon(label_prefix: str, reason: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    """A Node's spec and annotations under acceptance's verdict: cordoned (unschedulable, as
    `kubectl cordon` leaves it) with the reason beside it, or neither. Neither field is sent for a
    node that passed, so an apply after the node recovers releases them and it is schedulable again."""
    if reason is None:
        return {}, {}
    return {"unschedulable": True}, {cordon_reason_key(label_prefix): reason}


def rail_resource(resource_prefix: str, rail: int, sriov: bool) -> str:
    """The device-plugin resource of a rail: its VFs (SR-IOV) or its whole HCA (RDMA)."""
    return f"{resource_prefix}/rail{rail}" if sriov else f"{RDMA_PREFIX}/rail{rail}"


def pool_labels(plan: PlanView, label_prefix: str, pool: str) -> dict[str, str]:
    """The labels every node of `pool` carries, whatever its place in the fabric."""
    keys = label_keys(label_prefix)
    compute = plan.spec.fabric.compute
    return {keys["pool"]: pool, keys["sku"]: plan.spec.pool(pool).sku, keys["fabric"]: compute.kind,
            keys["fabric-speed"]: compute.speed}


def kube_nodes(plan: PlanView, label_prefix: str, resource_prefix: str) -> tuple[KubeNode, ...]:
    """Every node of the cluster, pool by pool: hosts in bare metal, VMs in the virtual layout."""
    spec, fabric = plan.spec, plan.fabric
    keys = label_keys(label_prefix)
    per_pool = {p.name: pool_labels(plan, label_prefix, p.name) for p in spec.node_pools}
    racks = bool(plan.nvlink_domains)
    out = []
    for host in plan.nodes:
        sku = plan.catalog.nodes[host.sku]
        labels = {**per_pool[host.pool],
                  keys["su"]: unit_name(host.pool, fabric.scalable_unit(host.pool, host.index))}
        group = fabric.spine_group(host.pool, host.index)
        if group is not None:
            labels[keys["spine-group"]] = group_name(host.pool, group)
        if racks:
            # Kueue needs every level on every node; an HGX node is an NVLink domain of its own.
            domain = plan.nvlink_domain(host)
            labels[keys[NVLINK_DOMAIN]] = domain.name if domain is not None else host.name
        if not host.vms:
            out.append(_host_node(plan, host, sku, labels, resource_prefix))
            continue
        for vm in host.vms:
            vm_labels = {**labels, keys["host"]: host.name, HOSTNAME: vm.name}
            pool = spec.pool(host.pool)
            assert pool.vm is not None, "a pool whose hosts run VMs has its vm"
            resources = {GPU_RESOURCE: len(vm.gpus)}
            for vf in vm.vfs:
                name = rail_resource(resource_prefix, vf.rail, True)
                resources[name] = resources.get(name, 0) + 1
            capacity = {"cpu": str(pool.vm.vcpus), "memory": gib(pool.vm.memory_gib),
                        "pods": str(PODS_PER_NODE), **{k: str(v) for k, v in resources.items()}}
            out.append(KubeNode(vm.name, host.pool, vm_labels, capacity, dict(capacity), hypervisor=host.name))
    return tuple(out)


def _host_node(plan: PlanView, host: NodePlan, sku: NodeSku, labels: dict[str, str], resource_prefix: str) -> KubeNode:
    tuning = plan.tuning(host)
    pages = tuning.hugepages_total + sum(tuning.hugepages_per_numa.values())
    page_gib = 1 if tuning.hugepage_size == "1G" else None
    hugepages_key = "hugepages-1Gi" if tuning.hugepage_size == "1G" else "hugepages-2Mi"
    hugepages = gib(pages if page_gib else pages * 2 / 1024)
    memory_gib = sku.memory_gib or 0
    sriov = tuning.vfs_per_pf > 0
    capacity = {"cpu": str(sku.threads or 0), "memory": gib(memory_gib), "pods": str(PODS_PER_NODE),
                GPU_RESOURCE: str(len(sku.gpus)), hugepages_key: hugepages}
    for rail in range(len(host.nics)):
        capacity[rail_resource(resource_prefix, rail, sriov)] = str(tuning.vfs_per_pf if sriov else 1)
    # The kubelet takes hugepages out of allocatable memory; the OS reserve stays with the host.
    hp_gib = pages if page_gib else pages * 2 / 1024
    free_gib = max(0, int(memory_gib - hp_gib - os_reserve_gib(memory_gib)))
    allocatable = {**capacity, "memory": gib(free_gib)}
    return KubeNode(host.name, host.pool, {**labels, HOSTNAME: host.name}, capacity, allocatable)
