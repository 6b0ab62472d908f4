"""The Kubernetes layer as pulumi-kubernetes resources, read off the plan's KubernetesPlan
(railyard/model/kubernetes): nothing here computes a label, a quota or a network.

Every object goes through one Provider built from the driver's kubeconfig, with server-side apply.
Where the driver's cluster is Railyard's own (the lab's), each Node is created with its labels
and capacity, for kwok to keep Ready, and the NetworkAttachmentDefinitions the SR-IOV operator
would render are created here, since no operator runs there. Where the cluster owns its nodes,
a NodePatch under the field manager `railyard` sets the labels and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from railyard.model.kubernetes import HOSTNAME, KubeNode, KubernetesPlan

FIELD_MANAGER = "railyard"
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}



@dataclass
class KubernetesLayerArgs:
    plan: KubernetesPlan
    kubeconfig: pulumi.Input[str]
    """A secret Output: the driver's cluster."""
    registers_nodes: bool
    """Create each Node (a cluster of Railyard's own, with kwok); else patch the kubelets' Nodes."""
    renders_networks: bool
    """Create the NetworkAttachmentDefinitions the SR-IOV operator would render (no operator there)."""
    node_names: dict[str, str] | None = None
    """Plan node -> its Node's name where the cluster's differs (Driver.kubernetes_node_names)."""
    cordoned: pulumi.Output | None = None
    """Under acceptance's onFailure: cordon, the machines it took out (node -> reason): their
    Nodes are cordoned, and the others are not."""
    kueue_chart: dict[str, str] | None = None
    """Where the cluster has no Kueue: the Helm chart it is installed from (Driver.kueue_chart),
    before any of Kueue's objects."""


