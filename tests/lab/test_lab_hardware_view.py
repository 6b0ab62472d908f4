"""A lab node shows its hardware where hardware shows itself: the tree's PCI and RDMA devices,
NUMA nodes and hugepage counters in /sys, its cmdline and meminfo in /proc, while /sys/class/net
stays the node's live interfaces and the host's own PCI devices are not seen. Discovery over SSH
then finds the SKU's GPUs on a lab node exactly as on the server it stands for."""

from __future__ import annotations

import pytest

from railyard.drivers.hosts import remote
from railyard.drivers.hosts.ssh import Target
from railyard.drivers.lab import hwtree, node
from railyard.model.catalog import load_catalog

SKU = "dgx-h100"


@pytest.fixture(scope="module")
def server(stack_factory, tmp_path_factory):
    c = stack_factory("hwview", rails=2, spine=False)
    c.create_fabric()
    tree = tmp_path_factory.mktemp("hw") / "gpu-0"
    manifest = hwtree.build_hwtree(load_catalog().nodes[SKU], tree)
    state = c.create_node("gpu-0", 0, hw_tree_source=str(tree))
    return c, state, tree, manifest


def sh(c, script: str) -> str:
    return node.run_in_node(c.stack, "gpu-0", ["sh", "-c", script], check=True).stdout


def test_the_trees_pci_and_rdma_devices_are_the_nodes_and_the_hosts_are_not(server):
    c, _, tree, _ = server
    assert sh(c, "ls /sys/bus/pci/devices").split() == sorted(p.name for p in (tree / "sys/bus/pci/devices").iterdir())
    assert sh(c, "ls /sys/class/infiniband").split() == sorted(p.name for p in (tree / "sys/class/infiniband").iterdir())
    roots = sh(c, "ls -d /sys/devices/pci*").split()
    assert roots == sorted(f"/sys/devices/{p.name}" for p in (tree / "sys/devices").glob("pci*"))
    # A device's link resolves inside the tree, as on the server.
    bdf = sorted(p.name for p in (tree / "sys/bus/pci/devices").iterdir())[-1]
    assert sh(c, f"cat /sys/bus/pci/devices/{bdf}/vendor") == (tree / f"sys/bus/pci/devices/{bdf}/vendor").read_text()


def test_links_stay_live_and_read_only(server):
    c, state, _, _ = server
    names = sh(c, "ls /sys/class/net").split()
    assert "lo" in names and all(sh(c, f"cat /sys/class/net/{n}/operstate").strip() for n in names)
    sh(c, "ip link set dev lo mtu 1500; ip link set dev lo mtu 65536")
    assert sh(c, "cat /sys/class/net/lo/mtu").strip() == "65536"
    assert node.run_in_node(c.stack, "gpu-0", ["sh", "-c", "echo 1 > /sys/class/net/lo/mtu"]).returncode != 0


def test_proc_shows_the_nodes_cmdline_and_memory(server):
    c, _, tree, _ = server
    assert sh(c, "cat /proc/cmdline") == (tree / "proc/cmdline").read_text()
    assert sh(c, "cat /proc/meminfo") == (tree / "proc/meminfo").read_text()


def test_discovery_over_ssh_finds_the_skus_gpus_on_the_lab_node(server):
    from railyard.model import hardware_check

    c, state, _, _ = server
    target = Target("gpu-0", state["mgmt_address"], host_keys=(state["host_key"],))
    facts, _ = remote.host_facts(target, private_key=c.key.read_text())
    sku = load_catalog().nodes[SKU]
    from railyard.model.pci_layout import layout

    where = layout(sku).bus_ids  # the addresses the tree gives the SKU's devices
    assert sorted(g["bdf"] for g in facts["gpus"]) == sorted(where[g.name] for g in sku.gpus)
    # The whole SKU check passes: a lab node is, to discovery, the server it stands for.
    assert [str(m) for m in hardware_check.check("gpu-0", facts, sku)] == []


def _peer(c, netdev: str) -> str:
    """The fabric's end of a node's rail veth: the cable a technician would pull."""
    import subprocess

    from railyard.drivers.lab import names

    index = sh(c, f"cat /sys/class/net/{netdev}/iflink").strip()
    out = subprocess.run(["ip", "-n", names.fabric_ns(c.stack), "-o", "link"], capture_output=True, text=True,
                         check=True).stdout
    return next(line.split(": ")[1].split("@")[0] for line in out.splitlines() if line.startswith(f"{index}: "))


def _link_problems(c, state) -> list[str]:
    from railyard.model import hardware_check

    target = Target("gpu-0", state["mgmt_address"], host_keys=(state["host_key"],))
    facts, _ = remote.host_facts(target, private_key=c.key.read_text())
    return [str(m) for m in hardware_check.check("gpu-0", facts, load_catalog().nodes[SKU]) if "link" in str(m)]


def test_a_rail_whose_cable_is_pulled_is_refused_and_one_not_configured_yet_is_not(server):
    """Links stay live: the fabric's end of a rail taken down leaves the node's interface without
    carrier, which the SKU check refuses; an interface merely not configured up yet (a server
    before its rails are set up) is judged by its RDMA port, which is up."""
    import subprocess

    from railyard.drivers.lab import names

    c, state, _, _ = server
    peer = _peer(c, "ibp64s0")
    fabric = ["ip", "-n", names.fabric_ns(c.stack), "link", "set", "dev", peer]
    subprocess.run([*fabric, "down"], check=True)
    try:
        assert _link_problems(c, state) == ["gpu-0: mlx5_3 link down (ibp64s0 down)"]  # operstate of a veth whose peer is down
    finally:
        subprocess.run([*fabric, "up"], check=True)
    sh(c, "ip link set dev ibp64s0 down")
    try:
        assert _link_problems(c, state) == []
    finally:
        sh(c, "ip link set dev ibp64s0 up")
