"""Every lab object of a stack, found on the machine rather than in any state, and their removal.

After a lost or stale Pulumi state, `gc(stack, known)` removes whatever of the stack no state
knows about; `destroy_all(stack)` removes everything of the stack. Objects are found by the
stack's name prefix (names.stack_prefix) and by the node marker in process environments, never
by a loose match on a command line, so nothing of another stack or of the host is touched.

Processes are a node's when they live in its netns, in its mount namespace (whose /run is
mounted from ``ry-<tag>-node:<node>``), or carry ``RAILYARD_LAB=<tag>:<node>``; the object
store's when they live in its netns or carry ``RAILYARD_LAB=<tag>:@storage``; a routed switch's
(FRR, routers.py) when they live in its netns or carry ``RAILYARD_LAB=<tag>:@sw-<switch>``.

`known` holds object ids as the create functions return them: the netns names ``ry-T-fabric``,
``ry-T-spine``, ``ry-T-n-<node>`` (a VM's too), ``ry-T-storage`` (the object store), and
``ry-T-pfs`` (the parallel-FS share, a directory, also kept while a known node mounts it), and
``ry-T-switches`` (every routed switch ``ry-T-sw-<switch>`` with its directory). The
host's management veth belongs to the fabric; a node's processes, runtime dir, mounts, loop
devices, local cache and parallel-FS mount belong to the node; a VM not known is deleted before
any node, so its VFs go back to its hypervisor.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from railyard import paths
from railyard.drivers.lab import control_plane, fabric, names, net, node, proc, routers, storage, vm
from railyard.drivers.lab.errors import LabError, require_root
from railyard.drivers.lab.node import power

_KEYS = ("netns", "host_links", "processes", "mounts", "loops", "dirs")


def _nodes_dir(stack: str, root: Path | None) -> Path:
    return paths.lab_dir(stack, root) / "nodes"


def inventory(stack: str, root: Path | None = None) -> dict:
    """Every lab object of the stack on this machine, as JSON data:

    {"netns": [...], "host_links": [...],
     "processes": [{"pid", "netns_inode", "argv", "node", "owner"}],
     "mounts": [...], "loops": [{"device", "backing_file"}], "dirs": [...]}

    A process's "owner" is the id it belongs to (a node's or the object store's netns name);
    "node" is the node's name, None for the object store's.
    """
    prefix = names.stack_prefix(stack)
    tag = names.stack_tag(stack)
    netns = net.netns_list(prefix)
    host_links = sorted(n for n in net.links() if n.startswith(prefix))

    def owner_of(name: str | None) -> str | None:
        if name == names.STORAGE_MARKER:
            return names.storage_ns(stack)
        if name == names.CONTROL_PLANE_MARKER:
            return names.control_plane_ns(stack)
        if name and name.startswith(names.SWITCH_MARKER):
            return names.switch_ns(stack, name[len(names.SWITCH_MARKER):])
        return names.node_ns(stack, name) if name else None

    owners: dict[int, tuple[str, str | None]] = {}
    for ns in netns:
        ino = net.netns_inode(ns)
        if ino is not None:
            parsed = names.parse_ns(stack, ns)
            owners[ino] = (ns, parsed[1] if parsed and parsed[0] == "node" else None)
    procs: dict[int, dict] = {}
    for p in proc.in_namespaces(set(owners)):
        assert p.netns is not None, "in_namespaces() finds processes of those namespaces only"
        ns, name = owners[p.netns]
        procs[p.pid] = {**p.to_json(), "node": name, "owner": ns}
    for p, source in proc.by_mount_source("/run", lambda s: names.parse_mount_marker(stack, s) is not None):
        if p.pid not in procs:
            name = names.parse_mount_marker(stack, source)
            switch = name is not None and name.startswith(names.SWITCH_MARKER)
            procs[p.pid] = {**p.to_json(), "node": None if switch else name, "owner": owner_of(name)}
    for p, value in proc.marked(names.ENV_MARKER, lambda v: v.startswith(tag + ":")):
        if p.pid not in procs:
            name = value.split(":", 1)[1]
            service = name in (names.STORAGE_MARKER, names.CONTROL_PLANE_MARKER) or name.startswith(names.SWITCH_MARKER)
            procs[p.pid] = {**p.to_json(), "node": None if service else name, "owner": owner_of(name)}
    # Processes sharing a namespace with a marked one whose handle is gone (an `ip netns del`
    # behind our back) belong to that node too.
    orphan_ns = {p["netns_inode"]: (p["node"], p["owner"]) for p in procs.values() if p["netns_inode"] not in owners}
    for p in proc.in_namespaces({i for i in orphan_ns if i is not None}):
        if p.pid not in procs:
            name, owner = orphan_ns[p.netns]
            procs[p.pid] = {**p.to_json(), "node": name, "owner": owner}

    lab = paths.lab_dir(stack, root)
    mounts = sorted(set(proc.mounts_under(lab)) |
                    {m["path"] for m in proc.mounts() if m["path"].startswith(net.NETNS_DIR + "/" + prefix)})
    loops = [{"device": d, "backing_file": b} for d, b in proc.loops_backed_under(lab).items()]
    nodes_dir = _nodes_dir(stack, root)
    dirs = sorted(str(p) for p in nodes_dir.iterdir()) if nodes_dir.is_dir() else []
    dirs += [str(d) for d in (storage.object_store_dir(stack, root), storage.pfs_dir(stack, root),
                              control_plane.control_plane_dir(stack, root), routers.switches_dir(stack, root))
             if d.exists()]
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


def gc(stack: str, known: Iterable[str], root: Path | None = None, dry_run: bool = False) -> dict:
    """Remove every lab object of the stack that is not in `known` (ids as create_* return them).
    Returns what was removed, in inventory's shape; with dry_run, what would be, removing nothing."""
    require_root()
    foreign = _foreign_markers(stack, root)
    if foreign:
        raise LabError(f"stack {stack}", f"its lab objects belong to {', '.join(foreign)} (their owner marker), not "
                                         "to this checkout; collect them from there. Nothing was removed")
    known = set(known)
    if names.switches_id(stack) in known:  # one object for all of the stack's switches
        known |= {names.switch_ns(stack, s) for s in routers.read(stack, root)["switches"]}
    removed: dict[str, list] = {k: [] for k in _KEYS}
    before = inventory(stack, root)

    def kind(ns: str) -> str:
        parsed = names.parse_ns(stack, ns)
        if parsed is None:
            return "other"
        if parsed[0] == "node" and vm.is_vm(stack, parsed[1], root):
            return "vm"
        return parsed[0]

    # VMs first (their VFs go back to their hypervisors), then nodes (their NICs hang off the
    # fabric), the object store and control plane, the spine, the fabric.
    order = sorted(before["netns"], key=lambda ns: {"vm": 0, "node": 1, "storage": 2, "k8s": 2, "spine": 3,
                                                    "switch": 3, "fabric": 4}.get(kind(ns), 5))
    for ns in order:
        if ns in known:
            continue
        parsed = names.parse_ns(stack, ns)
        if parsed and parsed[0] == "node":
            d = node.node_dir(stack, parsed[1], root)
            if d.exists():
                removed["dirs"].append(str(d))
            for dev, backing in proc.loops_backed_under(d).items():
                removed["loops"].append({"device": dev, "backing_file": backing})
            if dry_run:
                pass
            elif kind(ns) == "vm":
                vm.delete_vm(stack, parsed[1], root)
            else:
                node.delete_node(stack, parsed[1], root)
        elif parsed and parsed[0] in SERVICES:
            _remove_service(stack, parsed[0], root, dry_run, removed)
        elif dry_run:
            pass
        elif parsed and parsed[0] == "spine":
            fabric.delete_spine(stack)
        elif parsed and parsed[0] == "switch":
            routers.delete(stack, parsed[1], root)
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
            if not dry_run:
                net.link_delete(link)
            removed["host_links"].append(link)

    # Processes of unknown nodes (and of an unknown object store), and of known ones outside
    # their current netns (an earlier incarnation whose netns was removed behind our back).
    current = {ns: net.netns_inode(ns) for ns in known
               if (names.parse_ns(stack, ns) or ("",))[0] in ("node", "storage", "k8s", "switch")}
    stray = []
    for p in (before if dry_run else inventory(stack, root))["processes"]:
        owner = p["owner"]
        if owner in current and p["node"] and p["pid"] == power.supervisor_pid(stack, p["node"], root):
            continue  # a known node's power supervisor lives on the host, outside its netns
        if owner not in current or (p["netns_inode"] != current[owner] and p["netns_inode"] is not None):
            stray.append(p)
    if not dry_run:
        proc.kill_all([p["pid"] for p in stray], what=f"stack {stack} processes")
    removed["processes"] = stray

    known_nodes = set(_known_nodes(stack, known))
    nodes_dir = _nodes_dir(stack, root)
    if nodes_dir.is_dir():
        for d in sorted(nodes_dir.iterdir()):
            if d.name in known_nodes:
                continue
            for dev, backing in proc.loops_backed_under(d).items():
                if not dry_run:
                    proc.detach_loop(dev)
                removed["loops"].append({"device": dev, "backing_file": backing})
            if dry_run:
                removed["mounts"].extend(proc.mounts_under(d))
            else:
                removed["mounts"].extend(proc.unmount_under(d))
                proc.remove_tree(d)
            removed["dirs"].append(str(d))
    switches = routers.switches_dir(stack, root)
    if names.switches_id(stack) not in known and switches.exists():
        if not dry_run:
            routers.delete_all(stack, root)
        removed["dirs"].append(str(switches))
    elif switches.is_dir():  # known: a switch's directory outlives its namespace only by a crash
        for d in sorted(switches.iterdir()):
            if names.switch_ns(stack, d.name) not in known:
                if not dry_run:
                    routers.delete(stack, d.name, root)
                removed["dirs"].append(str(d))
    # A service's directory outlives its namespace when a create was killed before the netns.
    for kind_, (ns_of, _dir, _delete) in SERVICES.items():
        if ns_of(stack) not in known:
            _remove_service(stack, kind_, root, dry_run, removed)
    # The share is the nodes' that mount it as much as its own id's: a node's storage resource
    # creates it on first mount (storage.create_pfs_mount).
    mounted_by_known = any(storage.pfs_mount_exists(stack, n, root) for n in known_nodes)
    if names.pfs_id(stack) not in known and not mounted_by_known:
        d = storage.pfs_dir(stack, root)
        if d.exists():
            if not dry_run:
                storage.delete_pfs(stack, root)
            removed["dirs"].append(str(d))
    return _unique(removed)


