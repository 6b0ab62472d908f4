"""A fabric's cabling as discovered held against the plan: an InfiniBand subnet as ibnetdiscover
shows it, or an Ethernet fabric's cables as LLDP shows them: the node-to-leaf ones in the hosts'
neighbours, and every one in the switches' own tables where those are read. What a technician
acts on, one finding per fault.

Names are the join, as in subnet.py: an HCA is "<host> <device>" (rdma-ndd's node description),
a switch its plan name. Every planned cable is one of: where it should be; moved (one end found on
another port: `cable-misplaced`); exchanged with another planned cable (two ends found on each
other's ports: one `cable-swapped`, not two moves); or gone (`link-missing`). A cable the plan
does not have is `link-extra`, and a device it does not have `unknown-device`. A cable where it
should be is checked for its width and speed apart (`link-width`, `link-speed`): a simulator that
shows every link at its default speed (ibsim 0.10 predates NDR) is still judged on its cabling.

Pure: the subnet is read elsewhere (railyard/sweep runs ibsim and ibnetdiscover; a dump is a file),
the hosts' LLDP neighbours by their facts program (railyard.model.lldp), and the switches' tables by
the stack's driver.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, NamedTuple

from railyard.model.fabric.subnet import End, Subnet, cable_of, hca_name, link_ends, link_rate, planned_cables, rate_parts

if TYPE_CHECKING:
    from railyard.model.fabric.planner import FabricPlan

KINDS = ("cable-swapped", "cable-misplaced", "link-missing", "link-extra", "link-width", "link-speed",
         "unknown-device")

@dataclass(frozen=True)
class Finding:
    """One fault: its kind (KINDS), where it is, what the plan says and what was found."""

    kind: str
    where: str
    planned: str
    found: str

    def __str__(self) -> str:
        return f"{self.where}: {self.found}, planned {self.planned}"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def _peers(cables: Iterable[tuple[End, End]]) -> dict[End, End]:
    out = {}
    for a, b in cables:
        out[a] = b
        out[b] = a
    return out


def verify(fabric: FabricPlan, subnet: Subnet) -> list[Finding]:
    """Every way `subnet` differs from the plan of `fabric`, cabling first, then rates."""
    planned = set(planned_cables(fabric))
    out = cabling(planned, subnet.named_cables())
    want_width, want_speed = rate_parts(link_rate(fabric))
    for (a, b), rate in sorted(subnet.named_rates().items()):
        if (a, b) not in planned:
            continue
        width, speed = rate_parts(rate)
        if width != want_width:
            out.append(Finding("link-width", f"{a} <-> {b}", want_width, f"trained at {width}"))
        if speed != want_speed:
            out.append(Finding("link-speed", f"{a} <-> {b}", want_speed, f"trained at {speed}"))
    return out


def cabling(planned: set[tuple[End, End]], found: set[tuple[End, End]],
            known: set[str] | None = None) -> list[Finding]:
    """Every way the `found` cables differ from the `planned` ones (both as cable_of() pairs):
    moved, exchanged, missing or extra cables, and devices the plan does not have (`known`: the
    plan's devices, where `planned` is only the part of the plan that was read)."""
    # Sorted: where one end has two peers (a port hearing two neighbours), the same one is kept at every run.
    plan_peer, found_peer = _peers(sorted(planned)), _peers(sorted(found))
    missing = sorted(planned - found)
    extra = found - planned  # found cables no finding has explained yet
    out: list[Finding] = []
    settled: set[tuple[End, End]] = set()

    def unexplained(end: End, other: End) -> End | None:
        """Where `end` is found instead of on `other`, if its cable there is not explained yet."""
        at = found_peer.get(end)
        return at if at is not None and at != other and cable_of(end, at) in extra else None

    for cable in missing:
        if cable in settled:
            continue
        settled.add(cable)
        moved = next(((end, other, at) for end, other in (cable, cable[::-1])
                      if (at := unexplained(end, other)) is not None), None)
        if moved is None:
            out.append(Finding("link-missing", f"{cable[0]} <-> {cable[1]}", "a cable", "no cable"))
            continue
        end, other, at = moved
        extra.discard(cable_of(end, at))
        partner = plan_peer.get(at)
        # Exchanged: `end` sits where `partner` belongs and `partner` where `end` does.
        if partner is not None and found_peer.get(partner) == other and cable_of(partner, other) in extra:
            settled.add(cable_of(partner, at))
            extra.discard(cable_of(partner, other))
            out.append(Finding("cable-swapped", f"{end} and {partner}",
                               f"{end} to {other}, {partner} to {at}", f"{end} to {at}, {partner} to {other}"))
            continue
        out.append(Finding("cable-misplaced", str(end), f"cabled to {other}", f"cabled to {at}"))
    if known is None:
        known = {end.device for cable in planned for end in cable}
    # Every device the plan lacks, whether or not a finding above names its cable.
    unknown = sorted({end.device for cable in found for end in cable if end.device not in known})
    for device in unknown:
        out.append(Finding("unknown-device", device, "no such device", "a device on the fabric"))
    for a, b in sorted(extra):
        if a.device in known and b.device in known:
            out.append(Finding("link-extra", f"{a} <-> {b}", "no cable", "a cable"))
    return out


def _foreign(ports: Mapping[str, list[tuple[str, str]]]) -> list[Finding]:
    """One `unknown-device` per device whose port ids (port, where heard) are none of the plan's."""
    out = []
    for device, heard in sorted(ports.items()):
        where = f"{device} port {heard[0][0]}" if len({p for p, _ in heard}) == 1 else f"{device} ports"
        out.append(Finding("unknown-device", where, "ports of the plan",
                           f"port ids none of the plan's: {_listed([f'{p} (heard on {at})' for p, at in heard])}"))
    return out


def lldp_cables(fabric: FabricPlan, nodes: Mapping[str, Mapping]) -> tuple[set[tuple[End, End]],
                                                                           set[tuple[End, End]], list[Finding], list[str]]:
    """(the planned cables LLDP can judge, the cables it shows, findings of its own, the rails not
    judged yet) for an Ethernet fabric, from each node's facts (sysfs_discovery.host_facts with
    lldp=True): its NICs' netdevs and the neighbours each one's lldpd heard. Only the hosts' side
    is read, so only node-to-leaf cables are judged, and only those of nodes whose lldpd answered.
    A rail unheard by an lldpd still listening (started under lldp.LISTENING_S ago) is not judged
    yet. A neighbour is named by the system name and port id its switch sends, read as one of the
    plan's ports by routing.port_number (`swp12`, Cumulus's and the plan's naming, or SONiC's alias
    `etp3a` where the catalog gives the switch's lanes); port ids that are no port of the plan's
    switch are one `unknown-device` for that switch, and a rail that hears only such ids is not
    judged (a switch naming its ports otherwise cannot be matched to the plan)."""
    from railyard.model.fabric.routing import port_number

    planned_by_node: dict[str, list[tuple[str, tuple[End, End]]]] = {}
    for link in fabric.links():
        if link.tier == "node_leaf":
            planned_by_node.setdefault(link.a_device, []).append(
                (hca_name(link.a_device, link.a_port), cable_of(*link_ends(link))))
    judged: set[tuple[End, End]] = set()
    found: set[tuple[End, End]] = set()
    foreign: dict[str, list[tuple[str, str]]] = {}
    waiting: list[str] = []
    for node in sorted(nodes):
        reading = nodes[node].get("lldp") or {}
        heard = reading.get("neighbours")
        if heard is None or node not in planned_by_node:
            continue
        netdevs = {hca_name(node, nic.get("name")): nic.get("netdev") for nic in nodes[node].get("nics") or ()}
        for hca, cable in planned_by_node[node]:
            neighbours = heard.get(netdevs.get(hca) or "", ())
            if reading.get("listening_s") is not None and not neighbours:
                waiting.append(hca)
                continue
            matched = not neighbours
            for n in neighbours:
                system, port = n.get("system") or n.get("chassis_id") or "?", n.get("port") or "?"
                number = port_number(fabric.switch, port)
                if number is None:
                    foreign.setdefault(system, []).append((port, f"{hca} ({netdevs[hca]})"))
                    continue
                matched = True
                found.add(cable_of(End(hca, 1), End(system, number)))
            if matched:
                judged.add(cable)
    return judged, found, _foreign(foreign), waiting


class Sender(NamedTuple):
    """A node as its switches' LLDP tables name it: the node, {the port ids its lldpd sends (its
    NICs' netdevs): their HCA names}, whether its system name is the one its own facts gave (else
    its plan name, which a host keeping its own hostname does not send), and whether its port ids
    are the ones its facts gave (else the plan's netdevs, predicted from its PCI layout)."""

    node: str
    ports: Mapping[str, str]
    confirmed: bool
    ports_read: bool = True


def _listed(items: list[str], shown: int = 3) -> str:
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


def matched_tables(fabric: FabricPlan, switches: Mapping[str, Mapping[str, list]], known: Iterable[str] = ()
                   ) -> tuple[dict[str, Mapping[str, list]], list[str]]:
    """(the switches' tables that can be held to the plan, a note on each that cannot): a table
    that heard no one (an lldpd started just now has not heard its neighbours yet) says nothing,
    and one whose ports that hear a planned switch or a `known` system (a node's name) are none of
    them named as routing.port_number reads (Junos's `et-0/0/0`) cannot be matched to it. A switch
    whose fabric ports are dark, with only a management port heard, is still held to the plan."""
    from railyard.model.fabric.routing import port_netdev, port_number

    ours = {s.name for s in fabric.switches()} | set(known)
    kept: dict[str, Mapping[str, list]] = {}
    notes: list[str] = []
    for switch, table in sorted(switches.items()):
        if not any(table.values()):
            notes.append(f"{switch}: its lldpd has heard no neighbour (started just now?), so its table is not judged")
            continue
        named = [p for p in table if port_number(fabric.switch, p) is not None]
        fabric_ports = [p for p, heard in table.items() if any(n.get("system") in ours for n in heard)]
        if not named and fabric_ports:
            notes.append(f"{switch}: none of its ports is named as the plan names them "
                         f"({port_netdev(fabric.switch, 1)}, ...; heard on {_listed(sorted(fabric_ports))}), "
                         "so its table is not judged")
            continue
        kept[switch] = table
    return kept, notes


def switch_lldp_cables(fabric: FabricPlan, switches: Mapping[str, Mapping[str, list]],
                       senders: Mapping[str, Sender], young: Iterable[str] = (), ambiguous: Iterable[str] = ()
                       ) -> tuple[set[tuple[End, End]], set[tuple[End, End]], list[Finding], list[str]]:
    """(the planned cables the switches' own LLDP tables judge, the cables they show, findings of
    their own, notes on what they could not judge) for an Ethernet fabric. switches: each switch
    read, {its port as the switch names it, which routing.port_number reads as one of the plan's:
    the neighbours lldpd heard there (lldp.parse)}, as matched_tables() keeps them; senders: each node by the system name its lldpd
    sends (senders()); young: the nodes whose lldpd started under lldp.LISTENING_S ago; ambiguous:
    system names several nodes send, which are skipped.

    A switch-to-switch cable is judged where a switch at one end was read and the other end speaks
    in the plan's words (its table was read, or a read switch hears it with a port id of the
    plan's): a speaking switch's silent port is a missing cable, and a switch whose lldpd is down,
    or that names its ports otherwise, judges nothing. A node's cable is judged where its leaf was
    read and the node was heard on some read switch (its lldpd speaks, so its silence on the
    planned port means no cable), unless its lldpd is young (a NIC slow to come up is not a missing
    cable yet) or its port ids are the plan's prediction, not its own facts; or where that NIC was
    heard anywhere (a port holds one cable). A port the plan does not name (a management port) is
    not the fabric's. A neighbour that is neither a planned switch nor a node is one
    `unknown-device` per device, unless it sits where the plan puts a node whose own name is not
    known and that is heard nowhere under its plan name (a host may send its own hostname): then a
    note says so."""
    from railyard.model.fabric.routing import port_number

    names = {s.name for s in fabric.switches()}
    young, ambiguous = set(young), set(ambiguous)
    planned_peer: dict[End, End] = {}
    hca_node: dict[str, str] = {}
    for link in fabric.links():
        a, b = link_ends(link)
        planned_peer[a], planned_peer[b] = b, a
        if link.tier == "node_leaf":
            hca_node[a.device] = link.a_device
    by_node = {s.node: s for s in senders.values()}
    confirmed = {s.node for s in senders.values() if s.confirmed}
    found: set[tuple[End, End]] = set()
    heard_nodes: set[str] = set()
    heard_hcas: set[str] = set()
    heard_switches: set[str] = set()
    strangers: dict[str, list[str]] = {}
    foreign: dict[str, list[tuple[str, str]]] = {}
    guessed: dict[str, list[str]] = {}
    unnamed: dict[str, list[tuple[str, str]]] = {}
    for switch in sorted(switches):
        for local, neighbours in sorted(switches[switch].items()):
            here = port_number(fabric.switch, local)
            if here is None:
                continue
            end = End(switch, here)
            for n in neighbours:
                system, port = n.get("system") or n.get("chassis_id") or "?", n.get("port") or "?"
                if system in ambiguous:
                    continue
                if system in names:
                    number = port_number(fabric.switch, port)
                    if number is None:
                        foreign.setdefault(system, []).append((port, str(end)))
                    else:
                        heard_switches.add(system)
                        found.add(cable_of(end, End(system, number)))
                elif system in senders:
                    sender = senders[system]
                    heard_nodes.add(sender.node)
                    hca = sender.ports.get(port)
                    if hca is not None:
                        heard_hcas.add(hca)
                        found.add(cable_of(End(hca, 1), end))
                    elif sender.ports_read:
                        foreign.setdefault(sender.node, []).append((port, str(end)))
                    else:
                        guessed.setdefault(sender.node, []).append(f"{port} on {end}")
                else:
                    peer = planned_peer.get(end)
                    owner = hca_node.get(peer.device) if peer is not None else None
                    if owner is not None and owner not in confirmed:
                        unnamed.setdefault(owner, []).append((system, str(end)))
                    else:
                        strangers.setdefault(system, []).append(str(end))
    for owner in [o for o in unnamed if o in heard_nodes]:  # heard under its plan name elsewhere: someone else
        for system, at in unnamed.pop(owner):
            strangers.setdefault(system, []).append(at)
    own = [Finding("unknown-device", system, "no such device", f"cabled to {_listed(ends)}")
           for system, ends in sorted(strangers.items())]
    own += _foreign(foreign)
    notes: list[str] = []
    if unnamed:
        notes.append("heard where the plan puts nodes whose own system name is not known (not read, or their lldpd "
                     "did not say it), under other names (a host may send its own hostname): "
                     f"{_listed([f'{n} ({e[0][0]} on {e[0][1]})' for n, e in sorted(unnamed.items())])}; "
                     "those cables are not judged from the switches' side")
    if guessed:
        notes.append("port ids not the plan's predicted netdevs, from nodes that were not read: "
                     f"{_listed([f'{n} ({_listed(e, 1)})' for n, e in sorted(guessed.items())])}; "
                     "only their NICs that were recognised are judged from the switches' side")
    speaking = set(switches) | heard_switches
    judged: set[tuple[End, End]] = set()
    for link in fabric.links():
        a, b = link_ends(link)
        if link.tier == "node_leaf":
            whole = link.a_device in by_node and by_node[link.a_device].ports_read
            if a.device in heard_hcas or (link.b_device in switches and link.a_device in heard_nodes
                                          and link.a_device not in young and whole):
                judged.add(cable_of(a, b))
        elif (link.a_device in switches or link.b_device in switches) and {link.a_device, link.b_device} <= speaking:
            judged.add(cable_of(a, b))
    return judged, found, own, notes


def senders(nodes: Mapping[str, Mapping], planned_netdevs: Mapping[str, Mapping[str, str | None]]
            ) -> tuple[dict[str, Sender], set[str], list[str]]:
    """({the system name each node's lldpd sends: its Sender}, the names several send, notes): names
    and netdevs as the node's own facts show them where it was read (a host keeps its own
    hostname), else its plan name and the plan's netdevs (planned_netdevs: {node: {RDMA device:
    netdev, or None where the plan does not know it}}). A name a node's own facts give wins over
    the same name only assumed for another (its plan name). Nodes whose facts give one name between
    them (a cloned image's `localhost`) cannot be told apart in a switch's table: they are left
    out, and a note says so."""
    by_name: dict[str, list[Sender]] = {}
    for node, netdevs in planned_netdevs.items():
        got = nodes.get(node)
        facts = got if isinstance(got, Mapping) else {}
        shown = {nic.get("name"): nic.get("netdev") for nic in facts.get("nics") or ()}
        ports: dict[str, str] = {}
        for rdma, netdev in netdevs.items():
            port = shown.get(rdma) or netdev
            if port:
                ports[str(port)] = hca_name(node, rdma)
        system = (facts.get("lldp") or {}).get("system")
        by_name.setdefault(system or node, []).append(
            Sender(node, ports, bool(system), ports_read=bool(shown) and all(shown.get(r) for r in netdevs)))
    out: dict[str, Sender] = {}
    shared: set[str] = set()
    notes: list[str] = []
    for name, claims in sorted(by_name.items()):
        own = [c for c in claims if c.confirmed]
        if len(own) > 1 or (not own and len(claims) > 1):
            shared.add(name)
            notes.append(f"{_listed(sorted(c.node for c in claims))} send one system name, {name!r}: their switches' "
                         "tables cannot tell them apart, so those cables are judged from the nodes' side only")
        else:
            out[name] = own[0] if own else claims[0]
    return out, shared, notes


def verify_lldp(fabric: FabricPlan, nodes: Mapping[str, Mapping],
                switches: Mapping[str, Mapping[str, list]] | None = None,
                planned_netdevs: Mapping[str, Mapping[str, str | None]] | None = None
                ) -> tuple[list[Finding], list[str], list[str], bool]:
    """Every way the cabling LLDP shows differs from the plan, the rails not judged yet, notes on
    what the switches' tables could not judge, and whether any cable was judged: the node-to-leaf
    cables as the nodes hear them (lldp_cables; `nodes` may hold nodes without an LLDP reading,
    whose facts still name their netdevs), and, where `switches` were read, every cable as those
    switches hear it (switch_lldp_cables over matched_tables(), the nodes known by senders())."""
    judged, found, own, waiting = lldp_cables(fabric, nodes)
    notes: list[str] = []
    if switches:
        known_by, shared, notes = senders(nodes, planned_netdevs or {})
        kept, set_aside = matched_tables(fabric, switches, set(known_by) | set(shared))
        young = {n for n, got in nodes.items() if (got.get("lldp") or {}).get("listening_s") is not None}
        more, seen, theirs, said = switch_lldp_cables(fabric, kept, known_by, young, shared)
        judged, found, own, notes = judged | more, found | seen, own + theirs, notes + set_aside + said
        settled = {end.device for cable in more for end in cable}
        waiting = [hca for hca in waiting if hca not in settled]
    known = {end.device for cable in planned_cables(fabric) for end in cable}
    return cabling(judged, found, known) + own, waiting, notes, bool(judged)
