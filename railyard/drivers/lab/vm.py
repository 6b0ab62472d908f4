"""VMs of the virtual layout: namespace sets of their own on a hypervisor node, given its VFs.

A VM is built by the same machinery as a node (node.converge): its own network, mount and UTS
namespaces, init, hostname, sshd on its management address, SR-IOV agent. Its names are a
node's (netns ``ry-T-n-<vm>``, runtime dir ``nodes/<vm>``), so everything that finds, lists and
removes nodes finds it too; ``nodes/<vm>/vm.json`` records what makes it a VM: its hypervisor
and the VFs it holds.

- Management (and optionally storage) NIC: a veth on the fabric's mgmt (storage) bridge, as a
  virtio NIC on the host's bridge would be, so the host reaches the VM over its management
  address like any node.
- VFs: SR-IOV passthrough. The hypervisor's tuning writes ``sriov_numvfs`` in the hypervisor's
  hardware tree and its agent makes the VFs (macvlans on the PF, see agent.py). create_vm marks
  each VF bound to vfio-pci in the hypervisor's tree (sriov.assign), moves its netdev from the
  hypervisor's netns into the VM's and renames it to the VM's NIC name (``vf0``...), where it
  gets its address from the plan and a routing rule and table of its own (so several VFs of one
  rail route apart, as a rail NIC does on a node). delete_vm gives them back: renamed to the
  hypervisor's name for them, moved back, marked mlx5_core again.

VMs reach each other over their VFs as macvlans on the PF: across hypervisors through the rail's
bridge, on one hypervisor through the PF (macvlan bridge mode, like the NIC's embedded switch).
A macvlan cannot reach its own lower device's address, where a real NIC's embedded switch
delivers a VF's frames to its PF. So the hypervisor also holds its rail address on a macvlan of
the PF in bridge mode (``<pf>h``, a sibling of the VFs, as a /32 that answers ARP only for what
it routes: arp_filter), and routes each of its VMs' VF addresses through it (a /32 in the main
table, and a rule ahead of the rails' source rules sending replies there). A VM then reaches its
own hypervisor's rail address over its VF, and the hypervisor's other traffic is as it was.

create_vm adopts what exists (a VF already moved, or moved but not renamed, after a crash);
delete_vm of a missing VM succeeds. Results are plain JSON data.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable, Sequence

from railyard.drivers.lab import agent, names, net, node, sriov
from railyard.drivers.lab.errors import LabError, require_root

RECORD = "vm.json"


def _record_path(stack: str, vm: str, root: Path | None) -> Path:
    return node.node_dir(stack, vm, root) / RECORD


def read_record(stack: str, vm: str, root: Path | None = None) -> dict | None:
    """What makes a namespace set a VM: {"hypervisor": name, "vfs": [vf spec, ...]}; None for a node."""
    try:
        data = json.loads(_record_path(stack, vm, root).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "hypervisor" in data else None


def is_vm(stack: str, name: str, root: Path | None = None) -> bool:
    return read_record(stack, name, root) is not None


def _parse_vfs(stack: str, vm: str, vfs: Iterable[dict]) -> list[dict]:
    ns = names.node_ns(stack, vm)
    out = []
    for k, spec in enumerate(vfs):
        what = f"VM {ns} VF {k}"
        if not isinstance(spec, dict):
            raise LabError(what, f"expected a mapping, got {spec!r}")
        missing = [key for key in ("name", "pf", "slot", "rail", "address") if key not in spec]
        if missing:
            raise LabError(what, f"missing {missing} in {spec!r}")
        for key in ("slot", "rail"):
            if not isinstance(spec[key], int) or isinstance(spec[key], bool) or spec[key] < 0:
                raise LabError(what, f"{key} must be a non-negative integer, got {spec[key]!r}")
        names.rail_bridge(spec["rail"])
        iface = net.lab_interface(spec["address"], what)
        gw = spec.get("gateway")
        if gw is not None:
            gw_ip = net.lab_address(gw, what)
            if gw_ip not in iface.network or gw_ip == iface.ip:
                raise LabError(what, f"gateway {gw} is not another address of {iface.network}")
            gw = str(gw_ip)
        mtu = spec.get("mtu")
        if mtu is not None and (isinstance(mtu, bool) or not isinstance(mtu, int) or not 68 <= mtu <= 65535):
            raise LabError(what, f"mtu must be an integer 68..65535, got {mtu!r}")
        out.append({"name": names.check_ifname(spec["name"]), "pf": names.check_ifname(spec["pf"]),
                    "slot": spec["slot"], "rail": spec["rail"], "address": str(iface), "gateway": gw, "mtu": mtu})
    return out


def create_vm(
    stack: str,
    vm: str,
    *,
    hypervisor: str,
    mgmt: dict,
    authorized_keys: str | Sequence[str],
    vfs: Iterable[dict] = (),
    storage: dict | None = None,
    compute_cidr: str | None = None,
    hw_tree_source: str | None = None,
    root: Path | None = None,
) -> dict:
    """Ensure VM `vm` runs on node `hypervisor` with the VFs asked for.

    mgmt, storage:   as for create_node (veths on the fabric's mgmt and storage bridges)
    vfs:             [{"name": "vf0", "pf": "mlx5_0", "slot": 0, "rail": 0,
                       "address": "198.19.0.3/18", "gateway": "198.19.0.1"}, ...], from the
                     plan's VmPlan.vfs (name, pf, slot, rail; address = ip/prefixlen); `pf` is
                     the PF's netdev or its RDMA device name (the plan's); the gateway only
                     where a spine routes the rail (then compute_cidr is needed)
    hypervisor:      the node whose VFs these are; it must run, and its tuning must have made
                     the VFs (sriov_numvfs in its hardware tree)

    Returns read_vm's result.
    """
    require_root()
    names.check_node(hypervisor)
    ns = names.node_ns(stack, vm)
    if vm == hypervisor:
        raise LabError(f"VM {ns}", "a VM cannot be its own hypervisor")
    if node.init_pid(stack, hypervisor, root) is None:
        raise LabError(f"VM {ns}", f"its hypervisor {names.node_ns(stack, hypervisor)} is not running; create it first")
    if is_vm(stack, hypervisor, root):
        raise LabError(f"VM {ns}", f"{hypervisor} is a VM; VMs run on nodes")
    record = read_record(stack, vm, root)
    if record is None and node.node_exists(stack, vm):
        raise LabError(f"VM {ns}", "a node of that name exists")
    if record is not None and record["hypervisor"] != hypervisor:
        raise LabError(f"VM {ns}", f"runs on {record['hypervisor']}; delete it before moving it to {hypervisor}")
    nics = node._parse_nics(stack, vm, mgmt, (), storage, None)
    wanted = _parse_vfs(stack, vm, vfs)
    vf_nics = [node.Nic(v["name"], v["rail"], v["address"], v["gateway"], table=k, veth=False, mtu=v["mtu"])
               for k, v in enumerate(wanted)]
    node.check_unique(ns, nics + vf_nics)
    node.check_compute_cidr(ns, vf_nics, compute_cidr)
    keys = node.parse_keys(vm, authorized_keys)
    # Find every VF before anything changes: a VF the tuning has not made fails the create here.
    found = {v["name"]: sriov.find_vf(stack, hypervisor, v["pf"], v["slot"], root) for v in wanted}
    for v in wanted:
        v["pf_netdev"] = found[v["name"]].pf  # `pf` may be the RDMA name the plan uses

    # VFs held before and not asked for now go back first, so a VF may move between a VM's names.
    old = {v["name"]: v for v in (record or {}).get("vfs", [])}
    for name, v in old.items():
        if name not in found or (v.get("pf_netdev", v["pf"]), v["slot"]) != (found[name].pf, found[name].slot):
            _return_vf(stack, vm, hypervisor, v, root)
    # Recorded before the VFs move, so delete and gc give back what a crashed create took.
    d = node.node_dir(stack, vm, root)
    d.mkdir(parents=True, exist_ok=True)
    node._write_if_changed(_record_path(stack, vm, root),
                           json.dumps({"hypervisor": hypervisor, "vfs": wanted}, indent=1, sort_keys=True) + "\n", 0o644)

    def attach(vm_ns: str) -> None:
        hv_ns = names.node_ns(stack, hypervisor)
        vm_links = net.links(vm_ns, with_addresses=False)
        hv_links = net.links(hv_ns, with_addresses=False)
        for v in wanted:
            vf = found[v["name"]]
            _take_vf(stack, hypervisor, vm_ns, hv_ns, v["name"], vf, vm_links, hv_links, root)
        _local_paths(hv_ns, [(found[v["name"]].pf, v["address"]) for v in wanted], net.links(hv_ns))

    state = node.converge(stack, vm, nics=nics + vf_nics, keys=keys, compute_cidr=compute_cidr,
                          hw_tree_source=hw_tree_source, root=root, attach=attach)
    out = read_vm(stack, vm, root)
    if out is None:
        raise LabError(f"VM {state['id']}", "vanished while it was being created")
    return out


def _take_vf(stack: str, hypervisor: str, vm_ns: str, hv_ns: str, name: str, vf: sriov.Vf,
             vm_links: dict, hv_links: dict, root: Path | None) -> None:
    what = f"VM {vm_ns} VF {name} ({vf.pf} VF {vf.slot} of {hv_ns})"
    mac = sriov.admin_mac(vf)
    batch = net.Batch(vm_ns)
    if name in vm_links:
        if net.kind(vm_links[name]) != "macvlan":
            raise LabError(what, f"a link named {name} exists in the VM and is not a VF")
    elif vf.netdev in vm_links:  # moved by a create that stopped before the rename
        batch.add(what, "link", "set", "dev", vf.netdev, "down")
        batch.add(what, "link", "set", "dev", vf.netdev, "name", name)
    elif vf.netdev in hv_links:
        sriov.assign(stack, hypervisor, vf, root)  # first, so the agent no longer keeps it there
        net.ip("link", "set", "dev", vf.netdev, "netns", vm_ns, netns=hv_ns, obj=what)
        batch.add(what, "link", "set", "dev", vf.netdev, "name", name)
    else:
        raise LabError(what, f"its netdev {vf.netdev} is neither in the hypervisor nor in the VM "
                             "(held by another VM, or the hypervisor's agent has not made it yet)")
    if mac and (vm_links.get(name) or {}).get("address") != mac:
        batch.add(what, "link", "set", "dev", name, "address", mac)
    batch.add(what, "link", "set", "dev", name, "up")
    batch.run()


# Ahead of the rails' source rules (node/wiring.py RULE_PREF_BASE), so a reply to a VM of this
# hypervisor leaves through the PF's macvlan, not the rail's own table.
LOCAL_RULE_PREF = 900


def local_port(pf_netdev: str) -> str:
    """The hypervisor's macvlan of the PF that carries its rail address to its own VMs."""
    name = f"{pf_netdev}h"
    return name if len(name) <= 15 else f"h{hashlib.sha256(pf_netdev.encode()).hexdigest()[:8]}"


