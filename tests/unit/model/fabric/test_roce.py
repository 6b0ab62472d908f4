"""RoCE on SN5600: the same fat tree at Ethernet radixes, plus /31 links, BGP ASNs and lossless QoS."""

from __future__ import annotations

import csv
import ipaddress
from importlib import resources

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.unit.model.fabric.checks import check_summary_matches_detail, small_plan
from railyard.model import addressing as addr
from railyard.model.catalog import load_catalog
from railyard.model.fabric import FabricError, FabricPlan, FabricPool, switch_geometry
from railyard.model.fabric.roce import qos_defaults

SN5600 = load_catalog().switches["sn5600"]
CIDR = "10.128.0.0/16"
ASN = 4_200_000_000


def roce(nodes: int, speed: str = "400gbe", rails: int = 8, cidr: str = CIDR) -> FabricPlan:
    return FabricPlan(kind="roce", speed=speed, switch=switch_geometry(SN5600, speed),
                      pools=[FabricPool("gpu", 0, nodes, rails)], cidr=cidr, asn_base=ASN)


def test_sn5600_breakout_sets_the_radix():
    # switches.csv: 64 OSFP cages of 800GbE, broken out to 128 x 400G or 256 x 200G.
    assert [(g.radix, g.ports_per_cage) for g in (switch_geometry(SN5600, s) for s in ("800gbe", "400gbe", "200gbe"))] \
        == [(64, 1), (128, 2), (256, 4)]
    # 100G rides on the 256 breakout ports (an assumption labelled in sn5600.yaml).
    assert switch_geometry(SN5600, "100gbe").radix == 256
    with pytest.raises(FabricError) as exc:
        switch_geometry(SN5600, "ndr")
    assert exc.value.problems[0].path == "railyard:fabric.compute.speed"


def test_israel_1_size_on_400g_breakout():
    # 256 eight-GPU servers (Israel-1: 2,048 H100 on Spectrum-4), one 400G NIC per GPU.
    # 400G breakout: P = 128, SU = 64 nodes -> 4 SUs, 32 leaves <= 128: two tiers. U = 64; k | 64
    # with 32 k <= 128 -> k = 4, 16 spines of 128 ports. Links 2,048 node-leaf, 32 x 64 = 2,048 up.
    # Each of the 2,048 leaf-spine links is a /31 and a BGP session. ASNs: 32 leaves + 1 shared by
    # the spines. Bisection 128 x 8 x 400 = 409,600 Gb/s.
    s = roce(256).summary()
    assert s["su_nodes"] == 64 and s["tiers"] == 2
    assert s["switches"] == {"leaf": 32, "spine": 16, "core": 0, "total": 48}
    assert s["links"] == {"node_leaf": 2048, "leaf_spine": 2048, "spine_core": 0, "total": 4096}
    assert s["p2p"]["links"] == 2048 and s["p2p"]["prefixlen"] == 31
    assert s["bgp"]["asns"] == 33 and s["bgp"]["sessions"] == 2048 and s["bgp"]["spine_asn"] == ASN + 1
    assert s["bisection_gbps"] == 409_600
    # Breakout optics: two 400G ports per OSFP cage; leaf 32 + 32 cages, spine 64 cages.
    assert s["optics"]["switch"] == 32 * 64 + 16 * 64


def test_qos_comes_from_the_cumulus_defaults_table():
    q = qos_defaults()
    assert (q["roce_priority"], q["roce_traffic_class"], q["pfc_priority"]) == (3, 3, 3)
    assert (q["cnp_priority"], q["cnp_traffic_class"], q["other_traffic_class"]) == (6, 6, 0)
    assert (q["ecn_min_bytes"], q["ecn_max_bytes"]) == (150_000, 1_500_000)
    assert q["trust"] == "dscp" and q["pfc_mode"] == "lossless"
    assert q["lldp_app_tlv"] == {"udp_port": 4791, "priority": 3}
    table = resources.files("railyard") / "data" / "fixtures" / "tables" / "roce_qos_defaults_cumulus.csv"
    rows = {r["setting"]: r["value"] for r in csv.DictReader(table.open(encoding="utf-8"))}
    assert q["ets"] == rows["ETS"] and q["host"] == rows["Host side"]
    assert roce(2).summary()["qos"] == q


