"""Small helpers around `ip`: namespaces, links, bridges, addresses, routes and rules.

Each helper is idempotent (ensure/delete) and raises LabError naming the object and the
namespace it lives in, with iproute2's own message. Reads use `ip -json`.

Creating a node touches a few dozen objects, so the node and fabric code read a namespace's
state once, work out what is missing, and send the missing commands as one `ip -batch`
(`Batch`), instead of paying a process start for each command.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
from typing import Iterable, Mapping

from railyard.drivers.lab.errors import LabError
from railyard.drivers.lab.names import LAB_RANGE

NETNS_DIR = "/run/netns"


def where(netns: str | None) -> str:
    return f"in netns {netns}" if netns else "in the root namespace"


def run(argv: list[str], *, obj: str, input: str | None = None, check: bool = True,
        timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise LabError naming `obj` and carrying the command's stderr."""
    try:
        proc = subprocess.run(argv, input=input, text=True, capture_output=True, timeout=timeout,
                              check=False, env=env, stdin=None if input is not None else subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise LabError(obj, f"{argv[0]} is not installed (scripts/host-deps.sh installs the lab's host packages)") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(obj, f"`{' '.join(argv)}` did not finish within {timeout:g}s") from exc
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout or "").strip() or f"exit status {proc.returncode}"
        raise LabError(obj, f"`{' '.join(argv)}` failed: {msg}")
    return proc


def ip(*args: str, netns: str | None = None, obj: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = ["ip"] + (["-n", netns] if netns else []) + list(args)
    return run(argv, obj=f"{obj} {where(netns)}", check=check)


def ip_json(*args: str, netns: str | None = None, obj: str) -> list[dict]:
    argv = ["ip", "-json"] + (["-n", netns] if netns else []) + list(args)
    out = run(argv, obj=f"{obj} {where(netns)}").stdout.strip()
    return json.loads(out) if out else []


class Batch:
    """`ip -batch` for one namespace: commands are queued, then sent in one process (`run`
    empties the queue, so a batch can be filled and run again).

    iproute2 stops at the first failing line and reports its number; `run` maps it back to the
    command and the object it was for.
    """

    def __init__(self, netns: str | None):
        self.netns = netns
        self.lines: list[tuple[str, str]] = []

    def add(self, obj: str, *args: str) -> None:
        self.lines.append((obj, " ".join(args)))

    def __len__(self) -> int:
        return len(self.lines)

    def run(self) -> None:
        if not self.lines:
            return
        argv = ["ip"] + (["-n", self.netns] if self.netns else []) + ["-batch", "-"]
        lines, self.lines = self.lines, []
        proc = run(argv, obj=f"batch {where(self.netns)}", input="\n".join(c for _, c in lines) + "\n",
                   check=False)
        if proc.returncode == 0:
            return
        failed = None
        for token in proc.stderr.split():
            # "Command failed -:3"
            if token.startswith("-:") and token[2:].isdigit():
                failed = int(token[2:]) - 1
        if failed is not None and 0 <= failed < len(lines):
            obj, cmd = lines[failed]
            raise LabError(f"{obj} {where(self.netns)}", f"`ip {cmd}` failed: {proc.stderr.strip()}")
        raise LabError(f"batch {where(self.netns)}", proc.stderr.strip() or f"exit status {proc.returncode}")


# --- namespaces -------------------------------------------------------------------------------

def netns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def netns_exists(name: str) -> bool:
    return os.path.exists(netns_path(name))


def netns_list(prefix: str = "") -> list[str]:
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix))


def netns_inode(name: str) -> int | None:
    """The namespace's identity, to compare with /proc/PID/ns/net; None when it has no handle."""
    try:
        return os.stat(netns_path(name)).st_ino
    except FileNotFoundError:
        return None


def netns_add(name: str) -> bool:
    """Create the namespace unless it exists; True when it was created."""
    if netns_exists(name):
        return False
    proc = ip("netns", "add", name, obj=f"netns {name}", check=False)
    if proc.returncode != 0:
        if netns_exists(name):  # created concurrently: adopt it
            return False
        raise LabError(f"netns {name}", f"`ip netns add {name}` failed: {proc.stderr.strip()}")
    return True


