"""`railyard tune` on a hosts stack (the stack's outputs and the run stood in): each host gets its
driver's variables, as under `up`, and a stack whose key is ssh-agent's runs with the agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from railyard.cli import main
from railyard.commands import tune
from railyard.tuning import runner

EXAMPLE = "onprem-dgx"


@pytest.fixture
def ran(monkeypatch):
    calls = []
    nodes = [{"name": f"dgx-{i}", "management_ip": f"198.18.101.{11 + i}", "host_key": "ssh-ed25519 AAAA"}
             for i in range(32)]
    monkeypatch.setattr(tune.pulumi, "stack_outputs", lambda stack, secrets: {
        "inventory": nodes, "access": {"user": "root", "privateKey": None}})

    def run(stack, hosts, key, **kw):
        calls.append((hosts, key))
        return runner.RunResult(run_dir=Path("/nonexistent"), status="successful", rc=0)

    monkeypatch.setattr(runner, "run", run)
    return calls


def test_a_stack_whose_key_is_the_agents_is_tuned_with_the_agent_and_its_drivers_variables(ran, monkeypatch):
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/agent.sock")
    assert main(["tune", "--stack", EXAMPLE, "--check"]) == 0
    (hosts, key), = ran
    assert key is None
    assert hosts[3].vars["rail_network_interfaces"] and hosts[3].vars["railyard_jump_host"]["address"] == "203.0.113.10"


def test_without_an_agent_it_says_so_and_runs_nothing(ran, monkeypatch, capsys):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    assert main(["tune", "--stack", EXAMPLE]) == 1
    assert "SSH_AUTH_SOCK is not set" in capsys.readouterr().err and ran == []
