"""`railyard verify` of an Ethernet fabric's cabling through LLDP (issue 40): a two-node dgx-h100
stack on a routed 400GbE RoCE fabric, up on the real engine. Each leaf and spine is the lab's FRR
router running Debian's lldpd, naming its ports as the plan does; each node runs lldpd too, through
the lldp role of its tuning. Real LLDP frames cross the veths, verify reads each node's neighbours
(`lldpctl -f json`) over SSH and holds them against the plan: cables swapped at the leaves by
`railyard lab fault`, and a pulled one, are found and named, nothing else is, and `--clear` gives
back a stack verify finds as planned. A refresh records each node's neighbours in its facts, the
swap included.

Only the fabric part is read: the catalog's dgx-h100 ships its ConnectX-7 ports as InfiniBand
(its user guide's default), so the hardware part rightly says a RoCE fabric needs them in Ethernet
mode, and the only SKUs with Ethernet compute NICs either leave their netdev names unknown
(hgx-h100, which the lab cannot wire) or are the virtual layout's (vela-a100).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from railyard.drivers.lab import gc, names, net, proc, routers
from railyard.model.fabric.routing import port_netdev
from railyard.model.fabric.subnet import End, cable_of

from .railyard_project import STORAGE, free_networks
from .stack_project import StackProject, lab_stack, recorded_facts

STACK = "tlldp"


def config(mgmt: str) -> dict:
    return {
        "railyard:region": "lab",
        "railyard:layout": "bare-metal",
        "railyard:driver": "lab",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 2}],
        "railyard:fabric": {
            # Two uplinks a leaf to one spine, not 64 to four: the cables judged are the nodes'.
            "compute": {"kind": "roce", "speed": "400gbe", "switch": "sn5600", "cidr": "198.19.0.0/16",
                        "asnBase": 4200000000, "oversubscription": 32},
            "storage": {"cidr": STORAGE},
            "management": {"cidr": mgmt},
        },
        "railyard:acceptance": {"enabled": False},
        "railyard:ephemeral": {"ttl": "2h"},
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    (mgmt,) = free_networks(1, prefix=24)
    with lab_stack(tmp_path_factory, STACK, config(mgmt)) as p:
        yield p


def verify(p: StackProject) -> tuple[int, list[dict]]:
    proc = p.railyard("verify", "--stack", STACK, "--json", "--only", "fabric")
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)


def verify_text(p: StackProject) -> subprocess.CompletedProcess[str]:
    return p.railyard("verify", "--stack", STACK, "--only", "fabric")


def verify_until(p: StackProject, want, timeout: float = 45.0) -> tuple[int, list[dict]]:
    """Verify again until `want(findings)`: lldpd sends a frame a second in the lab, and a neighbour
    is forgotten four frames after its cable goes; a rail a node's lldpd has not heard in its first
    35 s is not judged yet (lldp.LISTENING_S)."""
    deadline = time.monotonic() + timeout
    while True:
        got = verify(p)
        if want(got[1]) or time.monotonic() > deadline:
            return got
        time.sleep(1)


def fault(p: StackProject, *args: str) -> str:
    proc = p.railyard("lab", "fault", "--stack", STACK, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def nic(p: StackProject, node: str, rail: int):
    return next(n for n in p.plan.node_named(node).nics if n.rail == rail)


def test_the_stack_as_cabled_verifies_clean_from_both_nodes_lldp(project):
    rc, found = verify_until(project, lambda f: f == [])
    assert (rc, found) == (0, []), found
    said = verify_text(project)
    assert said.returncode == 0 and "cabling: the LLDP neighbours of 2 node(s) read" in said.stdout
    switches = len(list(project.plan.fabric.switches()))
    assert f"the LLDP tables of {switches} switch(es) read (the lab's switches, with lldpcli)" in said.stdout
    assert "(fabric): as planned" in said.stdout
    # What gpu-0's rail 0 hears is its leaf and the planned port, as the leaf names it itself.
    heard = json.loads(project.ssh("gpu-0", "lldpctl -f json").stdout)["lldp"]["interface"]
    entries = dict(kv for e in (heard if isinstance(heard, list) else [heard]) for kv in e.items())
    rail0 = nic(project, "gpu-0", 0)
    chassis = entries[rail0.netdev]["chassis"]
    assert list(chassis) == [rail0.leaf]
    assert entries[rail0.netdev]["port"]["id"] == {"type": "local",
                                                   "value": port_netdev(project.plan.fabric.switch, rail0.leaf_port)}
    # The leaf hears the node's NIC by its name (the lldp role's port id subtype).
    leaf = routers.lldpcli(STACK, rail0.leaf, "-f", "json", "show", "neighbors")
    assert f'"value": "{rail0.netdev}"' in leaf.stdout


def recorded_neighbours(p: StackProject, node: str, netdev: str) -> list[tuple[str, str]]:
    """(switch, port) of each LLDP neighbour of the node's NIC, as the last refresh recorded them."""
    return [(n["system"], n["port"]) for n in recorded_facts(p, node)["lldp"]["neighbours"][netdev]]


