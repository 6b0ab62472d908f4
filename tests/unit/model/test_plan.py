"""make_plan: the whole plan of a stack, its JSON summary and its per-node view."""

from __future__ import annotations

import dataclasses
import ipaddress
import json

import pytest

from railyard.model.catalog import load_catalog
from railyard.model.fabric import FabricPlan
from railyard.model.plan import make_plan
from railyard.stack import load_stack_file
from tests.unit.model.model_only import parse_config
from railyard.model.topology import Topology

CATALOG = load_catalog()


def config(count: int = 2, *, layout: str = "bare-metal", kind: str = "infiniband", pools=None,
           compute: str = "10.0.0.0/12", **extra) -> dict:
    fabric = {"kind": kind, "speed": "ndr" if kind == "infiniband" else "400gbe",
              "switch": "qm9700" if kind == "infiniband" else "sn5600", "cidr": compute}
    cfg = {
        "railyard:region": "r", "railyard:layout": layout, "railyard:driver": "coreweave",
        "railyard:nodePools": pools or [{"name": "gpu", "sku": "dgx-h100", "count": count}],
        "railyard:fabric": {"compute": fabric, "storage": {"cidr": "10.64.0.0/14"},
                            "management": {"cidr": "10.68.0.0/14"}},
        "railyard:storage": {"parallelFs": {"kind": "lustre", "mount": "/mnt/pfs", "capacityTiB": 100},
                             "localCache": {"mount": "/mnt/cache", "raid": "raid0", "fs": "xfs"}},
    }
    cfg.update(extra)
    return cfg


def plan_of(cfg: dict):
    return make_plan(parse_config(cfg, stack="t"), CATALOG)


def _at(d: dict, path: str):
    for key in path.split("."):
        d = d[key]
    return d


REQUIRED_INTEGERS = (
    "nodes", "gpus", "fabrics.compute.tiers", "fabrics.compute.switches.leaf", "fabrics.compute.switches.spine",
    "fabrics.compute.switches.core", "fabrics.compute.links.node_leaf", "fabrics.compute.links.leaf_spine",
    "fabrics.compute.links.spine_core", "fabrics.compute.cables",
)


@pytest.mark.parametrize("stack", ["lab", "us-east-bm"])
def test_summary_has_the_promised_keys_and_types_and_is_json(stack):
    s = make_plan(load_stack_file(f"stacks/Pulumi.{stack}.yaml")).summary()
    for path in REQUIRED_INTEGERS:
        value = _at(s, path)
        assert isinstance(value, int) and not isinstance(value, bool), f"{path} = {value!r}"
    for path in ("fabrics.compute.oversubscription", "fabrics.compute.bisection_gbps"):
        assert isinstance(_at(s, path), (int, float)), path
    assert json.loads(json.dumps(s)) == s


def test_the_lab_stack_plans_two_dgx_h100_on_one_su():
    s = make_plan(load_stack_file("stacks/Pulumi.lab.yaml")).summary()
    assert (s["nodes"], s["gpus"]) == (2, 16)
    c = s["fabrics"]["compute"]
    assert (c["tiers"], c["switches"]["leaf"], c["switches"]["spine"], c["links"]["node_leaf"]) == (2, 8, 4, 16)
    assert s["tenants"] == [{"name": "research", "pkey": "0x8001", "namespace": "research", "pools": ["gpu"], "gpu_quota": 16}]


def test_us_east_bm_is_the_448_node_worked_example():
    c = make_plan(load_stack_file("stacks/Pulumi.us-east-bm.yaml")).summary()["fabrics"]["compute"]
    assert c["switches"] == {"leaf": 112, "spine": 128, "core": 64, "total": 304}
    assert c["links"]["spine_core"] == 3584 and c["bisection_gbps"] == 716_800


def test_each_pool_carries_the_pairing_of_its_topology():
    s = plan_of(config(2)).summary()
    expected = Topology.from_sku(CATALOG.nodes["dgx-h100"]).pairing()
    assert s["pools"][0]["pairing"] == expected
    # DGX H100 Table 6: GPU1 is served by mlx5_3, not mlx5_1 (a storage port).
    assert expected["GPU1"] == "mlx5_3"


def test_summary_of_20000_gpus_is_arithmetic(monkeypatch):
    # 2,500 DGX H100 (see model/fabric/test_ib.py for the derivation of the fabric numbers).
    def no_enumeration(self):
        raise AssertionError("the summary enumerated the fabric")

    monkeypatch.setattr(FabricPlan, "links", no_enumeration)
    monkeypatch.setattr(FabricPlan, "switches", no_enumeration)
    plan = plan_of(config(2500))
    s = plan.summary()
    assert (s["nodes"], s["gpus"]) == (2500, 20000)
    assert s["fabrics"]["compute"]["switches"]["total"] == 1784
    assert "nodes" not in plan.__dict__, "Plan.nodes is built only when asked for"


