"""The fabric enumerated: every switch, every link (one cable each), the detail view and the
cabling CSV. The summary never enumerates (planner.py counts); these walk the same structure one
switch and one link at a time, so their cost grows with the fabric.

Cabling is a mixin of FabricPlan (planner.py): it reads the plan's counts (layouts, su_nodes,
uplinks, tiers, ...) and its structure queries (_leaf_uplink, _spine_up, _core_block,
_spine_uplinks_full), so a cable always ends where the summary counted it.
"""

from __future__ import annotations

import abc
import csv
import io
from typing import Any, Iterator, NamedTuple

from railyard.model import addressing as addr
from railyard.model.fabric.geometry import SwitchGeometry
from railyard.model.fabric.names import core_name, group_spine_name, leaf_name, spine_name

CSV_COLUMNS = ("tier", "rail", "a_device", "a_port", "a_interface", "a_ip", "b_device", "b_port",
               "b_interface", "b_ip", "speed_gbps")


class Switch(NamedTuple):
    name: str
    tier: str            # leaf | spine | core
    pool: str | None     # leaves and three-tier spines belong to a pool
    unit: int | None     # leaf: its SU; three-tier spine: its group
    rail: int | None     # leaf: its rail
    plane: int | None    # three-tier spine and core: the core plane
    # position within its unit / group / plane / tier. The field shadows tuple.index, which mypy
    # refuses; its name is a key of `plan --detail`'s JSON, so it stays.
    index: int  # type: ignore[assignment]
    ports: int
    ports_used: int
    asn: int | None = None
    loopback: str | None = None  # RoCE: its /32, the BGP router id


class Link(NamedTuple):
    """One port-to-port link (one cable). `a` is the lower end: node, leaf or spine."""

    tier: str            # node_leaf | leaf_spine | spine_core
    rail: int | None
    a_device: str
    a_port: Any          # a NIC name on a node, a 1-based port number on a switch
    b_device: str
    b_port: int
    gbps: int
    a_ip: str | None = None  # RoCE: the /31 ends of a switch-to-switch link
    b_ip: str | None = None


