"""The openstack driver under Pulumi mocks: what an operator would find in the cloud's console
after an `up` (flavors and their extra specs, ports on their rails at the plan's addresses, servers
on exactly their ports, server groups, security group rules, the container) and secrets that stay
secrets. Mocks prove the wiring only: the provider plugin cannot be built here."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor

from railyard.stack import from_config, load
from railyard.ssh_client import JUMP_VAR
from tests.unit.drivers.openstack.sections import JUMP_KEY, section

ROOT = Path(__file__).resolve().parents[4]
HOST_KEY = "pulumi-python:dynamic/openstack:HostKey"
PORT, INSTANCE, FLAVOR = "openstack:networking/port:Port", "openstack:compute/instance:Instance", \
    "openstack:compute/flavor:Flavor"
GROUP, RULE = "openstack:networking/secGroup:SecGroup", "openstack:networking/secGroupRule:SecGroupRule"
FLAVOR_ACCESS = "openstack:compute/flavorAccess:FlavorAccess"
PROJECT = "project-of-the-credentials"
PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----"
STACK_KEY = f"{PRIVATE}\nthe stack's own key\n-----END OPENSSH PRIVATE KEY-----\n"
S3_SECRET = "s3-secret-from-keystone"


class Mocks(pulumi.runtime.Mocks):
    """The provider as it answers: a port gets the fixed address it asks for, a host key and an EC2
    credential their generated values, the credentials' scope its project. Every id names its
    type, so a test can tell a network from its subnet and its security group."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        outs = dict(args.inputs)
        if args.typ == PORT:
            outs["allFixedIps"] = [f["ipAddress"] for f in args.inputs.get("fixedIps", [])]
        if args.typ == HOST_KEY:
            outs.update(public_key=f"ssh-ed25519 AAAA{args.name}", private_key=f"{PRIVATE}\n{args.name}\n")
        if args.typ == "openstack:identity/ec2CredentialV3:Ec2CredentialV3":
            outs.update(access="access-from-keystone", secret=S3_SECRET)
        if args.typ == "openstack:compute/keypair:Keypair":
            outs.setdefault("publicKey", args.inputs.get("publicKey"))
        return f"{args.typ.rsplit(':', 1)[-1]}/{args.name}", outs

    def call(self, args: pulumi.runtime.MockCallArgs):
        if args.token == "openstack:identity/getAuthScope:getAuthScope":
            return {"projectId": PROJECT}
        return {}


class Monitor(MockMonitor):
    """The mocks' monitor, keeping what each registration asked of the engine beside its inputs:
    its resource options (delete before replace, additional secret outputs, dependencies)."""

    def __init__(self, mocks: pulumi.runtime.Mocks):
        super().__init__(mocks)
        self.requests: dict[str, Any] = {}

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        self.requests[response.urn] = request
        return response


def _resolve(output):
    fut = asyncio.get_event_loop().create_future()
    output.apply(lambda v: fut.set_result(v) if not fut.done() else None)
    return asyncio.get_event_loop().run_until_complete(fut)


def _is_secret(output) -> bool:
    return asyncio.get_event_loop().run_until_complete(output.is_secret())


class Built:
    def __init__(self, spec, plan, cluster, inventory):
        self.spec, self.plan, self.cluster, self.inventory = spec, plan, cluster, inventory
        monitor = pulumi.runtime.settings.get_monitor()
        self.resources = {u: r for u, r in monitor.resources.items()}
        self.requests = dict(monitor.requests)

    def of(self, typ: str) -> dict[str, dict]:
        """State by logical name of every resource of that type."""
        return {u.rsplit("::", 1)[1]: r.state for u, r in self.resources.items()
                if u.split("::")[2].rsplit("$", 1)[-1] == typ}

    def options(self, typ: str) -> dict[str, Any]:
        """The registration (its resource options) by logical name of every resource of that type."""
        return {u.rsplit("::", 1)[1]: r for u, r in self.requests.items()
                if u.split("::")[2].rsplit("$", 1)[-1] == typ}

    def urn(self, typ: str, name: str) -> str:
        (urn,) = [u for u in self.resources if u.split("::")[2].rsplit("$", 1)[-1] == typ and u.endswith(f"::{name}")]
        return urn

    def id(self, typ: str, name: str) -> str:
        return f"{typ.rsplit(':', 1)[-1]}/{name}"

    def counts(self) -> Counter:
        return Counter(u.split("::")[2].rsplit("$", 1)[-1] for u in self.resources)


