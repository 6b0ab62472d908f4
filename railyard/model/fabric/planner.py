"""The fabric planner: a rail-optimized fat tree sized by arithmetic (the design rules are in the
package's docstring and docs/fabric.md), and plan_fabric, which builds it from a spec and the
catalog.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from railyard.model.fabric.cabling import Cabling
from railyard.model.fabric.geometry import SwitchGeometry, _fail, _get, switch_geometry
from railyard.model.fabric.names import SWITCH_TIERS, group_spine_name, leaf_name, spine_name
from railyard.model.fabric.roce import roce_summary

if TYPE_CHECKING:
    from railyard.model.catalog import Catalog
    from railyard.model.spec.types import Spec


def cabled_by_lldp(kind: str | None) -> bool:
    """A fabric of this kind has its cabling read from the hosts' LLDP neighbours (Ethernet), not
    from the subnet manager's view (InfiniBand): the hosts run lldpd on their rails. None (a host
    recorded before its fabric was) reads no LLDP."""
    return kind is not None and kind != "infiniband"


@dataclass(frozen=True)
class FabricPool:
    """A node pool as the fabric sees it: how many nodes, and their compute NICs in rail order."""

    name: str
    ordinal: int
    nodes: int
    rails: int
    nics: tuple[str, ...] = ()

    def nic(self, rail: int) -> str:
        return self.nics[rail] if rail < len(self.nics) else f"rail{rail}"


@dataclass(frozen=True)
class PoolLayout:
    """Where one pool sits in the fabric; all counts, no enumeration."""

    pool: FabricPool
    units: int             # scalable units
    last_unit_nodes: int   # nodes in the last SU (the SU size when it is full)
    leaf_offset: int       # fabric-wide ordinal of the pool's first leaf
    group_units: int = 0   # three tiers: SUs in a full spine group
    groups: int = 0        # three tiers: spine groups
    core_offset: int = 0   # three tiers: first core port of the pool's spines in a plane

    @property
    def leaves(self) -> int:
        return self.units * self.pool.rails

    @property
    def last_group_units(self) -> int:
        return self.units - (self.groups - 1) * self.group_units if self.groups else 0

    def group_units_of(self, group: int) -> int:
        return self.last_group_units if group == self.groups - 1 else self.group_units


# --------------------------------------------------------------------------------------------------
# Small arithmetic


def _divisors(n: int) -> list[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _number(x: float) -> int | float:
    """A ratio as JSON shows it: an integer when whole, else 3 decimals."""
    r = round(x, 3)
    return int(r) if float(r).is_integer() else r


def min_bisection_links(pools: Sequence[tuple[int, int, int]], su_nodes: int, uplinks: int) -> int:
    """Links crossing the cheapest balanced cut of a leaf-spine(-core) fabric.

    pools: per pool (full SUs, nodes in its partial SU or 0, rails). Nodes are the endpoints (their
    GPUs talk over NVLink inside a node); a balanced cut puts floor(N/2) nodes on one side.

    Why this is the minimum: the tiers above the leaves are non-blocking (a spine has as many links
    up as down and spreads them evenly), so the cheapest cut leaves all of them on one side, the
    other side X being a set of nodes. A leaf with x of its n nodes in X then costs
    min(x, n - x + uplinks) links (leaf outside X: X's node links cross; inside: the others' node
    links and its uplinks cross). That is concave in x, so over the simplex sum(x) = |X| the
    minimum sits at a vertex: whole SUs in X plus at most one split SU. We try every vertex: each
    subset of the partial SUs whole, the cheapest full SUs (fewest rails) whole, and the split in
    each pool's full or partial SU. |X| is floor(N/2) or its complement's size (the cut is
    symmetric). tests/unit/model/fabric/test_ib.py checks it against max-flow on every balanced cut.
    """
    total = sum(f * su_nodes + last for f, last, _ in pools)
    if total < 2:
        return 0
    partials = [(last, rails) for _, last, rails in pools if last]
    fulls = sorted((rails, f) for f, _, rails in pools if f)  # cheapest (fewest rails) first
    whole_full = min(su_nodes, uplinks)
    best = None
    m = total // 2
    for size in {m, total - m}:
        for mask in range(1 << len(partials)):
            chosen = [partials[i] for i in range(len(partials)) if mask >> i & 1]
            rem = size - sum(n for n, _ in chosen)
            if rem < 0:
                continue
            base = sum(r * min(n, uplinks) for n, r in chosen)
            y, x = divmod(rem, su_nodes)
            # (cost of the split SU, rails of the pool whose full SU is split, or None when no
            # full SU is split: no split at all, or the split is in a partial SU left out of X).
            options: list[tuple[int, int | None]] = [(0, None)] if x == 0 else []
            if x:
                for rails, f in fulls:
                    options.append((rails * min(x, su_nodes - x + uplinks), rails))
                for i, (n, rails) in enumerate(partials):
                    if not mask >> i & 1 and x <= n:
                        options.append((rails * min(x, n - x + uplinks), None))
            for split_cost, from_full in options:
                need, cost = y, base + split_cost
                taken_split = False
                for rails, f in fulls:
                    avail = f
                    if from_full == rails and not taken_split:
                        avail -= 1
                        taken_split = True
                    take = min(need, max(avail, 0))
                    cost += take * rails * whole_full
                    need -= take
                if need == 0 and (from_full is None or taken_split):
                    best = cost if best is None else min(best, cost)
    return best or 0


# --------------------------------------------------------------------------------------------------
# The plan


class FabricPlan(Cabling):
    """A rail-optimized fat tree: counts on construction, switches and links on demand."""

    def __init__(self, *, kind: str, speed: str, switch: SwitchGeometry, pools: Sequence[FabricPool],
                 oversubscription: float = 1, reserved_leaf_ports: int = 0, cidr: Any = None,
                 asn_base: int | None = None, loopback_cidr: Any = None):
        if kind not in ("infiniband", "roce"):
            raise _fail("kind", kind, "infiniband or roce")
        if oversubscription is None or oversubscription < 1:
            raise _fail("oversubscription", oversubscription, "a number >= 1 (1 = non-blocking)")
        self.kind = kind
        self.speed = speed
        self.switch = switch
        self.gbps = switch.gbps
        self.oversubscription_requested = oversubscription
        self.reserved_leaf_ports = reserved_leaf_ports
        self.cidr = cidr
        self.asn_base = asn_base
        self.loopback_cidr = loopback_cidr
        radix = switch.radix
        self.half = radix // 2
        self.su_nodes = self.half - reserved_leaf_ports
        if self.su_nodes < 1:
            raise _fail("reservedLeafPorts", reserved_leaf_ports, f"0..{self.half - 1}",
                        f"a {switch.model} leaf has {radix} ports, half of them down to nodes")
        if oversubscription > self.half:
            # Any ratio past the downward half plans the same single uplink: what was asked is not
            # what would be built.
            raise _fail("oversubscription", oversubscription, f"1..{self.half}",
                        f"a {switch.model} leaf has {radix} ports, {self.half} of them down to nodes; past "
                        f"{self.half}:1 it would still keep one uplink")
        # Uplinks for the whole downward half, reserved ports included: what sits on them (UFM,
        # a management appliance) is as non-blocking as the nodes, and the counts stay powers of 2.
        self.uplinks = math.ceil(self.half / oversubscription)
        self.oversubscription = _number(self.su_nodes / self.uplinks)
        members = [p for p in pools if p.nodes > 0 and p.rails > 0]
        self.rails = max((p.rails for p in members), default=0)
        if self.rails > self.half:
            raise _fail("switch", switch.model, f"a switch with at least {2 * self.rails} ports",
                        f"a node has {self.rails} rails; a spine must take one link from each")
        layouts, offset = [], 0
        for p in members:
            units = _ceil(p.nodes, self.su_nodes)
            last = p.nodes - (units - 1) * self.su_nodes
            layouts.append(PoolLayout(p, units, last, offset))
            offset += units * p.rails
        self.leaves = offset
        self.tiers = 0 if not layouts else (2 if self.leaves <= radix else 3)
        self.links_per_spine = 0  # two tiers: links from each leaf to each spine
        self.spines = 0
        self.cores_per_plane = 0
        self.planes = 0
        if self.tiers == 2:
            self.links_per_spine = max(d for d in _divisors(self.uplinks) if d * self.leaves <= radix)
            self.spines = self.uplinks // self.links_per_spine
        elif self.tiers == 3:
            layouts = self._three_tiers(layouts)
        self.layouts: tuple[PoolLayout, ...] = tuple(layouts)
        self._by_name = {pl.pool.name: pl for pl in self.layouts}

    # --- three tiers ---------------------------------------------------------------------------

    def _three_tiers(self, layouts: list[PoolLayout]) -> list[PoolLayout]:
        radix = self.switch.radix
        out, groups_before, port_before = [], 0, 0
        for pl in layouts:
            g = self.half // pl.pool.rails
            groups = _ceil(pl.units, g)
            out.append(PoolLayout(pl.pool, pl.units, pl.last_unit_nodes, pl.leaf_offset, g, groups))
            groups_before += groups
        # Cores per plane: the fewest that divide every full spine's uplinks (so each full spine
        # reaches every core of its plane equally) and leave no core short of ports.
        full_up = math.gcd(*(pl.group_units * pl.pool.rails for pl in out))
        for c in _divisors(full_up):
            if sum(self._core_ports_of_pool(pl, c) for pl in out) <= radix:
                break
        else:
            most = radix * (self.half // self.rails) * self.su_nodes
            raise _fail("", f"{sum(pl.pool.nodes for pl in out)} nodes",
                        f"at most about {most} nodes in a three-tier {self.switch.model} fabric",
                        f"{groups_before} spine groups do not fit the {radix} ports of a core")
        self.cores_per_plane = c
        self.planes = self.uplinks
        self.spines = groups_before * self.uplinks
        final = []
        for pl in out:
            final.append(PoolLayout(pl.pool, pl.units, pl.last_unit_nodes, pl.leaf_offset, pl.group_units,
                                    pl.groups, port_before))
            port_before += self._core_ports_of_pool(pl, c)
        return final

    def _spine_up(self, pl: PoolLayout, group: int) -> int:
        """Uplinks of a spine of that group: one per leaf below it."""
        return pl.group_units_of(group) * pl.pool.rails

    def _core_ports_of_pool(self, pl: PoolLayout, cores: int) -> int:
        """Ports a pool's spines take on every core of a plane (a block of ceil(up/cores) each)."""
        full = (pl.groups - 1) * _ceil(pl.group_units * pl.pool.rails, cores)
        return full + _ceil(pl.last_group_units * pl.pool.rails, cores)

    def _core_block(self, pl: PoolLayout, group: int) -> int:
        """First core port (0-based) of that group's spines, in every core of their plane."""
        width = _ceil(pl.group_units * pl.pool.rails, self.cores_per_plane)
        return pl.core_offset + group * width

    # --- where a node plugs in -----------------------------------------------------------------

    def layout(self, pool: str) -> PoolLayout:
        return self._by_name[pool]

    def leaf_port(self, pool: str, index: int, rail: int) -> tuple[str, int]:
        """(leaf, 1-based port) of NIC `rail` of node `index` of `pool`."""
        unit, slot = self.scalable_unit(pool, index), index % self.su_nodes
        return leaf_name(pool, unit, rail), slot + 1

    def scalable_unit(self, pool: str, index: int) -> int:
        """The scalable unit of node `index` of `pool`: the leaves, one per rail, it plugs into."""
        return index // self.su_nodes

    def spine_group(self, pool: str, index: int) -> int | None:
        """Its spine group in a three-tier fabric (the spines above its SU's leaves); None with
        fewer tiers, where every leaf reaches every spine."""
        if self.tiers != 3:
            return None
        return self.scalable_unit(pool, index) // self._by_name[pool].group_units

    def _leaf_uplink(self, pl: PoolLayout, unit: int, rail: int, u: int) -> tuple[str, int]:
        """(upper switch, its 1-based port) at the far end of uplink u of a leaf."""
        if self.tiers == 2:
            k = self.links_per_spine
            leaf = pl.leaf_offset + unit * pl.pool.rails + rail
            return spine_name(u // k), leaf * k + u % k + 1
        group, t = divmod(unit, pl.group_units)
        return group_spine_name(pl.pool.name, group, u), t * pl.pool.rails + rail + 1

    # --- counts --------------------------------------------------------------------------------

    @property
    def cabling_by_lldp(self) -> bool:
        return cabled_by_lldp(self.kind)

    @property
    def nodes(self) -> int:
        return sum(pl.pool.nodes for pl in self.layouts)

    @property
    def cores(self) -> int:
        return self.cores_per_plane * self.planes

    def link_counts(self) -> dict[str, int]:
        node_leaf = sum(pl.pool.nodes * pl.pool.rails for pl in self.layouts)
        leaf_spine = self.leaves * self.uplinks
        # Three tiers: each leaf sends one link into every plane, and each spine sends up as many
        # links as come up from its leaves.
        spine_core = leaf_spine if self.tiers == 3 else 0
        return {"node_leaf": node_leaf, "leaf_spine": leaf_spine, "spine_core": spine_core}

    def _core_usage(self) -> tuple[int, int]:
        """(ports used, cages used) on all cores, from one plane (all planes are alike)."""
        if self.tiers != 3:
            return 0, 0
        c = self.cores_per_plane
        ports = cages = 0
        for core in range(c):
            spans = []
            for pl in self.layouts:
                for group in range(pl.groups):
                    up = self._spine_up(pl, group)
                    spans.append((self._core_block(pl, group), up // c + (1 if core < up % c else 0)))
            ports += sum(n for _, n in spans)
            cages += self.switch.cages_of(*spans)
        return ports * self.planes, cages * self.planes

    def _spine_group_sizes(self) -> Iterator[tuple[PoolLayout, int, int]]:
        """(pool layout, number of its groups, SUs in each) for full groups and the last group."""
        for pl in self.layouts:
            if pl.groups > 1:
                yield pl, pl.groups - 1, pl.group_units
            yield pl, 1, pl.last_group_units

    def port_usage(self) -> dict[str, dict[str, int]]:
        """Ports and cages (transceivers) used per tier, and ports available."""
        sw = self.switch
        out = {t: {"used": 0, "available": 0, "cages": 0} for t in SWITCH_TIERS}
        for pl in self.layouts:
            full = pl.units - 1
            for count, n in ((full, self.su_nodes), (1, pl.last_unit_nodes)):
                out["leaf"]["used"] += count * pl.pool.rails * (n + self.uplinks)
                out["leaf"]["cages"] += count * pl.pool.rails * sw.cages_of((0, n), (self.half, self.uplinks))
        out["leaf"]["available"] = self.leaves * sw.radix
        if self.tiers == 2:
            used = self.links_per_spine * self.leaves
            out["spine"].update(used=self.spines * used, cages=self.spines * sw.cages(used))
        elif self.tiers == 3:
            for pl, count, units in self._spine_group_sizes():
                down = units * pl.pool.rails
                out["spine"]["used"] += count * self.uplinks * 2 * down
                out["spine"]["cages"] += count * self.uplinks * sw.cages_of((0, down), (self.half, down))
            out["core"]["used"], out["core"]["cages"] = self._core_usage()
        out["spine"]["available"] = self.spines * sw.radix
        out["core"]["available"] = self.cores * sw.radix
        return out

    def bisection_links(self) -> int:
        pools = [(pl.units - 1 if pl.last_unit_nodes < self.su_nodes else pl.units,
                  pl.last_unit_nodes if pl.last_unit_nodes < self.su_nodes else 0, pl.pool.rails)
                 for pl in self.layouts]
        return min_bisection_links(pools, self.su_nodes, self.uplinks)

    @property
    def pure_fat_tree(self) -> bool:
        """Whether every switch of a tier has the same port groups (what OpenSM's ftree checks when
        it is not told the roots). Two tiers always are: every leaf has the same uplinks to every
        spine, and missing nodes are allowed. Three tiers are when every spine group is full and
        all pools group alike; a partial last group has spines with fewer leaves below."""
        if self.tiers != 3:
            return True
        shapes = {(pl.group_units, pl.pool.rails) for pl in self.layouts}
        return len(shapes) == 1 and all(pl.last_group_units == pl.group_units for pl in self.layouts)

    def switch_hops(self, a: tuple[str, int, int], b: tuple[str, int, int]) -> int:
        """Switches on the shortest path between two compute NICs, each (pool, node index, rail):
        one through a shared leaf, three through a spine, five through a core."""
        (pa, ia, ra), (pb, ib, rb) = a, b
        if pa == pb and ra == rb and self.scalable_unit(pa, ia) == self.scalable_unit(pb, ib):
            return 1
        if self.tiers == 2 or (pa == pb and self.spine_group(pa, ia) == self.spine_group(pb, ib)):
            return 3
        return 5

    @property
    def worst_case_hops(self) -> int:
        """Switches on the longest shortest path between two GPUs' NICs (rail to other rail)."""
        return {0: 0, 2: 3, 3: 5}[self.tiers]

    # --- RoCE ----------------------------------------------------------------------------------

    def _spine_uplinks_full(self, pl: PoolLayout) -> int:
        return pl.group_units * pl.pool.rails

    def p2p_links_per_pool(self) -> list[tuple[int, int]]:
        """Per pool: (leaf uplinks, spine-uplink slots) that take a /31 (RoCE; see addressing)."""
        out = []
        for pl in self.layouts:
            spine = pl.groups * self.uplinks * self._spine_uplinks_full(pl) if self.tiers == 3 else 0
            out.append((pl.leaves * self.uplinks, spine))
        return out

    def asns_needed_per_pool(self) -> int:
        return max((pl.leaves + pl.groups for pl in self.layouts), default=0)

    def loopbacks_needed(self) -> tuple[int, int]:
        """(switches no pool owns, most switches a pool owns): each takes a loopback (RoCE)."""
        shared = self.spines if self.tiers == 2 else self.cores
        per_pool = max((pl.leaves + (pl.groups * self.uplinks if self.tiers == 3 else 0) for pl in self.layouts),
                       default=0)
        return shared, per_pool

    # --- summary -------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        links = self.link_counts()
        usage = self.port_usage()
        switches = {"leaf": self.leaves, "spine": self.spines, "core": self.cores}
        host_optics = links["node_leaf"]
        # Without the switch's cage table its transceivers are not counted, only its ports.
        switch_optics = sum(u["cages"] for u in usage.values()) if self.switch.cages_known else None
        shown: dict[str, dict[str, int | None]] = {
            t: {**u, "cages": u["cages"] if self.switch.cages_known else None} for t, u in usage.items()}
        out: dict[str, Any] = {
            "kind": self.kind,
            "topology": "rail-optimized",
            "switch": self.switch.model,
            "speed": self.speed,
            "link_gbps": self.gbps,
            "rails": self.rails,
            "nodes": self.nodes,
            "tiers": self.tiers,
            "scalable_units": sum(pl.units for pl in self.layouts),
            "su_nodes": self.su_nodes,
            "reserved_leaf_ports": self.reserved_leaf_ports,
            "leaf_uplinks": self.uplinks,
            "switches": {**switches, "total": sum(switches.values())},
            "links": {**links, "total": sum(links.values())},
            "cables": sum(links.values()),
            "optics": {
                "switch": switch_optics,
                "switch_type": self.switch.optic_name,
                "host": host_optics,
                "host_type": f"one per NIC, {self.gbps}G",
                "total": None if switch_optics is None else switch_optics + host_optics,
            },
            "ports": shown,
            "oversubscription": self.oversubscription,
            "oversubscription_requested": _number(self.oversubscription_requested),
            "bisection_gbps": self.bisection_links() * self.gbps,
            "worst_case_hops": self.worst_case_hops,
            "structure": self._structure(),
            "pools": [self._pool_summary(pl) for pl in self.layouts],
        }
        if self.kind == "roce":
            out.update(roce_summary(self))
        return out

    def _structure(self) -> dict[str, Any]:
        if self.tiers == 2:
            return {"links_leaf_to_each_spine": self.links_per_spine}
        if self.tiers == 3:
            return {"spine_group_units": {pl.pool.name: pl.group_units for pl in self.layouts},
                    "spines_per_group": self.uplinks, "planes": self.planes,
                    "cores_per_plane": self.cores_per_plane,
                    "links_spine_to_each_core": {pl.pool.name: self._spine_uplinks_full(pl) // self.cores_per_plane
                                                 for pl in self.layouts}}
        return {}

    def _pool_summary(self, pl: PoolLayout) -> dict[str, Any]:
        return {"name": pl.pool.name, "nodes": pl.pool.nodes, "rails": pl.pool.rails,
                "scalable_units": pl.units, "last_unit_nodes": pl.last_unit_nodes, "leaves": pl.leaves,
                "spine_groups": pl.groups, "spines": pl.groups * self.uplinks if self.tiers == 3 else 0}


# --------------------------------------------------------------------------------------------------
# From the spec and the catalog


def nic_name(nic: Any) -> str:
    for attr in ("rdma", "name", "netdev", "id"):
        value = _get(nic, attr)
        if value and value != "unknown":
            return str(value)
    return "nic"


def fabric_pools(spec: Spec, catalog: Catalog) -> list[FabricPool]:
    out = []
    for ordinal, pool in enumerate(spec.node_pools):
        sku = catalog.nodes.get(pool.sku)
        nics = sku.compute_nics if sku is not None else ()  # catalog order is rail order
        out.append(FabricPool(pool.name, ordinal, pool.count, len(nics), tuple(nic_name(n) for n in nics)))
    return out


def plan_fabric(spec: Spec, catalog: Catalog | None = None) -> FabricPlan:
    """The compute fabric of a validated spec."""
    if catalog is None:
        from railyard.model.catalog import load_catalog

        catalog = load_catalog()
    c = spec.fabric.compute
    switch = catalog.switches.get(c.switch)
    if switch is None:
        raise _fail("switch", c.switch, f"a switch id in the catalog: {', '.join(sorted(catalog.switches))}")
    return FabricPlan(kind=c.kind, speed=c.speed, switch=switch_geometry(switch, c.speed),
                      pools=fabric_pools(spec, catalog), oversubscription=c.oversubscription,
                      reserved_leaf_ports=c.reserved_leaf_ports or 0, cidr=c.cidr, asn_base=c.asn_base,
                      loopback_cidr=getattr(c, "loopback_cidr", None))
