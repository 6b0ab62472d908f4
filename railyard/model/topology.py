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

An `nvidia-smi topo -m` (or `-mp`) capture is read by its header row and its tab structure, as
people paste it: tab-separated, copied from a terminal (tabs turned into spaces on 8-column stops),
re-aligned by hand, with the terminal's underline codes around the header, with a retyped or
damaged header (checked against, and if need be rebuilt from, the X diagonal of the rows), with
NICs named by a NIC Legend or by the column headers of older drivers. Class cells that lost the
tab between them (PXBNODE) are split and checked across the diagonal, the matrix being symmetric;
a row that lost a cell, or whose affinity cells cannot be told apart, is refused naming the row,
never read from shifted columns. Empty affinity cells between values are told apart by the tabs
nvidia-smi prints (NUMA Affinity ends in two before GPU NUMA ID), in tabs or in a terminal's
spaces. A GPU's NUMA node is the NUMA Affinity cell its row shows; an empty or N/A cell (as
containers, VMs and older drivers print them) is unknown, not inferred; N/A or empty CPU Affinity
is no CPU list.

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

_CLASS = r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC"
_CELL = re.compile(_CLASS)
# Class cells that lost the tab between them (PXBNODE, SYSSYS) read back one way only: every class
# starts with a letter and NV# takes all its digits. What follows the run is the next field.
_CELLS_THEN = re.compile(rf"((?:{_CLASS})+)(.*)")
# nvidia-smi underlines its header row on a terminal; a paste keeps the codes, often without the ESC.
_ANSI = re.compile(r"\x1b?\[[0-9;]*m")
_LSPCI_TREE = re.compile(r"^[\s|+\\`-]*-?\[[0-9a-f]{4}:[0-9a-f]{2}\]", re.M)
_LSPCI_LINE = re.compile(r"^[0-9a-f]{2,4}:[0-9a-f]{2}[:.][0-9a-f]{1,2}(\.\d)? [A-Za-z ]+:", re.M)


def _sniff(text: str) -> str:
    if not text.strip():
        return "the file is empty; expected `nvidia-smi topo -m` output or an NCCL topology XML"
    if _LSPCI_TREE.search(text) or _LSPCI_LINE.search(text) or re.search(r"^\$.*\blspci\b", text, re.M):
        return ("this is `lspci` output, which does not give PCIe distance classes; capture "
                "`nvidia-smi topo -m` or an NCCL topology dump (NCCL_TOPO_DUMP_FILE) instead")
    # Excerpt markers (`# [EXCERPT`, `<!--`) can open either format, so they do not decide it.
    meaningful = [_ANSI.sub("", ln).strip() for ln in text.splitlines()
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
                _CELL.match(tokens[1]) or re.fullmatch(r"(GPU|NIC)\d+", tokens[1])):
            return "matrix"
    return ("not an `nvidia-smi topo -m` matrix (no GPU<n> row or header) nor an NCCL topology XML")


# --------------------------------------------------------------------------------------------------
# nvidia-smi topo -m (and -mp, which prints PCIe classes between GPUs instead of NV#)

_EXTRA_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
# The names as printed, and as people retype them in a hand-aligned table ("NUMA", "GPU NUMA").
_EXTRA_NAME = re.compile(r"CPU\s*Affinity|GPU\s*NUMA(?:\s*ID)?|NUMA(?:\s*Affinity)?")
_LEGEND_ENTRY = re.compile(r"(NIC\d+)\s*:\s*(\S+)")
_RULE = re.compile(r"[-=+|:\s]+")  # a ruler line drawn under a retyped header


@dataclass
class _Header:
    labels: list[str]
    extras: list[str]  # CPU Affinity, NUMA Affinity, GPU NUMA ID: those the header names, in its order
    extra_cols: list[int]  # where each of them starts, with tabs expanded to 8-column stops
    unread: list[str]


@dataclass
class _Row:
    label: str
    cells: list[str]
    extras: list[tuple[int, str]]  # (column, text) of what follows the cells; "" is an empty field
    exact: bool  # empty fields are real: the line kept its tabs, or its 8-column tab stops
    ended: bool  # the line ends in a tab, so nvidia-smi printed it to its end
    glued: list[str]  # tokens that were split into cells


