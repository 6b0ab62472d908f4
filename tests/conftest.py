"""Suite-wide: the tiers run cheapest first (pyproject's testpaths: unit, roles, engine, lab), so a
broken model fails in seconds, and `make test` says when each tier starts. `make test` runs the
suite in several worker processes (pytest-xdist, one test file to a worker), so later tiers start
while the last files of an earlier one still run; within the lab tier the longest modules go first,
so the run does not end waiting on one of them.

One checkout's lab tests at a time on a machine: the run (its controller, or the one process
without workers) holds /run/lock/railyard-lab-tests.lock while lab tests are collected, and the
workers of that run share it. Within a run, lab stacks are kept apart by their names and by the
networks each process picks (railyard.bench.stack_project.free_networks)."""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests assert what holds, not how fast: Hypothesis's default 200 ms deadline per example
# fails them on a machine busy with the lab tier's other workers.
settings.register_profile("railyard", deadline=None)
settings.load_profile("railyard")

_TIERS = {"unit": "unit (the model, commands, drivers under mocks)", "roles": "roles (Ansible against hardware trees)",
          "engine": "engine (the real Pulumi engine)", "lab": "lab (namespaces, SSH, the real engine end to end)"}
_started: set[str] = set()

# Measured (make test's --durations, 2026-12-05): the lab modules that take two minutes or more,
# longest first. Scheduled ahead of the others so that the last worker to finish is not the one
# that drew a long module near the end. A module missing here only runs in its collected place.
# test_lab_gb200 (36 trays, 3 minutes alone) leads: drawn mid-run, its tuning of 36 hosts starved
# the timing and bandwidth checks of the small modules beside it.
LONG_LAB_MODULES = ("test_lab_gb200", "test_hosts_up", "test_lab_kubernetes", "test_lab_acceptance", "test_lab_slurm",
                    "test_lab_guests", "test_hosts_redfish", "test_reap", "test_no_behaviour_change")


def _tier(nodeid: str) -> str:
    return nodeid.split("/")[1] if nodeid.startswith("tests/") and nodeid.count("/") > 1 else ""


@pytest.hookimpl(trylast=True)
def pytest_runtest_logstart(nodeid: str, location) -> None:
    tier = _tier(nodeid)
    if tier in _TIERS and tier not in _started:
        _started.add(tier)
        reporter = _reporter()
        if reporter is not None:
            reporter.write("\n")  # after the previous tier's dots
            reporter.write_line(f"tier: {_TIERS[tier]} started", bold=True)


def pytest_collection_modifyitems(session, config, items) -> None:
    # Stable: the tiers keep their order, and so do the tests inside a module.
    rank = {name: i for i, name in enumerate(LONG_LAB_MODULES)}
    tiers = {name: i for i, name in enumerate(_TIERS)}

    def key(item):
        tier = _tier(item.nodeid)
        order = tiers.get(tier, len(tiers))
        module = Path(str(item.fspath)).stem
        return (order, rank.get(module, len(rank)) if tier == "lab" else 0)

    items.sort(key=key)
    if not hasattr(config, "workerinput") and any(_tier(i.nodeid) == "lab" for i in items):
        _hold_lab_lock()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """The controller of a run with workers collects nothing itself: it takes the lock when the
    first worker reports lab tests, before any test is handed out."""
    if any(_tier(i) == "lab" for i in ids):
        _hold_lab_lock()


# Machine-wide, not per checkout: what it guards is the machine's namespaces and the fixed stack
# names some modules use (tk8s, trtr, ...), which another checkout's run would also use.
LAB_TESTS_LOCK = Path("/run/lock/railyard-lab-tests.lock")
_held: list = []


def _hold_lab_lock() -> None:
    if _held or os.geteuid() != 0:
        return
    LAB_TESTS_LOCK.parent.mkdir(parents=True, exist_ok=True)
    f = open(LAB_TESTS_LOCK, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        print(f"\nrailyard: another checkout's lab tests hold {LAB_TESTS_LOCK} ({f.read().strip() or 'unknown'}); "
              "waiting for them to finish", file=sys.__stderr__, flush=True)
        fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} in {Path(__file__).resolve().parents[1]}\n")
    f.flush()
    _held.append(f)  # held until this process exits


# Where the time goes, per worker: each test phase's worker, start and stop as the controller
# receives them. At the end the run prints each worker's busy time and the modules of the worker
# that finished last (the run's tail), and leaves every phase in .railyard/test-timeline.json.
_timeline: list[dict] = []


def pytest_runtest_logreport(report) -> None:
    worker = getattr(getattr(report, "node", None), "gateway", None)
    _timeline.append({"worker": worker.id if worker is not None else "main", "nodeid": report.nodeid,
                      "when": report.when, "start": report.start, "stop": report.stop})


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if hasattr(config, "workerinput") or not _timeline:
        return
    t0 = min(e["start"] for e in _timeline)
    busy: dict[str, float] = defaultdict(float)
    last: dict[str, float] = defaultdict(float)
    modules: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in _timeline:
        busy[e["worker"]] += e["stop"] - e["start"]
        last[e["worker"]] = max(last[e["worker"]], e["stop"] - t0)
        modules[e["worker"]][e["nodeid"].split("::")[0]] += e["stop"] - e["start"]
    terminalreporter.write_sep("=", "where the time went, per worker")
    for w in sorted(busy, key=lambda w: last[w]):
        terminalreporter.write_line(f"{w}: busy {busy[w]:.0f} s, done at {last[w]:.0f} s")
    tail = max(last, key=lambda w: last[w])
    top = sorted(modules[tail].items(), key=lambda kv: -kv[1])[:8]
    terminalreporter.write_line(f"the last to finish, {tail}, spent longest in: "
                                + ", ".join(f"{Path(m).stem} {s:.0f} s" for m, s in top))
    start, end = _cpu_at_start[0] if _cpu_at_start else None, _machine_cpu()
    if start is not None and end is not None and end[1] > start[1]:
        cpu_busy, cpu_all = end[0] - start[0], end[1] - start[1]
        terminalreporter.write_line(f"the machine's {os.cpu_count()} CPUs were {cpu_busy / cpu_all:.0%} busy over the "
                                    f"run ({cpu_busy:.0f} CPU-s, every process on the machine)")
    out = Path(config.rootpath) / ".railyard" / "test-timeline.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_timeline))
    terminalreporter.write_line(f"every test phase's worker, start and stop: {out.relative_to(config.rootpath)}")


_config: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _config[:] = [config]
    if not hasattr(config, "workerinput"):  # the summary is the controller's alone
        _cpu_at_start[:] = [_machine_cpu()]


# The whole machine's CPU over the run, read from /proc/stat: the lab's daemons (sshd, slurmd, the
# API server) are not the run's children, so `time make test` leaves them out. Both cores busy
# through the run means more workers cannot make it shorter; only less CPU can (docs/benchmarks.md).
_cpu_at_start: list[tuple[float, float] | None] = []


def _machine_cpu() -> tuple[float, float] | None:
    """(busy, all) CPU-seconds of every CPU since boot; None where /proc/stat cannot be read."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle and iowait
    return (sum(fields) - idle) / tick, sum(fields) / tick


def _reporter():
    return _config[0].pluginmanager.get_plugin("terminalreporter") if _config else None
