"""Faults put into a running lab on purpose (`railyard lab fault`), to rehearse what `railyard
verify` finds. Each shows only where the node's own tools would show it:

    cable-swap NODE DEV1 DEV2    two rails of a node exchanged at the node, or (DEV2 as OTHER:DEV)
                                 a rail of each of two nodes: the lab's subnet on InfiniBand; on
                                 Ethernet, the veths' leaf ends exchanged, which the leaves' LLDP
                                 frames show
    link-down NODE DEV           a rail's cable pulled: the fabric's end of its veth down (the node's
                                 interface loses carrier), its IB port DOWN, the cable gone from
                                 the subnet
    link-down SWITCH PORT        a switch's cable pulled (PORT its number, or as the plan names it, swp33): on
                                 Ethernet its port down in the switch's namespace, which both
                                 ends' LLDP shows; on InfiniBand the cable gone from the subnet
    link-width NODE DEV WIDTH    a rail's cable trained narrower (2x, 1x) in the subnet
    link-slow NODE DEV MBIT      a rail that carries no more than MBIT Mbit/s out of the node: a
                                 token bucket (tc tbf) on the node's own netdev, which real
                                 traffic meets (acceptance flags it under about 200: its iperf3
                                 goes at 2 Gb/s at most in the lab)
    gpu-lost NODE GPU            the GPU gone from the node's PCI bus (its hardware tree)
    pcie-degraded NODE DEV WIDTH a GPU's or NIC's PCIe link trained at WIDTH lanes (current_link_width)
    firmware NODE DEV VERSION    a NIC flashed to VERSION (fw_ver)
    ecc NODE GPU COUNT           COUNT uncorrectable ECC errors on the GPU since its driver loaded
                                 (what the node's nvidia-smi stand-in reports, gpu_tools.py)
    nvlink-down NODE GPU LINK    one of the GPU's NVLinks down (nvidia-smi nvlink --status: <inactive>)
    xid NODE GPU CODE            the NVIDIA driver's Xid CODE for the GPU in the node's kernel log
                                 (its dmesg stand-in), the line's text copied from a real log

A fault outlives the node's reboots, as a pulled cable or a flashed NIC does; with --transient
(gpu-lost, pcie-degraded, ecc, nvlink-down and xid) the node's next boot clears it, as a reboot brings back a GPU
that fell off the bus (Xid 79) or retrains a PCIe link more often than not. The repair loop's
rehearsal (`railyard verify --repair`) needs both.

DEV is the RDMA device (mlx5_3) or, for a rail, its netdev (ibp64s0). Nothing here is a flag
Railyard reads back: verify reads the node's sysfs over SSH and the subnet with ibnetdiscover.
Every change is journalled (`.railyard/lab/<stack>/faults.json`) with what undoes it, and `--clear`
undoes them newest first, giving back the planned state byte for byte.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from railyard import paths
from railyard.drivers.lab import names, net, subnet
from railyard.drivers.lab.node.config import node_dir
from railyard.drivers.lab.errors import LabError
from railyard.drivers.lab.hwtree import DMESG, MANIFEST, NVIDIA_STATE
from railyard.model.fabric.subnet import End, hca_name
from railyard.model.sysfs_discovery import GPU_CLASSES

if TYPE_CHECKING:
    from railyard.model.plan import NodePlan, Plan

KINDS = ("cable-swap", "link-down", "link-width", "link-slow", "gpu-lost", "pcie-degraded", "firmware", "ecc", "nvlink-down", "xid")
ARGS = {"cable-swap": ("NODE", "DEV1", "DEV2"), "link-down": ("NODE|SWITCH", "DEV|PORT"), "link-width": ("NODE", "DEV", "WIDTH"),
        "link-slow": ("NODE", "DEV", "MBIT"),
        "gpu-lost": ("NODE", "GPU"), "pcie-degraded": ("NODE", "DEV", "WIDTH"), "firmware": ("NODE", "DEV", "VERSION"),
        "ecc": ("NODE", "GPU", "COUNT"), "nvlink-down": ("NODE", "GPU", "LINK"), "xid": ("NODE", "GPU", "CODE")}
JOURNAL = "faults.json"
# Faults of the node's own hardware tree that a boot may clear; the others change what outlives
# the node's boot (the subnet's cables, a NIC's flash).
TRANSIENT = ("gpu-lost", "pcie-degraded", "ecc", "nvlink-down", "xid")


class FaultError(LabError):
    """A fault that cannot be made (no such node or device, a bad argument); nothing was changed."""

    def __init__(self, message: str):
        super().__init__("fault", message, message)
# The IB port of a pulled cable as the kernel shows it: DOWN, the PHY polling for a peer.
PORT_DOWN = {"state": "1: DOWN", "phys_state": "2: Polling"}


def journal_path(stack: str, root: Path | None = None) -> Path:
    return paths.lab_dir(stack, root) / JOURNAL


@contextlib.contextmanager
def _journal_locked(stack: str, root: Path | None = None) -> Iterator[None]:
    """The journal held for one read-modify-write: a node's power supervisor clears its transient
    faults as it boots, while the CLI (or another node's supervisor) may be changing the journal."""
    # The stack's lab directory is the lock: a file of its own would outlive the lab at destroy.
    d = journal_path(stack, root).parent
    if not d.is_dir():  # no lab, so no journal: nothing to hold
        yield
        return
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _journal(stack: str, root: Path | None = None) -> list[dict[str, Any]]:
    p = journal_path(stack, root)
    return json.loads(p.read_text()) if p.is_file() else []


def _save(stack: str, entries: list[dict[str, Any]], root: Path | None = None) -> None:
    p = journal_path(stack, root)
    if not entries:
        p.unlink(missing_ok=True)
        return
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=2))
    os.replace(tmp, p)


