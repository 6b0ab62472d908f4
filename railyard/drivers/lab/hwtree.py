"""A node's hardware as the kernel would show it: a sysfs and procfs tree built from a catalog SKU.

Lab nodes share the host's kernel, so the GPUs, NICs and PCIe switches of a DGX cannot be real
there. This module writes a directory laid out like the real /sys and /proc of a catalog node
(the lab binds it at /run/railyard/hw), so tuning code that takes a sysfs root and a procfs root
reads and writes exactly what it would on the machine:

    sys/devices/pci0000:BB/<root port>/<switch up>/<switch down>/.../<bdf>/   one dir per PCI function
        vendor device class numa_node local_cpulist driver@ msi_irqs/<n>
        sriov_totalvfs sriov_numvfs (writable)  net/<netdev>/  infiniband/<mlx5_N>/
    sys/bus/pci/devices/<bdf>@          -> the device dir, as on a real machine
    sys/class/net/<netdev>@, sys/class/infiniband/<mlx5_N>@
    sys/devices/system/node/node<N>/{cpulist,meminfo,hugepages/hugepages-<size>kB/*}
    sys/kernel/mm/hugepages/hugepages-<size>kB/*
    proc/cmdline  proc/meminfo  proc/irq/<n>/smp_affinity_list
    railyard-hwtree.json                 what was derived rather than read from the catalog

Every value comes from the catalog. What the catalog does not know is either left out (as the
kernel leaves out sriov_* on a function without SR-IOV) or shown the way the kernel shows it
without the information (numa_node -1), and each such case says so where it is written. Three
things no catalog entry can give are derived, deterministically, and listed in the manifest:

- PCI addresses the sources do not give. The kernel numbers buses depth first; here the tree is
  walked the same way, with every address the catalog does know kept exactly (the walk jumps
  forward to it) and the order of GPUs (nvidia-smi numbers them in bus order) and of NICs
  (mlx5_N are named in probe order, i.e. bus order) preserved. A catalog "switch" is one node;
  on the bus it is an upstream port with one downstream port per link below it, as on real
  hardware, which is what lets a reader walk the hierarchy the way it walks a real one.
- Netdev names the catalog does not give: the systemd predictable name of the address (ib... for
  InfiniBand functions, en... for Ethernet ones); none when the link mode is unknown.
- MSI-X vectors: the kernel allocates them at probe time (their count depends on the driver and
  the CPU count), so each NIC function gets MSI_VECTORS of them, numbered from FIRST_IRQ in bus
  order: enough to exercise per-IRQ affinity, not a claim about a real machine.

Pure Python, no root needed, and the same SKU always gives the same bytes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from railyard.model import pcie
from railyard.model.catalog import NodeSku

MSI_VECTORS = 4
FIRST_IRQ = 100
MANIFEST = "railyard-hwtree.json"
# What the kernel shows for any PCI-to-PCI bridge (root ports and switch ports alike): base class
# 0x06 (bridge), subclass 0x04 (PCI-to-PCI). A catalog "root_port" or "switch" is one by definition.
PCI_BRIDGE_CLASS = "0x060400"
# x86-64 hugepage sizes in kB. Every catalog node is an x86 server; an Arm node would list 64K/2M/512M.
HUGEPAGE_KB = (2048, 1048576)
MAX_BUS = 0xFF


class HwTreeError(ValueError):
    """A SKU whose PCIe data cannot be laid out on buses (contradictory addresses or order)."""


@dataclass
class _Node:
    id: str
    kind: str  # host_bridge | root_port | switch | gpu | nic
    parent: str | None
    position: int
    numa: int | None = None
    known_bdf: str | None = None
    children: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Function:
    """One PCI function of the tree: its address and the sysfs path components from the root bus."""

    id: str  # catalog id: GPU0, mlx5_3, a bridge id; switch ports get "<switch>#up" / "<switch>#down<k>"
    bdf: str
    kind: str  # root_port | switch_up | switch_down | gpu | nic
    path: tuple[str, ...]  # ("pci0000:17", "0000:17:01.0", ..., bdf)
    numa: int | None
    synthesized: bool


@dataclass(frozen=True)
class Layout:
    """Where every PCI function of a SKU sits. `bus_ids` maps catalog ids to addresses."""

    sku: str
    functions: tuple[Function, ...]
    bus_ids: dict[str, str]
    omitted: dict[str, str]

    def function(self, dev_id: str) -> Function:
        for f in self.functions:
            if f.id == dev_id:
                return f
        raise KeyError(dev_id)


# --------------------------------------------------------------------------------------------------
# Bus numbering


def _bdf(bus: int, dev: int, fn: int) -> str:
    return f"0000:{bus:02x}:{dev:02x}.{fn}"


def _parse_bdf(bdf: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])", bdf.lower())
    if not m:
        raise HwTreeError(f"{bdf!r} is not a PCI address (DDDD:BB:DD.F)")
    if m.group(1) != "0000":
        raise HwTreeError(f"{bdf}: only PCI domain 0000 is laid out")
    return int(m.group(2), 16), int(m.group(3), 16), int(m.group(4))


def _nodes(sku: NodeSku) -> tuple[dict[str, _Node], list[str], dict[str, str]]:
    nodes: dict[str, _Node] = {}
    omitted: dict[str, str] = {}
    position = 0
    for b in sku.pcie:
        nodes[b.id] = _Node(b.id, b.kind, b.parent, position, b.numa, b.pci_bus_id)
        position += 1
    for g in sku.gpus:
        if g.parent is None:
            omitted[g.name] = "the catalog does not place it in the PCIe tree"
            continue
        nodes[g.name] = _Node(g.name, "gpu", g.parent, position, known_bdf=g.pci_bus_id)
        position += 1
    for n in sku.nics:
        if n.parent is None:
            omitted[n.rdma] = "the catalog does not place it in the PCIe tree"
            continue
        nodes[n.rdma] = _Node(n.rdma, "nic", n.parent, position, known_bdf=n.pci_bus_id)
        position += 1
    roots = []
    for node in nodes.values():
        if node.parent is None:
            roots.append(node.id)
        else:
            nodes[node.parent].children.append(node.id)
    for node in nodes.values():
        if node.kind != pcie.HOST_BRIDGE:
            top = node
            while top.parent is not None:
                top = nodes[top.parent]
            node.numa = top.numa
    return nodes, roots, omitted


def _chains(sku: NodeSku, nodes: dict[str, _Node]) -> list[list[str]]:
    """Sequences whose order bus numbering must keep: GPU indices, NIC names, known addresses."""
    gpus = [g.name for g in sorted(sku.gpus, key=lambda g: g.index) if g.name in nodes]
    nics = [n.rdma for n in sku.nics if n.rdma in nodes]
    nics.sort(key=lambda name: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)])
    known = sorted((n for n in nodes.values() if n.known_bdf), key=lambda n: _parse_bdf(n.known_bdf))
    return [gpus, nics, [n.id for n in known]]


def _order(ids: list[str], nodes: dict[str, _Node], chains: list[list[str]], where: str) -> list[str]:
    """Siblings in bus order: every chain's order kept; those holding a known address first."""
    members = {i: _subtree(i, nodes) for i in ids}
    positions = [{dev: k for k, dev in enumerate(chain)} for chain in chains]
    before: dict[str, set[str]] = {i: set() for i in ids}
    for a in ids:
        for b in ids:
            if a != b and any(x in pos and y in pos and pos[x] < pos[y]
                              for pos in positions for x in members[a] for y in members[b]):
                before[b].add(a)
    for a in ids:
        for b in before[a]:
            if a in before[b]:
                raise HwTreeError(f"{where}: {a} and {b} must each come before the other on the bus "
                                  "(GPU order, NIC order and known addresses disagree)")

    def key(i: str) -> tuple:
        anchors = [_parse_bdf(nodes[d].known_bdf) for d in members[i] if nodes[d].known_bdf]
        if anchors:
            return (0, min(anchors), 0)
        return (1, (0, 0, 0), min(nodes[d].position for d in members[i]))

    out: list[str] = []
    left = list(ids)
    while left:
        ready = [i for i in left if not (before[i] - set(out))]
        if not ready:
            raise HwTreeError(f"{where}: no bus order satisfies GPU order, NIC order and known addresses")
        pick = min(ready, key=key)
        out.append(pick)
        left.remove(pick)
    return out


