"""The InfiniBand rail-optimized fat tree: worked examples from first principles, then properties.

Notation in the comments: radix P (ports per switch at the fabric speed), SU = P/2 - reserved
nodes, R rails (compute NICs per node), U = ceil((P/2) / oversubscription) uplinks per leaf.
"""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.unit.model.fabric.checks import brute_force_bisection_links, check_summary_matches_detail, small_plan
from railyard.model.catalog import load_catalog
from railyard.model.fabric import (
    CSV_COLUMNS, FabricError, FabricPlan, FabricPool, min_bisection_links, switch_geometry,
)

CATALOG = load_catalog()
QM9700 = switch_geometry(CATALOG.switches["qm9700"], "ndr")
QM8700 = switch_geometry(CATALOG.switches["qm8700"], "hdr")


def dgx(nodes: int, switch=QM9700, rails: int = 8, oversubscription: float = 1, reserved: int = 0) -> FabricPlan:
    return FabricPlan(kind="infiniband", speed="ndr" if switch is QM9700 else "hdr", switch=switch,
                      pools=[FabricPool("gpu", 0, nodes, rails)], oversubscription=oversubscription,
                      reserved_leaf_ports=reserved)


def test_catalog_switches_have_the_geometry_of_their_sources():
    # switches.csv: QM9700 = 32 OSFP cages x 2 NDR ports = 64 x 400G; QM8700 = 40 QSFP56 x 200G.
    assert (QM9700.radix, QM9700.gbps, QM9700.ports_per_cage) == (64, 400, 2)
    assert (QM8700.radix, QM8700.gbps, QM8700.ports_per_cage) == (40, 200, 1)
    assert QM9700.label(1) == "1/1" and QM9700.label(64) == "32/2"


# --------------------------------------------------------------------------------------------------
# Worked examples


def test_one_full_su_of_dgx_h100_on_qm9700():
    # 32 DGX H100, 8 rails, QM9700 (P = 64): SU = 64/2 = 32 nodes, so exactly one SU with one leaf per
    # rail: 8 leaves, each 32 node ports down and U = 32 uplinks. 8 leaves <= 64 ports: two tiers.
    # Each leaf reaches every spine with the same k links; the most k allows: 8 leaves x k <= 64,
    # k | 32 -> k = 8, so 32 / 8 = 4 spines, each full (8 leaves x 8 = 64 ports).
    # Links: 32 x 8 = 256 node-leaf, 8 x 32 = 256 leaf-spine; 512 cables.
    # Optics: a leaf uses 16 + 16 twin-port cages, a spine 32: 8 x 32 + 4 x 32 = 384; 256 on hosts.
    # Bisection: 16 nodes on a side, all their 16 x 8 links cross at 400 Gb/s = 51,200 Gb/s.
    s = dgx(32).summary()
    assert s["tiers"] == 2
    assert s["switches"] == {"leaf": 8, "spine": 4, "core": 0, "total": 12}
    assert s["links"] == {"node_leaf": 256, "leaf_spine": 256, "spine_core": 0, "total": 512}
    assert s["cables"] == 512
    assert s["optics"]["switch"] == 384 and s["optics"]["host"] == 256
    assert s["structure"]["links_leaf_to_each_spine"] == 8
    assert s["ports"]["spine"] == {"used": 256, "available": 256, "cages": 128}
    assert s["oversubscription"] == 1
    assert s["bisection_gbps"] == 51_200
    assert s["worst_case_hops"] == 3


def test_two_node_lab_still_gets_leaves_provisioned_for_a_full_su():
    # 2 DGX H100: one partly filled SU. The leaves keep all 32 uplinks (growing to 32 nodes must not
    # recable the spines), so the tiers above are those of the full SU: 8 leaves, 4 spines, 256
    # leaf-spine links; only 2 x 8 = 16 node-leaf links. Leaf cages: 1 (2 node ports) + 16 up.
    # Bisection: 1 node per side, its 8 links: 3,200 Gb/s.
    s = dgx(2).summary()
    assert s["switches"] == {"leaf": 8, "spine": 4, "core": 0, "total": 12}
    assert s["links"] == {"node_leaf": 16, "leaf_spine": 256, "spine_core": 0, "total": 272}
    assert s["ports"]["leaf"]["cages"] == 8 * (1 + 16)
    assert s["bisection_gbps"] == 3_200


