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


def test_a_rail_link_that_is_down_is_seen_down_by_discovery(server):
    """Links stay live: the node's rail veth taken down is what the SKU check refuses."""
    from railyard.model import hardware_check

    c, state, _, _ = server
    target = Target("gpu-0", state["mgmt_address"], host_keys=(state["host_key"],))
    sh(c, "ip link set dev ibp64s0 down")
    try:
        facts, _ = remote.host_facts(target, private_key=c.key.read_text())
    finally:
        sh(c, "ip link set dev ibp64s0 up")
    problems = [str(m) for m in hardware_check.check("gpu-0", facts, load_catalog().nodes[SKU])]
    assert [p for p in problems if "link down" in p] == ["gpu-0: mlx5_3 link down (ibp64s0 down)"], problems
