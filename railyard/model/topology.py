"""A node's GPU/NIC topology: from `nvidia-smi topo -m`, an NCCL topology XML, sysfs or a catalog SKU.

A Topology holds the GPUs, the NICs, the NUMA node of each, the distance class of every pair the
source gives, and whether the source was complete. NIC NUMA nodes that the source does not state are
inferred from PCIe adjacency: a device that is PIX, PXB, PHB or NODE to a device of known NUMA node
is on that node (only SYS crosses nodes). Which NICs carry compute traffic, when the source does not
say, is inferred the same way: a NIC that shares a PCIe complex with a GPU (PIX, PXB or PHB to one)
is a compute NIC; storage and management adapters sit on host bridges of their own. The GPU -> NIC
pairing comes from railyard.model.pairing, the one rule.

Stdlib only (with pairing.py, pcie.py and sysfs_discovery.py): hosts run this very file as Ansible
module_utils, so /etc/railyard/affinity.json and `railyard topology import --json` share one schema.

Excerpts (lines starting `# [EXCERPT` or `<!--`, truncated rows, missing header) give a topology with
`complete = False` and notes saying what is missing; anything that is neither format (an `lspci`
capture, a netdev listing) is refused with a TopologyError that says what the file looks like.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

try:
    from railyard.model import pairing as pairing_rule
    from railyard.model import pcie
    from railyard.model import sysfs_discovery
except ImportError:  # shipped to a host as Ansible module_utils (the gpu_nic_affinity role)
    from ansible.module_utils import railyard_pairing as pairing_rule  # type: ignore[no-redef]
    from ansible.module_utils import railyard_pcie as pcie  # type: ignore[no-redef]
    from ansible.module_utils import railyard_sysfs_discovery as sysfs_discovery  # type: ignore[no-redef]

NEAR_CLASSES = frozenset({"PIX", "PXB", "PHB"})
SAME_NUMA_CLASSES = frozenset({"PIX", "PXB", "PHB", "NODE"})


class TopologyError(ValueError):
    """A file that is not a topology Railyard can read; the message is one line for a person."""


@dataclass(frozen=True)
class TopoGpu:
    name: str  # as the source gives it: GPU0, or a PCI bus id in NCCL XML
    index: int
    numa: int | None
    numa_inferred: bool = False
    pci_bus_id: str | None = None
    cpu_affinity: str | None = None


@dataclass(frozen=True)
class TopoNic:
    name: str  # NIC-legend name (mlx5_3), else the matrix label, else the PCI bus id
    index: int
    label: str  # the matrix column label (NIC3), or the bus id in XML
    numa: int | None
    numa_inferred: bool = False
    compute: bool = True
    compute_inferred: bool = True
    pci_bus_id: str | None = None


@dataclass(frozen=True)
class Topology:
    source: str
    format: str  # nvidia-smi | nccl-xml | sysfs | catalog
    complete: bool
    gpus: tuple[TopoGpu, ...]
    nics: tuple[TopoNic, ...]
    classes: Mapping[tuple[str, str], str] = field(hash=False)  # both orders of every known pair
    notes: tuple[str, ...] = ()

    # --- queries --------------------------------------------------------------------------------

    def distance(self, a: str, b: str) -> str | None:
        """The class between two devices by name, or None when the source does not give it."""
        return self.classes.get((a, b))

    @property
    def compute_nics(self) -> tuple[TopoNic, ...]:
        return tuple(n for n in self.nics if n.compute)

    def pairing(self) -> dict[str, str]:
        """GPU name -> compute NIC name by the one rule. A class the source does not give counts as
        SYS: an incomplete topology gives a pairing only as good as what it shows."""
        return pairing_rule.pair(
            [pairing_rule.Device(g.name, g.numa, g.index) for g in self.gpus],
            [pairing_rule.Device(n.name, n.numa, n.index) for n in self.compute_nics],
            lambda g, n: self.distance(g, n) or "SYS",
        )

    def to_json(self) -> dict[str, Any]:
        pairs = self.pairing()
        names = [g.name for g in self.gpus] + [n.name for n in self.nics]
        return {
            "complete": self.complete,
            "source": self.source,
            "format": self.format,
            "gpus": [
                {"name": g.name, "index": g.index, "numa": g.numa, "numa_inferred": g.numa_inferred,
                 "nic": pairs.get(g.name), "nic_class": self.distance(g.name, pairs[g.name]) if g.name in pairs else None,
                 "pci_bus_id": g.pci_bus_id, "cpu_affinity": g.cpu_affinity}
                for g in self.gpus
            ],
            "nics": [
                {"name": n.name, "index": n.index, "label": n.label, "numa": n.numa, "numa_inferred": n.numa_inferred,
                 "compute": n.compute, "compute_inferred": n.compute_inferred, "pci_bus_id": n.pci_bus_id,
                 "gpus": [g for g, nic in pairs.items() if nic == n.name]}
                for n in self.nics
            ],
            "distances": {a: {b: self.distance(a, b) for b in names if self.distance(a, b)} for a in names},
            "notes": list(self.notes),
        }

    # --- sources --------------------------------------------------------------------------------

    @classmethod
    def from_sku(cls, sku: Any) -> "Topology":
        """The topology a catalog SKU (railyard.model.catalog.NodeSku) describes."""
        gpus = [_Dev(g.name, "gpu", g.index, g.name, g.numa, pci_bus_id=g.pci_bus_id) for g in sku.gpus]
        nics = [_Dev(n.rdma, "nic", i, n.rdma, n.numa, pci_bus_id=n.pci_bus_id, compute=n.role == "compute")
                for i, n in enumerate(sku.nics)]
        classes: dict[tuple[str, str], str] = {}
        devices = gpus + nics
        for a in devices:
            for b in devices:
                if a.name == b.name:
                    continue
                if a.kind == b.kind == "gpu" and sku.nvlink_class:
                    cls_ = sku.nvlink_class
                else:
                    cls_ = sku.distance(a.name, b.name)
                if cls_ is not None:
                    classes[(a.name, b.name)] = cls_
        notes = []
        unplaced = [d.name for d in devices if d.name not in sku.pcie_tree]
        if unplaced:
            notes.append(f"{sku.id} does not place {', '.join(unplaced)} in its PCIe tree")
        return _build(f"catalog:{sku.id}", "catalog", not unplaced, gpus, nics, classes, notes)

    @classmethod
    def from_sysfs(cls, sysfs_root: str | Path = "/sys", *, compute_nics: Iterable[str] | None = None,
                   nvlink_class: str | None = None) -> "Topology":
        """The topology a sysfs tree shows (a host's /sys, or a lab node's hardware tree).

        compute_nics: names of the NICs that carry compute traffic, when the caller knows them (the
                      plan does); otherwise inferred from PCIe adjacency like any other source.
        nvlink_class: the class between two GPUs (NV18) when they are joined by NVLink, which PCI
                      sysfs does not show; without it GPU pairs get their PCIe class.
        """
        found = sysfs_discovery.discover(str(sysfs_root))
        wanted = None if compute_nics is None else set(compute_nics)
        gpus = [_Dev(g.name, "gpu", g.index, g.name, g.numa, pci_bus_id=g.bdf) for g in found.gpus]
        nics = [_Dev(n.name, "nic", n.index, n.name, n.numa, pci_bus_id=n.bdf,
                     compute=None if wanted is None else n.name in wanted) for n in found.nics]
        classes = found.classes()
        if nvlink_class:
            for a in found.gpus:
                for b in found.gpus:
                    if a.name != b.name:
                        classes[(a.name, b.name)] = nvlink_class
        notes = list(found.notes)
        if wanted is not None:
            missing = sorted(wanted - {n.name for n in found.nics})
            if missing:
                notes.append(f"compute NICs not found in {sysfs_root}: {', '.join(missing)}")
        return _build(f"sysfs:{sysfs_root}", "sysfs", not found.notes, gpus, nics, classes, notes)


def parse_topology_file(path: str | Path) -> Topology:
    """Read an `nvidia-smi topo -m` capture (.tsv or .txt) or an NCCL topology XML."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise TopologyError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TopologyError(f"{p}: not a text file") from None
    return parse_topology_text(text, source=str(p))