class _Fault:
    """One fault being made: its undo records, kept in the order to undo them."""

    def __init__(self, stack: str, plan: Plan, kind: str, target: list[str]):
        self.stack, self.plan, self.kind, self.target = stack, plan, kind, target
        self.undo: list[dict[str, Any]] = []
        self.subnet_edit: list[Any] | None = None
        node = target[0]
        if node not in {n.name for n in plan.nodes}:
            raise FaultError(f"no node {node} in stack {stack}'s plan")
        self.node: NodePlan = plan.node_named(node)
        self.tree = node_dir(stack, node) / "hwtree"
        if not (self.tree / "sys").is_dir():
            raise FaultError(f"{node} has no hardware tree: is stack {stack} up?")

    # the node's hardware tree ---------------------------------------------------------------

    @functools.cached_property
    def manifest(self) -> dict[str, Any]:
        """The node's hardware tree's manifest (hwtree.MANIFEST), read once a fault."""
        return json.loads((self.tree / MANIFEST).read_text())

    def device_dir(self, device: str) -> Path:
        """The PCI function directory of a GPU (GPU3), an RDMA device (mlx5_3) or its netdev."""
        manifest = self.manifest
        rdma = {v: k for k, v in manifest["netdevs"].items()}.get(device, device)
        bdf = manifest["bus_ids"].get(rdma)
        link = self.tree / "sys" / "bus" / "pci" / "devices" / (bdf or "-")
        if bdf is None or not link.is_symlink():
            raise FaultError(f"{self.node.name} has no device {device}")
        return Path(os.path.realpath(link))

    def rdma(self, device: str) -> str:
        manifest = self.manifest
        name = {v: k for k, v in manifest["netdevs"].items()}.get(device, device)
        if name not in manifest["netdevs"]:
            raise FaultError(f"{self.node.name} has no RDMA device or rail netdev {device}")
        return name

    def write(self, path: Path, text: str) -> None:
        old = path.read_text() if path.exists() else None
        self.undo.append({"op": "file", "path": str(path), "content": old})
        if path.exists():
            os.chmod(path, 0o644)
        path.write_text(text + "\n")
        os.chmod(path, 0o444)

    def add_line(self, path: Path, line: str) -> None:
        """One line appended; its undo takes out that line alone, so faults clear in any order
        (a boot clears the transient ones and keeps the others' lines)."""
        old = path.read_text() if path.exists() else ""
        self.undo.append({"op": "line", "path": str(path), "line": line})
        if path.exists():
            os.chmod(path, 0o644)
        path.write_text(old + line + "\n")
        os.chmod(path, 0o444)

    def gpu_dir(self, gpu: str) -> Path:
        """The PCI function directory of a GPU; refused for any other device."""
        d = self.device_dir(gpu)
        if not (d / "class").read_text().strip().startswith(GPU_CLASSES):
            raise FaultError(f"{self.node.name}'s {gpu} is not a GPU")
        return d

    def gpu_state(self, gpu: str) -> Path:
        """The GPU's state as its driver holds it (hwtree.NVIDIA_STATE), made where missing; no
        such directory is in the tree as built."""
        state = self.tree / NVIDIA_STATE / self.gpu_dir(gpu).name
        for p in (state.parent, state):
            p.mkdir(exist_ok=True)
            # Always: the tree as built has none of these, and the last fault undone (whichever it
            # is) removes them once they are empty.
            self.undo.append({"op": "dir", "path": str(p)})
        return state

    def move_away(self, path: Path) -> None:
        # A name of its own: one made from counts comes round again once a fault is cleared.
        hold = paths.lab_dir(self.stack) / "faults" / f"held-{uuid.uuid4().hex}"
        hold.parent.mkdir(parents=True, exist_ok=True)
        self.undo.append({"op": "move", "path": str(path), "held": str(hold)})
        os.rename(path, hold)

    # the subnet and the links ---------------------------------------------------------------

    def edit_subnet(self, *edit: Any) -> None:
        """An edit of the lab's subnet (subnet.swap, unplug or retrain, by name, with its ends as
        [device, port] pairs), kept as data: the subnet is the plan's with the faults' edits
        applied in order, so clearing one fault leaves the others' cables as they are."""
        if self.plan.fabric.kind != "infiniband":
            return
        self.subnet_edit = [edit[0], *[list(a) if isinstance(a, End) else a for a in edit[1:]]]
        _apply(subnet.current(self.stack, self.plan.fabric), self.subnet_edit)  # refused before anything changes

    def end(self, device: str) -> End:
        return End(hca_name(self.node.name, self.rdma(device)), 1)

    def pull(self, device: str) -> None:
        """The fabric's end of the rail's veth down: the cable a technician pulls."""
        manifest = self.manifest
        rdma = self.rdma(device)
        netdev = manifest["netdevs"][rdma]
        ns, peer = _peer(self.stack, self.node.name, netdev)
        subprocess.run(["ip", "-n", ns, "link", "set", "dev", peer, "down"], check=True)
        self.undo.append({"op": "link", "netns": ns, "dev": peer})
        port = self.tree / "sys" / "class" / "infiniband" / rdma / "ports" / "1"
        for name, text in PORT_DOWN.items():
            self.write(Path(os.path.realpath(port)) / name, text)


    def swap_ports(self, device: str, other: "_Fault", other_device: str) -> None:
        """Two rails' cables exchanged at the switch end on an Ethernet fabric whose leaves are the
        lab's switches: each rail's veth end moves to the other's leaf port (its namespace, bridge
        and alias, the planned port name the leaf's lldpd sends). The nodes' NICs stay as they are,
        so what changes is only what the far end says it is (LLDP) and where traffic goes."""
        ends = []
        for f, dev in ((self, device), (other, other_device)):
            netdev = f.manifest["netdevs"][f.rdma(dev)]
            ns, port = _peer(self.stack, f.node.name, netdev)
            alias = (net.links(ns, with_addresses=False).get(port) or {}).get("ifalias")
            if not alias or (names.parse_ns(self.stack, ns) or ("",))[0] != "switch":
                raise FaultError(f"{f.node.name}'s {dev} is not on a leaf port of the lab's switches")
            ends.append((ns, port, alias))
        if ends[0][:2] == ends[1][:2]:
            raise FaultError("a cable cannot be exchanged with itself")
        (ns1, port1, alias1), (ns2, port2, alias2) = ends
        # Journalled before anything moves: a move that fails half-way is still undone.
        self.undo.append({"op": "ports", "stack": self.stack,
                          "moves": [[port1, ns1, alias1], [port2, ns2, alias2]]})
        _move_ports(self.stack, [(port1, ns2, alias2), (port2, ns1, alias1)])

    def throttle(self, device: str, mbit: int) -> str:
        """A token bucket on the rail's netdev in the node: what leaves the node by that rail goes
        at `mbit` at most. Its burst is above any MTU, so pings at the planned MTU still pass and
        only bandwidth shows the fault. Returns the netdev."""
        netdev = self.manifest["netdevs"][self.rdma(device)]
        ns = names.node_ns(self.stack, self.node.name)
        shown = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", netdev, "root"], capture_output=True,
                               text=True)
        if shown.returncode != 0:
            raise FaultError(f"{self.node.name} has no interface {netdev}: {shown.stderr.strip()}")
        if " tbf " in shown.stdout:
            raise FaultError(f"{self.node.name}'s {device} is slowed already: clear that fault first")
        added = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", netdev, "root", "tbf", "rate", f"{mbit}mbit",
                                "burst", "32kb", "latency", "100ms"], capture_output=True, text=True)
        if added.returncode != 0:  # another root qdisc of someone else's: left as it is
            raise FaultError(f"{self.node.name}'s {device}: tc refused the token bucket: "
                             f"{added.stderr.strip() or f'exit {added.returncode}'}")
        self.undo.append({"op": "qdisc", "netns": ns, "dev": netdev})
        return netdev


