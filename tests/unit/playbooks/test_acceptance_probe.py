"""The acceptance_probe module's rail pings (its _reach_all, which the probe mode runs): a rail that
got no ping through is pinged once more, and only a rail lost both times reaches the judge
(railyard.model.acceptance) as lost, saying both attempts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
IPERF3 = ROOT / "railyard/data/fixtures/iperf3"
PAIR = {"ip": "198.19.3.3", "source_ip": "198.19.3.2", "port": 5203}
spec = importlib.util.spec_from_file_location(
    "acceptance_probe", ROOT / "playbooks/roles/acceptance/library/acceptance_probe.py")
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)

PARAMS = {"ping_wait": 0}
PROBES = [{"rail": r, "peer": "gpu-1", "ip": f"198.19.{r}.3", "routers": 1} for r in range(3)]


def pinger(answers: dict[int, list[str]], asked: list[int]):
    """_reach as the module has it, with each rail's pings answered in turn ("" is a reply)."""
    def reach(params, p):
        asked.append(p["rail"])
        error = answers[p["rail"]].pop(0)
        return {"rail": p["rail"], "peer": p["peer"], "ip": p["ip"], "routers": p["routers"], "tool": "iperf3",
                "ping_ok": not error, "ping_error": error, "routers_seen": None if error else 1, "routers_error": ""}
    return reach


def test_a_rail_lost_once_and_answering_again_counts_as_reached_with_its_route(monkeypatch):
    asked: list[int] = []
    monkeypatch.setattr(probe, "_reach", pinger({0: [""], 1: ["timed out after 5.6 s", ""], 2: [""]}, asked))
    rails = probe._reach_all(PARAMS, PROBES)
    assert sorted(asked) == [0, 1, 1, 2], "only the lost rail is pinged again"
    assert [(r["ping_ok"], r["ping_error"], r["routers_seen"]) for r in rails] == [(True, "", 1)] * 3


def test_a_rail_lost_twice_stays_lost_saying_both_attempts(monkeypatch):
    asked: list[int] = []
    monkeypatch.setattr(probe, "_reach", pinger(
        {0: [""], 1: ["timed out after 5.6 s", "100% packet loss"], 2: ["100% packet loss"] * 2}, asked))
    rails = probe._reach_all(PARAMS, PROBES)
    assert [r["ping_ok"] for r in rails] == [True, False, False]
    assert rails[1]["ping_error"] == "timed out after 5.6 s (again: 100% packet loss)"
    assert rails[2]["ping_error"] == "100% packet loss (again: 100% packet loss)"
    assert [r["rail"] for r in rails] == [0, 1, 2] and rails[1]["tool"] == "iperf3"


def test_the_probe_mode_reports_a_rail_that_answered_the_second_ping_and_measures_it(monkeypatch):
    class Module:  # AnsibleModule as the module uses it: params in, exit_json out
        def __init__(self, argument_spec, supports_check_mode):
            self.params = {k: v.get("default") for k, v in argument_spec.items()}
            self.params.update(mode="probe", probes=PROBES, ping_wait=0)

        def exit_json(self, **result):
            raise SystemExit(result)

    asked: list[int] = []
    monkeypatch.setattr(probe, "AnsibleModule", Module)
    monkeypatch.setattr(probe, "_reach", pinger({0: [""], 1: ["timed out after 5.6 s", ""], 2: ["lost", "lost"]}, asked))
    monkeypatch.setattr(probe, "_bandwidth", lambda params, p: (10.0, ""))
    try:
        probe.main()
    except SystemExit as done:
        result = done.args[0]
    rails = result["acceptance"]["rails"]
    assert [(r["rail"], r["ping_ok"], r["gbps"]) for r in rails] == [(0, True, 10.0), (1, True, 10.0), (2, False, None)]
    assert rails[2]["iperf_error"] == "no ping, no probe" and rails[2]["ping_error"] == "lost (again: lost)"


def test_an_iperf3_probe_is_bounded_by_max_gbps_and_unbounded_at_zero(monkeypatch):
    """The lab bounds its probes (its veths' bytes are this machine's CPU time); a real rail is
    measured at its full rate. iperf3 answers with its real JSON (railyard/data/fixtures/iperf3)."""
    from railyard.drivers.lab.tuning import acceptance_vars

    ran: list[list[str]] = []

    def run(argv, timeout):
        ran.append(argv)
        return 0, (IPERF3 / "iperf3-json-client-bitrate-2G.json").read_text(), ""

    monkeypatch.setattr(probe, "_run", run)
    monkeypatch.setattr(probe, "_rdma", lambda params, device: False)
    for cap, bound in ((acceptance_vars()["acceptance_max_gbps"], ["--bitrate", "2G"]), (0, [])):
        assert probe._bandwidth({"seconds": 1, "timeout": 8, "max_gbps": cap}, PAIR) == (1.998, "")
        assert ran[-1][ran[-1].index("--connect-timeout") + 2:] == bound, ran[-1]


def test_a_probe_iperf3_could_not_connect_keeps_iperf3s_reason(monkeypatch):
    # iperf3 3.12 exits 0 here: the reason is in its JSON's `error`, and `end` is empty.
    refused = (IPERF3 / "iperf3-json-client-refused.json").read_text()
    monkeypatch.setattr(probe, "_run", lambda argv, timeout: (0, refused, ""))
    monkeypatch.setattr(probe, "_rdma", lambda params, device: False)
    assert probe._bandwidth({"seconds": 1, "timeout": 8, "max_gbps": 2}, PAIR) == (
        None, "unable to connect to server: Connection refused")


def test_a_negative_max_gbps_is_refused_before_any_probe(monkeypatch):
    class Module:
        def __init__(self, argument_spec, supports_check_mode):
            self.params = {k: v.get("default") for k, v in argument_spec.items()}
            self.params.update(mode="probe", probes=PROBES, max_gbps=-2.0)

        def fail_json(self, msg):
            raise SystemExit(msg)

    monkeypatch.setattr(probe, "AnsibleModule", Module)
    monkeypatch.setattr(probe, "_reach_all", lambda params, probes: pytest.fail("probed"))
    with pytest.raises(SystemExit, match=r"max_gbps: -2 is below 0; .* or 0 for the rail's full rate"):
        probe.main()
