"""The openstack driver's rules for a stack file: its `railyard:openstack` keys, and what they
must say before anything is asked of the cloud.

Pulumi-free: the spec parser (through railyard.stack) and the CLI read it. `parse(section, spec)`
returns the OpenStackConfig (config.py) and every problem at once, each naming its config path.
Nothing here talks to the cloud: an image or a physical network is checked for its form only;
what the cloud holds is the provider's to refuse at `up`.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import TYPE_CHECKING, Any, Mapping

from railyard.drivers import RuleHooks
from railyard.drivers.openstack import layout
from railyard.drivers.openstack.config import (
    DEFAULT_PCI_NUMA_POLICY, DEFAULT_ROOT_DISK_GIB, DEFAULT_SERVER_GROUP_POLICY, DEFAULT_THREAD_POLICY, DEFAULT_USER,
    MAX_ROOT_DISK_GIB, PCI_NUMA_POLICIES, SERVER_GROUP_POLICIES, THREAD_POLICIES, VLAN_MAX, VNI_MAX, JumpHost,
    OpenStackConfig, Segment,
)
from railyard.model import addressing, guest_topology
from railyard.model.errors import Problem
from railyard.model.spec import SectionReader, did_you_mean as _did_you_mean, \
    one_of as _one_of, pool_guests, show as _show
from railyard.ssh_client import DEFAULT_PORT, KEY_TYPES, address_kind, canonical, key_problem

if TYPE_CHECKING:
    from railyard.model.spec import Spec


P = "railyard:openstack"

SEGMENT_KEYS = ("physicalNetwork", "vlan", "vni")
# A rail is a VLAN: its VFs are SR-IOV ports, which neutron binds on VLAN and flat networks only.
RAIL_KEYS = ("physicalNetwork", "vlan")
KEYS: dict[str, tuple[str, ...]] = {
    "": ("image", "user", "publicKey", "sshKey", "rootDiskGiB", "gpuAlias", "cpuThreadPolicy",
         "pciNumaAffinityPolicy", "serverGroupPolicy", "sshFrom", "jumpHost", "dnsNameservers", "swiftS3Endpoint",
         "management", "storage", "rails", "pools"),
    "jumpHost": ("address", "user", "port", "hostKey"),
    "management": SEGMENT_KEYS,
    "storage": SEGMENT_KEYS,
    "rails[]": RAIL_KEYS,
    "pools.<pool>": ("serverGroupPolicy",),
}

# Neutron's physical network names are the operator's ML2 labels: no ':' or ',' (its own
# separators in bridge_mappings and physical_device_mappings) and no whitespace.
_PHYSNET = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# A nova PCI alias name; ':' and ',' separate aliases and counts in pci_passthrough:alias.
_ALIAS = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class _Reader(SectionReader):
    """The section's readers: each returns None (and records why) when a value cannot be used."""

    def __init__(self) -> None:
        super().__init__(f"only {P}.sshKey may be a secret here")

    def public_key(self, m: Mapping) -> str | None:
        path = f"{P}.publicKey"
        allowed = f"an SSH public key `<type> <base64> [comment]` (<type>: {', '.join(KEY_TYPES)})"
        value = self.string(m, "publicKey", path, allowed, required=True,
                            hint="the public half of sshKey, e.g. the line of ~/.ssh/id_ed25519.pub")
        if value is None:
            return None
        if "PRIVATE KEY" in value:
            # Never echo it: it is the private key, written in the clear.
            self.problem(path, "a private key (not shown)", allowed, "give the .pub line here and the private key as "
                         "the secret sshKey; replace the key: it was written in the clear")
            return None
        why = key_problem(value)
        if why is not None:
            self.problem(path, _show(value), allowed, why)
            return None
        return value

    def host_key(self, m: Mapping, path: str) -> str | None:
        allowed = f"a host key `<type> <base64>` (<type>: {', '.join(KEY_TYPES)})"
        value = self.string(m, "hostKey", path, allowed, required=True,
                            hint="a jump host is always pinned: take its key from its console or an ssh-keyscan "
                                 "on a trusted network")
        if value is None:
            return None
        why = key_problem(value)
        if why is not None:
            self.problem(path, _show(value), allowed, why)
            return None
        return " ".join(value.split()[:2])

    def jump_host(self, value: Any) -> JumpHost | None:
        path = f"{P}.jumpHost"
        m = self.mapping(value, path, KEYS["jumpHost"])
        if not m:
            return None
        allowed = "an IPv4 or IPv6 address, or a DNS name"
        address = self.string(m, "address", f"{path}.address", allowed, required=True)
        if address is not None and address_kind(address) is None:
            self.problem(f"{path}.address", _show(address), allowed,
                         "give the user in user: and the port in port:" if "@" in address else "")
            address = None
        user = self.user(m, "user", f"{path}.user")
        port = self.integer(m, "port", f"{path}.port", minimum=1, maximum=65535) or DEFAULT_PORT
        key = self.host_key(m, f"{path}.hostKey")
        if address is None or key is None:
            return None
        return JumpHost(canonical(address), user, port, (key,))

    def cidrs(self, m: Mapping, key: str, path: str, *, required: bool) -> tuple[str, ...]:
        allowed = "a list of networks in CIDR form, e.g. [203.0.113.0/24, 2001:db8::/48]"
        value = self.plain(m, key, path, allowed)
        if value is None:
            if required:
                self.missing(path, allowed, "SSH reaches the servers only from these networks (the jump host's, "
                                            "an operator's)")
            return ()
        if not isinstance(value, list) or not value:
            self.problem(path, _show(value), allowed)
            return ()
        out: list[str] = []
        for i, item in enumerate(value):
            try:
                net = ipaddress.ip_network(item.strip(), strict=True) if isinstance(item, str) else None
            except ValueError as exc:
                hint = f"host bits are set; the network is {ipaddress.ip_network(item.strip(), strict=False)}" \
                    if "host bits set" in str(exc) else ""
                self.problem(f"{path}[{i}]", _show(item), allowed, hint)
                continue
            if net is None or "/" not in item:
                self.problem(f"{path}[{i}]", _show(item), allowed, "give the prefix length, e.g. /32 for one address"
                             if isinstance(item, str) else "")
                continue
            if net.prefixlen == 0:
                self.problem(f"{path}[{i}]", _show(item), "a network smaller than the whole Internet",
                             "SSH would be open to every address; name the jump host's or the operators' networks")
                continue
            if str(net) not in out:
                out.append(str(net))
        return tuple(out)

    def nameservers(self, m: Mapping) -> tuple[str, ...]:
        path = f"{P}.dnsNameservers"
        allowed = "a list of IPv4 addresses"
        value = self.plain(m, "dnsNameservers", path, allowed)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.problem(path, _show(value), allowed)
            return ()
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str) or address_kind(item.strip()) != "ipv4":
                self.problem(f"{path}[{i}]", _show(item), "an IPv4 address", "the management subnet is IPv4")
                continue
            out.append(canonical(item.strip()))
        return tuple(out)

    def url(self, m: Mapping, key: str, path: str) -> str | None:
        allowed = "an http(s) URL, e.g. https://swift.example.net"
        value = self.string(m, key, path, allowed)
        if value is None:
            return None
        try:
            url = urllib.parse.urlsplit(value)
            url.port
        except ValueError:
            self.problem(path, _show(value), allowed)
            return None
        if url.username is not None or url.password is not None:
            self.problem(path, "a URL with a user or password in it (not shown)", allowed,
                         "the driver issues the S3 credentials; if the URL held a password, change it")
            return None
        if url.scheme not in ("http", "https") or not url.hostname or address_kind(url.hostname) is None:
            self.problem(path, _show(value), allowed)
            return None
        return value.rstrip("/")

    def segment(self, value: Any, path: str, section: str) -> Segment | None:
        """A provider network's segment (management, storage, a rail)."""
        rail = section == "rails[]"
        vxlan = rail and isinstance(value, dict) and "vni" in value
        if vxlan:
            # Told with why, not as a key rails[] does not know; the rest of the rail is read as usual.
            self.problem(f"{path}.vni", _show(value["vni"]), f"nothing: a rail is a VLAN (vlan 1-{VLAN_MAX} on "
                         "physicalNetwork)", "neutron's SR-IOV mechanism driver binds a direct (VF) port only on a "
                         "VLAN or flat network, and nova picks the port's VF by the rail's physical network, which a "
                         "VXLAN has none of")
            value = {k: v for k, v in value.items() if k != "vni"}
        m = self.mapping(value, path, KEYS[section])
        if m is None:
            return None
        pallowed = "the name of a physical network in neutron's ML2 configuration (letters, digits, '_', '.', '-')"
        physnet = self.string(m, "physicalNetwork", f"{path}.physicalNetwork", pallowed)
        if physnet is not None and not _PHYSNET.match(physnet):
            self.problem(f"{path}.physicalNetwork", _show(physnet), pallowed)
            physnet = None
        vlan = self.integer(m, "vlan", f"{path}.vlan", minimum=1, maximum=VLAN_MAX)
        vni = self.integer(m, "vni", f"{path}.vni", minimum=1, maximum=VNI_MAX)
        given = [k for k in ("vlan", "vni") if m.get(k) is not None]
        if len(given) == 2:
            self.problem(path, "both vlan and vni", "one of vlan (a VLAN on physicalNetwork) or vni (a VXLAN)",
                         "a network has one segment")
            return None
        if not given and rail:
            self.problem(f"{path}.vlan", "nothing (the key is missing)", f"a VLAN ID 1-{VLAN_MAX} on physicalNetwork",
                         "the VLAN neutron makes the rail's network on (SR-IOV ports bind on VLANs)")
            return None
        if not given:
            self.problem(f"{path}.vlan", "nothing (the key is missing)",
                         f"a VLAN ID 1-{VLAN_MAX} on physicalNetwork, or vni: a VXLAN VNI 1-{VNI_MAX}",
                         "the segment neutron makes the network on")
            return None
        if given == ["vlan"] and m.get("physicalNetwork") is None:
            self.missing(f"{path}.physicalNetwork", pallowed,
                         "a VLAN is a VLAN of a physical network: the one the hosts' NICs for it are mapped to "
                         "(physical_device_mappings for SR-IOV, bridge_mappings for Open vSwitch)")
            return None
        if given == ["vni"] and m.get("physicalNetwork") is not None:
            self.problem(f"{path}.physicalNetwork", _show(m.get("physicalNetwork")), "nothing with vni",
                         "neutron takes no physical network for a VXLAN network; remove it, or give vlan instead "
                         "of vni")
            return None
        if vxlan or (vlan is None and vni is None) or (given == ["vlan"] and physnet is None):
            return None
        return Segment(physnet if vlan is not None else None, vlan, vni, path)


