"""A stack's fabric: the leaves (one bridge per rail), the storage and management networks, the
host's one way in, and optionally a spine that routes between rails.

    root namespace            ry-T-fabric                                  ry-T-spine
    ry-T-mgmt 198.18.x.1/32 ─ host ┐                                      (ip_forward=1)
      route <mgmt cidr>           mgmt ─── <node>-m ...
                                  storage ─ <node>-s ...
                                  rail0 ── <node>-r0 ... spine0 ────────── rail0 <rail 0 gateway>
                                  rail1 ── <node>-r1 ... spine1 ────────── rail1 <rail 1 gateway>

The fabric namespace only switches frames: its bridges hold no addresses and it routes nothing.
The host holds one address of the management network on its veth and a route to that network,
nothing else: it does not forward for the lab (forwarding is off on its veth even where the host
forwards elsewhere), no NAT, and no lab namespace has a default route, so lab traffic stays
inside the lab's namespaces and that veth. Only the management network is routed on the host,
so only management networks must differ between stacks; rail and storage addresses may repeat.

Every function is idempotent: `create_*` adopts what exists and converges it to the request,
`delete_*` of something missing succeeds, `read_*` returns what is there now in the same shape
as `create_*` (None when the namespace is gone), for a provider's refresh.
"""

from __future__ import annotations

import ipaddress
import re

from railyard.drivers.lab import names, net, proc
from railyard.drivers.lab.errors import LabError, require_root

LAB_NETNS_SYSCTLS = {
    # The lab is IPv4 only; without IPv6 no link-local chatter (router and neighbour solicitations)
    # crosses the bridges, and the host's veth carries nothing but the management network.
    "net/ipv6/conf/all/disable_ipv6": 1,
    "net/ipv6/conf/default/disable_ipv6": 1,
    # The kernel's per-destination limit on ICMP errors drops most of a traceroute's answers
    # (its probes go out together); lab namespaces answer every probe.
    "net/ipv4/icmp_ratelimit": 0,
}

_RAIL_BRIDGE = re.compile(r"rail(\d+)")
_SPINE_PORT = re.compile(r"spine(\d+)")


# --- fabric -----------------------------------------------------------------------------------

def create_fabric(stack: str, *, rails: int, mgmt_cidr: str, host_address: str) -> dict:
    """Ensure the fabric namespace, its bridges (rail0..rails-1, storage, mgmt) and the host veth.

    rails:        number of rails (leaf bridges); bridges of rails beyond it are removed
    mgmt_cidr:    the stack's management network, e.g. ``198.18.0.0/24`` (unique per stack)
    host_address: the host's address in it, e.g. ``198.18.0.1``
    """
    require_root()
    if not isinstance(rails, int) or isinstance(rails, bool) or not 0 <= rails <= 99:
        raise LabError(f"fabric {names.fabric_ns(stack)}", f"rails must be 0..99, got {rails!r}")
    mgmt = net.lab_network(mgmt_cidr, f"fabric {names.fabric_ns(stack)} mgmt_cidr")
    host_ip = net.lab_address(host_address, f"fabric {names.fabric_ns(stack)} host_address")
    if host_ip not in mgmt or host_ip in (mgmt.network_address, mgmt.broadcast_address):
        raise LabError(f"fabric {names.fabric_ns(stack)}", f"host_address {host_ip} is not a host address of {mgmt}")
    fab, hlink = names.fabric_ns(stack), names.host_link(stack)
    _check_host_conflicts(stack, mgmt, host_ip)

    net.claim_netns(fab, names.owner(stack))
    net.sysctls(fab, {**LAB_NETNS_SYSCTLS, "net/ipv4/ip_forward": 0})

    links = net.links(fab, with_addresses=False)
    batch = net.Batch(fab)
    wanted = [names.rail_bridge(i) for i in range(rails)] + [names.STORAGE_BRIDGE, names.MGMT_BRIDGE]
    for name, info in sorted(links.items()):
        m = _RAIL_BRIDGE.fullmatch(name)
        if m and net.kind(info) == "bridge" and int(m.group(1)) >= rails:
            batch.add(f"bridge {name}", "link", "del", name)
    for br in wanted:
        if br in links and net.kind(links[br]) != "bridge":
            raise LabError(f"bridge {br} in netns {fab}", "a link of that name exists and is not a bridge")
        if br not in links:
            batch.add(f"bridge {br}", "link", "add", br, "type", "bridge")
        batch.add(f"bridge {br}", "link", "set", br, "up")
    batch.add("link lo", "link", "set", "lo", "up")

    # The host's veth: both ends exist or neither does (a half is left by a crash; replace it).
    host_side = net.link_exists(hlink)
    fabric_side = names.HOST_PORT in links
    if host_side != fabric_side or (host_side and not _peers_of_host_link(hlink, fab)):
        net.link_delete(hlink)
        if fabric_side:
            net.link_delete(names.HOST_PORT, fab)
        host_side = False
    if not host_side:
        net.ip("link", "add", hlink, "address", names.mac(stack, hlink), "type", "veth",
               "peer", "name", names.HOST_PORT, "address", names.mac(stack, fab, names.HOST_PORT), "netns", fab,
               obj=f"link {hlink}")
    batch.add(f"link {names.HOST_PORT}", "link", "set", names.HOST_PORT, "master", names.MGMT_BRIDGE, "up")
    batch.run()

    # Per-interface IPv4 forwarding governs packets received on that interface: off here, the
    # host never forwards what a node sends, whatever its global ip_forward says.
    _write_root_sysctl(f"net/ipv6/conf/{hlink}/disable_ipv6", 1)
    _write_root_sysctl(f"net/ipv4/conf/{hlink}/forwarding", 0)
    root = net.Batch(None)
    host_links = net.links()
    net.queue_addresses(root, hlink, host_links.get(hlink), [f"{host_ip}/32"])
    net.queue_owner(root, hlink, host_links.get(hlink), names.owner(stack))
    root.add(f"link {hlink}", "link", "set", hlink, "up")
    for r in net.routes(None, "main"):
        if r.get("dev") == hlink and r.get("dst") != str(mgmt):  # the stack's old management network
            root.add(f"route {r.get('dst')} via {hlink}", "route", "del", str(r.get("dst")), "dev", hlink)
    root.add(f"route {mgmt} via {hlink}", "route", "replace", str(mgmt), "dev", hlink, "src", str(host_ip),
             "scope", "link")
    root.run()
    return _read_fabric_or_fail(stack)