def test_a_cable_swap_at_the_leaves_is_one_finding_and_clears(project):
    """The swap is found, and a refresh records it in the node's facts: what the NIC's lldpd heard."""
    a, b = nic(project, "gpu-1", 0), nic(project, "gpu-1", 3)
    switch = project.plan.fabric.switch
    fault(project, "cable-swap", "gpu-1", a.name, b.name)
    try:
        rc, found = verify_until(project, lambda f: len(f) == 1)
        assert rc == 1 and [(f["kind"], f["node"]) for f in found] == [("cable-swapped", "gpu-1")], found
        assert found[0]["where"] == f"gpu-1 {a.name} port 1 and gpu-1 {b.name} port 1"
        assert f"gpu-1 {a.name} port 1 to {b.leaf} port {b.leaf_port}" in found[0]["found"]
        project.pulumi("refresh", "--yes", "--skip-preview")
        assert recorded_neighbours(project, "gpu-1", a.netdev) == [(b.leaf, port_netdev(switch, b.leaf_port))]
    finally:
        fault(project, "--clear")
    assert verify_until(project, lambda f: f == []) == (0, [])
    project.pulumi("refresh", "--yes", "--skip-preview")
    assert recorded_neighbours(project, "gpu-1", a.netdev) == [(a.leaf, port_netdev(switch, a.leaf_port))]


def test_two_nodes_cables_exchanged_on_one_leaf_and_a_pulled_one(project):
    a, b = nic(project, "gpu-0", 5), nic(project, "gpu-1", 5)
    assert a.leaf == b.leaf
    fault(project, "cable-swap", "gpu-0", a.name, f"gpu-1:{b.name}")
    fault(project, "link-down", "gpu-0", nic(project, "gpu-0", 2).netdev)
    try:
        rc, found = verify_until(project, lambda f: len(f) == 2)
        assert rc == 1 and sorted((f["kind"], f["node"], f["where"]) for f in found) == [
            ("cable-swapped", "gpu-0", f"gpu-0 {a.name} port 1 and gpu-1 {b.name} port 1"),
            ("link-missing", "gpu-0", f"gpu-0 {nic(project, 'gpu-0', 2).name} port 1 <-> "
                                      f"{nic(project, 'gpu-0', 2).leaf} port {nic(project, 'gpu-0', 2).leaf_port}")], found
    finally:
        fault(project, "--clear")
    assert verify_until(project, lambda f: f == []) == (0, [])


