"""A lab stack's InfiniBand subnet: the planned fabric as ibsim serves it, with the faults `railyard
lab fault` cabled into it, read by the real ibnetdiscover.

A lab's rails are Linux bridges, which carry IPoIB-free Ethernet frames; the InfiniBand subnet a
real cluster would have is the simulator's. Its description is the plan's topology file
(railyard.model.fabric.subnet.topology_text) until a fault changes it; from then on the stack's
own copy (`.railyard/lab/<stack>/subnet.net`) is the lab's cabling, and `--clear` removes it.

ibsim 0.10 trains a link at the width and speed its port line gives, up to HDR. A plan faster than
that (NDR, XDR) is served at 4xHDR, so widths are still judged, and its speeds are not: the
reading says so, and verify leaves link-speed findings out rather than report every cable.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from railyard import paths
from railyard.model.fabric.subnet import End, link_rate, rate_parts, simulator_limits, topology_text

if TYPE_CHECKING:
    from railyard.model.fabric.planner import FabricPlan

FILE = "subnet.net"
# The fastest lane speed ibsim 0.10 trains at, and the speeds below it, slowest first.
SIM_SPEEDS = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR")
_PORT = re.compile(r'^\[(\d+)\]\t"([^"]+)"\[(\d+)\](.*)$')
_HEAD = re.compile(r'^(?:Ca|Switch)\t\d+ "([^"]+)"')
_RATE = re.compile(r"lid 0 (\d+x[A-Z0-9]+)")


def path(stack: str) -> Path:
    return paths.lab_dir(stack) / FILE


def simulated_rate(fabric: FabricPlan) -> tuple[str, bool]:
    """The rate the lab's subnet cables at, and whether it is the plan's (False: its speed is
    beyond ibsim's, so links train at HDR and speeds are not judged)."""
    rate = link_rate(fabric)
    width, speed = rate_parts(rate)
    if speed in SIM_SPEEDS:
        return rate, True
    return f"{width}HDR", False


def planned(fabric: FabricPlan) -> str:
    rate, _ = simulated_rate(fabric)
    text = topology_text(fabric)
    return text.replace(f"lid 0 {link_rate(fabric)}", f"lid 0 {rate}")


def current(stack: str, fabric: FabricPlan) -> str:
    p = path(stack)
    return p.read_text() if p.is_file() else planned(fabric)


def ibnetdiscover(stack: str, fabric: FabricPlan) -> str:
    """What ibnetdiscover prints on the lab's subnet now."""
    from railyard.sweep import Simulator

    with tempfile.TemporaryDirectory(prefix="railyard-subnet-") as d:
        topo = Path(d) / FILE
        topo.write_text(current(stack, fabric))
        with Simulator(topo, Path(d) / "sim", simulator_limits(fabric)) as sim:
            return sim.ibnetdiscover()


# --- edits of a topology file, as a technician's hands would make them -------------------------

def _lines(text: str) -> list[str]:
    return text.split("\n")


def _find(lines: list[str], end: End) -> int:
    """The index of `end`'s port line."""
    device = None
    for i, line in enumerate(lines):
        head = _HEAD.match(line)
        if head:
            device = head.group(1)
            continue
        m = _PORT.match(line)
        if m and device == end.device and int(m.group(1)) == end.port:
            return i
    raise KeyError(f"no cable on {end} in the lab's subnet")


def far_end(text: str, end: End) -> End:
    m = _PORT.match(_lines(text)[_find(_lines(text), end)])
    assert m is not None
    return End(m.group(2), int(m.group(3)))


def swap(text: str, a: End, b: End) -> str:
    """The cables on `a` and `b` exchanged at those ends (their far ends stay where they are)."""
    lines = _lines(text)
    fa, fb = far_end(text, a), far_end(text, b)
    ia, ib, ifa, ifb = _find(lines, a), _find(lines, b), _find(lines, fa), _find(lines, fb)
    la, lb = _PORT.match(lines[ia]), _PORT.match(lines[ib])
    assert la is not None and lb is not None
    lines[ia] = f'[{a.port}]\t"{fb.device}"[{fb.port}]{lb.group(4)}'
    lines[ib] = f'[{b.port}]\t"{fa.device}"[{fa.port}]{la.group(4)}'
    for i, new_far in ((ifa, b), (ifb, a)):
        m = _PORT.match(lines[i])
        assert m is not None
        rest = re.sub(r'# "[^"]*"', f'# "{new_far.device}"', m.group(4))
        lines[i] = f'[{m.group(1)}]\t"{new_far.device}"[{new_far.port}]{rest}'
    return "\n".join(lines)


def unplug(text: str, a: End) -> str:
    """The cable on `a` removed, both its ends."""
    lines = _lines(text)
    far = far_end(text, a)
    gone = {_find(lines, a), _find(lines, far)}
    return "\n".join(line for i, line in enumerate(lines) if i not in gone)


def retrain(text: str, a: End, rate: str) -> str:
    """The cable on `a` trained at `rate` (`2xHDR`), at both ends."""
    lines = _lines(text)
    for i in (_find(lines, a), _find(lines, far_end(text, a))):
        if not _RATE.search(lines[i]):
            raise KeyError(f"the lab's subnet gives no rate for {a}'s cable")
        lines[i] = _RATE.sub(f"lid 0 {rate}", lines[i])
    return "\n".join(lines)