def _peers_of_host_link(hlink: str, fab: str) -> bool:
    """True when the root-namespace veth's peer is the `host` port in the fabric namespace."""
    info = net.links().get(hlink) or {}
    if net.kind(info) != "veth":
        return False
    peer = net.links(fab, with_addresses=False).get(names.HOST_PORT) or {}
    return peer.get("ifindex") == info.get("link_index") and net.kind(peer) == "veth"


def _check_host_conflicts(stack: str, mgmt: ipaddress.IPv4Network, host_ip: ipaddress.IPv4Address) -> None:
    hlink = names.host_link(stack)
    clash = net.overlapping_routes(str(mgmt), except_dev=hlink)
    if clash:
        r = clash[0]
        raise LabError(
            f"fabric {names.fabric_ns(stack)}",
            f"the host already routes {r.get('dst')} via {r.get('dev')}, which overlaps the management "
            f"network {mgmt}; give this stack a management network of its own",
        )
    for name, info in net.links().items():
        if name != hlink and f"{host_ip}" in {a.split("/")[0] for a in net.addresses(info)}:
            raise LabError(f"fabric {names.fabric_ns(stack)}", f"host address {host_ip} is already on {name}")


def _write_root_sysctl(key: str, value: int) -> None:
    path = f"/proc/sys/{key}"
    try:
        with open(path, "w") as f:
            f.write(str(value))
    except OSError as exc:
        raise LabError(f"sysctl {key}", str(exc)) from exc


def read_fabric(stack: str) -> dict | None:
    """The fabric as it is now (same shape as create_fabric's result), or None when it is gone."""
    fab, hlink = names.fabric_ns(stack), names.host_link(stack)
    if not net.netns_exists(fab):
        return None
    links = net.links(fab, with_addresses=False)
    rails = sorted(int(m.group(1)) for n, i in links.items()
                   if (m := _RAIL_BRIDGE.fullmatch(n)) and net.kind(i) == "bridge")
    host = net.links().get(hlink)
    host_ips = [a.split("/")[0] for a in net.addresses(host)] if host else []
    mgmt_cidr = None
    if host:
        for r in net.routes(None, "main"):
            if r.get("dev") == hlink and r.get("dst") not in (None, "default"):
                mgmt_cidr = str(ipaddress.ip_network(r["dst"], strict=False))
    # A rail count only means something when the rails are 0..n-1; report a gap as drift.
    count = len(rails) if rails == list(range(len(rails))) else -1
    return {
        "id": fab,
        "stack": stack,
        "tag": names.stack_tag(stack),
        "netns": fab,
        "rails": count,
        "bridges": {
            "rails": [names.rail_bridge(i) for i in rails],
            "storage": names.STORAGE_BRIDGE if names.STORAGE_BRIDGE in links else None,
            "mgmt": names.MGMT_BRIDGE if names.MGMT_BRIDGE in links else None,
        },
        "host_link": hlink if host else None,
        "host_address": host_ips[0] if host_ips else None,
        "mgmt_cidr": mgmt_cidr,
    }