def _move_ports(stack: str, moves: list[tuple[str, str, str]], *, check: bool = True) -> None:
    """Each (port, netns, alias): the leaf-side end of a rail's veth, keeping its own name, put into
    that leaf's namespace (from whichever of the stack's it is in now), on its host bridge, with that
    planned port's alias, and as up or down as it was (a pulled cable stays pulled). Then every leaf
    touched sends the planned names of its ports again. check=False (an undo): a port gone or
    moved back already is left as it is."""
    from railyard.drivers.lab import routers

    def ip(ns: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True, check=check)

    places = [ns for ns in net.netns_list(names.stack_prefix(stack)) if (names.parse_ns(stack, ns) or ("",))[0] == "switch"]
    for port, to_ns, alias in moves:
        at = next((ns for ns in places if net.link_exists(port, ns)), None)
        if at is None:
            if check:
                raise FaultError(f"no leaf of stack {stack} has the port {port}")
            continue
        up = "UP" in ((net.links(at, with_addresses=False).get(port) or {}).get("flags") or [])
        if at != to_ns:
            ip(at, "link", "set", "dev", port, "netns", to_ns)
        ip(to_ns, "link", "set", "dev", port, "master", routers.HOST_SIDE, "alias", alias, "up" if up else "down")
    for ns in sorted({m[1] for m in moves}):
        parsed = names.parse_ns(stack, ns)
        if parsed is not None and parsed[0] == "switch" and parsed[1]:
            routers.lldp_ports(stack, parsed[1])