# The lab's services, each a namespace of its own with a directory: kind -> (its netns name, its
# directory, its delete).
SERVICES = {
    "storage": (names.storage_ns, storage.object_store_dir, storage.delete_object_store),
    "k8s": (names.control_plane_ns, control_plane.control_plane_dir, control_plane.delete_control_plane),
}


def _remove_service(stack: str, kind_: str, root: Path | None, dry_run: bool, removed: dict) -> None:
    ns_of, directory, delete = SERVICES[kind_]
    d = directory(stack, root)
    existed = d.exists()
    if not dry_run and (existed or net.netns_exists(ns_of(stack))):
        delete(stack, root)
    if existed:
        removed["dirs"].append(str(d))


def _unique(removed: dict) -> dict:
    """Each object once (a node's dir is named both with its netns and with its directory)."""
    out = {}
    for kind_, items in removed.items():
        seen, kept = set(), []
        for item in items:
            key = item if isinstance(item, str) else (item.get("pid") or item.get("device") or repr(item))
            if key not in seen:
                seen.add(key)
                kept.append(item)
        out[kind_] = kept
    return out


def _known_nodes(stack: str, known: set[str]) -> list[str]:
    out = []
    for ns in known:
        parsed = names.parse_ns(stack, ns)
        if parsed and parsed[0] == "node":
            out.append(parsed[1])
    return out


