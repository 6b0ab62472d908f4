"""What a RoCE fabric needs beyond the fat tree: /31 links, a BGP ASN plan and lossless QoS.

The topology is the same rail-optimized fat tree as InfiniBand (planner.py); Ethernet adds routing
(eBGP on every switch-to-switch link, RFC 7938: each leaf its own ASN, the spines of a group one
ASN, the cores one ASN) and the lossless settings RDMA needs. The QoS values are read from
railyard/data/fixtures/tables/roce_qos_defaults_cumulus.csv (Cumulus Linux / Onyx defaults, each
row citing its source), never typed in here.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from importlib import resources
from typing import Any

from railyard.model import addressing as addr

QOS_TABLE = "roce_qos_defaults_cumulus.csv"


def _table_text() -> str:
    return (resources.files("railyard") / "data" / "fixtures" / "tables" / QOS_TABLE).read_text(encoding="utf-8")


def _first_int(pattern: str, text: str) -> int:
    m = re.search(pattern, text)
    if not m:
        raise ValueError(f"{QOS_TABLE}: no match for {pattern!r} in {text!r}")
    return int(m.group(1))


@functools.lru_cache(maxsize=1)
def qos_defaults() -> dict[str, Any]:
    """Lossless RoCE settings from the fixture table, as numbers, each with the row it came from."""
    rows = {r["setting"]: r for r in csv.DictReader(io.StringIO(_table_text()))}

    def row(name: str) -> dict[str, str]:
        if name not in rows:
            raise ValueError(f"{QOS_TABLE} has no row {name!r}")
        return rows[name]

    roce = row("RoCE switch priority / traffic class")["value"]
    cnp = row("CNP switch priority / traffic class")["value"]
    ecn = row("ECN absolute threshold TC3")["value"]
    ecn_range = re.search(r"(\d+)\s*-\s*(\d+)\s*bytes", ecn)
    if ecn_range is None:
        raise ValueError(f"{QOS_TABLE}: no byte range in {ecn!r}")
    ecn_min, ecn_max = (int(x) for x in ecn_range.groups())
    pfc = row("PFC")["value"]
    lldp = row("LLDP App TLV")["value"]
    trust = row("Port trust")["value"]
    trust_mode = "dscp" if "DSCP" in trust.upper() else trust.lower()
    ets = row("ETS")["value"]
    strict = [int(tc) for tc in re.findall(r"TC(\d+) strict", ets)]
    # A list, not a mapping by class: the summary becomes stack outputs, whose keys are strings.
    wrr = [{"traffic_class": int(tc), "percent": int(pct)} for tc, pct in re.findall(r"TC(\d+) WRR (\d+)%", ets)]
    if not strict and not wrr:
        raise ValueError(f"{QOS_TABLE}: ETS {ets!r} names no strict or WRR traffic class")
    source = {"table": f"railyard/data/fixtures/tables/{QOS_TABLE}",
              "rows": sorted(rows)}
    return {
        "roce_priority": _first_int(r"priority (\d+)", roce),
        "roce_traffic_class": _first_int(r"TC(\d+)", roce),
        "cnp_priority": _first_int(r"priority (\d+)", cnp),
        "cnp_traffic_class": _first_int(r"TC(\d+)", cnp),
        "other_traffic_class": _first_int(r"TC(\d+)", row("Other traffic")["value"]),
        "ets": ets,
        "ets_strict": strict,
        "ets_wrr": wrr,
        "ecn_min_bytes": ecn_min,
        "ecn_max_bytes": ecn_max,
        "pfc_priority": _first_int(r"priority (\d+)", pfc),
        "pfc_mode": "lossless" if "lossless" in pfc else pfc,
        "trust": trust_mode,
        "lldp_app_tlv": {"udp_port": _first_int(r"UDP (\d+)", lldp), "priority": _first_int(r"priority (\d+)", lldp)},
        "host": row("Host side")["value"],
        "source": source,
    }


def roce_summary(plan: Any) -> dict[str, Any]:
    """The RoCE additions to a fabric summary: ASN plan, /31 links, switch loopbacks, QoS."""
    # plan: a FabricPlan, untyped here so that planner.py -> roce.py stays one-way.
    links = plan.link_counts()
    p2p_links = links["leaf_spine"] + links["spine_core"]
    out: dict[str, Any] = {
        "p2p": {"prefixlen": addr.P2P_PREFIX, "links": p2p_links,
                "blocks": {pl.pool.name: addr.p2p_block(plan.cidr, pl.pool.ordinal) for pl in plan.layouts}
                if plan.cidr is not None else {}},
        "qos": qos_defaults(),
    }
    if plan.loopback_cidr is not None:
        out["loopbacks"] = {"cidr": str(plan.loopback_cidr), "switches": plan.leaves + plan.spines + plan.cores}
    base = plan.asn_base
    if base is not None:
        pools = {}
        for pl in plan.layouts:
            o = pl.pool.ordinal
            entry = {"leaves": [addr.leaf_asn(base, o, 0), addr.leaf_asn(base, o, pl.leaves - 1)]}
            if plan.tiers == 3:
                entry["spine_groups"] = [addr.spine_group_asn(base, o, pl.groups - 1),
                                         addr.spine_group_asn(base, o, 0)]
            pools[pl.pool.name] = entry
        out["bgp"] = {
            "asn_base": base,
            "core_asn": addr.core_asn(base) if plan.tiers == 3 else None,
            "spine_asn": addr.spine_asn(base) if plan.tiers == 2 else None,
            "pools": pools,
            "asns": plan.leaves + sum(pl.groups for pl in plan.layouts) + (1 if plan.tiers else 0),
            "sessions": p2p_links,
        }
    return out