def parse_topology_text(text: str, source: str = "<text>") -> Topology:
    kind = _sniff(text)
    if kind == "xml":
        return _parse_xml(text, source)
    if kind == "matrix":
        return _parse_matrix(text, source)
    raise TopologyError(f"{source}: {kind}")


# --------------------------------------------------------------------------------------------------
# Recognising the format

_CELL = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC")
_LSPCI_TREE = re.compile(r"^[\s|+\\`-]*-?\[[0-9a-f]{4}:[0-9a-f]{2}\]", re.M)
_LSPCI_LINE = re.compile(r"^[0-9a-f]{2,4}:[0-9a-f]{2}[:.][0-9a-f]{1,2}(\.\d)? [A-Za-z ]+:", re.M)


def _sniff(text: str) -> str:
    if not text.strip():
        return "the file is empty; expected `nvidia-smi topo -m` output or an NCCL topology XML"
    if _LSPCI_TREE.search(text) or _LSPCI_LINE.search(text) or re.search(r"^\$.*\blspci\b", text, re.M):
        return ("this is `lspci` output, which does not give PCIe distance classes; capture "
                "`nvidia-smi topo -m` or an NCCL topology dump (NCCL_TOPO_DUMP_FILE) instead")
    # Excerpt markers (`# [EXCERPT`, `<!--`) can open either format, so they do not decide it.
    meaningful = [ln.strip() for ln in text.splitlines()
                  if ln.strip() and not ln.lstrip().startswith(("#", "<!--"))]
    if not meaningful or meaningful[0].startswith("<"):
        if re.search(r"<(system|cpu|pci|gpu|nic|net)\b", text):
            return "xml"
        if meaningful:
            return "an XML file without NCCL topology elements (<system>, <cpu>, <pci>)"
        return "nothing but comments; expected `nvidia-smi topo -m` output or an NCCL topology XML"
    for ln in meaningful:
        tokens = ln.split()
        if re.fullmatch(r"(GPU|NIC)\d+", tokens[0]) and len(tokens) > 1 and (
                _CELL.fullmatch(tokens[1]) or re.fullmatch(r"(GPU|NIC)\d+", tokens[1])):
            return "matrix"
    return ("not an `nvidia-smi topo -m` matrix (no GPU<n> row or header) nor an NCCL topology XML")


