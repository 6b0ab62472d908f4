"""Messages one layer writes and another reads back: the preview's host drift lines (written by
the tuning runner, grouped by `railyard review`) and the program's stop for a driver that is not
implemented (raised by the driver base, recognised by the review). Each format is written and
parsed here only, so the two sides cannot drift apart.

Pulumi-free and import-free: the review reads these from the engine's event stream, as text.
"""

from __future__ import annotations

import re
from typing import Iterable

_DRIFT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*): (.+)$")
_NOT_IMPLEMENTED = re.compile(r"railyard:driver '([^']+)' is validated but not implemented yet")


def drift_line(host: str, setting: str, old: str, new: str) -> str:
    """One host-level change a check run found: `NODE: SETTING OLD → NEW`."""
    return f"{host}: {setting} {old} → {new}"


def split_drift_line(line: str) -> tuple[str, str]:
    """(node, the change) of a drift line; ("", line) for a line of another form."""
    m = _DRIFT.match(line)
    return (m.group(1), m.group(2)) if m else ("", line)


def driver_not_implemented(name: str, runnable: Iterable[str]) -> str:
    return (f"railyard:driver {name!r} is validated but not implemented yet: `up` stops here and "
            f"nothing was created. Drivers that run today: {', '.join(sorted(runnable))}.")


def not_implemented_driver(text: str) -> str | None:
    """The driver a driver_not_implemented message names, where `text` holds one."""
    m = _NOT_IMPLEMENTED.search(text)
    return m.group(1) if m else None