def parse(section: Any, spec: Spec) -> tuple[OpenStackConfig | None, list[Problem]]:
    """The OpenStackConfig of a stack's `railyard:openstack` and its problems (config None when
    there are any)."""
    r = _Reader()
    s = section if isinstance(section, dict) else {}
    if getattr(spec, "layout", None) == "bare-metal":
        r.problem("railyard:layout", "'bare-metal'", "'virtual' for driver openstack",
                  "the openstack driver's machines are nova VMs on the operator's hypervisors; bare metal through "
                  "Ironic is not implemented")
    image = r.string(s, "image", f"{P}.image", "a Glance image name or ID", required=True,
                     hint="the image every server boots (with the GPU driver and the RDMA stack the roles expect)")
    user = r.user(s, "user", f"{P}.user") or DEFAULT_USER
    public_key = r.public_key(s)
    ssh_key = r.ssh_key(s, "openstack")
    disk = r.integer(s, "rootDiskGiB", f"{P}.rootDiskGiB", minimum=1, maximum=MAX_ROOT_DISK_GIB) \
        or DEFAULT_ROOT_DISK_GIB
    alias = r.string(s, "gpuAlias", f"{P}.gpuAlias", "a nova PCI alias name", required=True,
                     hint="the alias of the GPUs in the operator's nova.conf [pci] alias")
    if alias is not None and not _ALIAS.match(alias):
        r.problem(f"{P}.gpuAlias", _show(alias), "a nova PCI alias name: letters, digits, '_', '.', '-'",
                  "pci_passthrough:alias is `<alias>:<count>`, so the name has no ':' or ','")
        alias = None
    threads = r.choice(s, "cpuThreadPolicy", f"{P}.cpuThreadPolicy", THREAD_POLICIES, default=DEFAULT_THREAD_POLICY)
    pci_numa = r.choice(s, "pciNumaAffinityPolicy", f"{P}.pciNumaAffinityPolicy", PCI_NUMA_POLICIES,
                        default=DEFAULT_PCI_NUMA_POLICY)
    group = r.choice(s, "serverGroupPolicy", f"{P}.serverGroupPolicy", SERVER_GROUP_POLICIES,
                     default=DEFAULT_SERVER_GROUP_POLICY)
    ssh_from = r.cidrs(s, "sshFrom", f"{P}.sshFrom", required=True)
    jump = r.jump_host(s.get("jumpHost"))
    if jump is not None and ssh_from and not any(p.path.startswith(f"{P}.sshFrom") for p in r.problems):
        _check_jump_host(r, jump, ssh_from)
    dns = r.nameservers(s)
    swift = r.url(s, "swiftS3Endpoint", f"{P}.swiftS3Endpoint")

    management = None
    if s.get("management") is None:
        r.missing(f"{P}.management", "a mapping {physicalNetwork, vlan} or {vni}",
                  "the provider network the servers' management ports are on, with the plan's "
                  "railyard:fabric.management.cidr")
    else:
        management = r.segment(s.get("management"), f"{P}.management", "management")
    storage = r.segment(s.get("storage"), f"{P}.storage", "storage") if s.get("storage") is not None else None
    rails = _rails(r, s, spec)
    pools = _pools(r, s, spec)

    segments = [x for x in (management, storage, *rails) if x is not None]
    _check_segments(r, segments)
    _check_server_groups(r, spec, group, pools)
    if threads is not None:
        _check_flavors(r, spec, threads, pci_numa or DEFAULT_PCI_NUMA_POLICY, disk)
    _check_object_store(r, spec, swift, "swiftS3Endpoint" in s)

    segs = [x for x in rails if x is not None]
    if (r.problems or image is None or public_key is None or ssh_key is None or alias is None or threads is None
            or pci_numa is None or group is None or management is None or not ssh_from or len(segs) != len(rails)):
        return None, r.problems
    return OpenStackConfig(
        image=image, public_key=public_key, ssh_key=ssh_key, gpu_alias=alias, ssh_from=ssh_from,
        management=management, rails=tuple(segs), storage=storage, user=user, root_disk_gib=disk,
        cpu_thread_policy=threads, pci_numa_affinity_policy=pci_numa, server_group_policy=group, pools=pools,
        jump_host=jump, dns_nameservers=dns, swift_s3_endpoint=swift), []


