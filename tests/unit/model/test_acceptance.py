"""Acceptance from the plan (railyard.model.acceptance): a ring per rail with the path the fabric
gives each pair, and the judging of what the nodes measured."""

from __future__ import annotations

import pytest

from railyard.model.acceptance import Finding, cordon_reasons, evaluate, markdown
from railyard.model.catalog import load_catalog
from railyard.model.errors import SpecError
from railyard.model.plan import make_plan
from railyard.stack import parse_config

CATALOG = load_catalog()


def config(count: int = 12, *, kind: str = "infiniband", acceptance=None, extra=None) -> dict:
    compute = {"kind": kind, "speed": "ndr" if kind == "infiniband" else "400gbe",
               "switch": "qm9700" if kind == "infiniband" else "sn5600", "cidr": "198.19.0.0/16",
               "reservedLeafPorts": 28}
    cfg = {
        "railyard:region": "r", "railyard:layout": "bare-metal", "railyard:driver": "lab",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": count}],
        "railyard:fabric": {"compute": compute, "storage": {"cidr": "198.18.32.0/19"},
                            "management": {"cidr": "198.18.0.0/19"}},
        "railyard:storage": {"object": {}},
        **(extra or {}),
    }
    if acceptance is not None:
        cfg["railyard:acceptance"] = acceptance
    return cfg


def plan_of(cfg: dict):
    return make_plan(parse_config(cfg, stack="t"), CATALOG)


def test_each_rail_is_a_ring_every_nic_sends_once_and_receives_once():
    plan = plan_of(config(12))
    checks = plan.acceptance
    assert len(checks.probes) == 8 * 12  # n per rail, not n(n-1)/2
    for rail in range(8):
        ring = [p for p in checks.probes if p.rail == rail]
        assert sorted(p.source for p in ring) == sorted(p.target for p in ring) == sorted(n.name for n in plan.nodes)
        for p in ring:
            src, dst = plan.node_named(p.source), plan.node_named(p.target)
            assert (p.source_ip, p.target_ip) == (src.nics[rail].ip, dst.nics[rail].ip)
            # Neighbours in one scalable unit share their leaf; the last of a unit reaches the next unit's
            # first through the spine.
            assert p.path == ("leaf" if src.nics[rail].leaf == dst.nics[rail].leaf else "spine"), (p.source, p.target)
    assert {p.path for p in checks.probes} == {"leaf", "spine"}


def test_two_nodes_probe_each_other_and_one_node_probes_nothing():
    two = plan_of(config(2)).acceptance
    assert {(p.source, p.target) for p in two.probes if p.rail == 0} == {("gpu-0", "gpu-1"), ("gpu-1", "gpu-0")}
    assert plan_of(config(1)).acceptance.probes == ()


def test_each_node_serves_what_its_peer_sends_to_and_routed_fabrics_count_routers():
    # Two rails of vela-a100 on 100G ports of an SN5600 (256 of them, 128 down): 4 hosts per unit.
    cfg = config(kind="roce")
    cfg["railyard:nodePools"] = [{"name": "gpu", "sku": "vela-a100", "count": 8}]
    cfg["railyard:fabric"]["compute"].update(speed="100gbe", reservedLeafPorts=124)
    plan = plan_of(cfg)
    assert plan.fabric.su_nodes == 4
    last = f"gpu-{plan.fabric.su_nodes - 1}"  # the last of the first scalable unit
    v = plan.acceptance.node_vars(last)
    assert [s["ip"] for s in v["acceptance_serve"]] == [n.ip for n in plan.node_named(last).nics]
    assert {p["peer"] for p in v["acceptance_probes"]} == {f"gpu-{plan.fabric.su_nodes}"}
    # It and the first of the next unit sit behind different leaves: leaf, spine, leaf.
    assert {p["routers"] for p in v["acceptance_probes"]} == {3}
    assert plan.acceptance.node_vars("gpu-0")["acceptance_probes"][0]["routers"] == 0
    ib = plan_of(config(6)).acceptance.node_vars("gpu-3")
    assert {p["routers"] for p in ib["acceptance_probes"]} == {None}  # InfiniBand: not an IP route
    assert v["acceptance_mtu"] == plan.networks.compute.mtu and v["acceptance_object"] is True


def report(rails, storage=None):
    return {"rails": [{"rail": r, "peer": peer, "ip": f"198.19.{r}.9", "ping_ok": ok, "ping_error": "" if ok else "100% loss",
                       "routers": None, "routers_seen": None, "gbps": g} for r, peer, ok, g in rails],
            "storage": storage or {}}


def test_a_slow_rail_is_flagged_and_only_that_one():
    reports = {"gpu-0": report([(r, "gpu-1", True, 0.2 if r == 5 else 10.0 + r / 10) for r in range(8)]),
               "gpu-1": report([(r, "gpu-0", True, 10.0) for r in range(8)])}
    out = evaluate(reports, ["gpu-0", "gpu-1"], mtu=4092, tolerance=0.25)
    assert [(f.node, f.rail, f.check) for f in out["findings"]] == [("gpu-0", 5, "bandwidth")]
    assert "to gpu-1: 0.20 Gb/s" in str(out["findings"][0]) and "median of gpu-0's rails" in str(out["findings"][0])
    assert [e["rail"] for e in out["rails"] if e["flagged"]] == [5]