def destroy_all(stack: str, root: Path | None = None, dry_run: bool = False) -> dict:
    """Remove every lab object of the stack, its runtime directory included; leaves nothing.
    With dry_run, says what it would remove and removes nothing."""
    removed = gc(stack, (), root, dry_run)
    lab = paths.lab_dir(stack, root)
    for dev, backing in proc.loops_backed_under(lab).items():
        if not dry_run:
            proc.detach_loop(dev)
        removed["loops"].append({"device": dev, "backing_file": backing})
    if dry_run:
        removed["mounts"].extend(proc.mounts_under(lab))
        if lab.exists():
            removed["dirs"].append(str(lab))
    else:
        removed["mounts"].extend(proc.unmount_under(lab))
        if proc.remove_tree(lab):
            removed["dirs"].append(str(lab))
    return _unique(removed)


# --- every stack of this checkout --------------------------------------------------------------

@dataclass
class StackOwner:
    """Whose a stack tag's objects on this machine are."""

    tag: str
    stack: str | None
    here: bool
    why: str  # for a tag that is not this checkout's: why it is left alone
    roots: tuple[str, ...] = ()  # the checkout roots its markers name
    unmarked: bool = False  # this checkout's by its lab directory alone (objects older than markers)


def _alias(netns: str | None, dev: str) -> str | None:
    """A link's owner marker; None when it has none, or when the namespace went away meanwhile
    (another checkout's `down`), which is no reason to stop looking at the others."""
    try:
        return net.links(netns, with_addresses=False).get(dev, {}).get("ifalias")
    except LabError:
        return None


