"""The hardware catalog: node SKUs, VM shapes and switch models, read from railyard/data/catalog/.

Hardware is data. Each YAML file holds one entry and cites the fixture rows it was taken from;
a fact its sources do not give is written `unknown` (None here) or listed under `assumptions:`.
The loader reads every file, checks each field and the cross-references between them (parents of
PCIe devices, NUMA ids, NIC models), and reports every problem at once, each with its file and
field, so a broken entry is fixed in one pass.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

import yaml

from railyard.model import pairing, pcie, yamlio
from railyard.model.sysfs_discovery import parse_cpulist
from railyard.model.errors import Problem
from railyard.model.spec.reader import ConfigReader
from railyard.model.spec.show import _did_you_mean
from railyard.model.pcie import PcieTree

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
CATALOG_DIR = DATA_DIR / "catalog"
FIXTURES_DIR = DATA_DIR / "fixtures"

UNKNOWN = "unknown"
NIC_ROLES = ("compute", "storage", "inband")
NIC_LINKS = ("infiniband", "ethernet", "vpi")
BRIDGE_KINDS = (pcie.ROOT_PORT, pcie.SWITCH)
SWITCH_KINDS = ("infiniband", "ethernet")
VM_NIC_ATTACH = ("sriov-vf", "passthrough")
FABRICS = ("infiniband", "roce")
SECTIONS = {"nodes": "node", "vms": "VM shape", "switches": "switch"}


class CatalogError(Exception):
    """A catalog that cannot be used, with every problem found in it (file and field first)."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__(self.problems)

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


# --------------------------------------------------------------------------------------------------
# The entries


@dataclass(frozen=True)
class Source:
    """Where facts of an entry come from: a file under railyard/data/fixtures/ and the rows used."""

    file: str
    where: str
    gives: str


@dataclass(frozen=True)
class Assumption:
    """Facts an entry states without a source saying so; `fields` are paths into the entry."""

    fields: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class CpuSpec:
    model: str | None
    sockets: int | None
    cores: int | None
    threads: int | None
    base_ghz: float | None
    boost_ghz: float | None


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpulist: str | None

    def cpus(self) -> list[int] | None:
        """The CPU numbers of cpulist (``0-55,112-167``), or None when unknown."""
        return None if self.cpulist is None else parse_cpulist(self.cpulist)


@dataclass(frozen=True)
class GpuSpec:
    index: int
    name: str
    model: str | None
    memory_gib: int | None
    numa: int | None
    pci_bus_id: str | None
    pci_vendor: str | None
    pci_device: str | None
    pci_class: str | None
    parent: str | None
    pcie_link: str | None = None
    """Its PCIe link as NCCL writes it, `32.0 GT/s PCIe x16`; None where no source gives it."""


@dataclass(frozen=True)
class NicSpec:
    """One RDMA device (one PCI function). `ports` is its adapter's port count, `port` the one it drives."""

    rdma: str
    netdev: str | None
    role: str
    nic_model: str
    model: str | None
    link: str | None
    ports: int | None
    port: int | None
    speed_gbps: int | None
    numa: int | None
    pci_bus_id: str | None
    pci_vendor: str | None
    pci_device: str | None
    pci_class: str | None
    sriov_total_vfs: int | None
    parent: str | None
    osfp: str | None = None
    connectx: str | None = None
    pcie_link: str | None = None
    """As GpuSpec.pcie_link."""

    @property
    def name(self) -> str:
        return self.rdma

    @property
    def class_link(self) -> str | None:
        """The link layer its PCI class implies (a VPI port's class follows the mode it runs):
        0x0207xx InfiniBand, 0x0200xx Ethernet; None without a class."""
        cls = (self.pci_class or "").lower()
        return "infiniband" if cls.startswith("0x0207") else "ethernet" if cls.startswith("0x0200") else None

    @property
    def link_layer(self) -> str | None:
        """The link layer it runs: the catalog's link where it names one, else its class's; None
        where neither says (a VPI card with no class)."""
        return self.link if self.link in ("infiniband", "ethernet") else self.class_link


@dataclass(frozen=True)
class DiskGroup:
    role: str
    count: int
    size_tb: float

    @property
    def total_tb(self) -> float:
        return self.count * self.size_tb


@dataclass(frozen=True)
class PcieBridge:
    """A host bridge (root of a tree, on a NUMA node), a root port or a PCIe switch."""

    id: str
    kind: str
    parent: str | None
    numa: int | None = None
    pci_bus_id: str | None = None
    model: str | None = None
    pci_vendor: str | None = None
    pci_device: str | None = None
    pci_class: str | None = None


@dataclass(frozen=True)
class Reproduces:
    """The `nvidia-smi topo -m` fixture whose classes this entry's PCIe tree must give."""

    file: str
    nic_labels: Mapping[str, str] = field(hash=False)


@dataclass(frozen=True)
class NvlinkDomainSpec:
    """A rack-scale machine's NVLink domain: `compute_trays` nodes of this SKU whose GPUs reach each
    other over NVLink switch trays, one domain per rack. The SKU entry itself is one compute tray."""

    name: str
    gpus: int
    compute_trays: int
    switch_trays: int | None


