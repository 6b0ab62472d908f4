"""What a stack means: the constants, the frozen dataclasses a stack file is parsed into, the
DriverRules a driver adds to validation, and the small rules that say what a value means
(os_reserve_gib, host_reserve_threads, parse_ttl).

Nothing here reads a file or records a problem: railyard.model.spec.load does that.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from railyard.model.errors import Problem
from railyard.model.gpu_health import COLLECTIVE_TOLERANCE
from railyard.model.speeds import SPEED_GBPS

NAMESPACE = "railyard"

LAYOUTS = ("bare-metal", "virtual")
FABRIC_KINDS = ("infiniband", "roce")
SPEEDS_BY_KIND = {"infiniband": ("xdr", "ndr", "hdr"), "roce": ("400gbe", "200gbe", "100gbe")}
DEFAULT_SPEED = {"infiniband": "ndr", "roce": "400gbe"}
DEFAULT_SWITCH = {"infiniband": "qm9700", "roce": "sn5600"}
# A speed the kind's default switch does not run has a default switch of its own.
DEFAULT_SWITCH_BY_SPEED = {"xdr": "q3400", "hdr": "qm8700"}
TOPOLOGIES = ("rail-optimized",)
HUGEPAGE_SIZES = {"1G": 1 << 30, "2M": 2 << 20}
AFFINITY_POLICIES = ("pcie-nearest", "numa", "none")
IOMMU_MODES = ("passthrough", "on", "off")
PARALLEL_FS_KINDS = ("lustre", "gpfs", "weka", "nfs")
# What a client mounts, per kind, as its mount(8) source: (pattern, what the error says, example).
PARALLEL_FS_SOURCES = {
    "lustre": (r"^[^\s:/@,]+@[a-z0-9]+([,:][^\s:/@,]+@[a-z0-9]+)*:/[A-Za-z0-9_-]{1,8}(/[^\s]*)?$",
               "the MGS NIDs and the file system's name, NID[,NID][:NID...]:/FSNAME[/SUBDIR]", "10.0.0.1@o2ib:/lustre"),
    "nfs": (r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9.-]+):/[^\s]*$", "SERVER:/EXPORT", "nfs.example.com:/datasets"),
    "weka": (r"^([A-Za-z0-9.-]+/)?[A-Za-z0-9_-]+$", "[BACKEND/]FILESYSTEM", "weka-backend-1/default"),
    "gpfs": (r"^[A-Za-z0-9_.-]+$", "the GPFS device name (mmlsfs all), without /dev", "fs1"),
}
RAID_LEVELS = ("raid0", "raid1", "raid10", "none")
LOCAL_FILESYSTEMS = ("xfs", "ext4")
TTL_UNITS = {"m": 60, "h": 3600, "d": 86400}

DEFAULT_CIDRS = {
    "management": "198.18.0.0/20",
    "storage": "198.18.32.0/20",
    # Rail subnets are cut into per-pool blocks, and RoCE keeps half for its /31 switch links
    # (addressing.py), so the compute network gets the whole upper half of the lab range.
    "compute": "198.19.0.0/16",
    # RoCE switches' loopbacks (BGP router ids), a /32 each: a block of the lab range apart from
    # the three networks above.
    "loopback": "198.18.64.0/18",
}
DEFAULT_ASN_BASE = 4_200_000_000

# What the OS (or, in the virtual layout, the hypervisor) keeps for itself on every host: memory that
# hugepages and VMs may not take, and hardware threads no VM may take. Large enough for the kernel,
# page cache of a data loader and the NIC/GPU drivers; see docs/stack-reference.md.
# Nodes in one pool: far past the largest fabric Railyard plans (about 8,192 nodes of a three-tier
# QM9700 fabric), so a real pool never meets it, but a typo such as 1e9 is named at its key with a
# bound a person can read, not first as a network of more addresses than IPv4 has.
MAX_POOL_NODES = 100_000
# The most vCPUs x86 KVM gives one guest (KVM_MAX_VCPUS: 1024, or 4096 in a CONFIG_MAXSMP kernel),
# checked here too for a SKU whose thread count the catalog does not know.
KVM_MAX_VCPUS = 4096
# The SR-IOV capability's TotalVFs is a 16-bit field: no PF has more VFs, and a VM's are bounded
# again by the planned vfsPerPf. Checked here first, since the VM's devices are laid out as it is read.
SRIOV_MAX_VFS = 65_535
OS_RESERVE_MIN_GIB = 16
OS_RESERVE_FRACTION = 0.10
HOST_RESERVE_MIN_THREADS = 4
HOST_RESERVE_THREAD_FRACTION = 0.10

_TTL = re.compile(r"^([0-9]+)([a-z]+)$")

# The keys we know, by section: the single source for unknown-key errors, did-you-mean hints and the
# test that keeps docs/stack-reference.md complete.
KEYS: dict[str, tuple[str, ...]] = {
    "": ("region", "layout", "driver", "nodePools", "fabric", "tenants", "storage", "tuning", "kubernetes",
         "slurm", "acceptance", "verify", "health", "ephemeral", "protect"),
    "nodePools[]": ("name", "sku", "count", "vmsPerHost", "vm", "cpuIsolation"),
    "nodePools[].vm": ("shape", "vcpus", "memoryGiB", "gpus", "vfs", "hugepages"),
    "nodePools[].vm.hugepages": ("size", "percentOfMemory", "count", "perNuma"),
    "fabric": ("compute", "storage", "management"),
    "fabric.compute": (
        "kind", "speed", "switch", "topology", "oversubscription", "reservedLeafPorts", "cidr", "asnBase", "mtu",
        "loopbackCidr",
    ),
    "fabric.storage": ("cidr", "mtu"),
    "fabric.management": ("cidr", "mtu"),
    "tenants[]": ("name", "pkey", "vlan", "pools", "namespace", "gpuQuota"),
    "storage": ("object", "parallelFs", "localCache"),
    "storage.object": ("bucket", "endpoint", "credentials"),
    "storage.parallelFs": ("kind", "mount", "capacityTiB", "source", "options"),
    "storage.localCache": ("mount", "raid", "fs"),
    "tuning": ("hugepages", "sriov", "affinity", "iommu", "previewDrift"),
    "tuning.hugepages": ("size", "percentOfMemory", "count", "perNuma"),
    "tuning.sriov": ("vfsPerPf",),
    "tuning.affinity": ("policy",),
    "kubernetes": ("labelPrefix", "resourcePrefix", "kubeconfig"),
    "slurm": ("controller", "clusterName", "partition", "maxSwitchWait", "healthCheckInterval", "healthCheckNodeState",
              "mpi"),
    "acceptance": ("enabled", "onFailure", "bandwidthTolerance"),
    "verify": ("pins", "onDrift", "switchGuids"),
    "verify.pins": ("nicFirmware", "nvidiaDriver", "kernel"),
    "health": ("repair", "maxUnavailable", "drainTimeout", "retuneTimeout", "collectiveTolerance"),
    "ephemeral": ("ttl",),
}

# Kubernetes label keys Railyard sets are `<labelPrefix>/<name>`; device plugin resources are
# `<resourcePrefix>/<name>`. The NVIDIA Network Operator names its RDMA and SR-IOV resources under
# nvidia.com, beside the GPU operator's nvidia.com/gpu.
DEFAULT_LABEL_PREFIX = "railyard.io"
DEFAULT_RESOURCE_PREFIX = "nvidia.com"


def documented_keys(drivers: Mapping[str, "DriverRules | None"] = {}) -> list[str]:
    """Every config key Railyard reads, as `railyard:section.key` (lists written `[]`), the drivers'
    own keys (`railyard:<driver>.key`) after the model's."""
    sections = dict(KEYS)
    for name, rules in drivers.items():
        for section, keys in (rules.KEYS.items() if rules is not None else ()):
            sections[f"{name}.{section}" if section else name] = keys
    out = []
    for section, keys in sections.items():
        for key in keys:
            out.append(f"{NAMESPACE}:{section + '.' if section else ''}{key}")
    return out