def test_127_nodes_is_four_sus_with_one_slot_free():
    # The SuperPOD 4-SU size with one node slot for UFM: SUs of 32, 32, 32, 31 -> 32 leaves. Two
    # tiers (32 <= 64): k | 32 with 32 k <= 64 -> k = 2, 16 spines, each 32 x 2 = 64 ports.
    # Links: 127 x 8 = 1,016 node-leaf; 32 x 32 = 1,024 leaf-spine (the 31-node SU's leaves are
    # provisioned in full). Bisection: 63 nodes on the small side, every one of their 8 links crosses
    # (the fabric is non-blocking): 63 x 8 x 400 = 201,600 Gb/s.
    s = dgx(127).summary()
    assert s["scalable_units"] == 4 and s["tiers"] == 2
    assert s["switches"] == {"leaf": 32, "spine": 16, "core": 0, "total": 48}
    assert s["links"] == {"node_leaf": 1016, "leaf_spine": 1024, "spine_core": 0, "total": 2040}
    assert s["bisection_gbps"] == 201_600


def test_256_nodes_is_the_largest_two_tier_fabric_and_257_needs_three():
    # 8 SUs = 64 leaves = the spine radix: k = 1, 32 spines of 64 ports. One more node makes a 9th
    # SU, 72 leaves > 64, hence three tiers.
    two = dgx(256).summary()
    assert two["tiers"] == 2 and two["switches"]["spine"] == 32 and two["structure"]["links_leaf_to_each_spine"] == 1
    assert dgx(257).summary()["tiers"] == 3


def test_448_dgx_h100_is_14_sus_in_three_tiers():
    # The MLPerf GPT-3 3,584-GPU size. 448 / 32 = 14 SUs -> 112 leaves > 64: three tiers.
    # A spine's downward half (32 ports) takes 32 / 8 = 4 SUs of leaves: spine groups of 4 SUs, 32
    # leaves each linked once to each of U = 32 spines. 14 SUs -> groups of 4, 4, 4, 2 -> 4 x 32 =
    # 128 spines. Spine j of every group forms plane j (32 planes); a full spine sends its 32
    # downlinks' worth up, the last group's spines 16. Cores per plane c must divide 32 and give
    # each core <= 64 ports: c = 1 -> 32 + 32 + 32 + 16 = 112 > 64; c = 2 -> 16 + 16 + 16 + 8 = 56.
    # So 2 cores per plane, 64 cores; 112 + 128 + 64 = 304 switches.
    # Links per tier: 448 x 8 = 3,584 = 112 leaves x 32 = 3,584 spine uplinks: the GPU count.
    # Bisection: 224 nodes x 8 x 400 = 716,800 Gb/s. Worst case leaf-spine-core-spine-leaf: 5.
    s = dgx(448).summary()
    assert s["scalable_units"] == 14 and s["tiers"] == 3
    assert s["switches"] == {"leaf": 112, "spine": 128, "core": 64, "total": 304}
    assert s["links"] == {"node_leaf": 3584, "leaf_spine": 3584, "spine_core": 3584, "total": 10752}
    assert s["structure"]["cores_per_plane"] == 2 and s["structure"]["planes"] == 32
    assert s["ports"]["core"]["used"] == 3584  # 112 per plane (56 on each of its 2 cores) x 32 planes
    assert s["bisection_gbps"] == 716_800
    assert s["worst_case_hops"] == 5


def test_20000_gpus_plans_without_enumerating():
    # 2,500 DGX H100: 78 full SUs + one of 4 nodes = 79 SUs -> 632 leaves. Groups of 4 SUs: 19 full +
    # one of 3 SUs = 20 groups x 32 = 640 spines. Per plane: 19 spines with 32 uplinks + one with 24.
    # c | 32: c = 8 -> 19 x 4 + 3 = 79 > 64; c = 16 -> 19 x 2 + 2 = 40 -> 16 cores x 32 planes = 512.
    # Links: 20,000 node-leaf; 632 x 32 = 20,224 leaf-spine and spine-core (the last SU's leaves
    # are provisioned in full). Bisection: 1,250 x 8 x 400 = 4,000,000 Gb/s.
    s = dgx(2500).summary()
    assert s["switches"] == {"leaf": 632, "spine": 640, "core": 512, "total": 1784}
    assert s["links"] == {"node_leaf": 20000, "leaf_spine": 20224, "spine_core": 20224, "total": 60448}
    assert s["bisection_gbps"] == 4_000_000


def test_65536_gpus_fill_a_three_tier_qm9700_fabric_exactly_and_one_more_su_does_not_fit():
    # 64 groups (the core radix) x 4 SUs x 32 nodes = 8,192 nodes. Each spine then sends one link
    # to each of 32 cores per plane: 1,024 cores of 64 full ports.
    s = dgx(8192).summary()
    assert s["switches"] == {"leaf": 2048, "spine": 2048, "core": 1024, "total": 5120}
    assert s["ports"]["core"] == {"used": 65536, "available": 65536, "cages": 32768}
    with pytest.raises(FabricError) as exc:
        dgx(8192 + 4 * 32 + 1)
    assert exc.value.problems[0].path == "railyard:fabric.compute"