def _parse_matrix(text: str, source: str) -> Topology:
    notes: list[str] = []
    excerpt = False
    header_text: str | None = None
    rows: list[_Row] = []
    legend: dict[str, str] = {}
    section = "matrix"
    for raw in text.splitlines():
        line = _ANSI.sub("", raw.rstrip("\r\n"))
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
            # Names as they are (mlx5_bond_0, ibp24s0, rocep25s0f0); a pasted legend may put two on a line.
            legend.update(_LEGEND_ENTRY.findall(stripped))
            continue
        if section == "legend" or _RULE.fullmatch(stripped):
            continue
        row = _matrix_row(line)
        if row is not None:
            rows.append(row)
        elif header_text is None and not rows and re.match(r"GPU\d+", stripped):
            header_text = line
        elif header_text is not None and not rows and re.fullmatch(r"[A-Za-z][\w.-]*(\s+[A-Za-z][\w.-]*)*", stripped):
            header_text += "\t" + line  # a header wrapped onto a second line when it was pasted
        else:
            notes.append(f"skipped a line that is not part of the matrix: {stripped[:60]!r}")
    if not rows:
        raise TopologyError(f"{source}: an nvidia-smi matrix header without any rows")

    header = _matrix_header(header_text) if header_text is not None else None
    if header is None:
        extras = list(_EXTRA_COLUMNS)  # what nvidia-smi prints after the matrix, in this order
        notes.append("header not in the file: columns inferred from the X diagonal as GPU0.., NIC0..")
        excerpt = True
    else:
        extras = header.extras
        if header.unread:
            notes.append(f"header words not read as columns: {' '.join(header.unread)}")
    columns = _matrix_columns(header, rows, source, notes)
    n = len(columns)
    col = {label: i for i, label in enumerate(columns)}
    gpu_labels = [h for h in columns if re.fullmatch(r"GPU\d+", h)]
    nic_labels = [h for h in columns if h not in gpu_labels]

    grid: dict[tuple[str, str], str] = {}
    repaired: dict[str, str] = {}  # row -> why its cells may be the damaged side of a mismatch
    affinity: dict[str, dict[str, str]] = {}
    seen_rows: set[str] = set()
    for row in rows:
        label, cells = row.label, row.cells
        if label not in col:
            raise TopologyError(f"{source}: row {label} has no column in the header ({', '.join(columns)})")
        if label in seen_rows:
            raise TopologyError(f"{source}: row {label} appears twice")
        seen_rows.add(label)
        if len(cells) > n:
            raise TopologyError(f"{source}: row {label} has {len(cells)} cells for {n} columns")
        if len(cells) < n:
            values = [t for _, t in row.extras if t]
            cut_in_a_cell = len(values) == 1 and row.extras[-1][1] == values[0] and _cut_cell(values[0])
            if row.ended or (values and not cut_in_a_cell):
                goes_on = f"goes on with {values[0]!r}" if values else "was printed to its end"
                raise TopologyError(
                    f"{source}: row {label} has {len(cells)} cells for {n} columns and {goes_on}: a cell was "
                    "lost, so the cells after it cannot be placed; copy the matrix again with its tabs "
                    "(`nvidia-smi topo -m > topo.tsv`)")
            excerpt = True
            notes.append(f"row {label} is truncated ({len(cells)} of {n} cells)")
            repaired[label] = f"row {label} is cut short"
        if col[label] < len(cells) and cells[col[label]] != "X":
            raise TopologyError(f"{source}: row {label} does not have X in its own column; header and rows disagree")
        if row.glued:
            repaired[label] = f"row {label} was read from {', '.join(map(repr, row.glued))} split into cells"
        for i, cell in enumerate(cells):
            other = columns[i]
            if other == label:
                continue
            cell = "SYS" if cell == "SOC" else cell  # SOC is the older nvidia-smi name of SYS
            both_gpus = label in gpu_labels and other in gpu_labels
            if cell not in pcie.CLASSES and not (both_gpus and cell.startswith("NV")):
                raise TopologyError(f"{source}: {label}-{other} is {cell!r}; only two GPUs can be NV#, "
                                    f"and X belongs on the diagonal")
            prior = grid.get((other, label))
            if prior is not None and prior != cell:
                # The matrix is symmetric: a mismatch means one of the two rows is damaged.
                why = "; ".join(repaired[r] for r in (label, other) if r in repaired) or "the matrix is not symmetric"
                raise TopologyError(f"{source}: {label}-{other} is {cell} but {other}-{label} is {prior} ({why})")
            grid[(label, other)] = cell
        if label in gpu_labels:
            affinity[label] = _affinity(row, extras, header.extra_cols if header else None, source)
    for row in rows:
        if row.glued:
            across = sum((other, row.label) in grid for other in columns)
            notes.append(f"row {row.label}: {', '.join(map(repr, row.glued))} read as cells that lost the tab "
                         f"between them; {across} of its cells confirmed by the rows across the diagonal")
    classes = {**grid, **{(b, a): c for (a, b), c in grid.items()}}
    missing = [h for h in columns if h not in seen_rows]
    if missing:
        excerpt = True
        notes.append(f"rows not in the file: {', '.join(missing)}")
    if nic_labels and not legend and any(re.fullmatch(r"NIC\d+", h) for h in nic_labels):
        notes.append("no NIC Legend: NICs are named by their matrix label")
    elif legend:
        unnamed = [h for h in nic_labels if h not in legend and re.fullmatch(r"NIC\d+", h)]
        if unnamed:
            notes.append(f"not in the NIC Legend, so named by their label: {', '.join(unnamed)}")

    gpus, unknown = [], []
    for label in gpu_labels:
        info = affinity.get(label, {})
        numa_text = info.get("NUMA Affinity")
        numa = int(numa_text) if numa_text and numa_text.isdigit() else None
        first = re.match(r"(\d+),", numa_text or "")
        if numa is None and first and info.get("GPU NUMA ID", "").isdigit():
            # A Grace host (GB200: the GPU's memory is a NUMA node of its own, the GPU NUMA ID column)
            # lists the node of its CPUs, then the CPU-less nodes of GPU memory: the first is the one.
            numa = int(first.group(1))
            notes.append(f"{label}: NUMA Affinity {numa_text!r} lists GPU memory nodes after the CPUs' "
                         f"(GPU NUMA ID {info['GPU NUMA ID']}): NUMA {numa}, the first")
        elif label in affinity and "NUMA Affinity" in extras and numa_text is None:
            notes.append(f"{label}: the row stops before its NUMA Affinity")
        elif numa_text in ("", "N/A"):
            unknown.append(label)
        elif numa_text is not None and numa is None:
            notes.append(f"{label}: NUMA Affinity {numa_text!r} is not a single node: NUMA unknown")
        cpu = info.get("CPU Affinity") or None
        # A NUMA Affinity cell the row shows is the answer, even when empty: unknown is not guessed.
        gpus.append(_Dev(label, "gpu", int(label[3:]), label, numa, cpu_affinity=cpu if cpu != "N/A" else None,
                         numa_stated=numa_text is not None))
    if unknown:
        notes.append(f"NUMA Affinity empty or N/A for {', '.join(unknown)}: NUMA unknown")
    nics = [_Dev(legend.get(label, label), "nic", i, label, None) for i, label in enumerate(nic_labels)]
    rename = {d.label: d.name for d in gpus + nics}
    classes = {(rename[a], rename[b]): c for (a, b), c in classes.items()}
    return _build(source, "nvidia-smi", not excerpt, gpus, nics, classes, notes)