@dataclass(frozen=True)
class NodeSku:
    id: str
    name: str
    sources: tuple[Source, ...]
    assumptions: tuple[Assumption, ...]
    cpus: CpuSpec
    numa_nodes: tuple[NumaNode, ...]
    memory_gib: int | None
    nvlink_class: str | None
    gpu_interconnect: str | None
    gpus: tuple[GpuSpec, ...]
    nics: tuple[NicSpec, ...]
    nvme: tuple[DiskGroup, ...] | None
    pcie: tuple[PcieBridge, ...]
    reproduces: Reproduces | None
    file: str
    nvlink_domain: NvlinkDomainSpec | None = None
    """Set on a rack-scale SKU (a compute tray of an NVL72): nodes come in whole domains."""

    @property
    def compute_nics(self) -> tuple[NicSpec, ...]:
        return tuple(n for n in self.nics if n.role == "compute")

    @property
    def threads(self) -> int | None:
        return self.cpus.threads

    @property
    def threads_per_core(self) -> int | None:
        """Hardware threads of a core (SMT), where the catalog gives threads and cores."""
        c = self.cpus
        return c.threads // c.cores if c.threads and c.cores and c.threads % c.cores == 0 else None

    def gpu(self, name: str) -> GpuSpec:
        for g in self.gpus:
            if g.name == name:
                return g
        raise KeyError(f"{self.id} has no GPU {name!r}; GPUs: {', '.join(g.name for g in self.gpus)}")

    def nic(self, name: str) -> NicSpec:
        for n in self.nics:
            if n.rdma == name:
                return n
        raise KeyError(f"{self.id} has no NIC {name!r}; NICs: {', '.join(n.rdma for n in self.nics)}")

    def numa_node(self, numa: int) -> NumaNode:
        for n in self.numa_nodes:
            if n.id == numa:
                return n
        raise KeyError(f"{self.id} has no NUMA node {numa}")

    def local_cpulist(self, device: str) -> str | None:
        """What sysfs shows as the device's local_cpulist: the CPU list of its NUMA node."""
        numa = self._device_numa(device)
        return None if numa is None else self.numa_node(numa).cpulist

    @cached_property
    def pcie_tree(self) -> PcieTree:  # (`pcie` in this class is the field, not the module)
        nodes = [pcie.PcieNode(b.id, b.kind, b.parent, b.numa) for b in self.pcie]
        nodes += [pcie.PcieNode(g.name, pcie.ENDPOINT, g.parent) for g in self.gpus if g.parent]
        nodes += [pcie.PcieNode(n.rdma, pcie.ENDPOINT, n.parent) for n in self.nics if n.parent]
        return pcie.PcieTree(nodes)

    def distance(self, dev_a: str, dev_b: str) -> str | None:
        """The PCIe class between two devices, or None when one of them has no known place."""
        tree = self.pcie_tree
        if dev_a not in tree or dev_b not in tree:
            return None
        return pcie.distance_class(tree, dev_a, dev_b)

    def pairing(self) -> dict[str, str]:
        """GPU name -> compute NIC name by the one pairing rule, from this SKU's PCIe tree."""
        return pairing.pair(
            [pairing.Device(g.name, g.numa, g.index) for g in self.gpus],
            [pairing.Device(n.rdma, n.numa, i) for i, n in enumerate(self.compute_nics)],
            self.distance,
        )

    def disk_tb(self, role: str = "data") -> float | None:
        """Total NVMe capacity of one role (``data`` for caches), or None when unknown."""
        if self.nvme is None:
            return None
        return sum(g.total_tb for g in self.nvme if g.role == role)

    def assumed(self, path: str) -> bool:
        """True when an assumption covers path (``nics.mlx5_0.speed_gbps``) or a prefix of it."""
        parts = path.split(".")
        for a in self.assumptions:
            for f in a.fields:
                pattern = f.split(".")
                if len(pattern) <= len(parts) and all(p in ("*", q) for p, q in zip(pattern, parts)):
                    return True
        return False

    def _device_numa(self, device: str) -> int | None:
        for g in self.gpus:
            if g.name == device:
                return g.numa
        return self.nic(device).numa


@dataclass(frozen=True)
class SwitchModel:
    id: str
    name: str
    family: str
    kind: str  # infiniband | ethernet
    ports: int
    port_speed_gbps: int
    speeds: Mapping[str, int] = field(hash=False)  # speed id -> ports at that speed
    cages: int | None = None
    cage_type: str | None = None
    ports_per_cage: int | None = None
    optic: str | None = None
    lanes_per_cage: int | None = None
    """A cage's SerDes lanes; None where the sources do not give them."""
    aggregate_tbps: float | None = None
    notes: str | None = None
    sources: tuple[Source, ...] = ()
    assumptions: tuple[Assumption, ...] = ()
    file: str = ""

    def ports_at(self, speed: str) -> int | None:
        return self.speeds.get(speed)


@dataclass(frozen=True)
class OtherNics:
    count: int | None
    kind: str | None
    speed_gbps: int | None
    note: str | None


@dataclass(frozen=True)
class VmShape:
    id: str
    name: str
    provider: str
    vcpus: int
    cores: int | None
    cpu_model: str | None
    memory_gib: int
    gpus: int
    gpu_model: str | None
    gpu_memory_gib: int | None
    compute_nics: int
    compute_nic_speed_gbps: int | None
    compute_nic_model: str | None
    compute_nic_attach: str | None
    fabric: str
    nic_counts_supported: tuple[int, ...]
    other_nics: OtherNics | None
    local_disks: tuple[DiskGroup, ...] | None
    numa_nodes: int | None
    topology: str | None
    sources: tuple[Source, ...]
    assumptions: tuple[Assumption, ...]
    file: str

    @property
    def vfs(self) -> int:
        """Compute NICs the VM sees, one per rail."""
        return self.compute_nics


@dataclass(frozen=True)
class Catalog:
    nodes: Mapping[str, NodeSku] = field(hash=False)
    switches: Mapping[str, SwitchModel] = field(hash=False)
    vm_shapes: Mapping[str, VmShape] = field(hash=False)


@functools.cache
def gpu_tools() -> Mapping[str, Mapping[str, str]]:
    """How nvidia-smi names each GPU and shows its NVLinks, by PCI device id (catalog/gpu_tools.yaml,
    from real output of the tool): what the lab's stand-in for it prints."""
    data = yamlio.load((CATALOG_DIR / "gpu_tools.yaml").read_text(encoding="utf-8"))
    return MappingProxyType({str(k).lower(): MappingProxyType(dict(v)) for k, v in data.items()})


def gpu_tools_of(sku: NodeSku) -> Mapping[str, str]:
    """gpu_tools.yaml's entry for the SKU's GPU (by its PCI device id); empty where none is kept."""
    device = (sku.gpus[0].pci_device or "").lower() if sku.gpus else ""
    return gpu_tools().get(device, MappingProxyType({}))


