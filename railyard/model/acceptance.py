"""What `up` checks before a cluster is called ready (railyard:acceptance), from the plan: a ring of
rail pairs per rail, each at the planned MTU and expected through the switches the fabric gives
it, the storage tiers from every node, and the bounds every probe runs within.

A ring, not all pairs: node i of a rail sends to node i+1 (the last to the first), so every NIC
sends once and receives once, n probes per rail instead of n(n-1)/2, and a dead or slow NIC shows
up in the two probes that touch it. `evaluate` turns what the nodes measured into findings, and
is pure as well, so the rules are tested without a cluster.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from railyard.model.plan_types import PlanView

# Bounds of each probe (the nodes' module enforces them): a rail ping sends PING_COUNT packets,
# PING_INTERVAL_S apart, and waits PING_WAIT_S for the last; a bandwidth probe runs IPERF_SECONDS
# and is given up IPERF_TIMEOUT_S after it starts; a storage probe moves STORAGE_BYTES.
PING_COUNT = 3
PING_INTERVAL_S = 0.2
PING_WAIT_S = 2
IPERF_SECONDS = 1
IPERF_TIMEOUT_S = 8
IPERF_PORT_BASE = 5201
STORAGE_BYTES = 1 << 20
# IPv4 and ICMP headers: a ping of MTU - 28 bytes of payload fills the MTU exactly.
ICMP_OVERHEAD = 28

PATHS = {1: "leaf", 3: "spine", 5: "core"}

# railyard:acceptance.bandwidthTolerance where the stack gives none (and its driver no default).
DEFAULT_TOLERANCE = 0.25


@dataclass(frozen=True)
class RailProbe:
    rail: int
    source: str
    source_ip: str
    target: str
    target_ip: str
    source_device: str
    target_device: str
    """The rail NICs' RDMA names (ib_write_bw runs over them where the kernel shows them)."""
    path: str
    """Where the fabric carries it: `leaf` (one shared leaf), `spine`, or `core`."""

    @property
    def port(self) -> int:
        return IPERF_PORT_BASE + self.rail


@dataclass(frozen=True)
class Finding:
    node: str
    check: str
    """rail-mtu, rail-path, bandwidth, object, cache, pfs, node (unreachable or failed outright)."""
    message: str
    rail: int | None = None

    def __str__(self) -> str:
        rail = f" rail{self.rail}" if self.rail is not None else ""
        return f"{self.node}{rail}: {self.check}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "rail": self.rail, "check": self.check, "message": self.message}


def cordon_reasons(findings: Iterable[Finding]) -> dict[str, str]:
    """Each failed node's reason for leaving scheduling (Slurm's drain reason, Kubernetes' cordon
    annotation): its first finding, under the prefix that marks the node as Railyard's to return."""
    from railyard.model.node_health import ACCEPTANCE, PREFIX, reason

    reasons: dict[str, str] = {}
    for f in findings:
        reasons.setdefault(f.node, reason(f"{ACCEPTANCE.removeprefix(PREFIX).strip()} {f}"))
    return reasons


@dataclass(frozen=True)
class AcceptancePlan:
    mtu: int
    probes: tuple[RailProbe, ...]
    tolerance: float
    on_failure: str
    cache_mount: str
    pfs_mount: str
    object_store: bool
    routed: bool
    """A routed (RoCE) fabric, where the switches a probe crosses show as hops of its route."""

    def node_vars(self, node: str) -> dict[str, Any]:
        """The acceptance role's variables of one node: what it serves and what it sends."""
        return {
            "acceptance_node": node,
            "acceptance_mtu": self.mtu,
            "acceptance_tolerance": self.tolerance,
            "acceptance_serve": [{"rail": p.rail, "ip": p.target_ip, "port": p.port, "device": p.target_device}
                                 for p in self.probes if p.target == node],
            "acceptance_probes": [{"rail": p.rail, "peer": p.target, "ip": p.target_ip, "source_ip": p.source_ip,
                                   "port": p.port, "device": p.source_device,
                                   "routers": _routers(p.path) if self.routed else None}
                                  for p in self.probes if p.source == node],
            "acceptance_cache_mount": self.cache_mount,
            "acceptance_pfs_mount": self.pfs_mount,
            "acceptance_object": self.object_store,
        }