# --------------------------------------------------------------------------------------------------
# nvidia-smi topo -m

_EXTRA_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def _parse_matrix(text: str, source: str) -> Topology:
    notes: list[str] = []
    excerpt = False
    header: list[str] | None = None
    extras: list[str] = []
    rows: list[tuple[str, list[str], list[str], bool]] = []  # label, cells, extra fields, truncated
    legend: dict[str, str] = {}
    section = "matrix"
    for raw in text.splitlines():
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        if stripped.startswith("# [EXCERPT") or stripped.startswith("<!--"):
            excerpt = True
            notes.append(stripped.lstrip("#<!- ").rstrip(">- ").strip())
            continue
        if not stripped or stripped.startswith("#") or stripped.startswith("$"):
            continue
        if stripped == "Legend:":
            section = "legend"
            continue
        if stripped == "NIC Legend:":
            section = "nic-legend"
            continue
        if section == "nic-legend":
            m = re.fullmatch(r"(\S+)\s*:\s*(\S+)", stripped)
            if m:
                legend[m.group(1)] = m.group(2)
            continue
        if section == "legend":
            continue
        tokens = line.split("\t") if "\t" in line else line.split()
        tokens = [t.strip() for t in tokens]
        first = next((t for t in tokens if t), "")
        rest = tokens[tokens.index(first) + 1:] if first else []
        rest_cells = [t for t in rest if t]
        if rest_cells and _CELL.fullmatch(rest_cells[0]):
            rows.append(_matrix_row(first, rest))
        elif header is None and re.fullmatch(r"GPU\d+", first):
            header, extras = _matrix_header(line)
        else:
            notes.append(f"skipped a line that is not part of the matrix: {stripped[:60]!r}")
    if not rows:
        raise TopologyError(f"{source}: an nvidia-smi matrix header without any rows")

    if header is None:
        header = _infer_header(rows, source)
        extras = list(_EXTRA_COLUMNS)  # what nvidia-smi prints after the matrix, in this order
        notes.append("header not in the file: columns inferred from the X diagonal as GPU0.., NIC0..")
        excerpt = True
    n = len(header)
    col = {label: i for i, label in enumerate(header)}
    gpu_labels = [h for h in header if re.fullmatch(r"GPU\d+", h)]
    nic_labels = [h for h in header if h not in gpu_labels]

    classes: dict[tuple[str, str], str] = {}
    seen_rows: set[str] = set()
    gpu_extra: dict[str, dict[str, str]] = {}
    for label, cells, extra, truncated in rows:
        if label not in col:
            raise TopologyError(f"{source}: row {label} has no column in the header ({', '.join(header)})")
        if label in seen_rows:
            raise TopologyError(f"{source}: row {label} appears twice")
        seen_rows.add(label)
        if len(cells) > n:
            raise TopologyError(f"{source}: row {label} has {len(cells)} cells for {n} columns")
        if col[label] < len(cells) and cells[col[label]] != "X":
            raise TopologyError(f"{source}: row {label} does not have X in its own column; header and rows disagree")
        if truncated or len(cells) < n:
            excerpt = True
            notes.append(f"row {label} is truncated ({len(cells)} of {n} cells)")
        for i, cell in enumerate(cells):
            other = header[i]
            if other == label:
                continue
            cell = "SYS" if cell == "SOC" else cell  # SOC is the older nvidia-smi name of SYS
            both_gpus = label in gpu_labels and other in gpu_labels
            if cell not in pcie.CLASSES and not (both_gpus and cell.startswith("NV")):
                raise TopologyError(f"{source}: {label}-{other} is {cell!r}; only two GPUs can be NV#, "
                                    f"and X belongs on the diagonal")
            prior = classes.get((other, label))
            if prior is not None and prior != cell:
                raise TopologyError(f"{source}: {label}-{other} is {cell} but {other}-{label} is {prior}")
            classes[(label, other)] = classes[(other, label)] = cell
        if label in gpu_labels:
            gpu_extra[label] = dict(zip(extras, [e for e in extra if e]))
    missing = [h for h in header if h not in seen_rows]
    if missing:
        excerpt = True
        notes.append(f"rows not in the file: {', '.join(missing)}")
    if nic_labels and not legend and any(re.fullmatch(r"NIC\d+", h) for h in nic_labels):
        notes.append("no NIC Legend: NICs are named by their matrix label")

    gpus = []
    for label in gpu_labels:
        info = gpu_extra.get(label, {})
        numa_text = info.get("NUMA Affinity")
        numa = int(numa_text) if numa_text and numa_text.isdigit() else None
        if label in gpu_extra and "NUMA Affinity" in extras and numa is None:
            notes.append(f"{label}: NUMA affinity {numa_text!r} is not a single node" if numa_text
                         else f"{label}: no NUMA affinity in its row")
        cpu = info.get("CPU Affinity")
        gpus.append(_Dev(label, "gpu", int(label[3:]), label, numa, cpu_affinity=cpu if cpu not in (None, "N/A") else None))
    nics = [_Dev(legend.get(label, label), "nic", i, label, None) for i, label in enumerate(nic_labels)]
    rename = {d.label: d.name for d in gpus + nics}
    classes = {(rename[a], rename[b]): c for (a, b), c in classes.items()}
    return _build(source, "nvidia-smi", not excerpt, gpus, nics, classes, notes)