def nvlink_gbs(sku: NodeSku) -> float | None:
    """One NVLink of the SKU's GPU, in GB/s, as nvidia-smi shows it (gpu_tools.yaml); None where
    no real output of its links is kept."""
    shown = gpu_tools_of(sku).get("nvlink")
    if not shown:
        return None
    value, _, unit = shown.partition(" ")
    if unit != "GB/s":  # nvidia-smi prints GB/s; another unit is a slip of the catalog's, not a speed
        raise ValueError(f"gpu_tools.yaml: NVLink speed {shown!r} of {sku.gpus[0].pci_device} is not in GB/s")
    return float(value)


@functools.cache
def load_catalog(root: Path | None = None) -> Catalog:
    """Read and check every entry under root (default railyard/data/catalog/); raises CatalogError."""
    root = Path(root) if root is not None else CATALOG_DIR
    fixtures = FIXTURES_DIR if root == CATALOG_DIR else root.parent / "fixtures"
    problems: list[Problem] = []
    found: dict[str, dict[str, Any]] = {"nodes": {}, "vms": {}, "switches": {}}
    readers = {"nodes": _node, "vms": _vm_shape, "switches": _switch}
    if not root.is_dir():
        raise CatalogError([Problem(str(root), "no such directory", "the catalog directory")])
    for section, read in readers.items():
        for path in sorted((root / section).glob("*.yaml")):
            r = _Reader(f"{section}/{path.name}", fixtures)
            data = r.load(path)
            if data is not None:
                entry = read(r, data, path.stem)
                if entry is not None and not r.problems:
                    found[section][entry.id] = entry
            problems.extend(r.problems)
    if problems:
        raise CatalogError(problems)
    return Catalog(
        nodes=MappingProxyType(found["nodes"]),
        switches=MappingProxyType(found["switches"]),
        vm_shapes=MappingProxyType(found["vms"]),
    )


# --------------------------------------------------------------------------------------------------
# Reading one file


class _Bad(Exception):
    """A value that does not fit; carries what would have been allowed."""

    def __init__(self, allowed: str):
        super().__init__(allowed)
        self.allowed = allowed


_MISSING = object()


class _Reader(ConfigReader):
    """The config reader, for a catalog file: its problems carry the file's name, and its values
    go through converters (`get`), since a fact of the hardware may be `unknown`."""

    def __init__(self, rel: str, fixtures: Path):
        super().__init__("catalog files hold no secrets")
        self.rel = rel
        self.fixtures = fixtures

    def problem(self, path: str, found: str, allowed: str, hint: str = "") -> None:
        super().problem(f"{self.rel}: {path}" if path else self.rel, found, allowed, hint)

    def load(self, path: Path) -> dict | None:
        try:
            data = yamlio.load(path.read_text(encoding="utf-8"))
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
            self.problem("", f"invalid YAML at {where}: {exc.problem or exc}", "a YAML mapping")
            return None
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            self.problem("", f"unreadable: {exc}", "a UTF-8 YAML file")
            return None
        if not isinstance(data, dict):
            self.problem("", _show(data), "a YAML mapping with the entry's fields")
            return None
        return data

    def fields(self, value: Any, path: str, what: str) -> dict | None:
        """An entry's mapping of fields (its keys are checked by keys())."""
        if isinstance(value, dict):
            return value
        self.problem(path, _show(value), what)
        return None

    def items(self, value: Any, path: str, what: str, *, unknown: bool = False) -> list | None:
        if unknown and value == UNKNOWN:
            return None
        if isinstance(value, list):
            return value
        self.problem(path, _show(value), f"a list of {what}" + (" or unknown" if unknown else ""))
        return None

    def keys(self, m: dict, path: str, required: Iterable[str], optional: Iterable[str] = ()) -> None:
        required = tuple(required)
        known = set(required) | set(optional)
        prefix = f"{path}." if path else ""
        for key in required:
            if key not in m:
                self.problem(f"{prefix}{key}", "nothing (the field is missing)", "a value (or `unknown`)")
        for key in m:
            if key not in known:
                self.problem(f"{prefix}{key}", "an unknown field", ", ".join(sorted(known)),
                             _did_you_mean(str(key), sorted(known)))

    def get(self, m: dict, key: str, path: str, conv: Callable[[Any], Any], *,
            unknown: bool = False, default: Any = _MISSING) -> Any:
        where = f"{path}.{key}" if path else key
        if key not in m:
            if default is not _MISSING:
                return default
            return None  # keys() reports the missing field
        value = m[key]
        if unknown and value == UNKNOWN:
            return None
        try:
            return conv(value)
        except _Bad as bad:
            self.problem(where, _show(value), bad.allowed + (" or unknown" if unknown else ""))
            return None

    def sources(self, value: Any) -> tuple[Source, ...]:
        out = []
        for i, item in enumerate(self.items(value, "sources", "{file, where, gives}") or ()):
            path = f"sources[{i}]"
            m = self.fields(item, path, "a mapping {file, where, gives}")
            if m is None:
                continue
            self.keys(m, path, ("file", "where", "gives"))
            file = self.get(m, "file", path, _text)
            if file is not None and not (self.fixtures / file).is_file():
                self.problem(f"{path}.file", _show(file), "a file under railyard/data/fixtures/",
                             "copy the source there first and name it in its SOURCES.md")
            out.append(Source(file or "", self.get(m, "where", path, _text) or "",
                              self.get(m, "gives", path, _text) or ""))
        if not out:
            self.problem("sources", "no sources", "at least one {file, where, gives}",
                         "every entry cites where its facts come from")
        return tuple(out)

    def assumptions(self, value: Any, sections: Iterable[str]) -> tuple[Assumption, ...]:
        out = []
        sections = set(sections)
        for i, item in enumerate(self.items(value, "assumptions", "{fields, note}") or ()):
            path = f"assumptions[{i}]"
            m = self.fields(item, path, "a mapping {fields, note}")
            if m is None:
                continue
            self.keys(m, path, ("fields", "note"))
            fields = self.get(m, "fields", path, _text_list) or ()
            for f in fields:
                if f.split(".")[0] not in sections:
                    self.problem(f"{path}.fields", _show(f), "a path starting with one of " + ", ".join(sorted(sections)))
            out.append(Assumption(tuple(fields), self.get(m, "note", path, _text) or ""))
        return tuple(out)

    def disks(self, value: Any, path: str) -> tuple[DiskGroup, ...] | None:
        groups = self.items(value, path, "{role, count, size_tb or size_gib}", unknown=True)
        if groups is None:
            return None
        out = []
        for i, item in enumerate(groups):
            p = f"{path}[{i}]"
            m = self.fields(item, p, "a mapping {role, count, size_tb or size_gib}")
            if m is None:
                continue
            self.keys(m, p, ("role", "count"), ("size_tb", "size_gib"))
            if ("size_tb" in m) == ("size_gib" in m):
                self.problem(p, "size_tb and size_gib" if "size_tb" in m else "no size", "exactly one of size_tb, size_gib")
            size = self.get(m, "size_tb", p, _positive, default=None)
            gib = self.get(m, "size_gib", p, _positive, default=None)
            if gib is not None:
                size = round(gib * 2**30 / 1e12, 3)
            role, count = self.get(m, "role", p, _choice(("os", "data", "temp"))), self.get(m, "count", p, _int_min(1))
            if role is not None and count is not None and size is not None:
                out.append(DiskGroup(role, count, float(size)))
        return tuple(out)


