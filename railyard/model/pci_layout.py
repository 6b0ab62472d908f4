"""Where a catalog SKU's GPUs, NICs and bridges sit on the PCI buses, and the NICs' netdev names.

The catalog gives the PCIe tree (host bridges, root ports, switches, the devices below them) but
only some of the addresses. Whatever shows a node's hardware needs all of them: the lab's sysfs
tree (railyard.drivers.lab.hwtree), and drivers that must name a NIC's netdev on a machine
before reading it. Two things no catalog entry can give are derived here, deterministically:

- PCI addresses the sources do not give. The kernel numbers buses depth first; here the tree is
  walked the same way, with every address the catalog does know kept exactly (the walk jumps
  forward to it) and the order of GPUs (nvidia-smi numbers them in bus order) and of NICs
  (mlx5_N are named in probe order, i.e. bus order) preserved. A catalog "switch" is one node;
  on the bus it is an upstream port with one downstream port per link below it, as on real
  hardware, which is what lets a reader walk the hierarchy the way it walks a real one.
- Netdev names the catalog does not give: the systemd predictable name of the address (ib... for
  InfiniBand functions, en... for Ethernet ones); none when the link mode is unknown.

Pure Python: no files are written, and the same SKU always gives the same layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from railyard.model import pcie
from railyard.model.catalog import NodeSku

MAX_BUS = 0xFF


class PciLayoutError(ValueError):
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
        raise PciLayoutError(f"{bdf!r} is not a PCI address (DDDD:BB:DD.F)")
    if m.group(1) != "0000":
        raise PciLayoutError(f"{bdf}: only PCI domain 0000 is laid out")
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
    known = sorted((n for n in nodes.values() if n.known_bdf), key=lambda n: _parse_bdf(n.known_bdf or ""))
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
                raise PciLayoutError(f"{where}: {a} and {b} must each come before the other on the bus "
                                  "(GPU order, NIC order and known addresses disagree)")

    def key(i: str) -> tuple:
        anchors = [_parse_bdf(bdf) for d in members[i] if (bdf := nodes[d].known_bdf)]
        if anchors:
            return (0, min(anchors), 0)
        return (1, (0, 0, 0), min(nodes[d].position for d in members[i]))

    out: list[str] = []
    left = list(ids)
    while left:
        ready = [i for i in left if not (before[i] - set(out))]
        if not ready:
            raise PciLayoutError(f"{where}: no bus order satisfies GPU order, NIC order and known addresses")
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
        known = sorted({_parse_bdf(bdf)[0] for c in on_link if (bdf := self.nodes[c].known_bdf)})
        if len(known) > 1:
            raise PciLayoutError(f"{self.sku.id}: {', '.join(on_link)} share one link but have buses "
                              f"{', '.join(f'{b:02x}' for b in known)}")
        bus = self.next_bus
        if known:
            if self.anchored:
                if known[0] < bus:
                    raise PciLayoutError(f"{self.sku.id}: {what} needs bus {known[0]:02x}, but depth-first numbering "
                                      f"has already reached {bus:02x}")
                bus = known[0]
            elif self.first_anchor is None:
                self.first_anchor = (bus, known[0])
        if bus > MAX_BUS:
            raise PciLayoutError(f"{self.sku.id}: more than 256 PCI buses needed")
        self.next_bus = bus + 1
        return bus

    def place(self, child: str, bus: int, slot: tuple[int, int], path: tuple[str, ...]) -> None:
        """Put `child` (and its subtree) on `bus`; `slot`, (device, function), numbers devices/functions on that bus."""
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
            raise PciLayoutError(f"{sku.id}: {f.id} and {seen[f.bdf]} would both be {f.bdf}")
        seen[f.bdf] = f.id
    bus_ids = {f.id.split("#")[0] if f.kind == "switch_up" else f.id: f.bdf
               for f in functions if f.kind != "switch_down"}
    return Layout(sku.id, functions, bus_ids, omitted)


# --------------------------------------------------------------------------------------------------
# Netdev names


def netdev_name(sku: NodeSku, rdma: str, bdf: str | None = None) -> str | None:
    """The NIC's netdev: the catalog's name, else the systemd predictable name of its address.

    InfiniBand functions are ib<...>, Ethernet ones en<...>; a function whose link mode the catalog
    does not know (a VPI card with no class) has no name here. `bdf` defaults to the layout's.
    """
    nic = sku.nic(rdma)
    if nic.netdev:
        return nic.netdev
    # The class first: a VPI port's class follows the mode it runs, and so does its name.
    layer = nic.class_link if nic.pci_class else nic.link_layer
    if layer == "infiniband":
        prefix = "ib"
    elif layer == "ethernet":
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
