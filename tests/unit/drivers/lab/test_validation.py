"""The lab runtime refuses bad input and a missing root before it changes anything (no root needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from railyard.drivers.lab import fabric, gc, net, node
from railyard.drivers.lab.errors import LabError, NotRoot

MGMT = {"name": "eno3", "address": "198.18.0.11/24"}
ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def not_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


@pytest.mark.parametrize("call", [
    lambda: fabric.create_fabric("t", rails=1, mgmt_cidr="198.18.0.0/24", host_address="198.18.0.1"),
    lambda: fabric.create_spine("t", gateways=["198.19.0.1/24"]),
    lambda: fabric.delete_fabric("t"),
    lambda: node.create_node("t", "gpu-0", mgmt=MGMT, authorized_keys="ssh-ed25519 AAAA"),
    lambda: node.delete_node("t", "gpu-0"),
    lambda: gc.gc("t", ()),
    lambda: gc.destroy_all("t"),
])
def test_without_root_every_change_stops_at_once_saying_so(not_root, call):
    with pytest.raises(NotRoot, match="needs root"):
        call()


@pytest.mark.parametrize("cidr", ["10.0.0.5/24", "198.20.0.1/24", "198.18.0.0/24", "198.18.0.5", "fd00::1/64"])
def test_an_address_outside_the_lab_block_or_without_a_prefix_is_refused(cidr):
    with pytest.raises(LabError):
        net.lab_interface(cidr, "test")


def test_addresses_inside_the_lab_block_are_accepted():
    assert str(net.lab_interface("198.19.255.10/24", "test")) == "198.19.255.10/24"


@pytest.mark.parametrize("rails, compute, message", [
    ([{"name": "eno3", "rail": 0, "address": "198.19.0.11/24"}], None, "NIC name used twice"),
    ([{"name": "ibp24s0", "rail": 0, "address": "198.19.0.11/24"},
      {"name": "ibp64s0", "rail": 0, "address": "198.19.1.11/24"}], None, "rail used twice"),
    ([{"name": "ibp24s0", "rail": 0, "address": "198.19.0.11/24", "gateway": "198.19.1.1"}],
     "198.19.0.0/16", "not another address"),
    ([{"name": "ibp24s0", "rail": 0, "address": "198.19.0.11/24", "gateway": "198.19.0.1"}], None, "compute_cidr"),
    ([{"name": "ibp24s0", "address": "198.19.0.11/24"}], None, "integer 'rail'"),
    ([{"name": "a-name-far-too-long", "rail": 0, "address": "198.19.0.11/24"}], None, "interface name"),
])
def test_inconsistent_nics_are_refused_with_the_reason(rails, compute, message):
    with pytest.raises(LabError, match=message):
        node._parse_nics("t", "gpu-0", MGMT, rails, None, compute)


@pytest.mark.parametrize("stack, weed, control_plane", [("lab", True, False), ("lab-k8s", False, True),
                                                         ("lab-virtual", True, False)])
def test_an_up_builds_weed_only_for_an_object_tier_and_the_control_plane_only_for_kubernetes(
        monkeypatch, stack, weed, control_plane):
    # What the lab runs on this machine is built before the engine starts (issue 37): asked for here,
    # never half-way through an up, and never for a stack that does not run it.
    import copy

    import yaml

    from railyard.drivers.lab import rules as lab_rules
    from railyard.engine import control_plane as binaries
    from railyard.engine import toolchain
    from railyard.stack import from_config

    asked: list[str] = []
    monkeypatch.setattr(toolchain, "ensure_weed", lambda *a, **k: asked.append("weed"))
    monkeypatch.setattr(binaries, "ensure", lambda *a, **k: asked.append("control plane") or {})
    monkeypatch.setattr(binaries, "crd_files", lambda: {})
    monkeypatch.setattr(binaries, "kwok_module", lambda: None)
    config = copy.deepcopy(yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"])
    spec, _ = from_config(config, stack)
    assert lab_rules.prepare(spec) is None
    assert asked == ["weed"] * weed + ["control plane"] * control_plane
    config.setdefault("railyard:storage", {}).pop("object", None)
    asked.clear()
    assert lab_rules.prepare(from_config(config, stack)[0]) is None
    assert "weed" not in asked
