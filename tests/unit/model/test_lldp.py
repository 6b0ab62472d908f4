"""lldpctl's JSON read as Railyard reads it (railyard.model.lldp), on real lldpd 1.0.16 output
(railyard/data/fixtures/lldp/SOURCES.md), and the Ethernet fabric's cabling judged from it
(railyard.model.fabric.verify.verify_lldp) against a plan."""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
import yaml

from railyard import paths
from railyard.model import lldp
from railyard.model.catalog import FIXTURES_DIR
from railyard.model.fabric.geometry import SwitchGeometry
from railyard.model.fabric.routing import port_netdev, port_number
from railyard.model.fabric.verify import verify_lldp
from railyard.model.plan import make_plan
from railyard.stack import parse_config

LLDP = FIXTURES_DIR / "lldp"


def test_two_neighbours_come_as_a_list_and_each_keeps_its_port_id_and_subtype():
    got = lldp.parse((LLDP / "lldpctl-json-host-two-leaves.json").read_text())
    assert {k: [(n["system"], n["port"], n["port_type"]) for n in v] for k, v in got.items()} == {
        "ibp24s0": [("su0-leaf0", "swp1s0", "ifname")], "ibp64s0": [("su0-leaf1", "swp1s0", "local")]}
    assert got["ibp24s0"][0]["chassis_id"] == "be:79:2b:b0:d4:0a"


def test_one_neighbour_comes_as_an_object_and_reads_the_same():
    got = lldp.parse((LLDP / "lldpctl-json-host-one-left.json").read_text())
    assert list(got) == ["ibp24s0"] and got["ibp24s0"][0]["system"] == "su0-leaf0"
    leaf = lldp.parse((LLDP / "lldpctl-json-leaf-one-host.json").read_text())
    assert leaf["swp1s0"][0]["system"] == "gpu-0" and leaf["swp1s0"][0]["port"] == "ibp24s0"


def test_no_neighbour_is_an_empty_reading_and_what_changes_at_every_read_is_left_out():
    assert lldp.parse((LLDP / "lldpctl-json-no-neighbour.json").read_text()) == {}
    doc = json.loads((LLDP / "lldpctl-json-host-one-left.json").read_text())
    aged = copy.deepcopy(doc)
    aged["lldp"]["interface"]["ibp24s0"]["age"] = "0 day, 01:02:03"
    aged["lldp"]["interface"]["ibp24s0"]["port"]["ttl"] = "4"
    assert lldp.parse(json.dumps(aged)) == lldp.parse(json.dumps(doc))


def test_two_neighbours_on_one_port_are_both_kept_and_a_chassis_without_a_name_by_its_id():
    doc = json.loads((LLDP / "lldpctl-json-host-two-leaves.json").read_text())
    first, second = doc["lldp"]["interface"]
    second = {"ibp24s0": second["ibp64s0"]}
    body = second["ibp24s0"]
    body["chassis"] = {"id": body["chassis"]["su0-leaf1"]["id"]}  # a neighbour that sends no system name
    got = lldp.parse(json.dumps({"lldp": {"interface": [first, second]}}))
    assert [(n["system"], n["chassis_id"]) for n in got["ibp24s0"]] == [
        ("su0-leaf0", "be:79:2b:b0:d4:0a"), (None, "9e:01:2f:df:4c:9e")]


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"other": {}}'])
def test_what_is_not_lldpctls_json_is_refused(text):
    with pytest.raises(ValueError):
        lldp.parse(text)


def test_read_says_why_when_lldpd_cannot_be_asked(tmp_path):
    assert lldp.read((str(tmp_path / "lldpctl"), "-f", "json"), chassis=None) == {
        "not_read": f"{tmp_path / 'lldpctl'} missing: lldpd is not installed"}
    # The real stderr lldpctl prints with no daemon on its socket, and its exit status.
    fake = tmp_path / "fake"
    fake.write_text(f"#!/bin/sh\ncat {LLDP / 'lldpctl-no-daemon.stderr'} >&2\nexit 1\n")
    fake.chmod(0o755)
    assert lldp.read((str(fake),), chassis=None) == {
        "not_read": f"{fake} exited 1: unable to connect to socket /tmp/lt/nosuch.sock: No such file or directory"}
    fake.write_text(f"#!/bin/sh\ncat {LLDP / 'lldpctl-json-host-one-left.json'}\n")
    assert lldp.read((str(fake),), chassis=None)["neighbours"]["ibp24s0"][0]["port"] == "swp1s0"