class DriverRules(Protocol):
    """What a driver adds to validation (a Pulumi-free module of the driver's package).

    KEYS: the driver's own keys by section, all under `railyard:<driver>` ("" = its top level);
    empty when the driver reads none. parse: the driver's section (None when absent) and the spec
    checked so far -> (the driver's typed config for Spec.driver_config, problems in the project's
    format). Rules a driver puts on the model's own keys (the lab's networks inside its range) go
    here too, so the model holds no driver-specific rule.
    """

    KEYS: Mapping[str, tuple[str, ...]]

    def parse(self, section: Any, spec: "Spec") -> tuple[Any, list[Problem]]: ...

    # Optional: plan_problems(spec, fabric) -> list[Problem], what only the planned fabric (the
    # FabricPlan validation planned once) shows is wrong with the driver's config (a switch name
    # the plan lacks). A driver's rules without it have none.


# --------------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True, repr=False)
class Secret:
    """A Pulumi secret as it sits in the stack file: ciphertext only Pulumi can open."""

    ciphertext: str = field(repr=False)

    def __repr__(self) -> str:
        return "Secret(<hidden>)"

    def __str__(self) -> str:
        return "[secret]"


@dataclass(frozen=True)
class VmSpec:
    """The VM each host of a virtual-layout pool runs (`shape` set when it came from the catalog)."""

    vcpus: int
    memory_gib: int
    gpus: int
    vfs: int
    shape: str | None = None
    hugepages: "Hugepages | None" = None
    """What the guest reserves for the training job (guest tuning); None: nothing."""