def xid_codes() -> dict[int, str]:
    """Each Xid code a real kernel log kept as a fixture shows, and the text after its code on the
    first such line (railyard/data/fixtures/gpu/SOURCES.md): what an `xid` fault writes."""
    from railyard.model.catalog import FIXTURES_DIR
    from railyard.model.gpu_health import parse_xids

    out: dict[int, str] = {}
    for log in sorted((FIXTURES_DIR / "gpu").glob("*.txt")):
        for x in parse_xids(log.read_text()):
            out.setdefault(x.code, x.detail)
    return out


def xid_detail(code: str) -> str:
    known = xid_codes()
    if not code.isdigit() or int(code) not in known:
        raise FaultError(f"xid takes a code a kept real log shows ({', '.join(map(str, sorted(known)))}), "
                         f"not {code!r}: the line's text is copied from it")
    return known[int(code)]


def dmesg_stamp() -> str:
    """dmesg's time stamp: seconds since the (shared) kernel booted, as `[ 1843.308145]`."""
    with open("/proc/uptime", encoding="ascii") as fh:
        up = float(fh.read().split()[0])
    return f"[{int(up):5d}.{int(up % 1 * 1e6):06d}]"


def _owns(node: str, port: str) -> bool:
    """The port is one of the node's own (names.node_port: <tag>-r<rail>, -s or -m)."""
    rest = port[len(names.node_tag(node)) + 1:] if port.startswith(names.node_tag(node) + "-") else None
    return rest is not None and (rest in ("s", "m") or (rest[:1] == "r" and rest[1:].isdigit()))


