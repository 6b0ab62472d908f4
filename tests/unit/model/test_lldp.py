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
    assert lldp.read((str(tmp_path / "lldpctl"), "-f", "json")) == {
        "not_read": f"{tmp_path / 'lldpctl'} missing: lldpd is not installed"}
    # The real stderr lldpctl prints with no daemon on its socket, and its exit status.
    fake = tmp_path / "fake"
    fake.write_text(f"#!/bin/sh\ncat {LLDP / 'lldpctl-no-daemon.stderr'} >&2\nexit 1\n")
    fake.chmod(0o755)
    assert lldp.read((str(fake),)) == {
        "not_read": f"{fake} exited 1: unable to connect to socket /tmp/lt/nosuch.sock: No such file or directory"}
    fake.write_text(f"#!/bin/sh\ncat {LLDP / 'lldpctl-json-host-one-left.json'}\n")
    assert lldp.read((str(fake),))["neighbours"]["ibp24s0"][0]["port"] == "swp1s0"


@pytest.mark.parametrize("per_cage,radix", [(1, 64), (2, 64), (4, 256)])
def test_a_switch_port_name_reads_back_to_its_number(per_cage, radix):
    g = SwitchGeometry("x", radix, 400, per_cage, "OSFP", "unknown", True)
    assert [port_number(g, port_netdev(g, p)) for p in range(1, radix + 1)] == list(range(1, radix + 1))
    assert port_number(g, "Ethernet12") is None and port_number(g, f"swp{radix + 1}") is None
    assert port_number(g, "swp1s9") is None


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
    assert verify_lldp(p.fabric, facts_as_cabled(p)) == ([], [])
    # A node whose lldpd could not be asked: its cables are not judged, never passed or failed.
    facts = facts_as_cabled(p, drop={("vela-1", 0)})
    facts["vela-1"]["lldp"] = {"not_read": "lldpctl missing"}
    assert verify_lldp(p.fabric, facts) == ([], [])


def test_a_swap_is_one_finding_a_silent_rail_a_missing_cable_and_a_foreign_port_its_own():
    p = plan()
    swapped = verify_lldp(p.fabric, facts_as_cabled(p, swap=(("vela-0", 0), ("vela-0", 1))))[0]
    assert [(f.kind, f.where) for f in swapped] == [("cable-swapped", "vela-0 mlx5_0 port 1 and vela-0 mlx5_1 port 1")]
    missing = verify_lldp(p.fabric, facts_as_cabled(p, drop={("vela-1", 1)}))[0]
    assert [(f.kind, f.where) for f in missing] == [("link-missing", "vela-1 mlx5_1 port 1 <-> vela-su0-leaf1 port 2")]
    foreign = verify_lldp(p.fabric, facts_as_cabled(p, rename={("vela-1", 0): ("vela-su0-leaf0", "Ethernet2")}))[0]
    assert sorted((f.kind, f.where) for f in foreign) == [
        ("link-missing", "vela-1 mlx5_0 port 1 <-> vela-su0-leaf0 port 2"),
        ("unknown-device", "vela-su0-leaf0 port Ethernet2")]
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
    found, waiting = verify_lldp(p.fabric, facts)
    assert waiting == ["vela-1 mlx5_1"]
    assert [(f.kind, f.where) for f in found] == [("cable-misplaced", "vela-1 mlx5_0 port 1")]


def test_verify_names_the_nodes_it_could_not_judge_and_whose_cables_it_did():
    from railyard.verify import cabling_from_lldp

    p = plan()
    facts = facts_as_cabled(p, swap=(("vela-0", 0), ("vela-0", 1)))
    facts["vela-1"]["lldp"] = {"not_read": "lldpctl exited 1: unable to connect to socket /run/lldpd.socket"}
    found, note, judged = cabling_from_lldp(p, {**facts, "vela-9": "no answer"})
    assert judged and [(f.kind, f.node) for f in found] == [("cable-swapped", "vela-0")]
    assert note == ("cabling: the LLDP neighbours of 1 node(s) read; LLDP not read on vela-1: lldpctl exited 1: "
                    "unable to connect to socket /run/lldpd.socket")
    facts["vela-0"]["lldp"] = {"not_read": "lldpctl missing: lldpd is not installed"}
    found, note, judged = cabling_from_lldp(p, facts)
    assert (found, judged) == ([], False) and "LLDP not read on vela-0: lldpctl missing" in note


def test_lldpds_age_is_read_from_its_pid_file_and_proc(tmp_path):
    (tmp_path / "lldpd.pid").write_text("4242\n")
    (tmp_path / "4242").mkdir()
    hz = __import__("os").sysconf("SC_CLK_TCK")
    # /proc/<pid>/stat: the command in parentheses may hold spaces; field 22 is the start time.
    (tmp_path / "4242" / "stat").write_text("4242 (lldpd: monitor.) S " + " ".join(["0"] * 18) + f" {100 * hz} 0 0\n")
    (tmp_path / "uptime").write_text("130.50 200.00\n")
    assert lldp.running_s(str(tmp_path / "lldpd.pid"), str(tmp_path)) == 30.5
    assert lldp.running_s(str(tmp_path / "nope.pid"), str(tmp_path)) is None