def _subtree(node_id: str, nodes: dict[str, _Node]) -> list[str]:
    out = [node_id]
    for c in nodes[node_id].children:
        out += _subtree(c, nodes)
    return out


def _links(children: list[str], nodes: dict[str, _Node], sku: NodeSku) -> list[list[str]]:
    """Children of a switch grouped per downstream link: the ports of one adapter share a link."""
    groups: list[list[str]] = []
    for c in children:
        n = nodes[c]
        if n.kind == "nic" and groups:
            nic = sku.nic(c)
            prev = nodes[groups[-1][-1]]
            if (prev.kind == "nic" and (nic.ports or 1) > 1 and nic.port and nic.port > 1
                    and sku.nic(prev.id).nic_model == nic.nic_model and sku.nic(prev.id).port == nic.port - 1):
                groups[-1].append(c)
                continue
        groups.append([c])
    return groups


class _Allocator:
    def __init__(self, sku: NodeSku, nodes: dict[str, _Node], chains: list[list[str]], anchored: bool):
        self.sku, self.nodes, self.chains, self.anchored = sku, nodes, chains, anchored
        self.next_bus = 0
        self.functions: list[Function] = []
        self.first_anchor: tuple[int, int] | None = None  # (relative bus, known bus), unanchored runs

    def take_bus(self, on_link: list[str], what: str) -> int:
        known = sorted({_parse_bdf(self.nodes[c].known_bdf)[0] for c in on_link if self.nodes[c].known_bdf})
        if len(known) > 1:
            raise HwTreeError(f"{self.sku.id}: {', '.join(on_link)} share one link but have buses "
                              f"{', '.join(f'{b:02x}' for b in known)}")
        bus = self.next_bus
        if known:
            if self.anchored:
                if known[0] < bus:
                    raise HwTreeError(f"{self.sku.id}: {what} needs bus {known[0]:02x}, but depth-first numbering "
                                      f"has already reached {bus:02x}")
                bus = known[0]
            elif self.first_anchor is None:
                self.first_anchor = (bus, known[0])
        if bus > MAX_BUS:
            raise HwTreeError(f"{self.sku.id}: more than 256 PCI buses needed")
        self.next_bus = bus + 1
        return bus

    def place(self, child: str, bus: int, slot: int, path: tuple[str, ...]) -> None:
        """Put `child` (and its subtree) on `bus`; `slot` numbers devices/functions on that bus."""
        node = self.nodes[child]
        if node.known_bdf and self.anchored:
            kb, dev, fn = _parse_bdf(node.known_bdf)
        else:
            dev, fn = slot
        bdf = _bdf(bus, dev, fn)
        synthesized = not (node.known_bdf and self.anchored)
        if node.kind == pcie.SWITCH:
            up = Function(f"{child}#up", bdf, "switch_up", path + (bdf,), node.numa, synthesized)
            self.functions.append(up)
            internal = self.take_bus([], f"{child} internal bus")
            ordered = _order(node.children, self.nodes, self.chains, f"{self.sku.id} {child}")
            for k, link in enumerate(_links(ordered, self.nodes, self.sku)):
                down_bdf = _bdf(internal, k, 0)
                down = Function(f"{child}#down{k}", down_bdf, "switch_down", up.path + (down_bdf,), node.numa, True)
                self.functions.append(down)
                sec = self.take_bus(link, f"{', '.join(link)} below {child}")
                for j, c in enumerate(link):
                    self.place(c, sec, (0, j), down.path)
            return
        kind = {pcie.ROOT_PORT: "root_port"}.get(node.kind, node.kind)
        f = Function(child, bdf, kind, path + (bdf,), node.numa, synthesized)
        self.functions.append(f)
        if node.kind == pcie.ROOT_PORT and node.children:
            ordered = _order(node.children, self.nodes, self.chains, f"{self.sku.id} {child}")
            sec = self.take_bus(ordered, f"{', '.join(ordered)} below {child}")
            for j, c in enumerate(ordered):
                self.place(c, sec, divmod(j, 8), f.path)

    def host_bridge(self, hb: str) -> None:
        node = self.nodes[hb]
        ordered = _order(node.children, self.nodes, self.chains, f"{self.sku.id} {hb}")
        bus = self.take_bus(ordered, f"{', '.join(ordered)} on {hb}")
        root = (f"pci0000:{bus:02x}",)
        for k, c in enumerate(ordered):
            self.place(c, bus, (k + 1, 0), root)  # device 0 of a root bus is the host bridge itself