def _peer(stack: str, node: str, netdev: str) -> tuple[str, str]:
    """(namespace, name) of the far end of a node's veth, in whichever of the stack's namespaces it is."""
    own = names.node_ns(stack, node)
    show = subprocess.run(["ip", "-n", own, "-o", "link", "show", "dev", netdev], capture_output=True, text=True)
    if show.returncode != 0:
        raise FaultError(f"{node} has no interface {netdev}")
    index, _, rest = show.stdout.partition(": ")
    peer_index = rest.split(":", 1)[0].partition("@if")[2]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    for ns in (line.split()[0] for line in listed.splitlines() if line.startswith(names.stack_prefix(stack))):
        if ns == own:
            continue
        links = subprocess.run(["ip", "-n", ns, "-o", "link"], capture_output=True, text=True).stdout
        for line in links.splitlines():
            num, _, rest = line.partition(": ")
            name = rest.split(":", 1)[0]
            # Interface numbers are per namespace: two nodes' NICs may share one, and so may two
            # switches' ports, so the port must also be one of this node's own (names.node_port).
            port = name.split("@")[0]
            if num == peer_index and name.endswith(f"@if{index}") and _owns(node, port):
                return ns, port
    raise FaultError(f"the far end of {node}'s {netdev} is in none of stack {stack}'s namespaces")


def inject(stack: str, plan: Plan, kind: str, target: list[str], *, transient: bool = False) -> str:
    """Make one fault; returns what was done, in a line. transient: the node's next boot clears it."""
    if kind not in KINDS:
        raise FaultError(f"no fault kind {kind!r}; the kinds are {', '.join(KINDS)}")
    if transient and kind not in TRANSIENT:
        raise FaultError(f"{kind} outlives a reboot; --transient takes {', '.join(TRANSIENT)}")
    if len(target) != len(ARGS[kind]):
        raise FaultError(f"{kind} takes {' '.join(ARGS[kind])}")
    if kind == "link-down" and target[0] in {sw.name for sw in plan.fabric.switches()}:
        said, undo, edit = _pull_switch_port(stack, plan, target[0], target[1])
        return _record(stack, plan, {"kind": kind, "target": target, "undo": undo, "subnet": edit, "said": said,
                                     "transient": False})
    f = _Fault(stack, plan, kind, target)
    node = target[0]
    try:
        if kind == "cable-swap":
            other, _, dev2 = target[2].rpartition(":")
            if other:  # another node's rail (two nodes on one leaf): OTHER:DEV
                far = _Fault(stack, plan, kind, [other]).end(dev2)
                said = f"{node}: the cables of {target[1]} and {other}'s {dev2} exchanged"
            else:
                far = f.end(dev2)
                said = f"{node}: the cables of {target[1]} and {dev2} exchanged"
            f.edit_subnet("swap", f.end(target[1]), far)
            if plan.fabric.kind != "infiniband":
                f.swap_ports(target[1], _Fault(stack, plan, kind, [other]) if other else f, dev2)
        elif kind == "link-down":
            f.edit_subnet("unplug", f.end(target[1]))
            f.pull(target[1])
            said = f"{node}: {target[1]}'s cable pulled"
        elif kind == "link-width":
            width = target[2].lower().rstrip("x")
            if width not in ("1", "2", "4", "8", "12"):
                raise FaultError(f"link-width takes a lane count (1, 2, 4, 8 or 12), not {target[2]!r}")
            if plan.fabric.kind != "infiniband":
                raise FaultError("link-width changes a cable of the InfiniBand subnet; this stack's fabric is "
                               f"{plan.fabric.kind}")
            rate, _ = subnet.simulated_rate(plan.fabric)
            f.edit_subnet("retrain", f.end(target[1]), f"{width}x{rate.split('x', 1)[1]}")
            said = f"{node}: {target[1]}'s cable trained at {width}x"
        elif kind == "link-slow":
            if not target[2].isdigit() or int(target[2]) < 1:
                raise FaultError(f"link-slow takes a rate in Mbit/s, not {target[2]!r}")
            netdev = f.throttle(target[1], int(target[2]))
            named = target[1] if target[1] == netdev else f"{target[1]} ({netdev})"
            said = f"{node}: {named} slowed to {int(target[2])} Mbit/s"
        elif kind == "gpu-lost":
            d = f.device_dir(target[1])
            f.move_away(f.tree / "sys" / "bus" / "pci" / "devices" / d.name)
            f.move_away(d)
            said = f"{node}: {target[1]} ({d.name}) fell off the bus"
        elif kind == "pcie-degraded":
            d = f.device_dir(target[1])
            if not target[2].isdigit() or int(target[2]) < 1:
                raise FaultError(f"pcie-degraded takes a lane count, not {target[2]!r}")
            if not (d / "current_link_width").exists():
                raise FaultError(f"{node}'s {target[1]} shows no PCIe link (its SKU gives none)")
            f.write(d / "current_link_width", target[2])
            said = f"{node}: {target[1]} ({d.name}) PCIe link trained at x{target[2]}"
        elif kind == "ecc":
            if not target[2].isdigit() or int(target[2]) < 1:
                raise FaultError(f"ecc takes a count of errors, not {target[2]!r}")
            state = f.gpu_state(target[1])
            # A line per fault, summed by the node's nvidia-smi: a boot or a clear takes out one
            # fault's errors and keeps the others'.
            f.add_line(state / "ecc_volatile_uncorrectable", str(int(target[2])))
            if not transient:  # its memory keeps failing: a GPU reset brings the errors back
                f.add_line(state / "ecc_persistent", target[2])
            said = f"{node}: {target[1]} has {target[2]} uncorrectable ECC error(s)"
        elif kind == "nvlink-down":
            shown = f.manifest.get("nvidia_smi") or {}
            links = int(shown.get("nvlinks") or 0)
            if not links or not shown.get("nvlink"):
                raise FaultError(f"{node}'s nvidia-smi shows no NVLinks: its SKU gives none, or no real output "
                                 "of its GPU's links is kept (railyard/data/catalog/gpu_tools.yaml)")
            if not target[2].isdigit() or int(target[2]) >= links:
                raise FaultError(f"nvlink-down takes a link of the GPU's {links} (0 to {links - 1}), not {target[2]!r}")
            f.add_line(f.gpu_state(target[1]) / "nvlinks_down", str(int(target[2])))
            said = f"{node}: {target[1]}'s NVLink {target[2]} down"
        elif kind == "xid":
            bus = f.gpu_dir(target[1]).name.rsplit(".", 1)[0]
            line = f"NVRM: Xid (PCI:{bus}): {target[2]}, {xid_detail(target[2])}"
            f.add_line(f.tree / DMESG, f"{dmesg_stamp()} {line}")
            said = f"{node}: {target[1]} threw Xid {target[2]}"
        else:  # firmware
            d = f.device_dir(target[1])
            rdma = f.rdma(target[1])
            f.write(d / "infiniband" / rdma / "fw_ver", target[2])
            said = f"{node}: {rdma} flashed to firmware {target[2]}"
    except BaseException:
        _undo(f.undo)
        raise
    if transient:
        said += " (transient: its next boot clears it)"
    return _record(stack, plan, {"kind": kind, "target": target, "undo": f.undo, "subnet": f.subnet_edit,
                                 "said": said, "transient": transient})


