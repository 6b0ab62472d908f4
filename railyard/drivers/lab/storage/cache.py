"""The local NVMe cache tier of a lab stack: per node, a filesystem on loop devices.

``create_cache`` makes, per node, sparse image files under the node's runtime dir on loop
devices, formatted with the configured filesystem and mounted at the configured mount point
inside the node's mount namespace only. A RAID level over several images needs the kernel's md
driver (``/proc/mdstat``); without it (as on the lab's own CI machine) one image stands in for
the array and the result says so in "note". After mounting, the loop devices are marked to
detach themselves (``losetup -d`` on a busy device sets autoclear), so a node that dies leaves no
loop device behind.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from railyard.drivers.lab import names, net, node, proc
from railyard.drivers.lab.errors import LabError, require_root
from railyard.drivers.lab.storage.mounts import MOUNTNS, _check_mount_point, _unmount_in_node


# Loop devices a node's cache may take: a node's share of the host's loop budget.
MAX_DRIVES = 16


def md_available() -> bool:
    """Whether the kernel offers md (software RAID): it shows /proc/mdstat when it does."""
    return Path("/proc/mdstat").exists()


def _cache_dir(stack: str, node_name: str, root: Path | None) -> Path:
    return node.node_dir(stack, node_name, root) / "cache"


def _cache_id(stack: str, node_name: str) -> str:
    return f"{names.node_ns(stack, node_name)}/cache"


def _md_name(stack: str, node_name: str) -> str:
    return f"{names.stack_prefix(stack)}{names.node_tag(node_name)}-cache"


def create_cache(stack: str, node_name: str, *, mount: str = "/mnt/cache", fs: str = "xfs", raid: str = "raid0",
                 drives: int = 1, size_gib: float = 1.0, root: Path | None = None) -> dict:
    """Ensure the node's local NVMe cache: `drives` sparse images of `size_gib` each, as one
    `raid` array where md exists (else one image, said in "note"), formatted `fs` (xfs, ext4)
    and mounted at `mount` inside the node. The node must run. Returns read_cache's result."""
    require_root()
    what = f"cache of node {names.node_ns(stack, node_name)}"
    if fs not in ("xfs", "ext4"):
        raise LabError(what, f"fs must be xfs or ext4, got {fs!r}")
    if raid not in ("raid0", "raid1", "raid10", "none"):
        raise LabError(what, f"raid must be raid0, raid1, raid10 or none, got {raid!r}")
    if not isinstance(drives, int) or isinstance(drives, bool) or not 1 <= drives <= MAX_DRIVES:
        raise LabError(what, f"drives must be 1..{MAX_DRIVES}, got {drives!r}")
    # xfs refuses filesystems under 300 MB.
    if not isinstance(size_gib, (int, float)) or not 0.5 <= size_gib <= 64:
        raise LabError(what, f"size_gib must be 0.5..64 (sparse: only what is written takes disk), got {size_gib!r}")
    mount = _check_mount_point(mount, what)
    pid = node.init_pid(stack, node_name, root)
    if pid is None:
        raise LabError(what, "the node is not running")
    # Before anything changes: a mount point the node cannot create (on the host's read-only
    # root) fails here and leaves the node's current cache as it is.
    node.run_in_node(stack, node_name, ["mkdir", "-p", mount], check=True, root=root)

    use_md = raid != "none" and drives > 1 and md_available()
    count = drives if use_md else 1
    note = None
    if raid != "none" and drives > 1 and not use_md:
        note = (f"this kernel has no md driver (no /proc/mdstat), so one loop device stands in for the "
                f"{raid} array of {drives} drives")
    d = _cache_dir(stack, node_name, root)
    d.mkdir(parents=True, exist_ok=True)
    size = int(size_gib * (1 << 30))
    config = {"mount": mount, "fs": fs, "raid": raid if use_md else "none", "requested_raid": raid,
              "drives": drives, "images": count, "size_bytes": size, "note": note}
    old = _cache_config(d)
    if old and {k: old.get(k) for k in ("fs", "raid", "images", "size_bytes")} != \
            {k: config[k] for k in ("fs", "raid", "images", "size_bytes")}:
        delete_cache(stack, node_name, root)  # a different device or filesystem: start over (a cache holds copies)
        d.mkdir(parents=True, exist_ok=True)
    elif old and old.get("mount") != mount:
        _unmount_in_node(pid, old["mount"], what)
    node._write_if_changed(d / "cache.json", json.dumps(config, indent=1, sort_keys=True) + "\n", 0o644)

    loops = []
    for i in range(count):
        image = d / f"nvme{i}.img"
        if not image.exists():
            with open(image, "wb") as f:
                f.truncate(size)
        attached = proc.loops_backed_under(image)
        loops.append(next(iter(attached)) if attached else
                     net.run(["losetup", "--find", "--show", str(image)], obj=f"{what} loop device").stdout.strip())
    device = loops[0]
    if use_md:
        device = _ensure_md(stack, node_name, raid, loops, what)
    if _fs_type(device) != fs:
        mkfs = ["mkfs.xfs", "-q", "-f", device] if fs == "xfs" else ["mkfs.ext4", "-q", "-F", device]
        net.run(mkfs, obj=f"{what} mkfs", timeout=120)
    if not _mounted_in_node(pid, mount, device):
        _unmount_in_node(pid, mount, what)
        # Mounted from the host's side: the node's private /dev holds its drives, not this device.
        net.run([sys.executable, "-I", "-S", str(MOUNTNS), "mount", str(pid), fs, device, mount],
                obj=f"{what} mount {device} at {mount}")
    # Detach once unused: the node's end (its last process) frees the loop devices too.
    for loop in loops:
        net.run(["losetup", "-d", loop], obj=f"{what} loop device {loop}", check=False)
    state = read_cache(stack, node_name, root)
    if state is None or not state["mounted"]:
        raise LabError(what, f"{device} is not mounted at {mount} in the node")
    return state