def test_two_to_one_oversubscription_halves_the_uplinks_and_the_bisection():
    # 64 nodes, 2:1: U = 32 / 2 = 16. 2 SUs -> 16 leaves; k | 16 with 16 k <= 64 -> k = 4, 4 spines.
    # Leaf-spine 16 x 16 = 256. Bisection: one whole SU on a side -> 8 leaves x 16 uplinks = 128
    # links x 400 = 51,200 Gb/s = 32 nodes x 8 x 400 / 2.
    s = dgx(64, oversubscription=2).summary()
    assert s["leaf_uplinks"] == 16 and s["oversubscription"] == 2
    assert s["switches"] == {"leaf": 16, "spine": 4, "core": 0, "total": 20}
    assert s["links"]["leaf_spine"] == 256
    assert s["bisection_gbps"] == 51_200


def test_reserved_leaf_ports_shrink_the_su_and_keep_uplinks_for_the_whole_half():
    # reservedLeafPorts 1 on a QM9700: SU = 32 - 1 = 31 nodes; uplinks stay 32 (the reserved port's
    # appliance is non-blocking too), so a full SU is 31:32.
    s = dgx(62, reserved=1).summary()
    assert s["su_nodes"] == 31 and s["scalable_units"] == 2 and s["leaf_uplinks"] == 32
    assert s["oversubscription"] == round(31 / 32, 3)


def test_dgx_a100_on_qm8700_sus_of_20():
    # QM8700: 40 HDR ports -> SU = 20. 20 DGX A100: 8 leaves, U = 20; k | 20 with 8 k <= 40 -> 5,
    # 4 spines of 40 ports. 140 nodes (7 SUs, 56 leaves > 40): three tiers, groups of 20 / 8 = 2
    # SUs -> 4 groups (2, 2, 2, 1) x 20 spines = 80; per plane uplinks 16, 16, 16, 8: c | 16,
    # c = 1 -> 56 > 40, c = 2 -> 28 -> 20 planes x 2 = 40 cores.
    one = dgx(20, switch=QM8700).summary()
    assert one["su_nodes"] == 20 and one["switches"] == {"leaf": 8, "spine": 4, "core": 0, "total": 12}
    seven = dgx(140, switch=QM8700).summary()
    assert seven["switches"] == {"leaf": 56, "spine": 80, "core": 40, "total": 176}
    assert seven["links"] == {"node_leaf": 1120, "leaf_spine": 1120, "spine_core": 1120, "total": 3360}
    assert seven["bisection_gbps"] == 70 * 8 * 200


# --------------------------------------------------------------------------------------------------
# Detail and cabling


def test_node_nic_i_plugs_into_the_leaf_of_rail_i_of_its_su():
    plan = dgx(40)
    assert plan.leaf_port("gpu", 0, 0) == ("gpu-su0-leaf0", 1)
    assert plan.leaf_port("gpu", 33, 7) == ("gpu-su1-leaf7", 2)
    links = {(l.a_device, l.a_port): (l.b_device, l.b_port) for l in plan.links() if l.tier == "node_leaf"}
    assert links[("gpu-33", "rail7")] == ("gpu-su1-leaf7", 2)


def test_detail_and_summary_agree_for_the_worked_examples():
    for n in (2, 32, 127, 448):
        check_summary_matches_detail(dgx(n))
    check_summary_matches_detail(dgx(140, switch=QM8700))


def test_cabling_csv_has_one_row_per_cable_with_both_ends():
    plan = dgx(33)
    rows = list(csv.DictReader(io.StringIO(plan.cabling_csv())))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == plan.summary()["cables"]
    first_up = next(r for r in rows if r["tier"] == "leaf_spine")
    # Leaf uplinks start at port 33 = cage 17, lane 1, on the upper half of the QM9700.
    assert first_up["a_device"] == "gpu-su0-leaf0" and first_up["a_port"] == "33" and first_up["a_interface"] == "17/1"
    assert all(r["a_device"] and r["b_device"] and r["b_port"] for r in rows)


# --------------------------------------------------------------------------------------------------
# Properties


fabrics = st.builds(
    lambda radix, rails, counts, o, reserved, ppc: (radix, rails, counts, o, reserved, ppc),
    radix=st.sampled_from([4, 6, 8, 12, 16]),
    rails=st.integers(1, 4),
    counts=st.lists(st.integers(1, 70), min_size=1, max_size=3),
    o=st.sampled_from([1, 1, 2, 3, 1.5]),
    reserved=st.integers(0, 2),
    ppc=st.sampled_from([1, 2]),
)