def rail_count(spec: Spec) -> int:
    """The plan's rails (Plan.networks.compute.rails): the most compute NICs of a pool with nodes,
    as the fabric planner counts them."""
    return max((p.rails for p in addressing.pools_for_addressing(spec) if p.count and p.rails), default=0)


def _rails(r: _Reader, s: Mapping, spec: Spec) -> list[Segment | None]:
    path = f"{P}.rails"
    want = rail_count(spec)
    allowed = f"a list of {want} segments, one per rail in rail order: {{physicalNetwork, vlan}}"
    value = r.plain(s, "rails", path, allowed)
    if value is None:
        r.missing(path, allowed, "each rail is a provider VLAN its VMs' SR-IOV ports are on")
        return [None]
    if not isinstance(value, list):
        r.problem(path, _show(value), allowed)
        return [None]
    out = [r.segment(item, f"{path}[{i}]", "rails[]") if item is not None else None for i, item in enumerate(value)]
    for i, item in enumerate(value):
        if item is None:
            r.problem(f"{path}[{i}]", "an empty value", "a segment {physicalNetwork, vlan}")
    if want and len(value) != want:
        r.problem(path, f"{len(value)} rail{'s' if len(value) != 1 else ''}", allowed,
                  f"the plan has {want} rails (the compute NICs of the pools' SKUs); rail i's VFs go on rails[i]")
    return out


