"""Bind a host directory, or mount a host block device, into a lab node's mount namespace
(standard library only; a script).

    python -I -S mountns.py bind INIT_PID SOURCE TARGET
    python -I -S mountns.py mount INIT_PID FSTYPE DEVICE TARGET

A plain ``nsenter --mount ... mount --bind SOURCE TARGET`` needs SOURCE to be visible inside the
node, and a node hides parts of the host (its /root, /run, /mnt...), where a checkout may live.
So the source is cloned as a detached mount here, in the host's mount namespace
(open_tree(OPEN_TREE_CLONE)); then this process enters the node's mount namespace and attaches
the clone at TARGET (move_mount), creating TARGET's directories first. It runs as a process of
its own because setns(2) into a mount namespace needs a single-threaded caller.

A device is mounted the same way: the filesystem is made and mounted here (fsopen, fsmount),
where the device node exists, and attached in the node, whose private /dev does not hold it.

The clone keeps the flags of the host mount it came from (read-write), so it is writable in the
node even though the node's view of the host's root is read-only.
"""

import ctypes
import os
import sys
from typing import Callable

# The same on x86_64 and aarch64 (the unified table).
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT = 428, 429, 430, 431, 432
FSOPEN_CLOEXEC = FSMOUNT_CLOEXEC = 1
FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 1, 6
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = 0o2000000
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
CLONE_NEWNS = 0x20000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(rc, what):
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def bind(pid, source, target):
    tree = _check(_libc.syscall(SYS_OPEN_TREE, AT_FDCWD, source.encode(),
                                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE), f"open_tree {source}")
    _attach(pid, tree, source, target)


def mount(pid, fstype, device, target):
    fs = _check(_libc.syscall(SYS_FSOPEN, fstype.encode(), FSOPEN_CLOEXEC), f"fsopen {fstype}")
    _check(_libc.syscall(SYS_FSCONFIG, fs, FSCONFIG_SET_STRING, b"source", device.encode(), 0),
           f"{fstype} source {device}")
    _check(_libc.syscall(SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0), f"{fstype} on {device}")
    tree = _check(_libc.syscall(SYS_FSMOUNT, fs, FSMOUNT_CLOEXEC, 0), f"fsmount {device}")
    _attach(pid, tree, device, target)


def _attach(pid, tree, source, target):
    ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    _check(_libc.setns(ns, CLONE_NEWNS), f"setns into the mount namespace of {pid}")
    os.chdir("/")
    os.makedirs(target, exist_ok=True)
    _check(_libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
           f"move_mount {source} to {target}")


def main(argv):
    verbs: dict[str, tuple[Callable[..., None], int]] = {"bind": (bind, 4), "mount": (mount, 5)}
    if not argv or argv[0] not in verbs or len(argv) != verbs[argv[0]][1] or not argv[1].isdigit():
        sys.stderr.write("usage: mountns.py bind INIT_PID SOURCE TARGET | mount INIT_PID FSTYPE DEVICE TARGET\n")
        return 2
    try:
        verbs[argv[0]][0](int(argv[1]), *argv[2:])
    except OSError as exc:
        sys.stderr.write(f"{exc.strerror or exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