def layout(sku: NodeSku) -> Layout:
    """Where every GPU, NIC and bridge of the SKU sits on the PCI buses (no files written)."""
    nodes, roots, omitted = _nodes(sku)
    chains = _chains(sku, nodes)
    order = _order(roots, nodes, chains, f"{sku.id} host bridges")
    alloc = _Allocator(sku, nodes, chains, anchored=True)
    for hb in order:
        # Start each complex where its first known address needs it (as firmware leaves gaps), so
        # the buses above a known device are the ones right before it, as on the real machine.
        dry = _Allocator(sku, nodes, chains, anchored=False)
        dry.host_bridge(hb)
        if dry.first_anchor is not None:
            rel, known = dry.first_anchor
            alloc.next_bus = max(alloc.next_bus, known - rel)
        alloc.host_bridge(hb)
    functions = tuple(alloc.functions)
    seen: dict[str, str] = {}
    for f in functions:
        if f.bdf in seen:
            raise HwTreeError(f"{sku.id}: {f.id} and {seen[f.bdf]} would both be {f.bdf}")
        seen[f.bdf] = f.id
    bus_ids = {f.id.split("#")[0] if f.kind == "switch_up" else f.id: f.bdf
               for f in functions if f.kind != "switch_down"}
    return Layout(sku.id, functions, bus_ids, omitted)