def netns_delete(name: str) -> bool:
    """Remove the namespace's handle (the kernel frees it once no process or link holds it)."""
    if not netns_exists(name):
        return False
    proc = ip("netns", "delete", name, obj=f"netns {name}", check=False)
    if proc.returncode != 0 and netns_exists(name):
        raise LabError(f"netns {name}", f"`ip netns delete {name}` failed: {proc.stderr.strip()}")
    return True


def sysctls(netns: str | None, values: Mapping[str, str | int]) -> None:
    """Write /proc/sys/<key> inside a namespace (keys as paths: ``net/ipv4/ip_forward``).

    /proc/sys/net shows the namespace of the writing process, so the write happens in a shell
    entered into the namespace; one process for all keys.
    """
    if not values:
        return
    script = 'for kv; do printf %s "${kv#*=}" > "/proc/sys/${kv%%=*}" || exit 1; done'
    pairs = [f"{k}={v}" for k, v in values.items()]
    prefix = ["nsenter", f"--net={netns_path(netns)}", "--"] if netns else []
    run(prefix + ["sh", "-c", script, "sysctl", *pairs], obj=f"sysctl {' '.join(pairs)} {where(netns)}")


# --- links ------------------------------------------------------------------------------------

def links(netns: str | None = None, *, with_addresses: bool = True) -> dict[str, dict]:
    """Every link of the namespace by name, with its kind, master and (unless told otherwise, which
    is cheaper on a fabric with hundreds of ports) its addresses."""
    what = "addr" if with_addresses else "link"
    return {d["ifname"]: d for d in ip_json("-d", what, "show", netns=netns, obj="links")}


def kind(info: dict) -> str:
    return (info.get("linkinfo") or {}).get("info_kind", "")


def wait_links_gone(netns: str | None, select, timeout: float = 2.0, with_addresses: bool = True) -> set[str]:
    """Poll until select(links(netns)) is empty or `timeout` passes; returns what is left."""
    deadline = time.monotonic() + timeout
    while True:
        left = set(select(links(netns, with_addresses=with_addresses)))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.005)


def link_exists(name: str, netns: str | None = None) -> bool:
    proc = ip("link", "show", "dev", name, netns=netns, obj=f"link {name}", check=False)
    return proc.returncode == 0


def link_delete(name: str, netns: str | None = None) -> bool:
    """Delete a link (for a veth, both ends); True when it existed."""
    if netns and not netns_exists(netns):
        return False
    proc = ip("link", "del", "dev", name, netns=netns, obj=f"link {name}", check=False)
    if proc.returncode == 0:
        return True
    if not link_exists(name, netns):
        return False
    raise LabError(f"link {name} {where(netns)}", proc.stderr.strip())


def addresses(info: dict, family: str = "inet") -> list[str]:
    """The CIDRs on a link from `links()`, as ``198.18.0.5/24``."""
    return sorted(f"{a['local']}/{a['prefixlen']}" for a in info.get("addr_info", []) if a.get("family") == family)


def bridge_ensure(name: str, netns: str) -> bool:
    """A bridge that is up, with no IP: the lab's leaves switch frames and route nothing."""
    current = links(netns).get(name)
    if current is not None and kind(current) != "bridge":
        raise LabError(f"bridge {name} {where(netns)}", "a link of that name exists and is not a bridge")
    batch = Batch(netns)
    if current is None:
        batch.add(f"bridge {name}", "link", "add", name, "type", "bridge")
    batch.add(f"bridge {name}", "link", "set", name, "up")
    batch.run()
    return current is None


# --- addresses, routes, rules -----------------------------------------------------------------