def _matrix_row(label: str, rest: list[str]) -> tuple[str, list[str], list[str], bool]:
    cells: list[str] = []
    i = 0
    while i < len(rest) and _CELL.fullmatch(rest[i]):
        cells.append(rest[i])
        i += 1
    # A tab-separated row ends its cells at the first empty or non-class field; what follows are
    # the affinity fields (CPU list, NUMA node, GPU NUMA id).
    extra = rest[i:]
    truncated = bool(extra) and not extra[0] == "" and not re.fullmatch(r"[\d,\-]+|N/A", extra[0])
    return label, cells, extra, truncated


def _matrix_header(line: str) -> tuple[list[str], list[str]]:
    cut = len(line)
    found = []
    for name in _EXTRA_COLUMNS:
        at = line.find(name)
        if at >= 0:
            cut = min(cut, at)
            found.append((at, name))
    return line[:cut].split(), [name for _, name in sorted(found)]


def _infer_header(rows: list[tuple[str, list[str], list[str], bool]], source: str) -> list[str]:
    """Columns are GPU0..GPU<g-1>, NIC0..NIC<k-1> in nvidia-smi; the X of a row marks its column."""
    n = max(len(cells) for _, cells, _, _ in rows)
    gpus = None
    for label, cells, _, _ in rows:
        if "X" not in cells:
            continue
        at = cells.index("X")
        m = re.fullmatch(r"(GPU|NIC)(\d+)", label)
        if not m:
            raise TopologyError(f"{source}: no header, and row {label} is not GPU<n> or NIC<n>")
        if m.group(1) == "NIC":
            gpus = at - int(m.group(2))
            break
        if at != int(m.group(2)):
            raise TopologyError(f"{source}: no header, and row {label} has its X in column {at}")
    if gpus is None:
        nv = [sum(1 for c in cells if c.startswith("NV")) for label, cells, _, _ in rows if label.startswith("GPU")]
        if not nv or max(nv) == 0:
            raise TopologyError(f"{source}: no header and no NIC row: cannot tell GPU columns from NIC columns")
        gpus = max(nv) + 1
    return [f"GPU{i}" for i in range(gpus)] + [f"NIC{j}" for j in range(n - gpus)]