# --------------------------------------------------------------------------------------------------
# Node SKUs

_NODE_REQUIRED = ("id", "name", "sources", "cpus", "numa_nodes", "memory_gib", "gpu_interconnect",
                  "gpu_model", "gpus", "nic_models", "nics", "nvme", "pcie")
_NODE_OPTIONAL = ("assumptions", "reproduces", "notes", "nvlink_domain")


def _node(r: _Reader, data: dict, stem: str) -> NodeSku | None:
    r.keys(data, "", _NODE_REQUIRED, _NODE_OPTIONAL)
    sku_id = _entry_id(r, data, stem)
    name = r.get(data, "name", "", _text)
    sources = r.sources(data.get("sources"))
    assumptions = r.assumptions(data.get("assumptions", []), _NODE_REQUIRED + _NODE_OPTIONAL)

    cpus = CpuSpec(None, None, None, None, None, None)
    cm = r.fields(data.get("cpus"), "cpus", "a mapping {model, sockets, cores, threads, base_ghz, boost_ghz}")
    if cm is not None:
        r.keys(cm, "cpus", ("model", "sockets", "cores", "threads", "base_ghz", "boost_ghz"))
        cpus = CpuSpec(
            model=r.get(cm, "model", "cpus", _text, unknown=True),
            sockets=r.get(cm, "sockets", "cpus", _int_min(1), unknown=True),
            cores=r.get(cm, "cores", "cpus", _int_min(1), unknown=True),
            threads=r.get(cm, "threads", "cpus", _int_min(1), unknown=True),
            base_ghz=r.get(cm, "base_ghz", "cpus", _positive, unknown=True),
            boost_ghz=r.get(cm, "boost_ghz", "cpus", _positive, unknown=True),
        )

    numa_nodes: list[NumaNode] = []
    for i, item in enumerate(r.items(data.get("numa_nodes"), "numa_nodes", "{id, cpulist}") or ()):
        p = f"numa_nodes[{i}]"
        m = r.fields(item, p, "a mapping {id, cpulist}")
        if m is None:
            continue
        r.keys(m, p, ("id", "cpulist"))
        nid = r.get(m, "id", p, _int_min(0))
        if nid is not None:
            numa_nodes.append(NumaNode(nid, r.get(m, "cpulist", p, _cpulist, unknown=True)))
    numa_ids = [n.id for n in numa_nodes]
    _unique(r, "numa_nodes", "id", numa_ids)
    if not numa_nodes:
        r.problem("numa_nodes", "no NUMA nodes", "at least one {id, cpulist}")
    threads = cpus.threads
    listed = [c for n in numa_nodes for c in (n.cpus() or [])]
    if len(listed) != len(set(listed)):
        r.problem("numa_nodes", "a CPU in two NUMA nodes", "disjoint cpulists")
    if threads is not None and all(n.cpulist for n in numa_nodes) and numa_nodes and sorted(listed) != list(range(threads)):
        r.problem("numa_nodes", f"cpulists covering {len(listed)} CPUs", f"CPUs 0-{threads - 1} (cpus.threads = {threads})")

    memory = r.get(data, "memory_gib", "", _int_min(1), unknown=True)

    nvlink_class, interconnect = None, None
    gi = r.fields(data.get("gpu_interconnect"), "gpu_interconnect", "a mapping {nvlink_class, description}")
    if gi is not None:
        r.keys(gi, "gpu_interconnect", ("nvlink_class", "description"))
        nvlink_class = r.get(gi, "nvlink_class", "gpu_interconnect", _pattern(r"NV\d+", "NV<links>, e.g. NV18"), unknown=True)
        interconnect = r.get(gi, "description", "gpu_interconnect", _text, unknown=True)

    gm = r.fields(data.get("gpu_model"), "gpu_model", "a mapping {model, memory_gib, pci_vendor, pci_device, pci_class}") or {}
    r.keys(gm, "gpu_model", ("model", "memory_gib", "pci_vendor", "pci_device", "pci_class"), ("pcie_link",))
    gpu_common = dict(
        model=r.get(gm, "model", "gpu_model", _text, unknown=True),
        memory_gib=r.get(gm, "memory_gib", "gpu_model", _int_min(1), unknown=True),
        pci_vendor=r.get(gm, "pci_vendor", "gpu_model", _hex(4), unknown=True),
        pci_device=r.get(gm, "pci_device", "gpu_model", _hex(4), unknown=True),
        pci_class=r.get(gm, "pci_class", "gpu_model", _hex(6), unknown=True),
        pcie_link=r.get(gm, "pcie_link", "gpu_model", _PCIE_LINK, default=None),
    )
    gpus: list[GpuSpec] = []
    for i, item in enumerate(r.items(data.get("gpus"), "gpus", "{index, name, numa, pci_bus_id, parent}") or ()):
        p = f"gpus[{i}]"
        m = r.fields(item, p, "a mapping {index, name, numa, pci_bus_id, parent}")
        if m is None:
            continue
        r.keys(m, p, ("index", "name", "numa", "pci_bus_id", "parent"))
        index, gname = r.get(m, "index", p, _int_min(0)), r.get(m, "name", p, _ident)
        if index is None or gname is None:
            continue
        if gname != f"GPU{index}":
            r.problem(f"{p}.name", _show(gname), f"GPU{index} (nvidia-smi's name for index {index})")
        gpus.append(GpuSpec(
            index=index, name=gname, numa=r.get(m, "numa", p, _int_min(0), unknown=True),
            pci_bus_id=r.get(m, "pci_bus_id", p, _bus_id, unknown=True),
            parent=r.get(m, "parent", p, _ident, unknown=True), **gpu_common,
        ))
    if [g.index for g in gpus] != list(range(len(gpus))):
        r.problem("gpus", "indexes " + ", ".join(str(g.index) for g in gpus), f"0..{len(gpus) - 1} in order")
    if not gpus:
        r.problem("gpus", "no GPUs", "at least one GPU")

    nic_models: dict[str, dict] = {}
    models_m = r.fields(data.get("nic_models"), "nic_models", "a mapping of model id -> {model, link, ...}") or {}
    for mid, item in models_m.items():
        p = f"nic_models.{mid}"
        m = r.fields(item, p, "a mapping {model, link, pci_vendor, pci_device, pci_class, ports, speed_gbps, sriov_total_vfs}")
        if m is None:
            continue
        r.keys(m, p, ("model", "link", "pci_vendor", "pci_device", "pci_class", "ports", "speed_gbps", "sriov_total_vfs"),
               ("pcie_link",))
        nic_models[str(mid)] = dict(
            model=r.get(m, "model", p, _text, unknown=True),
            link=r.get(m, "link", p, _choice(NIC_LINKS), unknown=True),
            pci_vendor=r.get(m, "pci_vendor", p, _hex(4), unknown=True),
            pci_device=r.get(m, "pci_device", p, _hex(4), unknown=True),
            pci_class=r.get(m, "pci_class", p, _hex(6), unknown=True),
            ports=r.get(m, "ports", p, _int_min(1), unknown=True),
            speed_gbps=r.get(m, "speed_gbps", p, _int_min(1), unknown=True),
            sriov_total_vfs=r.get(m, "sriov_total_vfs", p, _int_min(0), unknown=True),
            pcie_link=r.get(m, "pcie_link", p, _PCIE_LINK, default=None),
        )
    nics: list[NicSpec] = []
    nic_keys = ("rdma", "netdev", "role", "nic_model", "port", "numa", "pci_bus_id", "parent")
    for i, item in enumerate(r.items(data.get("nics"), "nics", "{rdma, netdev, role, nic_model, ...}") or ()):
        p = f"nics[{i}]"
        m = r.fields(item, p, "a mapping {" + ", ".join(nic_keys) + "}")
        if m is None:
            continue
        r.keys(m, p, nic_keys, ("osfp", "connectx"))
        rdma = r.get(m, "rdma", p, _pattern(r"[a-z][a-z0-9_]*\d", "an RDMA device name such as mlx5_0"))
        mid = r.get(m, "nic_model", p, _text)
        model = nic_models.get(mid) if mid is not None else None
        if mid is not None and model is None and mid not in models_m:
            r.problem(f"{p}.nic_model", _show(mid), "one of nic_models: " + ", ".join(sorted(nic_models)))
        port = r.get(m, "port", p, _int_min(1), unknown=True)
        if model and model["ports"] is not None and port is not None and port > model["ports"]:
            r.problem(f"{p}.port", _show(port), f"1..{model['ports']} ({mid} has {model['ports']} ports)")
        nic = NicSpec(
            rdma=rdma or f"nics[{i}]", netdev=r.get(m, "netdev", p, _ident, unknown=True),
            role=r.get(m, "role", p, _choice(NIC_ROLES)) or "", nic_model=mid or "", port=port,
            numa=r.get(m, "numa", p, _int_min(0), unknown=True),
            pci_bus_id=r.get(m, "pci_bus_id", p, _bus_id, unknown=True),
            parent=r.get(m, "parent", p, _ident, unknown=True),
            osfp=r.get(m, "osfp", p, _pattern(r"OSFP\d+P\d+", "OSFP<cage>P<port>"), default=None),
            connectx=r.get(m, "connectx", p, _pattern(r"CX\d+", "CX<n>"), default=None),
            **(model or dict.fromkeys(("model", "link", "pci_vendor", "pci_device", "pci_class", "ports",
                                       "speed_gbps", "sriov_total_vfs", "pcie_link"))),
        )
        nics.append(nic)
    _unique(r, "nics", "rdma", [n.rdma for n in nics])
    _unique(r, "nics", "netdev", [n.netdev for n in nics if n.netdev])
    _unique(r, "nics", "pci_bus_id", [n.pci_bus_id for n in nics if n.pci_bus_id] + [g.pci_bus_id for g in gpus if g.pci_bus_id])

    nvme = r.disks(data.get("nvme"), "nvme")
    bridges = _pcie(r, data.get("pcie"))
    reproduces = _reproduces(r, data.get("reproduces"), [n.rdma for n in nics])

    # Cross-references: every device hangs off a bridge of this entry, on a NUMA node it declares,
    # and the NUMA node a device states agrees with the host bridge above it.
    bridge_ids = {b.id for b in bridges}
    placed: tuple[tuple[str, Sequence[GpuSpec | NicSpec]], ...] = (("gpus", gpus), ("nics", nics))
    for what, devices in placed:
        for i, d in enumerate(devices):
            p = f"{what}[{i}]"
            dname = d.name
            if d.numa is not None and d.numa not in numa_ids:
                r.problem(f"{p}.numa", _show(d.numa), "one of numa_nodes: " + ", ".join(map(str, numa_ids)))
            if dname in bridge_ids:
                r.problem(f"{p}", _show(dname), "a name no PCIe bridge uses")
            needs_place = what == "gpus" or getattr(d, "role", "") == "compute"
            if d.parent is None:
                if needs_place:
                    r.problem(f"{p}.parent", "unknown", "a bridge id from pcie",
                              "GPUs and compute NICs need a place in the PCIe tree: pairing depends on it")
            elif d.parent not in bridge_ids:
                r.problem(f"{p}.parent", _show(d.parent), "a bridge or host bridge id from pcie",
                          _did_you_mean(d.parent, sorted(bridge_ids)))
    for b in bridges:
        if b.numa is not None and b.numa not in numa_ids:
            r.problem(f"pcie.host_bridges.{b.id}.numa", _show(b.numa), "one of numa_nodes: " + ", ".join(map(str, numa_ids)))
    if r.problems:
        return None

    sku = NodeSku(
        id=sku_id or stem, name=name or "", sources=sources, assumptions=assumptions, cpus=cpus,
        numa_nodes=tuple(numa_nodes), memory_gib=memory, nvlink_class=nvlink_class,
        gpu_interconnect=interconnect, gpus=tuple(gpus), nics=tuple(nics), nvme=nvme,
        pcie=tuple(bridges), reproduces=reproduces, file=r.rel,
        nvlink_domain=_nvlink_domain(r, data.get("nvlink_domain"), len(gpus)),
    )
    try:
        tree = sku.pcie_tree
    except pcie.PcieError as exc:
        r.problem("pcie", str(exc), "a tree of host bridges, root ports, switches and devices")
        return None
    in_tree: tuple[tuple[str, Sequence[GpuSpec | NicSpec]], ...] = (("gpus", sku.gpus), ("nics", sku.nics))
    for what, devices in in_tree:
        for i, d in enumerate(devices):
            if d.parent is not None and d.numa is not None and tree.numa(d.name) != d.numa:
                r.problem(f"{what}[{i}].numa", _show(d.numa),
                          f"{tree.numa(d.name)} (the NUMA node of host bridge {tree.host_bridge(d.name)})")
    if not sku.compute_nics:
        r.problem("nics", "no NIC with role compute", "at least one compute NIC")
    return sku if not r.problems else None