def build(spec, plan, config: dict[str, Any] | None = None) -> Built:
    mocks = Mocks()
    pulumi.runtime.set_mocks(mocks, project="railyard", stack=spec.stack, preview=False, monitor=Monitor(mocks))
    if config is not None:
        # As Pulumi hands the program a stack's config: the secret section decrypted, marked secret.
        pulumi.runtime.set_all_config({f"railyard:{k}": json.dumps(v) for k, v in config.items()},
                                      [f"railyard:{k}" for k in config])
    from components.cluster import Cluster, ClusterArgs
    from railyard.drivers.base import load_driver

    cluster = Cluster(spec.stack, ClusterArgs(spec=spec, plan=plan), load_driver(spec, plan))
    inventory = _resolve(cluster.inventory)
    asyncio.get_event_loop().run_until_complete(pulumi.runtime.stack.wait_for_rpcs())
    return Built(spec, plan, cluster, inventory)


@pytest.fixture(scope="module")
def vela() -> Built:
    return build(*load(ROOT / "stacks" / "Pulumi.us-south-vela.yaml"))


def _config(**openstack: Any) -> dict[str, Any]:
    """Two dgx-h100 hosts of two VMs (3 GPUs, 2 VFs each): VM 0 sits on one host NUMA node, VM 1 on two."""
    return {
        "railyard:region": "lab", "railyard:layout": "virtual", "railyard:driver": "openstack",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 2, "vmsPerHost": 2,
                                "vm": {"gpus": 3, "vfs": 2, "vcpus": 40, "memoryGiB": 400}}],
        "railyard:fabric": {"compute": {"kind": "roce", "cidr": "10.0.0.0/12"}, "storage": {"cidr": "10.64.0.0/14"},
                            "management": {"cidr": "10.68.0.0/14"}},
        "railyard:tuning": {"hugepages": {"size": "2M", "percentOfMemory": 50}},
        "railyard:storage": {"object": {"bucket": "shards"}},
        "railyard:openstack": section(8, sshKey={"secure": "v1:CIPHERTEXT"}, cpuThreadPolicy="isolate",
                                      swiftS3Endpoint="https://swift.example.net",
                                      pools={"gpu": {"serverGroupPolicy": "soft-affinity"}}),
    }


@pytest.fixture(scope="module")
def small() -> Built:
    spec, plan = from_config(_config(), "lab-os")
    # What Pulumi decrypts railyard:openstack to: the section with its secret opened.
    return build(spec, plan, {"openstack": {**_config()["railyard:openstack"], "sshKey": STACK_KEY}})


# --- the resource set -----------------------------------------------------------------------------


def test_us_south_vela_declares_one_server_per_planned_vm_with_its_ports_and_the_networks(vela):
    vms = [vm for n in vela.plan.nodes for vm in n.vms]
    vfs = sum(len(vm.vfs) for vm in vms)
    rails = len(vela.plan.networks.compute.rails)
    assert (len(vms), vfs, rails) == (128, 256, 2)
    counts = vela.counts()
    assert {t: n for t, n in counts.items() if t.startswith("openstack:")} == {
        "openstack:compute/keypair:Keypair": 1,
        # management, storage, and one per rail
        "openstack:networking/network:Network": 2 + rails,
        "openstack:networking/subnet:Subnet": 2 + rails,
        # management and storage: a rail's ports are SR-IOV VFs, which take no security group
        GROUP: 2,
        # SSH from the one sshFrom network and anything from the stack's VMs; the storage network's
        RULE: 1 + 1 + 1,
        "openstack:objectstorage/container:Container": 1,
        "openstack:identity/ec2CredentialV3:Ec2CredentialV3": 1,
        "openstack:compute/flavor:Flavor": 1,
        FLAVOR_ACCESS: 1,
        "openstack:compute/serverGroup:ServerGroup": 1,
        # management, storage and a VF port per planned VF
        PORT: 2 * len(vms) + vfs,
        INSTANCE: len(vms),
    }
    host_keys = list(vela.of(HOST_KEY))
    assert len(host_keys) == len(vms)


def test_the_inventory_lists_every_vm_at_its_management_ports_address_with_its_pinned_host_key(vela):
    planned = [(vm.name, vm.management_ip) for n in vela.plan.nodes for vm in n.vms]
    assert [(m["name"], m["management_ip"]) for m in vela.inventory] == planned
    assert vela.inventory[5]["host_key"] == f"ssh-ed25519 AAAA{planned[5][0]}-host-key"