def netdev_name(sku: NodeSku, rdma: str, bdf: str | None = None) -> str | None:
    """The NIC's netdev: the catalog's name, else the systemd predictable name of its address.

    InfiniBand functions are ib<...>, Ethernet ones en<...>; a function whose link mode the catalog
    does not know (a VPI card with no class) has no name here. `bdf` defaults to the layout's.
    """
    nic = sku.nic(rdma)
    if nic.netdev:
        return nic.netdev
    cls = (nic.pci_class or "").lower()
    if cls.startswith("0x0207") or (not cls and nic.link == "infiniband"):
        prefix = "ib"
    elif cls.startswith("0x0200") or (not cls and nic.link == "ethernet"):
        prefix = "en"
    else:
        return None
    if bdf is None:
        bdf = layout(sku).bus_ids.get(rdma)
        if bdf is None:
            return None
    bus, dev, fn = _parse_bdf(bdf)
    multi = (nic.ports or 1) > 1
    name = f"{prefix}p{bus}s{dev}" + (f"f{fn}" if fn or multi else "")
    if prefix == "en":
        # mlx5 reports phys_port_name p<port-1>, which systemd appends as n<phys_port_name>.
        name += f"np{(nic.port or 1) - 1}"
    return name


# --------------------------------------------------------------------------------------------------
# Writing the tree


