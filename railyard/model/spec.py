"""The typed stack config and its validation.

A stack is `stacks/Pulumi.<stack>.yaml`. Only the `railyard:*` keys of its `config:` are ours; every
other key (Pulumi's `encryptionsalt`, `secretsprovider`, other namespaces such as `kubernetes:`) is
passed over untouched. The config is parsed once into frozen dataclasses; every problem found on the
way is collected and raised together as one `SpecError` (see docs/stack-reference.md for every key,
its default and its rules).

The model knows no driver: each driver's own keys (`railyard:<driver>`) and rules come in as
DriverRules from the driver registry, which railyard.stack hands to the parser; `railyard.stack.load`
is the one entry point that does so and plans the result.

Public API here: `read_stack_file(path) -> (config, stack)`, `parse(config, stack, drivers) ->
(Spec, FabricPlan | None)`.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

import yaml

from railyard.model import addressing, yamlio
from railyard.model.errors import Problem, SpecError
from railyard.model.fabric import FabricError, FabricPlan, plan_fabric
from railyard.model.speeds import SPEED_GBPS

NAMESPACE = "railyard"

LAYOUTS = ("bare-metal", "virtual")
FABRIC_KINDS = ("infiniband", "roce")
SPEEDS_BY_KIND = {"infiniband": ("ndr", "hdr"), "roce": ("400gbe", "200gbe", "100gbe")}
DEFAULT_SPEED = {"infiniband": "ndr", "roce": "400gbe"}
DEFAULT_SWITCH = {"infiniband": "qm9700", "roce": "sn5600"}
TOPOLOGIES = ("rail-optimized",)
HUGEPAGE_SIZES = {"1G": 1 << 30, "2M": 2 << 20}
AFFINITY_POLICIES = ("pcie-nearest", "numa", "none")
IOMMU_MODES = ("passthrough", "on", "off")
PARALLEL_FS_KINDS = ("lustre", "gpfs", "weka", "nfs")
RAID_LEVELS = ("raid0", "raid1", "raid10", "none")
LOCAL_FILESYSTEMS = ("xfs", "ext4")
TTL_UNITS = {"m": 60, "h": 3600, "d": 86400}

DEFAULT_CIDRS = {
    "management": "198.18.0.0/20",
    "storage": "198.18.32.0/20",
    # Rail subnets are cut into per-pool blocks, and RoCE keeps half for its /31 switch links
    # (addressing.py), so the compute network gets the whole upper half of the lab range.
    "compute": "198.19.0.0/16",
}
DEFAULT_ASN_BASE = 4_200_000_000

# What the OS (or, in the virtual layout, the hypervisor) keeps for itself on every host: memory that
# hugepages and VMs may not take, and hardware threads no VM may take. Large enough for the kernel,
# page cache of a data loader and the NIC/GPU drivers; see docs/stack-reference.md.
OS_RESERVE_MIN_GIB = 16
OS_RESERVE_FRACTION = 0.10
HOST_RESERVE_MIN_THREADS = 4
HOST_RESERVE_THREAD_FRACTION = 0.10

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_TTL = re.compile(r"^([0-9]+)([a-z]+)$")
_PKEY = re.compile(r"^0[xX][0-9a-fA-F]{1,4}$")

# The keys we know, by section: the single source for unknown-key errors, did-you-mean hints and the
# test that keeps docs/stack-reference.md complete.
KEYS: dict[str, tuple[str, ...]] = {
    "": ("region", "layout", "driver", "nodePools", "fabric", "tenants", "storage", "tuning", "ephemeral", "protect"),
    "nodePools[]": ("name", "sku", "count", "vmsPerHost", "vm"),
    "nodePools[].vm": ("shape", "vcpus", "memoryGiB", "gpus", "vfs"),
    "fabric": ("compute", "storage", "management"),
    "fabric.compute": (
        "kind", "speed", "switch", "topology", "oversubscription", "reservedLeafPorts", "cidr", "asnBase",
    ),
    "fabric.storage": ("cidr",),
    "fabric.management": ("cidr",),
    "tenants[]": ("name", "pkey"),
    "storage": ("object", "parallelFs", "localCache"),
    "storage.object": ("bucket", "endpoint", "credentials"),
    "storage.parallelFs": ("kind", "mount", "capacityTiB"),
    "storage.localCache": ("mount", "raid", "fs"),
    "tuning": ("hugepages", "sriov", "affinity", "iommu", "previewDrift"),
    "tuning.hugepages": ("size", "percentOfMemory", "count", "perNuma"),
    "tuning.sriov": ("vfsPerPf",),
    "tuning.affinity": ("policy",),
    "ephemeral": ("ttl",),
}


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


@dataclass(frozen=True)
class NodePool:
    """Identical hosts of one catalog SKU; in the virtual layout each runs `vms_per_host` VMs."""

    name: str
    sku: str
    count: int
    vms_per_host: int = 0
    vm: VmSpec | None = None

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

    @property
    def speed_gbps(self) -> int:
        return SPEED_GBPS[self.speed]


@dataclass(frozen=True)
class Network:
    cidr: ipaddress.IPv4Network


@dataclass(frozen=True)
class Fabric:
    compute: ComputeFabric
    storage: Network
    management: Network


@dataclass(frozen=True)
class Tenant:
    """An InfiniBand partition. `pkey` is the value as written (0x8000 bit = full membership)."""

    name: str
    pkey: int

    @property
    def partition(self) -> int:
        return self.pkey & 0x7FFF

    @property
    def full_membership(self) -> bool:
        return bool(self.pkey & 0x8000)

    @property
    def pkey_hex(self) -> str:
        return f"0x{self.pkey:04x}"


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


# --------------------------------------------------------------------------------------------------
# Loading


def stack_name_of(path: str | Path) -> str:
    """`stacks/Pulumi.us-east-bm.yaml` -> `us-east-bm` (any other file name: its stem)."""
    name = Path(path).name
    for suffix in (".yaml", ".yml"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.startswith("Pulumi.") and len(name) > len("Pulumi."):
        name = name[len("Pulumi."):]
    return name


def read_stack_file(path: str | Path) -> tuple[Mapping[str, Any], str]:
    """A Pulumi stack file's `config:` mapping and its stack name; raises SpecError (never OSError)."""
    p = Path(path)
    shown = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([Problem(shown, "no such file", "a Pulumi stack file",
                                 "stack files live at stacks/Pulumi.<stack>.yaml")]) from None
    except IsADirectoryError:
        raise SpecError([Problem(shown, "a directory", "a Pulumi stack file",
                                 "name the file itself, e.g. stacks/Pulumi.lab.yaml")]) from None
    except UnicodeDecodeError:
        raise SpecError([Problem(shown, "bytes that are not UTF-8", "a UTF-8 YAML file")]) from None
    except OSError as exc:
        raise SpecError([Problem(shown, f"a file that cannot be read ({exc.strerror or exc})",
                                 "a readable Pulumi stack file")]) from None
    try:
        document = yamlio.load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        what = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        if exc.context_mark is not None and mark is not None and exc.context_mark.line != mark.line:
            what += f"; the construct began at line {exc.context_mark.line + 1}"
        raise SpecError([Problem(where, f"invalid YAML ({what})", "a YAML mapping",
                                 "fix the YAML at that line")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem(shown, f"invalid YAML ({exc})", "a YAML mapping")]) from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise SpecError([Problem(shown, f"a YAML {_kind(document)}",
                                 "a mapping with a `config:` key", "see stacks/Pulumi.lab.yaml")])
    config = document.get("config")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise SpecError([Problem(f"{shown}:config", _show(config), "a mapping of config keys")])
    return config, stack_name_of(p)


