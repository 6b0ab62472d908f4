"""Pulumi plugin processes of this checkout that outlived their engine, found and stopped.

The engine starts each plugin in a process group of its own, so a `pulumi up` killed with SIGKILL
(or a lost terminal) takes neither the plugins nor their children with it. The dynamic provider's
`python -m pulumi.dynamic`, started by a shell shim, then runs on, reparented to init, listening
on a loopback port and serving nobody. `railyard up|preview|down|recover` stop such processes
before the engine starts.

A process is an orphan of this checkout when all of these hold:
- it is a plugin: this checkout's virtualenv Python running `pulumi.dynamic` or the language
  host's exec shim, or a `pulumi-resource-*` / `pulumi-language-*` binary whose PULUMI_HOME is
  this checkout's;
- no `pulumi` engine is among its ancestors (a live engine's plugins are its descendants);
- it is not a lab node's process (those carry RAILYARD_LAB and outlive every engine by design).
Its children are left alone: a provider's children may be lab nodes.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from railyard import paths, procfs

_PYTHON_PLUGINS = ("pulumi.dynamic", "pulumi-language-python-exec")
_PLUGIN_BINARIES = ("pulumi-resource-", "pulumi-language-", "pulumi-analyzer-")
_LAB_MARKER = "RAILYARD_LAB"


@dataclass(frozen=True)
class Orphan:
    pid: int
    argv: tuple[str, ...]

    def describe(self) -> str:
        return f"pid {self.pid}: {' '.join(self.argv)[:160]}"


def _resolved(path: str | None) -> str | None:
    return os.path.realpath(path) if path else None


def _is_engine(pid: int) -> bool:
    exe = procfs.exe(pid)
    return exe is not None and os.path.basename(exe.removesuffix(" (deleted)")) == "pulumi"


def _is_plugin(pid: int, argv: list[str], venv_bin: str, home: str | None) -> bool:
    if not argv:
        return False
    # The shim runs "$VIRTUALENV/bin/python": compare the directory, since the interpreter itself
    # is a link out of the virtualenv.
    if os.sep in argv[0] and _resolved(os.path.dirname(argv[0])) == venv_bin:
        return any(a == "pulumi.dynamic" or a.endswith(_PYTHON_PLUGINS[1]) for a in argv[1:4])
    names = [os.path.basename(a) for a in argv[:2]]
    if any(n.startswith(_PLUGIN_BINARIES) for n in names):
        return _resolved(procfs.environ_value(pid, "PULUMI_HOME")) == home
    return False


def find(root: Path | None = None) -> list[Orphan]:
    root = root or paths.project_root()
    # Project copies (tests, benchmarks) run this checkout's virtualenv too: Pulumi.yaml names it.
    venv_bin = os.path.realpath(paths.PROJECT_ROOT / ".venv" / "bin")
    home = _resolved(str(paths.pulumi_home(root)))
    me = os.getpid()
    found = []
    for pid in procfs.pids():
        if pid == me:
            continue
        argv = procfs.cmdline(pid)
        if not _is_plugin(pid, argv, venv_bin, home) or not procfs.alive(pid):
            continue
        if procfs.environ_value(pid, _LAB_MARKER) is not None:
            continue
        if any(_is_engine(a) for a in procfs.ancestors(pid)):
            continue
        found.append(Orphan(pid, tuple(argv)))
    return found


def stop(orphans: list[Orphan], timeout: float = 5.0) -> list[Orphan]:
    """SIGTERM each, SIGKILL what is left after `timeout`; returns those that were running."""
    running = []
    for o in orphans:
        try:
            os.kill(o.pid, signal.SIGTERM)
            running.append(o)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while any(procfs.alive(o.pid) for o in running) and time.monotonic() < deadline:
        time.sleep(0.05)
    for o in running:
        if procfs.alive(o.pid):
            try:
                os.kill(o.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return running


def stop_all(root: Path | None = None) -> list[Orphan]:
    """Find this checkout's orphaned plugins and stop them, saying so on stderr."""
    stopped = stop(find(root))
    if stopped:
        print(f"railyard: stopped {len(stopped)} Pulumi plugin process(es) of this checkout that outlived their "
              "engine (a killed `pulumi up`):", file=sys.stderr)
        for o in stopped:
            print(f"  {o.describe()}", file=sys.stderr)
    return stopped


def live_engines(root: Path | None = None) -> list[int]:
    """Pids of running `pulumi` engines of this checkout (their PULUMI_HOME is its own)."""
    home = _resolved(str(paths.pulumi_home(root or paths.project_root())))
    return [pid for pid in procfs.pids()
            if pid != os.getpid() and _is_engine(pid) and procfs.alive(pid)
            and _resolved(procfs.environ_value(pid, "PULUMI_HOME")) == home]