@dataclass(frozen=True)
class NodePool:
    """Identical hosts of one catalog SKU; in the virtual layout each runs `vms_per_host` VMs."""

    name: str
    sku: str
    count: int
    vms_per_host: int = 0
    vm: VmSpec | None = None
    cpu_isolation: str | None = None
    """How the hypervisor keeps its own work off the CPUs pinned to VMs: `kernel` (isolcpus,
    nohz_full, rcu_nocbs on the command line) or `systemd` (CPUAffinity of its services); None:
    not at all."""

    @property
    def vms(self) -> int:
        return self.count * self.vms_per_host


@dataclass(frozen=True)
class ComputeFabric:
    kind: str
    speed: str
    switch: str
    topology: str = "rail-optimized"
    oversubscription: int = 1
    reserved_leaf_ports: int = 0
    cidr: ipaddress.IPv4Network = ipaddress.IPv4Network(DEFAULT_CIDRS["compute"])
    asn_base: int | None = None
    mtu: int | None = None
    """The rails' netdev MTU (railyard.model.mtu); None only where the kind is unknown."""
    loopback_cidr: ipaddress.IPv4Network | None = None
    """RoCE: where the switches' loopbacks come from (addressing.py); None on InfiniBand."""

    @property
    def speed_gbps(self) -> int:
        return SPEED_GBPS[self.speed]


@dataclass(frozen=True)
class Network:
    cidr: ipaddress.IPv4Network
    mtu: int | None = None


@dataclass(frozen=True)
class Fabric:
    compute: ComputeFabric
    storage: Network
    management: Network


@dataclass(frozen=True)
class Tenant:
    """A tenant: an InfiniBand partition (`pkey`, the value as written: 0x8000 bit = full
    membership) or, on RoCE, an optional VLAN; and, where the stack has Kubernetes, a namespace
    with a GPU quota over its pools."""

    name: str
    pkey: int | None = None
    """None on RoCE, which has no partitions."""
    vlan: int | None = None
    pools: tuple[str, ...] = ()
    """The pools it may use, in stack order (every pool unless the stack says otherwise)."""
    namespace: str = ""
    gpu_quota: int | None = None
    """GPUs it may hold at once; None: every GPU of its pools."""

    @property
    def partition(self) -> int:
        return (self.pkey or 0) & 0x7FFF

    @property
    def full_membership(self) -> bool:
        return bool((self.pkey or 0) & 0x8000)

    @property
    def pkey_hex(self) -> str:
        return f"0x{self.pkey:04x}" if self.pkey is not None else ""


@dataclass(frozen=True)
class KubernetesSpec:
    """railyard:kubernetes: the Kubernetes layer made from the plan (railyard.model.kubernetes)."""

    label_prefix: str = DEFAULT_LABEL_PREFIX
    resource_prefix: str = DEFAULT_RESOURCE_PREFIX
    kubeconfig: "Secret | None" = None
    """The cluster's kubeconfig where the driver is given one (hosts); the lab runs its own."""


# Slurm's own default for how long a job asking for --switches waits for that many switches.
SLURM_MAX_SWITCH_WAIT = 300
# slurmd's health check every five minutes, as LBNL's NHC suggests for its own, on nodes in any state.
SLURM_HEALTH_CHECK_INTERVAL = 300
# HealthCheckNodeState's words (slurm.conf(5)); CYCLE spreads the runs over the interval.
SLURM_HEALTH_CHECK_STATES = ("ALLOC", "ANY", "CYCLE", "IDLE", "MIXED", "NONDRAINED_IDLE")


