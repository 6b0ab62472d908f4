"""A lab node's settings travel as one JSON string (issue 18): the provider reads that layout and
the ones stacks written before hold, so a takeover plans no update and a real change still shows."""

from __future__ import annotations

import json

from railyard.drivers.lab.resources import NodeProvider, _flat, encode_spec

SPEC = {"stack": "lab", "node": "gpu-0", "sku": "dgx-h100", "mgmt": {"name": "mgmt0", "address": "198.18.64.2/20"},
        "rails": [{"name": "ibp24s0", "rail": 0, "address": "198.19.0.2/19", "gateway": "198.19.0.1", "mtu": 4092}],
        "storage": None, "compute_cidr": "198.19.0.0/16",
        "cache": {"mount": "/mnt/cache", "fs": "xfs", "raid": "raid0", "drives": 8, "size_gib": 1.0},
        "pfs_mount": "/mnt/pfs"}


def _wire(value):
    """What the engine hands a Python provider back from state: every number a float."""
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def test_equal_settings_are_one_string_whatever_the_key_order():
    shuffled = dict(reversed(list(SPEC.items())))
    assert encode_spec(shuffled) == encode_spec(SPEC) and json.loads(encode_spec(SPEC)) == SPEC


def test_every_layout_reads_as_the_same_settings():
    news = {"spec": encode_spec(SPEC), "authorized_key": "ssh-ed25519 AAAA"}
    as_mapping = {"spec": _wire(SPEC), "authorized_key": "ssh-ed25519 AAAA"}  # issue 18's first layout
    on_top = {**_wire({k: v for k, v in SPEC.items() if k not in ("cache", "pfs_mount")}),
              "authorized_key": "ssh-ed25519 AAAA"}  # before issue 18 (cache on a resource of its own)
    assert _flat(news)["rails"][0]["gateway"] == "198.19.0.1" and _flat(news)["node"] == "gpu-0"
    assert not NodeProvider().diff("id", as_mapping, news).changes
    # The older layout has no cache on the node: taking it over is that update and nothing else.
    diff = NodeProvider().diff("id", on_top, news)
    assert diff.changes and not diff.replaces


def test_a_changed_setting_inside_the_string_is_an_update_or_a_replace():
    moved = NodeProvider().diff("id", {"spec": encode_spec(SPEC)},
                                {"spec": encode_spec({**SPEC, "rails": [{**SPEC["rails"][0], "address": "198.19.0.9/19"}]})})
    assert moved.changes and not moved.replaces
    renamed = NodeProvider().diff("id", {"spec": encode_spec(SPEC)}, {"spec": encode_spec({**SPEC, "node": "gpu-9"})})
    assert renamed.replaces == ["node"]


def test_a_refresh_records_the_nodes_facts_and_keeps_the_last_ones_where_it_cannot_read_them(monkeypatch):
    import subprocess

    from railyard.drivers.lab import node, resources, storage

    props = {"spec": encode_spec(SPEC), "authorized_key": "ssh-ed25519 AAAA", "host_key": "ssh-ed25519 BBBB",
             "facts": '{"gpus":[{"bdf":"0000:18:00.0"}]}'}
    ran = []
    monkeypatch.setattr(node, "read_node", lambda stack, name: {"running": True, "host_key": "ssh-ed25519 BBBB"})
    monkeypatch.setattr(storage, "read_cache", lambda stack, name: {"mounted": True})

    def in_node(stack, name, argv, input=None, timeout=60):
        ran.append((stack, name, argv, "sysfs_discovery:host_facts" in (input or "")))
        return subprocess.CompletedProcess(argv, 0, 'noise\n{"gpus": []}\n', "")

    monkeypatch.setattr(node, "run_in_node", in_node)
    read = NodeProvider().read("id", props)
    # The program verify runs over SSH, run in the node: its answer is what state now holds.
    # One string in state, not a thousand values.
    assert ran == [("lab", "gpu-0", ["python3", "-I", "-S", "-"], True)] and read.outs["facts"] == '{"gpus":[]}'
    monkeypatch.setattr(node, "run_in_node", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "boom"))
    assert NodeProvider().read("id", props).outs["facts"] == props["facts"]
    # An update of the node's settings keeps what the last refresh saw.
    monkeypatch.setattr(resources.NodeProvider, "ensure", lambda self, flat: {"host_key": "ssh-ed25519 BBBB"})
    assert NodeProvider().update("id", props, {"spec": encode_spec(SPEC)}).outs["facts"] == props["facts"]


def test_a_node_of_an_ethernet_fabric_records_its_lldp_neighbours_and_an_older_node_plans_no_update(monkeypatch):
    """`lldp` asks the node's program for what its lldpd heard, as verify reads an Ethernet fabric's
    cabling; it changes nothing on the node, so a node made without it plans no update."""
    import subprocess

    from railyard.drivers.lab import node, storage

    asked = []
    monkeypatch.setattr(node, "read_node", lambda stack, name: {"running": True, "host_key": "ssh-ed25519 BBBB"})
    monkeypatch.setattr(storage, "read_cache", lambda stack, name: {"mounted": True})

    def in_node(stack, name, argv, input=None, timeout=60):
        asked.append(next(line for line in input.splitlines() if line.startswith("ARGS = ")))
        # A young lldpd: the age verify reads live is left out of state.
        return subprocess.CompletedProcess(argv, 0, '{"lldp": {"neighbours": {}, "listening_s": 3}}\n', "")

    monkeypatch.setattr(node, "run_in_node", in_node)
    roce = {"spec": encode_spec({**SPEC, "lldp": True}), "host_key": "ssh-ed25519 BBBB"}
    ib = {"spec": encode_spec(SPEC), "host_key": "ssh-ed25519 BBBB"}
    assert json.loads(NodeProvider().read("id", roce).outs["facts"]) == {"lldp": {"neighbours": {}}}
    NodeProvider().read("id", ib)
    assert asked == ["ARGS = ['/sys', '/proc', '/dev', True]", "ARGS = ['/sys', '/proc', '/dev', False]"]
    assert not NodeProvider().diff("id", ib, roce).changes
