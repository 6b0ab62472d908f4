"""The checkpoint the engine section's preview with state imports, built from canned previews and
a canned gRPC log (no engine run)."""

from __future__ import annotations

import base64
import json
import pickle

import pytest

from railyard.bench import bench_engine, stack_state
from railyard.bench.stack_state import BLINDED, SECRET_SIG, SIG_KEY, UNKNOWN

# __provider inputs as a preview of the lab stack shows them: pickles of the classes by reference.
ACCESS = "gASVOwAAAAAAAACMHnJhaWx5YXJkLmRyaXZlcnMubGFiLnJlc291cmNlc5SMEUFjY2Vzc0tleVByb3ZpZGVylJOUKYGULg=="
NODE = "gASVNgAAAAAAAACMHnJhaWx5YXJkLmRyaXZlcnMubGFiLnJlc291cmNlc5SMDE5vZGVQcm92aWRlcpSTlCmBlC4="
TUNING = "gASVMgAAAAAAAACMGHJhaWx5YXJkLnR1bmluZy5yZXNvdXJjZZSMDlR1bmluZ1Byb3ZpZGVylJOUKYGULg=="

P = "urn:pulumi:s::railyard::"
STACK = f"{P}pulumi:pulumi:Stack::railyard-s"
CLUSTER = f"{P}railyard:index:Cluster::s"
ACCESS_URN = f"{P}railyard:index:Cluster$pulumi-python:dynamic:Resource::s-access"
NODE_URN = f"{P}railyard:index:Cluster$pulumi-python:dynamic:Resource::gpu-0-host"
TUNING_URN = f"{P}railyard:index:Cluster$pulumi-python:dynamic:Resource::s-tuning-run"
PROVIDER = f"{P}pulumi:providers:pulumi-python::default"
CONFIG = {"railyard:driver": "lab", "railyard:nodePools": '[{"count":1,"name":"gpu","sku":"dgx-h100"}]'}


def _step(urn, type_, parent=None, inputs=None, **extra):
    new = {"urn": urn, "custom": inputs is not None, "type": type_, **extra}
    if parent:
        new["parent"] = parent
    if inputs is not None:
        new["inputs"] = inputs
        new["provider"] = f"{PROVIDER}::{UNKNOWN}"
    return {"op": "create", "urn": urn, "newState": new}


def fresh_preview() -> dict:
    """A fresh stack's preview: a component, an access key, a node reading the key's output, and a
    tuning run whose provider and key are secrets; listed out of dependency order."""
    dyn = "pulumi-python:dynamic:Resource"
    return {"config": CONFIG, "changeSummary": {"create": 5}, "steps": [
        _step(STACK, "pulumi:pulumi:Stack"),
        _step(TUNING_URN, dyn, CLUSTER, {"__provider": BLINDED, "stack": "s", "hosts": UNKNOWN, "private_key": BLINDED},
              dependencies=[NODE_URN, ACCESS_URN]),
        _step(NODE_URN, dyn, CLUSTER, {"__provider": NODE, "stack": "s", "node": "gpu-0", "authorized_key": UNKNOWN,
                                       "spec": json.dumps({"sku": "dgx-h100", "mgmt": {"address": "198.18.64.2/20"},
                                                           "cache": {"mount": "/mnt/cache"}})},
              dependencies=[ACCESS_URN], propertyDependencies={"authorized_key": [ACCESS_URN], "node": []}),
        _step(CLUSTER, "railyard:index:Cluster", STACK),
        _step(ACCESS_URN, dyn, CLUSTER, {"__provider": ACCESS, "comment": "railyard-s"},
              additionalSecretOutputs=["private_key"]),
    ]}


BASE = {"version": 3, "deployment": {
    "manifest": {"time": "2026-12-01T00:00:00Z", "magic": "m", "version": "v3.274.1"},
    "secrets_providers": {"type": "passphrase", "state": {"salt": "v1:x"}}, "metadata": {}}}


def _wire_secret(value):
    return {SIG_KEY: SECRET_SIG, "value": value}


