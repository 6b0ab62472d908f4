"""The InfiniBand fabric as a subnet manager sees it: the plan written in ibnetdiscover's format,
a discovered subnet read back and compared with the plan, and what OpenSM is given (partitions,
root switches, options).

One file format goes both ways. `topology_text` writes every switch, every compute HCA and every
planned cable as ibnetdiscover prints them; ibsim loads that file as a simulated fabric, and
`ibnetdiscover` on a real subnet prints the same records. `parse_ibnetdiscover` reads either back,
and verify.py holds it against the plan by name. Names are the join: an HCA is
"<host> <device>" (what rdma-ndd sets as a node description, `%h %d`), a switch is its plan name
(docs/fabric.md says how to set it on real switches).

Pure: no process is started here (railyard/sweep/ runs ibsim and OpenSM).
"""

from __future__ import annotations

import dataclasses
import io
import re
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence

from railyard.model import addressing as addr
from railyard.model import mtu

if TYPE_CHECKING:
    from railyard.model.fabric.cabling import Link
    from railyard.model.fabric.planner import FabricPlan, FabricPool
    from railyard.model.spec.types import Tenant

DEFAULT_PKEY = 0x7FFF
ROUTING_ENGINE = "ftree"


def hca_name(node: str, nic: str) -> str:
    """A compute HCA's node description: host name and RDMA device, as rdma-ndd writes it."""
    return f"{node} {nic}"


def compute_hcas(fabric: FabricPlan) -> Iterator[tuple[str, FabricPool, int, int]]:
    """Every compute HCA as (its name, pool, node index, rail), in pool, node and rail order: the
    order of the topology file, whose first HCA the simulated SM runs on."""
    for pl in fabric.layouts:
        p = pl.pool
        for index in range(p.nodes):
            node = addr.node_name(p.name, index)
            for rail in range(p.rails):
                yield hca_name(node, p.nic(rail)), p, index, rail


class End(NamedTuple):
    """One end of a cable: a device by name and its 1-based port (an HCA's port is 1)."""

    device: str
    port: int

    def __str__(self) -> str:
        return f"{self.device} port {self.port}"


def cable_of(a: End, b: End) -> tuple[End, End]:
    """A cable as its two ends, the lower first: the one form plan and subnet are compared in."""
    return (a, b) if a <= b else (b, a)


def link_ends(link: Link) -> tuple[End, End]:
    """A planned link's two ends by name: a node's end is its HCA (port 1)."""
    a = End(hca_name(link.a_device, link.a_port), 1) if link.tier == "node_leaf" else End(link.a_device, link.a_port)
    return a, End(link.b_device, link.b_port)


def planned_cables(fabric: FabricPlan) -> Iterator[tuple[End, End]]:
    """Every planned cable as two named ends, lower end first."""
    for link in fabric.links():
        yield cable_of(*link_ends(link))


def link_rate(fabric: FabricPlan) -> str:
    """A planned cable's width and speed as ibnetdiscover prints them: `4xNDR`. Every port of the
    catalog's InfiniBand switches and HCAs is a 4x port at the fabric's speed."""
    return f"4x{fabric.speed.upper()}"


# --------------------------------------------------------------------------------------------------
# The plan in ibnetdiscover's format


def write_topology(fabric: FabricPlan, out: IO[str]) -> int:
    """Write the fabric as an ibnetdiscover topology file; returns the number of devices.

    HCAs come first, in node and rail order: ibsim attaches the first port of the file to the
    subnet manager, so the simulated SM runs on node 0's rail-0 HCA. Switches carry the catalog's
    port count (unused ports stay unconnected), HCAs one port: a ConnectX-7 of an HGX board is a
    single-port device per rail.
    """
    if fabric.kind != "infiniband":
        raise ValueError(f"an ibnetdiscover topology is for InfiniBand fabrics, not {fabric.kind}")
    ports: dict[str, dict[int, End]] = {}
    for a, b in planned_cables(fabric):
        ports.setdefault(a.device, {})[a.port] = b
        ports.setdefault(b.device, {})[b.port] = a
    switches = list(fabric.switches())
    names = {sw.name for sw in switches}
    hcas = sorted((d for d in ports if d not in names), key=_hca_order(fabric))
    rate = link_rate(fabric)
    w = out.write
    for name in hcas:
        w(f'Ca\t1 "{name}"\t\t# "{name}"\n')
        for port, far in sorted(ports[name].items()):
            w(f'[{port}]\t"{far.device}"[{far.port}]\t\t# lid 0 {rate}\n')
        w("\n")
    for sw in switches:
        w(f'Switch\t{sw.ports} "{sw.name}"\t\t# "{sw.name}"\n')
        for port, far in sorted(ports.get(sw.name, {}).items()):
            w(f'[{port}]\t"{far.device}"[{far.port}]\t\t# "{far.device}" lid 0 {rate}\n')
        w("\n")
    return len(hcas) + len(switches)


