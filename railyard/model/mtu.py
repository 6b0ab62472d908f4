"""MTUs: the default of each network and the range a stack may set, from one fixture table.

railyard/data/fixtures/tables/mtu_defaults.csv gives each default and bound with the public source
it comes from. Typed in here are only IPv6's minimum (the lowest MTU a stack may set) and
OpenSM's codes for the InfiniBand MTUs. The compute network's MTU is the rails' netdev MTU: on
InfiniBand the IPoIB interface (datagram mode, the only mode of enhanced IPoIB on ConnectX-4 and
later), which is the InfiniBand link MTU less IPoIB's 4-byte header; on RoCE the Ethernet MTU.
"""

from __future__ import annotations

import csv
import functools
import io
from importlib import resources
from typing import NamedTuple

TABLE = "mtu_defaults.csv"
SOURCE = f"railyard/data/fixtures/tables/{TABLE}"

# Rows of the table, by the setting each one gives.
_ROWS = {
    "ib_link": "InfiniBand link MTU",
    "ipoib": "IPoIB interface MTU (datagram mode)",
    "roce": "RoCE host interface MTU",
    "ethernet_max": "Ethernet switch port MTU",
    "storage": "Storage network MTU",
    "management": "Management network MTU",
}
# IPv6's minimum link MTU (RFC 8200): below it no network Railyard plans carries IPv6 at all.
MINIMUM = 1280
# OpenSM's code for an InfiniBand MTU (partition-config: mtu=1..5 for 256..4096 bytes).
IB_MTU_CODES = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}


class Range(NamedTuple):
    default: int
    lowest: int
    highest: int
    why: str


@functools.lru_cache(maxsize=1)
def table() -> dict[str, int]:
    text = (resources.files("railyard") / "data" / "fixtures" / "tables" / TABLE).read_text(encoding="utf-8")
    rows = {r["setting"]: r for r in csv.DictReader(io.StringIO(text))}
    out = {}
    for key, setting in _ROWS.items():
        if setting not in rows:
            raise ValueError(f"{TABLE} has no row {setting!r}")
        out[key] = int(rows[setting]["value"])
    return out


def ipoib_header() -> int:
    t = table()
    return t["ib_link"] - t["ipoib"]


def network_range(network: str, kind: str | None = None) -> Range:
    """What `network` (compute, storage, management) defaults to and may be set to; `kind` is the
    compute fabric's (infiniband or roce)."""
    t = table()
    if network == "compute" and kind == "infiniband":
        return Range(t["ipoib"], MINIMUM, t["ipoib"],
                     f"an IPoIB interface in datagram mode carries the {t['ib_link']}-byte InfiniBand MTU "
                     f"less its {ipoib_header()}-byte header")
    ethernet = f"the switch ports carry at most {t['ethernet_max']}"
    if network == "compute":
        return Range(t["roce"], MINIMUM, t["ethernet_max"], ethernet)
    if network in ("storage", "management"):
        return Range(t[network], MINIMUM, t["ethernet_max"], ethernet)
    raise ValueError(f"no MTU for network {network!r}")


def ib_link_mtu() -> int:
    return table()["ib_link"]
