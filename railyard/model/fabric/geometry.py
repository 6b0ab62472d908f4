"""The planner's inputs from the catalog: a switch model at the fabric's port speed (radix with
breakout ports counted, cages and optics), and FabricError for parameters it cannot build from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from railyard.model.errors import Problem, SpecError
from railyard.model.speeds import SPEED_GBPS

_PATH = "railyard:fabric.compute"


class FabricError(SpecError):
    """A fabric the planner cannot build from these parameters (reported like any spec problem)."""


def _fail(key: str, found: Any, allowed: str, hint: str = "") -> FabricError:
    return FabricError([Problem(f"{_PATH}.{key}" if key else _PATH, str(found), allowed, hint)])


@dataclass(frozen=True)
class SwitchGeometry:
    """A switch model as the planner sees it, at the fabric's port speed."""

    model: str
    radix: int              # ports at this speed (breakout counted)
    gbps: int               # per port
    ports_per_cage: int = 1
    cage: str = "OSFP"
    optic: str = "unknown"  # the transceiver the catalog names, if it does
    cages_known: bool = True
    """False where the catalog gives no cage table: ports are counted, transceivers are not."""
    lanes_per_cage: int | None = None
    """A cage's SerDes lanes, where the catalog gives them: SONiC numbers its ports by first lane."""

    def label(self, port: int) -> str:
        """Front-panel name of a 1-based port: `cage/lane` when a cage carries several ports."""
        if self.ports_per_cage == 1:
            return str(port)
        cage, lane = divmod(port - 1, self.ports_per_cage)
        return f"{cage + 1}/{lane + 1}"

    def cages(self, ports: int) -> int:
        """Cages (transceivers) that ports 1..ports occupy."""
        return -(-ports // self.ports_per_cage)

    def cages_of(self, *spans: tuple[int, int]) -> int:
        """Cages that the ports of sorted, disjoint 0-based spans (start, count) occupy."""
        total, last = 0, -1
        for start, count in spans:
            if count <= 0:
                continue
            first, end = start // self.ports_per_cage, (start + count - 1) // self.ports_per_cage
            total += end - first + 1 - (1 if first == last else 0)
            last = end
        return total

    @property
    def optic_name(self) -> str:
        if not self.cages_known:
            return f"unknown: the catalog gives no cages for {self.model}"
        if self.optic and self.optic != "unknown":
            return self.optic
        if self.ports_per_cage == 1:
            return f"{self.cage} {self.gbps}G"
        return f"{self.cage} {self.ports_per_cage}x{self.gbps}G (breakout)"


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def switch_geometry(switch: Any, speed: str) -> SwitchGeometry:
    """The catalog's switch at `speed`: breakout ports counted, cages from its cage table."""
    model = str(_get(switch, "id") or _get(switch, "name") or "switch")
    speeds = _get(switch, "speeds") or {}
    radix = speeds.get(speed) if hasattr(speeds, "get") else None
    if not isinstance(radix, int):
        if speeds:
            raise _fail("speed", speed, f"a speed of {model}: {', '.join(sorted(speeds))}",
                        f"{model} has no ports at {speed}")
        radix = _get(switch, "ports")
    if not isinstance(radix, int) or radix < 2:
        raise _fail("switch", model, "a switch whose catalog entry gives its port count")
    cages = _get(switch, "cages")
    if hasattr(cages, "get"):  # the raw catalog YAML: cages: {count, type, optic, lanes}
        count, cage, optic, lanes = cages.get("count"), cages.get("type"), cages.get("optic"), cages.get("lanes")
    else:
        count, cage, optic, lanes = cages, _get(switch, "cage_type"), _get(switch, "optic"), _get(switch, "lanes_per_cage")
    # A cage carries more ports when broken out: 64 OSFP cages of an SN5600 are 128 ports at 400G.
    ppc = radix // count if isinstance(count, int) and count and radix % count == 0 else 1
    native = _get(switch, "port_speed_gbps")
    if optic and native and SPEED_GBPS.get(speed) not in (None, native):
        optic = None  # the catalog's optic is the native one; a breakout needs its own
    return SwitchGeometry(model=model, radix=radix, gbps=SPEED_GBPS.get(speed, 0), ports_per_cage=ppc,
                          cage=str(cage or "port"), optic=str(optic or "unknown"), cages_known=isinstance(count, int),
                          lanes_per_cage=lanes if type(lanes) is int and lanes > 0 else None)