def _record(stack: str, plan: Plan, entry: dict[str, Any]) -> str:
    """One fault made, journalled with its undo, and the lab's subnet rewritten; what was done."""
    with _journal_locked(stack):
        entries = _journal(stack)
        entries.append(entry)
        _save(stack, entries)
        _write_subnet(stack, plan, entries)
    return str(entry["said"])


def _pull_switch_port(stack: str, plan: Plan, switch: str, port: str) -> tuple[str, list[dict[str, Any]], list[Any] | None]:
    """(what was done, its undo, its subnet edit) for a switch's cable pulled at `port`: on an
    InfiniBand fabric the cable gone from the simulated subnet; on Ethernet the port down in the
    switch's namespace (the far end loses carrier, and both lldpd stop hearing each other)."""
    from railyard.model.fabric.routing import port_netdev, port_number
    from railyard.model.fabric.subnet import planned_cables

    g = plan.fabric.switch
    # Its number, as ibnetdiscover prints it, or its name as the plan gives it.
    number = int(port) if port.isdigit() and 1 <= int(port) <= g.radix else port_number(g, port)
    if number is None:
        raise FaultError(f"{switch} has no port {port}: its ports are 1 to {g.radix}, or by name "
                         f"{port_netdev(g, 1)} to {port_netdev(g, g.radix)}")
    port = port_netdev(g, number)
    end = End(switch, number)
    if not any(end in cable for cable in planned_cables(plan.fabric)):
        raise FaultError(f"{switch} port {port} has no planned cable to pull")
    said = f"{switch}: the cable on {port} pulled"
    if plan.fabric.kind == "infiniband":
        edit: list[Any] = ["unplug", [switch, number]]
        _apply(subnet.current(stack, plan.fabric), edit)  # refused before anything changes
        return said, [], edit
    ns = names.switch_ns(stack, switch)
    links = net.links(ns, with_addresses=False) if net.netns_exists(ns) else {}
    # A leaf's host-facing port is named after its node in the lab, with the planned name as its alias.
    dev = port if port in links else next((n for n, i in links.items() if i.get("ifalias") == port), None)
    if dev is None:
        raise FaultError(f"switch {switch} has no port {port} in the lab: is stack {stack} up?")
    subprocess.run(["ip", "-n", ns, "link", "set", "dev", dev, "down"], check=True)
    return said, [{"op": "link", "netns": ns, "dev": dev}], None


