"""A node's processes are killed until a scan finds none (node.processes._kill_node_processes): a
child forked between the scan and the kill (slurmd's health check starting sinfo) goes too."""

from __future__ import annotations

import pytest

from railyard.drivers.lab.errors import LabError
from railyard.drivers.lab.node import processes


def scans(monkeypatch, answers: list[list[int]]) -> list[list[int]]:
    killed: list[list[int]] = []
    monkeypatch.setattr(processes, "_node_processes", lambda stack, node: answers.pop(0) if answers else [])
    monkeypatch.setattr(processes.proc, "kill_all", lambda pids, what: killed.append(list(pids)))
    return killed


def test_a_child_forked_after_the_scan_is_killed_in_the_next_round(monkeypatch):
    killed = scans(monkeypatch, [[101, 102], [250], []])
    processes._kill_node_processes("s", "gpu-8")
    assert killed == [[101, 102], [250]]


def test_a_node_whose_processes_keep_appearing_is_an_error_naming_them(monkeypatch):
    killed = scans(monkeypatch, [[300 + i] for i in range(processes.KILL_ROUNDS + 1)])
    with pytest.raises(LabError, match=r"processes \[305\] kept appearing after 5 rounds"):
        processes._kill_node_processes("s", "gpu-8")
    assert len(killed) == processes.KILL_ROUNDS


def test_the_power_supervisor_and_this_process_outlive_the_nodes_boot(monkeypatch):
    """Both carry the node's marker, so every scan finds them: a power-off sparing them ends once
    only they are left, rather than killing the supervisor or calling the node unkillable."""
    import os

    me, supervisor = os.getpid(), 4242
    killed = scans(monkeypatch, [[101, me, supervisor], [me, supervisor, 250], [me, supervisor]])
    processes._kill_node_processes("s", "gpu-8", {supervisor})
    assert killed == [[101], [250]]
