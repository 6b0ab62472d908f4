"""A RoCE fabric routed by FRR in the lab: every planned switch a namespace running Debian's FRR
on the frr.conf `railyard plan --frr` renders, cabled by veths as the plan cables it. The plan is
the lab-virtual stack's, cut into scalable units of one host (reservedLeafPorts) so that one rail
spans two leaves: 4 leaves and a spine, each leaf with 4 uplinks.

Hosts stand in as plain namespaces on the leaves' host bridges, with the plan's rail addresses
and one static route to the compute network through their rail's anycast gateway, as the hosts
driver and the lab's nodes have it. They run no BGP."""

from __future__ import annotations

import copy
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from railyard.drivers.lab import names, net, proc, routers
from railyard.model.plan import make_plan
from railyard.stack import parse_config
from railyard.switches import frr_config

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root")

ROOT = Path(__file__).resolve().parents[2]
STACK = "trtr"
STUB = "rytest-rt-"  # the stand-in hosts' namespaces: not the stack's, so the stack's cleanup is judged alone


def plan_of_the_stack():
    config = copy.deepcopy(yaml.safe_load((ROOT / "stacks/Pulumi.lab-virtual.yaml").read_text())["config"])
    config["railyard:fabric"]["compute"].update(reservedLeafPorts=127, oversubscription=32)
    return make_plan(parse_config(config, stack=STACK))


def switches_of(plan) -> list[dict]:
    return [{"name": r.name, "leaf": r.tier == "leaf", "frr_conf": frr_config(r, STACK, routers.log_file(r.name)),
             "sessions": [{"interface": s.interface, "peer": s.peer, "peer_interface": s.peer_interface}
                          for s in r.sessions]} for r in plan.routers()]