# --------------------------------------------------------------------------------------------------
# NCCL topology XML (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE)

_TAG = re.compile(r"<(/?)([A-Za-z_][\w.-]*)((?:\s+[\w.-]+\s*=\s*\"[^\"]*\")*)\s*(/?)>")
_ATTR = re.compile(r"([\w.-]+)\s*=\s*\"([^\"]*)\"")


@dataclass
class _XmlNode:
    tag: str
    attrs: dict[str, str]
    parent: "_XmlNode | None"
    children: list["_XmlNode"] = field(default_factory=list)


def _parse_xml(text: str, source: str) -> Topology:
    notes: list[str] = []
    excerpt = False
    for m in re.finditer(r"<!--(.*?)-->", text, re.S):
        # A comment marks an excerpt when it says so; a file's own header (Railyard writes one
        # saying it manages the file) does not make it partial.
        if re.search(r"excerpt|chunk|truncated|not captured", m.group(1), re.I):
            excerpt = True
            notes.append(" ".join(m.group(1).split()))
    body = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    body = re.sub(r"<\?.*?\?>", "", body, flags=re.S)
    roots: list[_XmlNode] = []
    stack: list[_XmlNode] = []
    pos = 0
    for m in _TAG.finditer(body):
        between = body[pos:m.start()]
        pos = m.end()
        if "<" in between:
            excerpt = True  # a tag cut off mid-attribute
            notes.append("a truncated element was skipped")
        closing, tag, attrs, selfclose = m.group(1), m.group(2), m.group(3), m.group(4)
        if closing:
            if stack and stack[-1].tag == tag:
                stack.pop()
            else:
                excerpt = True  # a closing tag whose opening is outside the excerpt
            continue
        node = _XmlNode(tag, dict(_ATTR.findall(attrs)), stack[-1] if stack else None)
        (stack[-1].children if stack else roots).append(node)
        if not selfclose:
            stack.append(node)
    if "<" in body[pos:]:
        excerpt = True
        notes.append("the file ends inside an element")
    if stack:
        excerpt = True
        notes.append(f"{len(stack)} element(s) not closed")
    if not (len(roots) == 1 and roots[0].tag == "system"):
        excerpt = True
        notes.append("no single <system> root: a fragment of a topology")

    # One PCIe tree: a <cpu> is a host bridge on its NUMA node; a <pci> of class 0x0604xx is a
    # bridge; a <pci> of class 0x03xxxx is a GPU and 0x02xxxx a NIC. Elements whose <cpu> is outside
    # the excerpt hang off a placeholder root whose NUMA node and ancestry are unknown.
    tree_nodes: list[pcie.PcieNode] = []
    placeholders: set[str] = set()
    gpus: list[_Dev] = []
    nics: list[_Dev] = []
    nic_pci: dict[str, str] = {}
    counter = {"cpu": 0, "root": 0}

    def visit(node: _XmlNode, parent_id: str | None, numa: int | None) -> None:
        if node.tag == "cpu":
            cid = f"cpu{counter['cpu']}"
            counter["cpu"] += 1
            numa_text = node.attrs.get("numaid", "")
            cpu_numa = int(numa_text) if numa_text.isdigit() else None
            tree_nodes.append(pcie.PcieNode(cid, pcie.HOST_BRIDGE, numa=cpu_numa))
            for child in node.children:
                visit(child, cid, cpu_numa)
            return
        if node.tag != "pci":
            for child in node.children:
                visit(child, parent_id, numa)
            return
        bus = node.attrs.get("busid")
        if not bus:
            notes.append("a <pci> element without busid was skipped")
            return
        if parent_id is None:
            parent_id = f"?root{counter['root']}"
            counter["root"] += 1
            placeholders.add(parent_id)
            tree_nodes.append(pcie.PcieNode(parent_id, pcie.HOST_BRIDGE))
        klass = node.attrs.get("class", "")
        # A <gpu> or <nic> child says what the device is when the class is not given (NCCL's own
        # files always have one; a file written from a tree that lacks it may not).
        has_gpu = any(c.tag == "gpu" for c in node.children)
        has_nic = any(c.tag == "nic" for c in node.children)
        if klass.startswith("0x0604") and not (has_gpu or has_nic):
            tree_nodes.append(pcie.PcieNode(bus, pcie.SWITCH, parent_id))
            for child in node.children:
                visit(child, bus, numa)
            return
        tree_nodes.append(pcie.PcieNode(bus, pcie.ENDPOINT, parent_id))
        if klass.startswith("0x03") or has_gpu:
            gpu_el = next((c for c in node.children if c.tag == "gpu"), None)
            dev = gpu_el.attrs.get("dev") if gpu_el is not None else None
            index = int(dev) if dev and dev.isdigit() else len(gpus)
            gpus.append(_Dev(bus, "gpu", index, bus, numa, pci_bus_id=bus))
        elif klass.startswith("0x02") or has_nic:
            nets = [c for nic in node.children if nic.tag == "nic" for c in nic.children if c.tag == "net"]
            for net in nets or [None]:
                name = net.attrs.get("name") if net is not None else None
                nics.append(_Dev(name or bus, "nic", len(nics), bus, numa, pci_bus_id=bus))
                nic_pci[name or bus] = bus

    for root in roots:
        visit(root, None, None)
    if not gpus and not nics:
        raise TopologyError(f"{source}: an NCCL topology XML without any GPU or NIC <pci> element")
    try:
        tree = pcie.PcieTree(tree_nodes)
    except pcie.PcieError as exc:
        raise TopologyError(f"{source}: {exc}") from None

    def where(dev: _Dev) -> str:
        return nic_pci.get(dev.name, dev.pci_bus_id or dev.name) if dev.kind == "nic" else dev.pci_bus_id or dev.name

    classes: dict[tuple[str, str], str] = {}
    devices = gpus + nics
    for a in devices:
        for b in devices:
            if a.name == b.name:
                continue
            pa, pb = where(a), where(b)
            if pa == pb:
                cls_ = "PIX"  # two ports (functions) of one adapter
            else:
                cls_ = _xml_class(tree, placeholders, pa, pb)
            if cls_ is not None:
                classes[(a.name, b.name)] = cls_
    return _build(source, "nccl-xml", not excerpt, gpus, nics, classes, notes)


