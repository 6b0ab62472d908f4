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
from typing import TYPE_CHECKING, Iterable, Mapping

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


def switch_lldp_cables(fabric: FabricPlan, switches: Mapping[str, Mapping[str, list]],
                       senders: Mapping[str, tuple[str, Mapping[str, str]]]) -> tuple[set[tuple[End, End]],
                                                                                      set[tuple[End, End]], list[Finding]]:
    """(the planned cables the switches' own LLDP tables judge, the cables they show, findings of
    their own) for an Ethernet fabric. switches: each switch read, {its port as the plan names it
    (routing.port_netdev): the neighbours lldpd heard there (lldp.parse)}; senders: {the system
    name a node's lldpd sends: (its node, {port id it sends (its netdev): its HCA's name})}.

    A switch-to-switch cable is judged where either end's switch was read: a switch's lldpd always
    speaks, so a silent port is a missing cable. A node's cable is judged where its leaf was read
    and the node was heard on some switch read (its lldpd speaks, so its silence on the planned
    port means the cable is not there), or where one of its NICs was heard anywhere (a port holds
    one cable). A port the plan does not name (a management port) is not the fabric's; a neighbour
    that is neither a planned switch nor a node is an `unknown-device`."""
    from railyard.model.fabric.routing import port_number

    names = {s.name for s in fabric.switches()}
    found: set[tuple[End, End]] = set()
    own: list[Finding] = []
    heard_nodes: set[str] = set()
    heard_hcas: set[str] = set()
    for switch in sorted(switches):
        for local, neighbours in sorted(switches[switch].items()):
            here = port_number(fabric.switch, local)
            if here is None:
                continue
            end = End(switch, here)
            for n in neighbours:
                system, port = n.get("system") or n.get("chassis_id") or "?", n.get("port") or "?"
                if system in names:
                    number = port_number(fabric.switch, port)
                    if number is None:
                        own.append(Finding("unknown-device", f"{system} port {port}", "a port of the plan's switches",
                                           f"{end} cabled to it"))
                    else:
                        found.add(cable_of(end, End(system, number)))
                elif system in senders:
                    node, ports = senders[system]
                    heard_nodes.add(node)
                    hca = ports.get(port)
                    if hca is None:
                        own.append(Finding("unknown-device", f"{node} port {port}", "a compute NIC of the plan",
                                           f"cabled to {end}"))
                    else:
                        heard_hcas.add(hca)
                        found.add(cable_of(End(hca, 1), end))
                else:
                    own.append(Finding("unknown-device", system, "no such device", f"cabled to {end}"))
    judged: set[tuple[End, End]] = set()
    for link in fabric.links():
        a, b = link_ends(link)
        if link.tier == "node_leaf":
            if (link.b_device in switches and link.a_device in heard_nodes) or a.device in heard_hcas:
                judged.add(cable_of(a, b))
        elif link.a_device in switches or link.b_device in switches:
            judged.add(cable_of(a, b))
    return judged, found, own


def senders(nodes: Mapping[str, Mapping], planned_netdevs: Mapping[str, Mapping[str, str]]
            ) -> dict[str, tuple[str, Mapping[str, str]]]:
    """{the system name each node's lldpd sends: (the node, {its NICs' netdevs: their HCA names})}:
    as the node's own facts show them where it was read (a host keeps its own hostname), else its
    plan name and the plan's netdevs (planned_netdevs: {node: {RDMA device: netdev}})."""
    out: dict[str, tuple[str, Mapping[str, str]]] = {}
    for node, netdevs in planned_netdevs.items():
        got = nodes.get(node)
        read = got if isinstance(got, Mapping) else {}
        shown = {nic.get("name"): nic.get("netdev") for nic in read.get("nics") or ()}
        ports = {(shown.get(rdma) or netdev): hca_name(node, rdma) for rdma, netdev in netdevs.items()
                 if shown.get(rdma) or netdev}
        out[(read.get("lldp") or {}).get("system") or node] = (node, ports)
    return out


def verify_lldp(fabric: FabricPlan, nodes: Mapping[str, Mapping],
                switches: Mapping[str, Mapping[str, list]] | None = None,
                planned_netdevs: Mapping[str, Mapping[str, str]] | None = None) -> tuple[list[Finding], list[str]]:
    """Every way the cabling LLDP shows differs from the plan, and the rails not judged yet: the
    node-to-leaf cables as the nodes hear them (lldp_cables), and, where `switches` were read, every
    cable as those switches hear it (switch_lldp_cables, the nodes known by senders())."""
    judged, found, own, waiting = lldp_cables(fabric, nodes)
    if switches:
        more, seen, theirs = switch_lldp_cables(fabric, switches, senders(nodes, planned_netdevs or {}))
        judged, found, own = judged | more, found | seen, own + theirs
        settled = {end.device for cable in more for end in cable}
        waiting = [hca for hca in waiting if hca not in settled]
    known = {end.device for cable in planned_cables(fabric) for end in cable}
    return cabling(judged, found, known) + own, waiting
