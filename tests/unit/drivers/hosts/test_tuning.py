"""The hosts driver's per-host variables, which `railyard tune` and the Pulumi program both get
from the registry: how Ansible reaches each listed server, and its rails' plan addresses."""

from __future__ import annotations

from pathlib import Path

from railyard import drivers
from railyard.stack import load
from railyard.ssh_client import JUMP_VAR

EXAMPLE = Path(__file__).resolve().parents[4] / "stacks/Pulumi.onprem-dgx.yaml"


def test_a_hosts_node_gets_its_user_jump_host_and_the_plans_rail_addresses():
    spec, plan = load(EXAMPLE)
    node = plan.nodes[3]
    v = drivers.node_vars(spec, plan, node.name)
    assert v["ansible_user"] == "root" and "ansible_port" not in v
    assert v[JUMP_VAR]["address"] == "203.0.113.10" and v[JUMP_VAR]["user"] == "admin"
    assert v[JUMP_VAR]["host_keys"] == [spec.driver_config.host("dgx", 3).jump_host.host_keys[0]]
    assert [(i["name"], i["address"], i["prefixlen"], i["rail"]) for i in v["rail_network_interfaces"]] == \
        [(n.netdev, n.ip, n.prefixlen, n.rail) for n in node.nics]
    # InfiniBand rails have no router, so no compute network is routed through one.
    assert all(i["gateway"] is None for i in v["rail_network_interfaces"]) and "rail_network_compute_cidr" not in v
    # The rail files carry the planned IPoIB MTU (the 4096-byte link MTU less IPoIB's header).
    assert {i["mtu"] for i in v["rail_network_interfaces"]} == {plan.networks.compute.mtu} == {4092}


def test_the_lab_adds_nothing_per_node():
    spec, plan = load(EXAMPLE.with_name("Pulumi.lab.yaml"))
    assert drivers.node_vars(spec, plan, plan.nodes[0].name) == {}


def test_a_hosts_node_gets_the_parallel_file_systems_mount_from_the_stack():
    spec, plan = load(EXAMPLE)
    v = drivers.node_vars(spec, plan, plan.nodes[0].name)
    assert (v["parallel_fs_kind"], v["parallel_fs_mount"], v["parallel_fs_source"], v["parallel_fs_options"]) == \
        ("lustre", "/mnt/pfs", "198.18.103.250@tcp:198.18.103.251@tcp:/lustre", "")
