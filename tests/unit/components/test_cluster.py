"""Component wiring under Pulumi mocks: resources per node and per rail, names, parents, secrets.

Mocks prove wiring only; tests/engine and tests/lab run the same program on the real engine.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pulumi
import pytest

from railyard.engine.state_types import is_dynamic
from railyard.model.plan import make_plan
from railyard.stack import load, load_stack_file
from railyard.dynamic import wire_numbers

ROOT = Path(__file__).resolve().parents[3]
CORDONED = "railyard: acceptance: gpu-0 rail2: rail-mtu: no reply"


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        outs = dict(args.inputs)
        if is_dynamic(args.typ):
            outs.update(host_key="ssh-ed25519 AAAAmock", public_key="ssh-ed25519 AAAAmockpub",
                        private_key="-----BEGIN OPENSSH PRIVATE KEY-----mock")
        if args.name.endswith("-acceptance-run"):
            outs["cordoned"] = {"gpu-0": CORDONED}  # as a run that took gpu-0 out
        return f"{args.name}-id", outs

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def build(stack: str, path: Path | None = None):
    """Run the program's wiring for a shipped stack (or the stack file at `path`) under mocks;
    returns (urns, inputs by name, cluster, plan)."""
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack=stack, preview=False)
    from components.cluster import Cluster, ClusterArgs
    from railyard.drivers.base import load_driver

    spec, plan = load(path or ROOT / "stacks" / f"Pulumi.{stack}.yaml")  # as the program loads it
    cluster = Cluster(spec.stack, ClusterArgs(spec=spec, plan=plan), load_driver(spec, plan))
    inventory = _resolve(cluster.inventory)
    # The inventory resolves with the nodes' host keys, before resources that wait on the nodes
    # (their storage) have registered: let every registration finish before listing them.
    asyncio.get_event_loop().run_until_complete(pulumi.runtime.stack.wait_for_rpcs())
    monitor = pulumi.runtime.settings.get_monitor()
    urns = list(monitor.resources)
    return urns, {u.rsplit("::", 1)[1]: monitor.resources[u].state for u in urns}, cluster, plan, inventory


def spec_of(inputs: dict) -> dict:
    """A lab node's settings: one JSON string on the wire (issue 18), never a mapping of values."""
    assert isinstance(inputs["spec"], str), "a node's spec is one string value"
    return json.loads(inputs["spec"])


def _resolve(output):
    fut = asyncio.get_event_loop().create_future()
    output.apply(lambda v: fut.set_result(v) if not fut.done() else None)
    return asyncio.get_event_loop().run_until_complete(fut)


@pytest.fixture(scope="module")
def lab():
    return build("lab")


def test_one_lab_node_resource_per_planned_node_named_after_the_node(lab):
    urns, state, _, plan, _ = lab
    hosts = [u for u in urns if u.endswith("-host")]
    assert sorted(spec_of(state[u.rsplit("::", 1)[1]])["node"] for u in hosts) == sorted(n.name for n in plan.nodes)


def test_node_resources_are_parented_cluster_pool_node(lab):
    urns, *_ = lab
    # A mock URN qualifies a type with its parent's type only, so check each level.
    parent_of = {u.rsplit("::", 1)[1]: u.split("::")[2] for u in urns}
    assert parent_of["gpu-0-host"] == "railyard:index:HgxNode$pulumi-python:dynamic/lab:Node"
    assert parent_of["gpu-0"] == "railyard:index:NodePool$railyard:index:HgxNode"
    assert parent_of["lab-gpu"] == "railyard:index:Cluster$railyard:index:NodePool"


def test_every_rail_nic_carries_its_sku_netdev_name_address_and_gateway(lab):
    _, state, _, plan, _ = lab
    rails = spec_of(state["gpu-0-host"])["rails"]
    node = plan.node("gpu", 0)
    assert [r["rail"] for r in rails] == list(range(8))
    # dgx-h100 names from the catalog (Table 6): rail 0 is mlx5_0 = ibp24s0, rail 1 mlx5_3 = ibp64s0.
    assert (rails[0]["name"], rails[1]["name"]) == ("ibp24s0", "ibp64s0")
    assert [r["address"] for r in rails] == [f"{n.ip}/{n.prefixlen}" for n in node.nics]
    assert rails[0]["gateway"] == "198.19.0.1" and rails[7]["gateway"] == "198.19.224.1"


def test_a_spine_resource_exists_because_the_plan_has_spines(lab):
    urns, state, *_ = lab
    assert any(u.endswith("::lab-fabric-net-spine") for u in urns)
    assert len(state["lab-fabric-net-spine"]["gateways"]) == 8


def test_inventory_lists_every_node_with_address_and_host_key(lab):
    *_, plan, inventory = lab
    assert [(n["name"], n["management_ip"]) for n in inventory] == [(n.name, n.management_ip) for n in plan.nodes]
    assert all(n["host_key"].startswith("ssh-ed25519 ") for n in inventory)