def _apply(text: str, edit: list[Any]) -> str:
    op, *args = edit
    ends = [End(a[0], int(a[1])) if isinstance(a, list) else a for a in args]
    try:
        if op == "swap":
            return subnet.swap(text, ends[0], ends[1])
        if op == "unplug":
            return subnet.unplug(text, ends[0])
        return subnet.retrain(text, ends[0], str(args[1]))
    except KeyError as exc:
        raise FaultError(str(exc).strip('"')) from None


def _write_subnet(stack: str, plan: Plan, entries: list[dict[str, Any]]) -> None:
    """The lab's subnet: the plan's, with every journalled fault's edit in order; none: the plan's."""
    if plan.fabric.kind != "infiniband":
        return
    edits = [e["subnet"] for e in entries if e.get("subnet")]
    p = subnet.path(stack)
    if not edits:
        p.unlink(missing_ok=True)
        return
    text = subnet.planned(plan.fabric)
    for edit in edits:
        text = _apply(text, edit)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _undo(records: list[dict[str, Any]]) -> None:
    for r in reversed(records):
        op = r["op"]
        if op == "file":
            p = Path(r["path"])
            if p.exists():
                os.chmod(p, 0o644)
            if r["content"] is None:
                p.unlink(missing_ok=True)
            else:
                p.write_text(r["content"])
                os.chmod(p, 0o444)
        elif op == "move":
            if os.path.lexists(r["held"]):
                os.rename(r["held"], r["path"])
        elif op == "link":
            subprocess.run(["ip", "-n", r["netns"], "link", "set", "dev", r["dev"], "up"], check=False)
        elif op == "ports":  # each moved end back to its own leaf port
            _move_ports(r["stack"], [(m[0], m[1], m[2]) for m in r["moves"]], check=False)
        elif op == "qdisc":
            subprocess.run(["tc", "-n", r["netns"], "qdisc", "del", "dev", r["dev"], "root"], check=False,
                           capture_output=True)
        elif op == "line":
            p = Path(r["path"])
            lines = p.read_text().splitlines() if p.exists() else []
            if r["line"] in lines:
                del lines[len(lines) - 1 - lines[::-1].index(r["line"])]
            if p.exists():
                os.chmod(p, 0o644)
                if lines:
                    p.write_text("".join(x + "\n" for x in lines))
                    os.chmod(p, 0o444)
                else:
                    p.unlink()
        elif op == "dir":
            try:
                os.rmdir(r["path"])
            except OSError:  # gone already, or another fault's files are still in it
                pass
        else:
            raise FaultError(f"unknown undo record {op!r}")


def faults(stack: str) -> list[dict[str, Any]]:
    return _journal(stack)


def clear_at_boot(stack: str, node: str, root: Path | None = None) -> list[str]:
    """Undo the node's transient faults (its power supervisor calls this as the node boots);
    returns what each had done. None of them edits the subnet, so no plan is needed."""
    with _journal_locked(stack, root):
        entries = _journal(stack, root)
        kept, said = [], []
        for e in reversed(entries):
            if e.get("transient") and e["target"][0] == node:
                _undo(e["undo"])
                said.append(e["said"])
            else:
                kept.append(e)
        if said:
            kept.reverse()
            _save(stack, kept, root)
    return said


def clear(stack: str, plan: Plan, node: str | None = None) -> list[str]:
    """Undo the faults (of `node`, or all), newest first; returns what each had done."""
    with _journal_locked(stack):
        entries = _journal(stack)
        kept, said = [], []
        for e in reversed(entries):
            if node is None or e["target"][0] == node:
                _undo(e["undo"])
                said.append(e["said"])
            else:
                kept.append(e)
        kept.reverse()
        _save(stack, kept)
        _write_subnet(stack, plan, kept)
        if not kept:
            shutil.rmtree(paths.lab_dir(stack) / "faults", ignore_errors=True)
    return said
