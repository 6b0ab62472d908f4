"""The fabric as a subnet manager sees it (railyard.model.fabric.subnet): the plan in
ibnetdiscover's format and back, cabling differences by name, OpenSM's partitions and roots.

data/ibnetdiscover-lab.txt is what `ibnetdiscover` (infiniband-diags 44.0) printed for the default
lab stack's fabric served by ibsim 0.10 after one OpenSM sweep (captured by
railyard.sweep.Simulator, then left as printed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from railyard.model.catalog import load_catalog
from railyard.model.fabric import FabricPlan, FabricPool, switch_geometry
from railyard.model.fabric import subnet as sn
from railyard.model.fabric.verify import verify
from railyard.model.spec.types import Tenant

DATA = Path(__file__).parent / "data"
CATALOG = load_catalog()
QM9700 = switch_geometry(CATALOG.switches["qm9700"], "ndr")
NICS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")  # dgx-h100, rail order


def dgx(*counts: int, reserved: int = 0) -> FabricPlan:
    pools = [FabricPool(name, i, n, 8, NICS) for i, (name, n) in enumerate(zip(("gpu", "b"), counts))]
    return FabricPlan(kind="infiniband", speed="ndr", switch=QM9700, pools=pools, reserved_leaf_ports=reserved)


def tenant(name: str, pkey: int, *pools: str) -> Tenant:
    return Tenant(name=name, pkey=pkey, pools=pools)


def swap_cables(text: str, a: str, b: str) -> str:
    """Two HCAs' cables swapped at the switch end, consistently on both sides of each cable: the
    HCAs' names trade places everywhere in the file."""
    return text.replace(f'"{a}"', "\0").replace(f'"{b}"', f'"{a}"').replace("\0", f'"{b}"')


def test_the_topology_file_holds_every_switch_hca_and_planned_cable():
    fabric = dgx(12, reserved=28)
    text = sn.topology_text(fabric)
    subnet = sn.parse_ibnetdiscover(text)
    switches = [d for d in subnet.devices.values() if d.kind == "Switch"]
    hcas = [d for d in subnet.devices.values() if d.kind == "Ca"]
    assert len(switches) == fabric.summary()["switches"]["total"] == 40
    assert len(hcas) == 12 * 8
    assert {d.ports for d in switches} == {64} and {d.ports for d in hcas} == {1}
    assert len(subnet.cables) == fabric.summary()["cables"]
    assert verify(fabric, subnet) == []
    # Each cable carries the planned width and speed, as ibnetdiscover prints a link's.
    assert set(subnet.named_rates().values()) == {"4xNDR"} and len(subnet.rates) == len(subnet.cables)
    # The SM's port (ibsim's first port) is node 0's rail-0 HCA.
    assert text.startswith('Ca\t1 "gpu-0 mlx5_0"') and sn.sm_port(fabric) == "gpu-0 mlx5_0"


def test_a_swapped_pair_of_cables_is_named_as_one_swap():
    fabric = dgx(2)
    text = swap_cables(sn.topology_text(fabric), "gpu-0 mlx5_0", "gpu-1 mlx5_3")
    assert [(f.kind, str(f)) for f in verify(fabric, sn.parse_ibnetdiscover(text))] == [(
        "cable-swapped",
        "gpu-0 mlx5_0 port 1 and gpu-1 mlx5_3 port 1: gpu-0 mlx5_0 port 1 to gpu-su0-leaf1 port 2, "
        "gpu-1 mlx5_3 port 1 to gpu-su0-leaf0 port 1, planned gpu-0 mlx5_0 port 1 to gpu-su0-leaf0 port 1, "
        "gpu-1 mlx5_3 port 1 to gpu-su0-leaf1 port 2")]