def _nvlink_domain(r: _Reader, value: Any, tray_gpus: int) -> NvlinkDomainSpec | None:
    if value is None:
        return None
    m = r.fields(value, "nvlink_domain", "a mapping {name, gpus, compute_trays, switch_trays}")
    if m is None:
        return None
    r.keys(m, "nvlink_domain", ("name", "gpus", "compute_trays", "switch_trays"))
    name = r.get(m, "name", "nvlink_domain", _text)
    gpus = r.get(m, "gpus", "nvlink_domain", _int_min(1))
    trays = r.get(m, "compute_trays", "nvlink_domain", _int_min(1))
    switch_trays = r.get(m, "switch_trays", "nvlink_domain", _int_min(1), unknown=True)
    if gpus is None or trays is None or name is None:
        return None
    if gpus != trays * tray_gpus:
        r.problem("nvlink_domain.gpus", str(gpus), f"{trays * tray_gpus} ({trays} compute trays x {tray_gpus} GPUs)",
                  "the entry describes one compute tray; its GPUs times the trays are the domain's")
        return None
    return NvlinkDomainSpec(name, gpus, trays, switch_trays)


def _pcie(r: _Reader, value: Any) -> list[PcieBridge]:
    m = r.fields(value, "pcie", "a mapping {switch_model, host_bridges, bridges}")
    if m is None:
        return []
    r.keys(m, "pcie", ("host_bridges", "bridges"), ("switch_model",))
    sw = {}
    if "switch_model" in m:
        sm = r.fields(m["switch_model"], "pcie.switch_model", "a mapping {model, pci_vendor, pci_device}") or {}
        r.keys(sm, "pcie.switch_model", ("model", "pci_vendor", "pci_device"))
        sw = dict(
            model=r.get(sm, "model", "pcie.switch_model", _text, unknown=True),
            pci_vendor=r.get(sm, "pci_vendor", "pcie.switch_model", _hex(4), unknown=True),
            pci_device=r.get(sm, "pci_device", "pcie.switch_model", _hex(4), unknown=True),
        )
    out: list[PcieBridge] = []
    for i, item in enumerate(r.items(m.get("host_bridges"), "pcie.host_bridges", "{id, numa}") or ()):
        p = f"pcie.host_bridges[{i}]"
        hm = r.fields(item, p, "a mapping {id, numa}")
        if hm is None:
            continue
        r.keys(hm, p, ("id", "numa"), ("pci_bus_id",))
        bid = r.get(hm, "id", p, _ident)
        if bid is not None:
            out.append(PcieBridge(bid, pcie.HOST_BRIDGE, None, numa=r.get(hm, "numa", p, _int_min(0), unknown=True),
                                  pci_bus_id=r.get(hm, "pci_bus_id", p, _text, unknown=True, default=None)))
    for i, item in enumerate(r.items(m.get("bridges"), "pcie.bridges", "{id, kind, parent}") or ()):
        p = f"pcie.bridges[{i}]"
        bm = r.fields(item, p, "a mapping {id, kind, parent}")
        if bm is None:
            continue
        r.keys(bm, p, ("id", "kind", "parent"), ("pci_bus_id", "model", "pci_vendor", "pci_device"))
        bid, kind = r.get(bm, "id", p, _ident), r.get(bm, "kind", p, _choice(BRIDGE_KINDS))
        if bid is None or kind is None:
            continue
        defaults = sw if kind == pcie.SWITCH else {}
        out.append(PcieBridge(
            bid, kind, r.get(bm, "parent", p, _ident),
            pci_bus_id=r.get(bm, "pci_bus_id", p, _bus_id, unknown=True, default=None),
            model=r.get(bm, "model", p, _text, unknown=True, default=defaults.get("model")),
            pci_vendor=r.get(bm, "pci_vendor", p, _hex(4), unknown=True, default=defaults.get("pci_vendor")),
            pci_device=r.get(bm, "pci_device", p, _hex(4), unknown=True, default=defaults.get("pci_device")),
            pci_class="0x060400",  # every PCI-to-PCI bridge has this class by the PCI specification
        ))
    ids = [b.id for b in out]
    _unique(r, "pcie", "id", ids)
    for i, b in enumerate(b for b in out if b.kind != pcie.HOST_BRIDGE):
        if b.parent is not None and b.parent not in ids:
            r.problem(f"pcie.bridges[{i}].parent", _show(b.parent), "a host bridge or bridge id of this entry",
                      _did_you_mean(b.parent, sorted(ids)))
    return out