def _p2p_links(plan: FabricPlan):
    return [link for link in plan.links() if link.tier != "node_leaf"]


@pytest.mark.parametrize("nodes,radix,rails", [(9, 8, 2), (20, 8, 2), (30, 8, 4), (3, 4, 2)])
def test_every_switch_link_gets_its_own_31_inside_the_upper_half(nodes, radix, rails):
    plan = small_plan(nodes, radix=radix, rails=rails, kind="roce", cidr=CIDR, asn_base=ASN)
    links = _p2p_links(plan)
    assert links and all(link.a_ip and link.b_ip for link in links)
    upper = list(ipaddress.ip_network(CIDR).subnets(1))[1]
    seen = set()
    for link in links:
        a, b = ipaddress.ip_address(link.a_ip), ipaddress.ip_address(link.b_ip)
        assert ipaddress.ip_network(f"{b}/31", strict=True).network_address == b and int(a) == int(b) + 1
        assert a in upper and b in upper, f"{link} is outside the p2p half {upper}"
        assert link.a_ip not in seen and link.b_ip not in seen
        seen.update((link.a_ip, link.b_ip))
    check_summary_matches_detail(plan)


def test_asn_plan_gives_each_leaf_its_own_asn_and_each_spine_group_one():
    plan = small_plan([20, 9], radix=8, rails=2, kind="roce", cidr=CIDR, asn_base=ASN)
    assert plan.tiers == 3
    switches = list(plan.switches())
    leaves = [s.asn for s in switches if s.tier == "leaf"]
    assert len(set(leaves)) == len(leaves)
    groups = {}
    for s in switches:
        if s.tier == "spine":
            groups.setdefault((s.pool, s.unit), set()).add(s.asn)
    assert all(len(v) == 1 for v in groups.values())
    assert len({next(iter(v)) for v in groups.values()}) == len(groups)
    assert {s.asn for s in switches if s.tier == "core"} == {ASN}
    every = leaves + [next(iter(v)) for v in groups.values()] + [ASN]
    assert len(set(every)) == len(every) and all(ASN <= a <= 4_294_967_294 for a in every)
    assert plan.summary()["bgp"]["asns"] == len(every)


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 40), extra=st.integers(1, 40), rails=st.integers(1, 4))
def test_growth_keeps_every_existing_leaf_uplink_address_and_asn(nodes, extra, rails):
    try:
        small = small_plan(nodes, radix=8, rails=rails, kind="roce", cidr=CIDR, asn_base=ASN)
        big = small_plan(nodes + extra, radix=8, rails=rails, kind="roce", cidr=CIDR, asn_base=ASN)
    except FabricError:
        assume(False)
    before = {(l.a_device, l.a_port): (l.a_ip, l.b_ip) for l in small.links() if l.tier == "leaf_spine"}
    after = {(l.a_device, l.a_port): (l.a_ip, l.b_ip) for l in big.links() if l.tier == "leaf_spine"}
    assert all(after[k] == v for k, v in before.items())
    asn_before = {s.name: s.asn for s in small.switches() if s.tier == "leaf"}
    asn_after = {s.name: s.asn for s in big.switches() if s.tier == "leaf"}
    assert all(asn_after[k] == v for k, v in asn_before.items())


def test_a_16_bit_asn_base_leaves_small_pool_blocks():
    # 64512..65534 is 1,023 ASNs: block 0 for the shared tiers and 8 pool blocks of 113.
    assert addr.asn_pool_block(64_512) == 1023 // 9
    assert addr.leaf_asn(64_512, 0, 0) == 64_512 + 113
    with pytest.raises(ValueError):
        addr.leaf_asn(64_512, 0, 113)