class Cabling(abc.ABC):
    """The enumeration methods of FabricPlan, which sets these counts in its constructor and
    implements the structure queries below. A layout is a planner.PoolLayout (typed Any here:
    planner.py imports this module, so this one cannot import it back)."""

    kind: str
    switch: SwitchGeometry
    gbps: int
    cidr: Any
    asn_base: int | None
    loopback_cidr: Any
    half: int
    su_nodes: int
    uplinks: int
    leaves: int
    tiers: int
    links_per_spine: int
    spines: int
    cores_per_plane: int
    planes: int
    layouts: tuple[Any, ...]

    @abc.abstractmethod
    def _spine_up(self, pl: Any, group: int) -> int:
        """Uplinks of a spine of that group."""

    @abc.abstractmethod
    def _core_block(self, pl: Any, group: int) -> int:
        """First core port (0-based) of that group's spines, in every core of their plane."""

    @abc.abstractmethod
    def _leaf_uplink(self, pl: Any, unit: int, rail: int, u: int) -> tuple[str, int]:
        """(upper switch, its 1-based port) at the far end of uplink u of a leaf."""

    @abc.abstractmethod
    def _spine_uplinks_full(self, pl: Any) -> int:
        """Uplinks of a spine of a full group."""

    def switches(self) -> Iterator[Switch]:
        """Every switch, leaves first (pool, SU, rail), then spines, then cores (plane, index)."""
        radix = self.switch.radix
        # RoCE switches with an ASN base get ASNs (and with a loopback range, loopbacks).
        base = self.asn_base if self.kind == "roce" else None
        lo = self.loopback_cidr if self.kind == "roce" else None
        for pl in self.layouts:
            p = pl.pool
            for unit in range(pl.units):
                n = self.su_nodes if unit < pl.units - 1 else pl.last_unit_nodes
                for rail in range(p.rails):
                    number = unit * p.rails + rail
                    yield Switch(leaf_name(p.name, unit, rail), "leaf", p.name, unit, rail, None, rail, radix,
                                 n + self.uplinks, addr.leaf_asn(base, p.ordinal, number) if base is not None else None,
                                 addr.leaf_loopback(lo, p.ordinal, number) if lo else None)
        if self.tiers == 2:
            used = self.links_per_spine * self.leaves
            for j in range(self.spines):
                yield Switch(spine_name(j), "spine", None, None, None, None, j, radix, used,
                             addr.spine_asn(base) if base is not None else None, addr.shared_loopback(lo, j) if lo else None)
        elif self.tiers == 3:
            for pl in self.layouts:
                p = pl.pool
                for group in range(pl.groups):
                    up = self._spine_up(pl, group)
                    asn = addr.spine_group_asn(base, p.ordinal, group) if base is not None else None
                    for j in range(self.uplinks):
                        loopback = addr.pool_spine_loopback(lo, p.ordinal, group * self.uplinks + j) if lo else None
                        yield Switch(group_spine_name(p.name, group, j), "spine", p.name, group, None, j, j, radix,
                                     2 * up, asn, loopback)
            used_by_index = self._core_ports_used_by_index()
            for plane in range(self.planes):
                for i in range(self.cores_per_plane):
                    yield Switch(core_name(plane, i), "core", None, None, None, plane, i, radix, used_by_index[i],
                                 addr.core_asn(base) if base is not None else None,
                                 addr.shared_loopback(lo, i * self.planes + plane) if lo else None)

    def _core_ports_used_by_index(self) -> list[int]:
        c = self.cores_per_plane
        used = [0] * c
        for pl in self.layouts:
            for group in range(pl.groups):
                up = self._spine_up(pl, group)
                for i in range(c):
                    used[i] += up // c + (1 if i < up % c else 0)
        return used

    def links(self) -> Iterator[Link]:
        """Every link: nodes to leaves, leaves to spines, spines to cores."""
        gbps, half, roce = self.gbps, self.half, self.kind == "roce" and self.cidr is not None
        for pl in self.layouts:
            p = pl.pool
            for index in range(p.nodes):
                unit, slot = divmod(index, self.su_nodes)
                node = addr.node_name(p.name, index)
                for rail in range(p.rails):
                    yield Link("node_leaf", rail, node, p.nic(rail), leaf_name(p.name, unit, rail), slot + 1, gbps)
        for pl in self.layouts:
            p = pl.pool
            for unit in range(pl.units):
                for rail in range(p.rails):
                    leaf = leaf_name(p.name, unit, rail)
                    number = unit * p.rails + rail
                    for u in range(self.uplinks):
                        upper, port = self._leaf_uplink(pl, unit, rail, u)
                        ips = (addr.leaf_uplink_p2p(self.cidr, p.ordinal, number, u, self.uplinks)
                               if roce else (None, None))
                        yield Link("leaf_spine", rail, leaf, half + u + 1, upper, port, gbps, ips[1], ips[0])
        if self.tiers != 3:
            return
        c = self.cores_per_plane
        for pl in self.layouts:
            p = pl.pool
            full_up = self._spine_uplinks_full(pl)
            for group in range(pl.groups):
                up = self._spine_up(pl, group)
                block = self._core_block(pl, group)
                for j in range(self.uplinks):
                    spine = group_spine_name(p.name, group, j)
                    number = group * self.uplinks + j
                    for v in range(up):
                        ips = (addr.spine_uplink_p2p(self.cidr, p.ordinal, number, v, full_up)
                               if roce else (None, None))
                        yield Link("spine_core", None, spine, half + v + 1, core_name(j, v % c),
                                   block + v // c + 1, gbps, ips[1], ips[0])

    def detail(self) -> dict[str, Any]:
        """Every switch and every link as JSON-ready lists (large: the summary is the cheap view)."""
        return {"switches": [s._asdict() for s in self.switches()],
                "links": [link._asdict() for link in self.links()]}

    def write_cabling_csv(self, out: Any) -> int:
        """Write the cabling plan (one row per cable) to a text stream; returns the number of rows."""
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        label = self.switch.label
        rows = 0
        for link in self.links():
            a_is_node = link.tier == "node_leaf"
            writer.writerow((link.tier, "" if link.rail is None else link.rail, link.a_device, link.a_port,
                             link.a_port if a_is_node else label(link.a_port), link.a_ip or "",
                             link.b_device, link.b_port, label(link.b_port), link.b_ip or "", link.gbps))
            rows += 1
        return rows

    def cabling_csv(self) -> str:
        buf = io.StringIO()
        self.write_cabling_csv(buf)
        return buf.getvalue()
