"""Checks shared by the fabric tests: the detail view must obey the rules the summary counts by.

Every function enumerates the plan (switches() and links()) and recounts what the summary claims
arithmetically, so a summary formula and the cabling it describes can never drift apart.
"""

from __future__ import annotations

import collections
import itertools
from typing import Any

from railyard.model.fabric import FabricPlan, FabricPool, SwitchGeometry


def small_plan(nodes: int | list[int], radix: int = 8, rails: int | list[int] = 2, oversubscription: float = 1,
               reserved: int = 0, ppc: int = 1, kind: str = "infiniband", cidr: str | None = None,
               asn_base: int | None = None) -> FabricPlan:
    """A fabric of toy switches, small enough to enumerate and brute-force."""
    counts = nodes if isinstance(nodes, list) else [nodes]
    rails_each = rails if isinstance(rails, list) else [rails] * len(counts)
    pools = [FabricPool(f"p{i}", i, n, r, tuple(f"nic{j}" for j in range(r)))
             for i, (n, r) in enumerate(zip(counts, rails_each))]
    return FabricPlan(kind=kind, speed="test", switch=SwitchGeometry("toy", radix, 100, ppc), pools=pools,
                      oversubscription=oversubscription, reserved_leaf_ports=reserved, cidr=cidr,
                      asn_base=asn_base)