# --- flavors --------------------------------------------------------------------------------------


def test_the_vela_flavor_has_the_vm_plans_size_and_exactly_the_pinning_extra_specs(vela):
    (flavor,) = vela.of(FLAVOR).values()
    topology, _ = vela.plan.guest("vela-0-vm0")
    assert (flavor["name"], flavor["vcpus"], flavor["ram"], flavor["disk"], flavor["isPublic"]) == \
        ("us-south-vela-vela", 80, 1200 * 1024, 200, False)
    assert flavor["extraSpecs"] == {
        "hw:mem_page_size": "1GB",  # railyard:tuning.hugepages.size 1G
        "hw:cpu_policy": "dedicated",
        "hw:cpu_thread_policy": "prefer",
        "hw:numa_nodes": str(len(topology.cells)),
        "pci_passthrough:alias": "a100:8",
        "hw:pci_numa_affinity_policy": "required",
    }
    assert len(topology.cells) == 2  # its GPUs and VFs sit on both sockets


def test_each_private_flavor_is_granted_to_the_credentials_project_before_a_server_boots_it(small):
    """Nova grants a private flavor to no project, its creator's included: without the grant only
    an admin could boot it."""
    flavors = {small.id(FLAVOR, n): f for n, f in small.of(FLAVOR).items()}
    assert {f["isPublic"] for f in flavors.values()} == {False}
    access = small.of(FLAVOR_ACCESS)
    assert sorted(a["flavorId"] for a in access.values()) == sorted(flavors)
    assert {a["tenantId"] for a in access.values()} == {PROJECT}
    grants = {small.urn(FLAVOR_ACCESS, n) for n in access}
    for name in small.of(INSTANCE):
        assert grants <= set(small.requests[small.urn(INSTANCE, name)].dependencies), name


def test_vms_of_different_shapes_get_a_flavor_each_named_after_their_index(small):
    flavors = {f["name"]: f for f in small.of(FLAVOR).values()}
    assert sorted(flavors) == ["lab-os-gpu-vm0", "lab-os-gpu-vm1"]
    spans = {name: f["extraSpecs"]["hw:numa_nodes"] for name, f in flavors.items()}
    assert spans == {"lab-os-gpu-vm0": "1", "lab-os-gpu-vm1": "2"}
    assert {f["extraSpecs"]["hw:mem_page_size"] for f in flavors.values()} == {"2MB"}
    assert {f["extraSpecs"]["hw:cpu_thread_policy"] for f in flavors.values()} == {"isolate"}
    assert {f["extraSpecs"]["pci_passthrough:alias"] for f in flavors.values()} == {"h100:3"}
    servers = small.of(INSTANCE)
    by_flavor = {name: small.id(FLAVOR, n) for n, f in small.of(FLAVOR).items() for name in [f["name"]]}
    assert servers["gpu-1-vm0"]["flavorId"] == by_flavor["lab-os-gpu-vm0"]
    assert servers["gpu-1-vm1"]["flavorId"] == by_flavor["lab-os-gpu-vm1"]


# --- ports and servers ----------------------------------------------------------------------------


def _rail_ids(built: Built) -> dict[int, tuple[str, str, str]]:
    """Rail -> (its network, subnet and security group ids, "" for none), found by their names."""
    out = {}
    for typ, at in (("openstack:networking/network:Network", 0), ("openstack:networking/subnet:Subnet", 1),
                    ("openstack:networking/secGroup:SecGroup", 2)):
        for name, state in built.of(typ).items():
            label = state["name"].rsplit("-", 1)[-1]
            if label.startswith("rail"):
                out.setdefault(int(label[4:]), ["", "", ""])[at] = built.id(typ, name)
    return {k: tuple(v) for k, v in out.items()}


def test_every_vf_is_an_sr_iov_port_on_its_rails_network_at_the_planned_address(vela):
    ports, rails = vela.of(PORT), _rail_ids(vela)
    for node in vela.plan.nodes:
        for vm in node.vms:
            for vf in vm.vfs:
                port = ports[f"{vm.name}-{vf.name}"]
                network, subnet, group = rails[vf.rail]
                assert port["networkId"] == network
                assert port["fixedIps"] == [{"subnetId": subnet, "ipAddress": vf.ip}]
                assert port["binding"] == {"vnicType": "direct"}
                # Neutron's SR-IOV agent filters no VF: no group pretends to (nor the project's
                # default group, which neutron would add unasked), and port security stays on, as
                # the VF's spoof check.
                assert "securityGroupIds" not in port and port["noSecurityGroups"] is True
                assert port.get("portSecurityEnabled", True) is True
                assert group == ""  # a rail has no security group
    # Nothing but the VFs is an SR-IOV port.
    direct = [n for n, p in ports.items() if p.get("binding")]
    assert len(direct) == sum(len(vm.vfs) for n in vela.plan.nodes for vm in n.vms)


