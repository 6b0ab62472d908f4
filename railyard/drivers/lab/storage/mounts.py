"""Mount points inside a lab node, for the tiers that mount something there (cache, parallel FS)."""

from __future__ import annotations

import os
from pathlib import Path

from railyard.drivers.lab import net, proc
from railyard.drivers.lab.errors import LabError

# The script that binds a host directory, or mounts a host device, into a node's mount namespace,
# in the lab driver's directory one above this package.
MOUNTNS = Path(__file__).resolve().parent.parent / "mountns.py"


def _check_mount_point(mount: str, what: str) -> str:
    if not isinstance(mount, str) or not mount.startswith("/") or mount.rstrip("/") in ("", "/proc", "/sys", "/dev", "/run"):
        raise LabError(what, f"mount point must be an absolute path other than /, /proc, /sys, /dev, /run: {mount!r}")
    norm = os.path.normpath(mount)
    if any(part in ("..", ".") for part in mount.split("/")) or "\n" in mount or " " in mount:
        raise LabError(what, f"mount point {mount!r} must be a plain path")
    return norm


def _unmount_in_node(pid: int, mount: str, what: str) -> None:
    try:
        table = proc.mounts(pid)
    except OSError:
        return
    if any(m["mountpoint"] == mount for m in table):
        net.run(["nsenter", "-t", str(pid), "--mount", "--", "umount", "-l", mount], obj=f"{what} umount {mount}")
