"""The lab runtime on real namespaces: reachability, isolation from the host, idempotence, cleanup."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from railyard.drivers.lab import fabric, gc, names, net, node, proc
from railyard.drivers.lab.errors import LabError

from .conftest import RAIL_NICS


def in_node(cluster, name: str, *argv: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return node.run_in_node(cluster.stack, name, list(argv), check=check, timeout=30)


def hops(cluster, name: str, src: str, dst: str) -> list[str]:
    """traceroute from `name`, one probe at a time, source-bound to `src`: the hop addresses."""
    out = in_node(cluster, name, "traceroute", "-n", "-q", "1", "-N", "1", "-w", "2", "-m", "5", "-s", src, dst,
                  check=True).stdout
    found = []
    for line in out.splitlines()[1:]:
        fields = line.split()
        found.append(fields[1] if len(fields) > 1 else "*")
    return found


def ping_ttl(cluster, name: str, src: str, dst: str, ttl: int) -> bool:
    return in_node(cluster, name, "ping", "-n", "-c", "1", "-W", "2", "-t", str(ttl), "-I", src, dst).returncode == 0


def sshd_pid(state: dict) -> int:
    return int(Path(f"/proc/{state['init_pid']}/root/run/sshd.pid").read_text())


def host_objects(stack: str) -> dict:
    """What the host shows of a stack, through the tools a person would use: netns and links
    (the root namespace's, and the fabric namespace's ports while it exists), mounts, processes."""
    prefix = names.stack_prefix(stack)
    sh = lambda *a: subprocess.run(list(a), capture_output=True, text=True, check=True).stdout
    netns = [l.split()[0] for l in sh("ip", "netns", "list").splitlines() if l.startswith(prefix)]
    link_names = lambda out: [l.split(":")[1].strip().split("@")[0] for l in out.splitlines()]
    links = [n for n in link_names(sh("ip", "-o", "link", "show")) if n.startswith(prefix)]
    fab = names.fabric_ns(stack)
    if fab in netns:
        links += [f"{fab}/{n}" for n in link_names(sh("ip", "-n", fab, "-o", "link", "show")) if n != "lo"]
    mounts = Path("/proc/self/mounts").read_text()
    ps = sh("ps", "-eo", "pid=,args=")
    return {
        "netns": netns,
        "links": links,
        "mounts": [l for l in mounts.splitlines() if prefix in l or f"/lab/{stack}/" in l],
        "processes": [l for l in ps.splitlines() if re.search(rf"\s{re.escape(prefix)}init:", l)],
    }


# --- reachability ------------------------------------------------------------------------------

def test_ssh_from_the_host_with_the_returned_host_key_reaches_the_node(cluster, tmp_path):
    result = cluster.ssh("gpu-0", "hostname; id -u", tmp=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["gpu-0", "0"]


def test_ssh_refuses_a_node_whose_host_key_differs_from_the_returned_one(cluster, tmp_path):
    other = node.read_node(cluster.stack, "gpu-1")["host_key"]
    assert other != node.read_node(cluster.stack, "gpu-0")["host_key"], "host keys must be per node"
    result = cluster.ssh("gpu-0", "true", host_key=other, tmp=tmp_path)
    assert result.returncode != 0
    assert "host key" in result.stderr.lower()


def test_sshd_listens_on_the_management_address_only(cluster):
    mgmt = node.read_node(cluster.stack, "gpu-0")["mgmt_address"]
    out = in_node(cluster, "gpu-0", "ss", "-Htln", check=True).stdout
    listeners = {line.split()[3] for line in out.splitlines()}
    assert listeners == {f"{mgmt}:22"}, listeners


def test_same_rail_is_one_hop(cluster):
    for rail in (0, 5):
        src, dst = cluster.rail_address("gpu-0", rail), cluster.rail_address("gpu-1", rail)
        assert hops(cluster, "gpu-0", src, dst) == [dst], f"rail {rail}"
        assert ping_ttl(cluster, "gpu-0", src, dst, ttl=1), f"rail {rail}: TTL 1 must reach the same rail"


def test_cross_rail_crosses_the_spine_in_two_hops(cluster):
    src, dst = cluster.rail_address("gpu-0", 0), cluster.rail_address("gpu-1", 3)
    assert hops(cluster, "gpu-0", src, dst) == [cluster.gateway(0), dst]
    assert not ping_ttl(cluster, "gpu-0", src, dst, ttl=1), "TTL 1 must expire at the spine"
    assert ping_ttl(cluster, "gpu-0", src, dst, ttl=2)


def test_nics_carry_the_sku_names(cluster):
    nics = node.read_node(cluster.stack, "gpu-1")["nics"]
    assert set(nics) == {*RAIL_NICS, "eno3", "enp170s0f1"}
    assert nics["ibp24s0"] == [f"{cluster.rail_address('gpu-1', 0)}/24"]


# --- isolation from the host -------------------------------------------------------------------

def test_node_hostname_is_its_own_and_the_host_keeps_its_own(cluster):
    before = socket.gethostname()
    assert in_node(cluster, "gpu-1", "hostname", check=True).stdout.strip() == "gpu-1"
    in_node(cluster, "gpu-1", "hostname", "renamed-inside")
    assert socket.gethostname() == before
    in_node(cluster, "gpu-1", "hostname", "gpu-1")


def test_writes_to_proc_sys_inside_a_node_fail_and_the_host_value_stays(cluster):
    host_value = Path("/proc/sys/vm/swappiness").read_text()
    result = in_node(cluster, "gpu-0", "sh", "-c", "echo 7 > /proc/sys/vm/swappiness")
    assert result.returncode != 0 and "Read-only" in result.stderr
    result = in_node(cluster, "gpu-0", "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
    assert result.returncode != 0
    assert Path("/proc/sys/vm/swappiness").read_text() == host_value


def test_sys_is_read_only_and_shows_the_nodes_own_interfaces(cluster):
    result = in_node(cluster, "gpu-0", "sh", "-c", "ls /sys/class/net; touch /sys/kernel/x")
    assert result.returncode != 0 and "Read-only" in result.stderr
    assert set(result.stdout.split()) == {"lo", *RAIL_NICS, "eno3", "enp170s0f1"}


def test_node_processes_lack_cap_sys_boot_and_cap_sys_module(cluster, tmp_path):
    for how in ("nsenter", "ssh"):
        if how == "ssh":
            status = cluster.ssh("gpu-0", "cat /proc/self/status", tmp=tmp_path).stdout
        else:
            status = in_node(cluster, "gpu-0", "cat", "/proc/self/status", check=True).stdout
        bnd = int(re.search(r"CapBnd:\s*([0-9a-f]+)", status).group(1), 16)
        for cap, bit in (("CAP_SYS_BOOT", 22), ("CAP_SYS_MODULE", 16)):
            assert not bnd & (1 << bit), f"{how}: {cap} is in the bounding set"


def test_node_has_no_default_route(cluster):
    for name in ("gpu-0", "gpu-1"):
        routes = in_node(cluster, name, "ip", "-4", "route", "show", "table", "all", check=True).stdout
        assert not [r for r in routes.splitlines() if r.startswith("default")], routes


def test_host_routes_only_the_management_network_and_does_not_forward(cluster):
    link = names.host_link(cluster.stack)
    routes = [r for r in net.routes(None, "main") if r.get("dev") == link]
    assert [r["dst"] for r in routes] == [cluster.mgmt_cidr]
    assert Path(f"/proc/sys/net/ipv4/conf/{link}/forwarding").read_text().strip() == "0"


def test_node_mounts_are_private_to_the_node(cluster):
    host_mounts = Path("/proc/self/mounts").read_text()
    for fs in (names.mount_marker(cluster.stack, "gpu-0"), "ry-etc", "ry-var", "ry-tmp"):
        assert fs not in host_mounts
    inside = in_node(cluster, "gpu-0", "cat", "/proc/self/mounts", check=True).stdout
    targets = {line.split()[1]: line.split()[0] for line in inside.splitlines()}
    assert targets["/run"] == names.mount_marker(cluster.stack, "gpu-0")
    assert targets["/etc"] == "ry-etc" and targets["/tmp"] == "ry-tmp"
    assert "/run/railyard/hw" in targets and "/boot" in targets and "/root" in targets and "/mnt" in targets


def test_etc_written_in_a_node_stays_in_the_node(cluster):
    in_node(cluster, "gpu-0", "sh", "-c", "echo lab > /etc/railyard-test-marker", check=True)
    assert not Path("/etc/railyard-test-marker").exists()
    assert in_node(cluster, "gpu-1", "test", "-e", "/etc/railyard-test-marker").returncode != 0
    d = node.node_dir(cluster.stack, "gpu-0")
    assert (d / "etc" / "railyard-test-marker").read_text() == "lab\n"


def test_the_hosts_filesystem_is_read_only_outside_the_nodes_own_dirs(cluster):
    for path in ("/usr/local/railyard-test", "/opt/railyard-test", "/railyard-test"):
        result = in_node(cluster, "gpu-0", "touch", path)
        assert result.returncode != 0 and "Read-only" in result.stderr, path
        assert not Path(path).exists()
    for path in ("/var/log/railyard-test", "/root/railyard-test", "/boot/railyard-test", "/mnt/railyard-test",
                 "/tmp/railyard-test"):
        assert in_node(cluster, "gpu-0", "touch", path).returncode == 0, path
        assert not Path(path).exists(), f"{path} written in a node appeared on the host"


def test_a_bootloader_change_waits_for_the_reboot_and_a_reboot_restarts_the_node(cluster, tmp_path):
    from railyard.drivers.lab.node import power

    assert node.reboot_pending(cluster.stack, "gpu-1") == []
    in_node(cluster, "gpu-1", "sh", "-c", "mkdir -p /etc/default/grub.d && echo 'GRUB_CMDLINE_LINUX="
            "\"${GRUB_CMDLINE_LINUX} iommu=pt\"' > /etc/default/grub.d/t.cfg", check=True)
    running = in_node(cluster, "gpu-1", "cat", "/proc/cmdline", check=True).stdout
    assert in_node(cluster, "gpu-1", "update-grub").returncode == 0
    # The next boot's command line is the first one with the drop-in's argument; this boot's is unchanged.
    assert in_node(cluster, "gpu-1", "cat", "/boot/railyard/cmdline", check=True).stdout.split() == \
        running.split() + ["iommu=pt"]
    assert in_node(cluster, "gpu-1", "cat", "/proc/cmdline", check=True).stdout == running
    assert [(p["kind"], p["command"]) for p in node.reboot_pending(cluster.stack, "gpu-1")] == [
        ("bootloader", "update-grub")]
    assert in_node(cluster, "gpu-1", "test", "-e", "/run/reboot-required").returncode == 0
    assert node.read_node(cluster.stack, "gpu-0")["reboot_pending"] is False

    init, boot = node.init_pid(cluster.stack, "gpu-1"), power.boot_id(cluster.stack, "gpu-1")
    events = len(power.events(cluster.stack, "gpu-1"))
    # By name, on the node's PATH, where the lab's shim stands: a host without systemd (a fresh
    # Debian minbase root) has no /sbin/shutdown for the shim to be bound over.
    in_node(cluster, "gpu-1", "shutdown", "-r", "now")
    # A reboot takes about a second; the bound is for a machine busy with other test workers.
    assert power.wait_events(cluster.stack, "gpu-1", events, 2, within=90) == ["off", "on"], \
        "gpu-1 did not come back within 90 s"
    assert power.boot_id(cluster.stack, "gpu-1") not in (None, boot)
    state = node.read_node(cluster.stack, "gpu-1")
    assert state["init_pid"] != init and state["sshd"] and state["agent"]
    # A new boot: its own boot id, an empty /run, what the node keeps on disk kept.
    assert in_node(cluster, "gpu-1", "cat", "/proc/sys/kernel/random/boot_id", check=True).stdout.strip() == \
        power.boot_id(cluster.stack, "gpu-1") != boot
    assert in_node(cluster, "gpu-1", "test", "-e", "/run/reboot-required").returncode != 0
    assert node.reboot_pending(cluster.stack, "gpu-1") == []
    assert in_node(cluster, "gpu-1", "test", "-e", "/etc/default/grub.d/t.cfg").returncode == 0
    assert cluster.ssh("gpu-1", "hostname", tmp=tmp_path).stdout.strip() == "gpu-1"
    in_node(cluster, "gpu-1", "rm", "-f", "/etc/default/grub.d/t.cfg", check=True)


def test_hw_tree_is_at_run_railyard_hw(cluster):
    d = node.node_dir(cluster.stack, "gpu-0") / "hw"
    (d / "probe").write_text("from the host\n")
    assert in_node(cluster, "gpu-0", "cat", "/run/railyard/hw/probe", check=True).stdout == "from the host\n"


# --- idempotence, adoption, cleanup -------------------------------------------------------------

def test_create_again_changes_nothing_and_returns_the_same_state(cluster):
    before = {n: node.read_node(cluster.stack, n) for n in ("gpu-0", "gpu-1")}
    fab = fabric.read_fabric(cluster.stack)
    assert cluster.create_fabric() == fab
    for i, n in enumerate(("gpu-0", "gpu-1")):
        started = time.monotonic()
        again = node.create_node(cluster.stack, n, **cluster.node_args(i))
        assert time.monotonic() - started < 1.0
        assert again == before[n], n


def test_create_adopts_a_partially_created_node(stack_factory, tmp_path):
    c = stack_factory("adopt", rails=2)
    c.create_fabric()
    name, ns, fab = "half", names.node_ns(c.stack, "half"), names.fabric_ns(c.stack)
    # What a create killed halfway can leave: the netns, one NIC's fabric end without its node
    # end, and a runtime dir with only part of its files.
    net.netns_add(ns)
    net.ip("link", "add", names.node_port(name, 0), "type", "veth", "peer", "name", "dangling", netns=fab, obj="test")
    (node.node_dir(c.stack, name) / "etc").mkdir(parents=True)
    state = c.create_node(name, 0)
    assert state["running"] and state["sshd"]
    assert "dangling" not in net.links(fab)
    assert c.ssh(name, "hostname", tmp=tmp_path).stdout.strip() == name


def test_create_repairs_a_node_whose_init_died_or_whose_netns_was_removed(stack_factory, tmp_path):
    c = stack_factory("repair", rails=2)
    c.create_fabric()
    state = c.create_node("rep", 0)
    key = state["host_key"]

    proc.kill_all([state["init_pid"]], what="test")
    net.link_delete(RAIL_NICS[1], names.node_ns(c.stack, "rep"))
    assert node.read_node(c.stack, "rep")["running"] is False
    state = c.create_node("rep", 0)
    assert state["running"] and state["sshd"] and state["host_key"] == key
    assert RAIL_NICS[1] in state["nics"]
    assert c.ssh("rep", "true", tmp=tmp_path).returncode == 0

    old = [state["init_pid"], sshd_pid(state)]
    subprocess.run(["ip", "netns", "delete", names.node_ns(c.stack, "rep")], check=True)
    assert node.read_node(c.stack, "rep") is None and not node.node_exists(c.stack, "rep")
    state = c.create_node("rep", 0)
    assert state["running"] and not [p for p in old if proc.alive(p)], "the earlier incarnation lingers"
    assert c.ssh("rep", "true", tmp=tmp_path).returncode == 0


def test_delete_leaves_no_namespace_link_process_mount_or_dir(stack_factory):
    c = stack_factory("delete", rails=2)
    c.create_fabric()
    state = c.create_node("del-0", 0)
    pids = [state["init_pid"], sshd_pid(state)]
    d = node.node_dir(c.stack, "del-0")
    node_objects = lambda: {k: [x for x in v if "del-0" in x] for k, v in host_objects(c.stack).items()}
    # the node's netns, its fabric ports, the netns handle's mount, its init
    assert all(node_objects().values()), node_objects()

    assert node.delete_node(c.stack, "del-0") == {"id": names.node_ns(c.stack, "del-0"), "deleted": True}
    assert not any(node_objects().values()), node_objects()
    assert not [p for p in pids if proc.alive(p)]
    assert not d.exists()
    assert not node._own_ports("del-0", net.links(names.fabric_ns(c.stack)))
    assert node.delete_node(c.stack, "del-0")["deleted"] is False  # deleting what is gone succeeds

    fabric.delete_spine(c.stack)
    fabric.delete_fabric(c.stack)
    assert not any(host_objects(c.stack).values()), host_objects(c.stack)
    assert fabric.read_fabric(c.stack) is None and fabric.delete_fabric(c.stack)["deleted"] is False


def test_gc_removes_orphans_and_keeps_known_objects(stack_factory, tmp_path):
    c = stack_factory("gc", rails=2)
    c.create_fabric()
    c.create_node("keep", 0)
    known = c.ids()
    orphan = node.create_node(c.stack, "orphan", **c.node_args(1))
    orphan_sshd = sshd_pid(orphan)
    stray_ns = names.stack_prefix(c.stack) + "n-ghost"
    net.netns_add(stray_ns)
    # A node whose netns handle went behind our back: its processes hold the namespace alive.
    lost = node.create_node(c.stack, "lost", **c.node_args(2))
    lost_pids = [lost["init_pid"], sshd_pid(lost)]
    subprocess.run(["ip", "netns", "delete", lost["id"]], check=True)

    removed = gc.gc(c.stack, known)
    assert set(removed["netns"]) == {orphan["id"], stray_ns}
    assert not proc.alive(orphan["init_pid"]) and not proc.alive(orphan_sshd)
    assert not [p for p in lost_pids if proc.alive(p)]
    inv = gc.inventory(c.stack)
    assert set(inv["netns"]) == known
    assert {p["node"] for p in inv["processes"]} == {"keep"}
    assert [Path(x).name for x in inv["dirs"] if "/nodes/" in x] == ["keep"]
    assert c.ssh("keep", "true", tmp=tmp_path).returncode == 0

    gc.destroy_all(c.stack)
    assert gc.inventory(c.stack) == {"stack": c.stack, "netns": [], "host_links": [], "processes": [],
                                      "mounts": [], "loops": [], "dirs": []}
    assert not any(host_objects(c.stack).values())


# --- several stacks, bad input ----------------------------------------------------------------

def test_a_second_stack_runs_beside_the_first_with_its_own_management_network(cluster, stack_factory):
    other = stack_factory("beside", rails=1, spine=False)
    other.create_fabric()
    assert names.host_link(other.stack) != names.host_link(cluster.stack)
    with pytest.raises(LabError, match="overlaps"):
        fabric.create_fabric(f"{other.stack}-x", rails=1, mgmt_cidr=cluster.mgmt_cidr,
                             host_address=str(cluster.mgmt.network_address + 200))
    assert not net.netns_exists(names.fabric_ns(f"{other.stack}-x"))


def test_addresses_outside_the_lab_block_are_refused_before_anything_changes(stack_factory):
    c = stack_factory("refuse", rails=1)
    with pytest.raises(LabError, match="198.18.0.0/15"):
        fabric.create_fabric(c.stack, rails=1, mgmt_cidr="10.0.0.0/24", host_address="10.0.0.1")
    assert not net.netns_exists(names.fabric_ns(c.stack))


# --- create and delete, one after another --------------------------------------------------

def test_nodes_are_created_and_deleted_one_after_another_leaving_nothing(stack_factory, record_property):
    # How fast (issue 5: well within a second each way) is a benchmark figure: `railyard bench
    # --section lab-node`. Here: each create leaves a running node, each delete leaves nothing.
    c = stack_factory("speed")
    c.create_fabric()
    create, delete = [], []
    for i in range(3):
        started = time.monotonic()
        state = c.create_node(f"s-{i}", i)
        create.append(time.monotonic() - started)
        assert state["sshd"] and state["agent"] and net.netns_exists(names.node_ns(c.stack, f"s-{i}"))
    for i in range(3):
        started = time.monotonic()
        node.delete_node(c.stack, f"s-{i}")
        delete.append(time.monotonic() - started)
        assert not net.netns_exists(names.node_ns(c.stack, f"s-{i}"))
        assert not node.node_dir(c.stack, f"s-{i}").exists()
    record_property("node_create_s", create)
    record_property("node_delete_s", delete)
    print(f"\nlab node (8 rails) create: {['%.3f' % t for t in create]}s delete: {['%.3f' % t for t in delete]}s")


def test_nodes_created_concurrently_all_come_up(stack_factory, tmp_path, record_property):
    from concurrent.futures import ThreadPoolExecutor

    c = stack_factory("parallel")
    c.create_fabric()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        states = list(pool.map(lambda i: c.create_node(f"p-{i}", i), range(4)))
    took = time.monotonic() - started
    record_property("four_nodes_parallel_s", took)
    print(f"\n4 lab nodes (8 rails) created concurrently in {took:.3f}s")
    assert all(s["running"] and s["sshd"] for s in states)
    assert len({s["host_key"] for s in states}) == 4
    for i in range(1, 4):
        assert ping_ttl(c, "p-0", c.rail_address("p-0", i), c.rail_address(f"p-{i}", i), ttl=1)


def test_hw_tree_source_is_shown_at_run_railyard_hw_and_a_change_restarts_the_node(stack_factory, tmp_path):
    c = stack_factory("hw", rails=1)
    c.create_fabric()
    first, second = tmp_path / "hw-a", tmp_path / "hw-b"
    for d, text in ((first, "a"), (second, "b")):
        (d / "sys" / "bus" / "pci").mkdir(parents=True)
        (d / "proc").mkdir()
        (d / "proc" / "cmdline").write_text(text)
    state = c.create_node("hw-0", 0, hw_tree_source=str(first))
    assert in_node(c, "hw-0", "cat", "/run/railyard/hw/proc/cmdline", check=True).stdout == "a"
    assert c.create_node("hw-0", 0, hw_tree_source=str(first))["init_pid"] == state["init_pid"]
    c.create_node("hw-0", 0, hw_tree_source=str(second))
    assert in_node(c, "hw-0", "cat", "/run/railyard/hw/proc/cmdline", check=True).stdout == "b"
