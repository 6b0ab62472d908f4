"""A lab node's NVMe drives: one sparse image per drive its hardware tree shows in /sys/block, on a
loop device of the host, shown in the node's private /dev under the drive's name (node_init
binds the loop device's node there; the node itself may not make device nodes).

So a hosts stack that formats a server's data drives, or a role that refuses a drive holding a
filesystem, does it on a lab node against real block devices, and only against the node's own:
the host's disks are never in the node's /dev.

The images are small (DRIVE_BYTES, sparse): the tree's /sys/block still says the catalog's size,
which is what discovery and the drive choice read, while mkfs sees the image's. They live in the
node's runtime dir, survive the node's reboots (a reboot keeps its disks), and go with the node:
delete_node and gc release every loop device backed under the node's dir.
"""

from __future__ import annotations

from pathlib import Path

from railyard.drivers.lab import net, proc
from railyard.model.sysfs_discovery import NVME_BLOCK, natural_key

DRIVE_BYTES = 1 << 30


def drive_names(hw: Path) -> list[str]:
    block = hw / "sys" / "block"
    if not block.is_dir():
        return []
    return sorted((p.name for p in block.iterdir() if NVME_BLOCK.match(p.name)), key=natural_key)


def ensure(node_dir: Path, hw: Path) -> dict[str, str]:
    """Each drive of the tree on its loop device, attaching what is not attached yet and releasing
    the images of drives the tree no longer has. Returns {drive name: /dev/loopN}."""
    d = node_dir / "drives"
    wanted = drive_names(hw)
    attached = {Path(backing.removesuffix(" (deleted)")).name: dev
                for dev, backing in proc.loops_backed_under(d).items()} if d.is_dir() else {}
    for image in sorted(d.glob("*.img")) if d.is_dir() else ():
        if image.stem not in wanted:
            proc.release_loops(image)
            image.unlink()
    if not wanted:
        return {}
    d.mkdir(mode=0o700, exist_ok=True)
    out = {}
    for name in wanted:
        image = d / f"{name}.img"
        if not image.exists():
            with open(image, "wb") as f:
                f.truncate(DRIVE_BYTES)
        dev = attached.get(image.name)
        if dev is None:
            dev = net.run(["losetup", "--find", "--show", str(image)], obj=f"drive {name} of {node_dir.name}").stdout.strip()
        out[name] = dev
    return out


def env_value(drives: dict[str, str]) -> str:
    """The init's RY_DRIVES: `name=/dev/loopN` per line."""
    return "\n".join(f"{name}={dev}" for name, dev in drives.items())