def parse(config: Mapping[str, Any], stack: str, drivers: Mapping[str, DriverRules | None],
          catalog: Any = None) -> tuple[Spec, FabricPlan | None]:
    """The Spec of a stack's `config:` mapping and the compute fabric validation planned for it
    (None for a spec without pools), so nobody plans it again; raises SpecError with every problem.

    drivers: every driver name `railyard:driver` may take, with its rules (None: it has none).
    """
    if catalog is None:
        from railyard.model.catalog import load_catalog

        catalog = load_catalog()
    parser = _Parser(catalog, drivers)
    spec = parser.parse(config, stack)
    return spec, parser.fabric_plan


# --------------------------------------------------------------------------------------------------
# Rendering and small helpers


_ABSENT = object()


def _is_secret(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def _show(value: Any) -> str:
    """A value as a person reads it in an error; a secret is never shown."""
    if value is _ABSENT:
        return "nothing (the key is missing)"
    if _is_secret(value):
        return "a secret (not shown)"
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__} ({value})"


def _norm(word: str) -> str:
    return word.lower().replace("_", "").replace("-", "")


def _suggest(word: Any, choices: Iterable[str]) -> str | None:
    """The choice the user most likely meant, or None."""
    if not isinstance(word, str):
        return None
    choices = list(choices)
    for c in choices:
        if _norm(c) == _norm(word):
            return c
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(word.lower(), [c.lower() for c in choices], n=1, cutoff=0.6)
        close = [c for c in choices if close and c.lower() == close[0]]
    return close[0] if close else None


def _one_of(choices: Iterable[Any]) -> str:
    return "one of " + ", ".join(str(c) for c in choices)


def _did_you_mean(word: Any, choices: Iterable[str], prefix: str = "") -> str:
    s = _suggest(word, choices)
    return f"did you mean {prefix}{s}?" if s else ""