def grpc_log(tmp_path):
    """RegisterResource entries of a second preview, as PULUMI_DEBUG_GRPC writes them, between
    calls of other methods."""
    key = "ssh-ed25519 AAAAC3 railyard-s"
    entries = [
        {"method": "/pulumirpc.ResourceMonitor/SupportsFeature", "request": {"id": "secrets"}, "response": {}},
        {"method": "/pulumirpc.ResourceMonitor/RegisterResource",
         "request": {"type": "pulumi-python:dynamic:Resource", "name": "gpu-0-host",
                     "object": {"__provider": NODE, "stack": "s", "node": "gpu-0", "authorized_key": key,
                                "spec": {"sku": "dgx-h100", "mgmt": {"address": "198.18.64.2/20"}}, "host_key": None}},
         "response": {"urn": NODE_URN, "id": "bench-gpu-0-host"}},
        {"method": "/pulumirpc.ResourceMonitor/RegisterResource",
         "request": {"object": {"__provider": _wire_secret(TUNING), "stack": "s",
                                "hosts": {"gpu-0": {"address": "198.18.64.2", "vars": {"hugepages_total": 512}}},
                                "private_key": _wire_secret("-----BEGIN-----")}},
         "response": {"urn": TUNING_URN}},
        {"method": "/pulumirpc.ResourceProvider/Diff", "request": {"urn": NODE_URN}, "response": {"changes": 1}},
    ]
    path = tmp_path / "grpc.log"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def _by_urn(checkpoint):
    return {r["urn"]: r for r in checkpoint["deployment"]["resources"]}


def test_every_planned_resource_is_in_the_checkpoint_with_its_parent_provider_and_dependencies():
    cp = stack_state.checkpoint(fresh_preview(), BASE)
    assert cp["version"] == 3
    assert cp["deployment"]["manifest"] == BASE["deployment"]["manifest"]
    assert cp["deployment"]["secrets_providers"] == BASE["deployment"]["secrets_providers"]
    res = _by_urn(cp)
    assert set(res) == {STACK, CLUSTER, ACCESS_URN, NODE_URN, TUNING_URN, PROVIDER}
    provider = res[PROVIDER]
    assert provider["custom"] and provider["type"] == "pulumi:providers:pulumi-python"
    assert provider["inputs"] == CONFIG, "a default provider's inputs are the stack's config"
    for urn in (ACCESS_URN, NODE_URN, TUNING_URN):
        assert res[urn]["provider"] == f"{PROVIDER}::{provider['id']}", urn
        assert res[urn]["parent"] == CLUSTER and res[urn]["custom"] and res[urn]["id"], urn
    assert res[CLUSTER]["parent"] == STACK and not res[CLUSTER]["custom"] and "inputs" not in res[CLUSTER]
    assert res[NODE_URN]["dependencies"] == [ACCESS_URN]
    assert res[NODE_URN]["propertyDependencies"] == {"authorized_key": [ACCESS_URN], "node": []}
    assert res[TUNING_URN]["dependencies"] == [NODE_URN, ACCESS_URN]


def test_resources_come_after_their_parent_provider_and_dependencies():
    order = [r["urn"] for r in stack_state.checkpoint(fresh_preview(), BASE)["deployment"]["resources"]]
    assert order[0] == STACK
    for before, after in [(STACK, CLUSTER), (CLUSTER, ACCESS_URN), (PROVIDER, ACCESS_URN), (ACCESS_URN, NODE_URN),
                          (NODE_URN, TUNING_URN)]:
        assert order.index(before) < order.index(after), f"{after} comes before {before}"


def test_outputs_are_the_inputs_plus_what_the_lab_provider_creates():
    res = _by_urn(stack_state.checkpoint(fresh_preview(), BASE))
    node = res[NODE_URN]
    assert node["outputs"]["spec"] == node["inputs"]["spec"] and node["outputs"]["__provider"] == NODE
    # Its spec (one JSON string, issue 18) asks for a cache, so the cache's device is an output.
    assert node["outputs"]["cache_device"] == "/dev/loop0"
    kind, blob = node["outputs"]["host_key"].split()
    raw = base64.b64decode(blob)
    assert kind == "ssh-ed25519" and raw[4:15] == b"ssh-ed25519" and len(raw) == 4 + 11 + 4 + 32
    access = res[ACCESS_URN]["outputs"]
    assert access["public_key"].startswith("ssh-ed25519 ") and access["public_key"].endswith(" railyard-s")
    # additionalSecretOutputs: the private key is a secret, in the form stack import encrypts.
    assert access["private_key"][SIG_KEY] == SECRET_SIG
    assert json.loads(access["private_key"]["plaintext"]).startswith("-----BEGIN OPENSSH PRIVATE KEY-----")


def test_inputs_the_fresh_preview_cannot_show_are_left_out_for_the_next_round():
    res = _by_urn(stack_state.checkpoint(fresh_preview(), BASE))
    assert "authorized_key" not in res[NODE_URN]["inputs"], "an unknown is never written as a value"
    tuning = res[TUNING_URN]
    assert tuning["inputs"] == {"stack": "s"}, "blinded secrets and unknowns are left out"
    assert tuning["outputs"] == {"stack": "s"}, "a provider that cannot be read yet adds no outputs"


