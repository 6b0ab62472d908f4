"""acceptance.run's verdict under onFailure (the playbook run replaced by what its nodes would
report): who is taken out of scheduling, by which scheduler, and when `up` fails instead.
tests/lab/test_lab_acceptance.py and test_lab_kubernetes.py run it on lab nodes."""

from __future__ import annotations

import pytest

from railyard.tuning import acceptance

HOSTS = {n: {"address": f"198.18.0.{i}", "host_key": "k", "vars": {}} for i, n in enumerate(("gpu-0", "gpu-1", "gpu-2"))}


def props(**extra):
    return {"stack": "t", "user": "u", "private_key": "pk", "hosts": HOSTS, "mtu": 4096, "tolerance": 0.25,
            "on_failure": "cordon", "controller": None, **extra}


@pytest.fixture
def runs(monkeypatch, tmp_path):
    calls: list[dict] = []

    def run_isolated(p):
        calls.append(p)
        if p.get("tags") == "drain":
            return {"ok": True, "run_dir": str(tmp_path)}
        return {"ok": True, "run_dir": str(tmp_path), "failures": [], "reports": {}}

    monkeypatch.setattr(acceptance.runner, "run_isolated", run_isolated)
    return calls


def failing(monkeypatch, nodes):
    from railyard.model.acceptance import Finding

    def evaluate(reports, hosts, **_):
        return {"findings": [Finding(n, "pfs", "not mounted") for n in nodes], "rails": [], "median_gbps": None}

    monkeypatch.setattr(acceptance, "evaluate", evaluate)
    monkeypatch.setattr(acceptance, "markdown", lambda *a, **k: "")


def test_kubernetes_alone_takes_the_node_out_without_a_slurm_run(monkeypatch, runs):
    failing(monkeypatch, ["gpu-1"])
    out = acceptance.run(props(kubernetes=True))
    assert out["drained"] == [] and not out["passed"]  # nothing drained: no Slurm
    assert out["cordoned"] == {"gpu-1": "railyard: acceptance: gpu-1: pfs: not mounted"}
    assert [c.get("tags") for c in runs] == ["acceptance"]  # no drain play: no Slurm to drain in


def test_slurm_drains_on_its_controller_with_the_reason(monkeypatch, runs):
    failing(monkeypatch, ["gpu-2"])
    out = acceptance.run(props(controller="gpu-0"))
    drain = runs[-1]
    assert drain["tags"] == "drain" and list(drain["hosts"]) == ["gpu-0"]
    assert drain["hosts"]["gpu-0"]["vars"]["acceptance_drain"] == [
        {"node": "gpu-2", "reason": "railyard: acceptance: gpu-2: pfs: not mounted"}]
    assert out["cordoned"] == {"gpu-2": "railyard: acceptance: gpu-2: pfs: not mounted"} and out["drained"] == ["gpu-2"]


@pytest.mark.parametrize("extra, says", [
    ({}, "no scheduler to take the nodes out of"),
    ({"on_failure": "fail", "kubernetes": True}, "acceptance failed:"),
])
def test_without_a_scheduler_or_under_fail_up_fails_naming_the_node(monkeypatch, runs, extra, says):
    failing(monkeypatch, ["gpu-1"])
    with pytest.raises(acceptance.AcceptanceFailed, match=says) as err:
        acceptance.run(props(**extra))
    assert "gpu-1: pfs: not mounted" in str(err.value)


def test_every_node_failing_drains_none(monkeypatch, runs):
    failing(monkeypatch, list(HOSTS))
    with pytest.raises(acceptance.AcceptanceFailed, match="nothing was drained"):
        acceptance.run(props(kubernetes=True, controller="gpu-0"))
    assert [c.get("tags") for c in runs] == ["acceptance"]
