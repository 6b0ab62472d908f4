"""Lab object names: derived from stack and node names only, unique, and within IFNAMSIZ."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from railyard.drivers.lab import names
from railyard.drivers.lab.errors import LabError

stacks = st.from_regex(r"[A-Za-z0-9_.-]{1,40}", fullmatch=True)
nodes = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?", fullmatch=True)


def test_a_short_lowercase_stack_is_its_own_tag():
    assert names.stack_tag("lab") == "lab"
    assert names.fabric_ns("lab") == "ry-lab-fabric"
    assert names.host_link("lab") == "ry-lab-mgmt"


def test_other_stacks_get_a_seven_character_tag_with_a_hash():
    tag = names.stack_tag("lab-virtual")
    assert len(tag) == 7 and tag.startswith("lab") and tag.isalnum()
    assert names.stack_tag("lab-virtual") == tag  # stable


@given(stacks, stacks)
def test_no_stack_prefix_is_a_prefix_of_another_stacks_names(a, b):
    if names.stack_tag(a) != names.stack_tag(b):
        assert not names.fabric_ns(b).startswith(names.stack_prefix(a))
        assert not names.host_link(b).startswith(names.stack_prefix(a))


@given(stacks)
def test_every_root_namespace_link_fits_ifnamsiz(stack):
    assert len(names.host_link(stack)) <= names.IFNAMSIZ


@given(nodes, st.integers(0, 99))
def test_every_fabric_port_fits_ifnamsiz(node, rail):
    for role in (rail, "storage", "mgmt"):
        assert len(names.node_port(node, role)) <= names.IFNAMSIZ


@given(nodes, nodes)
def test_two_nodes_never_share_a_fabric_port(a, b):
    if a != b:
        ports_a = {names.node_port(a, r) for r in (0, 1, 12, "storage", "mgmt")}
        ports_b = {names.node_port(b, r) for r in (0, 1, 12, "storage", "mgmt")}
        assert not ports_a & ports_b


def test_fabric_ports_never_collide_with_bridges_or_spine_ports():
    fixed = {names.rail_bridge(r) for r in range(100)} | {names.spine_port(r) for r in range(100)} | {
        names.MGMT_BRIDGE, names.STORAGE_BRIDGE, names.HOST_PORT}
    for node in ("rail0", "spine", "mgmt", "host", "storage", "gpu-0", "a"):
        assert not {names.node_port(node, r) for r in (0, 1, "storage", "mgmt")} & fixed, node


def test_long_node_names_are_shortened_with_a_hash():
    a, b = "dgx-h100-pool-0", "dgx-h100-pool-1"
    assert names.node_tag(a) != names.node_tag(b)
    assert len(names.node_port(a, 31)) <= names.IFNAMSIZ


def test_parse_ns_inverts_the_netns_names():
    assert names.parse_ns("lab", names.node_ns("lab", "gpu-0")) == ("node", "gpu-0")
    assert names.parse_ns("lab", "ry-lab-fabric") == ("fabric", None)
    assert names.parse_ns("lab", "ry-lab2-fabric") is None


@pytest.mark.parametrize("bad", ["", "GPU-0", "-gpu", "gpu-", "gpu_0", "a" * 64])
def test_a_node_name_must_be_a_hostname_label(bad):
    with pytest.raises(LabError):
        names.node_ns("lab", bad)


def test_macs_are_stable_locally_administered_unicast():
    m = names.mac("lab", "gpu-0", "ibp24s0")
    assert m == names.mac("lab", "gpu-0", "ibp24s0") != names.mac("lab", "gpu-1", "ibp24s0")
    first = int(m.split(":")[0], 16)
    assert first & 0x02 and not first & 0x01


def test_the_owner_marker_names_stack_and_checkout_and_reads_back():
    marker = names.owner_marker("lab-virtual", "/work/main")
    assert marker == "railyard:lab-virtual:/work/main"
    assert names.parse_owner_marker(marker) == ("lab-virtual", "/work/main")
    assert names.parse_owner_marker("an alias someone else set") is None
    assert names.parse_owner_marker(None) is None


def test_a_checkout_path_too_long_for_an_interface_alias_is_hashed_and_never_mistaken():
    long_a, long_b = "/srv/" + "a" * 300, "/srv/" + "a" * 299 + "b"
    a, b = names.owner_marker("lab", long_a), names.owner_marker("lab", long_b)
    assert len(a.encode()) <= names.IFALIASZ and a.startswith("railyard:lab:sha256-")
    assert a != b and names.parse_owner_marker(a)[0] == "lab"


@pytest.mark.parametrize("root", ["/home/me/my proj", "/home/me/proj#2", "/srv/t\tab", "/srv/ünï"])
def test_a_checkout_path_ip_batch_would_split_or_cut_is_hashed(root):
    marker = names.owner_marker("lab", root)
    assert marker.startswith("railyard:lab:sha256-") and " " not in marker and "#" not in marker
    # What ip -batch would have written for "/home/me/proj#2": another checkout's marker.
    truncated = root.split("#")[0].split(" ")[0].split("\t")[0]
    assert truncated == root or marker != names.owner_marker("lab", truncated)


def test_the_tag_is_read_back_from_netns_and_link_names_of_any_stack():
    for stack in ("lab", "lab-virtual", "fresh", "tgc-a-orphan"):
        tag = names.stack_tag(stack)
        for name in (names.fabric_ns(stack), names.node_ns(stack, "gpu-0"), names.host_link(stack)):
            assert names.parse_tag(name) == tag
    assert names.parse_tag("ryzen") is None and names.parse_tag("veth0") is None