def test_nodes_carry_names_addresses_and_leaf_ports():
    plan = plan_of(config(40))
    n = plan.nodes[33]
    assert (n.name, n.pool, n.index) == ("gpu-33", "gpu", 33)
    assert n.management_ip == "10.68.0.35" and n.storage_ip == "10.64.0.35"
    assert [nic.name for nic in n.nics] == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9",
                                            "mlx5_10", "mlx5_11"]
    assert (n.nics[7].leaf, n.nics[7].leaf_port) == ("gpu-su1-leaf7", 2)
    rails = plan.networks.compute.rails
    for nic in n.nics:
        assert ipaddress.ip_address(nic.ip) in ipaddress.ip_network(rails[nic.rail].cidr)
        assert nic.prefixlen == ipaddress.ip_network(rails[nic.rail].cidr).prefixlen == rails[nic.rail].prefixlen


def test_the_plan_gives_every_nic_its_netdev_and_the_networks_their_services():
    plan = plan_of(config(40, **{"railyard:storage": {"object": {"bucket": "datasets"},
                                                     "localCache": {"mount": "/mnt/cache"}}}))
    nets = plan.networks
    assert nets.compute.routed  # 40 DGX H100 need spines
    # The DGX H100 user guide's names (catalog, Table 6): rail 0 is mlx5_0 = ibp24s0.
    nics = plan.nodes[33].nics
    assert [(n.name, n.netdev) for n in nics[:3]] == [("mlx5_0", "ibp24s0"), ("mlx5_3", "ibp64s0"),
                                                      ("mlx5_4", "ibp79s0")]
    # InfiniBand rails have no IP router: no NIC has a gateway, the rail's first address is reserved.
    assert all(n.gateway is None for node in plan.nodes for n in node.nics)
    for rail in nets.compute.rails:
        assert rail.gateway == str(next(ipaddress.ip_network(rail.cidr).hosts()))
        assert rail.gateway not in {x.ip for node in plan.nodes for x in node.nics}
    storage = ipaddress.ip_network(nets.storage.cidr)
    assert nets.storage.services == {"object_store": str(storage.broadcast_address - 1)}
    assert nets.storage.services["object_store"] not in {node.storage_ip for node in plan.nodes}
    assert nets.management.gateway == "10.68.0.1" and nets.management.prefixlen == 14
    assert plan_of(config(2)).networks.storage.services == {}  # no object tier, no store address
    # The JSON view is the typed one, formatted.
    assert plan.summary()["networks"]["compute"]["rails"] == [r.cidr for r in nets.compute.rails]


def test_roce_nics_and_vfs_route_through_their_rails_gateway():
    pools = [{"name": "gpu", "sku": "dgx-h100", "count": 3, "vmsPerHost": 2,
              "vm": {"vcpus": 80, "memoryGiB": 800, "gpus": 4, "vfs": 4}}]
    plan = plan_of(config(layout="virtual", kind="roce", pools=pools, **{"railyard:driver": "openstack"}))
    rails = plan.networks.compute.rails
    node = plan.nodes[1]
    assert [n.gateway for n in node.nics] == [rails[n.rail].gateway for n in node.nics]
    assert [f.gateway for v in node.vms for f in v.vfs] == [rails[f.rail].gateway for v in node.vms for f in v.vfs]
    assert plan.summary()["networks"]["compute"]["gateways"] == [r.gateway for r in rails]


def test_tuning_targets_are_planned_once_per_node_and_found_by_name():
    plan = plan_of(config(6, **{"railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": 50}}}))
    node = plan.nodes[4]
    targets = plan.tuning(node.name)
    assert plan.tuning(node) is targets
    sku = CATALOG.nodes["dgx-h100"]
    assert sum(targets.hugepages_per_numa.values()) == sku.memory_gib // 2 and targets.hugepages_total == 0
    assert targets.compute_pfs == tuple(n.name for n in node.nics)
    assert targets.cache_drives == sum(d.count for d in sku.nvme if d.role == "data")
    assert targets.pairing == plan.pairing("dgx-h100")
    with pytest.raises(KeyError, match="no host 'gpu-9'.*gpu-0"):
        plan.tuning("gpu-9")