@pytest.mark.parametrize("per_cage,radix", [(1, 64), (2, 64), (4, 256)])
def test_a_switch_port_name_reads_back_to_its_number(per_cage, radix):
    g = SwitchGeometry("x", radix, 400, per_cage, "OSFP", "unknown", True)
    assert [port_number(g, port_netdev(g, p)) for p in range(1, radix + 1)] == list(range(1, radix + 1))
    assert port_number(g, "Ethernet12") is None and port_number(g, f"swp{radix + 1}") is None
    assert port_number(g, "swp1s9") is None


def port_config(name: str) -> list[tuple[str, str, int]]:
    """(name, alias, front-panel cage) of each port row a kept SONiC port_config.ini excerpt has."""
    rows = [line.split() for line in (FIXTURES_DIR / "sonic" / name).read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return [(r[0], r[2], int(r[3])) for r in rows]


@pytest.mark.parametrize("kept,speed", [("sn5600_o128_port_config_excerpt.ini", "400gbe"),
                                        ("sn5600_v256_port_config_excerpt.ini", "200gbe")])
def test_sonics_names_of_an_sn5600s_ports_read_as_the_ports_the_plan_names(kept, speed):
    from railyard.model.catalog import load_catalog
    from railyard.model.fabric.geometry import switch_geometry

    g = switch_geometry(load_catalog().switches["sn5600"], speed)
    rows = port_config(kept)
    fabric_rows = [r for r in rows if r[2] <= 64]
    assert len(fabric_rows) >= 10 and [r[2] for r in rows if r[2] > 64] == [65]
    for name, alias, cage in fabric_rows:
        lane = ord(alias[-1]) - ord("a")  # a broken-out cage's ports: etp<cage>a, etp<cage>b, ...
        assert port_netdev(g, port_number(g, name)) == f"swp{cage}s{lane}", name
        assert port_number(g, alias) == port_number(g, name), alias
    # The 25G port past the 64 cages is not a fabric port; neither is a lane inside a port.
    assert port_number(g, "Ethernet512") is None and port_number(g, "etp65") is None
    assert port_number(g, "Ethernet1") is None and port_number(g, "etp1") is None
    assert port_number(g, "Ethernet08") is None and port_number(g, "etp01a") is None


def breakout_ports(mode: str, speed: str | None = None) -> dict[int, list[tuple[str, str]]]:
    """(name, alias) of each port SONiC makes of each front-panel cage (platform.json's `index`) in
    the kept excerpt, in the breakout mode whose name starts with `mode` (`1x800G`) and, given a
    speed (`100G`), lists it: as portconfig.py's BreakoutCfg names them, Ethernet<the cage's first
    lane + the lanes of the ports before>, aliased in the mode's order (sonic/SOURCES.md)."""
    interfaces = json.loads((FIXTURES_DIR / "sonic" / "sn5600_platform_json_interfaces_excerpt.json").read_text())["interfaces"]
    ports = {}
    for name, cage in interfaces.items():
        aliases = next((a for m, a in cage["breakout_modes"].items()
                        if m.startswith(mode) and (speed is None or speed in m.replace("[", ",").rstrip("]").split(",")[1:])), [])
        base, width = int(name.removeprefix("Ethernet")), len(cage["lanes"].split(",")) // max(len(aliases), 1)
        ports[int(cage["index"].split(",")[0])] = [(f"Ethernet{base + i * width}", alias) for i, alias in enumerate(aliases)]
    return ports


@pytest.mark.parametrize("mode,slower,speed", [("1x800G", None, "800gbe"), ("2x400G", None, "400gbe"),
                                               ("4x200G", None, "200gbe"), ("4x200G", "100G", "100gbe")])
def test_each_breakout_mode_sonics_platform_json_gives_an_sn5600_reads_as_the_plans_ports(mode, slower, speed):
    """SONiC's own list of an SN5600's cages and breakout modes: each port it would make at the
    plan's speed reads back, by name and by alias, as the plan's port of that cage and lane; the
    25G cage past the 64 is no fabric port at any speed. 100G runs on the 4x200G mode's ports (the
    mode lists 100G among its speeds), as the catalog has it."""
    from railyard.model.catalog import load_catalog
    from railyard.model.fabric.geometry import switch_geometry

    g = switch_geometry(load_catalog().switches["sn5600"], speed)
    ports = breakout_ports(mode, slower)
    assert ports.pop(65) == [] and sorted(ports) == [1, 2, 9, 33, 64]
    for cage, cage_ports in ports.items():
        assert len(cage_ports) == g.ports_per_cage, cage
        for lane, (port, alias) in enumerate(cage_ports):
            number = port_number(g, port)
            assert number == (cage - 1) * g.ports_per_cage + lane + 1, port
            assert port_number(g, alias) == number, alias
            assert port_netdev(g, number) == (f"swp{cage}" if g.ports_per_cage == 1 else f"swp{cage}s{lane}")
    assert [port_number(g, n) for n in ("Ethernet512", "etp65")] == [None, None]


def test_an_sn5600_at_800g_reads_no_name_of_a_broken_out_cage():
    from railyard.model.catalog import load_catalog
    from railyard.model.fabric.geometry import switch_geometry

    g = switch_geometry(load_catalog().switches["sn5600"], "800gbe")
    whole = {n for cage in breakout_ports("1x800G").values() for pair in cage for n in pair}
    # A broken-out cage's second port and every lettered alias: none is a port of a cage of one.
    split = {n for cage in breakout_ports("2x400G").values() for pair in cage for n in pair} - whole
    assert len(split) == 15 and {n: port_number(g, n) for n in split} == dict.fromkeys(split)


def test_a_switch_without_lanes_in_the_catalog_reads_no_sonic_name():
    g = SwitchGeometry("x", 128, 400, 2, "OSFP", "unknown", True)
    assert port_number(g, "Ethernet0") is None and port_number(g, "etp1a") is None
    # Lanes that do not split among a cage's ports name no port either.
    odd = SwitchGeometry("x", 256, 200, 4, "OSFP", "unknown", True, lanes_per_cage=6)
    assert port_number(odd, "Ethernet0") is None and port_number(odd, "etp1a") is None


# --- the cabling judged from the hosts' neighbours ---------------------------------------------

def plan():
    config = copy.deepcopy(yaml.safe_load((paths.PROJECT_ROOT / "stacks/Pulumi.lab-virtual.yaml").read_text())["config"])
    return make_plan(parse_config(config, stack="t"))


def facts_as_cabled(p, swap: tuple[tuple[str, int], tuple[str, int]] | None = None, drop=(), rename=None):
    """Each node's facts as its lldpd would report the plan's cabling, with two rails' far ends
    exchanged, some rails unheard, or a far end renamed."""
    ends = {(n.name, nic.rail): (nic.leaf, port_netdev(p.fabric.switch, nic.leaf_port))
            for n in p.nodes for nic in n.nics}
    if swap:
        a, b = swap
        ends[a], ends[b] = ends[b], ends[a]
    out = {}
    for n in p.nodes:
        heard = {}
        for nic in n.nics:
            if (n.name, nic.rail) in drop:
                continue
            system, port = (rename or {}).get((n.name, nic.rail), ends[(n.name, nic.rail)])
            heard[nic.netdev] = [{"system": system, "chassis_id": "x", "port": port, "port_type": "local"}]
        out[n.name] = {"nics": [{"name": nic.name, "netdev": nic.netdev} for nic in n.nics],
                       "lldp": {"neighbours": heard}}
    return out


def test_the_plans_cabling_is_clean_and_only_the_nodes_read_are_judged():
    p = plan()
    assert verify_lldp(p.fabric, facts_as_cabled(p))[:3] == ([], [], [])
    # A node whose lldpd could not be asked: its cables are not judged, never passed or failed.
    facts = facts_as_cabled(p, drop={("vela-1", 0)})
    facts["vela-1"]["lldp"] = {"not_read": "lldpctl missing"}
    assert verify_lldp(p.fabric, facts)[:3] == ([], [], [])


def test_a_swap_is_one_finding_a_silent_rail_a_missing_cable_and_a_foreign_port_its_own():
    p = plan()
    swapped = verify_lldp(p.fabric, facts_as_cabled(p, swap=(("vela-0", 0), ("vela-0", 1))))[0]
    assert [(f.kind, f.where) for f in swapped] == [("cable-swapped", "vela-0 mlx5_0 port 1 and vela-0 mlx5_1 port 1")]
    missing = verify_lldp(p.fabric, facts_as_cabled(p, drop={("vela-1", 1)}))[0]
    assert [(f.kind, f.where) for f in missing] == [("link-missing", "vela-1 mlx5_1 port 1 <-> vela-su0-leaf1 port 2")]
    foreign = verify_lldp(p.fabric, facts_as_cabled(p, rename={("vela-1", 0): ("vela-su0-leaf0", "et-0/0/2")}))[0]
    # A port id the plan's switches do not have: one finding for the switch, and that rail not judged.
    assert [(f.kind, f.where) for f in foreign] == [("unknown-device", "vela-su0-leaf0 port et-0/0/2")]
    moved = verify_lldp(p.fabric, facts_as_cabled(p, rename={("vela-1", 0): ("vela-su0-leaf0", "swp3s0")}))[0]
    assert [(f.kind, f.where, f.found) for f in moved] == [
        ("cable-misplaced", "vela-1 mlx5_0 port 1", "cabled to vela-su0-leaf0 port 9")]


def test_lldp_module_runs_standalone_on_a_hosts_python():
    """It rides in the facts program (railyard.model.bundle): standard library only."""
    src = (paths.PROJECT_ROOT / "railyard/model/lldp.py").read_text()
    r = subprocess.run(["python3", "-I", "-S", "-c", src + "\nprint(parse('{\"lldp\": {}}'))"], capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stdout.strip() == "{}", r.stderr


def test_an_lldpd_still_listening_leaves_its_unheard_rails_unjudged_and_judges_the_rest():
    """Started under LISTENING_S ago, lldpd may not have had a frame from every switch yet (they
    send every 30 s): a rail it has not heard is waited for, never a missing cable; a rail it has
    heard on the wrong port is still a finding."""
    p = plan()
    facts = facts_as_cabled(p, drop={("vela-1", 1)}, rename={("vela-1", 0): ("vela-su0-leaf0", "swp3s0")})
    facts["vela-1"]["lldp"]["listening_s"] = 4
    found, waiting, *_ = verify_lldp(p.fabric, facts)
    assert waiting == ["vela-1 mlx5_1"]
    assert [(f.kind, f.where) for f in found] == [("cable-misplaced", "vela-1 mlx5_0 port 1")]


def test_verify_names_the_nodes_it_could_not_judge_and_whose_cables_it_did():
    from railyard.verify import cabling_from_lldp

    p = plan()
    facts = facts_as_cabled(p, swap=(("vela-0", 0), ("vela-0", 1)))
    facts["vela-1"]["lldp"] = {"not_read": "lldpctl exited 1: unable to connect to socket /run/lldpd.socket"}
    found, note, judged, unheard = cabling_from_lldp(p, {**facts, "vela-9": "no answer"})
    assert judged and [(f.kind, f.node) for f in found] == [("cable-swapped", "vela-0")]
    # Its cables unjudged, vela-1's fabric was not read: a state resting on it does not move.
    assert unheard == ["vela-1"]
    assert note == ("cabling: the LLDP neighbours of 1 node(s) read; LLDP not read on vela-1: lldpctl exited 1: "
                    "unable to connect to socket /run/lldpd.socket")
    facts["vela-0"]["lldp"] = {"not_read": "lldpctl missing: lldpd is not installed"}
    found, note, judged, unheard = cabling_from_lldp(p, facts)
    assert (found, judged) == ([], False) and "LLDP not read on vela-0: lldpctl missing" in note
    assert unheard == ["vela-0", "vela-1"]


# --- the switches' own tables -------------------------------------------------------------------

def test_the_switch_side_fixtures_read_as_a_leaf_and_a_spine_hear_them():
    leaf = lldp.parse((LLDP / "lldpctl-json-leaf-host-and-spine.json").read_text())
    assert {k: [(n["system"], n["port"]) for n in v] for k, v in leaf.items()} == {
        "gpu-0-r0": [("gpu-0", "ibp24s0")], "swp33": [("su0-spine0", "swp1")], "swp34": [("su0-spine0", "swp2")]}
    spine = lldp.parse((LLDP / "lldpctl-json-spine-two-leaf-ports.json").read_text())
    assert {k: [(n["system"], n["port"]) for n in v] for k, v in spine.items()} == {
        "swp1": [("su0-leaf0", "swp33")], "swp2": [("su0-leaf0", "swp34")]}
    # What lldpctl printed, stamped, with no daemon: the message alone.
    assert lldp.last_said((LLDP / "lldpctl-no-daemon.stderr").read_text()) == (
        "unable to connect to socket /tmp/lt/nosuch.sock: No such file or directory")
    assert lldp.parse_system((LLDP / "lldpcli-json-show-chassis-host.json").read_text()) == "gpu-0"
    assert lldp.parse_system("not json") is None and lldp.parse_system('{"lldp": {}}') is None


def netdevs(p):
    from railyard.verify import planned_netdevs

    return planned_netdevs(p)


def tables_as_cabled(p, swap=(), drop=(), system=None):
    """Every switch's table as its lldpd would show the plan's cabling: each switch port hears its
    cable's far end (a node by its system name and netdev, a switch by its name and port). swap:
    two switch ends (switch, port) whose cables are exchanged (a free port: the cable moved
    there); drop: switch ends whose cable is pulled; system: {node: the name its lldpd sends}."""
    g = p.fabric.switch
    nic = {(n.name, x.name): x.netdev for n in p.nodes for x in n.nics}
    moved = dict(zip(swap, reversed(swap)))
    heard: dict = {}
    for link in p.fabric.links():
        b = moved.get((link.b_device, link.b_port), (link.b_device, link.b_port))
        if link.tier == "node_leaf":
            a = None
            if b in drop:
                continue
        else:
            a = moved.get((link.a_device, link.a_port), (link.a_device, link.a_port))
            if a in drop or b in drop:
                continue
            heard.setdefault(a[0], {}).setdefault(port_netdev(g, a[1]), []).append(
                {"system": b[0], "chassis_id": "x", "port": port_netdev(g, b[1]), "port_type": "ifname"})
        who = (system or {}).get(link.a_device, link.a_device) if a is None else a[0]
        port = nic[(link.a_device, link.a_port)] if a is None else port_netdev(g, a[1])
        heard.setdefault(b[0], {}).setdefault(port_netdev(g, b[1]), []).append(
            {"system": who, "chassis_id": "x", "port": port, "port_type": "ifname"})
    return heard


def test_the_switches_tables_as_cabled_are_clean_and_judge_every_cable_with_no_node_read():
    p = plan()
    assert verify_lldp(p.fabric, facts_as_cabled(p), tables_as_cabled(p), netdevs(p))[:3] == ([], [], [])
    assert verify_lldp(p.fabric, {}, tables_as_cabled(p), netdevs(p))[:3] == ([], [], [])
    # With no node read, the switches alone find a swap at the leaves, as one finding.
    leaf = p.nodes[0].nics[0].leaf
    a, b = ((leaf, x.leaf_port) for x in (p.nodes[0].nics[0], p.nodes[1].nics[0]))
    found, *_ = verify_lldp(p.fabric, {}, tables_as_cabled(p, swap=(a, b)), netdevs(p))
    assert [(f.kind, f.where) for f in found] == [("cable-swapped", "vela-0 mlx5_0 port 1 and vela-1 mlx5_0 port 1")]


def test_a_pulled_or_swapped_uplink_is_found_only_from_the_switches_side():
    p = plan()
    up = [lk for lk in p.fabric.links() if lk.tier == "leaf_spine"]
    one, two = up[0], up[1]
    pulled = tables_as_cabled(p, drop={(one.a_device, one.a_port), (one.b_device, one.b_port)})
    found, *_ = verify_lldp(p.fabric, facts_as_cabled(p), pulled, netdevs(p))
    assert [(f.kind, f.where) for f in found] == [
        ("link-missing", f"{one.b_device} port {one.b_port} <-> {one.a_device} port {one.a_port}")]
    # The hosts' side alone cannot see it.
    assert verify_lldp(p.fabric, facts_as_cabled(p))[:3] == ([], [], [])
    # Two uplinks exchanged at the spine: one swap.
    x, y = (one.b_device, one.b_port), (two.b_device, two.b_port)
    found, *_ = verify_lldp(p.fabric, {}, tables_as_cabled(p, swap=(x, y)), netdevs(p))
    assert [f.kind for f in found] == ["cable-swapped"], found
    assert found[0].where == f"{one.b_device} port {one.b_port} and {two.b_device} port {two.b_port}"
    assert found[0].found == (f"{one.b_device} port {one.b_port} to {two.a_device} port {two.a_port}, "
                              f"{two.b_device} port {two.b_port} to {one.a_device} port {one.a_port}")


def test_a_node_its_switches_never_hear_is_not_judged_from_their_side_and_strangers_are_named():
    p = plan()
    # vela-1's lldpd is down: its leaves hear nothing from it, which says nothing of its cables.
    silent = tables_as_cabled(p, drop={(x.leaf, x.leaf_port) for x in p.node_named("vela-1").nics})
    assert verify_lldp(p.fabric, {}, silent, netdevs(p))[:3] == ([], [], [])
    # One of vela-1's NICs heard on the wrong port: misplaced.
    x, y = p.node_named("vela-1").nics[:2]
    free = max(lk.b_port for lk in p.fabric.links() if lk.b_device == x.leaf and lk.tier == "node_leaf") + 1
    moved = tables_as_cabled(p, swap=((x.leaf, x.leaf_port), (x.leaf, free)))
    found, *_ = verify_lldp(p.fabric, {}, moved, netdevs(p))
    assert [(f.kind, f.where, f.found) for f in found] == [
        ("cable-misplaced", "vela-1 mlx5_0 port 1", f"cabled to {x.leaf} port {free}")]
    # Heard on one rail, its lldpd speaks: another rail its leaf does not hear is a missing cable,
    # where its facts name its NICs' netdevs (its own lldpctl not asked here).
    one_silent = tables_as_cabled(p, drop={(y.leaf, y.leaf_port)})
    nics = {"vela-1": {k: v for k, v in facts_as_cabled(p)["vela-1"].items() if k == "nics"}}
    found, *_ = verify_lldp(p.fabric, nics, one_silent, netdevs(p))
    assert [(f.kind, f.where) for f in found] == [("link-missing", f"vela-1 {y.name} port 1 <-> {y.leaf} port {y.leaf_port}")]
    # Not read at all, its netdevs are the plan's prediction: only the NICs recognised are judged.
    assert verify_lldp(p.fabric, {}, one_silent, netdevs(p))[:3] == ([], [], [])
    # A host the plan does not have, and a node's port that is none of its NICs.
    tables = tables_as_cabled(p)
    tables[x.leaf][port_netdev(p.fabric.switch, free)] = [{"system": "rogue", "port": "eth0"}]
    tables[x.leaf][port_netdev(p.fabric.switch, free + 1)] = [{"system": "vela-1", "port": "eno1"}]
    found, *_ = verify_lldp(p.fabric, nics, tables, netdevs(p))
    assert sorted((f.kind, f.where) for f in found) == [("unknown-device", "rogue"),
                                                        ("unknown-device", "vela-1 port eno1")]
    # Not read, its port ids are only the plan's prediction: an unknown one is said, not found.
    found, _, notes, _ = verify_lldp(p.fabric, {}, tables, netdevs(p))
    assert [(f.kind, f.where) for f in found] == [("unknown-device", "rogue")]
    assert notes == [f"port ids not the plan's predicted netdevs, from nodes that were not read: vela-1 (eno1 on "
                     f"{x.leaf} port {free + 1}); only their NICs that were recognised are judged from the switches' side"]


def test_a_host_is_known_by_the_system_name_its_lldpd_sends_and_its_own_netdevs():
    """A host keeps its hostname: its switches hear `dgx-017`, which its facts name."""
    p = plan()
    facts = facts_as_cabled(p)
    facts["vela-1"]["lldp"]["system"] = "dgx-017"
    tables = tables_as_cabled(p, system={"vela-1": "dgx-017"})
    assert verify_lldp(p.fabric, facts, tables, netdevs(p))[:3] == ([], [], [])
    # Not read, its name is not known: heard where the plan puts it, it is not called a stranger.
    found, _, notes, _ = verify_lldp(p.fabric, {"vela-0": facts["vela-0"]}, tables, netdevs(p))
    assert found == [] and len(notes) == 1 and "vela-1 (dgx-017 on vela-su0-leaf" in notes[0]
    # A stranger where a node that was read belongs is one finding, however many ports hear it.
    facts["vela-0"]["lldp"]["system"] = "vela-0"
    x = p.node_named("vela-0").nics
    for nic in x:
        tables[nic.leaf][port_netdev(p.fabric.switch, nic.leaf_port)] = [{"system": "rogue", "port": "eth0"}]
    found, *_ = verify_lldp(p.fabric, {"vela-0": facts["vela-0"], "vela-1": facts["vela-1"]}, tables, netdevs(p))
    assert [(f.kind, f.where) for f in found if f.kind == "unknown-device"] == [("unknown-device", "rogue")]


def test_nodes_sending_one_name_are_left_to_their_own_side():
    p = plan()
    facts = facts_as_cabled(p)
    for n in facts.values():
        n["lldp"]["system"] = "localhost"
    tables = tables_as_cabled(p, system={"vela-0": "localhost", "vela-1": "localhost"})
    found, _, notes, _ = verify_lldp(p.fabric, facts, tables, netdevs(p))
    assert found == [] and notes == ["vela-0, vela-1 send one system name, 'localhost': their switches' tables "
                                     "cannot tell them apart, so those cables are judged from the nodes' side only"]


def test_a_switch_whose_lldpd_is_down_or_unread_judges_no_uplink():
    """spine0 silent: its table is not read and no leaf hears it, which says nothing of its cables."""
    p = plan()
    tables = tables_as_cabled(p)
    del tables["spine0"]
    for leaf in tables.values():
        for port, heard in list(leaf.items()):
            leaf[port] = [n for n in heard if n["system"] != "spine0"]
    assert verify_lldp(p.fabric, facts_as_cabled(p), tables, netdevs(p))[:3] == ([], [], [])
    # Unread but heard by the leaves: it speaks, so an uplink a leaf does not hear is missing.
    up = next(lk for lk in p.fabric.links() if lk.tier == "leaf_spine")
    heard = tables_as_cabled(p, drop={(up.a_device, up.a_port), (up.b_device, up.b_port)})
    del heard["spine0"]
    found, *_ = verify_lldp(p.fabric, {}, heard, netdevs(p))
    assert [f.kind for f in found] == ["link-missing"]


def sonic_words(p, tables: dict, facts: dict | None = None) -> tuple[dict, dict | None]:
    """Every switch as SONiC speaks: its own table's ports by name (Ethernet<first lane>), the
    port ids it sends, which its neighbours hear, by alias (etp<cage><letter>)."""
    g = p.fabric.switch
    step = g.lanes_per_cage // g.ports_per_cage
    switches = {s.name for s in p.fabric.switches()}

    def name(port: str) -> str:
        cage, lane = divmod(port_number(g, port) - 1, g.ports_per_cage)
        return f"Ethernet{cage * g.lanes_per_cage + lane * step}"

    def alias(port: str) -> str:
        cage, lane = divmod(port_number(g, port) - 1, g.ports_per_cage)
        return f"etp{cage + 1}{'abcd'[lane]}"

    said = {sw: {name(port): [{**n, "port": alias(n["port"]) if n["system"] in switches else n["port"]}
                              for n in heard] for port, heard in table.items()} for sw, table in tables.items()}
    if facts is not None:
        facts = copy.deepcopy(facts)
        for f in facts.values():
            for heard in f["lldp"]["neighbours"].values():
                for n in heard:
                    n["port"] = alias(n["port"])
    return said, facts


def test_a_fabric_of_sonic_switches_is_judged_in_the_plans_words():
    """SONiC's own table names a port Ethernet0 and sends its alias etp1a as the port id: both
    read as the plan's swp1s0 (the SN5600's lanes per cage are in the catalog)."""
    p = plan()
    assert (p.fabric.switch.model, p.fabric.switch.ports_per_cage) == ("sn5600", 4)
    tables, facts = sonic_words(p, tables_as_cabled(p), facts_as_cabled(p))
    assert "Ethernet0" in tables["spine0"] and any(n["port"].startswith("etp") for n in tables["spine0"]["Ethernet0"])
    assert verify_lldp(p.fabric, facts, tables, netdevs(p))[:3] == ([], [], [])
    # Two uplinks exchanged at the spine, and two hosts' cables at a leaf: found in the plan's words.
    up = [lk for lk in p.fabric.links() if lk.tier == "leaf_spine"]
    x, y = (up[0].b_device, up[0].b_port), (up[1].b_device, up[1].b_port)
    found, *_ = verify_lldp(p.fabric, {}, sonic_words(p, tables_as_cabled(p, swap=(x, y)))[0], netdevs(p))
    assert [(f.kind, f.where) for f in found] == [
        ("cable-swapped", f"{up[0].b_device} port {up[0].b_port} and {up[1].b_device} port {up[1].b_port}")]
    swapped = sonic_words(p, tables_as_cabled(p), facts_as_cabled(p, swap=(("vela-0", 0), ("vela-0", 1))))[1]
    found, *_ = verify_lldp(p.fabric, swapped)
    assert [(f.kind, f.where) for f in found] == [("cable-swapped", "vela-0 mlx5_0 port 1 and vela-0 mlx5_1 port 1")]


def test_a_switch_whose_ports_are_named_otherwise_is_not_judged_and_said_so():
    """A switch OS naming its ports in words the catalog does not give (Junos's et-0/0/N): its
    table cannot be matched to the plan's swpN."""
    p = plan()
    tables = tables_as_cabled(p)
    tables["spine0"] = {f"et-0/0/{i}": heard for i, heard in enumerate(tables["spine0"].values())}
    found, _, notes, _ = verify_lldp(p.fabric, facts_as_cabled(p), tables, netdevs(p))
    assert found == [] and len(notes) == 1 and notes[0].startswith("spine0: none of its ports is named as the plan")
    # The leaves hear it in their words, but it does not speak the plan's: none of its uplinks is judged.
    assert verify_lldp(p.fabric, {}, {"spine0": tables["spine0"]}, netdevs(p))[3] is False
    # Its port ids, heard by the leaves, are another matter: one finding for the switch, not one per port.
    renamed = tables_as_cabled(p)
    for leaf in ("vela-su0-leaf0", "vela-su0-leaf1"):
        for heard in renamed[leaf].values():
            for n in heard:
                if n["system"] == "spine0":
                    n["port"] = "et-0/0/" + n["port"][3:]
    other = {f"et-0/0/{i}": heard for i, heard in enumerate(renamed["spine0"].values())}
    del renamed["spine0"]
    found, *_ = verify_lldp(p.fabric, {}, renamed, netdevs(p))
    assert [(f.kind, f.where) for f in found] == [("unknown-device", "spine0 ports")]
    # The whole spine in those words, its own table too: the same one finding and a note, no uplink missing.
    found, _, notes, _ = verify_lldp(p.fabric, facts_as_cabled(p), {**renamed, "spine0": other}, netdevs(p))
    assert [(f.kind, f.where) for f in found] == [("unknown-device", "spine0 ports")] and len(notes) == 1


def test_a_table_that_heard_no_one_yet_says_nothing_and_a_dark_leaf_is_still_judged():
    p = plan()
    tables = tables_as_cabled(p)
    tables["spine0"] = {}  # its lldpd restarted a moment ago
    found, _, notes, _ = verify_lldp(p.fabric, facts_as_cabled(p), tables, netdevs(p))
    assert found == [] and notes == ["spine0: its lldpd has heard no neighbour (started just now?), so its table "
                                     "is not judged"]
    # A leaf whose every fabric port is dark, only its management port heard: its cables are missing.
    leaf = "vela-su0-leaf1"
    tables = tables_as_cabled(p, drop={(lk.b_device, lk.b_port) for lk in p.fabric.links() if lk.b_device == leaf}
                              | {(lk.a_device, lk.a_port) for lk in p.fabric.links() if lk.a_device == leaf})
    tables[leaf] = {"eth0": [{"system": "oob-switch", "port": "swp7"}]}
    found, *_ = verify_lldp(p.fabric, facts_as_cabled(p), tables, netdevs(p))
    missing = [f for f in found if f.kind == "link-missing"]
    assert missing and all(leaf in f.where for f in missing) and [f.kind for f in found if f not in missing] == []


def test_a_name_a_node_gives_itself_wins_over_one_only_assumed_and_a_stranger_where_a_heard_node_belongs_is_named():
    p = plan()
    facts = facts_as_cabled(p)
    facts["vela-0"]["lldp"]["system"] = "vela-1"  # a read host whose hostname is the other node's plan name
    tables = tables_as_cabled(p, system={"vela-0": "vela-1", "vela-1": "dgx-002"})
    # vela-1 not read: the name "vela-1" is vela-0's own, so what sends it is vela-0, and vela-1's
    # own hostname, where the plan puts it, is said, not found.
    found, _, notes, _ = verify_lldp(p.fabric, {"vela-0": facts["vela-0"]}, tables, netdevs(p))
    assert found == [] and len(notes) == 1 and "vela-1 (dgx-002 on vela-su0-leaf0 port 2)" in notes[0]
    # vela-1 unread and heard under its plan name on one rail: a stranger on its other rail is someone else.
    p = plan()
    tables = tables_as_cabled(p)
    y = p.node_named("vela-1").nics[1]
    tables[y.leaf][port_netdev(p.fabric.switch, y.leaf_port)] = [{"system": "rogue", "port": "eth0"}]
    found, _, notes, _ = verify_lldp(p.fabric, {}, tables, netdevs(p))
    assert [(f.kind, f.where) for f in found] == [("unknown-device", "rogue")] and notes == []


def test_rails_a_young_lldpd_has_not_heard_are_judged_by_their_leaves_only_where_heard():
    p = plan()
    facts = facts_as_cabled(p, drop={("vela-1", 1)})
    facts["vela-1"]["lldp"]["listening_s"] = 4
    assert verify_lldp(p.fabric, facts)[1] == ["vela-1 mlx5_1"]
    assert verify_lldp(p.fabric, facts, tables_as_cabled(p), netdevs(p))[:3] == ([], [], [])
    # Its leaf has not heard that NIC either (slow to come up after a boot): still waited for.
    y = p.node_named("vela-1").nics[1]
    assert verify_lldp(p.fabric, facts, tables_as_cabled(p, drop={(y.leaf, y.leaf_port)}), netdevs(p))[:3] == (
        [], ["vela-1 mlx5_1"], [])


def test_verify_notes_the_switches_read_and_those_that_could_not_be():
    from railyard.drivers import SwitchLldp
    from railyard.verify import cabling_from_lldp

    p = plan()
    tables = dict(tables_as_cabled(p), spine0="lldpcli exited 1: unable to connect to socket")
    found, note, judged, unheard = cabling_from_lldp(p, facts_as_cabled(p), SwitchLldp(tables, "the lab's switches"))
    assert (found, judged, unheard) == ([], True, [])
    assert note == ("cabling: the LLDP neighbours of 2 node(s) read; the LLDP tables of 2 switch(es) read "
                    "(the lab's switches); switch LLDP table not read on spine0: lldpcli exited 1: unable to "
                    "connect to socket")
    found, note, judged, _ = cabling_from_lldp(p, {}, SwitchLldp({}, "railyard:hosts.switches names none"))
    assert (found, judged) == ([], False)
    assert note == "no switch's LLDP table read (railyard:hosts.switches names none): the nodes' side alone decides"


def test_lldpds_age_is_read_from_its_pid_file_and_proc(tmp_path):
    (tmp_path / "lldpd.pid").write_text("4242\n")
    (tmp_path / "4242").mkdir()
    hz = __import__("os").sysconf("SC_CLK_TCK")
    # /proc/<pid>/stat: the command in parentheses may hold spaces; field 22 is the start time.
    (tmp_path / "4242" / "stat").write_text("4242 (lldpd: monitor.) S " + " ".join(["0"] * 18) + f" {100 * hz} 0 0\n")
    (tmp_path / "uptime").write_text("130.50 200.00\n")
    assert lldp.running_s(str(tmp_path / "lldpd.pid"), str(tmp_path)) == 30.5
    assert lldp.running_s(str(tmp_path / "nope.pid"), str(tmp_path)) is None
