"""railyard:openstack: what a stack must say before the cloud is asked for anything, every problem
at once, each at the key to change; and the model's own rules, which hold on openstack stacks too."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from railyard.drivers.openstack import rules
from railyard.drivers.openstack.config import OpenStackConfig, Segment
from railyard.model.errors import SpecError
from railyard.stack import load_stack_file, parse_config
from tests.unit.drivers.openstack.sections import JUMP_KEY, PUBLIC_KEY, section

O = "railyard:openstack"


def config(**openstack: Any) -> dict[str, Any]:
    """One dgx-h100 pool, one VM of 8 GPUs per host on RoCE: 8 rails; its vCPUs fit nova's pinning
    under cpuThreadPolicy prefer exactly (100 of each NUMA node's 112 threads, 12 the hypervisor's)."""
    return {
        "railyard:region": "r", "railyard:layout": "virtual", "railyard:driver": "openstack",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 2, "vmsPerHost": 1,
                                "vm": {"gpus": 8, "vfs": 8, "vcpus": 200, "memoryGiB": 1600}}],
        "railyard:fabric": {"compute": {"kind": "roce", "cidr": "10.0.0.0/12"}, "storage": {"cidr": "10.64.0.0/14"},
                            "management": {"cidr": "10.68.0.0/14"}},
        "railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": 85}},
        O: section(8, **openstack),
    }


def problems(cfg: dict[str, Any]) -> list:
    with pytest.raises(SpecError) as bad:
        parse_config(cfg, "t")
    return list(bad.value.problems)


def paths(cfg: dict[str, Any]) -> list[str]:
    return [p.path for p in problems(cfg)]


def test_a_whole_section_becomes_the_drivers_config():
    spec = parse_config(config(storage={"vni": 5001}, cpuThreadPolicy="prefer", rootDiskGiB=300,
                               dnsNameservers=["10.68.0.53"], pools={"gpu": {"serverGroupPolicy": "anti-affinity"}}),
                        "t")
    c: OpenStackConfig = spec.driver_config
    assert (c.image, c.public_key, c.uses_agent, c.gpu_alias, c.user) == ("ubuntu-22.04-nvidia", PUBLIC_KEY, True,
                                                                           "h100", "ubuntu")
    assert c.management == Segment("physnet-mgmt", vlan=10, where=f"{O}.management")
    assert c.storage == Segment(None, vni=5001, where=f"{O}.storage")
    assert [(r.network_type, r.physical_network, r.segmentation_id) for r in c.rails][:2] == [
        ("vlan", "physnet-rail0", 100), ("vlan", "physnet-rail1", 101)]
    assert c.jump_host is not None and (c.jump_host.address, c.jump_host.user, c.jump_host.port,
                                        c.jump_host.host_keys) == ("203.0.113.10", "admin", 22, (JUMP_KEY,))
    assert (c.root_disk_gib, c.dns_nameservers, c.ssh_from) == (300, ("10.68.0.53",), ("203.0.113.0/24",))
    # Nova's defaults where the stack says nothing, the pool's own policy where it does.
    assert (c.cpu_thread_policy, c.pci_numa_affinity_policy) == ("prefer", "required")
    assert (c.server_group("gpu"), c.server_group_policy) == ("anti-affinity", "soft-anti-affinity")
    assert not c.image_is_id


def test_an_image_id_is_told_from_a_name():
    spec = parse_config(config(image="4b1a39f7-6b0e-4c3e-9a5c-0d9f1e2a3b4c"), "t")
    assert spec.driver_config.image_is_id


def test_the_shipped_vela_stack_validates_with_one_segment_per_rail():
    spec = load_stack_file("stacks/Pulumi.us-south-vela.yaml")
    c = spec.driver_config
    assert len(c.rails) == 2 and c.jump_host is not None and c.swift_s3_endpoint


def test_without_the_section_every_required_key_is_named():
    cfg = config()
    del cfg[O]
    assert paths(cfg) == [f"{O}.{k}" for k in ("image", "publicKey", "sshKey", "gpuAlias", "sshFrom", "management",
                                                "rails")]


# --- each bad input, at its key ---------------------------------------------------------------------


def _edit(**values: Any) -> Callable[[dict], None]:
    return lambda c: c[O].update(values)


BAD: dict[str, tuple[Callable[[dict], None], str, str]] = {
    "thread_policy": (_edit(cpuThreadPolicy="dedicated"), f"{O}.cpuThreadPolicy", "prefer, isolate, require"),
    "pci_numa_policy": (_edit(pciNumaAffinityPolicy="strict"), f"{O}.pciNumaAffinityPolicy",
                        "required, preferred, legacy, socket"),
    "server_group_policy": (_edit(serverGroupPolicy="antiaffinity"), f"{O}.serverGroupPolicy",
                            "did you mean anti-affinity?"),
    "pool_server_group_policy": (_edit(pools={"gpu": {"serverGroupPolicy": "spread"}}),
                                 f"{O}.pools.gpu.serverGroupPolicy", "soft-anti-affinity"),
    "pool_that_is_not_there": (_edit(pools={"cpu": {"serverGroupPolicy": "affinity"}}), f"{O}.pools.cpu", "gpu"),
    "rail_without_physical_network": (lambda c: c[O]["rails"][3].pop("physicalNetwork"),
                                      f"{O}.rails[3].physicalNetwork", "physical_device_mappings"),
    "rail_without_segment": (lambda c: c[O]["rails"][2].pop("vlan"), f"{O}.rails[2].vlan",
                             "SR-IOV ports bind on VLANs"),
    # Neutron's SR-IOV mechanism driver binds a VF port on VLAN and flat networks only.
    "rail_on_a_vxlan": (lambda c: c[O]["rails"].__setitem__(0, {"vni": 9}), f"{O}.rails[0].vni",
                        "SR-IOV mechanism driver binds a direct (VF) port only on a VLAN or flat network"),
    "rail_with_vlan_and_vni": (lambda c: c[O]["rails"][1].update(vni=7), f"{O}.rails[1].vni", "a rail is a VLAN"),
    "management_with_vlan_and_vni": (lambda c: c[O]["management"].update(vni=7), f"{O}.management", "one segment"),
    "vxlan_with_physical_network": (lambda c: c[O].update(management={"physicalNetwork": "p", "vni": 9}),
                                    f"{O}.management.physicalNetwork", "no physical network for a VXLAN"),
    "vlan_out_of_range": (lambda c: c[O]["rails"][4].update(vlan=4095), f"{O}.rails[4].vlan", "<= 4094"),
    "too_few_rails": (lambda c: c[O]["rails"].pop(), f"{O}.rails", "the plan has 8 rails"),
    "rail_segment_twice": (lambda c: c[O]["rails"][5].update(physicalNetwork="physnet-rail1", vlan=101),
                           f"{O}.rails[5].vlan", "railyard:openstack.rails[1] is on it"),
    "vni_twice": (lambda c: c[O].update(management={"vni": 77}, storage={"vni": 77}), f"{O}.storage.vni",
                  "railyard:openstack.management is on it"),
    "rails_sharing_a_physical_network": (lambda c: c[O]["rails"][6].update(physicalNetwork="physnet-rail0"),
                                         f"{O}.rails[6].physicalNetwork", "VF of another rail's NIC"),
    "unknown_segment_key": (lambda c: c[O]["management"].update(vlanId=3), f"{O}.management.vlanId", ""),
    "jump_host_unpinned": (lambda c: c[O]["jumpHost"].pop("hostKey"), f"{O}.jumpHost.hostKey", "always pinned"),
    "jump_host_key_mistyped": (lambda c: c[O]["jumpHost"].update(hostKey="ssh-rsa " + JUMP_KEY.split()[1]),
                               f"{O}.jumpHost.hostKey", "does not begin with its type"),
    "jump_host_with_user_in_address": (lambda c: c[O]["jumpHost"].update(address="admin@bastion.example.net"),
                                       f"{O}.jumpHost.address", "user:"),
    "ssh_from_everywhere": (_edit(sshFrom=["0.0.0.0/0"]), f"{O}.sshFrom[0]", "every address"),
    "jump_host_outside_ssh_from": (_edit(sshFrom=["198.51.100.0/24", "2001:db8::/48"]), f"{O}.jumpHost.address",
                                   "inside railyard:openstack.sshFrom (198.51.100.0/24, 2001:db8::/48)"),
    "ssh_from_host_bits": (_edit(sshFrom=["203.0.113.7/24"]), f"{O}.sshFrom[0]", "203.0.113.0/24"),
    "public_key_garbled": (_edit(publicKey="ssh-ed25519 not-base64!"), f"{O}.publicKey", "not base64"),
    "alias_with_count": (_edit(gpuAlias="h100:8"), f"{O}.gpuAlias", "`<alias>:<count>`"),
    "image_as_secret": (_edit(image={"secure": "v1:abc"}), f"{O}.image", "only railyard:openstack.sshKey"),
    "strict_anti_affinity_with_two_vms_a_host": (
        lambda c: (c[O].update(serverGroupPolicy="anti-affinity"),
                   c["railyard:nodePools"][0].update(vmsPerHost=2, vm={"gpus": 4, "vfs": 4, "vcpus": 96,
                                                                       "memoryGiB": 800})),
        f"{O}.serverGroupPolicy", "would need 4 hypervisors"),
    "strict_affinity_over_two_hosts": (_edit(serverGroupPolicy="affinity"), f"{O}.serverGroupPolicy",
                                       "one hypervisor"),
    "swift_without_its_s3_endpoint": (lambda c: c.update({"railyard:storage": {"object": {"bucket": "d"}}}),
                                      f"{O}.swiftS3Endpoint", "Swift container"),
    "swift_endpoint_beside_the_stacks_own": (
        lambda c: (c.update({"railyard:storage": {"object": {"bucket": "d", "endpoint": "https://s3.example.net"}}}),
                   c[O].update(swiftS3Endpoint="https://swift.example.net")),
        f"{O}.swiftS3Endpoint", "remove it"),
    "bare_metal": (lambda c: (c.update({"railyard:layout": "bare-metal"}), c["railyard:nodePools"][0].pop("vm"),
                              c["railyard:nodePools"][0].pop("vmsPerHost"), c.pop("railyard:tuning")),
                   "railyard:layout", "Ironic"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_value_is_refused_at_its_key_with_why(case):
    edit, path, said = BAD[case]
    cfg = copy.deepcopy(config())
    edit(cfg)
    found = problems(cfg)
    assert path in [p.path for p in found], found
    (problem,) = [p for p in found if p.path == path]
    assert said in f"{problem.allowed} {problem.hint}", str(problem)


def test_management_and_storage_may_be_vxlans_but_a_rail_always_names_its_physical_network():
    c = parse_config(config(management={"vni": 5000}, storage={"vni": 5001}), "t").driver_config
    assert (c.management.network_type, c.storage.network_type) == ("vxlan", "vxlan")
    assert {(r.network_type, r.physical_network is not None) for r in c.rails} == {("vlan", True)}
    assert "vni" not in rules.KEYS["rails[]"]
    # A VXLAN rail is told why at its vni, and what a rail needs instead at its vlan.
    cfg = config()
    cfg[O]["rails"][0] = {"vni": 9, "vlanID": 3}
    found = {p.path: p for p in problems(cfg)}
    assert sorted(found) == [f"{O}.rails[0].vlan", f"{O}.rails[0].vlanID", f"{O}.rails[0].vni"]
    assert found[f"{O}.rails[0].vlanID"].allowed == "one of physicalNetwork, vlan"
    assert found[f"{O}.rails[0].vlanID"].hint == "did you mean vlan?"


def test_a_jump_host_in_any_ssh_from_network_or_named_by_dns_passes():
    parse_config(config(sshFrom=["198.51.100.0/24", "203.0.113.0/28"]), "t")
    # A DNS name is not looked up: validation makes no network connection.
    parse_config(config(sshFrom=["198.51.100.0/24"], jumpHost={"address": "bastion.example.net", "hostKey": JUMP_KEY}),
                 "t")
    # An sshFrom that cannot be read is told once, not again as the jump host's.
    assert paths(config(sshFrom=["198.51.100.0/24", "203.0.113.7/24"])) == [f"{O}.sshFrom[1]"]


def test_a_plain_text_private_key_is_refused_and_never_shown():
    leaked = "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAA"
    for key in ("sshKey", "publicKey"):
        found = problems(config(**{key: leaked}))
        (problem,) = [p for p in found if p.path == f"{O}.{key}"]
        assert "b3BlbnNzaC1rZXktdjEAAAAA" not in str(problem) and "clear" in problem.hint


def test_a_secret_ssh_key_is_kept_as_ciphertext():
    c = parse_config(config(sshKey={"secure": "v1:CIPHER"}), "t").driver_config
    assert not c.uses_agent and c.ssh_key.ciphertext == "v1:CIPHER" and "CIPHER" not in repr(c)


def test_every_problem_is_reported_at_once():
    cfg = config(image=None, cpuThreadPolicy="fast", sshFrom=[])
    cfg[O]["rails"][0].pop("physicalNetwork")
    assert paths(cfg) == [f"{O}.image", f"{O}.cpuThreadPolicy", f"{O}.sshFrom", f"{O}.rails[0].physicalNetwork"]


# --- flavors nova cannot pin ------------------------------------------------------------------------


def test_isolate_gives_each_vcpu_a_core_so_a_flavor_that_fit_in_threads_no_longer_does():
    parse_config(config(cpuThreadPolicy="prefer"), "t")  # 100 vCPUs per NUMA node, 100 threads free
    (problem,) = problems(config(cpuThreadPolicy="isolate"))
    assert problem.path == "railyard:nodePools[0].vm.vcpus"
    assert problem.allowed.startswith("at most 100 (50 per guest NUMA node)")
    assert "50 cores are left" in problem.hint and "cpuThreadPolicy to prefer" in problem.hint


def _vela(vm: dict[str, Any], **openstack: Any) -> dict[str, Any]:
    """vela-a100: its threads are unknown (no capacity rule), nothing is pinned by the plan, but
    nova still splits a flavor evenly over its two NUMA nodes."""
    cfg = config(**openstack)
    cfg["railyard:nodePools"] = [{"name": "vela", "sku": "vela-a100", "count": 2, "vmsPerHost": 1, "vm": vm}]
    cfg["railyard:fabric"]["compute"].update(speed="100gbe")
    cfg[O]["rails"] = cfg[O]["rails"][:2]
    return cfg


def test_a_flavor_nova_cannot_split_evenly_over_its_numa_nodes_is_refused_at_the_key():
    vm = {"gpus": 8, "vfs": 2, "vcpus": 80, "memoryGiB": 1200}
    parse_config(_vela(vm), "t")
    (problem,) = problems(_vela({**vm, "vcpus": 81}))
    assert (problem.path, problem.allowed.split(" for ")[0]) == ("railyard:nodePools[0].vm.vcpus", "a multiple of 2")
    assert "hw:numa_nodes=2" in problem.hint
    # 1201 GiB over two guest NUMA nodes is not whole 1 GiB pages on each.
    (problem,) = problems(_vela({**vm, "memoryGiB": 1201}))
    assert problem.path == "railyard:nodePools[0].vm.memoryGiB" and "hugepages" in problem.hint


# --- the model's own rules hold on openstack stacks ---------------------------------------------------


def test_a_vm_with_more_vcpus_than_its_host_keeps_for_vms_is_refused():
    cfg = config()
    cfg["railyard:nodePools"][0]["vm"]["vcpus"] = 300
    found = problems(cfg)
    (problem,) = [p for p in found if p.path == "railyard:nodePools[0].vm.vcpus" and "<= 201" in p.allowed]
    assert "keeps 23 for the hypervisor" in problem.hint


def test_more_vfs_than_the_nics_support_are_refused():
    cfg = config(**{})
    cfg["railyard:tuning"]["sriov"] = {"vfsPerPf": 500}
    (problem,) = [p for p in problems(cfg) if p.path == "railyard:tuning.sriov.vfsPerPf"]
    assert "sriov_total_vfs" in problem.hint


def test_overlapping_networks_are_refused():
    cfg = config()
    cfg["railyard:fabric"]["storage"]["cidr"] = "10.68.0.0/15"
    (problem,) = [p for p in problems(cfg) if p.path == "railyard:fabric.storage.cidr"]
    assert "overlaps railyard:fabric.management.cidr" in problem.hint


def test_the_rail_count_follows_the_pools_skus():
    spec = parse_config(config(), "t")
    assert rules.rail_count(spec) == 8
