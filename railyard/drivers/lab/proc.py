"""Processes, mounts and loop devices, read from /proc and /sys: what `delete` and `gc` clean up.

A lab node is a set of processes sharing one network namespace, so the processes of a node are
found by comparing /proc/PID/ns/net with the node's netns; nothing is found by name alone.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from railyard.drivers.lab.errors import LabError
from railyard.drivers.lab.net import run
from railyard.model import mount_points
# The /proc readers are shared with the engine layer; lab callers know them as proc.<name>.
from railyard.procfs import alive, cmdline, environ_value, ns_inode, pids  # noqa: F401


@dataclass(frozen=True)
class Proc:
    pid: int
    netns: int | None
    argv: tuple[str, ...]

    def to_json(self) -> dict:
        return {"pid": self.pid, "netns_inode": self.netns, "argv": list(self.argv)}


def in_namespaces(netns_inodes: set[int]) -> list[Proc]:
    """Every live process whose network namespace is one of `netns_inodes`."""
    host = ns_inode(1)
    wanted = netns_inodes - {host, ns_inode(os.getpid())}  # never the host's own namespace
    found = []
    for pid in pids():
        ino = ns_inode(pid)
        if ino in wanted and alive(pid):
            found.append(Proc(pid, ino, tuple(cmdline(pid))))
    return found


def marked(key: str, match) -> list[tuple[Proc, str]]:
    """Live processes whose environment has `key` with a value for which match(value) is true,
    each with that value."""
    found = []
    for pid in pids():
        value = environ_value(pid, key)
        if value is not None and match(value) and alive(pid):
            found.append((Proc(pid, ns_inode(pid), tuple(cmdline(pid))), value))
    return found


def by_mount_source(mountpoint: str, match) -> list[tuple[Proc, str]]:
    """Live processes whose mount namespace has `mountpoint` mounted from a source for which
    match(source) is true, each with that source.

    A lab node's mounts name the node (node_init.py mounts its /run from ``ry-<tag>-node:<node>``)
    and every process of the node lives in its mount namespace, so this finds them all, even
    sshd, which overwrites its environment with its process title, and even after the node's
    netns handle was removed.
    """
    groups: dict[int, list[int]] = {}
    mine = ns_inode(os.getpid(), "mnt")
    for pid in pids():
        ino = ns_inode(pid, "mnt")
        if ino is not None and ino != mine:
            groups.setdefault(ino, []).append(pid)
    found: list[tuple[Proc, str]] = []
    for members in groups.values():
        source = None
        for pid in members:
            try:
                table = mounts(pid)
            except OSError:
                continue
            hits = [m["source"] for m in table if m["path"] == mountpoint]
            source = hits[-1] if hits else ""
            break
        if source and match(source):
            found.extend((Proc(pid, ns_inode(pid), tuple(cmdline(pid))), source) for pid in members if alive(pid))
    return found


def service_pid(pidfile: Path, netns_inode: int | None, name: str) -> int | None:
    """The process a service's pid file names, if it is alive, runs the program `name` and lives
    in the service's current network namespace (not a reused pid, nor an earlier incarnation's)."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    argv = cmdline(pid)
    if netns_inode is None or not alive(pid) or ns_inode(pid) != netns_inode or not argv or \
            os.path.basename(argv[0]) != name:
        return None
    return pid


def service_processes(netns_inode: int | None, key: str, marker: str) -> list[int]:
    """Every process of a service: those in its namespace, and those its environment marks (an
    earlier incarnation whose namespace went away)."""
    found: set[int] = set()
    if netns_inode is not None:
        found.update(p.pid for p in in_namespaces({netns_inode}))
    found.update(p.pid for p, _ in marked(key, lambda v: v == marker))
    return sorted(found)


def kill_all(procs: list[int], *, what: str, timeout: float = 5.0) -> None:
    """SIGKILL every pid and wait until none is running; lab processes hold no state worth a
    graceful stop, and a lingering one would keep its namespace (and links) alive."""
    me = os.getpid()
    todo = [p for p in procs if p not in (me, 1)]
    for pid in todo:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in todo if alive(p)]
        if not left:
            return
        if time.monotonic() > deadline:
            raise LabError(what, f"processes {left} survived SIGKILL for {timeout:g}s")
        time.sleep(0.01)


# --- mounts ------------------------------------------------------------------------------------

def mounts(pid: int | str = "self") -> list[dict[str, str]]:
    """The mount table of a process's mount namespace (mount_points.mounts: dev, path, fstype, source)."""
    return mount_points.mounts(f"/proc/{pid}/mountinfo")


def mounts_under(path: Path | str) -> list[str]:
    """Mount points at or below `path` in our own mount namespace, deepest first."""
    base = os.path.realpath(path)
    hits = {m["path"] for m in mounts() if m["path"] == base or m["path"].startswith(base + "/")}
    return sorted(hits, key=len, reverse=True)


def unmount_under(path: Path | str) -> list[str]:
    done = []
    for mp in mounts_under(path):
        run(["umount", "-l", mp], obj=f"mount {mp}", check=False)
        done.append(mp)
    return done


def remove_tree(path: Path | str) -> bool:
    """rm -rf that first unmounts anything mounted below, so it never deletes through a mount."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return False
    unmount_under(p)
    left = mounts_under(p)
    if left:
        raise LabError(f"dir {p}", f"still has mounts {left}; not removing it")
    shutil.rmtree(p, ignore_errors=False) if p.is_dir() and not p.is_symlink() else p.unlink()
    return True


# --- loop devices ------------------------------------------------------------------------------

def loops_backed_under(path: Path | str) -> dict[str, str]:
    """Loop devices whose backing file lies under `path`: {"/dev/loop3": backing file}."""
    base = os.path.realpath(path)
    found = {}
    sysblock = Path("/sys/block")
    for dev in sorted(sysblock.glob("loop*")):
        try:
            backing = (dev / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue
        clean = backing.removesuffix(" (deleted)")
        if clean == base or clean.startswith(base + "/"):
            found[f"/dev/{dev.name}"] = backing
    return found


def detach_loop(dev: str) -> None:
    run(["losetup", "-d", dev], obj=f"loop device {dev}", check=False)


def release_loops(path: Path | str, timeout: float = 15.0) -> list[str]:
    """Detach every loop device backed by a file under `path` and wait until the kernel let them
    go (a filesystem unmounted with its namespace's last process releases its device a moment
    later; detaching a busy device only marks it to go when unused). Returns the devices. The
    moment is longer on a loaded machine: 3 s failed with several lab stacks changing at once."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        loops = loops_backed_under(path)
        if not loops:
            return seen
        for dev in loops:
            if dev not in seen:
                seen.append(dev)
            detach_loop(dev)
        if time.monotonic() > deadline:
            raise LabError(f"dir {path}", f"loop devices {sorted(loops)} are still in use")
        time.sleep(0.02)
