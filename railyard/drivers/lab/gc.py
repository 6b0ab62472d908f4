"""Every lab object of a stack, found on the machine rather than in any state, and their removal.

After a lost or stale Pulumi state, `gc(stack, known)` removes whatever of the stack no state
knows about; `destroy_all(stack)` removes everything of the stack. Objects are found by the
stack's name prefix (names.stack_prefix) and by the node marker in process environments, never
by a loose match on a command line, so nothing of another stack or of the host is touched.

Processes are a node's when they live in its netns, in its mount namespace (whose /run is
mounted from ``ry-<tag>-node:<node>``), or carry ``RAILYARD_LAB=<tag>:<node>``.

`known` holds object ids as create_fabric, create_spine and create_node return them (the netns
names ``ry-T-fabric``, ``ry-T-spine``, ``ry-T-n-<node>``). The host's management veth belongs to
the fabric; a node's processes, runtime dir, mounts and loop devices belong to the node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from railyard import paths
from railyard.drivers.lab import fabric, names, net, node, proc
from railyard.drivers.lab.errors import require_root


def _nodes_dir(stack: str, root: Path | None) -> Path:
    return paths.lab_dir(stack, root) / "nodes"


def inventory(stack: str, root: Path | None = None) -> dict:
    """Every lab object of the stack on this machine, as JSON data:

    {"netns": [...], "host_links": [...], "processes": [{"pid", "netns_inode", "argv", "node"}],
     "mounts": [...], "loops": [{"device", "backing_file"}], "dirs": [...]}
    """
    prefix = names.stack_prefix(stack)
    tag = names.stack_tag(stack)
    netns = net.netns_list(prefix)
    host_links = sorted(n for n in net.links() if n.startswith(prefix))

    owners: dict[int, str | None] = {}
    for ns in netns:
        ino = net.netns_inode(ns)
        if ino is not None:
            parsed = names.parse_ns(stack, ns)
            owners[ino] = parsed[1] if parsed else None
    procs: dict[int, dict] = {}
    for p in proc.in_namespaces(set(owners)):
        procs[p.pid] = {**p.to_json(), "node": owners.get(p.netns)}
    for p, source in proc.by_mount_source("/run", lambda s: names.parse_mount_marker(stack, s) is not None):
        if p.pid not in procs:
            procs[p.pid] = {**p.to_json(), "node": names.parse_mount_marker(stack, source)}
    for p, value in proc.marked(names.ENV_MARKER, lambda v: v.startswith(tag + ":")):
        if p.pid not in procs:
            procs[p.pid] = {**p.to_json(), "node": value.split(":", 1)[1]}
    # Processes sharing a namespace with a marked one whose handle is gone (an `ip netns del`
    # behind our back) belong to that node too.
    orphan_ns = {p["netns_inode"]: p["node"] for p in procs.values() if p["netns_inode"] not in owners}
    for p in proc.in_namespaces({i for i in orphan_ns if i is not None}):
        if p.pid not in procs:
            procs[p.pid] = {**p.to_json(), "node": orphan_ns[p.netns]}

    lab = paths.lab_dir(stack, root)
    mounts = sorted(set(proc.mounts_under(lab)) |
                    {m["mountpoint"] for m in proc.mounts() if m["mountpoint"].startswith(net.NETNS_DIR + "/" + prefix)})
    loops = [{"device": d, "backing_file": b} for d, b in proc.loops_backed_under(lab).items()]
    nodes_dir = _nodes_dir(stack, root)
    dirs = sorted(str(p) for p in nodes_dir.iterdir()) if nodes_dir.is_dir() else []
    if lab.exists():
        dirs.append(str(lab))
    return {
        "stack": stack,
        "netns": netns,
        "host_links": host_links,
        "processes": sorted(procs.values(), key=lambda p: p["pid"]),
        "mounts": mounts,
        "loops": loops,
        "dirs": dirs,
    }


def gc(stack: str, known: Iterable[str], root: Path | None = None) -> dict:
    """Remove every lab object of the stack that is not in `known` (ids as create_* return them).
    Returns what was removed, in inventory's shape."""
    require_root()
    known = set(known)
    removed: dict[str, list] = {"netns": [], "host_links": [], "processes": [], "mounts": [], "loops": [], "dirs": []}
    before = inventory(stack, root)

    # Nodes first (their NICs hang off the fabric), then the spine, then the fabric.
    order = sorted(before["netns"], key=lambda ns: {"node": 0, "spine": 1, "fabric": 2}.get(
        (names.parse_ns(stack, ns) or ("other",))[0], 3))
    for ns in order:
        if ns in known:
            continue
        parsed = names.parse_ns(stack, ns)
        if parsed and parsed[0] == "node":
            d = node.node_dir(stack, parsed[1], root)
            if d.exists():
                removed["dirs"].append(str(d))
            node.delete_node(stack, parsed[1], root)
        elif parsed and parsed[0] == "spine":
            fabric.delete_spine(stack)
        elif parsed and parsed[0] == "fabric":
            fabric.delete_fabric(stack)
        else:
            ino = net.netns_inode(ns)
            if ino is not None:
                proc.kill_all([p.pid for p in proc.in_namespaces({ino})], what=f"netns {ns}")
            net.netns_delete(ns)
        removed["netns"].append(ns)

    fabric_known = names.fabric_ns(stack) in known
    for link in net.links():
        if link.startswith(names.stack_prefix(stack)) and not (fabric_known and link == names.host_link(stack)):
            net.link_delete(link)
            removed["host_links"].append(link)

    # Processes of unknown nodes, and of known nodes outside the node's current netns (an earlier
    # incarnation whose netns was removed behind our back).
    current = {n: net.netns_inode(names.node_ns(stack, n)) for n in _known_nodes(stack, known)}
    stray = []
    for p in inventory(stack, root)["processes"]:
        owner = p["node"]
        if owner not in current or (p["netns_inode"] != current[owner] and p["netns_inode"] is not None):
            stray.append(p)
    proc.kill_all([p["pid"] for p in stray], what=f"stack {stack} processes")
    removed["processes"] = stray

    nodes_dir = _nodes_dir(stack, root)
    if nodes_dir.is_dir():
        for d in sorted(nodes_dir.iterdir()):
            if d.name in current:
                continue
            for dev, backing in proc.loops_backed_under(d).items():
                proc.detach_loop(dev)
                removed["loops"].append({"device": dev, "backing_file": backing})
            removed["mounts"].extend(proc.unmount_under(d))
            proc.remove_tree(d)
            removed["dirs"].append(str(d))
    return removed


def _known_nodes(stack: str, known: set[str]) -> list[str]:
    out = []
    for ns in known:
        parsed = names.parse_ns(stack, ns)
        if parsed and parsed[0] == "node":
            out.append(parsed[1])
    return out


def destroy_all(stack: str, root: Path | None = None) -> dict:
    """Remove every lab object of the stack, its runtime directory included; leaves nothing."""
    removed = gc(stack, (), root)
    lab = paths.lab_dir(stack, root)
    for dev, backing in proc.loops_backed_under(lab).items():
        proc.detach_loop(dev)
        removed["loops"].append({"device": dev, "backing_file": backing})
    removed["mounts"].extend(proc.unmount_under(lab))
    if proc.remove_tree(lab):
        removed["dirs"].append(str(lab))
    return removed
