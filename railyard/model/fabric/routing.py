"""A RoCE fabric's switches as BGP routers (RFC 7938): what each one's FRR is given.

Every switch-to-switch link is a /31 and one eBGP session (roce.py and addressing.py number them);
every switch has a loopback /32, its router id, which it announces. A leaf is its rail's anycast
gateway for its own hosts: it holds the rail subnet's second address on its host side, and
announces the prefixes that exactly cover its hosts' rail addresses (PFs and VFs), so every other
leaf learns a route to them across all its uplinks (ECMP) and answers a host's ARP for a host of
the same rail behind another leaf (proxy ARP: the rail subnet spans the leaves, and hosts keep one
static route per rail). Hosts run no BGP.

Pure: reads a FabricPlan (its switches and links) and the rail addresses of the pools, so the lab
and `railyard plan --frr` render the same routers. Cost grows with the links, like links().
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

from railyard.model import addressing as addr

if TYPE_CHECKING:
    from railyard.model.fabric.geometry import SwitchGeometry
    from railyard.model.fabric.planner import FabricPlan

# FRR's limit on equal-cost paths as Debian builds it (bgpd refuses `maximum-paths` above it).
MAX_ECMP = 256
HOST_SIDE = "hosts"  # a leaf's interface towards its hosts (a bridge of its host ports)


@dataclass(frozen=True)
class Session:
    """One eBGP session: one /31 link seen from one end."""

    interface: str
    address: str
    peer: str
    peer_interface: str
    peer_address: str
    peer_asn: int


@dataclass(frozen=True)
class Router:
    name: str
    tier: str
    asn: int
    loopback: str
    sessions: tuple[Session, ...]
    maximum_paths: int
    gateway: str | None = None
    """A leaf: its rail's anycast gateway as address/prefixlen, on HOST_SIDE."""
    host_prefixes: tuple[str, ...] = ()
    """A leaf: the prefixes covering its hosts' rail addresses, announced in BGP."""
    rail: int | None = None


def port_netdev(geometry: SwitchGeometry, port: int) -> str:
    """A switch port's Linux interface name, Cumulus style: swp<cage>, or swp<cage>s<lane> for a
    cage split into several ports (breakout); at most 15 characters, as Linux requires."""
    if geometry.ports_per_cage == 1:
        return f"swp{port}"
    cage, lane = divmod(port - 1, geometry.ports_per_cage)
    return f"swp{cage + 1}s{lane}"


_NETDEV = re.compile(r"swp(\d+)(?:s(\d+))?")
# SONiC's names (railyard/data/fixtures/sonic/): a port is Ethernet<its first lane>, and its alias,
# which SONiC sends as the port's LLDP id, etp<cage> with a letter per port of a broken-out cage.
_SONIC_NAME = re.compile(r"Ethernet(0|[1-9]\d*)")
_SONIC_ALIAS = re.compile(r"etp([1-9]\d*)([a-z]?)")


def port_number(geometry: SwitchGeometry, netdev: str) -> int | None:
    """port_netdev() read back: the 1-based port a switch's interface name is, or None where the
    name is not one of that switch's ports (another naming, a lane past its cage). Where the
    catalog gives the switch's lanes per cage, SONiC's names and aliases for its ports read too."""
    m = _NETDEV.fullmatch(netdev)
    if m is None:
        return _sonic_port(geometry, netdev) if geometry.lanes_per_cage else None
    cage, lane = int(m.group(1)), m.group(2)
    if geometry.ports_per_cage == 1:
        port = cage if lane is None else None
    else:
        port = (cage - 1) * geometry.ports_per_cage + int(lane) + 1 if lane is not None and int(lane) < geometry.ports_per_cage else None
    return port if port is not None and 1 <= port <= geometry.radix and port_netdev(geometry, port) == netdev else None


def _sonic_port(geometry: SwitchGeometry, name: str) -> int | None:
    """A SONiC name or alias read back to its 1-based port, or None. A port is named by its first
    lane only where a cage's lanes split evenly among its ports (the catalog checks its own)."""
    per_cage, lanes = geometry.ports_per_cage, geometry.lanes_per_cage or 0
    if lanes < 1 or lanes % per_cage:
        return None
    if m := _SONIC_NAME.fullmatch(name):
        cage, first = divmod(int(m.group(1)), lanes)
        lane, off = divmod(first, lanes // per_cage)
        if off:
            return None
    elif m := _SONIC_ALIAS.fullmatch(name):
        cage, letter = int(m.group(1)) - 1, m.group(2)
        # A cage of one port has no letter; a broken-out cage's ports have one each.
        if (per_cage == 1) != (letter == ""):
            return None
        lane = ord(letter) - ord("a") if letter else 0
        if lane >= per_cage:
            return None
    else:
        return None
    port = cage * per_cage + lane + 1
    return port if 1 <= port <= geometry.radix else None


def routers(fabric: FabricPlan, rail_stride: Callable[[str], int], gateways: Mapping[int, str], prefixlen: int) -> Iterator[Router]:
    """Every switch of a RoCE fabric as a router, in switches() order.

    rail_stride: a pool's rail addresses per host (the PF's, then its VFs'); gateways: each rail's
    anycast gateway; prefixlen: the rail subnets'.
    """
    if fabric.kind != "roce" or fabric.asn_base is None or fabric.cidr is None or fabric.loopback_cidr is None:
        raise ValueError(f"a {fabric.kind} fabric has no BGP routers (a roce fabric with asnBase and loopbackCidr has)")
    switches = list(fabric.switches())
    asn = {s.name: s.asn for s in switches}
    sessions: dict[str, list[Session]] = {s.name: [] for s in switches}
    label = fabric.switch
    for link in fabric.links():
        if link.tier == "node_leaf":
            continue
        a_if, b_if = port_netdev(label, link.a_port), port_netdev(label, link.b_port)
        a_ip, b_ip, a_asn, b_asn = link.a_ip, link.b_ip, asn[link.a_device], asn[link.b_device]
        assert a_ip is not None and b_ip is not None and a_asn is not None and b_asn is not None, \
            "a roce fabric with a cidr and an asnBase (checked above) numbers every switch link and switch"
        sessions[link.a_device].append(Session(a_if, a_ip, link.b_device, b_if, b_ip, b_asn))
        sessions[link.b_device].append(Session(b_if, b_ip, link.a_device, a_if, a_ip, a_asn))
    layouts = {pl.pool.name: pl for pl in fabric.layouts}
    for s in switches:
        own = tuple(sessions[s.name])
        paths = min(MAX_ECMP, max(len(own), 1))
        assert s.asn is not None and s.loopback is not None, \
            "asnBase and loopbackCidr (checked above) give every switch its ASN and loopback"
        if s.tier != "leaf":
            yield Router(s.name, s.tier, s.asn, s.loopback, own, paths)
            continue
        assert s.pool is not None and s.unit is not None and s.rail is not None, "a leaf has its pool, unit and rail"
        pl = layouts[s.pool]
        first = s.unit * fabric.su_nodes
        count = min(fabric.su_nodes, pl.pool.nodes - first)
        prefixes = addr.host_prefixes(fabric.cidr, fabric.kind, fabric.rails, s.rail, pl.pool.ordinal, first, count,
                                      rail_stride(pl.pool.name))
        yield Router(s.name, s.tier, s.asn, s.loopback, own, paths, f"{gateways[s.rail]}/{prefixlen}",
                     tuple(prefixes), s.rail)
