"""Plugin processes of this checkout that outlived their engine: found by what they run and by
having no engine above them, stopped; a live engine's plugins and lab node processes never are."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time

import pytest

from railyard import paths, procfs
from railyard.engine import orphans

VENV_PYTHON = paths.PROJECT_ROOT / ".venv" / "bin" / "python"
SLEEP = "import time; time.sleep(120)"


@pytest.fixture
def spawned():
    procs: list[subprocess.Popen] = []

    def spawn(argv, **kw) -> subprocess.Popen:
        # A session (and group) of its own, so teardown stops its children too: a stand-in
        # engine's plugin must not outlive the test as a real orphan.
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, **kw)
        procs.append(p)
        return p

    yield spawn
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _child_of(pid: int) -> int:
    found: list[int] = []

    def has_child() -> bool:
        found[:] = [p for p in procfs.pids() if procfs.ppid(p) == pid and procfs.cmdline(p)[:1] == [str(VENV_PYTHON)]]
        return bool(found)

    _wait_for(has_child)
    return found[0]


def test_a_dynamic_provider_without_an_engine_is_an_orphan_and_is_stopped(spawned, capsys):
    if not VENV_PYTHON.exists():
        pytest.fail("the virtualenv is not set up: run make")
    # The shape the SDK's shim starts: "$VIRTUALENV/bin/python -u -m pulumi.dynamic <engine>".
    stray = spawned([str(VENV_PYTHON), "-c", SLEEP, "pulumi.dynamic", "127.0.0.1:1"])
    _wait_for(lambda: procfs.cmdline(stray.pid)[:1] == [str(VENV_PYTHON)])
    assert stray.pid in {o.pid for o in orphans.find()}
    stopped = orphans.stop_all()
    assert stray.pid in {o.pid for o in stopped}
    _wait_for(lambda: stray.poll() is not None)
    assert "outlived their engine" in capsys.readouterr().err


def test_plugins_under_a_live_engine_lab_processes_and_other_pythons_are_left_alone(spawned, tmp_path):
    engine = tmp_path / "pulumi"  # anything whose executable is called pulumi stands for the engine
    shutil.copy("/bin/sh", engine)
    live = spawned([str(engine), "-c", f"'{VENV_PYTHON}' -c '{SLEEP}' pulumi.dynamic 127.0.0.1:1 & wait"],
                   env={**os.environ, "PULUMI_HOME": str(paths.pulumi_home())})
    lab = spawned([str(VENV_PYTHON), "-c", SLEEP, "pulumi.dynamic"], env={**os.environ, "RAILYARD_LAB": "lab:gpu-0"})
    plain = spawned([str(VENV_PYTHON), "-c", SLEEP])
    child = _child_of(live.pid)
    for p in (lab, plain):
        _wait_for(lambda p=p: procfs.cmdline(p.pid)[:1] == [str(VENV_PYTHON)])
    found = {o.pid for o in orphans.find()}
    assert not found & {child, lab.pid, plain.pid}
    assert live.pid in orphans.live_engines()  # what `lab gc --all` refuses to run beside


def test_an_engine_of_a_project_copy_sharing_this_checkouts_pulumi_home_is_not_this_checkouts(spawned, tmp_path):
    """The lab tests' and benchmarks' project copies borrow this checkout's PULUMI_HOME for its
    plugins; their engines run in the copy, and `lab gc --all` here must not wait for them."""
    engine = tmp_path / "pulumi"
    shutil.copy("/bin/sh", engine)
    env = {**os.environ, "PULUMI_HOME": str(paths.pulumi_home())}
    copy = spawned([str(engine), "-c", "sleep 120"], env=env, cwd=tmp_path)
    here = spawned([str(engine), "-c", "sleep 120"], env=env, cwd=paths.project_root() / "stacks")
    for p in (copy, here):
        # exe names the new program part-way through execve, before its environment can be read:
        # wait for both, or the engine is taken for one without this checkout's PULUMI_HOME.
        _wait_for(lambda p=p: procfs.exe(p.pid) == str(engine) and procfs.environ_value(p.pid, "PULUMI_HOME"))
    live = orphans.live_engines()
    assert here.pid in live and copy.pid not in live


def test_a_plugin_binary_is_this_checkouts_only_through_its_pulumi_home(spawned, tmp_path):
    plugin = tmp_path / "pulumi-resource-fake"
    shutil.copy(shutil.which("sleep"), plugin)
    ours = spawned([str(plugin), "120"], env={**os.environ, "PULUMI_HOME": str(paths.pulumi_home())})
    theirs = spawned([str(plugin), "120"], env={**os.environ, "PULUMI_HOME": str(tmp_path / "elsewhere")})
    for p in (ours, theirs):
        _wait_for(lambda p=p: procfs.cmdline(p.pid)[:1] == [str(plugin)])
    found = {o.pid for o in orphans.find()}
    assert ours.pid in found and theirs.pid not in found
    orphans.stop([o for o in orphans.find() if o.pid == ours.pid])
    _wait_for(lambda: ours.poll() is not None)
    assert theirs.poll() is None


def test_a_pid_reused_by_another_process_is_never_signalled(spawned):
    victim = spawned([str(VENV_PYTHON), "-c", SLEEP])
    _wait_for(lambda: procfs.cmdline(victim.pid)[:1] == [str(VENV_PYTHON)])
    # What find() saw at that pid was another command line: stop() must leave this process be.
    stale = orphans.Orphan(victim.pid, (str(VENV_PYTHON), "-m", "pulumi.dynamic", "127.0.0.1:1"))
    assert orphans.stop([stale], timeout=0.2) == []
    time.sleep(0.2)
    assert victim.poll() is None


def test_the_engine_layer_names_the_lab_marker_as_the_lab_does():
    """orphans repeats the lab's process marker (the engine may not import a driver): keep them equal."""
    from railyard.drivers.lab import names
    from railyard.engine import orphans

    assert orphans._LAB_MARKER == names.ENV_MARKER
