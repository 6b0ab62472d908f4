"""An InfiniBand subnet as discovered (ibnetdiscover) held against the planned fabric: what a
technician acts on, one finding per fault.

Names are the join, as in subnet.py: an HCA is "<host> <device>" (rdma-ndd's node description),
a switch its plan name. Every planned cable is one of: where it should be; moved (one end found on
another port: `cable-misplaced`); exchanged with another planned cable (two ends found on each
other's ports: one `cable-swapped`, not two moves); or gone (`link-missing`). A cable the plan
does not have is `link-extra`, and a device it does not have `unknown-device`. A cable where it
should be is checked for its width and speed apart (`link-width`, `link-speed`): a simulator that
shows every link at its default speed (ibsim 0.10 predates NDR) is still judged on its cabling.

Pure: the subnet is read elsewhere (railyard/sweep runs ibsim and ibnetdiscover; a dump is a file).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterable

from railyard.model.fabric.subnet import End, Subnet, cable_of, link_rate, planned_cables, rate_parts

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
    found = subnet.named_cables()
    plan_peer, found_peer = _peers(planned), _peers(found)
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
    known = {end.device for cable in planned for end in cable}
    # Every device the plan lacks, whether or not a finding above names its cable.
    unknown = sorted({end.device for cable in found for end in cable if end.device not in known})
    for device in unknown:
        out.append(Finding("unknown-device", device, "no such device", "a device on the fabric"))
    for a, b in sorted(extra):
        if a.device in known and b.device in known:
            out.append(Finding("link-extra", f"{a} <-> {b}", "no cable", "a cable"))
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