def check_detail(plan: FabricPlan) -> dict[str, Any]:
    """Assert the structural rules on the enumerated fabric; return what it counted."""
    switches = {s.name: s for s in plan.switches()}
    links = list(plan.links())
    assert len(switches) == sum(1 for _ in plan.switches()), "switch names are unique"
    ports: dict[str, set[int]] = collections.defaultdict(set)
    nic_links: collections.Counter = collections.Counter()
    per_tier: collections.Counter = collections.Counter()
    pair_links: collections.Counter = collections.Counter()
    for link in links:
        per_tier[link.tier] += 1
        ends = [(link.b_device, link.b_port)]
        if link.tier == "node_leaf":
            nic_links[(link.a_device, link.a_port)] += 1
        else:
            ends.append((link.a_device, link.a_port))
        for device, port in ends:
            assert device in switches, f"{link} ends at {device}, which is not a switch of the plan"
            sw = switches[device]
            assert 1 <= port <= sw.ports, f"{device} port {port} is outside 1..{sw.ports}"
            assert port not in ports[device], f"{device} port {port} is cabled twice"
            ports[device].add(port)
        if link.tier != "node_leaf":
            pair_links[(link.a_device, link.b_device)] += 1
    # Every compute NIC has exactly one link.
    expected_nics = {(f"{pl.pool.name}-{i}", pl.pool.nic(r))
                     for pl in plan.layouts for i in range(pl.pool.nodes) for r in range(pl.pool.rails)}
    assert set(nic_links) == expected_nics, "every compute NIC is cabled"
    assert all(v == 1 for v in nic_links.values()), "no NIC is cabled twice"
    # No switch uses more ports than it has, and each says how many it uses.
    for name, sw in switches.items():
        assert len(ports[name]) == sw.ports_used, f"{name}: {len(ports[name])} ports cabled, claims {sw.ports_used}"
        assert sw.ports_used <= sw.ports, f"{name} uses {sw.ports_used} of {sw.ports} ports"
    # Even spreading: a leaf sends the same number of links to each spine it reaches, and a full
    # spine the same number to each core of its plane.
    by_lower: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for (a, b), n in pair_links.items():
        by_lower[a][b] = n
    for name, sw in switches.items():
        if sw.tier == "leaf":
            counts = set(by_lower[name].values())
            assert len(counts) == 1, f"{name} spreads its uplinks unevenly: {dict(by_lower[name])}"
            if plan.tiers == 2:
                assert len(by_lower[name]) == plan.spines, f"{name} reaches every spine"
            else:
                assert len(by_lower[name]) == plan.uplinks, f"{name} reaches every spine of its group"
    if plan.tiers == 3:
        for pl in plan.layouts:
            full = pl.group_units * pl.pool.rails
            for name, sw in switches.items():
                if sw.tier != "spine" or sw.pool != pl.pool.name:
                    continue
                assert all(switches[c].plane == sw.plane for c in by_lower[name]), f"{name} leaves its plane"
                c = plan.cores_per_plane
                if sw.unit < pl.groups - 1:
                    counts = set(by_lower[name].values())
                    assert counts == {full // c}, f"{name} spreads unevenly: {counts}"
                    assert len(by_lower[name]) == c
                else:  # the last group may be partial: its spines spread as evenly as they can
                    up = pl.last_group_units * pl.pool.rails
                    spread = [by_lower[name].get(core, 0) for core in
                              {s2.name for s2 in switches.values() if s2.tier == "core" and s2.plane == sw.plane}]
                    assert sum(spread) == up and max(spread) - min(spread) <= 1, f"{name}: {spread}"
    cages = collections.Counter()
    for name, used in ports.items():
        cages[switches[name].tier] += len({(p - 1) // plan.switch.ports_per_cage for p in used})
    return {"switches": collections.Counter(s.tier for s in switches.values()), "links": per_tier,
            "ports": {t: sum(len(ports[n]) for n, s in switches.items() if s.tier == t) for t in ("leaf", "spine", "core")},
            "cages": cages, "nics": len(nic_links)}


def check_summary_matches_detail(plan: FabricPlan) -> None:
    counted = check_detail(plan)
    s = plan.summary()
    for tier in ("leaf", "spine", "core"):
        assert s["switches"][tier] == counted["switches"][tier], f"{tier} switches"
        assert s["ports"][tier]["used"] == counted["ports"][tier], f"{tier} ports used"
        assert s["ports"][tier]["cages"] == counted["cages"][tier], f"{tier} cages"
    for tier in ("node_leaf", "leaf_spine", "spine_core"):
        assert s["links"][tier] == counted["links"][tier], f"{tier} links"
    assert s["cables"] == sum(counted["links"].values())
    assert s["optics"]["host"] == counted["nics"]
    assert s["optics"]["switch"] == sum(counted["cages"].values())


# --------------------------------------------------------------------------------------------------
# Bisection by brute force: max-flow over every balanced cut of the nodes


def _max_flow(cap: dict[str, dict[str, int]], s: str, t: str) -> int:
    flow = 0
    while True:
        parent = {s: None}
        queue = collections.deque([s])
        while queue and t not in parent:
            u = queue.popleft()
            for v, c in cap[u].items():
                if c > 0 and v not in parent:
                    parent[v] = u
                    queue.append(v)
        if t not in parent:
            return flow
        v, bottleneck = t, None
        while parent[v] is not None:
            u = parent[v]
            bottleneck = cap[u][v] if bottleneck is None else min(bottleneck, cap[u][v])
            v = u
        v = t
        while parent[v] is not None:
            u = parent[v]
            cap[u][v] -= bottleneck
            cap[v][u] = cap[v].get(u, 0) + bottleneck
            v = u
        flow += bottleneck


def brute_force_bisection_links(plan: FabricPlan) -> int:
    """min over every split of the nodes into floor(N/2) and the rest of the max flow between them."""
    graph: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    nodes = set()
    for link in plan.links():
        graph[link.a_device][link.b_device] += 1
        graph[link.b_device][link.a_device] += 1
        if link.tier == "node_leaf":
            nodes.add(link.a_device)
    nodes = sorted(nodes)
    half = len(nodes) // 2
    if half == 0:
        return 0
    big = 10 ** 9
    best = None
    for side in itertools.combinations(nodes, half):
        cap = {u: dict(v) for u, v in graph.items()}
        cap["SRC"] = {n: big for n in side}
        cap["SNK"] = {}
        chosen = set(side)
        for n in nodes:
            if n not in chosen:
                cap[n]["SNK"] = big
        f = _max_flow(cap, "SRC", "SNK")
        best = f if best is None else min(best, f)
    return best