def _xml_class(tree: pcie.PcieTree, placeholders: set[str], a: str, b: str) -> str | None:
    ha, hb = tree.host_bridge(a), tree.host_bridge(b)
    if ha in placeholders or hb in placeholders:
        if ha != hb:
            return None
        cls_ = pcie.distance_class(tree, a, b)
        # Meeting at the placeholder only says the common ancestor is outside the excerpt.
        return None if cls_ == "PHB" else cls_
    return pcie.distance_class(tree, a, b)


# --------------------------------------------------------------------------------------------------
# Building: NUMA inference and the compute NICs


@dataclass
class _Dev:
    name: str
    kind: str
    index: int
    label: str
    numa: int | None
    pci_bus_id: str | None = None
    cpu_affinity: str | None = None
    compute: bool | None = None


def _build(source: str, fmt: str, complete: bool, gpus: list[_Dev], nics: list[_Dev],
           classes: Mapping[tuple[str, str], str], notes: Iterable[str]) -> Topology:
    notes = list(dict.fromkeys(notes))
    devices = gpus + nics
    names = [d.name for d in devices]
    repeated = sorted({x for x in names if names.count(x) > 1})
    if repeated:
        raise TopologyError(f"{source}: device names repeated: {', '.join(repeated)}")
    stated = {d.name for d in devices if d.numa is not None}
    numa = {d.name: d.numa for d in devices}
    # Spread known NUMA nodes over same-node classes until nothing changes; the nearest known
    # neighbour wins, then the lowest NUMA id, so the result does not depend on device order.
    order = {c: r for r, c in enumerate(("PIX", "PXB", "PHB", "NODE"))}
    changed = True
    while changed:
        changed = False
        for d in devices:
            if numa[d.name] is not None:
                continue
            near = [(order[classes[(d.name, o.name)]], numa[o.name]) for o in devices
                    if o.name != d.name and numa[o.name] is not None
                    and classes.get((d.name, o.name)) in SAME_NUMA_CLASSES]
            if near:
                numa[d.name] = min(near)[1]
                changed = True
    for d in devices:
        conflicts = {numa[o.name] for o in devices if o.name != d.name and o.name in stated
                     and classes.get((d.name, o.name)) in SAME_NUMA_CLASSES and numa[o.name] != numa[d.name]}
        if d.name in stated and conflicts:
            notes.append(f"{d.name} is on NUMA {numa[d.name]} but has a same-node class to NUMA {sorted(conflicts)}")

    gpu_names = [g.name for g in gpus]
    inferred_compute = {n.name: any(classes.get((n.name, g)) in NEAR_CLASSES for g in gpu_names) for n in nics}
    all_known = all((n.name, g) in classes for n in nics for g in gpu_names)
    if nics and gpus and all_known and not any(inferred_compute.values()) and all(n.compute is None for n in nics):
        # No NIC shares a PCIe complex with a GPU (a workstation, a VM without topology): all may carry compute.
        inferred_compute = dict.fromkeys(inferred_compute, True)
        notes.append("no NIC shares a PCIe switch or host bridge with a GPU: every NIC is taken as a compute NIC")
    return Topology(
        source=source, format=fmt, complete=complete,
        gpus=tuple(TopoGpu(g.name, g.index, numa[g.name], g.name not in stated and numa[g.name] is not None,
                           g.pci_bus_id, g.cpu_affinity) for g in gpus),
        nics=tuple(TopoNic(n.name, n.index, n.label, numa[n.name], n.name not in stated and numa[n.name] is not None,
                           compute=n.compute if n.compute is not None else inferred_compute[n.name],
                           compute_inferred=n.compute is None, pci_bus_id=n.pci_bus_id) for n in nics),
        classes=MappingProxyType(dict(classes)),
        notes=tuple(notes),
    )