@dataclass(frozen=True)
class SlurmSpec:
    """railyard:slurm: Slurm on the stack's nodes, its topology from the fabric (railyard.model.slurm)."""

    controller: str
    """The node slurmctld runs on (a planned host name); default: the first pool's first node."""
    cluster_name: str
    partition: str = "gpu"
    max_switch_wait: int = SLURM_MAX_SWITCH_WAIT
    health_check_interval: int = SLURM_HEALTH_CHECK_INTERVAL
    """Seconds between slurmd's runs of Railyard's health check on each node; 0: no health check."""
    health_check_node_state: str = "ANY"
    mpi: str = "pmix"
    """srun's --mpi for the runs across node pairs (`verify --deep`): the PMI the cluster's MPI
    build of nccl-tests speaks (SLURM_MPI)."""


# srun's MPI plugins a stack may name (railyard:slurm.mpi): PMIx (Open MPI 5, NVIDIA HPC-X) or
# Slurm's own PMI-2 (MPICH, MVAPICH). The default is SlurmSpec.mpi's.
SLURM_MPI = ("pmix", "pmi2")


ON_DRIFT = ("fail", "skip-node")
ACCEPTANCE_ON_FAILURE = ("fail", "cordon")
CPU_ISOLATION = ("kernel", "systemd")


@dataclass(frozen=True)
class AcceptanceSpec:
    """railyard:acceptance: the checks `up` runs after tuning (railyard.model.acceptance)."""

    enabled: bool = True
    on_failure: str = "fail"
    """fail: `up` fails naming node, rail and check; cordon: the node leaves scheduling, `up` goes on."""
    bandwidth_tolerance: float | None = None
    """A rail more than this fraction below the median of its node's rails is flagged; None: the
    driver's default (railyard.model.acceptance.DEFAULT_TOLERANCE unless the driver says otherwise)."""


@dataclass(frozen=True)
class Pins:
    """railyard:verify.pins: versions every node must run; None: not pinned, not compared."""

    nic_firmware: str | None = None
    """Every RDMA device's firmware, as /sys/class/infiniband/<dev>/fw_ver shows it."""
    nvidia_driver: str | None = None
    """The NVIDIA kernel module's version (/sys/module/nvidia/version)."""
    kernel: str | None = None
    """The running kernel's release (uname -r)."""


@dataclass(frozen=True)
class VerifySpec:
    """railyard:verify: what `railyard verify` holds the running cluster to beyond its plan."""

    pins: Pins = Pins()
    on_drift: str | None = None
    """None: no drift check in preview and `up`; "fail": `up` stops before tuning when a node
    drifted; "skip-node": `up` leaves drifted nodes alone and goes on with the others."""
    switch_guids: tuple[tuple[str, int], ...] = ()
    """(planned switch name, its node GUID): how a subnet's switches are known where their node
    descriptions are not their plan names (a switch as shipped describes itself by its model)."""


HEALTH_DRAIN_TIMEOUT_S = 600
# The site playbook on one node after its reset, its dataset stage included: an hour.
HEALTH_RETUNE_TIMEOUT_S = 3600


@dataclass(frozen=True)
class HealthSpec:
    """railyard:health: the bounds of the repair loop (`railyard verify --repair`)."""

    repair: bool = False
    """`railyard up` runs the loop once the engine is done (never the engine itself: a resource
    that repairs would plan an update at every preview)."""
    max_unavailable: int | None = None
    """Nodes of a pool out of service at once, whoever took them out; None: the driver's own
    budget for the pool (a hosts pool's maxUnavailable; one lab node)."""
    drain_timeout_s: int = HEALTH_DRAIN_TIMEOUT_S
    """How long a drained node's running jobs are waited for before the run leaves it drained
    for the next one (never reset under a job)."""
    retune_timeout_s: int = HEALTH_RETUNE_TIMEOUT_S
    """How long the re-tune after a reset may take before it is stopped and counts as a failed
    try: a play that hangs (a mount that never answers) must not hold the node's pool budget."""
    collective_tolerance: float = COLLECTIVE_TOLERANCE
    """How far below the plan's bus bandwidth `railyard verify --deep`'s all_reduce_perf may
    fall before it is a finding, as a fraction (0.15: 15%)."""


@dataclass(frozen=True)
class ObjectTier:
    """An S3 bucket. Empty endpoint: the driver's own object store; no credentials: driver-issued."""

    bucket: str
    endpoint: str = ""
    credentials: Secret | None = None


@dataclass(frozen=True)
class ParallelFs:
    kind: str
    mount: str
    capacity_tib: float
    source: str = ""
    """What the client mounts (PARALLEL_FS_SOURCES); empty: the site mounts it, Railyard checks."""
    options: str = ""
    """mount(8) options replacing the kind's defaults; empty: the kind's defaults."""


