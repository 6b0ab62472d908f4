"""The parallel-FS tier of a lab stack: one shared directory, bound into every node.

``create_pfs`` makes a directory under the lab dir, ``<lab dir>/pfs``, and ``create_pfs_mount``
binds it into each node at its mount point. It stands in for Lustre or GPFS: the same files seen
from every node, with none of their striping, locking or bandwidth.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from railyard import paths
from railyard.drivers.lab import names, net, node, proc
from railyard.drivers.lab.errors import LabError, require_root
from railyard.drivers.lab.storage.mounts import MOUNTNS, _check_mount_point, _unmount_in_node


def pfs_dir(stack: str, root: Path | None = None) -> Path:
    return paths.lab_dir(stack, root) / "pfs"


def create_pfs(stack: str, root: Path | None = None) -> dict:
    """Ensure the stack's shared directory (the stand-in for Lustre or GPFS)."""
    require_root()
    d = pfs_dir(stack, root)
    node.check_dir_location(d)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o755)
    record = read_pfs(stack, root)
    assert record is not None, "the directory was just made"
    return record


def read_pfs(stack: str, root: Path | None = None) -> dict | None:
    d = pfs_dir(stack, root)
    if not d.is_dir():
        return None
    return {"id": names.pfs_id(stack), "stack": stack, "path": str(d)}


def pfs_exists(stack: str, root: Path | None = None) -> bool:
    return pfs_dir(stack, root).is_dir()


def delete_pfs(stack: str, root: Path | None = None) -> dict:
    """Unmount the share from every node of the stack, then remove it and its files."""
    require_root()
    d = pfs_dir(stack, root)
    existed = d.exists()
    nodes_dir = paths.lab_dir(stack, root) / "nodes"
    if nodes_dir.is_dir():
        for n in sorted(p.name for p in nodes_dir.iterdir()):
            if (nodes_dir / n / "pfs.json").exists():
                delete_pfs_mount(stack, n, root)
    proc.remove_tree(d)
    return {"id": names.pfs_id(stack), "deleted": existed}


def _pfs_mount_id(stack: str, node_name: str) -> str:
    return f"{names.node_ns(stack, node_name)}/pfs"


def create_pfs_mount(stack: str, node_name: str, *, mount: str = "/mnt/pfs", root: Path | None = None) -> dict:
    """Ensure the stack's share is mounted at `mount` inside the node (creating the share if
    needed). The node must run. Returns read_pfs_mount's result."""
    require_root()
    what = f"parallel FS of node {names.node_ns(stack, node_name)}"
    mount = _check_mount_point(mount, what)
    pid = node.init_pid(stack, node_name, root)
    if pid is None:
        raise LabError(what, "the node is not running")
    share = Path(create_pfs(stack, root)["path"])
    record = node.node_dir(stack, node_name, root) / "pfs.json"
    try:
        old = json.loads(record.read_text()).get("mount")
    except (OSError, ValueError):
        old = None
    if old and old != mount:
        _unmount_in_node(pid, old, what)
    node._write_if_changed(record, json.dumps({"mount": mount}) + "\n", 0o644)
    if not _share_mounted(pid, mount, share):
        _unmount_in_node(pid, mount, what)
        net.run([sys.executable, "-I", "-S", str(MOUNTNS), "bind", str(pid), str(share), mount],
                obj=f"{what} bind {share} at {mount}")
    state = read_pfs_mount(stack, node_name, root)
    if state is None or not state["mounted"]:
        raise LabError(what, f"{share} is not mounted at {mount} in the node")
    return state


def _share_mounted(pid: int, mount: str, share: Path) -> bool:
    try:
        if not any(m["path"] == mount for m in proc.mounts(pid)):
            return False
    except OSError:
        return False
    # The mount point as the node sees it (through its init's root) is the share itself.
    seen = node._identity(Path(f"/proc/{pid}/root{mount}"))
    return seen is not None and seen == node._identity(share)


def read_pfs_mount(stack: str, node_name: str, root: Path | None = None) -> dict | None:
    record = node.node_dir(stack, node_name, root) / "pfs.json"
    try:
        mount = json.loads(record.read_text())["mount"]
    except (OSError, ValueError, KeyError):
        return None
    pid = node.init_pid(stack, node_name, root)
    share = pfs_dir(stack, root)
    return {"id": _pfs_mount_id(stack, node_name), "node": node_name, "mount": mount, "share": str(share),
            "mounted": bool(pid and share.is_dir() and _share_mounted(pid, mount, share))}


def pfs_mount_exists(stack: str, node_name: str, root: Path | None = None) -> bool:
    return (node.node_dir(stack, node_name, root) / "pfs.json").exists()


def delete_pfs_mount(stack: str, node_name: str, root: Path | None = None) -> dict:
    require_root()
    what = f"parallel FS of node {names.node_ns(stack, node_name)}"
    record = node.node_dir(stack, node_name, root) / "pfs.json"
    state = read_pfs_mount(stack, node_name, root)
    pid = node.init_pid(stack, node_name, root)
    if state and pid is not None:
        _unmount_in_node(pid, state["mount"], what)
    record.unlink(missing_ok=True)
    return {"id": _pfs_mount_id(stack, node_name), "deleted": state is not None}
