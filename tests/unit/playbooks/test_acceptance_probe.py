"""The acceptance_probe module's second ping: a rail that got no ping through is pinged once more,
and only a rail lost both times reaches the judge (railyard.model.acceptance) as lost."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location(
    "acceptance_probe", ROOT / "playbooks/roles/acceptance/library/acceptance_probe.py")
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)

PARAMS = {"ping_wait": 0}
PROBES = [{"rail": r, "peer": "gpu-1", "ip": f"198.19.{r}.3"} for r in range(3)]


def reached(rail: int, ok: bool, error: str = "") -> dict:
    return {"rail": rail, "peer": "gpu-1", "ip": f"198.19.{rail}.3", "ping_ok": ok, "ping_error": "" if ok else error}


def test_a_rail_lost_once_and_answering_again_counts_as_reached(monkeypatch):
    asked = []

    def again(params, p):
        asked.append(p["rail"])
        return reached(p["rail"], True)

    monkeypatch.setattr(probe, "_reach", again)
    first = [reached(0, True), reached(1, False, "timed out after 5.6 s"), reached(2, True)]
    out = probe._reach_again(PARAMS, PROBES, first)
    assert asked == [1], "only the lost rail is pinged again"
    assert [r["ping_ok"] for r in out] == [True, True, True]
    assert out[0] is first[0] and out[2] is first[2]


def test_a_rail_lost_twice_stays_lost_with_both_attempts_said(monkeypatch):
    monkeypatch.setattr(probe, "_reach", lambda params, p: reached(p["rail"], False, "100% packet loss"))
    first = [reached(0, True), reached(1, False, "timed out after 5.6 s"), reached(2, False, "100% packet loss")]
    out = probe._reach_again(PARAMS, PROBES, first)
    assert [r["ping_ok"] for r in out] == [True, False, False]
    assert out[1]["ping_error"] == "timed out after 5.6 s; again: 100% packet loss"
    assert out[2]["ping_error"] == "100% packet loss; again: 100% packet loss"


def test_nothing_lost_pings_nothing_again(monkeypatch):
    monkeypatch.setattr(probe, "_reach", lambda params, p: (_ for _ in ()).throw(AssertionError("pinged again")))
    first = [reached(r, True) for r in range(3)]
    assert probe._reach_again(PARAMS, PROBES, first) == first