def test_each_server_is_on_exactly_its_ports_management_first(vela):
    servers = vela.of(INSTANCE)
    for node in vela.plan.nodes:
        for vm in node.vms:
            want = [f"{vm.name}-mgmt", f"{vm.name}-storage", *(f"{vm.name}-{vf.name}" for vf in vm.vfs)]
            assert servers[vm.name]["networks"] == [{"port": vela.id(PORT, p)} for p in want]
    mgmt = vela.of(PORT)["vela-3-vm0-mgmt"]
    assert mgmt["fixedIps"][0]["ipAddress"] == vela.plan.vm_named("vela-3-vm0")[1].management_ip
    assert "binding" not in mgmt


def test_a_server_boots_the_image_with_the_keypair_in_its_pools_group_and_says_whose_it_is(vela):
    server = vela.of(INSTANCE)["vela-7-vm0"]
    (group_name,) = vela.of("openstack:compute/serverGroup:ServerGroup")
    assert (server["name"], server["imageName"], server["keyPair"], server["configDrive"]) == \
        ("vela-7-vm0", "ubuntu-22.04-nvidia-ofed", "us-south-vela", True)
    assert server["schedulerHints"] == [{"group": vela.id("openstack:compute/serverGroup:ServerGroup", group_name)}]
    assert server["metadata"] == {"railyard-region": "us-south", "railyard-stack": "us-south-vela",
                                  "railyard-pool": "vela", "railyard-machine": "vela-7-vm0"}
    assert "railyard-stack=us-south-vela" in server["tags"]


def test_a_server_group_per_pool_with_the_stacks_policy(vela, small):
    assert [(g["name"], g["policies"]) for g in vela.of("openstack:compute/serverGroup:ServerGroup").values()] == \
        [("us-south-vela-vela", "anti-affinity")]
    # A pool's own policy wins over the section's default.
    assert [g["policies"] for g in small.of("openstack:compute/serverGroup:ServerGroup").values()] == ["soft-affinity"]


# --- networks -------------------------------------------------------------------------------------


def test_provider_networks_are_on_the_stacks_segments_with_the_plans_subnets_and_mtus(vela):
    nets = {s["name"]: s for s in vela.of("openstack:networking/network:Network").values()}
    subnets = {s["name"]: s for s in vela.of("openstack:networking/subnet:Subnet").values()}
    plan = vela.plan.networks
    assert nets["us-south-vela-management"]["segments"] == [
        {"networkType": "vlan", "physicalNetwork": "physnet-mgmt", "segmentationId": 2080}]
    assert nets["us-south-vela-rail1"]["segments"] == [
        {"networkType": "vlan", "physicalNetwork": "physnet-rail1", "segmentationId": 2129}]
    assert nets["us-south-vela-rail1"]["mtu"] == plan.compute.mtu == 9000
    assert nets["us-south-vela-management"]["mtu"] == plan.management.mtu
    mgmt = subnets["us-south-vela-management"]
    assert (mgmt["cidr"], mgmt["gatewayIp"], mgmt["enableDhcp"]) == (plan.management.cidr, plan.management.gateway,
                                                                      False)
    # The provider refuses gateway_ip beside any no_gateway, false included.
    assert "noGateway" not in mgmt
    for i, rail in enumerate(plan.compute.rails):
        sub = subnets[f"us-south-vela-rail{i}"]
        # No gateway for neutron to hand out as a second default route; the rail's router address
        # stays out of the allocation pool.
        assert (sub["cidr"], sub["noGateway"], sub["enableDhcp"]) == (rail.cidr, True, False)
        assert sub["allocationPools"][0]["start"] != rail.gateway
        assert "gatewayIp" not in sub


def _rules_by_group(built: Built) -> dict[str, list[tuple]]:
    groups = {built.id(GROUP, n): g["name"] for n, g in built.of(GROUP).items()}
    out: dict[str, list[tuple]] = {}
    for r in built.of(RULE).values():
        remote = r.get("remoteIpPrefix") or groups.get(r.get("remoteGroupId", ""), r.get("remoteGroupId"))
        out.setdefault(groups[r["securityGroupId"]], []).append(
            (r["direction"], r["ethertype"], r.get("protocol"), r.get("portRangeMin"), r.get("portRangeMax"), remote))
    return out