def _markers(prefix: str) -> dict[str, set[str]]:
    """Owner markers of every lab namespace and root-namespace link whose name starts with
    `prefix`, by stack tag."""
    found: dict[str, set[str]] = {}
    for ns in net.netns_list(prefix):
        tag = names.parse_tag(ns)
        if tag is not None:
            found.setdefault(tag, set())
            alias = _alias(ns, "lo")
            if alias:
                found[tag].add(alias)
    for name, info in net.links(with_addresses=False).items():
        tag = names.parse_tag(name)
        if tag is not None and name.startswith(prefix):
            found.setdefault(tag, set())
            if info.get("ifalias"):
                found[tag].add(info["ifalias"])
    return found


def _foreign(markers: set[str], root: Path) -> list[str]:
    """What markers name another owner than this checkout: its root, or the alias as it is."""
    out = set()
    for m in markers:
        parsed = names.parse_owner_marker(m)
        if parsed is None or m != names.owner(parsed[0], root):
            out.add(parsed[1] if parsed else m)
    return sorted(out)


def _foreign_markers(stack: str, root: Path | None) -> list[str]:
    tag = names.stack_tag(stack)
    return _foreign(_markers(names.stack_prefix(stack)).get(tag, set()), root or paths.project_root())


def owners(root: Path | None = None) -> list[StackOwner]:
    """Every lab stack tag with objects on this machine or a lab directory in this checkout.

    A tag is this checkout's when its objects carry this checkout's marker (names.owner), or carry
    none and the tag is that of a stack with a lab directory here (objects made before markers
    were). A marker naming another owner wins over everything: such objects are never this
    checkout's to remove.
    """
    require_root()
    root = root or paths.project_root()
    markers = _markers(names.PREFIX + "-")
    seen = set(markers)
    for _, value in proc.marked(names.ENV_MARKER, lambda v: ":" in v):
        seen.add(value.split(":", 1)[0])
    lab_root = paths.local_dir(root) / "lab"
    dirs: dict[str, set[str]] = {}
    if lab_root.is_dir():
        for d in lab_root.iterdir():
            try:
                dirs.setdefault(names.stack_tag(d.name), set()).add(d.name)
            except LabError:
                continue  # not a lab stack's directory
    out = []
    for tag in sorted(seen | set(dirs)):
        tag_markers = markers.get(tag, set())
        foreign = _foreign(tag_markers, root)
        # (Not foreign: every marker parses, as _foreign counts one that does not.)
        ours = sorted({parsed[0] for m in tag_markers if (parsed := names.parse_owner_marker(m)) is not None}
                      if not foreign else ())
        if foreign:
            out.append(StackOwner(tag, None, False, "its objects carry the marker of another checkout", tuple(foreign)))
        elif len(ours) == 1:
            out.append(StackOwner(tag, ours[0], True, ""))
        elif not ours and len(dirs.get(tag, ())) == 1:
            out.append(StackOwner(tag, next(iter(dirs[tag])), True, "", unmarked=True))
        else:
            out.append(StackOwner(tag, None, False, "its objects carry no checkout's marker and no lab directory "
                                                    "of this checkout has its tag"))
    return out