def add_host(stub: str, leaf: str, address: str, prefixlen: int, gateway: str, compute: str, mtu: int) -> None:
    ns = STUB + stub
    subprocess.run(["ip", "netns", "add", ns], check=True)
    sw = names.switch_ns(STACK, leaf)
    for argv in (["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"h-{stub}", "netns", sw],
                 ["ip", "-n", ns, "link", "set", "eth0", "mtu", str(mtu), "up"], ["ip", "-n", ns, "link", "set", "lo", "up"],
                 ["ip", "-n", ns, "addr", "add", f"{address}/{prefixlen}", "dev", "eth0"],
                 ["ip", "-n", ns, "route", "add", compute, "via", gateway],
                 ["ip", "-n", sw, "link", "set", f"h-{stub}", "mtu", str(mtu), "master", routers.HOST_SIDE, "up"]):
        subprocess.run(argv, check=True, capture_output=True)


def ping(stub: str, address: str) -> bool:
    return subprocess.run(["ip", "netns", "exec", STUB + stub, "ping", "-c", "2", "-W", "2", "-i", "0.3", address],
                          capture_output=True).returncode == 0


def best_hops(stack: str, switch: str, prefix: str) -> tuple[str | None, set[str]]:
    """(protocol, active next-hop interfaces) of the switch's selected route to the prefix."""
    best = [r for r in routers.status(stack, switch)["routes"].get(prefix, []) if r.get("selected")]
    if not best:
        return None, set()
    return best[0]["protocol"], {h["interfaceName"] for h in best[0]["nexthops"] if h.get("active")}


def settled(stack: str, switch: str, want: dict[str, tuple[str, set[str]]], timeout: float = 60.0) -> dict:
    """{prefix: (protocol, hops)} once it equals `want`, or as it stands at the timeout. Sessions
    come up before their updates are exchanged and best paths re-run, so a route table read the
    moment the last session is Established can still lack an uplink (as on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        got = {prefix: best_hops(stack, switch, prefix) for prefix in want}
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


@pytest.fixture(scope="module")
def fabric():
    plan = plan_of_the_stack()
    compute = plan.networks.compute
    try:
        state = routers.ensure(STACK, switches_of(plan), compute.mtu)
        for node in plan.nodes:
            for nic in node.nics:
                add_host(f"{node.index}{nic.rail}", nic.leaf, nic.ip, nic.prefixlen, compute.rails[nic.rail].gateway,
                         compute.cidr, compute.mtu)
        yield plan, state
    finally:
        for ns in net.netns_list(STUB):
            subprocess.run(["ip", "netns", "del", ns], check=False)
        routers.delete_all(STACK)


def test_every_switch_runs_frr_and_every_planned_session_is_established(fabric):
    plan, state = fabric
    expected = {r.name: {s.interface for s in r.sessions} for r in plan.routers()}
    assert {n: set(s["ports"]) for n, s in state["switches"].items()} == expected
    assert all({"zebra", "bgpd", "staticd", "watchfrr"} <= set(s["frr"]) for s in state["switches"].values())
    states = routers.wait_established(STACK, list(expected))
    for r in plan.routers():
        assert states[r.name] == {s.peer_address: "Established" for s in r.sessions}, r.name


def test_each_leaf_has_ecmp_routes_across_its_uplinks_to_every_other_leafs_hosts(fabric):
    plan, _ = fabric
    leaves = [r for r in plan.routers() if r.tier == "leaf"]
    routers.wait_established(STACK, [r.name for r in plan.routers()])
    for leaf in leaves:
        uplinks = {s.interface for s in leaf.sessions}
        want = {prefix: ("bgp", uplinks) for other in leaves if other.name != leaf.name for prefix in other.host_prefixes}
        assert settled(STACK, leaf.name, want) == want, leaf.name


def test_hosts_reach_each_other_across_leaves_and_rails_and_still_do_with_an_uplink_down(fabric):
    plan, _ = fabric
    routers.wait_established(STACK, [r.name for r in plan.routers()])
    a, b = plan.nodes
    leaf = next(r for r in plan.routers() if r.name == a.nics[0].leaf)
    prefix = next(r for r in plan.routers() if r.name == b.nics[0].leaf).host_prefixes[0]
    everything = {prefix: ("bgp", {s.interface for s in leaf.sessions})}
    assert settled(STACK, leaf.name, everything) == everything
    # Same rail behind another leaf (the leaf answers ARP for it), and another rail (through the gateway).
    assert ping(f"{a.index}0", b.nics[0].ip)
    assert ping(f"{a.index}0", b.nics[1].ip)
    down = leaf.sessions[0]
    net.ip("link", "set", down.interface, "down", netns=names.switch_ns(STACK, leaf.name), obj="test")
    try:
        want = {prefix: ("bgp", {s.interface for s in leaf.sessions} - {down.interface})}
        assert settled(STACK, leaf.name, want) == want
        assert ping(f"{a.index}0", b.nics[0].ip) and ping(f"{a.index}0", b.nics[1].ip)
    finally:
        net.ip("link", "set", down.interface, "up", netns=names.switch_ns(STACK, leaf.name), obj="test")


def test_a_second_ensure_restarts_nothing_and_delete_leaves_nothing(fabric):
    plan, _ = fabric
    pids = {p.pid for name in routers.read(STACK)["switches"]
            for p in proc.in_namespaces({net.netns_inode(names.switch_ns(STACK, name))})}
    routers.ensure(STACK, switches_of(plan), plan.networks.compute.mtu)
    after = {p.pid for name in routers.read(STACK)["switches"]
             for p in proc.in_namespaces({net.netns_inode(names.switch_ns(STACK, name))})}
    assert after == pids
    # Nothing of FRR's on the host's own paths: every switch's files are under its directory.
    assert not any(Path("/etc/frr", r.name).exists() or Path("/var/run/frr", r.name).exists()
                   for r in plan.routers())


def test_a_changed_configuration_restarts_that_switch_only_and_its_sessions_come_back(fabric):
    plan, _ = fabric

    def pids() -> dict[str, set[int]]:
        return {name: {p.pid for p in proc.in_namespaces({net.netns_inode(names.switch_ns(STACK, name))})}
                for name in routers.read(STACK)["switches"]}

    before = pids()
    switches = switches_of(plan)
    changed = switches[0]["name"]
    switches[0] = {**switches[0], "frr_conf": switches[0]["frr_conf"] + "! edited\n"}
    routers.ensure(STACK, switches, plan.networks.compute.mtu)
    after = pids()
    assert {n for n in before if before[n] != after[n]} == {changed}
    try:
        states = routers.wait_established(STACK, [changed])
        assert states[changed] and set(states[changed].values()) == {"Established"}
    finally:
        routers.ensure(STACK, switches_of(plan), plan.networks.compute.mtu)


def test_a_namespace_deleted_while_frr_runs_is_not_kept_alive_by_its_mounts(fabric):
    """FRR's mount namespace is a private copy of the host's mounts as they were when it started,
    /run/netns's binds among them. A namespace the host deletes later (a node taken out) must not
    live on there, unseen by `ip netns` and gc, while the switch runs: `ip netns del` unlinks its
    file, and the kernel (since 3.18) detaches a mount whose mount point is unlinked in every
    namespace, a private copy's too."""
    plan, _ = fabric
    doomed = STUB + "pin"
    subprocess.run(["ip", "netns", "add", doomed], check=True)
    switches = switches_of(plan)
    switch = switches[0]["name"]
    try:
        switches[0] = {**switches[0], "frr_conf": switches[0]["frr_conf"] + "! restarted\n"}
        routers.ensure(STACK, switches, plan.networks.compute.mtu)  # FRR starts again with the namespace there
    finally:
        subprocess.run(["ip", "netns", "del", doomed], check=True)
    try:
        frr = [p.pid for p in proc.in_namespaces({net.netns_inode(names.switch_ns(STACK, switch))})
               if p.argv and not p.argv[0].rsplit("/", 1)[-1].startswith("lldpd")]
        assert frr
        held = [pid for pid in frr if f"/run/netns/{doomed} " in Path(f"/proc/{pid}/mountinfo").read_text()]
        assert held == [], f"FRR's mounts keep {doomed} alive"
    finally:
        routers.ensure(STACK, switches_of(plan), plan.networks.compute.mtu)


def test_delete_all_leaves_no_namespace_process_or_directory(fabric):
    plan, _ = fabric
    ensured = routers.read(STACK)["switches"]
    assert len(ensured) == len(plan.routers())
    routers.delete_all(STACK)
    assert net.netns_list(names.stack_prefix(STACK)) == []
    assert not proc.marked(names.ENV_MARKER, lambda v: v.startswith(names.stack_tag(STACK) + ":"))
    assert not routers.switches_dir(STACK).exists()