class KubernetesLayer(pulumi.ComponentResource):
    """Outputs: `summary` (the layer's shape: nodes, topology levels, queues)."""

    TYPE = "railyard:index:KubernetesLayer"

    def __init__(self, name: str, args: KubernetesLayerArgs, depends_on: list[pulumi.Resource] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        plan = args.plan
        self.provider = k8s.Provider(
            f"{name}-provider", kubeconfig=args.kubeconfig, enable_server_side_apply=True,
            # A cluster of Railyard's own goes with its stack: if it is gone already, its objects are too.
            delete_unreachable=args.registers_nodes,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on or []))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)

        names = args.node_names or {}
        # Where the platform labels its own nodes (CoreWeave), Railyard has no resource per node:
        # its nodes come and go with the autoscaler, and the pool's labels are on its NodePool.
        self.nodes = [] if plan.platform_topology else [
            self._node(name, n, names.get(n.name, n.name), args.registers_nodes, self._cordon(plan, n, args), child)
            for n in plan.nodes]
        self.kueue_release: pulumi.Resource | None = None
        if args.kueue_chart is not None:
            c = args.kueue_chart
            self.kueue_release = k8s.helm.v3.Release(
                f"{name}-kueue", chart=c["chart"], version=c["version"], namespace=c["namespace"],
                create_namespace=True, repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=c["repository"]),
                # A Release waits for its workloads to be ready (skipAwait unset), so Kueue's webhooks
                # answer before any of its objects below is applied.
                opts=child)

        # Kueue keeps a ClusterQueue, a ResourceFlavor and a Topology while anything uses them (a
        # finalizer), so they are made in dependency order and deleted in reverse: each tenant's
        # namespace after its ClusterQueue, so that destroy deletes the namespace first, which
        # ends the jobs Kueue admitted, and then the queue, the flavors and the topology go.
        kueue: dict[str, pulumi.Resource] = {}
        self.namespaces: dict[str, pulumi.Resource] = {}
        cq_of_ns = {o["spec"]["clusterQueue"]: o["metadata"]["namespace"] for o in plan.kueue
                    if o["kind"] == "LocalQueue"}
        for obj in plan.kueue:
            kind, meta = obj["kind"], obj["metadata"]
            after: list[pulumi.Resource] = [self.kueue_release] if self.kueue_release is not None else []
            if kind == "ResourceFlavor":
                after += [r for key, r in kueue.items() if key.startswith("Topology/")]
            elif kind == "ClusterQueue":
                after += [r for key, r in kueue.items() if key.startswith("ResourceFlavor/")]
            elif kind == "LocalQueue":
                after += [kueue[f"ClusterQueue/{obj['spec']['clusterQueue']}"], *self._ns(meta)]
            kueue[f"{kind}/{meta['name']}"] = self._custom(name, obj, child, after)
            if kind == "ClusterQueue":
                ns = cq_of_ns[meta["name"]]
                self.namespaces[ns] = k8s.core.v1.Namespace(
                    f"{name}-ns-{ns}", metadata={"name": ns},
                    opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[kueue[f"{kind}/{meta['name']}"]])))
        self.kueue = list(kueue.values())
        self.sriov = [self._custom(name, obj, child, []) for obj in plan.sriov_policies + plan.sriov_networks]
        self.network_attachments = [self._custom(name, obj, child, self._ns(obj["metadata"]))
                                    for obj in (plan.network_attachments if args.renders_networks else [])]
        self.summary = plan.summary()
        self.register_outputs({"summary": self.summary})

    def _ns(self, meta: dict[str, Any]) -> list[pulumi.Resource]:
        ns = self.namespaces.get(meta.get("namespace", ""))
        return [ns] if ns is not None else []

    def _custom(self, name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions,
                after: list[pulumi.Resource]) -> pulumi.Resource:
        meta = obj["metadata"]
        rname = f"{name}-{obj['kind'].lower()}-{meta.get('namespace', '') + '-' if meta.get('namespace') else ''}{meta['name']}"
        extra = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "spec")}
        return pulumi.CustomResource(
            f"kubernetes:{_group_version(obj['apiVersion'])}:{obj['kind']}", rname,
            {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta, "spec": obj.get("spec"), **extra},
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=after)))

    @staticmethod
    def _cordon(plan: KubernetesPlan, node: KubeNode, args: KubernetesLayerArgs) -> tuple[Any, Any]:
        """(spec, annotations) as Outputs of acceptance's verdict; (None, {}) where nothing can
        cordon the node, so that its inputs stay what they were before cordoning existed."""
        if args.cordoned is None:
            return None, {}
        both = args.cordoned.apply(lambda c: plan.cordon(node, c or {}))
        return both.apply(lambda b: b[0]), both.apply(lambda b: b[1])

    def _node(self, name: str, node: KubeNode, node_name: str, registers: bool, cordon: tuple[Any, Any],
              opts: pulumi.ResourceOptions) -> pulumi.Resource:
        spec, cordon_annotations = cordon

        def annotations(base: dict[str, str]) -> Any:
            return pulumi.Output.from_input(cordon_annotations).apply(lambda a: {**base, **a}) if spec is not None \
                else base

        if not registers:
            # The kubelet owns kubernetes.io/hostname (and everything else of its Node).
            labels = {k: v for k, v in node.labels.items() if k != HOSTNAME}
            return k8s.core.v1.NodePatch(
                f"{name}-node-{node.name}",
                metadata={"name": node_name, "labels": labels,
                          "annotations": annotations({"pulumi.com/patchFieldManager": FIELD_MANAGER})},
                # No spec at all for a node that passed, as before cordoning existed.
                spec=spec.apply(lambda s: s or None) if spec is not None else None, opts=opts)
        # A Node as a kubelet registers it: the API server keeps the status of a Node that is
        # created, which is how kwok's nodes get their capacity (core/v1 Node takes no status).
        return pulumi.CustomResource(
            "kubernetes:core/v1:Node", f"{name}-node-{node.name}",
            {"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": node.name, "labels": node.labels,
                          "annotations": annotations(KWOK_ANNOTATION)},
             "spec": {} if spec is None else spec, "status": {"capacity": node.capacity, "allocatable": node.allocatable}},
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                # Capacity is status, which an apply after create does not change: a new capacity
                # registers the node again.
                replace_on_changes=["status"], delete_before_replace=True)))


def _group_version(api_version: str) -> str:
    """pulumi-kubernetes' type token part: `v1` is `core/v1`."""
    return "core/v1" if api_version == "v1" else api_version