def test_ssh_comes_only_from_ssh_from_and_the_vms_reach_one_another_on_management(vela):
    by_group = _rules_by_group(vela)
    # The stack's own VMs: anything (the collectives' bootstrap, ping), from the group itself.
    assert sorted(by_group["us-south-vela-management"], key=str) == [
        ("ingress", "IPv4", "tcp", 22, 22, "203.0.113.0/24"),
        ("ingress", "IPv4", None, None, None, "us-south-vela-management")]
    assert by_group["us-south-vela-storage"] == [("ingress", "IPv4", None, None, None,
                                                  vela.plan.networks.storage.cidr)]
    assert set(by_group) == {"us-south-vela-management", "us-south-vela-storage"}
    groups = {vela.id(GROUP, n): g["name"] for n, g in vela.of(GROUP).items()}
    for name, port in vela.of(PORT).items():
        if name.endswith(("-mgmt", "-storage")):
            want = "us-south-vela-" + ("management" if name.endswith("-mgmt") else "storage")
            assert [groups[g] for g in port["securityGroupIds"]] == [want], name


def test_a_rule_is_named_after_what_it_lets_in_so_reordering_ssh_from_changes_none():
    def built(ssh_from: list[str]) -> Built:
        cfg = _config()
        cfg["railyard:openstack"]["sshFrom"] = ssh_from
        return build(*from_config(cfg, "lab-os"), {"openstack": {**cfg["railyard:openstack"], "sshKey": STACK_KEY}})

    one, other = built(["203.0.113.0/24", "2001:db8::/48"]), built(["2001:db8::/48", "203.0.113.0/24"])
    assert one.of(RULE) == other.of(RULE)
    ipv6 = [r for r in one.of(RULE).values() if r.get("remoteIpPrefix") == "2001:db8::/48"]
    assert [r["ethertype"] for r in ipv6] == ["IPv6"]


def test_what_the_cloud_refuses_twice_is_deleted_before_its_replacement_is_made(vela):
    """Pulumi makes a replacement before it deletes the old resource, unless told otherwise: nova
    refuses a second flavor or keypair of one name, neutron a second identical rule, and a port
    is bound to one server at a time."""
    replaced_after = {u.split("::")[2].rsplit("$", 1)[-1] for u, r in vela.requests.items()
                      if r.deleteBeforeReplace}
    assert replaced_after == {"openstack:compute/flavor:Flavor", "openstack:compute/keypair:Keypair", RULE,
                              INSTANCE}
    assert all(r.deleteBeforeReplace for r in vela.options(INSTANCE).values())
    assert all(r.deleteBeforeReplace for r in vela.options(RULE).values())


def test_servers_wait_for_their_networks_and_the_rules_that_let_ssh_in(vela):
    import pulumi_openstack as openstack

    ready = vela.cluster.fabric.ready
    assert sum(isinstance(r, openstack.networking.SecGroupRule) for r in ready) == 3
    assert sum(isinstance(r, openstack.networking.Subnet) for r in ready) == 4


# --- storage --------------------------------------------------------------------------------------


def test_the_object_tier_is_a_swift_container_named_after_the_bucket_reached_over_s3(vela):
    (container,) = vela.of("openstack:objectstorage/container:Container").values()
    assert container["name"] == "datasets"
    endpoints = vela.cluster.storage.endpoints
    assert endpoints["object_endpoint"] == "https://swift.us-south.example.net"
    assert _resolve(endpoints["bucket"]) == "datasets"
    assert _is_secret(endpoints["secret_key"]) and _resolve(endpoints["secret_key"]) == S3_SECRET
    assert endpoints["parallel_fs"] == {"kind": "gpfs", "mount": "/mnt/pfs", "source": ""}


def test_an_s3_endpoint_the_stack_names_replaces_the_container():
    cfg = _config()
    cfg["railyard:storage"] = {"object": {"bucket": "shards", "endpoint": "https://s3.example.net"}}
    del cfg["railyard:openstack"]["swiftS3Endpoint"]
    built = build(*from_config(cfg, "lab-os"), {"openstack": {**cfg["railyard:openstack"], "sshKey": STACK_KEY}})
    assert not built.of("openstack:objectstorage/container:Container")
    assert not built.of("openstack:identity/ec2CredentialV3:Ec2CredentialV3")
    assert built.cluster.storage.endpoints["object_endpoint"] == "https://s3.example.net"


