"""Reading processes from /proc: the one implementation the lab driver (whose objects are
processes in namespaces) and the engine layer (which finds orphaned plugins) share."""

from __future__ import annotations

import os


def pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def ns_inode(pid: int, kind: str = "net") -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:  # gone, a zombie, or a kernel thread
        return None


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    return stat[stat.rindex(b")") + 2:].split()


def alive(pid: int) -> bool:
    """True for a running process (a zombie is dead: it holds no namespace any more)."""
    fields = _stat_fields(pid)
    return bool(fields and fields[0] not in (b"Z", b"X"))


def ppid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields and len(fields) > 1 else None


def uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
    except OSError:
        return []


def exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def environ_value(pid: int, key: str) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    prefix = key.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode(errors="replace")
    return None


def ancestors(pid: int) -> list[int]:
    """pid's parent, its parent, … up to (not including) pid 0."""
    out: list[int] = []
    seen = {pid}
    current = ppid(pid)
    while current and current not in seen:
        out.append(current)
        seen.add(current)
        current = ppid(current)
    return out
