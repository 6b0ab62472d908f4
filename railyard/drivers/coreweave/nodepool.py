"""A pool's CoreWeave NodePool custom resource (compute.coreweave.com/v1alpha1), Pulumi-free:
what the driver applies to the CKS cluster and what the lab's API server judges in the tests.

Per pool, never per node: CKS makes and replaces the nodes (and the autoscaler adds and removes
them), so Pulumi knows the pool, not its machines. The labels are the Kubernetes layer's per-pool
labels (railyard.model.kubernetes: SKU, pool, fabric kind and speed) and the stack's own; a node's
place in the fabric is CoreWeave's own labels, which Kueue's Topology reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from railyard.drivers.coreweave.config import CoreWeaveConfig
from railyard.model.kubernetes import object_prefix
from railyard.model.kubernetes.nodes import pool_labels
from railyard.model.spec.types import DEFAULT_LABEL_PREFIX

if TYPE_CHECKING:
    from railyard.model.plan import Plan


API_VERSION = "compute.coreweave.com/v1alpha1"
KIND = "NodePool"
REPLACE_ON_CHANGES = ["spec.instanceType"]
"""CKS refuses a change of instanceType (immutable): a new one replaces the pool."""


def resource_options(manifest: dict[str, Any]) -> dict[str, Any]:
    """How Pulumi treats the pool's changes: a new instanceType replaces it, deleted first (the
    new one has the same name); an autoscaled pool's targetNodes is the autoscaler's to move, so
    an `up` neither resets it nor shows its moves as drift."""
    out: dict[str, Any] = {"replace_on_changes": REPLACE_ON_CHANGES, "delete_before_replace": True}
    if manifest["spec"].get("autoscaling"):
        out["ignore_changes"] = ["spec.targetNodes"]
    return out


def name(stack: str, pool: str) -> str:
    """Cluster-scoped, so named after the stack like the layer's other objects."""
    return f"{object_prefix(stack)}-{pool}"


def manifest(plan: Plan, config: CoreWeaveConfig, pool: str) -> dict[str, Any]:
    spec = plan.spec
    pc = config.pool(pool)
    prefix = spec.kubernetes.label_prefix if spec.kubernetes is not None else DEFAULT_LABEL_PREFIX
    body: dict[str, Any] = {
        "instanceType": pc.instance_type,
        "targetNodes": spec.pool(pool).count,
        "autoscaling": pc.autoscaling,
        "nodeLabels": {**pool_labels(plan, prefix, pool), **pc.labels},
    }
    if pc.autoscaling:
        body["minNodes"], body["maxNodes"] = pc.min_nodes, pc.max_nodes
    if pc.taints:
        body["nodeTaints"] = [t.manifest() for t in pc.taints]
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": name(spec.stack, pool),
                         "labels": {f"{prefix}/stack": object_prefix(spec.stack), f"{prefix}/region": spec.region}},
            "spec": body}
