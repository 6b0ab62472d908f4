"""HostMachine's provider semantics, with discovery stood in (the real thing runs in
tests/lab/test_hosts_machine.py): what a change of input does, trust on first use kept, refresh."""

from __future__ import annotations

import pytest

from railyard.drivers.hosts import resources
from railyard.dynamic import one_value
from railyard.remote.ssh import SshError

PROPS = {"stack": "s", "node": "gpu-0", "address": "192.0.2.11", "user": "root", "port": 22, "jump": None,
         "host_keys": [], "sku": "dgx-h100", "fabric": None, "speed_gbps": None, "private_key": "k",
         "host_key": None, "facts": None}


@pytest.fixture
def seen(monkeypatch):
    calls = []

    def discover(props):
        calls.append(dict(props))
        return {"host_key": props.get("host_key") or "ssh-ed25519 AAAAlearned", "facts": {"gpus": [], "nics": []}}

    monkeypatch.setattr(resources, "discover", discover)
    return calls


def test_a_changed_address_or_key_is_a_new_discovery_never_a_replace():
    provider = resources.HostMachineProvider()
    assert not provider.diff("id", PROPS, dict(PROPS)).changes
    for key, value in (("address", "192.0.2.12"), ("private_key", "k2"), ("sku", "hgx-h100")):
        diff = provider.diff("id", PROPS, {**PROPS, key: value})
        assert diff.changes and not diff.replaces, key


def test_trust_on_first_use_pins_the_learned_key_for_the_next_discovery(seen, monkeypatch):
    monkeypatch.setattr(resources, "discover_and_check", lambda props: resources.discover(props))
    provider = resources.HostMachineProvider()
    olds = {**PROPS, "host_key": "ssh-ed25519 AAAAfirst"}
    provider.update("id", olds, {**PROPS, "address": "192.0.2.11"})
    assert seen[-1]["host_key"] == "ssh-ed25519 AAAAfirst"  # the key seen first is the one required
    provider.update("id", olds, {**PROPS, "host_keys": ["ssh-ed25519 AAAApinned"]})
    assert seen[-1]["host_key"] is None  # a pinned key replaces what was learned


def test_refresh_records_what_the_host_has_and_keeps_the_last_seen_when_it_is_down(seen, monkeypatch):
    provider = resources.HostMachineProvider()
    olds = {**PROPS, "host_key": "ssh-ed25519 AAAAfirst", "facts": {"gpus": ["old"]}}
    # One string in state, not the facts' thousand values.
    assert provider.read("id", olds).outs["facts"] == '{"gpus":[],"nics":[]}'

    def down(props):
        raise SshError("gpu-0: cannot reach root@192.0.2.11")

    monkeypatch.setattr(resources, "discover", down)
    assert provider.read("id", olds).outs == olds


def test_a_refresh_soon_after_lldpd_started_records_the_neighbours_without_their_age(monkeypatch):
    """read()'s `listening_s` says a young lldpd may not have heard every rail yet: verify needs it
    live, but in state it would make each refresh of lldpd's first seconds a change of the facts."""
    heard = {"neighbours": {"ibp64s0": [{"system": "su0-leaf1", "chassis_id": None, "port": "swp1s0",
                                         "port_type": "local"}]}, "system": "gpu-0"}
    for age in (4, 20):
        monkeypatch.setattr(resources, "discover", lambda props, age=age: {
            "host_key": "k", "facts": {"gpus": [], "lldp": {**heard, "listening_s": age}}})
        outs = resources.HostMachineProvider().read("id", {**PROPS, "fabric": "roce"}).outs
        assert outs["facts"] == one_value({"gpus": [], "lldp": heard})


def test_discovery_reads_lldp_on_a_roce_fabric_only_as_the_plan_says(monkeypatch):
    """The hosts' refresh and the plan's verify agree on which fabrics are cabled by LLDP: a host
    of an InfiniBand fabric, or one recorded before its fabric was, is never asked for lldpctl."""
    from railyard.drivers.hosts import remote
    from railyard.model.fabric import cabled_by_lldp

    asked = {}

    def host_facts(target, *, private_key, lldp):
        asked[target.address] = lldp
        return {"gpus": []}, type("Result", (), {"host_key": "k"})()

    monkeypatch.setattr(remote, "host_facts", host_facts)
    for n, fabric in enumerate(("roce", "infiniband", None)):
        resources.discover({**PROPS, "address": f"192.0.2.{20 + n}", "fabric": fabric})
        assert asked[f"192.0.2.{20 + n}"] is cabled_by_lldp(fabric) is (fabric == "roce"), fabric


def test_a_host_whose_pci_bus_could_not_be_read_is_refused(monkeypatch):
    monkeypatch.setattr(resources, "discover", lambda props: {"host_key": "k", "facts": {
        "gpus": None, "nics": None, "notes": ["/sys/bus/pci: no such directory"]}})
    with pytest.raises(RuntimeError, match="gpu-0: discovery saw no gpus and no nics .*no such directory"):
        resources.discover_and_check(PROPS)


def test_drift_is_read_from_the_facts_in_either_layout_state_holds(monkeypatch):
    from railyard.model import hardware_check

    seen = []
    monkeypatch.setattr(hardware_check, "check", lambda node, facts, sku, **kw: seen.append(facts) or ["a GPU short"])
    facts = {"gpus": [{"bdf": "0000:18:00.0"}], "nics": []}
    # A string, as state holds it now; a mapping, as a stack written before holds it.
    assert resources.drifted({**PROPS, "facts": '{"gpus":[{"bdf":"0000:18:00.0"}],"nics":[]}'})
    assert resources.drifted({**PROPS, "facts": facts})
    assert seen == [facts, facts]