@dataclass(frozen=True)
class LocalCache:
    mount: str = "/mnt/cache"
    raid: str = "raid0"
    fs: str = "xfs"


@dataclass(frozen=True)
class StorageSpec:
    object: ObjectTier | None = None
    parallel_fs: ParallelFs | None = None
    local_cache: LocalCache = LocalCache()


@dataclass(frozen=True)
class Hugepages:
    """Hugepages reserved on every host: `percent_of_memory` of its memory or `count` pages in all."""

    size: str = "1G"
    percent_of_memory: int | None = 0
    count: int | None = None
    per_numa: bool = True

    @property
    def page_bytes(self) -> int:
        return HUGEPAGE_SIZES[self.size]

    @property
    def guest_page_kib(self) -> int | None:
        """The page size (KiB) that backs a guest's memory, where the stack reserves hugepages on
        its hypervisors; None where it reserves none (the guest gets ordinary pages)."""
        return self.page_bytes // 1024 if (self.count or self.percent_of_memory) else None

    def pages_for(self, memory_gib: float) -> int:
        """Pages reserved on a host with that much memory."""
        if self.count is not None:
            return self.count
        return int(memory_gib * (1 << 30) * (self.percent_of_memory or 0) / 100) // self.page_bytes

    def gib_for(self, memory_gib: float) -> float:
        return self.pages_for(memory_gib) * self.page_bytes / (1 << 30)


@dataclass(frozen=True)
class Sriov:
    vfs_per_pf: int = 0

    @property
    def enabled(self) -> bool:
        return self.vfs_per_pf > 0


@dataclass(frozen=True)
class Affinity:
    policy: str = "pcie-nearest"


@dataclass(frozen=True)
class TuningSpec:
    hugepages: Hugepages = Hugepages()
    sriov: Sriov = Sriov()
    affinity: Affinity = Affinity()
    iommu: str = "passthrough"
    preview_drift: bool = False


@dataclass(frozen=True)
class Ephemeral:
    """A stack the reaper destroys `ttl_seconds` after it came up."""

    ttl: str
    ttl_seconds: int


@dataclass(frozen=True)
class Spec:
    stack: str
    region: str
    layout: str
    driver: str
    node_pools: tuple[NodePool, ...]
    fabric: Fabric
    tenants: tuple[Tenant, ...] = ()
    storage: StorageSpec = StorageSpec()
    tuning: TuningSpec = TuningSpec()
    kubernetes: KubernetesSpec | None = None
    """None: the stack has no Kubernetes layer."""
    slurm: SlurmSpec | None = None
    """None: the stack runs no Slurm."""
    acceptance: AcceptanceSpec = AcceptanceSpec()
    verify: VerifySpec = VerifySpec()
    health: HealthSpec = HealthSpec()
    ephemeral: Ephemeral | None = None
    # railyard:protect as written; None when absent (the driver's default applies, see
    # railyard.lifecycle.protected).
    protect: bool | None = None
    driver_config: Any = None
    """What the driver's DriverRules.parse made of its `railyard:<driver>` section."""

    @property
    def virtual(self) -> bool:
        return self.layout == "virtual"

    @property
    def hosts(self) -> int:
        return sum(p.count for p in self.node_pools)

    @property
    def vms(self) -> int:
        return sum(p.vms for p in self.node_pools)

    def pool(self, name: str) -> NodePool:
        for p in self.node_pools:
            if p.name == name:
                return p
        raise KeyError(name)


def os_reserve_gib(memory_gib: float) -> float:
    """Memory a host keeps for its OS (or hypervisor): neither hugepages nor VMs may take it."""
    return max(OS_RESERVE_MIN_GIB, OS_RESERVE_FRACTION * memory_gib)


def host_reserve_threads(threads: int) -> int:
    """Hardware threads a virtual-layout host keeps for itself (vhost, interrupts, the agent)."""
    return max(HOST_RESERVE_MIN_THREADS, math.ceil(HOST_RESERVE_THREAD_FRACTION * threads))


def parse_ttl(text: str) -> int:
    """`30m`, `8h`, `2d` -> seconds; ValueError otherwise."""
    m = _TTL.match(text.strip()) if isinstance(text, str) else None
    if not m or m.group(2) not in TTL_UNITS or int(m.group(1)) <= 0:
        raise ValueError(f"not a ttl: {text!r}")
    return int(m.group(1)) * TTL_UNITS[m.group(2)]
