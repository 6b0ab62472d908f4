"""The Kubernetes layer's wiring under Pulumi mocks: what it makes for a cluster of Railyard's own
(kwok Nodes with capacity, rendered attachments) and for one that owns its nodes (a NodePatch under
Railyard's field manager, labels only). tests/lab/test_lab_kubernetes.py runs it on a real API server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pulumi
import pytest

from railyard.stack import load

ROOT = Path(__file__).resolve().parents[3]


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def build(registers: bool):
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack="lab-k8s", preview=False)
    from components.kubernetes import KubernetesLayer, KubernetesLayerArgs

    _, plan = load(ROOT / "stacks" / "Pulumi.lab-k8s.yaml")
    KubernetesLayer("c-kubernetes", KubernetesLayerArgs(plan=plan.kubernetes, kubeconfig=pulumi.Output.secret("kc"),
                                                        registers_nodes=registers, renders_networks=registers))
    asyncio.get_event_loop().run_until_complete(pulumi.runtime.stack.wait_for_rpcs())
    monitor = pulumi.runtime.settings.get_monitor()
    return {u: monitor.resources[u].state for u in monitor.resources}, plan


def by_type(state: dict, suffix: str) -> list[dict]:
    return [s for u, s in state.items() if u.split("::")[2].rsplit("$", 1)[-1] == suffix]


@pytest.mark.parametrize("registers", [True, False])
def test_one_node_object_per_node_and_the_rest_per_pool_rail_or_tenant(registers):
    state, plan = build(registers)
    node_type = "kubernetes:core/v1:Node" if registers else "kubernetes:core/v1:NodePatch"
    nodes = by_type(state, node_type)
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(n.name for n in plan.nodes)
    gpu5 = next(n for n in nodes if n["metadata"]["name"] == "gpu-5")
    assert gpu5["metadata"]["labels"]["railyard.io/su"] == "gpu-su1"
    if registers:
        assert gpu5["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
        assert gpu5["status"]["capacity"]["nvidia.com/gpu"] == "8"
    else:
        # the kubelet owns the Node: only labels, under Railyard's own field manager
        assert gpu5["metadata"]["annotations"] == {"pulumi.com/patchFieldManager": "railyard"}
        assert "status" not in gpu5 and "spec" not in gpu5
    k8s = plan.kubernetes
    assert len(by_type(state, "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")) == 2
    assert len(by_type(state, "kubernetes:core/v1:Namespace")) == len(k8s.namespaces) == 2
    assert len(by_type(state, "kubernetes:sriovnetwork.openshift.io/v1:SriovNetworkNodePolicy")) == 8
    assert len(by_type(state, "kubernetes:sriovnetwork.openshift.io/v1:SriovIBNetwork")) == 16
    nads = by_type(state, "kubernetes:k8s.cni.cncf.io/v1:NetworkAttachmentDefinition")
    assert len(nads) == (16 if registers else 0)  # where an operator runs, it renders them itself
    providers = by_type(state, "pulumi:providers:kubernetes")
    assert len(providers) == 1 and providers[0]["enableServerSideApply"] in (True, "true")


def build_cordoned(registers: bool, cordoned: dict[str, str]):
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack="lab-k8s", preview=False)
    from components.kubernetes import KubernetesLayer, KubernetesLayerArgs

    _, plan = load(ROOT / "stacks" / "Pulumi.lab-k8s.yaml")
    KubernetesLayer("c-kubernetes", KubernetesLayerArgs(plan=plan.kubernetes, kubeconfig=pulumi.Output.secret("kc"),
                                                        registers_nodes=registers, renders_networks=registers,
                                                        cordoned=pulumi.Output.from_input(cordoned)))
    asyncio.get_event_loop().run_until_complete(pulumi.runtime.stack.wait_for_rpcs())
    monitor = pulumi.runtime.settings.get_monitor()
    node_type = "kubernetes:core/v1:Node" if registers else "kubernetes:core/v1:NodePatch"
    return {s["metadata"]["name"]: s for u, s in ((u, monitor.resources[u].state) for u in monitor.resources)
            if u.split("::")[2].rsplit("$", 1)[-1] == node_type}


@pytest.mark.parametrize("registers", [True, False])
def test_a_node_acceptance_took_out_is_cordoned_with_its_reason_and_only_that_one(registers):
    reason = "railyard: acceptance: gpu-5 rail2: rail-mtu: no reply"
    nodes = build_cordoned(registers, {"gpu-5": reason})
    assert nodes["gpu-5"]["spec"] == {"unschedulable": True}
    assert nodes["gpu-5"]["metadata"]["annotations"]["railyard.io/cordon-reason"] == reason
    # The node's own annotations stay: kwok's, or the patch's field manager.
    kept = "kwok.x-k8s.io/node" if registers else "pulumi.com/patchFieldManager"
    assert kept in nodes["gpu-5"]["metadata"]["annotations"]
    # The others send no unschedulable field at all, which releases a cordon of an earlier run; a
    # patch of a Node the cluster owns sends no spec, as before cordoning existed.
    assert nodes["gpu-4"].get("spec") == ({} if registers else None)
    assert "railyard.io/cordon-reason" not in nodes["gpu-4"]["metadata"]["annotations"]