def _read_fabric_or_fail(stack: str) -> dict:
    state = read_fabric(stack)
    if state is None:
        raise LabError(f"netns {names.fabric_ns(stack)}", "vanished while it was being created")
    return state


def fabric_exists(stack: str) -> bool:
    return net.netns_exists(names.fabric_ns(stack))


def fabric_ports(stack: str) -> dict[str, dict]:
    """Every link of the fabric namespace by name (ports and bridges)."""
    fab = names.fabric_ns(stack)
    return net.links(fab, with_addresses=False) if net.netns_exists(fab) else {}


def delete_fabric(stack: str) -> dict:
    """Remove the host veth and the fabric namespace. Nodes' NICs on it disappear with it, so
    delete the nodes first; their runtime directories are theirs to remove."""
    require_root()
    fab, hlink = names.fabric_ns(stack), names.host_link(stack)
    existed_link = net.link_exists(hlink)
    ino = net.netns_inode(fab)
    if ino is not None:
        proc.kill_all([p.pid for p in proc.in_namespaces({ino})], what=f"netns {fab}")
    existed = net.netns_delete(fab)
    # The host veth goes with the namespace, asynchronously; wait so no link of the stack
    # outlives this call, and delete it here if something still holds the namespace.
    if net.wait_links_gone(None, lambda links: {hlink} & set(links)):
        net.link_delete(hlink)
    return {"id": fab, "deleted": existed or existed_link}


# --- spine ------------------------------------------------------------------------------------

def attach_service(stack: str, netns: str, port: str, bridge: str, address: str) -> None:
    """A service namespace's veth `port` (the same name at both ends) on the fabric's `bridge`,
    holding `address` in `netns`: the object store's on storage, the control plane's on mgmt.
    A pair that is not each other's peer any more (one end deleted behind our back) is made again."""
    fab = names.fabric_ns(stack)
    inner = net.links(netns).get(port)
    outer = net.links(fab, with_addresses=False).get(port)
    paired = inner is not None and outer is not None and inner.get("link_index") == outer.get("ifindex")
    batch = net.Batch(fab)
    if not paired:
        if inner is not None:
            net.link_delete(port, netns)
        if outer is not None:
            net.link_delete(port, fab)
        batch.add(f"link {port}", "link", "add", port, "address", names.mac(stack, fab, port), "type", "veth",
                  "peer", "name", port, "address", names.mac(stack, netns, port), "netns", netns)
    batch.add(f"link {port}", "link", "set", port, "master", bridge, "up")
    batch.run()
    inner = net.links(netns).get(port)
    nbatch = net.Batch(netns)
    net.queue_addresses(nbatch, port, inner, [address])
    nbatch.add(f"link {port}", "link", "set", port, "up")
    nbatch.add("link lo", "link", "set", "lo", "up")
    nbatch.run()


def detach_service(stack: str, port: str) -> None:
    """The fabric's end of a service's veth, once its namespace is gone (the kernel removes the
    pair with it, a moment later)."""
    fab = names.fabric_ns(stack)
    if net.netns_exists(fab):
        for name in net.wait_links_gone(fab, lambda links: {port} & set(links), with_addresses=False):
            net.link_delete(name, fab)


