"""PCIe distance classes from a bridge tree: one worked example per class, then the error cases."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from railyard.model import pcie

from railyard.model.pcie import (
    ENDPOINT,
    HOST_BRIDGE,
    ROOT_PORT,
    SWITCH,
    PcieError,
    PcieNode,
    PcieTree,
    distance_class,
)


def _tree() -> PcieTree:
    """Two NUMA nodes. NUMA 0: host bridge hb0 -> root port rp0 -> switch top -> switches a, b;
    a holds gpu0 + nic0, b holds gpu1; the dual-port adapter's functions f0/f1 sit on root port rp1
    of hb0; hb1 (also NUMA 0) holds nvme on its root port; NUMA 1: hb2 holds gpu2 directly."""
    return PcieTree([
        PcieNode("hb0", HOST_BRIDGE, numa=0),
        PcieNode("hb1", HOST_BRIDGE, numa=0),
        PcieNode("hb2", HOST_BRIDGE, numa=1),
        PcieNode("rp0", ROOT_PORT, "hb0"),
        PcieNode("top", SWITCH, "rp0"),
        PcieNode("a", SWITCH, "top"),
        PcieNode("b", SWITCH, "top"),
        PcieNode("gpu0", ENDPOINT, "a"),
        PcieNode("nic0", ENDPOINT, "a"),
        PcieNode("gpu1", ENDPOINT, "b"),
        PcieNode("rp1", ROOT_PORT, "hb0"),
        PcieNode("f0", ENDPOINT, "rp1"),
        PcieNode("f1", ENDPOINT, "rp1"),
        PcieNode("rp2", ROOT_PORT, "hb1"),
        PcieNode("nvme", ENDPOINT, "rp2"),
        PcieNode("gpu2", ENDPOINT, "hb2"),
        PcieNode("gpu3", ENDPOINT, "hb2"),
    ])


def test_two_devices_on_one_switch_are_pix():
    assert distance_class(_tree(), "gpu0", "nic0") == "PIX"


def test_two_functions_behind_one_root_port_are_pix():
    assert distance_class(_tree(), "f0", "f1") == "PIX"


def test_a_path_through_several_switches_below_the_host_bridge_is_pxb():
    assert distance_class(_tree(), "gpu1", "nic0") == "PXB"


def test_a_path_through_the_host_bridge_is_phb():
    assert distance_class(_tree(), "gpu0", "f0") == "PHB"
    assert distance_class(_tree(), "gpu2", "gpu3") == "PHB"


def test_host_bridges_of_one_numa_node_are_node():
    assert distance_class(_tree(), "gpu0", "nvme") == "NODE"


def test_host_bridges_of_different_numa_nodes_are_sys():
    assert distance_class(_tree(), "gpu0", "gpu2") == "SYS"


def test_distance_is_symmetric():
    tree = _tree()
    ends = [n.id for n in tree if n.kind == ENDPOINT]
    for a in ends:
        for b in ends:
            if a != b:
                assert distance_class(tree, a, b) == distance_class(tree, b, a), f"{a}<->{b}"


def test_host_bridges_of_unknown_numa_are_sys_because_locality_is_unproven():
    tree = PcieTree([
        PcieNode("h0", HOST_BRIDGE), PcieNode("h1", HOST_BRIDGE),
        PcieNode("x", ENDPOINT, "h0"), PcieNode("y", ENDPOINT, "h1"),
    ])
    assert tree.distance_class("x", "y") == "SYS"


def test_numa_is_inherited_from_the_host_bridge():
    tree = _tree()
    assert tree.numa("nic0") == 0 and tree.numa("gpu2") == 1
    assert tree.host_bridge("nic0") == "hb0"
    assert tree.ancestors("gpu0") == ["a", "top", "rp0", "hb0"]


@pytest.mark.parametrize("nodes, message", [
    ([PcieNode("x", ENDPOINT, "nowhere"), PcieNode("h", HOST_BRIDGE)], "parent 'nowhere' is not in the tree"),
    ([PcieNode("h", HOST_BRIDGE), PcieNode("h", HOST_BRIDGE)], "appears twice"),
    ([PcieNode("s", SWITCH)], "has no parent"),
    ([PcieNode("h", HOST_BRIDGE, parent="s"), PcieNode("s", SWITCH, "h")], "host bridges are roots"),
    ([PcieNode("h", HOST_BRIDGE), PcieNode("e", ENDPOINT, "h"), PcieNode("f", ENDPOINT, "e")], "is an endpoint"),
    ([PcieNode("s1", SWITCH, "s2"), PcieNode("s2", SWITCH, "s1")], "cycle"),
    ([PcieNode("h", "cpu")], "kind 'cpu'"),
])
def test_a_tree_that_is_not_a_tree_is_refused_with_the_node_named(nodes, message):
    with pytest.raises(PcieError, match=message):
        PcieTree(nodes)


def test_a_device_not_in_the_tree_is_refused():
    with pytest.raises(PcieError, match="'ghost' is not in the PCIe tree"):
        distance_class(_tree(), "gpu0", "ghost")


def test_a_device_has_no_class_to_itself():
    with pytest.raises(PcieError, match="itself"):
        distance_class(_tree(), "gpu0", "gpu0")


def test_pcie_module_is_stdlib_only_so_a_host_side_sysfs_reader_can_ship_it():
    tree = ast.parse(Path(pcie.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names), f"pcie.py imports {imported - set(sys.stdlib_module_names)}"
