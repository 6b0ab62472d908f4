"""Recording the node states in the stack's outputs (railyard.commands.verify._record_outputs): the
record run computes every output from this checkout's stack file, so it is made only where that
file is the one the stack's last `up` ran from."""

from __future__ import annotations

import subprocess

import pytest

from railyard import paths
from railyard.commands import verify
from railyard.engine import pulumi
from railyard.stack import applied_from


@pytest.fixture
def runs(monkeypatch, tmp_path):
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.t.yaml").write_text("config:\n  railyard:region: lab\n")
    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    calls: list[str] = []
    monkeypatch.setattr(pulumi, "record_outputs", lambda stack, timeout=None: calls.append(stack) or
                        subprocess.CompletedProcess([], 0, "", ""))
    return calls


def test_the_states_are_recorded_where_the_stack_file_is_the_last_ups(runs, capsys):
    verify._record_outputs("t", {"appliedFrom": applied_from(paths.stack_file("t"))}, lambda line: None)
    assert runs == ["t"] and capsys.readouterr().err == ""


@pytest.mark.parametrize("changed, why", [
    ("stackFile", "stacks/Pulumi.t.yaml has changed since the stack's last up"),
    (None, "the stack's last up was made by a Railyard that exported no appliedFrom"),
])
def test_no_record_from_a_stack_file_the_stack_was_not_brought_up_with(runs, capsys, changed, why):
    applied = {**applied_from(paths.stack_file("t")), **({changed: "0" * 64} if changed else {})}
    verify._record_outputs("t", {"appliedFrom": applied} if changed else {}, lambda line: None)
    err = capsys.readouterr().err
    assert runs == [] and f"node states not recorded in stack t's outputs ({why}); .railyard/health/t.json " \
                          "holds them, and the next `up` records them" in err


def test_a_record_run_that_fails_or_hangs_is_said_and_verify_goes_on(runs, monkeypatch, capsys):
    applied = {"appliedFrom": applied_from(paths.stack_file("t"))}
    monkeypatch.setattr(pulumi, "record_outputs", lambda stack, timeout=None: subprocess.CompletedProcess(
        [], 255, "", "noise\nerror: the stack is currently locked by 1 lock(s)\n"))
    verify._record_outputs("t", applied, lambda line: None)
    assert "(error: the stack is currently locked by 1 lock(s))" in capsys.readouterr().err

    def hangs(stack, timeout=None):
        raise subprocess.TimeoutExpired(["pulumi"], timeout)

    monkeypatch.setattr(pulumi, "record_outputs", hangs)
    verify._record_outputs("t", applied, lambda line: None)
    assert "(the program did not finish in 600 s; `railyard recover --stack t` clears what the stopped engine " \
           "left)" in capsys.readouterr().err
