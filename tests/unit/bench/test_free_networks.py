"""The networks the lab tests and benchmarks pick: several processes pick at once (make test's
workers), and none may be handed a network another has just picked and not routed yet."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from railyard.bench import stack_project
from railyard.drivers.lab import net

POOL = "198.18.128.0/22"


@pytest.fixture
def registry(tmp_path, monkeypatch):
    monkeypatch.setattr(stack_project, "RESERVATIONS", tmp_path / "nets")
    monkeypatch.setattr(net, "overlapping_routes", lambda cidr, *a, **k: [])  # a host routing none of the pool
    return tmp_path / "nets"


def _record(registry, cidr: str, pid: int, age: float = 0) -> None:
    registry.mkdir(exist_ok=True)
    (registry / cidr.replace("/", "_")).write_text(f"{pid} {time.time() - age:.0f}\n")


def test_another_live_process_s_pick_is_skipped_and_the_pick_is_recorded(registry):
    _record(registry, "198.18.131.0/24", pid=1)  # pid 1 is alive for as long as the machine is
    assert stack_project.free_networks(POOL, 1, 24) == ["198.18.130.0/24"]
    assert (registry / "198.18.130.0_24").read_text().split()[0] == str(os.getpid())


def test_a_small_pick_of_another_process_blocks_the_large_block_holding_it(registry):
    _record(registry, "198.18.128.0/24", pid=1)
    with pytest.raises(RuntimeError, match="no 1 free /22 networks"):
        stack_project.free_networks(POOL, 1, 22)


def test_picks_of_a_dead_process_or_older_than_the_reservation_are_free_again(registry):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    _record(registry, "198.18.131.0/24", pid=int(dead))
    _record(registry, "198.18.130.0/24", pid=1, age=stack_project.RESERVATION_S + 60)
    assert stack_project.free_networks(POOL, 2, 24) == ["198.18.131.0/24", "198.18.130.0/24"]


def test_one_s_own_earlier_picks_are_the_caller_s_to_pass_as_taken(registry):
    first = stack_project.free_networks(POOL, 1, 24)
    assert stack_project.free_networks(POOL, 1, 24) == first
    assert stack_project.free_networks(POOL, 1, 24, taken=set(first)) != first


def test_processes_picking_at_once_get_different_networks(registry):
    # Each stays alive until all have picked, as test workers do while their stacks come up.
    code = ("import sys; from railyard.bench import stack_project as s; from railyard.drivers.lab import net; "
            f"s.RESERVATIONS = __import__('pathlib').Path({str(registry)!r}); "
            "net.overlapping_routes = lambda *a, **k: []; "
            "print(s.free_networks(sys.argv[1], 1, 24)[0], flush=True); sys.stdin.read()")
    procs = [subprocess.Popen([sys.executable, "-c", code, POOL], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for _ in range(4)]
    try:
        picked = [p.stdout.readline().strip() for p in procs]
    finally:
        for p in procs:
            p.communicate(timeout=60)
    assert len(set(picked)) == 4 and all(picked), picked
