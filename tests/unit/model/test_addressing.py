"""Names and addresses are pure functions of (pool, index, rail): growth never moves what exists."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railyard.model import addressing as addr
from railyard.model.fabric import plan_fabric
from tests.unit.model.model_only import parse_config

MGMT = "198.18.0.0/20"
COMPUTE = "198.19.0.0/16"


def test_names():
    assert addr.node_name("gpu", 0) == "gpu-0"
    assert addr.vm_name("gpu", 12, 1) == "gpu-12-vm1"


def test_pool_blocks_are_eighths_of_the_network_and_hosts_start_after_two_reserved():
    # /20 = 4,096 addresses -> 8 blocks of 512; pool 1's block starts at 198.18.2.0.
    assert addr.pool_block(MGMT, 1) == "198.18.2.0/23"
    assert addr.host_ip(MGMT, 0, 0) == "198.18.0.2"
    assert addr.host_ip(MGMT, 1, 0) == "198.18.2.2"
    # With 2 VMs per host a host takes 3 addresses: itself, then its VMs.
    assert [addr.host_ip(MGMT, 0, 1, 2), addr.guest_ip(MGMT, 0, 1, 0, 2), addr.guest_ip(MGMT, 0, 1, 1, 2)] \
        == ["198.18.0.5", "198.18.0.6", "198.18.0.7"]


def test_last_address_of_a_block_is_never_handed_out():
    # 512-address block: 2 reserved at the head, 1 at the tail -> hosts 0..508.
    assert addr.host_ip(MGMT, 7, 508) == "198.18.15.254"
    with pytest.raises(ValueError):
        addr.host_ip(MGMT, 7, 509)


def test_rail_subnets_split_the_compute_network_and_roce_keeps_the_upper_half_for_links():
    assert [addr.rail_subnet(COMPUTE, r, 8) for r in (0, 7)] == ["198.19.0.0/19", "198.19.224.0/19"]
    assert addr.rail_subnet(COMPUTE, 7, 8, "roce") == "198.19.112.0/20"
    assert addr.rail_gateway(COMPUTE, 0, 8, "roce") == "198.19.0.1"
    assert addr.p2p_block(COMPUTE, 0) == "198.19.128.0/20"
    # 6 rails still take power-of-two slots: 8 of them.
    assert addr.rail_subnet(COMPUTE, 5, 6) == "198.19.160.0/19"
    assert addr.nic_ip(COMPUTE, "infiniband", 8, 0, 0, 3) == "198.19.96.2"


def test_vfs_are_dealt_round_robin_so_a_vm_lands_on_its_own_gpus_rails():
    # 2 VMs x 4 VFs over 8 NICs: VM 0 on rails 0-3, VM 1 on rails 4-7, one VF per PF.
    assert [addr.vf_placement(0, k, 4, 8) for k in range(4)] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    assert [addr.vf_placement(1, k, 4, 8) for k in range(4)] == [(4, 0), (5, 0), (6, 0), (7, 0)]
    # Vela: 1 VM with 2 VFs over 2 NICs.
    assert [addr.vf_placement(0, k, 2, 2) for k in range(2)] == [(0, 0), (1, 0)]
    assert addr.vf_slots_per_pf(1, 2, 2) == 1 and addr.rail_stride(1, 2, 2) == 2
    assert addr.vf_ip(COMPUTE, "roce", 2, 0, 0, 1, 0, 2) == "198.19.64.3"


def test_partition_keys():
    assert addr.partition_key(0) == 0x8001 and addr.partition_key(4) == 0x8005
    assert addr.partition_key(0, 0x8010) == 0x8010


pools_st = st.lists(
    st.tuples(st.integers(1, 40), st.integers(0, 3), st.integers(0, 4), st.integers(1, 8)),
    min_size=1, max_size=addr.MAX_POOLS,
)


def _all_addresses(pools, mgmt, comp, kind, rails):
    """Every address the scheme hands out for these (count, vms, vfs, pool rails) pools."""
    out = {}
    for o, (count, vms, vfs, prails) in enumerate(pools):
        stride = addr.rail_stride(vms, vfs, prails)
        for i in range(count):
            out[("host", o, i)] = addr.host_ip(mgmt, o, i, vms)
            for j in range(vms):
                out[("vm", o, i, j)] = addr.guest_ip(mgmt, o, i, j, vms)
            for r in range(prails):
                out[("nic", o, i, r)] = addr.nic_ip(comp, kind, rails, o, i, r, stride)
            for j in range(vms):
                for k in range(vfs):
                    r, slot = addr.vf_placement(j, k, vfs, prails)
                    out[("vf", o, i, j, k)] = addr.vf_ip(comp, kind, rails, o, i, r, slot, stride)
    return out


@settings(max_examples=50, deadline=None)
@given(pools=pools_st, kind=st.sampled_from(["infiniband", "roce"]))
def test_the_sizing_functions_give_a_network_that_holds_every_address_once(pools, kind):
    specs = [addr.PoolAddressing(f"p{o}", o, c, v, f, r) for o, (c, v, f, r) in enumerate(pools)]
    rails = max(r for *_, r in pools)
    mgmt_size = addr.host_network_need(specs)
    comp_size = addr.compute_network_need(specs, kind, rails)
    mgmt = f"10.0.0.0/{addr.prefix_for(mgmt_size)}"
    comp = f"10.128.0.0/{addr.prefix_for(comp_size)}"
    got = _all_addresses(pools, mgmt, comp, kind, rails)
    hosts = [v for k, v in got.items() if k[0] in ("host", "vm")]
    fabric = [v for k, v in got.items() if k[0] in ("nic", "vf")]
    assert len(set(hosts)) == len(hosts) and len(set(fabric)) == len(fabric), "an address is handed out twice"
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(mgmt) for a in hosts)
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(comp) for a in fabric)
    # And the size is tight: half of it cannot hold the largest pool.
    half_mgmt = f"10.0.0.0/{addr.prefix_for(mgmt_size) + 1}"
    with pytest.raises(ValueError):
        _all_addresses(pools, half_mgmt, comp, kind, rails)


@settings(max_examples=50, deadline=None)
@given(pools=pools_st, grow=st.integers(0, addr.MAX_POOLS - 1), extra=st.integers(1, 30),
       kind=st.sampled_from(["infiniband", "roce"]))
def test_growing_any_pool_never_readdresses_an_existing_host_vm_nic_or_vf(pools, grow, extra, kind):
    grow %= len(pools)
    grown = list(pools)
    c, v, f, r = grown[grow]
    grown[grow] = (c + extra, v, f, r)
    rails = max(r for *_, r in pools)
    mgmt, comp = "10.0.0.0/12", "10.128.0.0/10"
    before = _all_addresses(pools, mgmt, comp, kind, rails)
    after = _all_addresses(grown, mgmt, comp, kind, rails)
    assert all(after[k] == v for k, v in before.items())


# --------------------------------------------------------------------------------------------------
# Sizing against a spec, as validation calls it


def _spec(count: int, compute: str = "10.0.0.0/14", kind: str = "infiniband", **fabric):
    compute_cfg = {"kind": kind, "speed": "ndr" if kind == "infiniband" else "400gbe",
                   "switch": "qm9700" if kind == "infiniband" else "sn5600", "cidr": compute, **fabric}
    return parse_config({
        "railyard:region": "r", "railyard:layout": "bare-metal", "railyard:driver": "coreweave",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": count}],
        "railyard:fabric": {"compute": compute_cfg, "storage": {"cidr": "10.64.0.0/16"},
                            "management": {"cidr": "10.65.0.0/16"}},
    }, stack="t")


def test_address_needs_for_448_dgx_h100():
    # Management: 448 hosts + 3 reserved = 451 -> blocks of 512 -> 8 x 512 = 4,096 (/20).
    # Compute: 8 rails x 8 pool blocks x 512 = 32,768 (/17).
    needs = {n.network: n for n in addr.address_needs(_spec(448))}
    assert (needs["management"].needed, needs["management"].prefixlen) == (4096, 20)
    assert (needs["compute"].needed, needs["compute"].prefixlen) == (32768, 17)
    assert all(n.ok for n in needs.values())


def test_a_compute_network_too_small_is_a_problem_at_its_config_path():
    problems = addr.address_problems(_with_compute(_spec(448), "10.0.0.0/18"))
    assert [p.path for p in problems] == ["railyard:fabric.compute.cidr"]
    assert "/17" in problems[0].allowed


def _with_compute(spec, cidr: str):
    return dataclasses.replace(spec, fabric=dataclasses.replace(
        spec.fabric, compute=dataclasses.replace(spec.fabric.compute, cidr=ipaddress.ip_network(cidr))))


def test_roce_compute_needs_room_for_the_31s():
    spec = _with_compute(_spec(256, compute="10.0.0.0/14", kind="roce"), "10.0.0.0/16")
    fabric = plan_fabric(spec)
    (need,) = [n for n in addr.address_needs(spec, fabric_plan=fabric) if n.network == "compute"]
    # 32 leaves x 64 uplinks = 2,048 /31 = 4,096 addresses in pool 0's leaf half -> pool blocks of
    # 8,192 -> 65,536 for the link half; the rail half: 8 x 8 x 512 = 32,768. Twice the larger: /15.
    assert need.needed == 131_072 and not need.ok
    assert addr.address_problems(spec, fabric_plan=fabric)[0].path == "railyard:fabric.compute.cidr"