def test_the_private_key_output_is_secret(lab):
    _, _, cluster, _, _ = lab
    assert asyncio.get_event_loop().run_until_complete(cluster.access.private_key.is_secret())


def test_virtual_layout_puts_each_planned_vm_on_its_hypervisor_with_its_vfs():
    urns, state, _, plan, inventory = build("lab-virtual")
    parent_of = {u.rsplit("::", 1)[1]: u.split("::")[2] for u in urns}
    for node in plan.nodes:
        for vm in node.vms:
            assert parent_of[vm.name] == "railyard:index:HgxNode$railyard:index:VirtualMachine", vm.name
            guest = state[f"{vm.name}-guest"]
            assert guest["hypervisor"] == node.name
            assert [(v["pf"], v["rail"]) for v in guest["vfs"]] == [(v.pf, v.rail) for v in vm.vfs]
    listed = {n["name"]: [m["name"] for m in n["vms"]] for n in inventory}
    assert listed == {n.name: [vm.name for vm in n.vms] for n in plan.nodes}


def test_virtual_layout_tunes_its_guests_with_the_guest_playbook_and_keeps_their_domains():
    urns, state, cluster, plan, _ = build("lab-virtual")
    run = state[f"{plan.spec.stack}-guest-tuning-run"]
    vms = [vm for n in plan.nodes for vm in n.vms]
    assert run["playbook"] == "guest.yml"
    assert sorted(run["hosts"]) == sorted(vm.name for vm in vms)
    for vm in vms:
        host_vars = run["hosts"][vm.name]["vars"]
        _, sku = plan.guest(vm.name)
        # The guest's own VFs, by their names in the guest, and the pairing the guest's tree gives.
        assert host_vars["gpu_nic_affinity_compute_nics"] == [n.rdma for n in sku.nics]
        assert host_vars["verify_expected_pairing"] == sku.pairing()
        # The lab presents the guest topology: the VM's resource carries it.
        assert wire_numbers(state[f"{vm.name}-guest"]["guest"]["topology"]) == _no_nulls(plan.guest(vm.name)[0].to_json())
        assert run["artifacts"][f"domains/{vm.name}.xml"].startswith("<domain type='kvm'>")
    assert cluster.guest_tuning is not None


def _no_nulls(value):
    """As Pulumi's wire format carries a mapping: without its null values."""
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


def test_bare_metal_has_no_guest_tuning(lab):
    _, state, cluster, *_ = lab
    assert cluster.guest_tuning is None and not any(k.endswith("-guest-tuning-run") for k in state)


def test_storage_tiers_give_every_node_a_cache_and_the_stack_one_object_store(lab):
    urns, state, *_ = lab
    # The node's resource holds its cache and parallel-FS mount (issue 18): two resources a node.
    assert not any(u.endswith("-host-storage") for u in urns)
    for node in ("gpu-0", "gpu-1"):
        cache = spec_of(state[f"{node}-host"])["cache"]
        assert {k: cache[k] for k in ("mount", "fs", "raid")} == {"mount": "/mnt/cache", "fs": "xfs", "raid": "raid0"}
        assert spec_of(state[f"{node}-host"])["pfs_mount"] == "/mnt/pfs" and cache["drives"] >= 1
    # Under each HgxNode one resource, the node's (a mock URN's type names its parent's type).
    assert sum(u.split("::")[2].startswith("railyard:index:HgxNode$") for u in urns) == 2
    assert state["lab-storage-tiers"]["bucket"] == "datasets"


@pytest.mark.parametrize("on_failure", ["fail", "cordon"])
def test_only_a_cordon_stack_hands_acceptance_its_kubernetes_layer_and_the_nodes_acceptances_verdict(
        on_failure, tmp_path):
    import yaml

    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.lab-k8s.yaml").read_text())
    doc["config"]["railyard:acceptance"] = {"onFailure": on_failure}
    f = tmp_path / "Pulumi.lab-k8s.yaml"
    f.write_text(yaml.safe_dump(doc))
    _, inputs, cluster, plan, _ = build("lab-k8s", f)
    run = next(v for k, v in inputs.items() if k.endswith("-acceptance-run"))
    gpu0, gpu1 = inputs["lab-k8s-kubernetes-node-gpu-0"], inputs["lab-k8s-kubernetes-node-gpu-1"]
    if on_failure == "fail":
        # As before cordoning existed: no new acceptance input, no Node spec waiting on its verdict.
        assert "kubernetes" not in run and gpu0["spec"] == gpu1["spec"] == {}
        assert "railyard.io/cordon-reason" not in gpu0["metadata"]["annotations"]
    else:
        # The run took gpu-0 out (the mock's verdict): its Node alone is cordoned, with the reason.
        assert run["kubernetes"] is True
        assert gpu0["spec"] == {"unschedulable": True} and gpu1["spec"] == {}
        assert gpu0["metadata"]["annotations"]["railyard.io/cordon-reason"] == CORDONED
