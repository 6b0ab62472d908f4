"""Kueue's view of the plan: a Topology whose levels are the fabric's tiers, a ResourceFlavor per
pool on it, a ClusterQueue per tenant with its GPU quota, and a LocalQueue in each tenant's
namespace (one cluster queue and one local queue in `default` when the stack has no tenants).

A job that asks for one scalable unit (`kueue.x-k8s.io/podset-required-topology: <prefix>/su`)
then gets nodes under the same leaves on every rail.
"""

from __future__ import annotations

from typing import Any

from railyard.model.kubernetes.nodes import GPU_RESOURCE, HOSTNAME, KubeNode, label_keys

API = "kueue.x-k8s.io/v1beta2"
LOCAL_QUEUE = "gpu"
"""Every tenant's LocalQueue: jobs say `kueue.x-k8s.io/queue-name: gpu`. Not `default`, which
Kueue's LocalQueue defaulting would hand jobs that name no queue."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def topology_levels(plan: Any, label_prefix: str) -> list[str]:
    """Node labels from the widest tier to a single node."""
    keys = label_keys(label_prefix)
    levels = [keys["su"], HOSTNAME]
    if plan.fabric.tiers == 3:
        levels.insert(0, keys["spine-group"])
    if any(n.vms for n in plan.nodes):
        levels.insert(-1, keys["host"])
    return levels


def topology(name: str, levels: list[str]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]}}


def resource_flavor(name: str, pool: str, topology_name: str, label_prefix: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": {label_keys(label_prefix)["pool"]: pool}, "topologyName": topology_name}}


def _quantity_sum(nodes: list[KubeNode], resource: str) -> str:
    """Allocatable `resource` summed over nodes (cpu in cores, memory in Gi)."""
    if resource == "memory":
        return f"{sum(int(n.allocatable['memory'].removesuffix('Gi')) for n in nodes)}Gi"
    return str(sum(int(n.allocatable.get(resource, "0")) for n in nodes))


def cluster_queue(name: str, cohort: str, namespace: str, flavors: list[tuple[str, list[KubeNode], int]]) -> dict[str, Any]:
    """flavors: (flavor, its nodes, the GPUs this queue may hold on them)."""
    return {
        "apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory", GPU_RESOURCE],
                "flavors": [{"name": flavor, "resources": [
                    {"name": "cpu", "nominalQuota": _quantity_sum(nodes, "cpu")},
                    {"name": "memory", "nominalQuota": _quantity_sum(nodes, "memory")},
                    {"name": GPU_RESOURCE, "nominalQuota": str(gpus)},
                ]} for flavor, nodes, gpus in flavors],
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