def create_spine(stack: str, *, gateways: list[str], mtu: int | None = None) -> dict:
    """Ensure the spine namespace routing between rails: gateways[i] (``198.19.0.1/24``) is rail
    i's gateway, held by the spine's link to rail i's bridge. Links to rails beyond the list are
    removed. The rail bridges must exist (create_fabric first). `mtu`: the rails' (both ends of
    each spine link), so traffic routed between rails carries the rails' frames whole."""
    require_root()
    fab, sp = names.fabric_ns(stack), names.spine_ns(stack)
    gws = [net.lab_interface(g, f"spine {sp} gateway of rail {i}") for i, g in enumerate(gateways)]
    nets = [g.network for g in gws]
    for i, a in enumerate(nets):
        for j in range(i):
            if a.overlaps(nets[j]):
                raise LabError(f"spine {sp}", f"rails {j} and {i} have overlapping subnets {nets[j]} and {a}")
    if not net.netns_exists(fab):
        raise LabError(f"spine {sp}", f"the fabric namespace {fab} does not exist; create the fabric first")
    fab_links = net.links(fab, with_addresses=False)
    missing = [names.rail_bridge(i) for i in range(len(gws)) if names.rail_bridge(i) not in fab_links]
    if missing:
        raise LabError(f"spine {sp}", f"rail bridges {missing} are missing in {fab}; create the fabric with enough rails")

    net.claim_netns(sp, names.owner(stack))
    net.sysctls(sp, {**LAB_NETNS_SYSCTLS, "net/ipv4/ip_forward": 1, "net/ipv4/conf/all/rp_filter": 0,
                     "net/ipv4/conf/default/rp_filter": 0})
    sp_links = net.links(sp)

    fbatch = net.Batch(fab)
    # Surplus rails first, both ends (after a stack edit that removed rails).
    for name in sorted(sp_links):
        m = _RAIL_BRIDGE.fullmatch(name)
        if m and int(m.group(1)) >= len(gws):
            net.link_delete(name, sp)
    for name in sorted(fab_links):
        m = _SPINE_PORT.fullmatch(name)
        if m and int(m.group(1)) >= len(gws):
            fbatch.add(f"link {name}", "link", "del", name)
    fbatch.run()

    for i in range(len(gws)):
        inner, outer = names.spine_link(i), names.spine_port(i)
        if (inner in sp_links) != (outer in fab_links):  # half a veth, left by a crash
            net.link_delete(inner, sp)
            net.link_delete(outer, fab)
            sp_links.pop(inner, None)
            fab_links.pop(outer, None)
        if inner not in sp_links:
            fbatch.add(f"link {outer}", "link", "add", outer, "address", names.mac(stack, fab, outer),
                       "type", "veth", "peer", "name", inner, "address", names.mac(stack, sp, inner), "netns", sp)
        if mtu is not None and fab_links.get(outer, {}).get("mtu") != mtu:
            fbatch.add(f"link {outer} mtu", "link", "set", outer, "mtu", str(mtu))
        fbatch.add(f"link {outer}", "link", "set", outer, "master", names.rail_bridge(i), "up")
    fbatch.run()

    sp_links = net.links(sp)
    sbatch = net.Batch(sp)
    sbatch.add("link lo", "link", "set", "lo", "up")
    for i, gw in enumerate(gws):
        inner = names.spine_link(i)
        if mtu is not None and sp_links.get(inner, {}).get("mtu") != mtu:
            sbatch.add(f"link {inner} mtu", "link", "set", inner, "mtu", str(mtu))
        net.queue_addresses(sbatch, inner, sp_links.get(inner), [str(gw)])
        sbatch.add(f"link {inner}", "link", "set", inner, "up")
    sbatch.run()
    state = read_spine(stack)
    if state is None:
        raise LabError(f"netns {sp}", "vanished while it was being created")
    return state


def read_spine(stack: str) -> dict | None:
    sp = names.spine_ns(stack)
    if not net.netns_exists(sp):
        return None
    links = net.links(sp)
    gws: dict[int, str | None] = {}
    for name, info in links.items():
        m = _RAIL_BRIDGE.fullmatch(name)
        if m:
            addrs = net.addresses(info)
            gws[int(m.group(1))] = addrs[0] if addrs else None
    return {"id": sp, "stack": stack, "netns": sp, "gateways": [gws[i] for i in sorted(gws)]}


def spine_exists(stack: str) -> bool:
    return net.netns_exists(names.spine_ns(stack))


def delete_spine(stack: str) -> dict:
    require_root()
    fab, sp = names.fabric_ns(stack), names.spine_ns(stack)
    ino = net.netns_inode(sp)
    if ino is not None:
        proc.kill_all([p.pid for p in proc.in_namespaces({ino})], what=f"netns {sp}")
    existed = net.netns_delete(sp)
    # The fabric ends go with the spine's namespace, asynchronously: wait, so a spine created
    # right after finds their names free.
    if net.netns_exists(fab):
        for name in net.wait_links_gone(fab, lambda links: {n for n in links if _SPINE_PORT.fullmatch(n)}):
            net.link_delete(name, fab)
    return {"id": sp, "deleted": existed}