def _hca_order(fabric: FabricPlan) -> Callable[[str], int]:
    rank = {name: i for i, (name, *_) in enumerate(compute_hcas(fabric))}
    return lambda name: rank.get(name, len(rank))


def topology_text(fabric: FabricPlan) -> str:
    buf = io.StringIO()
    write_topology(fabric, buf)
    return buf.getvalue()


def simulator_limits(fabric: FabricPlan) -> dict[str, int]:
    """Nodes, switches and ports ibsim must hold for this fabric (its -N, -S and -P), with room:
    ibsim 0.10 stops at 2,048 nodes, 256 switches and 13,312 ports by default."""
    switches = sum(1 for _ in fabric.switches())
    hcas = sum(pl.pool.nodes * pl.pool.rails for pl in fabric.layouts)
    ports = switches * (fabric.switch.radix + 1) + 2 * hcas
    return {"nodes": 2 * (hcas + switches) + 64, "switches": switches + 16, "ports": ports + 1024}


# --------------------------------------------------------------------------------------------------
# A discovered subnet


@dataclass
class Device:
    """A node of a discovered subnet: its id in the file, kind, GUIDs, description and LID."""

    id: str
    kind: str                       # Switch | Ca
    ports: int
    desc: str
    guid: int | None = None         # node GUID
    lid: int | None = None          # a switch's (port 0), an HCA's port 1
    port_guids: dict[int, int] = field(default_factory=dict)


@dataclass
class Subnet:
    """What `ibnetdiscover` printed: devices by id and cables between (device id, port)."""

    devices: dict[str, Device]
    cables: list[tuple[tuple[str, int], tuple[str, int]]]
    rates: dict[tuple[tuple[str, int], tuple[str, int]], str] = field(default_factory=dict)
    """Each cable's active width and speed where the output gives it (`4xNDR`), by cable."""

    def renamed(self, names: Mapping[int, str]) -> "Subnet":
        """The subnet with each device whose node GUID `names` holds known by that name instead of
        its node description (a switch as shipped describes itself by its model)."""
        if not names:
            return self
        devices = {i: dataclasses.replace(d, desc=names[d.guid]) if d.guid is not None and d.guid in names else d
                   for i, d in self.devices.items()}
        return Subnet(devices, self.cables, self.rates)

    def by_desc(self) -> dict[str, Device]:
        out: dict[str, Device] = {}
        dupes = set()
        for d in self.devices.values():
            if d.desc in out:
                dupes.add(d.desc)
            out[d.desc] = d
        if dupes:
            raise ValueError(f"node descriptions are not unique: {', '.join(sorted(dupes)[:5])}; "
                             "set each switch's to its plan name and run rdma-ndd on the hosts")
        return out

    def named_cables(self) -> set[tuple[End, End]]:
        out = set()
        for (a, ap), (b, bp) in self.cables:
            out.add(cable_of(End(self.devices[a].desc, ap), End(self.devices[b].desc, bp)))
        return out

    def named_rates(self) -> dict[tuple[End, End], str]:
        """Each named cable's width and speed, where the output gives it."""
        out = {}
        for ((a, ap), (b, bp)), rate in self.rates.items():
            out[cable_of(End(self.devices[a].desc, ap), End(self.devices[b].desc, bp))] = rate
        return out

    def port_guid(self, desc: str, port: int = 1) -> int:
        """A port's GUID; an HCA record without one (a planned topology) falls back to the node's."""
        device = self.by_desc()[desc]
        guid = device.port_guids.get(port) or device.guid
        if guid is None:
            # Formatting None as a GUID would fail later, and less clearly.
            raise ValueError(f"{desc!r} has no GUID in the ibnetdiscover output")
        return guid


