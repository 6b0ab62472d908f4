"""railyard:hosts.switches: the Ethernet fabric's switches whose own LLDP tables `railyard verify`
reads over SSH, parsed into HostsConfig.switches, and every bad input refused at its path before
anything is reached."""

from __future__ import annotations

import pytest

from railyard.drivers.hosts.config import DEFAULT_LLDP_COMMAND, Switch

from .test_rules import H, config, hosts_config, key, problems

ROCE = {"kind": "roce", "speed": "400gbe", "switch": "sn5600", "cidr": "198.19.0.0/16", "asnBase": 4200000000,
        "oversubscription": 32}


def roce(**hosts_section) -> dict:
    cfg = config(**hosts_section)
    cfg["railyard:fabric"]["compute"] = dict(ROCE)
    return cfg


def switches(**section) -> dict:
    return {"hosts": {"gpu-su0-leaf0": {"address": "192.0.2.21", "hostKey": key(21)},
                      "spine0": {"address": "192.0.2.31", "hostKey": key(31)}}, **section}


def test_switches_take_the_sections_login_by_default_and_their_own_where_given():
    got = hosts_config(roce(switches=switches())).switches
    assert got is not None and (got.user, got.port, got.jump_host, got.command) == ("root", 22, None, DEFAULT_LLDP_COMMAND)
    assert got.hosts == (Switch("gpu-su0-leaf0", "192.0.2.21", (key(21),)), Switch("spine0", "192.0.2.31", (key(31),)))
    own = hosts_config(roce(switches=switches(user="cumulus", port=2222,
                                              lldpCommand="sudo lldpctl -f json"))).switches
    assert own is not None and (own.user, own.port, own.command) == ("cumulus", 2222, "sudo lldpctl -f json")
    assert hosts_config(roce()).switches is None


def test_a_switch_is_pinned_by_a_known_hosts_line_too():
    cfg = roce(switches={"hosts": {"spine0": {"address": "192.0.2.31"}}},
               knownHosts=[f"192.0.2.31 {key(31)}"])
    got = hosts_config(cfg).switches
    assert got is not None and got.hosts == (Switch("spine0", "192.0.2.31", (key(31),)),)


BAD = {
    "a switch the plan lacks": (
        {"hosts": {"gpu-su0-leaf9": {"address": "192.0.2.21", "hostKey": key(21)}}},
        f"{H}.switches.hosts.gpu-su0-leaf9"),
    "no key, even with trust on first use": (
        {"hosts": {"spine0": {"address": "192.0.2.31"}}}, f"{H}.switches.hosts.spine0.hostKey"),
    "a bad address": (
        {"hosts": {"spine0": {"address": "192.0.2.300", "hostKey": key(31)}}}, f"{H}.switches.hosts.spine0.address"),
    "a host's address": (
        {"hosts": {"spine0": {"address": "192.0.2.11", "hostKey": key(31)}}}, f"{H}.switches.hosts.spine0.address"),
    "no hosts": ({"user": "cumulus"}, f"{H}.switches.hosts"),
    "an unknown key": ({"hosts": {"spine0": {"address": "192.0.2.31", "hostKey": key(31), "mac": "x"}}},
                       f"{H}.switches.hosts.spine0.mac"),
    "two command lines": (switches(lldpCommand="lldpctl -f json\nreboot"), f"{H}.switches.lldpCommand"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_switches_are_one_problem_at_their_path(name):
    section, path = BAD[name]
    extra = {"hostKeys": "trust-on-first-use"} if "first use" in name else {}
    got = problems(roce(switches=section, **extra))
    assert [p.path for p in got] == [path], [str(p) for p in got]


def test_switches_on_an_infiniband_fabric_are_refused_with_the_way_its_cabling_is_read():
    (p,) = problems(config(switches=switches()))
    assert p.path == f"{H}.switches" and "ibnetdiscover" in p.hint and "switchGuids" in p.hint


def test_the_switches_jump_host_is_pinned_whether_their_own_or_the_sections():
    """Every host here has a jump host of its own, pinned; the section's, which only the switches
    take, has no key: refused, as a host's would be."""
    cfg = roce(switches=switches(), jumpHost="admin@bastion.example.net", knownHosts=[f"jump2.example.net {key(40)}"])
    for h in cfg[H]["pools"]["gpu"]["hosts"]:
        h["jumpHost"] = "jump2.example.net"
    (p,) = problems(cfg)
    assert p.path == f"{H}.jumpHost" and "bastion.example.net (the switches')" in p.found
    own = roce(switches=switches(jumpHost="jump3.example.net"))
    (p,) = problems(own)
    assert p.path == f"{H}.switches.jumpHost"
    cfg[H]["knownHosts"].append(f"bastion.example.net {key(41)}")
    got = hosts_config(cfg).switches
    assert got is not None and got.jump_host is not None and got.jump_host.host_keys == (key(41),)
