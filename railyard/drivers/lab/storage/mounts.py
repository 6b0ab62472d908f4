"""Mount points inside a lab node, for the tiers that mount something there (cache, parallel FS)."""

from __future__ import annotations

from pathlib import Path

from railyard.drivers.lab import net, proc
from railyard.drivers.lab.errors import LabError
from railyard.model import mount_points

# The script that binds a host directory, or mounts a host device, into a node's mount namespace,
# in the lab driver's directory one above this package.
MOUNTNS = Path(__file__).resolve().parent.parent / "mountns.py"


def _check_mount_point(mount: str, what: str) -> str:
    # Validation refused these already; a resource's inputs can still come from an old state.
    why = mount_points.path_problem(mount) if isinstance(mount, str) else "not a string"
    if why is not None:
        raise LabError(what, f"mount point {mount!r}: {why}")
    return mount


def _unmount_in_node(pid: int, mount: str, what: str) -> None:
    try:
        table = proc.mounts(pid)
    except OSError:
        return
    if any(m["path"] == mount for m in table):
        net.run(["nsenter", "-t", str(pid), "--mount", "--", "umount", "-l", mount], obj=f"{what} umount {mount}")
