"""The Kubernetes layer of a plan, Pulumi-free: the Nodes with their fabric labels and capacity,
Kueue's topology, flavors and queues, tenant namespaces, and one secondary network per rail.

`Plan.kubernetes` makes it once (None when the stack has no railyard:kubernetes);
components/kubernetes.py turns it into pulumi-kubernetes resources and never computes a label,
a quota or a network itself. Everything but the Nodes is per pool, rail or tenant, so the layer
adds one resource per node at most.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from railyard.model.kubernetes import kueue, sriov
from railyard.model.kubernetes.nodes import (
    GPU_RESOURCE, HOSTNAME, KubeNode, cordon, kube_nodes, label_keys, pool_labels, rail_resource,
)

if TYPE_CHECKING:
    from railyard.model.plan_types import PlanView


def object_prefix(stack: str) -> str:
    """Cluster-scoped objects are named after the stack, so stacks sharing a cluster do not
    collide: the stack name itself where it is a short DNS label, else a readable part and a digest
    of the whole name."""
    name = re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-")
    if name == stack and 0 < len(name) <= 40:
        return name
    return f"{name[:32].strip('-') or 'railyard'}-{hashlib.sha256(stack.encode()).hexdigest()[:6]}"


@dataclass(frozen=True)
class QueueTenant:
    """Who gets a ClusterQueue, a LocalQueue and a namespace: a tenant, or everyone when the stack
    has none (a namespace named after the stack)."""

    name: str
    namespace: str
    pools: tuple[str, ...]
    gpus: int
    pkey: str | None
    vlan: int | None


class KubernetesPlan:
    def __init__(self, plan: PlanView):
        k8s = plan.spec.kubernetes
        assert k8s is not None, "plan_kubernetes makes one only for a stack with railyard:kubernetes"
        self.plan = plan
        self.label_prefix: str = k8s.label_prefix
        self.resource_prefix: str = k8s.resource_prefix
        self.prefix = object_prefix(plan.spec.stack)
        self.labels = label_keys(self.label_prefix)

    @cached_property
    def nodes(self) -> tuple[KubeNode, ...]:
        return kube_nodes(self.plan, self.label_prefix, self.resource_prefix)

    @property
    def platform_topology(self) -> tuple[str, ...] | None:
        """The node labels the platform sets itself, widest first, where the driver's config says
        so (CoreWeave's fabric labels): they are Kueue's Topology levels, and Railyard labels no
        Node, since the platform's nodes come and go (autoscaling) and already carry their place.
        None: Railyard's own labels (labels the Nodes, one resource per node)."""
        levels = getattr(self.plan.spec.driver_config, "platform_topology", None)
        return tuple(levels) if levels else None

    def pool_labels(self, pool: str) -> dict[str, str]:
        """The labels every node of `pool` carries (SKU, pool, fabric kind and speed): what a
        platform's node pool puts on the nodes it makes."""
        return pool_labels(self.plan, self.label_prefix, pool)

    @cached_property
    def tenants(self) -> tuple[QueueTenant, ...]:
        spec, plan = self.plan.spec, self.plan
        if not spec.tenants:
            pools = tuple(p.name for p in spec.node_pools)
            return (QueueTenant(self.prefix, self.prefix, pools, sum(plan.pool_gpus(p) for p in pools),
                                None, None),)
        out = []
        for entry, tenant in zip(plan.tenants(), spec.tenants):
            out.append(QueueTenant(tenant.name, tenant.namespace, tenant.pools, entry["gpu_quota"],
                                   entry.get("pkey"), entry.get("vlan")))
        return tuple(out)

    @property
    def namespaces(self) -> list[str]:
        """The namespaces the layer creates, one per tenant: deleting them ends the jobs Kueue
        admitted there, without which Kueue would never let their queue go."""
        return [t.namespace for t in self.tenants]

    # --- Kueue -----------------------------------------------------------------------------------

    @property
    def topology_levels(self) -> list[str]:
        return list(self.platform_topology or kueue.topology_levels(self.plan, self.label_prefix))

    @property
    def topology_name(self) -> str:
        return self.prefix

    def flavor_name(self, pool: str) -> str:
        return f"{self.prefix}-{pool}"

    def cluster_queue_name(self, tenant: QueueTenant) -> str:
        return self.prefix if tenant.name == self.prefix else f"{self.prefix}-{tenant.name}"

    @cached_property
    def kueue(self) -> list[dict[str, Any]]:
        """Topology, flavors, cluster queues, local queues: in the order they depend on each other."""
        out = [kueue.topology(self.topology_name, self.topology_levels)]
        pools = [p.name for p in self.plan.spec.node_pools]
        # A platform that taints its pools' nodes says how to tolerate them (CoreWeave's nodeTaints).
        tolerations = getattr(self.plan.spec.driver_config, "pool_tolerations", None)
        for pool in pools:
            out.append(kueue.resource_flavor(self.flavor_name(pool), pool, self.topology_name, self.label_prefix,
                                             tolerations(pool) if tolerations else None))
        by_pool: dict[str, list[KubeNode]] = {p: [] for p in pools}
        for node in self.nodes:
            by_pool[node.pool].append(node)
        covered = kueue.covered_resources(list(self.nodes))
        for tenant in self.tenants:
            share = kueue.share_gpus(tenant.gpus, [(p, sum(n.gpus for n in by_pool[p])) for p in tenant.pools])
            out.append(kueue.cluster_queue(self.cluster_queue_name(tenant), self.prefix, tenant.namespace, covered,
                                           [(self.flavor_name(p), by_pool[p], share[p]) for p in tenant.pools]))
        for tenant in self.tenants:
            out.append(kueue.local_queue(tenant.namespace, self.cluster_queue_name(tenant)))
        return out

    # --- secondary networks ------------------------------------------------------------------------

    @cached_property
    def sriov_policies(self) -> list[dict[str, Any]]:
        plan, spec = self.plan, self.plan.spec
        vfs = spec.tuning.sriov.vfs_per_pf
        if spec.virtual or vfs <= 0:
            return []
        out = []
        for pool in spec.node_pools:
            first = plan.pool_nodes(pool.name)[:1]
            if not first:
                continue
            for nic in first[0].nics:
                if nic.netdev is None:
                    continue
                out.append(sriov.policy(f"{self.prefix}-{pool.name}-rail{nic.rail}", pool=pool.name, rail=nic.rail,
                                        pf=nic.netdev, vfs=vfs, link=spec.fabric.compute.kind, mtu=None,
                                        label_key=self.labels["pool"]))
        return out

    @cached_property
    def sriov_networks(self) -> list[dict[str, Any]]:
        """Per rail and tenant, where the nodes have the rail's VFs as a device-plugin resource."""
        if not self.sriov_policies:
            return []
        rails = len(self.plan.networks.compute.rails)
        kind = self.plan.spec.fabric.compute.kind
        out = []
        for tenant in self.tenants:
            for rail in range(rails):
                name = f"{self.prefix}-rail{rail}" if tenant.name == self.prefix else \
                    f"{self.prefix}-{tenant.name}-rail{rail}"
                out.append(sriov.network(name, kind=kind, rail=rail, namespace=tenant.namespace, vlan=tenant.vlan,
                                         pkey=tenant.pkey, annotation_prefix=self.label_prefix))
        return out

    @cached_property
    def network_attachments(self) -> list[dict[str, Any]]:
        """What the operator's controller would render for each network."""
        return [sriov.network_attachment(n, self.resource_prefix) for n in self.sriov_networks]

    def cordon(self, node: KubeNode, cordoned: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
        """The Node's spec and annotations, given acceptance's cordoned machines (node -> reason).
        Acceptance checks machines: a VM leaves scheduling with its hypervisor."""
        return cordon(self.label_prefix, cordoned.get(node.hypervisor or node.name))

    # --- views ---------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        return {
            "label_prefix": self.label_prefix,
            "nodes": len(self.nodes),
            "gpus": sum(n.gpus for n in self.nodes),
            "topology": self.topology_levels,
            "namespaces": self.namespaces,
            "queues": [{"tenant": t.name, "namespace": t.namespace, "cluster_queue": self.cluster_queue_name(t),
                        "local_queue": kueue.LOCAL_QUEUE, "gpus": t.gpus} for t in self.tenants],
            "sriov_policies": len(self.sriov_policies),
            "networks": len(self.sriov_networks),
        }


def plan_kubernetes(plan: PlanView) -> KubernetesPlan | None:
    return KubernetesPlan(plan) if plan.spec.kubernetes is not None else None


__all__ = ["GPU_RESOURCE", "HOSTNAME", "KubeNode", "KubernetesPlan", "QueueTenant",
           "object_prefix", "plan_kubernetes", "rail_resource"]