def _fields(line: str) -> tuple[list[tuple[int, str]], bool]:
    """The words of a matrix line as (column, text), "" for an empty field, and whether those are real.

    nvidia-smi ends every field with one or more tabs, and an empty cell is an empty field. A line
    with tabs splits at them. A line whose tabs a terminal turned into spaces still starts every
    field on an 8-column tab stop, so its tabs, and the empty fields between them, count back; a line
    spaced any other way (retyped, re-aligned) gives only its words.
    """
    if "\t" in line:
        out, col = [], 0
        for part in line.split("\t"):
            out += [(col, word) for word in part.split()] or [(col, "")]
            col = (col + len(part)) // 8 * 8 + 8
        return out, True
    words = []
    for m in re.finditer(r"\S+", line):
        start = m.start() - 1 if m.group() == "X" and m.start() % 8 == 1 else m.start()  # the diagonal is " X "
        words.append((start, m.end(), m.group()))
    out, end = [], None
    for start, stop, word in words:
        first_stop = 0 if end is None else (end // 8 + 1) * 8
        if start % 8 or start < first_stop:
            return [(start, word) for start, _, word in words], False
        out += [(c, "") for c in range(first_stop, start, 8)]
        out.append((start, word))
        end = stop
    return out, True


def _matrix_row(line: str) -> _Row | None:
    """A matrix row: a label, then class cells. None when the line is not one."""
    fields, exact = _fields(line)
    words = [i for i, (_, t) in enumerate(fields) if t]
    if len(words) < 2:
        return None
    label, rest = fields[words[0]][1], fields[words[0] + 1:]
    cells: list[str] = []
    glued: list[str] = []
    i = 0
    while i < len(rest):
        column, text = rest[i]
        if not text:
            # A stray tab between cells is harmless; a cell lost there leaves the row short, which
            # is refused once the number of columns is known.
            following = next((t for _, t in rest[i + 1:] if t), "")
            if not _CELL.match(following):
                break
            i += 1
            continue
        m = _CELLS_THEN.fullmatch(text)
        if not m:
            break
        run, tail = m.groups()
        split = _CELL.findall(run)
        cells += split
        if tail or len(split) > 1:
            glued.append(text)
        if tail:  # the last cell lost its tab to the field after it
            rest[i] = (column, tail)
            break
        i += 1
    if not cells:
        return None
    return _Row(label, cells, rest[i:], exact, line.endswith("\t"), glued)


def _cut_cell(text: str) -> bool:
    """Whether text is the start of a class cell, as when a row was cut in the middle of one."""
    return any(c.startswith(text) for c in ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "NV"))


