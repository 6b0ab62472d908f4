"""A lab node's wiring inside its network namespace: veth NICs, addresses, rules and routes.

Each NIC is a veth whose node end carries the requested name and whose other end is a port of
the fabric namespace on the NIC's bridge (names.node_port), or, for a rail of a RoCE stack whose
switches route (routers.py), of its leaf's namespace on the leaf's host bridge. Rail NICs route per NIC, as on a
rail-optimized cluster: a source rule per NIC (RULE_PREF_BASE+table) into a table of its own
(TABLE_BASE+table) holding the rail's subnet and, when a spine exists, the compute network via
the rail's gateway. There is no default route.
"""

from __future__ import annotations

import ipaddress

from railyard.drivers.lab import names, net, routers
from railyard.drivers.lab.errors import LabError
from railyard.drivers.lab.node.config import Nic

RULE_PREF_BASE = 1000
TABLE_BASE = 100


def _own_ports(node: str, links: dict[str, dict]) -> set[str]:
    """This node's ports in the fabric namespace (see names.node_port for why this is exact)."""
    prefix = names.node_tag(node) + "-"
    out = set()
    for name in links:
        rest = name[len(prefix):] if name.startswith(prefix) else None
        if rest is not None and (rest in ("s", "m") or (rest[:1] == "r" and rest[1:].isdigit())):
            out.add(name)
    return out


def _port_spaces(stack: str, fab: str) -> list[str]:
    """Every namespace a node's ports may be in: the fabric's, and each routed switch's."""
    return [fab] + [ns for ns in net.netns_list(names.stack_prefix(stack))
                    if (names.parse_ns(stack, ns) or ("",))[0] == "switch"]


def _ensure_links(stack: str, node: str, ns: str, fab: str, nics: list[Nic], fab_links: dict[str, dict]) -> None:
    node_links = net.links(ns)
    wanted = {(n.port_ns(stack), names.node_port(node, n.role)): n for n in nics}
    spaces = {sp: fab_links if sp == fab else net.links(sp, with_addresses=False) for sp in _port_spaces(stack, fab)}
    for sp, _ in wanted:
        if sp not in spaces:
            raise LabError(f"node {ns}", f"the switch namespace {sp} does not exist; create the stack's switches first")
    # A port asked for in another namespace than it is in (a rail now on a routed leaf) moves
    # there whole: the pair stays, and with it what hangs off the node's end (a hypervisor's VFs).
    moved = False
    for (sp, port), nic in wanted.items():
        if port in spaces[sp]:
            continue
        for other, links in spaces.items():
            if other != sp and port in links and port in _own_ports(node, links):
                net.ip("link", "set", port, "nomaster", netns=other, obj=f"link {port}")
                net.ip("link", "set", port, "netns", sp, netns=other, obj=f"link {port} to {sp}")
                spaces[other] = net.links(other, with_addresses=False)
                spaces[sp] = net.links(sp, with_addresses=False)
                moved = True
                break
    if moved:  # a moved end gets a new ifindex, which the node's end now names as its peer
        node_links = net.links(ns)
    # NICs no longer asked for (a stack edit removed a rail): both ends go.
    for sp, links in spaces.items():
        batch = net.Batch(sp)
        for port in sorted(_own_ports(node, links) - {p for s, p in wanted if s == sp}):
            batch.add(f"link {port}", "link", "del", port)
        if len(batch):
            batch.run()
            spaces[sp] = net.links(sp, with_addresses=False)
    wanted_names = {n.name for n in nics}
    for name, info in sorted(node_links.items()):
        if name not in wanted_names and net.kind(info) == "veth":
            net.link_delete(name, ns)
            node_links.pop(name)
    batches = {sp: net.Batch(sp) for sp in spaces}
    for (sp, port), nic in wanted.items():
        fbatch = batches[sp]
        inner = node_links.get(nic.name)
        outer = spaces[sp].get(port)
        paired = (inner is not None and outer is not None and net.kind(inner) == "veth"
                  and net.kind(outer) == "veth" and inner.get("link_index") == outer.get("ifindex"))
        if not paired:
            # Half a pair, or a pair crossed with another node's: start this NIC over.
            if inner is not None:
                net.link_delete(nic.name, ns)
            if outer is not None:
                net.link_delete(port, sp)
            mtu = ("mtu", str(nic.mtu)) if nic.mtu is not None else ()
            fbatch.add(f"link {port} (node {node} NIC {nic.name})", "link", "add", port, *mtu,
                       "address", names.mac(stack, node, port), "type", "veth",
                       "peer", "name", nic.name, *mtu, "address", names.mac(stack, node, nic.name), "netns", ns)
        elif nic.mtu is not None and outer is not None and outer.get("mtu") != nic.mtu:  # (paired: outer is there)
            fbatch.add(f"link {port} mtu", "link", "set", port, "mtu", str(nic.mtu))
        if outer is None or outer.get("master") != nic.bridge or "UP" not in outer.get("flags", []) or not paired:
            fbatch.add(f"link {port}", "link", "set", port, "master", nic.bridge, "up")
        if nic.switch_port is not None and (not paired or outer is None or outer.get("ifalias") != nic.switch_port):
            fbatch.add(f"link {port} alias", "link", "set", port, "alias", nic.switch_port)
    for batch in batches.values():
        batch.run()
    # The leaves' lldpd sends each new port's planned name once it knows the port.
    for leaf in sorted({n.switch for n in nics if n.switch is not None and n.switch_port is not None}):
        routers.lldp_ports(stack, leaf)