# --- secrets --------------------------------------------------------------------------------------


def _plaintext(value: Any, needle: str) -> bool:
    """Whether `needle` appears in `value` outside a secret."""
    if rpc.is_rpc_secret(value):
        return False
    if isinstance(value, dict):
        return any(_plaintext(v, needle) for k, v in value.items() if k != "__provider")
    if isinstance(value, list):
        return any(_plaintext(v, needle) for v in value)
    return isinstance(value, str) and needle in value


def test_host_keys_are_injected_as_secret_user_data_and_never_plain_in_any_resource(small):
    server = small.of(INSTANCE)["gpu-0-vm1"]
    assert rpc.is_rpc_secret(server["userData"])
    cloud_config = rpc.unwrap_rpc_secret(server["userData"])
    assert cloud_config.startswith("#cloud-config\n")
    # cloud-init's ssh_keys: the server presents this very key from its first boot.
    assert yaml.safe_load(cloud_config)["ssh_keys"] == {"ed25519_public": "ssh-ed25519 AAAAgpu-0-vm1-host-key",
                                                        "ed25519_private": f"{PRIVATE}\ngpu-0-vm1-host-key\n"}
    # The engine stores a resource's additional secret outputs as secrets; the mocks hand them back
    # as they are, so those are read as the engine would keep them.
    offenders = [u for u, r in small.resources.items()
                 if _plaintext({k: v for k, v in r.state.items()
                                if k not in small.requests[u].additionalSecretOutputs}, PRIVATE)]
    assert offenders == []
    host_keys = dict(small.options(HOST_KEY))
    assert len(host_keys) == 4
    assert all("private_key" in r.additionalSecretOutputs for r in host_keys.values())
    assert all("userData" in r.additionalSecretOutputs for r in small.options(INSTANCE).values())


def test_the_stacks_private_key_reaches_access_as_a_secret_and_nothing_else(small):
    access = small.cluster.access
    assert _is_secret(access.private_key) and _resolve(access.private_key) == STACK_KEY
    assert access.user == "ubuntu"
    assert _resolve(access.public_key).startswith("ssh-ed25519 ")
    assert not [u for u, r in small.resources.items() if _plaintext(r.state, "the stack's own key")]


def test_with_ssh_agent_no_private_key_is_read(vela):
    assert vela.cluster.access.private_key is None


# --- tuning through the jump host -----------------------------------------------------------------


def test_a_vm_is_reached_through_the_jump_host_and_a_hypervisor_gets_nothing(small):
    from railyard import drivers

    spec, plan = small.spec, small.plan
    vm = plan.nodes[1].vms[0]
    want = {JUMP_VAR: {"address": "203.0.113.10", "user": "admin", "port": 22, "host_keys": [JUMP_KEY]}}
    assert drivers.node_vars(spec, plan, vm) == want
    assert drivers.node_vars(spec, plan, vm.name) == want
    assert drivers.node_vars(spec, plan, plan.nodes[1]) == {}
    assert drivers.node_vars(spec, plan, plan.nodes[1].name) == {}


def test_guest_tuning_reaches_every_vm_at_its_ports_address_through_the_jump_host(small):
    """The VMs are the machines: no host tuning (the hypervisors are the operator's), and the guest
    playbook runs in every VM with the guest's own variables, over the provider's address, through
    the stack's jump host; no libvirt domain is rendered (nova makes it)."""
    cluster, plan = small.cluster, small.plan
    assert cluster.tuning is None and cluster.guest_tuning is not None
    hosts = _resolve(cluster.guest_tuning.run.hosts)
    vms = [vm for n in plan.nodes for vm in n.vms]
    assert sorted(hosts) == sorted(vm.name for vm in vms)
    by_name = {m["name"]: m for m in small.inventory}
    for vm in vms:
        h = hosts[vm.name]
        assert h["address"] == by_name[vm.name]["management_ip"] == vm.management_ip
        assert h["host_key"] == by_name[vm.name]["host_key"]
        assert h["vars"][JUMP_VAR]["address"] == "203.0.113.10"
        assert h["vars"]["railyard_node"] == vm.name  # the guest's own variables, not its hypervisor's
    assert _resolve(cluster.guest_tuning.run.playbook) == "guest.yml"
    assert not hasattr(cluster.guest_tuning.run, "artifacts")