def _matrix_header(line: str) -> _Header:
    expanded = line.expandtabs(8)
    found = list(_EXTRA_NAME.finditer(expanded))
    cut = found[0].start() if found else len(expanded)
    labels: list[str] = []
    for word in expanded[:cut].split():
        # Labels that lost the space between them (GPU7NIC0, mlx5_0mlx5_1) part before each new one.
        labels += re.split(r"(?<=\d)(?=(?:GPU|NIC|mlx)\d)", word)
    extras = ["CPU Affinity" if m.group().startswith("CPU") else
              "GPU NUMA ID" if m.group().startswith("GPU") else "NUMA Affinity" for m in found]
    unread = _EXTRA_NAME.sub(" ", expanded[cut:]).split()
    return _Header(labels, extras, [m.start() for m in found], unread)


def _matrix_columns(header: _Header | None, rows: list[_Row], source: str, notes: list[str]) -> list[str]:
    """The column labels: the header's, checked against the X diagonal of the rows.

    A damaged header (a label lost or two run together) is rebuilt from the rows when every column
    has its row; a row whose X is not where the header puts its label lost or gained a cell.
    """
    if header is None:
        return _infer_header(rows, source)
    labels = header.labels
    n = max(len(r.cells) for r in rows)
    diagonal: dict[int, str] = {}
    for r in rows:
        if "X" in r.cells:
            diagonal.setdefault(r.cells.index("X"), r.label)
    if len(labels) >= n and all(labels[i] == label for i, label in diagonal.items()):
        return labels
    if sorted(diagonal) == list(range(n)) and len(set(diagonal.values())) == n:
        rebuilt = [diagonal[i] for i in range(n)]
        notes.append(f"the header row ({' '.join(labels)}) does not match the rows: columns taken from "
                     f"the rows' X diagonal ({' '.join(rebuilt)})")
        return rebuilt
    wrong = [f"row {label} has its X in column {i + 1}, which the header calls {labels[i]}"
             for i, label in sorted(diagonal.items()) if i < len(labels) and labels[i] != label]
    if len(labels) >= n and wrong:
        raise TopologyError(f"{source}: {'; '.join(wrong)}: the row lost or gained a cell")
    raise TopologyError(f"{source}: the header row names {len(labels)} columns ({', '.join(labels)}) but rows "
                        f"have {n} cells, and the rows do not cover every column to rebuild it from their X diagonal")