_HEADER = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([^"]+)"(.*)$')
_PORT = re.compile(r'^\[(\d+)\](?:\(([0-9a-fA-F]+)\))?\s+"([^"]+)"\[(\d+)\](?:\(([0-9a-fA-F]+)\))?(.*)$')
_COMMENT_DESC = re.compile(r'#\s*"([^"]*)"')
_LID = re.compile(r"\blid (\d+)")
# A port's active width and speed, last on its line: `... lid 12 4xNDR`.
_RATE = re.compile(r"\b((\d+x)(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR))\s*$")


def rate_parts(rate: str) -> tuple[str, str]:
    """A rate as ibnetdiscover prints it, split: `4xNDR` -> ("4x", "NDR")."""
    m = _RATE.search(rate)
    return (m.group(2), m.group(3)) if m else (rate, rate)


def parse_ibnetdiscover(text: str) -> Subnet:
    """Read ibnetdiscover output (or a topology file written by `write_topology`)."""
    devices: dict[str, Device] = {}
    seen: set[tuple[tuple[str, int], tuple[str, int]]] = set()
    cables = []
    rates: dict[tuple[tuple[str, int], tuple[str, int]], str] = {}
    current: Device | None = None
    guid: int | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            if not line:
                current = None
            continue
        if line.startswith(("switchguid=", "caguid=", "rtguid=")):
            guid = int(line.split("=", 1)[1].split("(")[0], 16)
            continue
        m = _HEADER.match(line)
        if m:
            kind, nports, ident, rest = m.groups()
            desc = _COMMENT_DESC.search(rest)
            lid = _LID.search(rest)
            current = Device(ident, "Ca" if kind == "Ca" else kind, int(nports), desc.group(1) if desc else ident,
                             guid, int(lid.group(1)) if lid and kind == "Switch" else None)
            devices[ident] = current
            guid = None
            continue
        m = _PORT.match(line)
        if m and current is not None:
            port, port_guid, far, far_port, _, rest = m.groups()
            if port_guid:
                current.port_guids[int(port)] = int(port_guid, 16)
            if current.kind == "Ca":
                lid = _LID.search(rest)
                if lid and current.lid is None:
                    current.lid = int(lid.group(1))
            near_end, far_end = sorted(((current.id, int(port)), (far, int(far_port))))
            key = (near_end, far_end)
            if key not in seen:
                seen.add(key)
                cables.append(key)
            rate = _RATE.search(rest)
            if rate:
                rates.setdefault(key, rate.group(1))
            continue
    for (a, _), (b, _) in cables:
        for ident in (a, b):
            if ident not in devices:
                raise ValueError(f"ibnetdiscover output names {ident!r} on a port but has no record for it")
    return Subnet(devices, cables, rates)


# --------------------------------------------------------------------------------------------------
# What OpenSM is given


def root_switches(fabric: FabricPlan) -> list[str]:
    """The top tier: the switches ftree must rank as roots (spines of two tiers, cores of three)."""
    top = {2: "spine", 3: "core"}.get(fabric.tiers)
    return [sw.name for sw in fabric.switches() if sw.tier == top]


def _members(tenant: Tenant, fabric: FabricPlan, subnet: Subnet) -> list[int]:
    by_desc = subnet.by_desc()
    guids = []
    for name, pool, _, _ in compute_hcas(fabric):
        if pool.name not in tenant.pools:
            continue
        if name not in by_desc:
            raise ValueError(f"tenant {tenant.name}: HCA {name!r} is not in the discovered subnet")
        guids.append(subnet.port_guid(name))
    return guids


def partitions_conf(tenants: Sequence[Tenant], fabric: FabricPlan, subnet: Subnet | None) -> str:
    """OpenSM's partitions.conf: the default partition, then one partition per tenant over the
    compute ports of its pools, full or limited members from the pkey's high bit. A tenant of
    every pool is ALL_CAS; one of some pools lists its ports' GUIDs, read from `subnet`.

    With tenants, compute ports are limited members of the default partition: they still reach
    the SM and SA (full members), but not each other outside their tenants' partitions. Switches
    and the SM's own port are full members, as OpenSM needs to manage the subnet.
    """
    lines = ["# Written by Railyard from the stack's railyard:tenants (docs/fabric.md)."]
    default = "limited" if tenants else "full"
    ipoib = ipoib_flags()
    lines.append(f"Default=0x{DEFAULT_PKEY:04x}, {ipoib}, defmember={default} : ALL, ALL_SWITCHES=full, SELF=full ;")
    pools = {pl.pool.name for pl in fabric.layouts}
    for t in tenants:
        membership = "full" if t.full_membership else "limited"
        if pools <= set(t.pools):
            # Every compute port: no GUID to keep current when an HCA is replaced.
            members = f"ALL_CAS={membership}"
        elif subnet is None:
            raise ValueError(f"tenant {t.name} covers pools {', '.join(t.pools)} only: naming its ports needs "
                             "the subnet's GUIDs (ibnetdiscover output)")
        else:
            members = ", ".join(f"0x{g:016x}={membership}" for g in _members(t, fabric, subnet))
        # Tenant names are DNS labels (validated), which OpenSM takes as partition names as they are.
        lines.append(f"{t.name}=0x{t.partition:04x}, {ipoib} : {members or 'NONE'} ;")
    return "\n".join(lines) + "\n"


def ipoib_flags() -> str:
    """Each partition carries IPoIB, its broadcast group at the fabric's 4096-byte link MTU: OpenSM
    would create it at 2048 otherwise, and every IPoIB interface would come up at 2044, not the
    planned 4092 (railyard.model.mtu)."""
    return f"ipoib, mtu={mtu.IB_MTU_CODES[mtu.ib_link_mtu()]}"


def sm_port(fabric: FabricPlan) -> str:
    """The HCA the simulated subnet manager runs on: the first of the topology file."""
    return next(compute_hcas(fabric))[0]


def expected_pkeys(tenants: Sequence[Tenant], fabric: FabricPlan, sm: str | None = None) -> dict[str, set[int]]:
    """Per compute HCA: the pkeys its P_Key table must hold once OpenSM has swept (membership bit
    included: 0xffff is full default membership, 0x7fff limited). `sm`, the SM's own port, is a
    full member of the default partition (SELF=full)."""
    default = DEFAULT_PKEY | (0 if tenants else 0x8000)
    out: dict[str, set[int]] = {}
    for name, pool, _, _ in compute_hcas(fabric):
        out[name] = {default} | {t.partition | (0x8000 if t.full_membership else 0)
                                 for t in tenants if pool.name in t.pools}
    if sm in out:
        out[sm] = (out[sm] - {DEFAULT_PKEY}) | {DEFAULT_PKEY | 0x8000}
    return out


def opensm_options(*, partition_file: str, root_guid_file: str | None) -> dict[str, Any]:
    """The OpenSM options Railyard chooses, as opensm.conf keys. `root_guid_file` is given where
    the tree is not pure (FabricPlan.pure_fat_tree: a partial last spine group, whose spines have
    fewer leaves below); ftree then needs the roots, or it falls back to min-hop silently."""
    out: dict[str, Any] = {
        "routing_engine": ROUTING_ENGINE,
        # ftree routes with LMC 0 only (opensm(8)); a larger LMC silently selects another engine.
        "lmc": 0,
        "partition_config_file": partition_file,
        # Tenants are isolated by the switches too, not only by the HCAs' P_Key tables.
        "part_enforce": "both",
    }
    if root_guid_file:
        out["root_guid_file"] = root_guid_file
    return out


def opensm_conf(options: Mapping[str, Any]) -> str:
    lines = ["# OpenSM options chosen by Railyard (docs/fabric.md); merge into opensm.conf."]
    lines += [f"{k} {v}" for k, v in options.items()]
    return "\n".join(lines) + "\n"


def root_guids(fabric: FabricPlan, subnet: Subnet) -> list[int]:
    by_desc = subnet.by_desc()
    out = []
    for name in root_switches(fabric):
        device = by_desc.get(name)
        if device is None or device.guid is None:
            raise ValueError(f"root switch {name!r} is not in the discovered subnet")
        out.append(device.guid)
    return out


def guid_lines(guids: Iterable[int]) -> str:
    return "".join(f"0x{g:016x}\n" for g in guids)


# --------------------------------------------------------------------------------------------------
# Where to trace routes


class Nic(NamedTuple):
    """A compute HCA by position: its description and (pool, node index, rail)."""

    name: str
    key: tuple[str, int, int]


def _nic(pool: FabricPool, index: int, rail: int) -> Nic:
    return Nic(hca_name(addr.node_name(pool.name, index), pool.nic(rail)), (pool.name, index, rail))


def probe_pairs(fabric: FabricPlan) -> list[tuple[str, Nic, Nic]]:
    """Pairs of compute HCAs whose routes show each kind of path the fabric has: through one leaf,
    to another rail, to the same rail in another scalable unit, and to another spine group."""
    if not fabric.layouts:
        return []
    pl = fabric.layouts[0]
    p, su = pl.pool, fabric.su_nodes
    first = _nic(p, 0, 0)
    out = []
    if p.nodes > 1:
        out.append(("same rail and leaf", first, _nic(p, 1, 0)))
    if p.rails > 1:
        out.append(("another rail, same node", first, _nic(p, 0, p.rails - 1)))
    if pl.units > 1:
        out.append(("same rail, another scalable unit", first, _nic(p, su, 0)))
    if fabric.tiers == 3 and pl.groups > 1:
        last_group_node = (pl.groups - 1) * pl.group_units * su
        out.append(("same rail, another spine group", first, _nic(p, last_group_node, 0)))
        out.append(("another rail, another spine group", first, _nic(p, last_group_node, p.rails - 1)))
    if len(fabric.layouts) > 1:
        q = fabric.layouts[-1].pool
        out.append(("another pool", first, _nic(q, 0, 0)))
    return out