def test_registered_inputs_are_read_from_the_grpc_log_with_secrets_in_plaintext_form(tmp_path):
    registered = stack_state.registered_inputs(grpc_log(tmp_path))
    assert set(registered) == {NODE_URN, TUNING_URN}
    tuning = registered[TUNING_URN]
    assert tuning["__provider"] == {SIG_KEY: SECRET_SIG, "plaintext": json.dumps(TUNING)}
    assert tuning["hosts"]["gpu-0"]["vars"] == {"hugepages_total": 512}
    assert stack_state.unwrap(tuning)["private_key"] == "-----BEGIN-----"


def test_a_settled_round_takes_the_registered_inputs_and_its_providers_outputs(tmp_path):
    registered = stack_state.registered_inputs(grpc_log(tmp_path))
    res = _by_urn(stack_state.checkpoint(fresh_preview(), BASE, registered))
    node = res[NODE_URN]
    assert node["inputs"]["authorized_key"] == "ssh-ed25519 AAAAC3 railyard-s"
    assert "host_key" not in node["inputs"], "a None input is what the program leaves to the provider"
    assert node["outputs"]["host_key"].startswith("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI")
    tuning = res[TUNING_URN]
    assert tuning["outputs"]["private_key"] == tuning["inputs"]["private_key"], "a secret input stays secret"
    assert tuning["outputs"]["changed"] == 0 and tuning["outputs"]["last_run"]
    # Not registered this round: the fresh preview's inputs.
    assert res[ACCESS_URN]["inputs"] == {"__provider": ACCESS, "comment": "railyard-s"}


class MysteryProvider:
    pass


def test_a_registered_provider_whose_outputs_are_not_known_is_refused():
    pickled = base64.b64encode(pickle.dumps(MysteryProvider(), protocol=4)).decode()
    assert stack_state.provider_class(pickled) == "MysteryProvider"
    with pytest.raises(stack_state.CheckpointError, match="knows no outputs of MysteryProvider"):
        stack_state.outputs_for(NODE_URN, {"__provider": pickled})
    assert stack_state.outputs_for(NODE_URN, {"__provider": pickled}, strict=False) == {"__provider": pickled}


def test_the_provider_class_is_read_from_the_pickle_without_importing_it():
    assert stack_state.provider_class(NODE) == "NodeProvider"
    assert stack_state.provider_class(TUNING) == "TuningProvider"
    for unreadable in (BLINDED, UNKNOWN, "not base64!", None):
        assert stack_state.provider_class(unreadable) is None


def test_changes_are_read_from_the_change_summary_since_a_preview_lists_no_unchanged_step():
    settled = {"steps": [{"op": "same", "urn": STACK}], "changeSummary": {"same": 36}}
    assert stack_state.plan_counts(settled) == {"same": 36}
    assert stack_state.changes(settled) == []
    listed = {"steps": [{"op": "same", "urn": STACK}, {"op": "update", "urn": TUNING_URN}],
              "changeSummary": {"same": 35, "update": 1}}
    assert stack_state.changes(listed) == [f"update {TUNING_URN}"]
    assert stack_state.changes({"steps": [], "changeSummary": {"same": 1, "delete": 2}}) == ["2 more in the change summary"]


def test_the_state_sizes_are_a_factor_of_two_apart_so_linear_growth_is_two():
    small, large, site = bench_engine.STATE_SIZES
    assert large == 2 * small and round(bench_engine.GROWTH_SLACK * large / small, 2) == 2.2
    # Both of the fresh preview's sizes have a preview with state beside its baseline with state.
    assert set(bench_engine.STATE_SIZES) & set(bench_engine.SIZES) == {448, site} == set(bench_engine.TARGET_STATE_RATIO)


def test_a_baseline_resource_holds_a_resource_of_the_stacks_inputs_without_its_secrets_or_provider():
    secret = stack_state.secret("-----BEGIN OPENSSH PRIVATE KEY-----")
    export = {"deployment": {"resources": [
        {"urn": "u0", "custom": False, "type": "pulumi:pulumi:Stack"},
        {"urn": "u1", "custom": True, "type": "pulumi:providers:pulumi-python", "inputs": {"a": 1}},
        {"urn": "u2", "custom": True, "type": "pulumi-python:dynamic:Node",
         "inputs": {"__provider": "pickle", "spec": {"rails": [1, 2]}, "key": secret}},
        {"urn": "u3", "custom": False, "type": "railyard:index:HgxNode"},
    ]}}
    held, component = stack_state.payloads(export)
    assert component == {}  # one baseline resource per resource of the stack, components holding nothing
    assert set(held) == {"spec", "key"} and held["spec"] == {"rails": [1, 2]}
    # As large as the secret's record in state, and not a secret any more (nor the key itself).
    assert held["key"] == "s" * len(json.dumps(secret)) and not stack_state.is_secret(held["key"])
