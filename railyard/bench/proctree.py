"""Run a command and watch its whole process tree through /proc: wall time, the peak of the tree's
summed RSS, and CPU time per kind of process.

`pulumi preview` is four processes at least (the CLI, the language host, the Python program, the
dynamic provider's Python), so neither the CLI's own ru_maxrss nor /usr/bin/time (the largest
single process) is the memory a user needs; the sum, sampled, is. CPU per process tells where a
slow run spends its time (the engine, the program or the provider) before any profiler is
attached.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class TreeRun:
    returncode: int
    wall_s: float
    peak_rss_mib: float  # the tree's summed RSS at its sampled peak
    peak_process_rss_mib: float  # the largest single process
    cpu_s: dict[str, float] = field(default_factory=dict)  # by process kind
    rss_at_peak_mib: dict[str, float] = field(default_factory=dict)  # the peak's sum, by process kind
    stdout: str = ""
    stderr: str = ""
    lines: list[tuple[float, str]] = field(default_factory=list)  # (seconds since start, stdout line)

    @property
    def total_cpu_s(self) -> float:
        return sum(self.cpu_s.values())


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ')'.
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        out.setdefault(ppid, []).append(int(entry.name))
    return out


def tree(root: int) -> list[int]:
    """`root` and every process under it now."""
    kids = _children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def kind(cmdline: list[str]) -> str:
    """A short name for what a process is in a pulumi run."""
    if not cmdline:
        return "?"
    exe = os.path.basename(cmdline[0])
    joined = " ".join(cmdline)
    if exe == "pulumi":
        return "engine"
    if exe.startswith("python"):
        if "pulumi.dynamic" in joined:
            return "dynamic provider"
        if "pulumi-language-python-exec" in joined:
            return "program"
        if "ansible" in joined:
            return "ansible"
        # In a pulumi run: the language host's helpers (pip --version, plugin discovery).
        return "python (other)"
    if exe.startswith("pulumi-language") or exe == "sh":
        return "language host"
    if exe.startswith("ansible"):
        return "ansible"
    if exe in ("ssh", "sshd"):
        return "ssh"
    return "other"


def _sample(pid: int) -> tuple[int, float, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    # Fields after the command name: state is 0, utime 11, stime 12, rss 21 (pages).
    cpu = (int(fields[11]) + int(fields[12])) / _TICK
    return int(fields[21]) * _PAGE, cpu, kind([c.decode(errors="replace") for c in cmd if c])


def run(argv: list[str], *, cwd: Path | None = None, env: dict | None = None, interval: float = 0.2,
        timeout: float | None = None, on_new: Callable[[int, str], None] | None = None) -> TreeRun:
    """Run argv and sample its tree every `interval` seconds until it exits. Each stdout line is
    kept with the second it arrived (the engine's own event timestamps are whole seconds).
    `on_new(pid, kind)` is called for each process of the tree when first seen running a kind
    (to attach a profiler)."""
    import tempfile
    import threading

    with tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        lines: list[tuple[float, str]] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append((time.perf_counter() - start, line))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        peak = peak_one = 0
        at_peak: dict[str, int] = {}
        cpu_by_pid: dict[int, tuple[str, float]] = {}
        announced: dict[int, str] = {}
        try:
            while proc.poll() is None:
                total = 0
                by_kind: dict[str, int] = {}
                for pid in tree(proc.pid):
                    s = _sample(pid)
                    if s is None:
                        continue
                    rss, cpu, k = s
                    total += rss
                    by_kind[k] = by_kind.get(k, 0) + rss
                    peak_one = max(peak_one, rss)
                    # Between fork and exec a child still shows its parent's command: announce a
                    # process again when what it runs changes.
                    if on_new is not None and pid != proc.pid and k != "?" and announced.get(pid) != k:
                        announced[pid] = k
                        on_new(pid, k)
                    # A zombie's cmdline is empty: keep the kind seen while it ran.
                    cpu_by_pid[pid] = (k if k != "?" else cpu_by_pid.get(pid, (k, 0.0))[0], cpu)
                if total > peak:
                    peak, at_peak = total, by_kind
                if timeout is not None and time.perf_counter() - start > timeout:
                    proc.kill()
                    break
                time.sleep(interval)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        wall = time.perf_counter() - start
        reader.join(timeout=30)
        err.seek(0)
        cpu_by_kind: dict[str, float] = {}
        for k, c in cpu_by_pid.values():
            cpu_by_kind[k] = cpu_by_kind.get(k, 0.0) + c
        return TreeRun(proc.returncode, wall, peak / 2**20, peak_one / 2**20, cpu_by_kind, {k: v / 2**20 for k, v in at_peak.items()},
                       "".join(l for _, l in lines), err.read(), lines)
