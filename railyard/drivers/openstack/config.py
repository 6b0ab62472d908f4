"""What a stack's `railyard:openstack` section means: frozen dataclasses, made by rules.parse.

Pulumi-free. Every value here is the stack's; what the driver derives from the plan (flavors,
names, addresses) is layout.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Mapping

from railyard.model.spec import SSH_AGENT, Secret
from railyard.remote.ssh import JumpHost  # noqa: F401 (the type of OpenStackConfig.jump_host)


# Nova's own words (flavor extra specs, server group policies), so the stack says what the
# operator will see in `openstack flavor show` and `openstack server group show`.
THREAD_POLICIES = ("prefer", "isolate", "require")
PCI_NUMA_POLICIES = ("required", "preferred", "legacy", "socket")
SERVER_GROUP_POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")

DEFAULT_USER = "ubuntu"
DEFAULT_ROOT_DISK_GIB = 100
# The compute and block storage APIs carry a flavor's disk and a volume's size as 32-bit integers.
MAX_ROOT_DISK_GIB = 2**31 - 1
# Nova's default: a vCPU may share a core with another vCPU of the same VM.
DEFAULT_THREAD_POLICY = "prefer"
# The GPUs on the guest's own NUMA nodes or no boot: the plan's guest topology assumes them there.
DEFAULT_PCI_NUMA_POLICY = "required"
# Spread a pool's VMs over hypervisors where the cloud has them, without refusing to boot when
# two must share one (vmsPerHost > 1 plans exactly that).
DEFAULT_SERVER_GROUP_POLICY = "soft-anti-affinity"

VLAN_MAX = 4094
VNI_MAX = (1 << 24) - 1

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)


@dataclass(frozen=True)
class Segment:
    """A provider network's segment: a VLAN on a physical network, or, for management and storage
    only, a VXLAN VNI (neutron takes no physical network for a tunnel). A rail is always a VLAN:
    neutron binds its SR-IOV ports on VLAN and flat networks only."""

    physical_network: str | None
    vlan: int | None = None
    vni: int | None = None
    where: str = ""
    """Its config path (railyard:openstack.rails[2]), for messages."""

    @property
    def network_type(self) -> str:
        return "vlan" if self.vlan is not None else "vxlan"

    @property
    def segmentation_id(self) -> int:
        value = self.vlan if self.vlan is not None else self.vni
        assert value is not None, "rules.parse makes no segment without an id"
        return value

    @property
    def identity(self) -> tuple:
        """What two networks on the same L2 domain share: a VLAN is unique per physical network,
        a VNI in the whole cloud."""
        return ("vlan", self.physical_network, self.vlan) if self.vlan is not None else ("vxlan", self.vni)

    def __str__(self) -> str:
        return f"VLAN {self.vlan} on {self.physical_network}" if self.vlan is not None else f"VNI {self.vni}"


@dataclass(frozen=True)
class OpenStackConfig:
    """The `railyard:openstack` section: Spec.driver_config of an openstack stack."""

    image: str
    """The Glance image every server boots: its name, or its ID."""
    public_key: str
    """The stack's SSH public key, `<type> <base64>`: the keypair the servers authorize."""
    ssh_key: Secret | Literal["agent"]
    """Its private key as a Pulumi secret (ciphertext only; never opened here), or "agent": the
    one ssh-agent holds where Railyard runs."""
    gpu_alias: str
    """The nova PCI alias of the GPUs (the operator's [pci] alias)."""
    ssh_from: tuple[str, ...]
    """Networks SSH to the servers is allowed from (CIDRs, canonical); the jump host's address is
    inside one of them."""
    management: Segment
    rails: tuple[Segment, ...]
    """One per rail of the plan, in rail order: each a VLAN, on a physical network of its own."""
    storage: Segment | None = None
    """None: the servers get no port on the storage network."""
    user: str = DEFAULT_USER
    root_disk_gib: int = DEFAULT_ROOT_DISK_GIB
    cpu_thread_policy: str = DEFAULT_THREAD_POLICY
    pci_numa_affinity_policy: str = DEFAULT_PCI_NUMA_POLICY
    server_group_policy: str = DEFAULT_SERVER_GROUP_POLICY
    """Every pool's, unless it sets its own (pools)."""
    pools: Mapping[str, str] = field(default_factory=dict)
    """Pool -> its own server group policy."""
    jump_host: JumpHost | None = None
    dns_nameservers: tuple[str, ...] = ()
    swift_s3_endpoint: str | None = None
    """Where the stack's Swift container is reached over S3 (Swift's s3api), for the object tier."""

    @property
    def uses_agent(self) -> bool:
        return self.ssh_key == SSH_AGENT

    @property
    def image_is_id(self) -> bool:
        return bool(_UUID.match(self.image))

    def server_group(self, pool: str) -> str:
        return self.pools.get(pool, self.server_group_policy)
