"""The openstack driver: the plan's VMs as nova servers, through the official Pulumi OpenStack SDK.

- access: the stack's keypair (its public key; the private key is the stack's secret, or
  ssh-agent's);
- fabric: a provider network and subnet for management, storage (where the stack gives one) and
  each rail, with the plan's CIDRs and MTUs; security groups on management (SSH from sshFrom, and
  anything from the stack's own VMs) and storage (its own network's traffic), none on the rails,
  whose SR-IOV ports neutron does not filter;
- storage: the object tier as a Swift container (with S3 credentials issued for it), or the S3
  endpoint the stack names;
- pool: per pool a server group and one private flavor per VM shape (layout.flavor: pinned,
  NUMA-aware, the GPUs through the PCI alias), granted to the credentials' project; per VM a host
  key (resources.HostKey), a management port at the plan's address (first), a storage port, one
  SR-IOV port per VF at the plan's rail address, and the server on exactly those ports.

The hypervisors are the operator's (Capabilities.vms == "are-nodes"): nothing here reaches them.
Addresses come back from the provider (the management port's fixed IP). The provider plugin cannot
be built on these machines, so this is checked under mocks and mypy only.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import pulumi
import pulumi_openstack as openstack

from railyard.drivers.base import Access, Driver, NodeHandle, PoolPlan
from railyard.drivers.openstack import layout
from railyard.drivers.openstack.config import OpenStackConfig, Segment
from railyard.drivers.openstack.resources import HostKey
from railyard.model.plan import VmPlan

if TYPE_CHECKING:
    from railyard.model.spec import Spec
    from railyard.model.plan import Plan


SSH_PORT = 22


def _ssh_key() -> pulumi.Output[str]:
    """railyard:openstack.sshKey. The whole section is read as a secret object: only that key is
    secret in it, and it is never a plain value anywhere in the program."""
    return pulumi.Output.secret(
        pulumi.Config("railyard").require_secret_object("openstack").apply(lambda s: s["sshKey"]))


def _ethertype(cidr: str) -> str:
    return "IPv4" if ipaddress.ip_network(cidr).version == 4 else "IPv6"


def _replaced_after_deletion(parent: pulumi.Resource) -> pulumi.ResourceOptions:
    """Options of a resource the cloud refuses twice (a flavor's or a keypair's name, an identical
    security group rule, a server's ports): Pulumi's default, the replacement made before the old
    one goes, would fail at `up` on every change that replaces it."""
    return pulumi.ResourceOptions(parent=parent, delete_before_replace=True)


@dataclass(frozen=True)
class _Ingress:
    """A rule letting traffic into a security group: from a network (CIDR), or from the group's
    own ports (remote None); any protocol and port where they are None."""

    remote: str | None
    protocol: str | None = None
    port: int | None = None

    @property
    def key(self) -> str:
        """Its part of the rule's logical name: what it lets in, not its place in a list, so that
        reordering sshFrom changes no rule. ':' goes (an IPv6 '::' would split the rule's URN)."""
        what = f"{self.protocol}{self.port or ''}" if self.protocol else "any"
        return f"{what}-from-" + ("self" if self.remote is None else self.remote.replace(":", "_"))


class _Net(NamedTuple):
    network: openstack.networking.Network
    subnet: openstack.networking.Subnet
    group: openstack.networking.SecGroup | None
    """None on a rail: its ports are SR-IOV VFs, which neutron's SR-IOV agent does not filter."""


class OpenStackDriver(Driver):
    name = "openstack"

    def __init__(self, spec: Spec, plan: Plan):
        super().__init__(spec, plan)
        self.config: OpenStackConfig = spec.driver_config
        self.prefix = layout.prefix(spec)
        self.tags = layout.tags(spec)
        self.keypair: openstack.compute.Keypair | None = None
        self.management: _Net | None = None
        self.storage_net: _Net | None = None
        self.rails: list[_Net] = []
        self.rules: list[openstack.networking.SecGroupRule] = []
        self._project: pulumi.Output[str] | None = None

    def ssh_hint(self) -> str | None:
        j = self.config.jump_host
        return f"ssh -J {j} {self.config.user}@<management_ip>" if j is not None else None

    # --- access ----------------------------------------------------------------------------------

    def access(self, name: str, parent: pulumi.Resource) -> Access:
        # Nova keeps one keypair of a name per user: a new publicKey replaces it after deletion.
        # Nova writes a keypair into a server at its first boot only, so the servers follow it.
        self.keypair = openstack.compute.Keypair(name, name=self.prefix, public_key=self.config.public_key,
                                                 opts=_replaced_after_deletion(parent))
        # None: ssh-agent's key where Railyard runs, as the hosts driver hands it on.
        key = None if self.config.uses_agent else _ssh_key()
        return Access(user=self.config.user, public_key=self.keypair.public_key,
                      private_key=cast(pulumi.Output[str], key))

    # --- networks --------------------------------------------------------------------------------

    def _network(self, name: str, label: str, segment: Segment, cidr: str, mtu: int, parent: pulumi.Resource, *,
                 gateway: str | None = None, reserved: str | None = None,
                 ingress: list[_Ingress] | None) -> _Net:
        """A provider network on `segment` with the plan's subnet, and the security group its ports
        get (none where ingress is None). DHCP is off: nova's config drive gives every port its
        fixed address, and only a subnet with a gateway hands out a default route (the management
        network's).

        reserved: an address no port may take (a rail's router address)."""
        opts = pulumi.ResourceOptions(parent=parent)
        net = openstack.networking.Network(
            name, name=f"{self.prefix}-{label}", admin_state_up=True, mtu=mtu, tags=self.tags,
            segments=[openstack.networking.NetworkSegmentArgs(
                network_type=segment.network_type, physical_network=segment.physical_network,
                segmentation_id=segment.segmentation_id)],
            opts=opts)
        pools = None
        if reserved is not None:
            network = ipaddress.ip_network(cidr)
            pools = [openstack.networking.SubnetAllocationPoolArgs(
                start=str(ipaddress.ip_address(reserved) + 1), end=str(network.broadcast_address - 1))]
        subnet = openstack.networking.Subnet(
            name, name=f"{self.prefix}-{label}", network_id=net.id, cidr=cidr, ip_version=4, enable_dhcp=False,
            # gateway_ip and no_gateway conflict in the provider's schema even when no_gateway is
            # false, so only one of them is ever sent.
            gateway_ip=gateway, no_gateway=True if gateway is None else None, allocation_pools=pools,
            dns_nameservers=list(self.config.dns_nameservers) if gateway is not None else None, tags=self.tags,
            opts=opts)
        if ingress is None:
            return _Net(net, subnet, None)
        group = openstack.networking.SecGroup(
            name, name=f"{self.prefix}-{label}", description=f"railyard {self.spec.stack}: {label}", tags=self.tags,
            opts=opts)
        for rule in ingress:
            # The subnets are IPv4, so a rule from the group's own ports is an IPv4 one.
            source = "its own ports" if rule.remote is None else rule.remote
            self.rules.append(openstack.networking.SecGroupRule(
                f"{name}-in-{rule.key}", security_group_id=group.id, direction="ingress",
                ethertype="IPv4" if rule.remote is None else _ethertype(rule.remote),
                remote_ip_prefix=rule.remote, remote_group_id=group.id if rule.remote is None else None,
                protocol=rule.protocol, port_range_min=rule.port, port_range_max=rule.port,
                description=f"railyard {self.spec.stack}: {label} from {source}",
                # Neutron refuses a rule identical to one the group has, and every argument of a
                # rule replaces it (its description too).
                opts=_replaced_after_deletion(group)))
        return _Net(net, subnet, group)

    def fabric(self, name: str, parent: pulumi.Resource) -> list[pulumi.Resource]:
        nets, config = self.plan.networks, self.config
        mgmt = nets.management
        # SSH only from the networks the stack names (the jump host's, the operators'), and
        # anything between the stack's own VMs: the collectives' bootstrap (NCCL, torch.distributed
        # rendezvous) and ping run over the management addresses.
        self.management = self._network(
            f"{name}-management", "management", config.management, mgmt.cidr, mgmt.mtu, parent, gateway=mgmt.gateway,
            ingress=[*(_Ingress(cidr, "tcp", SSH_PORT) for cidr in config.ssh_from), _Ingress(None)])
        if config.storage is not None:
            stor = nets.storage
            self.storage_net = self._network(f"{name}-storage", "storage", config.storage, stor.cidr, stor.mtu, parent,
                                             ingress=[_Ingress(stor.cidr)])
        compute = nets.compute
        for i, (segment, rail) in enumerate(zip(config.rails, compute.rails)):
            self.rails.append(self._network(f"{name}-rail{i}", f"rail{i}", segment, rail.cidr, compute.mtu, parent,
                                            reserved=rail.gateway, ingress=None))
        # The rules too: a server that boots before its group lets SSH in is not ready for Ansible.
        made = [r for net in [self.management, self.storage_net, *self.rails] if net is not None
                for r in net if r is not None]
        return [*made, *self.rules]

    # --- storage ---------------------------------------------------------------------------------

    def storage(self, name: str, parent: pulumi.Resource, depends_on: list[pulumi.Resource]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        obj = self.spec.storage.object
        if obj is not None and obj.endpoint:
            out.update(object_endpoint=obj.endpoint, bucket=obj.bucket, dataset_prefix="")
        elif obj is not None:
            opts = pulumi.ResourceOptions(parent=parent, depends_on=depends_on)
            container = openstack.objectstorage.Container(name, name=obj.bucket, metadata=layout.labels(self.spec),
                                                          opts=opts)
            out.update(object_endpoint=self.config.swift_s3_endpoint, bucket=container.name, dataset_prefix="")
            if obj.credentials is None:
                # Swift's S3 API takes keystone's EC2 credentials: issued for the stack's own user and project.
                cred = openstack.identity.Ec2CredentialV3(f"{name}-s3", opts=opts)
                secret_key: pulumi.Output[str] = pulumi.Output.secret(cred.secret)
                out.update(access_key=cred.access, secret_key=secret_key)
        pfs = self.spec.storage.parallel_fs
        if pfs is not None:
            out["parallel_fs"] = {"kind": pfs.kind, "mount": pfs.mount, "source": pfs.source}
        return out

    # --- machines --------------------------------------------------------------------------------

    def _project_id(self, parent: pulumi.Resource) -> pulumi.Output[str]:
        """The project the provider's credentials are scoped to: the one every resource of the
        stack is made in, servers included."""
        if self._project is None:
            scope = openstack.identity.get_auth_scope_output(name="current", opts=pulumi.InvokeOutputOptions(
                parent=parent))
            self._project = scope.apply(lambda s: s.project_id)
        return self._project

    def pool(self, name: str, pool: PoolPlan, access: Access, parent: pulumi.Resource,
             depends_on: list[pulumi.Resource]) -> list[NodeHandle]:
        if not pool.vms_are_machines:
            raise ValueError(f"pool {pool.name}: the openstack driver's machines are VMs (railyard:layout virtual)")
        if self.keypair is None or self.management is None:
            raise RuntimeError("access() and fabric() come before pool()")
        config = self.config
        flavors = layout.pool_flavors(self.spec, config, self.plan.guests(pool.name), pool.name)
        by_index: dict[int, openstack.compute.Flavor] = {}
        granted: list[pulumi.Resource] = []
        for f in flavors:
            logical = f"{name}-flavor" + (f"-vm{f.vms[0]}" if len(flavors) > 1 else "")
            res = openstack.compute.Flavor(
                logical, name=f.name, vcpus=f.flavor.vcpus,
                ram=f.flavor.ram_mib, disk=f.flavor.disk_gib, extra_specs=f.flavor.specs,
                # Its GPUs are the stack's: no other project of the cloud may boot it.
                is_public=False, description=f"railyard {self.spec.stack}: pool {pool.name}",
                # Flavor names are unique in nova, and a new size replaces the flavor.
                opts=_replaced_after_deletion(parent))
            # Nova grants a private flavor to no project, not even its creator's (only admins could
            # boot it): the stack's project gets it.
            granted.append(openstack.compute.FlavorAccess(
                logical, flavor_id=res.id, tenant_id=self._project_id(parent),
                opts=pulumi.ResourceOptions(parent=res)))
            by_index.update((j, res) for j in f.vms)
        opts = pulumi.ResourceOptions(parent=parent, depends_on=depends_on)
        group = openstack.compute.ServerGroup(f"{name}-group", name=f"{self.prefix}-{pool.name}",
                                              policies=config.server_group(pool.name),
                                              opts=pulumi.ResourceOptions(parent=parent))
        handles = []
        for machine in pool.machines:
            vm = cast(VmPlan, machine)
            handles.append(self._server(vm, pool.name, by_index[vm.index], group, self.keypair, parent, opts,
                                        granted))
        return handles

    def _port(self, name: str, net: _Net, address: str, opts: pulumi.ResourceOptions, *,
              direct: bool = False) -> openstack.networking.Port:
        # A VF (direct) port gets no security group: neutron's SR-IOV agent filters none (its
        # firewall driver is off for SR-IOV), and without no_security_groups neutron would give it
        # the project's default group. Port security stays on: the agent applies it as the VF's
        # spoof check, so a guest sends from its port's MAC only.
        assert direct or net.group is not None, "only a rail's network has no security group"
        return openstack.networking.Port(
            name, name=f"{self.prefix}-{name}", network_id=net.network.id, admin_state_up=True,
            fixed_ips=[openstack.networking.PortFixedIpArgs(subnet_id=net.subnet.id, ip_address=address)],
            security_group_ids=None if direct or net.group is None else [net.group.id],
            no_security_groups=True if direct else None, tags=self.tags,
            # An SR-IOV VF, bound straight into the guest (nova picks it from the rail's physical network).
            binding=openstack.networking.PortBindingArgs(vnic_type="direct") if direct else None,
            opts=opts)

    def _server(self, vm: VmPlan, pool: str, flavor: openstack.compute.Flavor, group: openstack.compute.ServerGroup,
                keypair: openstack.compute.Keypair, parent: pulumi.Resource,
                opts: pulumi.ResourceOptions, granted: list[pulumi.Resource]) -> NodeHandle:
        assert self.management is not None
        config = self.config
        key = HostKey(f"{vm.name}-host-key", machine=f"{self.prefix}/{vm.name}",
                      opts=pulumi.ResourceOptions(parent=parent))
        # Management first: nova's first port is the server's access address, and cloud-init's
        # default route is on it (the only subnet with a gateway).
        mgmt = self._port(f"{vm.name}-mgmt", self.management, vm.management_ip, opts)
        ports = [mgmt]
        if self.storage_net is not None:
            ports.append(self._port(f"{vm.name}-storage", self.storage_net, vm.storage_ip, opts))
        ports += [self._port(f"{vm.name}-{vf.name}", self.rails[vf.rail], vf.ip, opts, direct=True) for vf in vm.vfs]
        private: pulumi.Output[str] = pulumi.Output.secret(key.private_key)
        rendered: pulumi.Output[str] = pulumi.Output.all(key.public_key, private).apply(
            lambda k: layout.cloud_config(k[0], k[1]))
        user_data: pulumi.Output[str] = pulumi.Output.secret(rendered)
        server = openstack.compute.Instance(
            vm.name, name=vm.name, flavor_id=flavor.id, key_pair=keypair.name, config_drive=True,
            networks=[openstack.compute.InstanceNetworkArgs(port=p.id) for p in ports],
            scheduler_hints=[openstack.compute.InstanceSchedulerHintArgs(group=group.id)],
            metadata={**layout.labels(self.spec), "railyard-pool": pool, "railyard-machine": vm.name},
            tags=self.tags, user_data=user_data,
            image_id=config.image if config.image_is_id else None,
            image_name=None if config.image_is_id else config.image,
            # A port is bound to one server at a time, and these are the plan's: a replacement server
            # (a new keypair, user_data) could not take them while the old one holds them.
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                additional_secret_outputs=["user_data"], delete_before_replace=True,
                # Credentials that may make flavors without being admins (a cloud's own policy) see a
                # private flavor only once their project has it.
                depends_on=granted)))
        address = mgmt.all_fixed_ips.apply(lambda ips: ips[0])
        return NodeHandle(ready=[server], management_ip=address, host_key=key.public_key, name=vm.name)