def _affinity(row: _Row, columns: list[str], header_cols: list[int] | None, source: str) -> dict[str, str]:
    """The CPU Affinity, NUMA Affinity and GPU NUMA ID cells of a GPU row, by header column.

    As many values as columns are taken in order. A row with fewer has an empty cell or was cut
    short, and which one matters: taking the next value for an empty cell is how a GPU NUMA ID was
    read as the NUMA node. nvidia-smi ends the last class cell with one tab, so an empty field right
    there is an empty first column (CPU Affinity: printed so where a cgroup leaves a GPU no CPUs).
    Values that stop before a column are empty cells when the line still ends in a tab, else a row
    cut short, whose last value may be cut too. A gap
    anywhere else does not say which column is empty, and the row is refused. A row without its tab
    structure is placed by where the header's column names start.
    """
    fields = list(row.extras)
    while fields and not fields[-1][1]:
        fields.pop()
    values = [t for _, t in fields if t]
    ambiguous = TopologyError(
        f"{source}: row {row.label} has {len(values)} values ({', '.join(values) or 'none'}) for the "
        f"{len(columns)} columns {', '.join(columns)} and does not show which cell is empty, so its NUMA "
        "node cannot be read; copy the matrix again with its tabs (`nvidia-smi topo -m > topo.tsv`)")
    if len(values) > len(columns):
        raise TopologyError(f"{source}: row {row.label} has {len(values)} values after its cells "
                            f"({', '.join(values)}) for the {len(columns)} columns {', '.join(columns)}")
    if len(values) == len(columns):
        return dict(zip(columns, values))
    if row.exact:
        texts = [t for _, t in fields]
        out: dict[str, str] = {}
        rest = list(columns)
        if texts and not texts[0]:
            out[rest.pop(0)] = ""
            texts = texts[1:]
        if len(values) == len(rest):
            return {**out, **dict(zip(rest, values))}
        gap = texts.index("") if "" in texts else len(texts)
        if any(texts[gap:]):
            slots = _printed_slots(columns)
            whole = [t for _, t in fields]
            if row.ended:  # printed to its end: the fields after the last value are empty cells
                whole += [""] * (len(slots) - len(whole))
            if len(whole) == len(slots) and all(not t for t, c in zip(whole, slots) if c is None):
                return {c: t for t, c in zip(whole, slots) if c is not None}
            raise ambiguous
        if row.ended:  # printed to its end: the columns after the values are empty cells
            return {**out, **dict.fromkeys(rest, ""), **dict(zip(rest, values))}
        return {**out, **dict(zip(rest, values[:-1]))}
    if not header_cols:
        raise ambiguous
    placed: dict[str, str] = {}
    last = -1
    for column, text in fields:
        if not text:
            continue
        at = max((j for j, start in enumerate(header_cols) if start <= column + 1), default=-1)
        if at <= last:
            raise ambiguous
        placed[columns[at]] = text
        last = at
    if last < len(columns) - 1:
        placed.pop(columns[last], None)  # the row stops early: its last value may be cut
    return placed


def _printed_slots(columns: list[str]) -> list[str | None]:
    """The tab-separated fields nvidia-smi prints for these columns, in order: each cell ends in a
    tab, and NUMA Affinity in two where GPU NUMA ID follows (None: that empty field). Every complete
    real row shows it, e.g. `0-63,128-191<tab>0<tab><tab>N/A` (b300_9nic_ansi_bond_sglang26039.tsv),
    and so does a row whose affinities a container left empty: `<tab><tab><tab>N/A` after the last
    class cell's own tab is CPU Affinity "", NUMA Affinity "" and GPU NUMA ID N/A
    (nv12_2gpu_8nic_empty_affinity_vllm19607_excerpt.txt)."""
    slots: list[str | None] = []
    for i, name in enumerate(columns):
        slots.append(name)
        if name == "NUMA Affinity" and columns[i + 1:i + 2] == ["GPU NUMA ID"]:
            slots.append(None)
    return slots


