"""Creating, converging, reading and deleting a lab node: its config, wiring and processes together.

Every function is idempotent (see the package's docstring); results are plain JSON data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from railyard.drivers.lab import names, net, proc
from railyard.drivers.lab.errors import LabError, require_root
from railyard.drivers.lab.fabric import LAB_NETNS_SYSCTLS
from railyard.drivers.lab.node import power
from railyard.drivers.lab.node.config import Nic, _parse_nics, _prepare_dir, check_dir_location, node_dir, parse_keys
from railyard.drivers.lab.node.processes import (
    _hw_source_of,
    _identity,
    _kill_node_processes,
    _restart_sshd,
    _sshd_pid,
    _start_init,
    agent_pid,
    host_key,
    init_pid,
    reboot_pending,
    start_agent,
)
from railyard.drivers.lab.node.wiring import _ensure_addressing, _ensure_links, _own_ports, _port_spaces


def create_node(
    stack: str,
    node: str,
    *,
    mgmt: dict,
    authorized_keys: str | Sequence[str],
    rails: Iterable[dict] = (),
    storage: dict | None = None,
    compute_cidr: str | None = None,
    hw_tree_source: str | None = None,
    root: Path | None = None,
) -> dict:
    """Ensure node `node` of `stack` exists, is running and matches the request.

    mgmt:            {"name": "eno3", "address": "198.18.0.11/24"}, on the mgmt bridge; sshd
                     listens on this address only
    rails:           [{"name": "ibp24s0", "rail": 0, "address": "198.19.0.11/24",
                       "gateway": "198.19.0.1"}, ...]; gateway only where a spine routes the rail
    storage:         {"name": "enp170s0f0", "address": "198.18.1.11/24"} on the storage bridge
    compute_cidr:    the network reached via a rail's gateway (all rails' subnets), e.g.
                     ``198.19.0.0/16``; needed when a rail has a gateway
    authorized_keys: public key line(s) allowed to log in as root
    hw_tree_source:  directory shown at /run/railyard/hw (default: the node's own, empty, dir)
    root:            the project root (paths.project_root() by default)

    The fabric (and its bridges for every rail used) must exist. Returns read_node's result.
    """
    require_root()
    nics = _parse_nics(stack, node, mgmt, rails, storage, compute_cidr)
    keys = parse_keys(node, authorized_keys)
    return converge(stack, node, nics=nics, keys=keys, compute_cidr=compute_cidr,
                    hw_tree_source=hw_tree_source, root=root)


def converge(stack: str, node: str, *, nics: list[Nic], keys: list[str], compute_cidr: str | None,
             hw_tree_source: str | None, root: Path | None, attach=None) -> dict:
    """Bring a namespace set (a node, or a VM, see vm.py) to the request: its dir, netns, veth
    NICs, addressing, init, sshd and agent. `attach(netns)`, when given, runs once the netns and
    veths exist and before addressing: it moves in the NICs that are not veths (a VM's VFs).
    Returns read_node's result."""
    ns = names.node_ns(stack, node)
    fab = names.fabric_ns(stack)
    d = node_dir(stack, node, root)
    check_dir_location(d)

    if not net.netns_exists(fab):
        raise LabError(f"node {ns}", f"the fabric namespace {fab} does not exist; create the fabric first")
    fab_links = net.links(fab, with_addresses=False)
    missing = sorted({n.bridge for n in nics if n.veth and n.switch is None} - set(fab_links))
    if missing:
        raise LabError(f"node {ns}", f"bridges {missing} are missing in {fab}; create the fabric with them first")

    hw = Path(hw_tree_source).resolve() if hw_tree_source else d / "hw"
    if hw_tree_source and not hw.is_dir():
        raise LabError(f"node {ns}", f"hw_tree_source {hw} is not a directory")
    config_changed = _prepare_dir(d, node, nics[0], keys)

    net.claim_netns(ns, names.owner(stack, root))
    # Before any interface is created, so new ones inherit them; every time, because a create
    # killed right after `ip netns add` leaves a namespace without them.
    net.sysctls(ns, LAB_NETNS_SYSCTLS)
    _ensure_links(stack, node, ns, fab, [n for n in nics if n.veth], fab_links)
    if attach is not None:
        attach(ns)
    _ensure_addressing(ns, nics, compute_cidr)

    pid = init_pid(stack, node, root)
    if pid is not None and _hw_source_of(pid) != _identity(hw):
        _kill_node_processes(stack, node)  # the hw tree is bound at start: restart to change it
        pid = None
    power.prepare(stack, node, hw, root)
    if pid is None:
        _kill_node_processes(stack, node)  # leftovers of an init that died or a removed netns
        pid = _start_init(stack, node, d, hw, root)
    else:
        if config_changed or not _sshd_pid(stack, node, pid):
            _restart_sshd(stack, node, pid)
        if not agent_pid(stack, node, root):
            start_agent(stack, node, root)
    power.ensure_supervisor(stack, node, root)
    state = read_node(stack, node, root)
    if state is None:
        raise LabError(f"node {ns}", "vanished while it was being created")
    return state


# --- read and delete ----------------------------------------------------------------------------

def read_node(stack: str, node: str, root: Path | None = None) -> dict | None:
    """The node as it is now, or None when its netns is gone.

    {"id", "stack", "node", "netns", "hostname", "running", "init_pid", "sshd", "agent",
     "mgmt_address", "host_key", "nics": {name: [addresses]}, "reboot_pending", "runtime_dir"}

    "nics" are the node's own NICs (veths); VFs are the tuning's (sriov.read_sriov) or a VM's
    (vm.read_vm), so making them does not show as drift of the node.
    """
    ns = names.node_ns(stack, node)
    if not net.netns_exists(ns):
        return None
    d = node_dir(stack, node, root)
    pid = init_pid(stack, node, root)
    links = net.links(ns)
    # The node's own NICs; VFs (macvlans) belong to the tuning that made them or the VM holding them.
    nics = {n: net.addresses(i) for n, i in sorted(links.items()) if net.kind(i) == "veth"}
    mgmt = None
    try:
        for line in (d / "etc" / "ssh" / "sshd_config").read_text().splitlines():
            if line.startswith("ListenAddress "):
                mgmt = line.split()[1].rsplit(":", 1)[0]
    except OSError:
        pass
    return {
        "id": ns,
        "stack": stack,
        "node": node,
        "netns": ns,
        "hostname": node,
        "running": pid is not None,
        "init_pid": pid,
        "sshd": bool(pid and _sshd_pid(stack, node, pid)),
        "agent": bool(pid and agent_pid(stack, node, root, _init=pid)),
        "mgmt_address": mgmt,
        "host_key": host_key(stack, node, root),
        "nics": nics,
        "reboot_pending": bool(pid and reboot_pending(stack, node, root)),
        "runtime_dir": str(d),
    }


def node_exists(stack: str, node: str) -> bool:
    return net.netns_exists(names.node_ns(stack, node))


def delete_node(stack: str, node: str, root: Path | None = None) -> dict:
    """Stop every process of the node, remove its netns, its NICs (both ends) and its runtime
    dir. Its mounts live only in its own mount namespace and go with its last process."""
    require_root()
    ns, fab = names.node_ns(stack, node), names.fabric_ns(stack)
    d = node_dir(stack, node, root)
    existed = net.netns_exists(ns) or d.exists()
    _kill_node_processes(stack, node)
    net.netns_delete(ns)
    # Freeing the netns takes its veths (and so the fabric ports) along, all in one batch; that
    # happens asynchronously, so wait for it, and delete what a straggling holder of the netns
    # keeps alive one by one (slower: each veth deletion waits for its own RCU grace period).
    for sp in _port_spaces(stack, fab):
        if net.netns_exists(sp):
            left = net.wait_links_gone(sp, lambda links: _own_ports(node, links), with_addresses=False)
            for port in sorted(left):
                net.link_delete(port, sp)
    # Loop devices of the node's local cache (storage/cache.py) free themselves with its last
    # process; wait for that, so none outlives the node.
    proc.release_loops(d)
    proc.remove_tree(d)
    return {"id": ns, "deleted": existed}