def _fmt(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


# --------------------------------------------------------------------------------------------------
# Reading the catalog (railyard/model/catalog.py). A fact the catalog marks unknown (None) skips the
# rule that needs it: the rule cannot be decided, and the entry's `assumptions` say what is missing.

_SWITCH_KIND = {"infiniband": "infiniband", "ethernet": "roce"}  # any Ethernet switch carries RoCE
_NIC_KINDS = {"infiniband": {"infiniband"}, "ethernet": {"roce"}, "vpi": {"infiniband", "roce"}}
_KIND_LABEL = {"infiniband": "an InfiniBand", "roce": "an Ethernet"}


def _gpu_family(model: str | None) -> str | None:
    """`NVIDIA H100 SXM5 80GB` -> `H100`: the part two catalog entries name alike."""
    m = re.search(r"\b([A-Z]\d{2,3})\b", model or "")
    return m.group(1) if m else None


# --------------------------------------------------------------------------------------------------
# The parser


def _feeds_plan(path: str) -> bool:
    """Whether a problem at path leaves the planners without a value they read."""
    return (path.startswith((f"{NAMESPACE}:nodePools", f"{NAMESPACE}:fabric.", f"{NAMESPACE}:layout"))
            or path == f"{NAMESPACE}:fabric")


@dataclass
class _PoolFacts:
    """What the cross-field checks need to know about a pool beyond its NodePool."""

    path: str
    sku: Any = None
    vm_keys: frozenset = frozenset()


class _Parser:
    def __init__(self, catalog: Any, drivers: Mapping[str, DriverRules | None]):
        self.catalog = catalog
        self.drivers = drivers
        self.problems: list[Problem] = []
        self.fabric_plan: FabricPlan | None = None

    # --- recording ---------------------------------------------------------------------------

    def problem(self, path: str, found: str, allowed: str, hint: str = "") -> None:
        self.problems.append(Problem(path, found, allowed, hint))

    # --- generic readers: each returns None (and records why) when the value cannot be used ----

    def mapping(self, value: Any, path: str, section: str) -> dict | None:
        """A mapping whose keys are all known for `section` (absent or empty: {})."""
        if value is None or value is _ABSENT:
            return {}
        if _is_secret(value):
            self.problem(path, _show(value), "a mapping", "only railyard:storage.object.credentials may be a secret")
            return None
        if not isinstance(value, dict):
            self.problem(path, _show(value), f"a mapping with keys {', '.join(KEYS[section])}")
            return None
        for key in value:
            if key not in KEYS[section]:
                hint = _did_you_mean(key, KEYS[section])
                self.problem(f"{path}.{key}", "an unknown key", _one_of(KEYS[section]), hint)
        return value

    def raw(self, m: Mapping, key: str, path: str, *, required: bool, what: str) -> Any:
        """The value under key, or _ABSENT (recording a problem when it was required)."""
        value = m.get(key, _ABSENT) if m is not None else _ABSENT
        if value is None:
            value = _ABSENT
        if value is _ABSENT and required:
            self.problem(path, _show(_ABSENT), what, "this key is required")
        if _is_secret(value):
            self.problem(path, _show(value), what,
                         "only railyard:storage.object.credentials may be a secret; set this one without --secret")
            return None
        return value

    def integer(self, m: Mapping, key: str, path: str, *, default: Any = _ABSENT, minimum: int = 1,
                maximum: int | None = None, required: bool = False) -> int | None:
        allowed = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        value = self.raw(m, key, path, required=required, what=allowed)
        if value is _ABSENT:
            return None if required or default is _ABSENT else default
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            hint = ""
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                hint = "write the number without quotes"
            elif isinstance(value, float) and value.is_integer():
                hint = f"write {int(value)}"
            self.problem(path, _show(value), allowed, hint)
            return None
        if value < minimum or (maximum is not None and value > maximum):
            self.problem(path, _show(value), allowed)
            return None
        return value

    def number(self, m: Mapping, key: str, path: str, *, default: Any) -> float | None:
        allowed = "a number > 0"
        value = self.raw(m, key, path, required=False, what=allowed)
        if value is _ABSENT:
            return default
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
            self.problem(path, _show(value), allowed)
            return None
        return value

    def boolean(self, m: Mapping, key: str, path: str, *, default: bool) -> bool | None:
        value = self.raw(m, key, path, required=False, what="true or false")
        if value is _ABSENT:
            return default
        if value is None:
            return None
        if not isinstance(value, bool):
            self.problem(path, _show(value), "true or false")
            return None
        return value

    def string(self, m: Mapping, key: str, path: str, *, default: Any = _ABSENT, required: bool = False,
               what: str = "a string") -> str | None:
        value = self.raw(m, key, path, required=required, what=what)
        if value is _ABSENT:
            return None if required or default is _ABSENT else default
        if value is None:
            return None
        if not isinstance(value, str):
            self.problem(path, _show(value), what)
            return None
        return value

    def choice(self, m: Mapping, key: str, path: str, choices: Sequence[str], *, default: Any = _ABSENT,
               required: bool = False) -> str | None:
        value = self.raw(m, key, path, required=required, what=_one_of(choices))
        if value is _ABSENT:
            return None if required or default is _ABSENT else default
        if value is None:
            return None
        if isinstance(value, bool) and "on" in choices and "off" in choices:
            # YAML 1.1 reads a bare on/off as a boolean; take what the user wrote.
            value = "on" if value else "off"
        if value not in choices:
            self.problem(path, _show(value), _one_of(choices), _did_you_mean(value, choices))
            return None
        return value

    def dns_name(self, m: Mapping, key: str, path: str) -> str | None:
        what = "a DNS label: lowercase letters, digits and '-', at most 63, starting and ending alphanumeric"
        value = self.string(m, key, path, required=True, what=what)
        if value is None:
            return None
        if len(value) > 63 or not _DNS_LABEL.match(value):
            hint = ""
            fixed = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63]
            if fixed and _DNS_LABEL.match(fixed) and fixed != value:
                hint = f"e.g. {fixed!r}"
            self.problem(path, _show(value), what, hint)
            return None
        return value

    def cidr(self, m: Mapping, key: str, path: str, default: str) -> ipaddress.IPv4Network | None:
        what = "an IPv4 network in CIDR form, e.g. 198.18.0.0/20"
        value = self.string(m, key, path, default=default, what=what)
        if value is None:
            return None
        try:
            net = ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            self.problem(path, _show(value), what)
            return None
        if net.version != 4:
            self.problem(path, _show(value), what, "IPv6 fabrics are not supported yet")
            return None
        if "/" not in value:
            self.problem(path, _show(value), what, "give the prefix length, e.g. /20")
            return None
        if str(net) != value.strip():
            self.problem(path, _show(value), what, f"host bits are set; the network is {net}")
            return None
        return net

    def catalog_entry(self, table: str, key: str, path: str, kind: str) -> Any:
        entries = getattr(self.catalog, table)
        if key not in entries:
            ids = sorted(entries)
            hint = _did_you_mean(key, ids) or f"add a {kind} to railyard/data/catalog/ first"
            self.problem(path, _show(key), f"a {kind} id in the catalog: {', '.join(ids)}", hint)
            return None
        return entries[key]

    # --- the config -----------------------------------------------------------------------------

    def parse(self, config: Mapping[str, Any], stack: str) -> Spec:
        ours: dict[str, Any] = {}
        for key, value in config.items():
            if not isinstance(key, str):
                continue
            namespace, sep, name = key.partition(":")
            if not sep:
                if key in KEYS[""]:
                    self.problem(key, "a config key without a namespace", f"{NAMESPACE}:{key}",
                                 f"write it as {NAMESPACE}:{key}")
                continue
            if namespace != NAMESPACE:
                if difflib.SequenceMatcher(None, namespace.lower(), NAMESPACE).ratio() >= 0.8:
                    self.problem(key, f"the namespace {namespace!r}", f"the namespace {NAMESPACE!r}",
                                 f"did you mean {NAMESPACE}:{name}?")
                continue
            if name not in KEYS[""] and not self._driver_section(name):
                head, dot, rest = name.partition(".")
                if dot and head in KEYS[""]:
                    hint = f"nest it under {NAMESPACE}:{head} (pulumi config set --path '{head}.{rest}' ...)"
                else:
                    hint = _did_you_mean(name, KEYS[""], f"{NAMESPACE}:")
                self.problem(key, "an unknown key", _one_of(f"{NAMESPACE}:{k}" for k in KEYS[""]), hint)
                continue
            ours[name] = value

        p = f"{NAMESPACE}:"
        region = self.string(ours, "region", p + "region", required=True,
                             what="a region name: lowercase letters, digits and '-'")
        if region is not None and not _DNS_LABEL.match(region):
            self.problem(p + "region", _show(region), "a region name: lowercase letters, digits and '-'")
        layout = self.choice(ours, "layout", p + "layout", LAYOUTS, required=True)
        driver = self.choice(ours, "driver", p + "driver", tuple(self.drivers), required=True)
        for name in ours:
            if self._driver_section(name) and driver is not None and name != driver:
                self.problem(p + name, "settings of another driver", f"settings of driver {driver}, "
                             f"the stack's railyard:driver", f"remove {p}{name}, or set railyard:driver: {name}")

        pools, facts = self.node_pools(ours, layout)
        fabric = self.fabric(ours)
        kind = fabric.compute.kind if fabric else None
        tenants = self.tenants(ours, kind)
        storage = self.storage(ours)
        tuning = self.tuning(ours, layout, pools, facts)
        ephemeral = self.ephemeral(ours)
        protect = self.protect(ours, ephemeral)

        self.check_pools(pools, facts, layout, tuning, fabric)
        self.check_networks(fabric)

        spec = Spec(stack=stack, region=region, layout=layout, driver=driver, node_pools=tuple(pools),
                    fabric=fabric, tenants=tuple(tenants), storage=storage, tuning=tuning,
                    ephemeral=ephemeral, protect=protect)
        rules = self.drivers.get(driver) if driver is not None else None
        if rules is not None:
            driver_config, problems = rules.parse(ours.get(driver), spec)
            self.problems.extend(problems)
            spec = dataclasses.replace(spec, driver_config=driver_config)
        if pools and fabric is not None and not any(_feeds_plan(p.path) for p in self.problems):
            self.check_plan(spec)
        if self.problems:
            raise SpecError(self.problems)
        return spec

    # --- node pools -----------------------------------------------------------------------------

    def node_pools(self, ours: Mapping, layout: str | None) -> tuple[list[NodePool], list[_PoolFacts]]:
        path = f"{NAMESPACE}:nodePools"
        value = self.raw(ours, "nodePools", path, required=True, what="a list of node pools")
        if value is _ABSENT or value is None:
            return [], []
        if not isinstance(value, list):
            self.problem(path, _show(value), "a list of node pools", "each item: {name, sku, count}")
            return [], []
        if not value:
            self.problem(path, "an empty list", "at least one node pool")
            return [], []
        pools: list[NodePool] = []
        facts: list[_PoolFacts] = []
        names: dict[str, str] = {}
        for i, item in enumerate(value):
            ipath = f"{path}[{i}]"
            m = self.mapping(item, ipath, "nodePools[]")
            if m is None:
                continue
            if not m:
                self.problem(ipath, _show(item), "a node pool {name, sku, count}")
                continue
            name = self.dns_name(m, "name", f"{ipath}.name")
            if name is not None:
                if name in names:
                    self.problem(f"{ipath}.name", _show(name), "a name no other node pool has",
                                 f"{names[name]} has it already")
                names.setdefault(name, f"{ipath}.name")
            sku_id = self.string(m, "sku", f"{ipath}.sku", required=True, what="a node SKU id from the catalog")
            sku = self.catalog_entry("nodes", sku_id, f"{ipath}.sku", "node SKU") if sku_id is not None else None
            count = self.integer(m, "count", f"{ipath}.count", required=True)
            fact = _PoolFacts(ipath, sku)
            vms_per_host, vm = 0, None
            if layout == "virtual":
                vms_per_host, vm, fact.vm_keys = self.vm(m, ipath, sku)
            elif layout == "bare-metal":
                for key in ("vmsPerHost", "vm"):
                    if key in m:
                        self.problem(f"{ipath}.{key}", "a VM setting", "nothing: the layout is bare-metal",
                                     f"remove it, or set {NAMESPACE}:layout: virtual")
            pools.append(NodePool(name=name, sku=sku_id, count=count, vms_per_host=vms_per_host, vm=vm))
            facts.append(fact)
        return pools, facts

    def vm(self, m: Mapping, ipath: str, sku: Any) -> tuple[int | None, VmSpec | None, frozenset]:
        vms = self.integer(m, "vmsPerHost", f"{ipath}.vmsPerHost", default=1)
        vpath = f"{ipath}.vm"
        vm_m = self.mapping(m.get("vm"), vpath, "nodePools[].vm")
        if vm_m is None:
            return vms, None, frozenset()
        keys = frozenset(k for k in vm_m if vm_m[k] is not None)
        vfs = self.integer(vm_m, "vfs", f"{vpath}.vfs", default=None)
        shape_id = self.string(vm_m, "shape", f"{vpath}.shape", what="a VM shape id from the catalog")
        if "shape" in keys:
            for key in ("vcpus", "memoryGiB", "gpus"):
                if key in keys:
                    self.problem(f"{vpath}.{key}", f"{key} given with a shape", "either shape or vcpus/memoryGiB/gpus",
                                 f"the shape fixes {key}; remove one of them")
            if shape_id is None:
                return vms, None, keys
            shape = self.catalog_entry("vm_shapes", shape_id, f"{vpath}.shape", "VM shape")
            if shape is None:
                return vms, None, keys
            vcpus, memory, gpus = shape.vcpus, shape.memory_gib, shape.gpus
            if "vfs" not in keys:
                vfs = shape.vfs
        else:
            vcpus = self.integer(vm_m, "vcpus", f"{vpath}.vcpus", default=None)
            memory = self.integer(vm_m, "memoryGiB", f"{vpath}.memoryGiB", default=None)
            gpus = self.integer(vm_m, "gpus", f"{vpath}.gpus", default=None)
            # Defaults: the host split evenly between its VMs, after the hypervisor's reserve.
            if sku is not None and vms is not None:
                host_gpus, threads, host_mem = len(sku.gpus), sku.threads, sku.memory_gib
                if gpus is None and "gpus" not in keys:
                    gpus = host_gpus // vms
                    if gpus < 1:
                        self.problem(f"{ipath}.vmsPerHost", _show(vms), f"at most {host_gpus} (one GPU per VM)",
                                     f"{sku.id} has {host_gpus} GPUs")
                        gpus = None
                if vcpus is None and "vcpus" not in keys and threads is not None:
                    vcpus = max(1, (threads - host_reserve_threads(threads)) // vms)
                if memory is None and "memoryGiB" not in keys and host_mem is not None:
                    memory = max(1, int((host_mem - os_reserve_gib(host_mem)) // vms))
                # A default cannot be derived from a fact the catalog does not know: ask for it.
                for key, known, fact in (("vcpus", threads, "thread count"), ("memoryGiB", host_mem, "memory")):
                    if known is None and key not in keys:
                        self.problem(f"{vpath}.{key}", _show(_ABSENT), "a positive integer",
                                     f"the catalog does not know the {fact} of {sku.id}, "
                                     "so there is no default; set it")
        if vfs is None and "vfs" not in keys and sku is not None:
            # One VF on every rail: a VM reaches each rail of the rail-optimized fabric.
            vfs = max(1, len(sku.compute_nics))
        return vms, VmSpec(vcpus=vcpus, memory_gib=memory, gpus=gpus, vfs=vfs, shape=shape_id), keys

    # --- fabric ---------------------------------------------------------------------------------

    def fabric(self, ours: Mapping) -> Fabric | None:
        path = f"{NAMESPACE}:fabric"
        if "fabric" not in ours:
            self.problem(path + ".compute", _show(_ABSENT), "a mapping {kind, speed, switch, ...}",
                         "the compute fabric is required")
            return None
        fm = self.mapping(ours.get("fabric"), path, "fabric")
        if fm is None:
            return None
        cpath = path + ".compute"
        if fm.get("compute") is None:
            self.problem(cpath, _show(_ABSENT), "a mapping {kind, speed, switch, ...}",
                         "the compute fabric is required")
            cm = None
        else:
            cm = self.mapping(fm.get("compute"), cpath, "fabric.compute")
        compute = self.compute(cm, cpath) if cm is not None else None

        nets = {}
        for name in ("storage", "management"):
            sm = self.mapping(fm.get(name), f"{path}.{name}", f"fabric.{name}")
            nets[name] = self.cidr(sm, "cidr", f"{path}.{name}.cidr", DEFAULT_CIDRS[name]) if sm is not None else None
        if compute is None:
            return Fabric(compute=ComputeFabric(kind=None, speed=None, switch=None, cidr=None),
                          storage=Network(nets["storage"]), management=Network(nets["management"]))
        return Fabric(compute=compute, storage=Network(nets["storage"]), management=Network(nets["management"]))

    def compute(self, cm: Mapping, cpath: str) -> ComputeFabric:
        kind = self.choice(cm, "kind", cpath + ".kind", FABRIC_KINDS, required=True)
        all_speeds = tuple(s for speeds in SPEEDS_BY_KIND.values() for s in speeds)
        speed = self.choice(cm, "speed", cpath + ".speed", all_speeds,
                            default=DEFAULT_SPEED.get(kind) if kind else None)
        if kind and speed and speed not in SPEEDS_BY_KIND[kind]:
            other = next(k for k, v in SPEEDS_BY_KIND.items() if speed in v)
            self.problem(cpath + ".speed", _show(speed), f"for kind {kind}: {_one_of(SPEEDS_BY_KIND[kind])}",
                         f"{speed} is a speed of a {other} fabric; change the speed or set kind: {other}")
            speed = None
        switch_id = self.string(cm, "switch", cpath + ".switch", default=DEFAULT_SWITCH.get(kind) if kind else None,
                                what="a switch id from the catalog")
        switch = None
        if switch_id is not None:
            switch = self.catalog_entry("switches", switch_id, cpath + ".switch", "switch")
        topology = self.choice(cm, "topology", cpath + ".topology", TOPOLOGIES, default="rail-optimized")
        oversub = self.integer(cm, "oversubscription", cpath + ".oversubscription", default=1)
        reserved = self.integer(cm, "reservedLeafPorts", cpath + ".reservedLeafPorts", default=0, minimum=0)
        cidr = self.cidr(cm, "cidr", cpath + ".cidr", DEFAULT_CIDRS["compute"])
        asn_path = cpath + ".asnBase"
        asn = self.integer(cm, "asnBase", asn_path, default=None, minimum=1, maximum=4_294_967_294)
        if asn is not None and kind == "infiniband":
            self.problem(asn_path, _show(asn), "nothing: ASNs are for a roce fabric",
                         "InfiniBand has no BGP; remove asnBase")
            asn = None
        elif asn is not None and not any(lo <= asn <= hi for lo, hi in addressing.ASN_PRIVATE_RANGES):
            self.problem(asn_path, _show(asn), "a private ASN: 64512-65534 or 4200000000-4294967294",
                         "the planner numbers switches upward from this base (RFC 6996)")
            asn = None
        if kind == "roce" and asn is None and "asnBase" not in cm:
            asn = DEFAULT_ASN_BASE

        if switch is not None and kind is not None:
            skind = _SWITCH_KIND.get(switch.kind)
            if skind is not None and skind != kind:
                same = sorted(k for k, s in self.catalog.switches.items() if _SWITCH_KIND.get(s.kind) == kind)
                self.problem(cpath + ".switch", _show(switch_id),
                             f"{_KIND_LABEL[kind]} switch: {', '.join(same) or 'none in the catalog'}",
                             f"{switch_id} is {_KIND_LABEL[skind]} switch")
                switch = None
        if switch is not None and speed is not None and switch.speeds and speed not in switch.speeds:
            self.problem(cpath + ".speed", _show(speed), f"a speed of {switch_id}: {', '.join(sorted(switch.speeds))}",
                         f"{switch_id} has no ports at {speed} (native or breakout); pick another speed or switch")
        # Limits that depend on the switch's radix at this speed (reserved ports, tiers, nodes per
        # fabric) belong to the planner: check_plan() asks it once the whole spec is known.
        return ComputeFabric(kind=kind, speed=speed, switch=switch_id, topology=topology,
                             oversubscription=oversub, reserved_leaf_ports=reserved, cidr=cidr, asn_base=asn)

    # --- tenants --------------------------------------------------------------------------------

    def tenants(self, ours: Mapping, kind: str | None) -> list[Tenant]:
        path = f"{NAMESPACE}:tenants"
        value = self.raw(ours, "tenants", path, required=False, what="a list of tenants {name, pkey}")
        if value is _ABSENT or value is None:
            return []
        if not isinstance(value, list):
            self.problem(path, _show(value), "a list of tenants {name, pkey}")
            return []
        if value and kind == "roce":
            self.problem(path, f"{len(value)} tenant(s) with partition keys",
                         "no tenants on a roce fabric", "pkeys partition InfiniBand; remove railyard:tenants")
            return []
        out: list[Tenant] = []
        names: dict[str, str] = {}
        partitions: dict[int, str] = {}
        for i, item in enumerate(value):
            ipath = f"{path}[{i}]"
            m = self.mapping(item, ipath, "tenants[]")
            if m is None:
                continue
            name = self.dns_name(m, "name", ipath + ".name")
            if name is not None:
                if name in names:
                    self.problem(ipath + ".name", _show(name), "a name no other tenant has", f"{names[name]} has it")
                names.setdefault(name, ipath + ".name")
            if m.get("pkey") is None:
                pkey = addressing.partition_key(i)
            else:
                pkey = self.pkey(m, ipath + ".pkey")
            if pkey is not None:
                base = pkey & 0x7FFF
                if base in partitions:
                    self.problem(ipath + ".pkey", _show(m.get("pkey", f"0x{pkey:04x} (its default)")),
                                 "a partition no other tenant has",
                                 f"same partition 0x{base:04x} as {partitions[base]} "
                                 "(the 0x8000 bit only marks full membership)")
                partitions.setdefault(base, ipath + ".pkey")
            out.append(Tenant(name=name, pkey=pkey))
        return out

    def pkey(self, m: Mapping, path: str) -> int | None:
        what = 'a quoted hex pkey "0x0001".."0x7ffe", or "0x8001".."0xfffe" for full membership'
        value = self.raw(m, "pkey", path, required=False, what=what)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            self.problem(path, f"the number {value} (0x{value:x})", what,
                         f'quote it: pkey: "0x{value:04x}" if that is what you meant')
            return None
        if not isinstance(value, str) or not _PKEY.match(value.strip()):
            self.problem(path, _show(value), what)
            return None
        pkey = int(value.strip(), 16)
        base = pkey & 0x7FFF
        if base == 0:
            self.problem(path, _show(value), what, "partition 0 is invalid in InfiniBand")
            return None
        if base == 0x7FFF:
            self.problem(path, _show(value), what,
                         "0x7fff/0xffff is the default partition every port belongs to; a tenant needs its own")
            return None
        return pkey

    # --- storage --------------------------------------------------------------------------------

    def storage(self, ours: Mapping) -> StorageSpec:
        path = f"{NAMESPACE}:storage"
        sm = self.mapping(ours.get("storage"), path, "storage")
        if sm is None:
            return StorageSpec()
        obj = None
        if "object" in sm:
            opath = path + ".object"
            om = self.mapping(sm.get("object"), opath, "storage.object")
            if om is not None:
                obj = self.object_tier(om, opath)
        pfs = None
        if "parallelFs" in sm:
            ppath = path + ".parallelFs"
            pm = self.mapping(sm.get("parallelFs"), ppath, "storage.parallelFs")
            if pm is not None:
                pfs = ParallelFs(kind=self.choice(pm, "kind", ppath + ".kind", PARALLEL_FS_KINDS, default="lustre"),
                                 mount=self.mount(pm, "mount", ppath + ".mount", "/mnt/pfs"),
                                 capacity_tib=self.number(pm, "capacityTiB", ppath + ".capacityTiB", default=100))
        cpath = path + ".localCache"
        cm = self.mapping(sm.get("localCache"), cpath, "storage.localCache")
        cache = LocalCache()
        if cm:
            cache = LocalCache(mount=self.mount(cm, "mount", cpath + ".mount", "/mnt/cache"),
                               raid=self.choice(cm, "raid", cpath + ".raid", RAID_LEVELS, default="raid0"),
                               fs=self.choice(cm, "fs", cpath + ".fs", LOCAL_FILESYSTEMS, default="xfs"))
        if pfs is not None and pfs.mount and cache.mount:
            a, b = pfs.mount.rstrip("/") + "/", cache.mount.rstrip("/") + "/"
            if a.startswith(b) or b.startswith(a):
                self.problem(cpath + ".mount", _show(cache.mount), f"a mount point apart from {pfs.mount}",
                             f"{NAMESPACE}:storage.parallelFs.mount would be hidden by, or hide, the cache")
        return StorageSpec(object=obj, parallel_fs=pfs, local_cache=cache)

    def mount(self, m: Mapping, key: str, path: str, default: str) -> str | None:
        what = "an absolute path other than /, e.g. /mnt/pfs"
        value = self.string(m, key, path, default=default, what=what)
        if value is None:
            return None
        if not value.startswith("/") or value.rstrip("/") == "" or any(c.isspace() for c in value) \
                or "/../" in value + "/" or "/./" in value + "/":
            self.problem(path, _show(value), what)
            return None
        return value

    def object_tier(self, om: Mapping, opath: str) -> ObjectTier:
        what = "an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-'"
        bucket = self.string(om, "bucket", opath + ".bucket", default="datasets", what=what)
        if bucket is not None and (not _BUCKET.match(bucket) or ".." in bucket):
            self.problem(opath + ".bucket", _show(bucket), what)
        what = "an http(s) URL, or empty for the driver's own object store"
        endpoint = self.string(om, "endpoint", opath + ".endpoint", default="", what=what)
        if endpoint and not re.match(r"^https?://[^\s/]+(/\S*)?$", endpoint):
            self.problem(opath + ".endpoint", _show(endpoint), what)
        cred_path = opath + ".credentials"
        raw = om.get("credentials")
        credentials = None
        if _is_secret(raw):
            if not isinstance(raw["secure"], str) or not raw["secure"]:
                self.problem(cred_path, "a secret with no ciphertext", "a Pulumi secret",
                             "set it again with pulumi config set --secret --path storage.object.credentials")
            else:
                credentials = Secret(raw["secure"])
        elif raw is None or raw == "":
            credentials = None
        elif isinstance(raw, str):
            # Never echo it: a plain value here is a credential written in the clear.
            self.problem(cred_path, "a plain-text value (not shown)", "a Pulumi secret, or empty",
                         "set it with pulumi config set --secret --path storage.object.credentials, "
                         "and rotate the credential: it was written in the clear")
        else:
            self.problem(cred_path, f"a {_kind(raw)}", "a Pulumi secret, or empty",
                         "pulumi config set --secret --path storage.object.credentials")
        return ObjectTier(bucket=bucket, endpoint=endpoint, credentials=credentials)

    # --- tuning ---------------------------------------------------------------------------------

    def tuning(self, ours: Mapping, layout: str | None, pools: list[NodePool],
               facts: list[_PoolFacts]) -> TuningSpec:
        path = f"{NAMESPACE}:tuning"
        tm = self.mapping(ours.get("tuning"), path, "tuning")
        if tm is None:
            tm = {}
        hpath = path + ".hugepages"
        hm = self.mapping(tm.get("hugepages"), hpath, "tuning.hugepages") or {}
        size = self.choice(hm, "size", hpath + ".size", tuple(HUGEPAGE_SIZES), default="1G")
        count = self.integer(hm, "count", hpath + ".count", default=None, minimum=0)
        percent = self.integer(hm, "percentOfMemory", hpath + ".percentOfMemory",
                               default=None if "count" in hm else 0, minimum=0, maximum=100)
        if "count" in hm and "percentOfMemory" in hm:
            self.problem(hpath + ".count", "both count and percentOfMemory", "one of count or percentOfMemory",
                         "count is pages per host; percentOfMemory a share of each host's memory")
        per_numa = self.boolean(hm, "perNuma", hpath + ".perNuma", default=True)
        hugepages = Hugepages(size=size, percent_of_memory=percent, count=count, per_numa=per_numa)

        spath = path + ".sriov"
        sm = self.mapping(tm.get("sriov"), spath, "tuning.sriov") or {}
        vfs_per_pf = self.integer(sm, "vfsPerPf", spath + ".vfsPerPf", default=None, minimum=0)
        if vfs_per_pf is None and "vfsPerPf" not in sm:
            vfs_per_pf = self.default_vfs_per_pf(layout, pools, facts)

        apath = path + ".affinity"
        am = self.mapping(tm.get("affinity"), apath, "tuning.affinity") or {}
        affinity = Affinity(policy=self.choice(am, "policy", apath + ".policy", AFFINITY_POLICIES,
                                               default="pcie-nearest"))
        iommu = self.choice(tm, "iommu", path + ".iommu", IOMMU_MODES, default="passthrough")
        if layout == "virtual" and iommu == "off":
            self.problem(path + ".iommu", _show("off"), "passthrough or on in the virtual layout",
                         "VFs and GPUs are passed to VMs through VFIO, which needs the IOMMU")
        drift = self.boolean(tm, "previewDrift", path + ".previewDrift", default=False)
        return TuningSpec(hugepages=hugepages, sriov=Sriov(vfs_per_pf), affinity=affinity, iommu=iommu,
                          preview_drift=drift)

    def default_vfs_per_pf(self, layout: str | None, pools: list[NodePool], facts: list[_PoolFacts]) -> int:
        """Bare metal: SR-IOV off. Virtual: the fewest VFs per PF that give every VM its VFs."""
        if layout != "virtual":
            return 0
        need = 1
        for pool, fact in zip(pools, facts):
            if fact.sku is not None and pool.vm and pool.vm.vfs and pool.vms_per_host:
                need = max(need, addressing.vf_slots_per_pf(pool.vms_per_host, pool.vm.vfs,
                                                            len(fact.sku.compute_nics)))
        return need

    # --- ephemeral ------------------------------------------------------------------------------

    def ephemeral(self, ours: Mapping) -> Ephemeral | None:
        if "ephemeral" not in ours:
            return None
        path = f"{NAMESPACE}:ephemeral"
        em = self.mapping(ours.get("ephemeral"), path, "ephemeral")
        if em is None:
            return None
        what = "a duration: a positive whole number and m, h or d, e.g. 30m, 8h, 2d"
        ttl = self.string(em, "ttl", path + ".ttl", default="8h", what=what)
        if ttl is None:
            return None
        try:
            seconds = parse_ttl(ttl)
        except ValueError:
            hint = ""
            m = _TTL.match(ttl.strip())
            if m and m.group(2) not in TTL_UNITS:
                hint = f"unit {m.group(2)!r} is not one of m, h, d"
            self.problem(path + ".ttl", _show(ttl), what, hint)
            return None
        return Ephemeral(ttl=ttl.strip(), ttl_seconds=seconds)

    def protect(self, ours: Mapping, ephemeral: Ephemeral | None) -> bool | None:
        if "protect" not in ours:
            return None
        path = f"{NAMESPACE}:protect"
        raw = ours.get("protect")
        # Pulumi keeps a top-level scalar as a string (`pulumi config set railyard:protect true`,
        # and any rewrite of the stack file, stores "true"); its own get_bool reads those two.
        if raw in ("true", "false"):
            value = raw == "true"
        else:
            value = self.boolean(ours, "protect", path, default=False)
        if value and ephemeral is not None:
            # The reaper never unprotects, so such a stack would expire and never be reaped.
            self.problem(path, "true", "false or absent on an ephemeral stack",
                         f"{NAMESPACE}:ephemeral makes the stack expire and be reaped; a protected stack is never "
                         "reaped. Keep one of the two")
        return value

    # --- cross-field rules ----------------------------------------------------------------------

    def check_pools(self, pools: list[NodePool], facts: list[_PoolFacts], layout: str | None,
                    tuning: TuningSpec, fabric: Fabric | None) -> None:
        compute = fabric.compute if fabric is not None else None
        for pool, fact in zip(pools, facts):
            if pool.name is not None and pool.count is not None:
                longest = addressing.node_name(pool.name, pool.count - 1)
                if layout == "virtual" and pool.vms_per_host:
                    longest = addressing.vm_name(pool.name, pool.count - 1, pool.vms_per_host - 1)
                if len(longest) > 63:
                    self.problem(fact.path + ".name", _show(pool.name),
                                 f"at most {63 - (len(longest) - len(pool.name))} characters for this count",
                                 f"the name {longest!r} would exceed a 63-character DNS label")
            if fact.sku is None:
                continue
            self.check_hugepages(pool, fact, tuning.hugepages, layout)
            self.check_sriov(pool, fact, layout, tuning.sriov)
            if layout == "virtual" and pool.vm is not None:
                self.check_vm(pool, fact, compute)
            if compute is not None and compute.kind and compute.speed:
                self.check_nics(pool, fact, compute)

    def check_hugepages(self, pool: NodePool, fact: _PoolFacts, hp: Hugepages, layout: str | None) -> None:
        mem = fact.sku.memory_gib
        if mem is None or hp.size is None or (hp.count is None and hp.percent_of_memory is None):
            return
        reserve = os_reserve_gib(mem)
        want = hp.gib_for(mem)
        hpath = f"{NAMESPACE}:tuning.hugepages"
        key = "count" if hp.count is not None else "percentOfMemory"
        vm = pool.vm
        if (layout == "virtual" and want > 0 and vm is not None and vm.memory_gib and pool.vms_per_host
                and want < vm.memory_gib * pool.vms_per_host):
            # A guest backed by hugepages needs all of its memory in them, or it does not start.
            self.problem(f"{hpath}.{key}", _show(hp.count if key == "count" else hp.percent_of_memory),
                         f"enough hugepages for the VMs of pool {pool.name}, or none",
                         f"{_fmt(want)} GiB of hugepages on {pool.sku} cannot back {pool.vms_per_host} x "
                         f"{vm.memory_gib} GiB of VM memory; lower vm.memoryGiB or raise the hugepages")
        if want > mem - reserve:
            most = (int((mem - reserve) * (1 << 30)) // hp.page_bytes if key == "count"
                    else math.floor((mem - reserve) / mem * 100))
            self.problem(f"{hpath}.{key}", _show(hp.count if key == "count" else hp.percent_of_memory),
                         f"at most {most} on {pool.sku} (pool {pool.name})",
                         f"{_fmt(want)} GiB of hugepages on a {_fmt(mem)} GiB host leaves less than the "
                         f"{_fmt(reserve)} GiB OS reserve (max(16 GiB, 10%))")

    def check_sriov(self, pool: NodePool, fact: _PoolFacts, layout: str | None, sriov: Sriov) -> None:
        n = sriov.vfs_per_pf
        if n is None:
            return
        spath = f"{NAMESPACE}:tuning.sriov.vfsPerPf"
        nics = fact.sku.compute_nics
        if layout == "virtual" and n == 0:
            self.problem(spath, "0 (SR-IOV off)", "at least 1 in the virtual layout",
                         "VMs reach the compute fabric through SR-IOV VFs")
            return
        known = [nic for nic in nics if nic.sriov_total_vfs is not None]
        if known:
            nic = min(known, key=lambda x: x.sriov_total_vfs)
            if n > nic.sriov_total_vfs:
                self.problem(spath, _show(n), f"0..{nic.sriov_total_vfs} on {pool.sku} (pool {pool.name})",
                             f"{nic.name} on {pool.sku} supports at most {nic.sriov_total_vfs} VFs (sriov_total_vfs)")
                return
        if layout == "virtual" and pool.vm is not None and pool.vm.vfs and pool.vms_per_host:
            need = addressing.vf_slots_per_pf(pool.vms_per_host, pool.vm.vfs, len(nics))
            if need > n:
                self.problem(f"{fact.path}.vm.vfs", _show(pool.vm.vfs),
                             f"at most {len(nics) * n // pool.vms_per_host} VFs per VM",
                             f"{pool.vms_per_host} VM(s) x {pool.vm.vfs} VFs over {len(nics)} compute PFs need "
                             f"{need} VFs per PF on {pool.sku}; raise {NAMESPACE}:tuning.sriov.vfsPerPf")

    def check_vm(self, pool: NodePool, fact: _PoolFacts, compute: ComputeFabric | None) -> None:
        vm, sku, vms = pool.vm, fact.sku, pool.vms_per_host
        if vms is None:
            return
        vpath = f"{fact.path}.vm"

        def where(key: str) -> str:
            if "shape" in fact.vm_keys:
                return f"{vpath}.shape"
            return f"{vpath}.{key}" if key in fact.vm_keys else f"{fact.path}.vmsPerHost"

        what = f"shape {vm.shape}" if vm.shape else "VM"
        host_gpus = len(sku.gpus)
        if vm.gpus is not None and vm.gpus * vms > host_gpus:
            self.problem(where("gpus"), _show(vm.shape or vm.gpus),
                         f"vmsPerHost x vm.gpus <= {host_gpus} ({pool.sku} GPUs)",
                         f"{vms} x {vm.gpus} GPUs ({what}) = {vm.gpus * vms} > {host_gpus}")
        elif vm.gpus is not None and vm.gpus < 1:
            self.problem(where("gpus"), _show(vm.gpus), "at least 1 GPU per VM")
        threads = sku.threads
        if vm.vcpus is not None and threads is not None:
            most = threads - host_reserve_threads(threads)
            if vm.vcpus * vms > most:
                self.problem(where("vcpus"), _show(vm.shape or vm.vcpus),
                             f"vmsPerHost x vm.vcpus <= {most}",
                             f"{pool.sku} has {threads} threads and keeps {threads - most} for the hypervisor; "
                             f"{vms} x {vm.vcpus} vCPUs ({what}) = {vm.vcpus * vms}")
        mem = sku.memory_gib
        if vm.memory_gib is not None and mem is not None:
            most = mem - os_reserve_gib(mem)
            if vm.memory_gib * vms > most:
                self.problem(where("memoryGiB"), _show(vm.shape or vm.memory_gib),
                             f"vmsPerHost x vm.memoryGiB <= {math.floor(most)}",
                             f"{pool.sku} has {_fmt(mem)} GiB and keeps {_fmt(os_reserve_gib(mem))} GiB for the "
                             f"hypervisor; {vms} x {vm.memory_gib} GiB ({what}) = {vm.memory_gib * vms} GiB")
        shape = self.catalog.vm_shapes.get(vm.shape) if vm.shape else None
        if shape is None:
            return
        host_family = _gpu_family(sku.gpus[0].model if sku.gpus else None)
        shape_family = _gpu_family(shape.gpu_model)
        if host_family and shape_family and host_family != shape_family:
            self.problem(f"{vpath}.shape", _show(vm.shape), f"a shape with {host_family} GPUs",
                         f"{vm.shape} is a {shape_family} shape; {pool.sku} has {host_family} GPUs")
        if compute is not None and compute.kind and shape.fabric and shape.fabric != compute.kind:
            self.problem(f"{vpath}.shape", _show(vm.shape), f"a shape whose compute NICs join {compute.kind}",
                         f"{vm.shape} reaches a {shape.fabric} fabric; {NAMESPACE}:fabric.compute.kind is {compute.kind}")

    def check_nics(self, pool: NodePool, fact: _PoolFacts, compute: ComputeFabric) -> None:
        # The catalog refuses a SKU without compute NICs, so every pool here has at least one.
        cpath = f"{NAMESPACE}:fabric.compute"
        for nic in fact.sku.compute_nics:
            kinds = _NIC_KINDS.get(nic.link)
            if kinds is not None and compute.kind not in kinds:
                self.problem(cpath + ".kind", _show(compute.kind), _one_of(sorted(kinds)) + f" for {pool.sku}",
                             f"{nic.name} on {pool.sku} is an {nic.link} NIC")
                return
            if nic.speed_gbps is not None and compute.speed_gbps > nic.speed_gbps:
                self.problem(cpath + ".speed", _show(compute.speed), f"at most {nic.speed_gbps} Gb/s for {pool.sku}",
                             f"the compute NICs of {pool.sku} ({nic.name}) run at {nic.speed_gbps} Gb/s at most")
                return

    def _driver_section(self, name: str) -> bool:
        """Whether `railyard:<name>` is a driver's own section (a driver that reads keys)."""
        rules = self.drivers.get(name)
        return rules is not None and bool(rules.KEYS)

    def check_networks(self, fabric: Fabric | None) -> None:
        """CIDRs apart from each other (sizes: check_plan; a driver's own range: its DriverRules)."""
        if fabric is None:
            return
        path = f"{NAMESPACE}:fabric"
        nets = {
            f"{path}.management.cidr": fabric.management.cidr,
            f"{path}.storage.cidr": fabric.storage.cidr,
            f"{path}.compute.cidr": fabric.compute.cidr,
        }
        seen: list[tuple[str, ipaddress.IPv4Network]] = []
        for p, net in nets.items():
            if net is None:
                continue
            for q, other in seen:
                if net.overlaps(other):
                    self.problem(p, str(net), f"a network apart from {other}", f"it overlaps {q}")
            seen.append((p, net))

    def check_plan(self, spec: Spec) -> None:
        """What only the planners can tell: network sizes (addressing.py), fabric limits (fabric.py).

        They need a whole spec, so they run once the keys they read are valid; their problems join
        the others in the same SpecError. The fabric is planned here, once: the address sizing
        reads it, and the plan reuses it (parse returns it).
        """
        fabric_problems: list[Problem] = []
        try:
            self.fabric_plan = plan_fabric(spec, self.catalog)
        except FabricError as exc:
            fabric_problems = exc.problems
        self.problems.extend(addressing.address_problems(spec, self.catalog, self.fabric_plan))
        self.problems.extend(p for p in fabric_problems if p not in self.problems)