def test_a_pulled_uplink_is_found_only_in_the_switches_tables_and_clears(project):
    """A leaf-to-spine cable no node can hear: its two switches' lldpd stop hearing each other."""
    up = next(lk for lk in project.plan.fabric.links() if lk.tier == "leaf_spine")
    a, b = cable_of(End(up.a_device, up.a_port), End(up.b_device, up.b_port))
    fault(project, "link-down", up.a_device, port_netdev(project.plan.fabric.switch, up.a_port))
    try:
        rc, found = verify_until(project, lambda f: len(f) == 1)
        assert rc == 1 and [(f["kind"], f["node"], f["where"]) for f in found] == [
            ("link-missing", None, f"{a} <-> {b}")], found
        spine = routers.lldp_table(STACK, up.b_device)
        assert port_netdev(project.plan.fabric.switch, up.b_port) not in spine
    finally:
        fault(project, "--clear")
    assert verify_until(project, lambda f: f == []) == (0, [])


def test_a_switch_whose_lldpd_is_down_is_named_and_makes_no_cable_missing(project):
    """The spine's lldpd stopped: its table cannot be read and no leaf hears it any more, which says
    nothing of its cables; the nodes' cables are still judged, from both sides."""
    spine = next(s.name for s in project.plan.fabric.switches() if s.name not in {n.leaf for n in
                                                                                   project.plan.node_named("gpu-0").nics})
    routers._lldp_stop(STACK, spine)
    try:
        # Until every leaf port has forgotten it (its shutdown frames, or at the latest its TTL: 4 s
        # here, 120 s at lldpd's defaults), a leaf still hears it on some uplinks and not on others.
        deadline = time.monotonic() + 15
        while (said := verify_text(project)).returncode != 0 and time.monotonic() < deadline:
            time.sleep(1)
        assert said.returncode == 0, said.stdout + said.stderr
        assert f"switch LLDP table not read on {spine}: lldpcli exited 1: switch {spine} runs no lldpd" in said.stdout
        assert "(fabric): as planned" in said.stdout
    finally:
        routers._lldp_start(STACK, spine)
    assert verify_until(project, lambda f: f == []) == (0, [])


def test_a_node_whose_lldpd_is_stopped_is_named_and_its_cables_not_judged(project):
    project.ssh("gpu-1", "kill $(cat /run/lldpd.pid)")
    try:
        said = verify_text(project)
        assert said.returncode == 0, said.stdout + said.stderr
        assert "LLDP not read on gpu-1: lldpctl exited 1: unable to connect to socket" in said.stdout
        assert "the LLDP neighbours of 1 node(s) read" in said.stdout
    finally:
        tune = project.railyard("tune", "--stack", STACK, "--tags", "lldp")
        assert tune.returncode == 0, tune.stdout[-2000:] + tune.stderr[-2000:]
    assert verify_until(project, lambda f: f == []) == (0, [])


def test_a_switchs_lldpd_left_behind_is_still_found_by_gc(project):
    """lldpd writes its process titles over its environment, where the lab's other daemons carry
    their RAILYARD_LAB marker: a switch whose namespace handle is gone, FRR dead and lldpd alone
    keeping it alive, is still found, by the source of the /run lldpd runs under. (The fixture's
    destroy and gc then remove it; the last test of the module, as it breaks a leaf.)"""
    leaf = nic(project, "gpu-0", 7).leaf
    ns = names.switch_ns(STACK, leaf)
    lldpd = [p.pid for p in proc.in_namespaces({net.netns_inode(ns)}) if p.argv and p.argv[0].startswith("lldpd")]
    assert lldpd and all("RAILYARD_LAB=" not in open(f"/proc/{pid}/environ").read() for pid in lldpd)
    proc.kill_all([p.pid for p in proc.in_namespaces({net.netns_inode(ns)}) if p.pid not in lldpd], what="FRR")
    subprocess.run(["ip", "netns", "delete", ns], check=True)
    found = {p["pid"]: p["owner"] for p in gc.inventory(STACK, project.dir)["processes"]}
    assert {pid: found.get(pid) for pid in lldpd} == {pid: ns for pid in lldpd}