def _local_paths(hv_ns: str, vfs: list[tuple[str, str]], hv_links: dict) -> None:
    """Let each VF (its PF's netdev, its address) and its hypervisor reach each other (module
    docstring): the PFs' macvlans made once, then every address, route and rule in one batch."""
    what = f"{hv_ns} local paths of its VMs' VFs"
    rail_ip = {}
    for pf, _ in vfs:
        rail = next(iter(net.addresses(hv_links.get(pf) or {})), None)
        if rail is not None:  # a PF with no address of the hypervisor's has nothing to reach
            rail_ip[pf] = rail.split("/")[0]
    ports = {pf: local_port(pf) for pf in rail_ip}
    new = [pf for pf, port in ports.items() if port not in hv_links]
    if new:
        made = net.Batch(hv_ns)
        for pf in new:
            made.add(what, "link", "add", "link", pf, "name", ports[pf], "type", "macvlan", "mode", "bridge")
        made.run()
        # Answer ARP only for addresses routed through it (the VMs'), so the rail's other hosts
        # keep getting the PF's own MAC for the hypervisor's address; replies arrive here by design.
        net.sysctls(hv_ns, {f"net/ipv4/conf/{ports[pf]}/{key}": value for pf in new
                            for key, value in (("arp_filter", 1), ("rp_filter", 0))})
    batch = net.Batch(hv_ns)
    for pf, port in ports.items():
        info, mtu = hv_links.get(port) or {}, (hv_links.get(pf) or {}).get("mtu")
        if f"{rail_ip[pf]}/32" not in net.addresses(info):
            batch.add(what, "address", "replace", f"{rail_ip[pf]}/32", "dev", port)
        if mtu and info.get("mtu") != mtu:
            batch.add(what, "link", "set", "dev", port, "mtu", str(mtu))
        batch.add(what, "link", "set", "dev", port, "up")
    ruled = {r.get("dst") for r in net.rules(hv_ns) if r.get("priority") == LOCAL_RULE_PREF}
    for pf, address in vfs:
        if pf not in ports:
            continue
        vf_ip = address.split("/")[0]
        batch.add(what, "route", "replace", f"{vf_ip}/32", "dev", ports[pf], "src", rail_ip[pf])
        if vf_ip not in ruled:
            batch.add(what, "rule", "add", "pref", str(LOCAL_RULE_PREF), "to", f"{vf_ip}/32", "lookup", "main")
    batch.run()


