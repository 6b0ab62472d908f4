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


def lldp_cables(fabric: FabricPlan, nodes: Mapping[str, Mapping]) -> tuple[set[tuple[End, End]],
                                                                           set[tuple[End, End]], list[Finding], list[str]]:
    """(the planned cables LLDP can judge, the cables it shows, findings of its own, the rails not
    judged yet) for an Ethernet fabric, from each node's facts (sysfs_discovery.host_facts with
    lldp=True): its NICs' netdevs and the neighbours each one's lldpd heard. Only the hosts' side
    is read, so only node-to-leaf cables are judged, and only those of nodes whose lldpd answered.
    A rail unheard by an lldpd still listening (started under lldp.LISTENING_S ago) is not judged
    yet. A neighbour is named by the system name and port id its switch sends (`swp12`, Cumulus's
    and the plan's naming, routing.port_netdev); a port id that is no port of the plan's switch is
    a finding of its own, an `unknown-device`."""
    from railyard.model.fabric.routing import port_number

    planned_by_node: dict[str, list[tuple[str, tuple[End, End]]]] = {}
    for link in fabric.links():
        if link.tier == "node_leaf":
            planned_by_node.setdefault(link.a_device, []).append(
                (hca_name(link.a_device, link.a_port), cable_of(*link_ends(link))))
    judged: set[tuple[End, End]] = set()
    found: set[tuple[End, End]] = set()
    own: list[Finding] = []
    waiting: list[str] = []
    for node in sorted(nodes):
        reading = nodes[node].get("lldp") or {}
        heard = reading.get("neighbours")
        if heard is None or node not in planned_by_node:
            continue
        netdevs = {hca_name(node, nic.get("name")): nic.get("netdev") for nic in nodes[node].get("nics") or ()}
        for hca, cable in planned_by_node[node]:
            if reading.get("listening_s") is not None and not heard.get(netdevs.get(hca) or ""):
                waiting.append(hca)
                continue
            judged.add(cable)
            for n in heard.get(netdevs.get(hca) or "", ()):
                system, port = n.get("system") or n.get("chassis_id") or "?", n.get("port") or "?"
                number = port_number(fabric.switch, port)
                if number is None:
                    own.append(Finding("unknown-device", f"{system} port {port}", "a port of the plan's switches",
                                       f"{hca} ({netdevs[hca]}) cabled to it"))
                    continue
                found.add(cable_of(End(hca, 1), End(system, number)))
    return judged, found, own, waiting


class Sender(NamedTuple):
    """A node as its switches' LLDP tables name it: the node, {the port ids its lldpd sends (its
    NICs' netdevs): their HCA names}, and whether its system name is the one its own facts gave
    (else its plan name, which a host keeping its own hostname does not send)."""

    node: str
    ports: Mapping[str, str]
    confirmed: bool


def _listed(items: list[str], shown: int = 3) -> str:
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