def _routers(path: str) -> int:
    """Routers a routed probe crosses: none within a leaf's host bridge, else leaf, spine(s), leaf."""
    return {"leaf": 0, "spine": 3, "core": 5}[path]


def rail_ring(plan: PlanView) -> tuple[RailProbe, ...]:
    """Each rail's ring of probes (the module's docstring): the pairs acceptance measures, and the
    pairs the health check's collectives run across (railyard.model.pair_collectives)."""
    fabric = plan.fabric
    probes = []
    for rail in range(fabric.rails):
        ring = [n for n in plan.nodes if rail < len(n.nics)]
        if len(ring) < 2:
            continue
        for i, a in enumerate(ring):
            b = ring[(i + 1) % len(ring)]
            hops = fabric.switch_hops((a.pool, a.index, rail), (b.pool, b.index, rail))
            probes.append(RailProbe(rail, a.name, a.nics[rail].ip, b.name, b.nics[rail].ip, a.nics[rail].name,
                                    b.nics[rail].name, PATHS[hops]))
    return tuple(probes)


def plan_acceptance(plan: PlanView) -> AcceptancePlan | None:
    """The stack's acceptance checks; None when railyard:acceptance.enabled is false."""
    spec = plan.spec
    if not spec.acceptance.enabled:
        return None
    pfs = spec.storage.parallel_fs
    tolerance = spec.acceptance.bandwidth_tolerance
    return AcceptancePlan(mtu=plan.networks.compute.mtu, probes=rail_ring(plan),
                          tolerance=tolerance if tolerance is not None else DEFAULT_TOLERANCE,
                          on_failure=spec.acceptance.on_failure, cache_mount=spec.storage.local_cache.mount,
                          pfs_mount=pfs.mount if pfs is not None else "", object_store=spec.storage.object is not None,
                          routed=spec.fabric.compute.kind == "roce")


def evaluate(reports: dict[str, dict], nodes: Iterable[str], *, mtu: int, tolerance: float) -> dict[str, Any]:
    """Findings from what each node reported (the acceptance_probe module's `acceptance`), with
    the bandwidth of every rail pair, which were flagged, and the median of all of them. A node
    that reported nothing (it was unreachable, or its run failed) is a finding of its own, and the
    probes sent to it are not held against their senders."""
    nodes = list(nodes)
    silent = {n for n in nodes if reports.get(n) is None}
    findings = [Finding(n, "node", "reported nothing: unreachable, or its acceptance run failed") for n in nodes
                if n in silent]
    rails: list[dict[str, Any]] = []
    lost: list[tuple[str, dict, str]] = []    # probes that got nothing through: (sender, probe, what)
    no_rate: list[tuple[str, dict, str]] = []  # reachable, but no bandwidth figure
    for node in nodes:
        report = reports.get(node)
        if report is None:
            continue
        for r in report.get("rails", []):
            if r["peer"] in silent:
                continue
            gbps = r.get("gbps") if (r.get("gbps") or 0) > 0 else None
            entry = {"node": node, "peer": r["peer"], "rail": r["rail"], "gbps": gbps, "flagged": False}
            rails.append(entry)
            if not r.get("ping_ok"):
                lost.append((node, r, f"to {r['peer']} ({r['ip']}): {r.get('ping_error') or 'lost'}"))
                continue
            if r.get("routers") is not None and r.get("routers_error"):
                findings.append(Finding(node, "rail-path", f"the route to {r['peer']} could not be traced: "
                                        f"{r['routers_error']}", r["rail"]))
            elif r.get("routers") is not None and r.get("routers_seen") is not None \
                    and r["routers_seen"] != r["routers"]:
                findings.append(Finding(node, "rail-path", f"the route to {r['peer']} crosses {r['routers_seen']} "
                                        f"routers, the plan {r['routers']}", r["rail"]))
            if gbps is None:
                no_rate.append((node, r, f"to {r['peer']}: {r.get('iperf_error') or 'no figure'}"))
        for tier in ("object", "cache", "pfs"):
            err = (report.get("storage") or {}).get(tier)
            if err:
                findings.append(Finding(node, tier, err))
    findings += blame(lost, "rail-mtu", f"no {mtu}-byte unfragmented ping ")
    findings += blame(no_rate, "bandwidth", "no bandwidth figure ")
    # A rail's peers are the other rails of its node, measured one after the other from the same
    # node: what the node itself cannot send (a busy host, a slow CPU) does not single out a rail.
    slow: list[tuple[str, dict, str]] = []
    for node in {e["node"] for e in rails}:
        own = [e for e in rails if e["node"] == node and e["gbps"] is not None]
        if len(own) < 2:
            continue
        median = statistics.median(e["gbps"] for e in own)
        for e in own:
            if e["gbps"] < (1 - tolerance) * median:
                e["flagged"] = True
                slow.append((node, e, f"to {e['peer']}: {e['gbps']:.2f} Gb/s, more than {tolerance:.0%} below "
                                      f"the median of {node}'s rails ({median:.2f} Gb/s)"))
    findings += blame(slow, "bandwidth", "")
    measured = [e["gbps"] for e in rails if e["gbps"] is not None]
    findings.sort(key=lambda f: (f.check != "node", f.node, f.rail if f.rail is not None else -1))
    return {"findings": findings, "rails": rails, "median_gbps": statistics.median(measured) if measured else None}