def _drop_local_path(hv_ns: str, pf_netdev: str, vf_address: str) -> None:
    """The VF's own route and rule (the PF's macvlan stays for its other VFs)."""
    what = f"{hv_ns} local path to {vf_address} over {pf_netdev}"
    vf_ip = vf_address.split("/")[0]
    net.ip("route", "del", f"{vf_ip}/32", "dev", local_port(pf_netdev), netns=hv_ns, obj=what, check=False)
    net.ip("rule", "del", "pref", str(LOCAL_RULE_PREF), "to", f"{vf_ip}/32", netns=hv_ns, obj=what, check=False)


def _return_vf(stack: str, vm: str, hypervisor: str, v: dict, root: Path | None) -> bool:
    """Move a VF the VM holds back to the hypervisor under the hypervisor's name for it."""
    vm_ns, hv_ns = names.node_ns(stack, vm), names.node_ns(stack, hypervisor)
    if not net.netns_exists(vm_ns):
        return False
    try:
        vf = sriov.find_vf(stack, hypervisor, v["pf"], v["slot"], root)
    except LabError:
        vf = None
    hv_name = vf.netdev if vf else agent.vf_netdev(v.get("pf_netdev", v["pf"]), v["slot"])
    links = net.links(vm_ns, with_addresses=False)
    current = v["name"] if v["name"] in links else (hv_name if hv_name in links else None)
    if current is None or net.kind(links[current]) != "macvlan":
        return False
    what = f"VM {vm_ns} VF {v['name']} back to {hv_ns}"
    mac = links[current].get("address")
    batch = net.Batch(vm_ns)
    batch.add(what, "address", "flush", "dev", current)
    batch.add(what, "link", "set", "dev", current, "down")
    if current != hv_name:
        batch.add(what, "link", "set", "dev", current, "name", hv_name)
    if net.netns_exists(hv_ns):
        batch.add(what, "link", "set", "dev", hv_name, "netns", hv_ns)
    batch.run()
    if net.netns_exists(hv_ns):
        net.ip("link", "set", "dev", hv_name, "up", netns=hv_ns, obj=what)
        _drop_local_path(hv_ns, v.get("pf_netdev", v["pf"]), v["address"])
        if vf is not None:
            sriov.release(stack, hypervisor, vf, mac, root)
    return True