def switch_lldp_cables(fabric: FabricPlan, switches: Mapping[str, Mapping[str, list]],
                       senders: Mapping[str, Sender], young: Iterable[str] = (), ambiguous: Iterable[str] = ()
                       ) -> tuple[set[tuple[End, End]], set[tuple[End, End]], list[Finding], list[str]]:
    """(the planned cables the switches' own LLDP tables judge, the cables they show, findings of
    their own, notes on what they could not judge) for an Ethernet fabric. switches: each switch
    read, {its port as the plan names it (routing.port_netdev): the neighbours lldpd heard there
    (lldp.parse)}; senders: each node by the system name its lldpd sends (senders()); young: the
    nodes whose lldpd started under lldp.LISTENING_S ago; ambiguous: system names several nodes
    send, which are skipped.

    A table whose ports are none of them named as the plan names them cannot be matched to it,
    and is not judged (a note says so). A switch-to-switch cable is judged where a switch at one
    end was read and the other end speaks (its table was read, or a read switch hears it): a
    speaking switch's silent port is a missing cable, and a switch whose lldpd is down judges
    nothing. A node's cable is judged where its leaf was read and the node was heard on some read
    switch (its lldpd speaks, so its silence on the planned port means no cable), unless its lldpd
    is young (a NIC slow to come up is not a missing cable yet); or where that NIC was heard
    anywhere (a port holds one cable). A port the plan does not name (a management port) is not
    the fabric's. A neighbour that is neither a planned switch nor a node is an `unknown-device`,
    one finding per device, unless it sits where the plan puts a node whose own name is not known
    (not read: a host may send its own hostname): then a note says so."""
    from railyard.model.fabric.routing import port_netdev, port_number

    names = {s.name for s in fabric.switches()}
    young, ambiguous = set(young), set(ambiguous)
    notes: list[str] = []
    read: dict[str, Mapping[str, list]] = {}
    for switch, table in sorted(switches.items()):
        if any(table.values()) and not any(port_number(fabric.switch, p) is not None for p in table):
            notes.append(f"{switch}: none of its ports is named as the plan names them ({port_netdev(fabric.switch, 1)}"
                         f", ...; heard on {_listed(sorted(table))}), so its table is not judged")
        else:
            read[switch] = table
    planned_peer: dict[End, End] = {}
    hca_node: dict[str, str] = {}
    for link in fabric.links():
        a, b = link_ends(link)
        planned_peer[a], planned_peer[b] = b, a
        if link.tier == "node_leaf":
            hca_node[a.device] = link.a_device
    unconfirmed = {s.node for s in senders.values() if not s.confirmed}
    found: set[tuple[End, End]] = set()
    heard_nodes: set[str] = set()
    heard_hcas: set[str] = set()
    heard_switches: set[str] = set()
    strangers: dict[str, list[str]] = {}
    foreign_ports: dict[str, list[str]] = {}
    unnamed: dict[str, list[str]] = {}
    for switch in sorted(read):
        for local, neighbours in sorted(read[switch].items()):
            here = port_number(fabric.switch, local)
            if here is None:
                continue
            end = End(switch, here)
            for n in neighbours:
                system, port = n.get("system") or n.get("chassis_id") or "?", n.get("port") or "?"
                if system in ambiguous:
                    continue
                if system in names:
                    heard_switches.add(system)
                    number = port_number(fabric.switch, port)
                    if number is None:
                        foreign_ports.setdefault(system, []).append(f"{port} (on {end})")
                    else:
                        found.add(cable_of(end, End(system, number)))
                elif system in senders:
                    sender = senders[system]
                    heard_nodes.add(sender.node)
                    hca = sender.ports.get(port)
                    if hca is None:
                        foreign_ports.setdefault(sender.node, []).append(f"{port} (on {end})")
                    else:
                        heard_hcas.add(hca)
                        found.add(cable_of(End(hca, 1), end))
                else:
                    peer = planned_peer.get(end)
                    owner = hca_node.get(peer.device) if peer is not None else None
                    if owner in unconfirmed:
                        unnamed.setdefault(owner, []).append(f"{system} on {end}")
                    else:
                        strangers.setdefault(system, []).append(str(end))
    own = [Finding("unknown-device", system, "no such device", f"cabled to {_listed(ends)}")
           for system, ends in sorted(strangers.items())]
    own += [Finding("unknown-device", f"{device} port {ports[0].split(' ')[0]}" if len(ports) == 1
                    else f"{device} ports", "ports of the plan", f"port ids none of the plan's: {_listed(ports)}")
            for device, ports in sorted(foreign_ports.items())]
    if unnamed:
        notes.append("heard where the plan puts nodes that were not read, under names that are not theirs in the "
                     f"plan (a host may send its own hostname): {_listed([f'{n} ({_listed(e, 1)})' for n, e in sorted(unnamed.items())])}; "
                     "those cables are judged from the nodes' side only")
    speaking = set(read) | heard_switches
    judged: set[tuple[End, End]] = set()
    for link in fabric.links():
        a, b = link_ends(link)
        if link.tier == "node_leaf":
            if a.device in heard_hcas or (link.b_device in read and link.a_device in heard_nodes
                                          and link.a_device not in young):
                judged.add(cable_of(a, b))
        elif (link.a_device in read or link.b_device in read) and {link.a_device, link.b_device} <= speaking:
            judged.add(cable_of(a, b))
    return judged, found, own, notes


def senders(nodes: Mapping[str, Mapping], planned_netdevs: Mapping[str, Mapping[str, str | None]]
            ) -> tuple[dict[str, Sender], set[str], list[str]]:
    """({the system name each node's lldpd sends: its Sender}, the names several send, notes): names and netdevs as the
    node's own facts show them where it was read (a host keeps its own hostname), else its plan
    name and the plan's netdevs (planned_netdevs: {node: {RDMA device: netdev, or None where the
    plan does not know it}}). Nodes that send one name between them (a cloned image's
    `localhost`) cannot be told apart in a switch's table: they are left out, and a note says so."""
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
        by_name.setdefault(system or node, []).append(Sender(node, ports, bool(system)))
    out = {name: found[0] for name, found in by_name.items() if len(found) == 1}
    notes = [f"{_listed(sorted(s.node for s in found))} send one system name, {name!r}: their switches' tables "
             "cannot tell them apart, so those cables are judged from the nodes' side only"
             for name, found in sorted(by_name.items()) if len(found) > 1]
    return out, {name for name, found in by_name.items() if len(found) > 1}, notes


def verify_lldp(fabric: FabricPlan, nodes: Mapping[str, Mapping],
                switches: Mapping[str, Mapping[str, list]] | None = None,
                planned_netdevs: Mapping[str, Mapping[str, str | None]] | None = None
                ) -> tuple[list[Finding], list[str], list[str]]:
    """Every way the cabling LLDP shows differs from the plan, the rails not judged yet, and notes
    on what the switches' tables could not judge: the node-to-leaf cables as the nodes hear them
    (lldp_cables), and, where `switches` were read, every cable as those switches hear it
    (switch_lldp_cables, the nodes known by senders())."""
    judged, found, own, waiting = lldp_cables(fabric, nodes)
    notes: list[str] = []
    if switches:
        known_by, shared, notes = senders(nodes, planned_netdevs or {})
        young = {n for n, got in nodes.items() if (got.get("lldp") or {}).get("listening_s") is not None}
        more, seen, theirs, said = switch_lldp_cables(fabric, switches, known_by, young, shared)
        judged, found, own, notes = judged | more, found | seen, own + theirs, notes + said
        settled = {end.device for cable in more for end in cable}
        waiting = [hca for hca in waiting if hca not in settled]
    known = {end.device for cable in planned_cables(fabric) for end in cable}
    return cabling(judged, found, known) + own, waiting, notes