def build_hwtree(sku: NodeSku, root: str | Path, *, replace: bool = False) -> dict[str, Any]:
    """Write the SKU's sysfs/procfs tree under `root`; returns the manifest (also written there).

    `root` must be empty or missing unless `replace` is true, in which case the tree's own parts
    (sys/, proc/, the manifest) are removed first: counters the tuning roles wrote are reset.
    """
    root = Path(root)
    if root.exists():
        parts = {p.name for p in root.iterdir()}
        if parts and not replace:
            raise FileExistsError(f"{root} is not empty (pass replace=True to rebuild the hardware tree)")
        for name in ("sys", "proc"):
            if (root / name).is_dir() and not (root / name).is_symlink():
                shutil.rmtree(root / name)
        (root / MANIFEST).unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    lay = layout(sku)
    w = _Writer(root)
    all_cpus = f"0-{sku.cpus.threads - 1}" if sku.cpus.threads else None
    irq = FIRST_IRQ
    netdevs: dict[str, str] = {}
    irqs: dict[str, list[int]] = {}
    for f in sorted(lay.functions, key=lambda f: f.path):
        d = "sys/devices/" + "/".join(f.path)
        w.symlink(f"sys/bus/pci/devices/{f.bdf}", d)
        vendor, device, klass = _ids(sku, f)
        w.file(f"{d}/vendor", vendor)
        w.file(f"{d}/device", device)
        w.file(f"{d}/class", klass)
        # The kernel shows -1 when firmware gives no proximity domain for the device's root complex.
        w.file(f"{d}/numa_node", str(f.numa) if f.numa is not None else "-1")
        w.file(f"{d}/local_cpulist", _local_cpulist(sku, f.numa, all_cpus))
        if f.kind == "gpu":
            # The GPU's class may be unknown to the catalog; the bound driver is how a reader tells a
            # GPU then, and nvidia is what the kernel shows on a GPU node with its driver loaded.
            w.symlink(f"{d}/driver", "sys/bus/pci/drivers/nvidia")
        if f.kind != "nic":
            continue
        nic = sku.nic(f.id)
        if nic.rdma.startswith("mlx5_"):
            w.symlink(f"{d}/driver", "sys/bus/pci/drivers/mlx5_core")
        if nic.sriov_total_vfs is not None:
            # Without SR-IOV in firmware the kernel shows neither file; unknown is treated the same.
            w.file(f"{d}/sriov_totalvfs", str(nic.sriov_total_vfs))
            w.file(f"{d}/sriov_numvfs", "0", writable=True)
        w.dir(f"{d}/infiniband/{nic.rdma}")
        w.symlink(f"{d}/infiniband/{nic.rdma}/device", d)
        w.symlink(f"sys/class/infiniband/{nic.rdma}", f"{d}/infiniband/{nic.rdma}")
        name = netdev_name(sku, nic.rdma, f.bdf)
        if name:
            netdevs[nic.rdma] = name
            w.dir(f"{d}/net/{name}")
            w.symlink(f"{d}/net/{name}/device", d)
            w.symlink(f"sys/class/net/{name}", f"{d}/net/{name}")
        irqs[nic.rdma] = list(range(irq, irq + MSI_VECTORS))
        for n in irqs[nic.rdma]:
            w.file(f"{d}/msi_irqs/{n}", "msix")
            # A new IRQ may run on any online CPU; unknown CPUs: the file is left out.
            w.file(f"proc/irq/{n}/smp_affinity_list", all_cpus, writable=True)
        irq += MSI_VECTORS
    _memory(w, sku, all_cpus)
    manifest = {
        "sku": sku.id,
        "bus_ids": dict(sorted(lay.bus_ids.items())),
        "synthesized_bus_ids": sorted(f.id for f in lay.functions if f.synthesized and f.kind in ("gpu", "nic")),
        "omitted": dict(sorted(lay.omitted.items())),
        "netdevs": dict(sorted(netdevs.items())),
        "irqs": dict(sorted(irqs.items())),
    }
    w.file(MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


def _ids(sku: NodeSku, f: Function) -> tuple[str | None, str | None, str | None]:
    if f.kind == "gpu":
        g = sku.gpu(f.id)
        return g.pci_vendor, g.pci_device, g.pci_class
    if f.kind == "nic":
        n = sku.nic(f.id)
        return n.pci_vendor, n.pci_device, n.pci_class
    bridge_id = f.id.split("#")[0]
    b = next(b for b in sku.pcie if b.id == bridge_id)
    return b.pci_vendor, b.pci_device, b.pci_class or PCI_BRIDGE_CLASS


def _local_cpulist(sku: NodeSku, numa: int | None, all_cpus: str | None) -> str | None:
    if numa is None:
        return all_cpus  # the kernel's answer for a device of no known node: every CPU
    return sku.numa_node(numa).cpulist


def _memory(w: "_Writer", sku: NodeSku, all_cpus: str | None) -> None:
    numa_ids = sorted(n.id for n in sku.numa_nodes)
    if numa_ids:
        w.file("sys/devices/system/node/online", _ranges(numa_ids))
        w.file("sys/devices/system/node/possible", _ranges(numa_ids))
    for n in sku.numa_nodes:
        base = f"sys/devices/system/node/node{n.id}"
        w.file(f"{base}/cpulist", n.cpulist)
        # Per-node memory is not in the catalog (only the total), so MemTotal/MemFree lines are left
        # out; the hugepage lines are the kernel's with nothing reserved yet.
        w.file(f"{base}/meminfo", "".join(
            f"Node {n.id} {key}: {0:>6}\n" for key in ("HugePages_Total", "HugePages_Free", "HugePages_Surp")))
        for kb in HUGEPAGE_KB:
            for counter in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
                w.file(f"{base}/hugepages/hugepages-{kb}kB/{counter}", "0", writable=counter == "nr_hugepages")
    for kb in HUGEPAGE_KB:
        for counter in ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
                        "nr_overcommit_hugepages"):
            w.file(f"sys/kernel/mm/hugepages/hugepages-{kb}kB/{counter}", "0",
                   writable=counter in ("nr_hugepages", "nr_overcommit_hugepages"))
    lines = []
    if sku.memory_gib is not None:
        # The catalog's installed memory; a real kernel shows somewhat less (firmware, kernel image).
        lines.append(f"MemTotal:       {sku.memory_gib * 1024 * 1024} kB")
    lines += ["HugePages_Total:       0", "HugePages_Free:        0", "HugePages_Rsvd:        0",
              "HugePages_Surp:        0", "Hugepagesize:       2048 kB", "Hugetlb:               0 kB"]
    w.file("proc/meminfo", "\n".join(lines))
    # How the node boots is not in the catalog: the command line starts empty, i.e. nothing tuned.
    w.file("proc/cmdline", "")


def _ranges(ids: Iterable[int]) -> str:
    out: list[str] = []
    ids = sorted(ids)
    start = prev = ids[0]
    for i in ids[1:] + [None]:  # type: ignore[operator]
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(out)


class _Writer:
    def __init__(self, root: Path):
        self.root = root

    def dir(self, rel: str) -> Path:
        p = self.root / rel
        p.mkdir(parents=True, exist_ok=True)
        return p

    def file(self, rel: str, value: str | None, writable: bool = False) -> None:
        if value is None:
            return
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(value + "\n" if value else "\n")
        os.chmod(p, 0o644 if writable else 0o444)

    def symlink(self, rel: str, target_rel: str) -> None:
        link = self.root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        target = self.root / target_rel
        target.mkdir(parents=True, exist_ok=True) if not target.exists() else None
        link.symlink_to(os.path.relpath(target, link.parent))