def read_vm(stack: str, vm: str, root: Path | None = None) -> dict | None:
    """The VM as it is now, or None when its netns is gone: read_node's result plus

    {"hypervisor": name, "vfs": {name: {"pf", "slot", "rail", "bdf", "addresses", "mac",
     "present"}}} (present: the VF's netdev is in the VM)."""
    state = node.read_node(stack, vm, root)
    record = read_record(stack, vm, root)
    if state is None or record is None:
        return None
    links = net.links(names.node_ns(stack, vm))
    vfs = {}
    for v in record.get("vfs", []):
        info = links.get(v["name"])
        present = info is not None and net.kind(info) == "macvlan"
        try:
            bdf = sriov.find_vf(stack, record["hypervisor"], v["pf"], v["slot"], root).bdf
        except LabError:
            bdf = None
        vfs[v["name"]] = {"pf": v["pf"], "slot": v["slot"], "rail": v["rail"], "bdf": bdf,
                          "addresses": net.addresses(info) if info is not None and present else [],
                          "mac": info.get("address") if info is not None and present else None, "present": present}
    return {**state, "hypervisor": record["hypervisor"], "vfs": vfs}


def vm_exists(stack: str, vm: str, root: Path | None = None) -> bool:
    return node.node_exists(stack, vm) and is_vm(stack, vm, root)


def delete_vm(stack: str, vm: str, root: Path | None = None) -> dict:
    """Give the VM's VFs back to its hypervisor, then remove the VM like a node."""
    require_root()
    ns = names.node_ns(stack, vm)
    record = read_record(stack, vm, root)
    returned = []
    if record is not None:
        for v in record.get("vfs", []):
            if _return_vf(stack, vm, record["hypervisor"], v, root):
                returned.append(v["name"])
    result = node.delete_node(stack, vm, root)
    return {"id": ns, "deleted": result["deleted"], "returned_vfs": returned}


def vm_names(stack: str, root: Path | None = None) -> list[str]:
    """The VMs of the stack that have a runtime dir (running or not)."""
    nodes_dir = node.node_dir(stack, "x", root).parent
    if not nodes_dir.is_dir():
        return []
    return sorted(p.name for p in nodes_dir.iterdir() if (p / RECORD).is_file())
