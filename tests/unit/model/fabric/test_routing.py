"""A RoCE fabric's switches as BGP routers: loopbacks that never move, sessions that pair up end
to end with the planned ASNs, and leaves that announce exactly their own hosts."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from railyard.model import addressing as addr
from railyard.model.catalog import load_catalog
from railyard.model.errors import SpecError
from railyard.model.fabric import FabricPlan, FabricPool, routing, switch_geometry
from railyard.model.plan import make_plan
from railyard.stack import load, parse_config

STACKS = Path(__file__).resolve().parents[4] / "stacks"


def roce_config(nodes: int = 10) -> dict:
    """dgx-h100 on SN5600 at 400G, through the whole spec."""
    return {
        "railyard:region": "lab", "railyard:layout": "bare-metal", "railyard:driver": "lab",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": nodes}],
        "railyard:fabric": {"compute": {"kind": "roce", "speed": "400gbe", "switch": "sn5600"}},
    }


def plan_of(config: dict):
    return make_plan(parse_config(config, stack="t"))


def three_tiers(*pools: tuple[str, int]) -> FabricPlan:
    """SN5600 at 400G (128 ports) with 60 reserved leaf ports: scalable units of 4 nodes, so 68
    nodes are 136 leaves, more than a spine's ports. Too large for the lab's address range, so
    planned directly, on private networks."""
    return FabricPlan(kind="roce", speed="400gbe", switch=switch_geometry(load_catalog().switches["sn5600"], "400gbe"),
                      pools=[FabricPool(name, i, n, 8) for i, (name, n) in enumerate(pools)], reserved_leaf_ports=60,
                      cidr="10.0.0.0/8", asn_base=4_200_000_000, loopback_cidr="10.255.0.0/16")


def three_tier_routers(fabric: FabricPlan):
    gateways = {r: addr.rail_gateway(fabric.cidr, r, fabric.rails) for r in range(fabric.rails)}
    return list(routing.routers(fabric, lambda pool: 1, gateways, addr.rail_prefixlen(fabric.cidr, fabric.rails, "roce")))


def sessions_pair_up(routers) -> None:
    by_name = {r.name: r for r in routers}
    for r in routers:
        for s in r.sessions:
            peer = by_name[s.peer]
            mirror = [m for m in peer.sessions if m.interface == s.peer_interface]
            assert len(mirror) == 1, (r.name, s)
            m = mirror[0]
            assert (m.peer, m.peer_interface, m.address, m.peer_address, m.peer_asn) == \
                (r.name, s.interface, s.peer_address, s.address, r.asn)
            net = ipaddress.ip_network(f"{s.address}/31", strict=False)
            assert ipaddress.ip_address(s.peer_address) in net and s.address != s.peer_address


def test_two_tiers_every_link_is_one_session_seen_from_both_ends_with_the_planned_asns():
    _, plan = load(STACKS / "Pulumi.lab-virtual.yaml")
    routers = plan.routers()
    assert [(r.name, r.tier, len(r.sessions)) for r in routers] == \
        [("vela-su0-leaf0", "leaf", 128), ("vela-su0-leaf1", "leaf", 128), ("spine0", "spine", 256)]
    sessions_pair_up(routers)
    assert sum(len(r.sessions) for r in routers) == 2 * plan.fabric.link_counts()["leaf_spine"]
    switches = {s.name: s for s in plan.fabric.switches()}
    assert all(r.asn == switches[r.name].asn and r.loopback == switches[r.name].loopback for r in routers)
    # The spines share an ASN (RFC 7938): every leaf's paths through them are equal, so ECMP takes
    # every uplink.
    assert [r.maximum_paths for r in routers] == [128, 128, 256]


def test_three_tiers_route_leaves_to_group_spines_to_cores():
    fabric = three_tiers(("gpu", 68))
    assert fabric.tiers == 3
    routers = three_tier_routers(fabric)
    sessions_pair_up(routers)
    tiers = {r.name: r.tier for r in routers}
    for r in routers:
        peers = {tiers[s.peer] for s in r.sessions}
        assert peers == {"leaf": {"spine"}, "spine": {"leaf", "core"}, "core": {"spine"}}[r.tier], r.name
    assert len({r.loopback for r in routers}) == len(routers)
    assert len({r.asn for r in routers if r.tier == "core"}) == 1


def test_a_leaf_announces_exactly_its_own_hosts_pfs_and_vfs():
    for plan in (load(STACKS / "Pulumi.lab-virtual.yaml")[1], plan_of(roce_config(40))):
        routers = {r.name: r for r in plan.routers() if r.tier == "leaf"}
        announced = {name: [ipaddress.ip_network(p) for p in r.host_prefixes] for name, r in routers.items()}
        for node in plan.nodes:
            for nic in node.nics:
                own = [vf.ip for vm in node.vms for vf in vm.vfs if vf.rail == nic.rail]
                for ip in (nic.ip, *own):
                    holders = [n for n, nets in announced.items() if any(ipaddress.ip_address(ip) in x for x in nets)]
                    assert holders == [nic.leaf], (node.name, ip, holders)
        # Nothing else: the prefixes hold no more addresses than the hosts behind the leaf have.
        for name, r in routers.items():
            hosts = [n for n in plan.nodes if any(nic.leaf == name for nic in n.nics)]
            per_host = plan.rail_stride(hosts[0].pool)
            assert sum(n.num_addresses for n in announced[name]) == len(hosts) * per_host, name
            gateway = ipaddress.ip_interface(r.gateway)
            assert str(gateway.ip) == plan.networks.compute.rails[r.rail].gateway
            assert all(n.subnet_of(gateway.network) for n in announced[name])


def test_loopbacks_do_not_move_when_a_pool_grows_or_another_is_added():
    for before, after in [(three_tiers(("gpu", 68)), three_tiers(("gpu", 76), ("more", 8))),
                          (plan_of(roce_config(10)).fabric, plan_of(roce_config(100)).fabric)]:
        small = {s.name: s.loopback for s in before.switches()}
        grown = {s.name: s.loopback for s in after.switches()}
        assert len(grown) > len(small)
        assert all(grown[name] == loopback for name, loopback in small.items())
        assert len(set(grown.values())) == len(grown)
        net = ipaddress.ip_network(after.loopback_cidr)
        assert all(ipaddress.ip_address(a) in net for a in grown.values())


def test_a_loopback_network_too_small_for_the_switches_names_the_size_it_needs():
    config = roce_config(40)
    config["railyard:fabric"]["compute"]["loopbackCidr"] = "198.18.64.0/28"
    with pytest.raises(SpecError) as err:
        parse_config(config, stack="t")
    [p] = [p for p in err.value.problems if p.path == "railyard:fabric.compute.loopbackCidr"]
    shared, per_pool = plan_of(roce_config(40)).fabric.loopbacks_needed()
    assert f"({addr.loopback_need(shared, per_pool)} addresses)" in p.allowed and "one per switch" in p.hint


def test_loopbacks_are_for_roce_and_apart_from_the_other_networks():
    ib = roce_config()
    ib["railyard:fabric"]["compute"] = {"kind": "infiniband", "loopbackCidr": "198.18.64.0/20"}
    with pytest.raises(SpecError) as err:
        parse_config(ib, stack="t")
    assert [p.path for p in err.value.problems] == ["railyard:fabric.compute.loopbackCidr"]
    overlapping = roce_config()
    overlapping["railyard:fabric"]["compute"]["loopbackCidr"] = "198.19.0.0/20"
    with pytest.raises(SpecError) as err:
        parse_config(overlapping, stack="t")
    assert "it overlaps railyard:fabric.compute.cidr" in str(err.value)


def test_an_infiniband_fabric_has_no_routers():
    _, plan = load(STACKS / "Pulumi.lab.yaml")
    with pytest.raises(ValueError, match="a infiniband fabric has no BGP routers|infiniband fabric has no BGP"):
        plan.routers()


def test_the_summary_says_where_the_loopbacks_come_from_and_how_many():
    _, plan = load(STACKS / "Pulumi.lab-virtual.yaml")
    assert plan.summary()["fabrics"]["compute"]["loopbacks"] == {"cidr": "198.18.64.0/18", "switches": 3}
    _, ib = load(STACKS / "Pulumi.lab.yaml")
    assert "loopbacks" not in ib.summary()["fabrics"]["compute"]