def test_a_lost_rail_a_failed_tier_and_a_silent_node_are_named():
    reports = {"gpu-0": report([(0, "gpu-1", True, 10.0), (1, "gpu-1", False, None)], {"cache": "", "object": "denied"}),
               "gpu-1": report([(0, "gpu-2", False, None), (1, "gpu-2", True, 10.0)])}
    out = evaluate(reports, ["gpu-0", "gpu-1", "gpu-2"], mtu=4092, tolerance=0.25)
    shown = [str(f) for f in out["findings"]]
    # gpu-2 said nothing: what gpu-1 sent it is not held against gpu-1.
    assert shown == ["gpu-2: node: reported nothing: unreachable, or its acceptance run failed",
                     "gpu-0: object: denied",
                     "gpu-0 rail1: rail-mtu: no 4092-byte unfragmented ping to gpu-1 (198.19.1.9): 100% loss"]
    text = markdown(out, mtu=4092, tolerance=0.25, seconds=3.2)
    assert "| gpu-0 | 1 | gpu-1 | — |  |" in text and "- gpu-0: object: denied" in text


def test_a_slow_receiving_nic_is_named_and_a_zero_figure_is_no_figure():
    ring = ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    # gpu-2's rail 1 receives slowly and sends slowly: gpu-1's probe to it and its own are slow.
    reports = {n: report([(r, ring[(i + 1) % 4], True, 2.0 if r == 1 and "gpu-2" in (n, ring[(i + 1) % 4])
                           else 10.0) for r in range(4)]) for i, n in enumerate(ring)}
    reports["gpu-3"]["rails"][3]["gbps"] = 0.0
    out = evaluate(reports, ring, mtu=9000, tolerance=0.25)
    assert [(f.node, f.rail, f.check) for f in out["findings"]] == [("gpu-2", 1, "bandwidth"), ("gpu-3", 3, "bandwidth")]
    assert "from gpu-1" in out["findings"][0].message and "no bandwidth figure" in out["findings"][1].message


def test_the_keys_are_checked_and_cordon_needs_a_scheduler():
    with pytest.raises(SpecError) as err:
        parse_config(config(acceptance={"onFailure": "cordon", "bandwidthTolerance": 1.5}), stack="t")
    assert {p.path for p in err.value.problems} == {"railyard:acceptance.onFailure",
                                                    "railyard:acceptance.bandwidthTolerance"}
    ok = parse_config(config(acceptance={"onFailure": "cordon"}, extra={"railyard:slurm": {}}), stack="t")
    assert ok.acceptance.on_failure == "cordon"
    assert parse_config(config(acceptance={"onFailure": "cordon"}, extra={"railyard:kubernetes": {}}),
                        stack="t").acceptance.on_failure == "cordon"
    assert plan_of(config(acceptance={"enabled": False})).acceptance is None


def test_a_dead_nic_is_named_not_its_two_neighbours():
    ring = ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    reports = {n: report([(2, ring[(i + 1) % 4], ring[(i + 1) % 4] != "gpu-2" and n != "gpu-2", 10.0)])
               for i, n in enumerate(ring)}
    out = evaluate(reports, ring, mtu=9000, tolerance=0.25)
    assert [(f.node, f.rail, f.check) for f in out["findings"]] == [("gpu-2", 2, "rail-mtu")]
    assert "to gpu-3" in out["findings"][0].message and "from gpu-1" in out["findings"][0].message
    # Two nodes: each is in both lost probes, so both are named.
    two = {"gpu-0": report([(2, "gpu-1", False, None)]), "gpu-1": report([(2, "gpu-0", False, None)])}
    assert [f.node for f in evaluate(two, ["gpu-0", "gpu-1"], mtu=9000, tolerance=0.25)["findings"]] == ["gpu-0", "gpu-1"]


def test_the_tolerance_is_the_stacks_else_the_default():
    assert parse_config(config(), stack="t").acceptance.bandwidth_tolerance is None
    assert plan_of(config()).acceptance.tolerance == 0.25
    assert plan_of(config(acceptance={"bandwidthTolerance": 0.1})).acceptance.tolerance == 0.1


def test_a_node_leaves_scheduling_with_its_first_finding_as_the_reason():
    found = [Finding("gpu-2", "rail-mtu", "no reply at 4092 bytes", rail=1), Finding("gpu-2", "pfs", "not mounted"),
             Finding("gpu-5", "node", "unreachable")]
    assert cordon_reasons(found) == {"gpu-2": "railyard: acceptance: gpu-2 rail1: rail-mtu: no reply at 4092 bytes",
                                     "gpu-5": "railyard: acceptance: gpu-5: node: unreachable"}