def blame(bad: list[tuple[str, dict, str]], check: str, lead: str) -> list[Finding]:
    """A dead, slow or misconfigured NIC spoils both ring probes that touch it, the one it sends
    and the one it receives: on each rail, a node in two bad probes is named, not its neighbours.
    A bad probe whose ends are in no other names its sender. (Two bad NICs side by side in a ring,
    and both nodes of a two-node ring, are named with their neighbours: a ring cannot tell them apart.)"""
    out = []
    for rail in sorted({r["rail"] for _, r, _ in bad}):
        probes = [(src, r, what) for src, r, what in bad if r["rail"] == rail]
        count: dict[str, int] = {}
        for src, r, _ in probes:
            count[src] = count.get(src, 0) + 1
            count[r["peer"]] = count.get(r["peer"], 0) + 1
        culprits = sorted(n for n, c in count.items() if c >= 2)
        for node in culprits:
            said = [w for src, _, w in probes if src == node] + [f"from {src}" for src, r, _ in probes
                                                                 if r["peer"] == node]
            out.append(Finding(node, check, lead + "; ".join(said), rail))
        for src, r, what in probes:
            if src not in culprits and r["peer"] not in culprits:
                out.append(Finding(src, check, lead + what, rail))
    return out


def markdown(result: dict[str, Any], *, mtu: int, tolerance: float, seconds: float) -> str:
    """The report kept with the run's artifacts."""
    lines = ["# Acceptance", "", f"{len(result['rails'])} rail probes at MTU {mtu}, in {seconds:.1f} s; a rail is "
             f"flagged below {1 - tolerance:.0%} of the median of its node's rails"
             + (f"; the median of all is {result['median_gbps']:.2f} Gb/s." if result["median_gbps"] else "."), ""]
    findings = result["findings"]
    lines += ["## Findings", ""] + ([f"- {f}" for f in findings] or ["None: every check passed."]) + [""]
    lines += ["## Rails", "", "| node | rail | peer | Gb/s | |", "|---|---|---|---|---|"]
    for e in sorted(result["rails"], key=lambda e: (e["rail"], e["node"])):
        gbps = f"{e['gbps']:.2f}" if e["gbps"] is not None else "—"
        lines.append(f"| {e['node']} | {e['rail']} | {e['peer']} | {gbps} | {'flagged' if e['flagged'] else ''} |")
    return "\n".join(lines) + "\n"