def _cache_config(d: Path) -> dict | None:
    try:
        return json.loads((d / "cache.json").read_text())
    except (OSError, ValueError):
        return None


def _fs_type(device: str) -> str | None:
    p = net.run(["blkid", "-p", "-o", "value", "-s", "TYPE", device], obj=f"blkid {device}", check=False)
    return p.stdout.strip() or None


def _ensure_md(stack: str, node_name: str, raid: str, loops: list[str], what: str) -> str:
    """An md array over the loop devices (only where /proc/mdstat exists; untested on machines
    without md, which the lab's CI machine is)."""
    name = _md_name(stack, node_name)
    path = f"/dev/md/{name}"
    if not os.path.exists(path):
        level = {"raid0": "0", "raid1": "1", "raid10": "10"}[raid]
        net.run(["mdadm", "--create", path, "--run", "--quiet", f"--level={level}", "--metadata=1.2",
                 f"--raid-devices={len(loops)}", f"--name={name}", *loops], obj=f"{what} md array", timeout=60)
    return os.path.realpath(path)


def _mounted_in_node(pid: int, mount: str, device: str) -> bool:
    try:
        table = proc.mounts(pid)
    except OSError:
        return False
    hits = [m for m in table if m["path"] == mount]
    return bool(hits) and os.path.realpath(hits[-1]["source"]) == os.path.realpath(device)


def read_cache(stack: str, node_name: str, root: Path | None = None) -> dict | None:
    """The node's cache, or None when it has none:

    {"id", "node", "mount", "fs", "raid", "requested_raid", "drives", "images": [paths],
     "size_bytes", "device", "mounted", "note"}"""
    d = _cache_dir(stack, node_name, root)
    config = _cache_config(d)
    if config is None:
        return None
    images = [str(d / f"nvme{i}.img") for i in range(config["images"]) if (d / f"nvme{i}.img").exists()]
    pid = node.init_pid(stack, node_name, root)
    device, mounted = None, False
    if pid is not None:
        try:
            hits = [m for m in proc.mounts(pid) if m["path"] == config["mount"]]
        except OSError:
            hits = []
        if hits and hits[-1]["fstype"] == config["fs"]:
            device = hits[-1]["source"]
            backing = proc.loops_backed_under(d)
            mounted = device in backing or (config["raid"] != "none" and device.startswith("/dev/md"))
    return {"id": _cache_id(stack, node_name), "node": node_name, **{k: config[k] for k in (
        "mount", "fs", "raid", "requested_raid", "drives", "size_bytes", "note")},
        "images": images, "device": device if mounted else None, "mounted": mounted}


def cache_exists(stack: str, node_name: str, root: Path | None = None) -> bool:
    return (_cache_dir(stack, node_name, root) / "cache.json").exists()


def delete_cache(stack: str, node_name: str, root: Path | None = None) -> dict:
    """Unmount the cache in the node, stop its array, detach its loop devices, remove its images."""
    require_root()
    what = f"cache of node {names.node_ns(stack, node_name)}"
    d = _cache_dir(stack, node_name, root)
    config = _cache_config(d)
    existed = d.exists()
    pid = node.init_pid(stack, node_name, root)
    if config and pid is not None:
        _unmount_in_node(pid, config["mount"], what)
    md = f"/dev/md/{_md_name(stack, node_name)}"
    if os.path.exists(md):
        net.run(["mdadm", "--stop", md], obj=f"{what} md array", check=False)
    proc.release_loops(d)
    proc.remove_tree(d)
    return {"id": _cache_id(stack, node_name), "deleted": existed}