def _build(params) -> FabricPlan:
    radix, rails, counts, o, reserved, ppc = params
    assume(reserved < radix // 2 and rails <= radix // 2)
    try:
        return small_plan(counts, radix=radix, rails=rails, oversubscription=o, reserved=reserved, ppc=ppc)
    except FabricError:
        assume(False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics)
def test_every_nic_has_one_link_no_switch_overflows_and_the_summary_counts_the_detail(params):
    check_summary_matches_detail(_build(params))


@settings(max_examples=200, deadline=None)
@given(fabrics)
def test_bisection_is_at_least_what_the_oversubscription_promises(params):
    plan = _build(params)
    # Promise: half the nodes' links, each at 1/oversubscription of its speed.
    promised = sum(pl.pool.nodes for pl in plan.layouts) // 2 * min(pl.pool.rails for pl in plan.layouts)
    assert plan.bisection_links() * plan.oversubscription_requested >= promised


@settings(max_examples=100, deadline=None)
@given(radix=st.sampled_from([4, 8, 16, 64]), rails=st.integers(1, 8), units=st.integers(1, 40))
def test_full_sus_non_blocking_have_one_link_per_gpu_in_every_tier(radix, rails, units):
    assume(rails <= radix // 2)
    try:
        plan = small_plan(units * (radix // 2), radix=radix, rails=rails)
    except FabricError:
        assume(False)
    links = plan.link_counts()
    gpus = units * (radix // 2) * rails  # one NIC per GPU
    assert links["node_leaf"] == gpus and links["leaf_spine"] == gpus
    assert links["spine_core"] == (gpus if plan.tiers == 3 else 0)


@pytest.mark.parametrize("radix,rails,oversubscription,reserved", [
    (4, 1, 1, 0), (4, 2, 1, 0), (4, 2, 2, 0), (6, 1, 1, 2), (6, 2, 1, 0), (6, 2, 3, 1), (8, 2, 2, 1),
    (8, 1, 1, 3),
])
def test_bisection_formula_equals_max_flow_over_every_balanced_cut(radix, rails, oversubscription, reserved):
    # Small enough to try every split of the nodes into halves; covers partial SUs, partial spine
    # groups and three tiers (radix 4 with 2 rails is three tiers from 5 nodes, radix 6 reserving 2
    # ports from 7).
    for n in range(1, 11):
        try:
            plan = small_plan(n, radix=radix, rails=rails, oversubscription=oversubscription, reserved=reserved)
        except FabricError:
            continue
        assert plan.bisection_links() == brute_force_bisection_links(plan), f"{n} nodes, {plan.tiers} tiers"


def test_bisection_formula_equals_max_flow_with_two_pools_of_different_rails():
    for n1, n2 in ((1, 4), (3, 3), (5, 2), (4, 5)):
        for radix in (4, 6):
            try:
                plan = small_plan([n1, n2], radix=radix, rails=[1, 2], oversubscription=2)
            except FabricError:
                continue
            assert plan.bisection_links() == brute_force_bisection_links(plan), (n1, n2, radix)


def test_min_bisection_of_nothing_or_one_node_is_zero():
    assert min_bisection_links([], 32, 32) == 0
    assert min_bisection_links([(0, 1, 8)], 32, 32) == 0


@settings(max_examples=100, deadline=None)
@given(fabrics, st.integers(1, 60))
def test_growing_a_pool_never_moves_an_existing_node_or_leaf(params, extra):
    plan = _build(params)
    radix, rails, counts, o, reserved, ppc = params
    grown_counts = list(counts)
    grown_counts[0] += extra
    try:
        grown = small_plan(grown_counts, radix=radix, rails=rails, oversubscription=o, reserved=reserved, ppc=ppc)
    except FabricError:
        assume(False)
    before = {(l.a_device, l.a_port): (l.b_device, l.b_port) for l in plan.links() if l.tier == "node_leaf"}
    after = {(l.a_device, l.a_port): (l.b_device, l.b_port) for l in grown.links() if l.tier == "node_leaf"}
    assert all(after[k] == v for k, v in before.items()), "a node moved to another leaf port"
    leaves_before = {s.name for s in plan.switches() if s.tier == "leaf"}
    assert leaves_before <= {s.name for s in grown.switches() if s.tier == "leaf"}
    if plan.tiers == grown.tiers == 3:
        # Spine groups are fixed per pool: a leaf's uplinks keep their far ends.
        up_before = {(l.a_device, l.a_port): (l.b_device, l.b_port) for l in plan.links() if l.tier == "leaf_spine"}
        up_after = {(l.a_device, l.a_port): (l.b_device, l.b_port) for l in grown.links() if l.tier == "leaf_spine"}
        assert all(up_after[k] == v for k, v in up_before.items()), "a leaf uplink was recabled"