def test_one_load_plans_the_fabric_once(monkeypatch):
    """validation plans the fabric, and the plan takes that FabricPlan (RoCE sizing reads it too)."""
    from railyard import stack
    from railyard.model import fabric, plan
    from railyard.model.spec import rules

    calls = []
    real = fabric.plan_fabric
    for module in (fabric, plan, rules):  # every name it is reached by (rules: spec's check_plan)
        monkeypatch.setattr(module, "plan_fabric", lambda *a, **k: calls.append(1) or real(*a, **k))
    for name in ("us-south-vela", "lab-virtual", "us-east-bm"):
        calls.clear()
        _, planned = stack.load(f"stacks/Pulumi.{name}.yaml")
        planned.summary()
        assert len(calls) == 1, name


def test_host_vars_find_their_node_without_walking_the_plan(monkeypatch):
    """Role variables for every host of a 448-node stack: one walk of the nodes, not one per host."""
    from railyard.model.plan import Plan
    from railyard.tuning.vars import host_vars

    plan = plan_of(config(448))
    walks = []
    real = Plan.iter_nodes
    monkeypatch.setattr(Plan, "iter_nodes", lambda self: walks.append(1) or real(self))
    out = [host_vars(plan.spec, plan, f"gpu-{i}") for i in range(448)]
    assert len(walks) <= 1 and out[447]["railyard_node"] == "gpu-447"


def test_growing_a_pool_keeps_every_existing_node_plan_and_a_second_pool_untouched():
    pools = [{"name": "a", "sku": "dgx-h100", "count": 30}, {"name": "b", "sku": "hgx-h100", "count": 5}]
    small = plan_of(config(pools=pools))
    grown = plan_of(config(pools=[{**pools[0], "count": 70}, {**pools[1], "count": 9}]))
    before = {n.name: n for n in small.nodes}
    after = {n.name: n for n in grown.nodes}
    assert all(after[name] == node for name, node in before.items())


def test_virtual_layout_gives_vms_names_addresses_and_vfs_on_their_own_rails():
    pools = [{"name": "gpu", "sku": "dgx-h100", "count": 3, "vmsPerHost": 2,
              "vm": {"vcpus": 80, "memoryGiB": 800, "gpus": 4, "vfs": 4}}]
    plan = plan_of(config(layout="virtual", kind="roce", pools=pools,
                          **{"railyard:tuning": {"sriov": {"vfsPerPf": 1}}, "railyard:driver": "openstack"}))
    node = plan.nodes[1]
    assert [vm.name for vm in node.vms] == ["gpu-1-vm0", "gpu-1-vm1"]
    assert node.vms[1].gpus == ("GPU4", "GPU5", "GPU6", "GPU7")
    assert [vf.rail for vf in node.vms[1].vfs] == [4, 5, 6, 7]
    assert node.vms[1].vfs[0].pf == "mlx5_6"
    # Host, then its VMs, in the management network; PF, then its VFs, on each rail.
    assert [node.management_ip, node.vms[0].management_ip, node.vms[1].management_ip] == \
        ["10.68.0.5", "10.68.0.6", "10.68.0.7"]
    everything = [a for n in plan.nodes for a in (n.management_ip, *(v.management_ip for v in n.vms))]
    fabric = [a for n in plan.nodes for a in (*(x.ip for x in n.nics), *(f.ip for v in n.vms for f in v.vfs))]
    assert len(set(everything)) == len(everything) and len(set(fabric)) == len(fabric)
    # to_json is written by hand for speed; it must say what the dataclass holds.
    assert json.dumps(node.to_json()) == json.dumps(dataclasses.asdict(node))
    s = plan.summary()
    assert s["vms"] == 6 and s["pools"][0]["vms_per_host"] == 2
    assert "gateways" in s["networks"]["compute"] and "bgp" in s["fabrics"]["compute"]


def test_storage_tiers_for_dgx_h100():
    # DGX H100: 8 data NVMe of 3.84 TB -> 30.72 TB per node in raid0; 100 TiB of Lustre.
    st = plan_of(config(4)).summary()["storage"]
    pool = st["pools"][0]
    assert pool["cache"]["per_node_tb"] == 30.72 and st["tiers"]["local_cache"]["total_tb"] == 122.88
    assert st["tiers"]["parallel_fs"]["capacity_tib"] == 100
    assert st["tiers"]["parallel_fs"]["capacity_tb"] == round(100 * 1.099511627776, 3)
    # The per-drive speed is not in our sources, so it is an assumption the plan says it made.
    assert any("NVMe" in a for a in st["assumptions"])
    assert pool["cache"]["read_gb_s_per_gpu"] == 6.5  # 8 drives x 6.5 GB/s over 8 GPUs


def test_detail_lists_every_node_switch_and_link():
    d = plan_of(config(2)).detail()["detail"]
    assert len(d["nodes"]) == 2 and len(d["switches"]) == 12 and len(d["links"]) == 272
    assert json.dumps(d)