def _ensure_addressing(ns: str, nics: list[Nic], compute_cidr: str | None) -> None:
    links = net.links(ns)
    batch = net.Batch(ns)
    if "UP" not in links.get("lo", {}).get("flags", []):
        batch.add("link lo", "link", "set", "lo", "up")
    for nic in nics:
        # The node's end of a veth (a fresh one has it already), or a VF moved in: a macvlan
        # takes its PF's MTU only when it is made, so one made before the PF's changed keeps its own.
        if nic.mtu is not None and links.get(nic.name, {}).get("mtu") != nic.mtu:
            batch.add(f"link {nic.name} mtu", "link", "set", nic.name, "mtu", str(nic.mtu))
        if nic.address is not None:  # else the node's own network configuration owns it
            net.queue_addresses(batch, nic.name, links.get(nic.name), [nic.address])
        if "UP" not in links.get(nic.name, {}).get("flags", []):
            batch.add(f"link {nic.name}", "link", "set", nic.name, "up")

    # Rails the node addresses itself keep the rules and tables it gives them.
    unmanaged = {n.table for n in nics if n.table is not None and n.address is None}
    rail_nics = {n.table: n for n in nics if n.table is not None and n.address is not None}
    wanted_rules = {RULE_PREF_BASE + r: (address.split("/")[0], TABLE_BASE + r) for r, n in rail_nics.items()
                    if (address := n.address) is not None}  # (all of rail_nics: addressed above)
    for rule in net.rules(ns):
        pref = rule.get("priority")
        if pref is None or not RULE_PREF_BASE <= pref < RULE_PREF_BASE + 100 or pref - RULE_PREF_BASE in unmanaged:
            continue
        want = wanted_rules.get(pref)
        if want and (rule.get("src"), str(rule.get("table")), rule.get("srclen", 32)) == (want[0], str(want[1]), 32):
            wanted_rules.pop(pref)
        else:
            batch.add(f"rule pref {pref}", "rule", "del", "pref", str(pref))
    for pref, (src, table) in sorted(wanted_rules.items()):
        batch.add(f"rule pref {pref}", "rule", "add", "pref", str(pref), "from", src, "lookup", str(table))

    routes = net.routes(ns)
    by_table: dict[int, set[tuple]] = {}
    for r in routes:
        t = r.get("table")
        if isinstance(t, int) or (isinstance(t, str) and t.isdigit()):
            by_table.setdefault(int(t), set()).add((r.get("dst"), r.get("gateway"), r.get("dev")))
    for table in sorted(by_table):
        if TABLE_BASE <= table < TABLE_BASE + 100 and table - TABLE_BASE not in set(rail_nics) | unmanaged:
            batch.add(f"route table {table}", "route", "flush", "table", str(table))
    for rail, nic in sorted(rail_nics.items()):
        table = TABLE_BASE + rail  # "rail" here is the NIC's table slot (Nic.table)
        assert nic.address is not None, "rail_nics holds the addressed rails only"
        iface = ipaddress.ip_interface(nic.address)
        want_routes: set[tuple] = {(str(iface.network), None, nic.name)}
        if nic.gateway:
            assert compute_cidr is not None, "check_compute_cidr() refuses gateways without a compute_cidr"
            want_routes.add((str(net.lab_network(compute_cidr, "compute_cidr")), nic.gateway, nic.name))
        if by_table.get(table, set()) == want_routes:
            continue
        what = f"route table {table} (rail {rail})"
        if table in by_table:
            batch.add(what, "route", "flush", "table", str(table))
        batch.add(what, "route", "add", str(iface.network), "dev", nic.name, "src", str(iface.ip),
                  "scope", "link", "table", str(table))
        if nic.gateway:
            batch.add(what, "route", "add", str(compute_cidr), "via", nic.gateway, "dev", nic.name,
                      "src", str(iface.ip), "table", str(table))
    batch.run()