def lab_interface(cidr: str, what: str) -> ipaddress.IPv4Interface:
    """Parse an address with its prefix and insist it lies in the lab's 198.18.0.0/15."""
    try:
        if "/" not in str(cidr):
            raise ValueError(cidr)
        iface = ipaddress.ip_interface(cidr)
    except ValueError as exc:
        raise LabError(what, f"{cidr!r} is not an address with a prefix length (198.18.0.10/24)") from exc
    if not isinstance(iface, ipaddress.IPv4Interface) or iface.network.prefixlen == 0 or not iface.network.subnet_of(LAB_RANGE):
        raise LabError(what, f"{cidr} is outside the lab's address block {LAB_RANGE}")
    if iface.ip in (iface.network.network_address, iface.network.broadcast_address) and iface.network.prefixlen < 31:
        raise LabError(what, f"{cidr} is the network or broadcast address of its subnet")
    return iface


def lab_network(cidr: str, what: str) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.ip_network(cidr, strict=True)
    except ValueError as exc:
        raise LabError(what, f"{cidr!r} is not a network (198.19.0.0/16)") from exc
    if not isinstance(net, ipaddress.IPv4Network) or net.prefixlen == 0 or not net.subnet_of(LAB_RANGE):
        raise LabError(what, f"{cidr} is outside the lab's address block {LAB_RANGE}")
    return net


def lab_address(addr: str, what: str) -> ipaddress.IPv4Address:
    try:
        ip_ = ipaddress.ip_address(addr)
    except ValueError as exc:
        raise LabError(what, f"{addr!r} is not an address") from exc
    if not isinstance(ip_, ipaddress.IPv4Address) or ip_ not in LAB_RANGE:
        raise LabError(what, f"{addr} is outside the lab's address block {LAB_RANGE}")
    return ip_


def _refuse_foreign(obj: str, alias: str | None, owner: str) -> None:
    if alias and alias != owner:
        raise LabError(obj, f"it exists and belongs to {alias!r}, not to {owner!r}: another checkout (or this "
                            "one under another path) made it. Remove it from there (railyard lab gc), or pick "
                            "another stack name; nothing was changed")


def claim_netns(name: str, owner: str) -> bool:
    """netns_add, for an owner: the namespace's `lo` carries `owner` as its alias (see
    names.owner_marker). A namespace some other owner marked is refused before anything in it is
    touched, so one checkout's `up` never takes over, and later removes, another's live lab.
    True when it was created."""
    created = netns_add(name)
    lo = links(name, with_addresses=False).get("lo") or {}
    _refuse_foreign(f"netns {name}", lo.get("ifalias"), owner)
    if lo.get("ifalias") != owner:
        ip("link", "set", "dev", "lo", "alias", owner, netns=name, obj=f"netns {name} owner")
    return created


def queue_owner(batch: Batch, dev: str, current: dict | None, owner: str) -> None:
    """Mark a link of the root namespace with `owner` unless it is; refused if another owner's."""
    alias = (current or {}).get("ifalias")
    _refuse_foreign(f"link {dev}", alias, owner)
    if alias != owner:
        batch.add(f"link {dev} owner", "link", "set", "dev", dev, "alias", owner)


def queue_addresses(batch: Batch, dev: str, current: dict | None, wanted: Iterable[str]) -> None:
    """Queue what makes `dev` hold exactly `wanted` IPv4 addresses."""
    have = set(addresses(current or {}))
    want = {str(ipaddress.ip_interface(c)) for c in wanted}
    for cidr in sorted(have - want):
        batch.add(f"address {cidr} on {dev}", "address", "del", cidr, "dev", dev)
    for cidr in sorted(want - have):
        batch.add(f"address {cidr} on {dev}", "address", "add", cidr, "dev", dev)


def rules(netns: str | None) -> list[dict]:
    return ip_json("-4", "rule", "show", netns=netns, obj="rules")


def routes(netns: str | None, table: str = "all") -> list[dict]:
    return ip_json("-4", "route", "show", "table", table, netns=netns, obj="routes")


def overlapping_routes(cidr: str, netns: str | None = None, *, except_dev: str | None = None) -> list[dict]:
    """Routes of the main table (other than a default route) whose destination overlaps `cidr`."""
    net = ipaddress.ip_network(cidr)
    found = []
    for r in routes(netns, "main"):
        dst = r.get("dst")
        if not dst or dst == "default" or r.get("dev") == except_dev:
            continue
        try:
            other = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if other.version == 4 and other.overlaps(net):
            found.append(r)
    return found