def _pools(r: _Reader, s: Mapping, spec: Spec) -> dict[str, str]:
    path = f"{P}.pools"
    names = [p.name for p in getattr(spec, "node_pools", ()) if p.name is not None]
    allowed = "a mapping: node pool name -> {serverGroupPolicy}"
    value = r.plain(s, "pools", path, allowed)
    if value is None:
        return {}
    if not isinstance(value, dict):
        r.problem(path, _show(value), allowed)
        return {}
    out = {}
    for name, item in value.items():
        if name not in names:
            r.problem(f"{path}.{name}", "settings of a pool railyard:nodePools does not have", _one_of(names),
                      _did_you_mean(name, names))
            continue
        m = r.mapping(item, f"{path}.{name}", KEYS["pools.<pool>"])
        if not m:
            continue
        if m.get("serverGroupPolicy") is not None:
            policy = r.choice(m, "serverGroupPolicy", f"{path}.{name}.serverGroupPolicy", SERVER_GROUP_POLICIES,
                              default="")
            if policy:
                out[name] = policy
    return out


def _check_jump_host(r: _Reader, jump: JumpHost, ssh_from: tuple[str, ...]) -> None:
    """The jump host inside sshFrom: the management group lets SSH in from those networks only, so
    a jump host outside them reaches no VM. A DNS name is not looked up (validation makes no
    network connection)."""
    if address_kind(jump.address) not in ("ipv4", "ipv6"):
        return
    ip = ipaddress.ip_address(jump.address)
    if any(ip in ipaddress.ip_network(net) for net in ssh_from):
        return
    r.problem(f"{P}.jumpHost.address", _show(jump.address), f"an address inside {P}.sshFrom ({', '.join(ssh_from)})",
              "the VMs' management security group lets SSH in only from sshFrom, so Ansible could not reach them "
              "through this jump host; add its network to sshFrom (and, where it reaches the VMs from another "
              "address of its own, that address's network too)")