def test_real_ibnetdiscover_output_is_read_with_guids_and_lids():
    subnet = sn.parse_ibnetdiscover((DATA / "ibnetdiscover-lab.txt").read_text())
    by = subnet.by_desc()
    hca, leaf = by["gpu-0 mlx5_11"], by["gpu-su0-leaf7"]
    assert (hca.kind, hca.guid, hca.port_guids, hca.lid) == ("Ca", 0x10000E, {1: 0x10000F}, 20)
    assert (leaf.kind, leaf.guid, leaf.lid, leaf.ports) == ("Switch", 0x200007, 12, 64)
    # The discovered subnet is the plan, the default lab stack's 2 DGX H100, but for the speed:
    # ibsim 0.10 predates NDR, so every link trained at its default, 4xSDR.
    findings = verify(dgx(2), subnet)
    assert {f.kind for f in findings} == {"link-speed"} and len(findings) == len(subnet.cables) == 272
    assert {(f.planned, f.found) for f in findings} == {("NDR", "trained at SDR")}
    assert subnet.port_guid("gpu-0 mlx5_11") == 0x10000F


def test_descriptions_that_repeat_cannot_name_cables():
    text = 'Ca\t1 "H-1"\t\t# "node"\n[1](2)\t"S-1"[1]\n\nCa\t1 "H-2"\t\t# "node"\n[1](3)\t"S-1"[2]\n\n' \
           'Switch\t8 "S-1"\t\t# "leaf"\n[1]\t"H-1"[1]\n[2]\t"H-2"[1]\n'
    with pytest.raises(ValueError, match="node descriptions are not unique: node"):
        sn.parse_ibnetdiscover(text).by_desc()


def test_a_cable_to_a_device_without_a_record_is_refused():
    with pytest.raises(ValueError, match="'S-9'"):
        sn.parse_ibnetdiscover('Ca\t1 "H-1"\t\t# "n"\n[1](2)\t"S-9"[1]\n')


def test_a_tenant_of_every_pool_is_all_cas_and_needs_no_guids():
    fabric = dgx(2)
    text = sn.partitions_conf([tenant("research", 0x8001, "gpu")], fabric, None)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["Default=0x7fff, ipoib, mtu=5, defmember=limited : ALL, ALL_SWITCHES=full, SELF=full ;",
                     "research=0x0001, ipoib, mtu=5 : ALL_CAS=full ;"]
    # Without tenants every port is a full member of the default partition.
    assert "defmember=full" in sn.partitions_conf([], fabric, None)


def test_a_tenant_of_some_pools_lists_their_port_guids_with_its_membership():
    fabric = dgx(1, 1)
    subnet = sn.parse_ibnetdiscover(sn.topology_text(fabric))
    # The topology file carries no GUIDs; give each HCA one as ibsim would.
    for i, d in enumerate(sorted(subnet.devices.values(), key=lambda d: d.id)):
        d.guid, d.port_guids = 0x100000 + 2 * i, {1: 0x100001 + 2 * i} if d.kind == "Ca" else {}
    text = sn.partitions_conf([tenant("a", 0x0005, "b")], fabric, subnet)
    line = text.splitlines()[-1]
    assert line.startswith("a=0x0005, ipoib, mtu=5 : ") and line.endswith(" ;")
    members = line.split(" : ")[1].rstrip(" ;").split(", ")
    want = {subnet.port_guid(sn.hca_name("b-0", nic)) for nic in NICS}
    assert {int(m.split("=")[0], 16) for m in members} == want
    assert {m.split("=")[1] for m in members} == {"limited"}  # 0x0005: the high bit is clear
    with pytest.raises(ValueError, match="tenant a covers pools b only"):
        sn.partitions_conf([tenant("a", 0x0005, "b")], fabric, None)


def test_expected_pkeys_follow_pools_membership_and_the_sm_port():
    fabric = dgx(1, 1)
    want = sn.expected_pkeys([tenant("a", 0x8002, "gpu"), tenant("b", 0x0003, "gpu", "b")], fabric, "gpu-0 mlx5_0")
    assert want["gpu-0 mlx5_3"] == {0x7FFF, 0x8002, 0x0003}
    assert want["b-0 mlx5_0"] == {0x7FFF, 0x0003}
    assert want["gpu-0 mlx5_0"] == {0xFFFF, 0x8002, 0x0003}  # SELF=full in the default partition