def _reproduces(r: _Reader, value: Any, nic_names: list[str]) -> Reproduces | None:
    if value is None:
        return None
    m = r.fields(value, "reproduces", "a mapping {file, nic_labels}")
    if m is None:
        return None
    r.keys(m, "reproduces", ("file",), ("nic_labels",))
    file = r.get(m, "file", "reproduces", _text)
    if file is not None and not (r.fixtures / file).is_file():
        r.problem("reproduces.file", _show(file), "a topology file under railyard/data/fixtures/")
    labels = r.fields(m.get("nic_labels", {}), "reproduces.nic_labels", "a mapping matrix label -> NIC rdma name") or {}
    for label, nic in labels.items():
        if nic not in nic_names:
            r.problem(f"reproduces.nic_labels.{label}", _show(nic), "an rdma name from nics")
    return Reproduces(file or "", MappingProxyType({str(k): str(v) for k, v in labels.items()}))


# --------------------------------------------------------------------------------------------------
# Switches and VM shapes


def _switch(r: _Reader, data: dict, stem: str) -> SwitchModel | None:
    r.keys(data, "", ("id", "name", "family", "kind", "sources", "ports", "port_speed_gbps", "speeds", "cages"),
           ("aggregate_tbps", "notes", "assumptions"))
    sid = _entry_id(r, data, stem)
    ports = r.get(data, "ports", "", _int_min(1))
    speeds_m = r.fields(data.get("speeds"), "speeds", "a mapping speed id -> port count, e.g. {ndr: 64}") or {}
    speeds = {}
    for k, v in speeds_m.items():
        n = r.get(speeds_m, k, "speeds", _int_min(1))
        if not re.fullmatch(r"[a-z]+|\d+gbe", str(k)):
            r.problem(f"speeds.{k}", _show(k), "a speed id such as ndr, hdr, 400gbe")
        elif n is not None:
            speeds[str(k)] = n
    cm = r.fields(data.get("cages"), "cages", "a mapping {count, type, ports_per_cage, optic[, lanes]}") or {}
    r.keys(cm, "cages", ("count", "type", "ports_per_cage", "optic"), ("lanes",))
    cages = r.get(cm, "count", "cages", _int_min(1), unknown=True)
    per_cage = r.get(cm, "ports_per_cage", "cages", _int_min(1), unknown=True)
    if ports is not None and cages is not None and per_cage is not None and cages * per_cage != ports:
        r.problem("cages", f"{cages} cages x {per_cage} ports", f"{ports} ports in all (the `ports` field)")
    if ports is not None and speeds and ports not in speeds.values():
        r.problem("speeds", _show(speeds_m), f"the native speed at {ports} ports")
    lanes = r.get(cm, "lanes", "cages", _int_min(1), default=None)
    # SONiC names a port by its first lane, so each speed's ports must split a cage's lanes evenly.
    uneven = sorted(k for k, n in speeds.items() if lanes and cages and (n % cages or lanes % (n // cages)))
    if uneven:
        r.problem("cages.lanes", _show(lanes), f"lanes that the ports of every speed split evenly ({', '.join(uneven)} "
                                               f"do not, at {cages} cages)")
    sw = SwitchModel(
        id=sid or stem, name=r.get(data, "name", "", _text) or "", family=r.get(data, "family", "", _text) or "",
        kind=r.get(data, "kind", "", _choice(SWITCH_KINDS)) or "", ports=ports or 0,
        port_speed_gbps=r.get(data, "port_speed_gbps", "", _int_min(1)) or 0,
        speeds=MappingProxyType(speeds), cages=cages, cage_type=r.get(cm, "type", "cages", _text, unknown=True),
        ports_per_cage=per_cage, optic=r.get(cm, "optic", "cages", _text, unknown=True),
        lanes_per_cage=lanes,
        aggregate_tbps=r.get(data, "aggregate_tbps", "", _positive, default=None),
        notes=r.get(data, "notes", "", _text, default=None), sources=r.sources(data.get("sources")),
        assumptions=r.assumptions(data.get("assumptions", []), ("ports", "port_speed_gbps", "speeds", "cages",
                                                                   "aggregate_tbps", "kind", "family")),
        file=r.rel,
    )
    return None if r.problems else sw


def _vm_shape(r: _Reader, data: dict, stem: str) -> VmShape | None:
    r.keys(data, "", ("id", "name", "provider", "sources", "vcpus", "cores", "cpu_model", "memory_gib", "gpus",
                      "compute_nics", "other_nics", "local_disks", "numa_nodes", "topology"), ("assumptions", "notes"))
    vid = _entry_id(r, data, stem)
    gm = r.fields(data.get("gpus"), "gpus", "a mapping {count, model, memory_gib}") or {}
    r.keys(gm, "gpus", ("count", "model", "memory_gib"))
    nm = r.fields(data.get("compute_nics"), "compute_nics",
                   "a mapping {count, speed_gbps, model, attach, fabric, counts_supported}") or {}
    r.keys(nm, "compute_nics", ("count", "speed_gbps", "model", "attach", "fabric"), ("counts_supported",))
    count = r.get(nm, "count", "compute_nics", _int_min(1))
    supported = r.get(nm, "counts_supported", "compute_nics", _int_list, default=None) or ((count,) if count else ())
    other = None
    if data.get("other_nics") not in (None, UNKNOWN):
        om = r.fields(data.get("other_nics"), "other_nics", "a mapping {count, kind, speed_gbps, note}") or {}
        r.keys(om, "other_nics", ("count", "kind", "speed_gbps"), ("note",))
        other = OtherNics(r.get(om, "count", "other_nics", _int_min(0), unknown=True),
                          r.get(om, "kind", "other_nics", _text, unknown=True),
                          r.get(om, "speed_gbps", "other_nics", _int_min(1), unknown=True),
                          r.get(om, "note", "other_nics", _text, default=None))
    topology = r.get(data, "topology", "", _text, unknown=True)
    if topology is not None and not (r.fixtures / topology).is_file():
        r.problem("topology", _show(topology), "a topology file under railyard/data/fixtures/ or unknown")
    sections = ("vcpus", "cores", "cpu_model", "memory_gib", "gpus", "compute_nics", "other_nics", "local_disks",
                "numa_nodes", "topology")
    shape = VmShape(
        id=vid or stem, name=r.get(data, "name", "", _text) or "", provider=r.get(data, "provider", "", _ident) or "",
        vcpus=r.get(data, "vcpus", "", _int_min(1)) or 0, cores=r.get(data, "cores", "", _int_min(1), unknown=True),
        cpu_model=r.get(data, "cpu_model", "", _text, unknown=True),
        memory_gib=r.get(data, "memory_gib", "", _int_min(1)) or 0,
        gpus=r.get(gm, "count", "gpus", _int_min(1)) or 0, gpu_model=r.get(gm, "model", "gpus", _text, unknown=True),
        gpu_memory_gib=r.get(gm, "memory_gib", "gpus", _int_min(1), unknown=True),
        compute_nics=count or 0, compute_nic_speed_gbps=r.get(nm, "speed_gbps", "compute_nics", _int_min(1), unknown=True),
        compute_nic_model=r.get(nm, "model", "compute_nics", _text, unknown=True),
        compute_nic_attach=r.get(nm, "attach", "compute_nics", _choice(VM_NIC_ATTACH), unknown=True),
        fabric=r.get(nm, "fabric", "compute_nics", _choice(FABRICS)) or "",
        nic_counts_supported=tuple(supported), other_nics=other,
        local_disks=r.disks(data.get("local_disks"), "local_disks"),
        numa_nodes=r.get(data, "numa_nodes", "", _int_min(1), unknown=True), topology=topology,
        sources=r.sources(data.get("sources")),
        assumptions=r.assumptions(data.get("assumptions", []), sections), file=r.rel,
    )
    return None if r.problems else shape


# --------------------------------------------------------------------------------------------------
# Field converters: each returns the value or raises _Bad with what is allowed.


def _entry_id(r: _Reader, data: dict, stem: str) -> str | None:
    entry_id = r.get(data, "id", "", _ident)
    if entry_id is not None and entry_id != stem:
        r.problem("id", _show(entry_id), f"{stem!r} (the file name without .yaml)")
    return entry_id


def _text(v: Any) -> str:
    if isinstance(v, str) and v.strip():
        return v.strip()
    raise _Bad("a non-empty string")


def _ident(v: Any) -> str:
    if isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", v):
        return v
    raise _Bad("a name of letters, digits and _ . : -")


def _pattern(regex: str, allowed: str) -> Callable[[Any], str]:
    def conv(v: Any) -> str:
        if isinstance(v, str) and re.fullmatch(regex, v):
            return v
        raise _Bad(allowed)
    return conv


def _int_min(lo: int) -> Callable[[Any], int]:
    def conv(v: Any) -> int:
        if isinstance(v, int) and not isinstance(v, bool) and v >= lo:
            return v
        raise _Bad(f"an integer >= {lo}")
    return conv


def _positive(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
        return v
    raise _Bad("a positive number")


def _choice(options: Iterable[str]) -> Callable[[Any], str]:
    options = tuple(options)

    def conv(v: Any) -> str:
        if v in options:
            return v
        raise _Bad("one of " + ", ".join(options))
    return conv


def _hex(digits: int) -> Callable[[Any], str]:
    return _pattern(rf"0x[0-9a-f]{{{digits}}}", f'a quoted lower-case hex id like "0x{"0" * digits}"')


_bus_id = _pattern(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", 'a quoted PCI address like "0000:18:00.0"')
_PCIE_LINK = _pattern(r"\d+\.\d GT/s PCIe x\d+", '"<speed> GT/s PCIe x<width>", as "32.0 GT/s PCIe x16"')
_cpulist = _pattern(r"\d+(-\d+)?(,\d+(-\d+)?)*", 'a quoted cpulist like "0-55,112-167"')


def _text_list(v: Any) -> tuple[str, ...]:
    if isinstance(v, list) and v and all(isinstance(x, str) and x for x in v):
        return tuple(v)
    raise _Bad("a non-empty list of field paths")


def _int_list(v: Any) -> tuple[int, ...]:
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        return tuple(v)
    raise _Bad("a non-empty list of positive integers")


def _unique(r: _Reader, path: str, what: str, values: list) -> None:
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        r.problem(path, f"{what} repeated: {', '.join(repeated)}", f"a distinct {what} for each")


def _show(value: Any) -> str:
    """A catalog value as written: data files hold no secrets and their mappings and lists are
    facts worth seeing (the config's _show, spec/show.py, hides secrets and names mappings)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