def _check_segments(r: _Reader, segments: list[Segment]) -> None:
    """Each network on a segment of its own: two on one are one L2 domain (neutron refuses the
    second), and two rails on one physical network let nova give a rail's port a VF of another
    rail's NIC, since it picks VFs by physical network."""
    seen: dict[tuple, Segment] = {}
    for x in segments:
        first = seen.setdefault(x.identity, x)
        if first is not x:
            r.problem(x.where + (".vlan" if x.vlan is not None else ".vni"), str(x),
                      "a segment no other network of the stack is on",
                      f"{first.where} is on it; each network needs a segment of its own")
    rails = [x for x in segments if ".rails[" in x.where and x.physical_network is not None]
    physnets: dict[str, Segment] = {}
    for x in rails:
        first = physnets.setdefault(x.physical_network or "", x)
        if first is not x and first.identity != x.identity:
            r.problem(f"{x.where}.physicalNetwork", _show(x.physical_network),
                      "a physical network no other rail is on",
                      f"{first.where} is on it: nova picks a port's VF by physical network, so a rail's port could "
                      "get a VF of another rail's NIC; give each rail's NICs a physical network of their own")


def _check_server_groups(r: _Reader, spec: Spec, default: str | None, pools: Mapping[str, str]) -> None:
    """A server group the plan can fill: strict anti-affinity needs a hypervisor per VM, strict
    affinity every VM of the pool on one."""
    for pool in getattr(spec, "node_pools", ()):
        if pool.name is None or not pool.count or not pool.vms_per_host:
            continue
        policy = pools.get(pool.name, default)
        path = f"{P}.pools.{pool.name}.serverGroupPolicy" if pool.name in pools else f"{P}.serverGroupPolicy"
        vms = pool.count * pool.vms_per_host
        if policy == "anti-affinity" and pool.vms_per_host > 1:
            r.problem(path, "'anti-affinity'", "soft-anti-affinity, or one VM per host",
                      f"pool {pool.name} plans {pool.vms_per_host} VMs on each of its {pool.count} hosts; "
                      f"anti-affinity would need {vms} hypervisors and refuse the rest")
        elif policy == "affinity" and vms > pool.vms_per_host:
            r.problem(path, "'affinity'", "anti-affinity, soft-anti-affinity or soft-affinity",
                      f"pool {pool.name}'s {vms} VMs would all have to be on one hypervisor, which holds "
                      f"{pool.vms_per_host}")


