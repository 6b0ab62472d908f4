"""Recovery after a killed `up`, as the README tells a user to do it: `railyard recover`, then
`railyard up`. The kill takes the engine and its plugin processes, as a crash does; the dynamic
provider's Python, a child of its shell shim, survives them, and the recovery must stop it.

The stack is the test's own, in a project copy whose `railyard` commands and engine all run with
RAILYARD_ROOT pointing at it (tests/lab/railyard_project.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from railyard import paths
from railyard.bench import proctree
from railyard.drivers.lab import control_plane, names, net
from railyard.drivers.lab import proc as lab_proc
from railyard.engine import control_plane as binaries
from railyard.engine import orphans
from railyard.procfs import cmdline
from tests.lab.railyard_project import RailyardProject, free_networks, lab_config

ROOT = paths.PROJECT_ROOT
STACK = "tkill"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    p = RailyardProject(tmp_path_factory.mktemp("recover"))
    mgmt, storage = free_networks(2)
    p.config = lab_config(2, mgmt, storage)
    p.write_stack(STACK, p.config)
    try:
        p.railyard("up", "--stack", STACK)
        yield p
    finally:
        p.cleanup()


def tail(log: Path) -> str:
    """The end of a killed up's output, for a failure's message."""
    return " | ".join(log.read_text(errors="replace").splitlines()[-15:]) if log.exists() else "(no output)"


def test_killed_up_recovers_with_the_documented_steps_and_leaves_no_plugin_running(project):
    project.config["railyard:nodePools"][0]["count"] = 4
    project.write_stack(STACK, project.config)
    log = project.dir / "killed-up.log"
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "railyard"), "up", "--stack", STACK], cwd=project.dir,
                            env=project.env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not net.netns_exists(names.node_ns(STACK, "gpu-2")):
        time.sleep(0.05)
    assert net.netns_exists(names.node_ns(STACK, "gpu-2")), f"the up never reached the new nodes: {tail(log)}"
    # The crash: railyard and the engine (one process group), then each plugin (groups of their own).
    plugins = [shim for shim in proctree.tree(proc.pid)[1:] if any("pulumi-" in a for a in cmdline(shim)[:2])]
    survivors = {pid for shim in plugins for pid in proctree.tree(shim)[1:]}
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pid in plugins:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)  # let init adopt them
    assert survivors & {o.pid for o in orphans.find(project.dir)}, \
        f"the killed up's plugins left no orphan, so this test would prove nothing (plugins {plugins}, " \
        f"their children {survivors}, orphans {orphans.find(project.dir)}): {tail(log)}"

    recover = project.railyard("recover", "--stack", STACK)
    assert "outlived their engine" in recover.stderr, recover.stderr
    assert not survivors & {o.pid for o in orphans.find(project.dir)}
    project.railyard("up", "--stack", STACK)
    project.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes", stack=STACK)
    outputs = json.loads(project.pulumi("stack", "output", "--json", stack=STACK).stdout)
    assert [n["name"] for n in outputs["inventory"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    stray = [ns for ns in net.netns_list(names.stack_prefix(STACK))
             if ns not in {names.fabric_ns(STACK), names.spine_ns(STACK), names.storage_ns(STACK)}
             | {names.node_ns(STACK, f"gpu-{i}") for i in range(4)}]
    assert stray == []
    assert orphans.find(project.dir) == [], "no plugin process outlives a killed up once it is recovered"


def test_an_up_killed_while_the_control_plane_starts_converges_after_recover(project):
    binaries.ensure()
    project.config["railyard:kubernetes"] = {}
    project.write_stack(STACK, project.config)
    log = project.dir / "killed-up.log"
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "railyard"), "up", "--stack", STACK], cwd=project.dir,
                            env=project.env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 300
    cp_ns = names.control_plane_ns(STACK)
    while time.time() < deadline and not net.netns_exists(cp_ns):
        time.sleep(0.05)
    assert net.netns_exists(cp_ns), f"the up never reached the control plane: {tail(log)}"
    time.sleep(1.5)  # some components up, the layer not yet applied
    plugins = [shim for shim in proctree.tree(proc.pid)[1:] if any("pulumi-" in a for a in cmdline(shim)[:2])]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pid in plugins:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)

    project.railyard("recover", "--stack", STACK)
    project.railyard("up", "--stack", STACK)
    project.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes", stack=STACK)
    state = control_plane.read_control_plane(STACK, project.dir)
    assert state is not None and all(state["running"].values()), state
    # one process per component: the killed create's were adopted or replaced, none doubled
    procs = {p.pid: cmdline(p.pid)[0].rsplit("/", 1)[-1] for p in lab_proc.in_namespaces({net.netns_inode(cp_ns)})}
    assert sorted(v for v in procs.values() if v in control_plane.ORDER) == sorted(control_plane.ORDER), procs
    outputs = json.loads(project.pulumi("stack", "output", "--json", stack=STACK).stdout)
    assert outputs["kubernetes"]["nodes"] == 4