@pytest.mark.parametrize("counts, reserved, pure, roots", [
    ((2,), 0, True, 4),        # two tiers: 8 leaves, 4 spines
    ((12,), 28, True, 16),     # two tiers, 3 scalable units: 24 leaves, 2 links to each of 16 spines
    ((32,), 28, True, 32),     # 8 SUs: 64 leaves still fit a spine's 64 ports, two tiers
    ((48,), 28, True, 64),     # three tiers, 3 full spine groups of 4 SUs: 32 planes x 2 cores
    ((36,), 28, False, 64),    # groups of 4, 4 and 1 SUs: the last group's spines see fewer leaves
    ((448,), 0, False, 64),    # us-east-bm: groups of 4, 4, 4 and 2
])
def test_a_partial_spine_group_needs_root_guids(counts, reserved, pure, roots):
    fabric = dgx(*counts, reserved=reserved)
    assert fabric.pure_fat_tree is pure
    top = sn.root_switches(fabric)
    assert len(top) == roots and all(("core" in n) == (fabric.tiers == 3) for n in top)


def test_probe_pairs_cover_each_kind_of_path_with_its_planned_hops():
    fabric = dgx(36, reserved=28)
    hops = {label: fabric.switch_hops(a.key, b.key) for label, a, b in sn.probe_pairs(fabric)}
    assert hops == {"same rail and leaf": 1, "another rail, same node": 3, "same rail, another scalable unit": 3,
                    "same rail, another spine group": 5, "another rail, another spine group": 5}
    pairs = {label: (a.name, b.name) for label, a, b in sn.probe_pairs(fabric)}
    assert pairs["same rail, another spine group"] == ("gpu-0 mlx5_0", "gpu-32 mlx5_0")  # SU 8, group 2
    assert [label for label, _, _ in sn.probe_pairs(dgx(2))] == ["same rail and leaf", "another rail, same node"]


def test_simulator_limits_hold_the_fabric():
    fabric = dgx(448)
    limits = sn.simulator_limits(fabric)
    switches = fabric.summary()["switches"]["total"]
    assert switches == 304
    assert limits["switches"] >= switches and limits["nodes"] >= 3584 + switches
    assert limits["ports"] >= switches * 65 + 3584 * 2
    # ibsim's defaults (2,048 nodes, 256 switches, 13,312 ports) would not.
    assert limits["switches"] > 256 and limits["ports"] > 13312


def test_opensm_options_name_root_guids_only_when_given():
    opts = sn.opensm_options(partition_file="/etc/opensm/partitions.conf", root_guid_file=None)
    assert opts == {"routing_engine": "ftree", "lmc": 0, "partition_config_file": "/etc/opensm/partitions.conf",
                    "part_enforce": "both"}
    text = sn.opensm_conf({**opts, "root_guid_file": "/etc/opensm/root_guids.conf"})
    assert "routing_engine ftree\n" in text and text.endswith("root_guid_file /etc/opensm/root_guids.conf\n")


def test_roce_fabrics_have_no_ibnetdiscover_topology():
    roce = FabricPlan(kind="roce", speed="400g", switch=QM9700, pools=[FabricPool("gpu", 0, 2, 8, NICS)])
    with pytest.raises(ValueError, match="InfiniBand"):
        sn.topology_text(roce)


def test_real_ibnetdiscover_output_gives_each_links_active_width_and_speed():
    subnet = sn.parse_ibnetdiscover((DATA / "ibnetdiscover-lab-hdr-degraded.txt").read_text())
    rates = {f"{a.device} <-> {b.device}": rate for (a, b), rate in subnet.named_rates().items()
             if rate != "4xHDR"}
    assert rates == {"gpu-0 mlx5_0 <-> gpu-su0-leaf0": "2xHDR", "gpu-1 mlx5_0 <-> gpu-su0-leaf0": "4xEDR"}
    assert len(subnet.rates) == len(subnet.cables) == 272
    assert sn.rate_parts("2xHDR") == ("2x", "HDR") and sn.rate_parts("4xFDR10") == ("4x", "FDR10")