def _check_flavors(r: _Reader, spec: Spec, thread_policy: str, pci_numa_policy: str, disk_gib: int) -> None:
    """Each pool's flavors, as the driver makes them (layout.flavor), pinned as nova would
    (layout.fit_problem)."""
    if getattr(spec, "layout", None) != "virtual" or getattr(spec, "tuning", None) is None:
        return
    from railyard.model.catalog import load_catalog

    catalog = load_catalog()
    for i, pool in enumerate(spec.node_pools):
        vm = pool.vm
        sku = catalog.nodes.get(pool.sku) if pool.sku else None
        if sku is None or vm is None or not pool.vms_per_host:
            continue
        if not (vm.gpus and vm.vcpus and vm.memory_gib and vm.vfs):
            continue
        try:
            guests = pool_guests(pool, sku, spec.tuning.hugepages)
        except guest_topology.GuestTopologyError:
            continue  # the model's own check of the VM says why
        told = set()
        for topology in guests:
            # The alias does not change whether nova can pin it.
            shape = layout.flavor(topology, gpu_alias="gpu", cpu_thread_policy=thread_policy,
                                  pci_numa_affinity_policy=pci_numa_policy, root_disk_gib=disk_gib)
            why = layout.fit_problem(sku, shape, thread_policy)
            if why is None or why.key in told:
                continue
            told.add(why.key)
            if why.key == "cpuThreadPolicy":
                path = f"{P}.cpuThreadPolicy"
            else:
                path = f"railyard:nodePools[{i}].vm." + ("shape" if vm.shape else why.key)
            hint = why.why + (f"; or set {P}.cpuThreadPolicy to prefer" if thread_policy == "isolate"
                              and why.key == "vcpus" else "")
            r.problem(path, why.found, f"{why.allowed} for a {pool.sku} flavor (pool {pool.name})", hint)


def _check_object_store(r: _Reader, spec: Spec, swift: str | None, given: bool) -> None:
    """The object tier: the stack's S3 endpoint, or a Swift container of the stack's, which the
    dataset cache reaches through Swift's S3 API."""
    obj = getattr(getattr(spec, "storage", None), "object", None)
    path = f"{P}.swiftS3Endpoint"
    if obj is not None and obj.endpoint == "" and swift is None and not given:
        r.missing(path, "the https URL of the cloud's Swift S3 API (s3api)",
                  "railyard:storage.object.endpoint is empty, so the object tier is a Swift container of the stack's, "
                  "which the dataset cache reaches over S3; or give railyard:storage.object.endpoint")
    elif swift is not None and (obj is None or obj.endpoint):
        r.problem(path, _show(swift), "nothing: " + ("the stack has no object tier" if obj is None else
                                                     "railyard:storage.object.endpoint names the S3 endpoint"),
                  "remove it; it is where the stack's own Swift container is reached")


# The contract's hooks this module provides (railyard.drivers.RuleHooks).
HOOKS = RuleHooks(keys=KEYS, parse=parse)
