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

_DYNAMIC_PROVIDER = "pulumi.dynamic"  # python -m pulumi.dynamic
_EXEC_SHIM = "pulumi-language-python-exec"  # the language host's program runner
_PLUGIN_BINARIES = ("pulumi-resource-", "pulumi-language-", "pulumi-analyzer-")
# The lab driver's names.ENV_MARKER: the engine layer may not import a driver, so the name is
# repeated here (tests/unit/engine/test_orphans.py starts a process carrying it).
_LAB_MARKER = "RAILYARD_LAB"


@dataclass(frozen=True)
class Orphan:
    pid: int
    argv: tuple[str, ...]

    def describe(self) -> str:
        return f"pid {self.pid}: {' '.join(self.argv)[:160]}"


def _resolved(path: str | None) -> str | None:
    return os.path.realpath(path) if path else None


def _engine_names(root: Path) -> set[str]:
    """What a `pulumi` engine's executable may be: anything called pulumi, and whatever this
    checkout's `.railyard/bin/pulumi` resolves to (an ambient binary may bear another name)."""
    link = paths.bin_dir(root) / "pulumi"
    return {"pulumi", os.path.basename(os.path.realpath(link))} if link.exists() else {"pulumi"}


def _maybe_engine(pid: int, engine_names: set[str]) -> bool:
    """True for an engine, and for a process whose executable cannot be read (another user's, or
    one going away): never take a plugin for an orphan on a guess."""
    exe = procfs.exe(pid)
    if exe is None:
        return procfs.alive(pid)
    return os.path.basename(exe.removesuffix(" (deleted)")) in engine_names


def _is_plugin(pid: int, argv: list[str], venv_bin: str, home: str | None) -> bool:
    if not argv:
        return False
    # The shim runs "$VIRTUALENV/bin/python": compare the directory, since the interpreter itself
    # is a link out of the virtualenv.
    if os.sep in argv[0] and _resolved(os.path.dirname(argv[0])) == venv_bin:
        return any(a == _DYNAMIC_PROVIDER or a.endswith(_EXEC_SHIM) for a in argv[1:4])
    names = [os.path.basename(a) for a in argv[:2]]
    if any(n.startswith(_PLUGIN_BINARIES) for n in names):
        return _resolved(procfs.environ_value(pid, "PULUMI_HOME")) == home
    return False


def find(root: Path | None = None) -> list[Orphan]:
    root = root or paths.project_root()
    # Project copies (tests, benchmarks) run this checkout's virtualenv too: Pulumi.yaml names it.
    venv_bin = os.path.realpath(paths.PROJECT_ROOT / ".venv" / "bin")
    home = _resolved(str(paths.pulumi_home(root)))
    engine_names = _engine_names(root)
    me, uid = os.getpid(), os.geteuid()
    found = []
    for pid in procfs.pids():
        # Only processes this user may stop (all of them for root).
        if pid == me or (uid != 0 and procfs.uid(pid) != uid):
            continue
        argv = procfs.cmdline(pid)
        if not _is_plugin(pid, argv, venv_bin, home) or not procfs.alive(pid):
            continue
        if procfs.environ_value(pid, _LAB_MARKER) is not None:
            continue
        # init (pid 1) adopts orphans; it is never an engine, and its executable may be unreadable.
        if any(_maybe_engine(a, engine_names) for a in procfs.ancestors(pid) if a != 1):
            continue
        found.append(Orphan(pid, tuple(argv)))
    return found


def stop(orphans: list[Orphan], timeout: float = 5.0) -> list[Orphan]:
    """SIGTERM each, SIGKILL what is left after `timeout`; returns those that were running.

    Signals go through a pidfd taken while the process is still the one found (same command
    line), so a pid reused meanwhile, a lab node's process say, can never receive them.
    """
    held: list[tuple[Orphan, int]] = []
    for o in orphans:
        try:
            fd = os.pidfd_open(o.pid)
        except OSError:  # gone, or not ours to stop
            continue
        if tuple(procfs.cmdline(o.pid)) != o.argv:
            os.close(fd)
            continue
        held.append((o, fd))
    running = []
    try:
        for o, fd in held:
            try:
                signal.pidfd_send_signal(fd, signal.SIGTERM)
                running.append((o, fd))
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        while any(procfs.alive(o.pid) for o, _ in running) and time.monotonic() < deadline:
            time.sleep(0.05)
        for o, fd in running:
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:  # exited already
                pass
    finally:
        for _, fd in held:
            os.close(fd)
    return [o for o, _ in running]


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
    """Pids of running `pulumi` engines of this checkout: their PULUMI_HOME is its own and they run
    in it (an engine works in its project's directory). Copies of the project that share this
    checkout's PULUMI_HOME for its plugins (the lab tests', the benchmarks') run elsewhere, and their
    engines are not this checkout's stacks."""
    root = root or paths.project_root()
    home = _resolved(str(paths.pulumi_home(root)))
    here = Path(os.path.realpath(root))
    names = _engine_names(root)
    return [pid for pid in procfs.pids()
            if pid != os.getpid() and procfs.exe(pid) is not None and _maybe_engine(pid, names)
            and procfs.alive(pid) and _resolved(procfs.environ_value(pid, "PULUMI_HOME")) == home
            and Path(procfs.cwd(pid) or "/nonexistent").is_relative_to(here)]