def _infer_header(rows: list[_Row], source: str) -> list[str]:
    """Columns are GPU0..GPU<g-1>, NIC0..NIC<k-1> in nvidia-smi; the X of a row marks its column."""
    n = max(len(r.cells) for r in rows)
    gpus = None
    for r in rows:
        if "X" not in r.cells:
            continue
        at = r.cells.index("X")
        m = re.fullmatch(r"(GPU|NIC)(\d+)", r.label)
        if not m:
            raise TopologyError(f"{source}: no header, and row {r.label} is not GPU<n> or NIC<n>")
        if m.group(1) == "NIC":
            gpus = at - int(m.group(2))
            break
        if at != int(m.group(2)):
            raise TopologyError(f"{source}: no header, and row {r.label} has its X in column {at}")
    if gpus is None:
        nv = [sum(1 for c in r.cells if c.startswith("NV")) for r in rows if r.label.startswith("GPU")]
        if not nv or max(nv) == 0:
            raise TopologyError(f"{source}: no header and no NIC row: cannot tell GPU columns from NIC columns")
        gpus = max(nv) + 1
    if gpus < 0 or gpus > n:
        raise TopologyError(f"{source}: no header, and the rows' X diagonal gives {gpus} GPU columns of {n}")
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
            candidates: list[_XmlNode | None] = [*nets] if nets else [None]
            for net in candidates:
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
            cls_: str | None
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
    numa_stated: bool | None = None  # the source gave the NUMA node, maybe as unknown; None: when numa is set


def _build(source: str, fmt: str, complete: bool, gpus: list[_Dev], nics: list[_Dev],
           classes: Mapping[tuple[str, str], str], notes: Iterable[str]) -> Topology:
    notes = list(dict.fromkeys(notes))
    devices = gpus + nics
    names = [d.name for d in devices]
    repeated = sorted({x for x in names if names.count(x) > 1})
    if repeated:
        raise TopologyError(f"{source}: device names repeated: {', '.join(repeated)}")
    stated = {d.name for d in devices if (d.numa is not None if d.numa_stated is None else d.numa_stated)}
    numa = {d.name: d.numa for d in devices}
    # Spread known NUMA nodes over same-node classes until nothing changes; the nearest known
    # neighbour wins, then the lowest NUMA id, so the result does not depend on device order.
    order = {c: r for r, c in enumerate(("PIX", "PXB", "PHB", "NODE"))}
    changed = True
    while changed:
        changed = False
        for d in devices:
            if numa[d.name] is not None or d.name in stated:
                continue
            near = [(order[classes[(d.name, o.name)]], numa[o.name]) for o in devices
                    if o.name != d.name and numa[o.name] is not None
                    and classes.get((d.name, o.name)) in SAME_NUMA_CLASSES]
            if near:
                numa[d.name] = min(near)[1]
                changed = True
    for d in devices:
        conflicts = {other for o in devices if o.name != d.name and o.name in stated
                     and (other := numa[o.name]) is not None and classes.get((d.name, o.name)) in SAME_NUMA_CLASSES
                     and other != numa[d.name]}
        if d.name in stated and numa[d.name] is not None and conflicts:
            notes.append(f"{d.name} is on NUMA {numa[d.name]} but has a same-node class to NUMA {sorted(conflicts)}")

    gpu_names = [g.name for g in gpus]
    inferred_compute = {n.name: any(classes.get((n.name, g)) in NEAR_CLASSES for g in gpu_names) for n in nics}
    all_known = all((n.name, g) in classes for n in nics for g in gpu_names)
    if nics and gpus and all_known and not any(inferred_compute.values()) and all(n.compute is None for n in nics):
        # No NIC shares a PCIe complex with a GPU (a workstation, a VM without topology, a Grace host
        # whose GPUs hang off NVLink-C2C): all may carry compute, but the ports of a multi-port
        # adapter (PIX to each other) are the storage and management cards where single-port ones
        # are left for compute (DGX H100 and DGX GB200: single-port compute NICs, dual-port storage).
        ported = {n.name for n in nics for o in nics if o.name != n.name and classes.get((n.name, o.name)) == "PIX"}
        if ported and len(ported) < len(nics):
            inferred_compute = {n.name: n.name not in ported for n in nics}
            notes.append("no NIC shares a PCIe switch or host bridge with a GPU: the single-port NICs are taken as "
                         f"compute NICs, not the ports of multi-port adapters ({', '.join(sorted(ported))})")
        else:
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
