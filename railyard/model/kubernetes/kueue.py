"""Kueue's view of the plan: a Topology whose levels are the fabric's tiers, a ResourceFlavor per
pool on it, a ClusterQueue per tenant with its GPU quota, and a LocalQueue in each tenant's
namespace (one cluster queue and one local queue in `default` when the stack has no tenants).

A job that asks for one scalable unit (`kueue.x-k8s.io/podset-required-topology: <prefix>/su`)
then gets nodes under the same leaves on every rail; on a stack with rack-scale pools, one that
asks for `<prefix>/nvlink-domain` gets the compute trays of one NVL72 rack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from railyard.model.kubernetes.nodes import (
    GPU_RESOURCE, HOSTNAME, NVLINK_DOMAIN, KubeNode, binary_quantity, label_keys,
)

if TYPE_CHECKING:
    from railyard.model.plan_types import PlanView

API = "kueue.x-k8s.io/v1beta2"
LOCAL_QUEUE = "gpu"
"""Every tenant's LocalQueue: jobs say `kueue.x-k8s.io/queue-name: gpu`. Not `default`, which
Kueue's LocalQueue defaulting would hand jobs that name no queue."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def topology_levels(plan: PlanView, label_prefix: str) -> list[str]:
    """Node labels from the widest tier to a single node."""
    keys = label_keys(label_prefix)
    levels = [keys["su"], HOSTNAME]
    if plan.nvlink_domains:
        levels.insert(1, keys[NVLINK_DOMAIN])
    if plan.fabric.tiers == 3:
        levels.insert(0, keys["spine-group"])
    if any(n.vms for n in plan.nodes):
        levels.insert(-1, keys["host"])
    return levels


def topology(name: str, levels: list[str]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]}}


def resource_flavor(name: str, pool: str, topology_name: str, label_prefix: str,
                    tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """tolerations: of the pool's taints, where the platform taints its nodes; Kueue adds them to
    the pods it admits to this flavor."""
    spec: dict[str, Any] = {"nodeLabels": {label_keys(label_prefix)["pool"]: pool}, "topologyName": topology_name}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


_SHIFT = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def _count(value: str) -> tuple[int, bool]:
    """(the number, whether it is bytes) of a quantity the model wrote."""
    if value[-2:] in _SHIFT:
        return int(value[:-2]) << _SHIFT[value[-2:]], True
    return int(value), False


def _quantity_sum(nodes: list[KubeNode], resource: str) -> str:
    """Allocatable `resource` summed over nodes, in the form the API server writes back."""
    counted = [_count(n.allocatable.get(resource, "0")) for n in nodes]
    total = sum(c for c, _ in counted)
    return binary_quantity(total) if any(b for _, b in counted) else str(total)


def covered_resources(nodes: list[KubeNode]) -> list[str]:
    """What the queues account for: every resource the nodes offer but pods (Kueue refuses a job
    that asks for a resource its queue does not cover, such as hugepages or a rail's VFs)."""
    seen = dict.fromkeys(["cpu", "memory", GPU_RESOURCE])
    for n in nodes:
        seen.update(dict.fromkeys(k for k in n.allocatable if k != "pods"))
    return list(seen)


def cluster_queue(name: str, cohort: str, namespace: str, covered: list[str],
                  flavors: list[tuple[str, list[KubeNode], int]]) -> dict[str, Any]:
    """flavors: (flavor, its nodes, the GPUs this queue may hold on them). The GPU quota is a cap
    (no borrowing from the cohort); the rest is whatever the nodes have."""
    def resources(nodes: list[KubeNode], gpus: int) -> list[dict[str, Any]]:
        out = []
        for r in covered:
            if r == GPU_RESOURCE:
                out.append({"name": r, "nominalQuota": str(gpus), "borrowingLimit": "0"})
            else:
                out.append({"name": r, "nominalQuota": _quantity_sum(nodes, r)})
        return out

    return {
        "apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{
                "coveredResources": covered,
                "flavors": [{"name": flavor, "resources": resources(nodes, gpus)} for flavor, nodes, gpus in flavors],
            }],
        },
    }


def local_queue(namespace: str, cluster_queue_name: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue_name}}


def share_gpus(quota: int, pools: list[tuple[str, int]]) -> dict[str, int]:
    """A tenant's quota over its pools, filled in stack order: each pool gives what it has until
    the quota is spent (Kueue's quotas are per flavor; the tenant's total is what they add to)."""
    out, left = {}, quota
    for pool, gpus in pools:
        out[pool] = min(gpus, left)
        left -= out[pool]
    return out
