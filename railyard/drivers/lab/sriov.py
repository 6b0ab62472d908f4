"""The host's view of a lab node's SR-IOV, and VF passthrough to VMs.

Inside a node the agent (agent.py) makes VFs when tuning writes ``sriov_numvfs`` in the node's
hardware tree. From the host, this module reads that tree (through the node's init,
``/proc/<init>/root/run/railyard/hw``), finds the VF of a PF slot, and marks a VF given to a VM
or returned from one, as binding it to vfio-pci and back to mlx5_core does on a real host: the
VF's ``driver`` link changes and its ``net/<netdev>`` directory (and ``class/net`` link) goes
while a VM holds it. vm.py moves the netdev itself.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from railyard.drivers.lab import agent, names, net, node
from railyard.drivers.lab.errors import LabError


def hw_root(stack: str, node_name: str, root: Path | None = None) -> Path | None:
    """The node's hardware tree as the host sees it, or None when the node is not running."""
    pid = node.init_pid(stack, node_name, root)
    return Path(f"/proc/{pid}/root{node.HW_TREE}") if pid else None


@dataclass(frozen=True)
class Vf:
    """VF `slot` of the PF whose netdev is `pf` on a node: its PCI address, tree dirs, netdev."""

    pf: str
    slot: int
    pf_bdf: str
    bdf: str
    pf_dir: Path
    dir: Path
    netdev: str  # its name while the node holds it (agent.vf_netdev)

    def to_json(self) -> dict:
        return {"pf": self.pf, "slot": self.slot, "pf_bdf": self.pf_bdf, "bdf": self.bdf, "netdev": self.netdev}


def _pfs(tree: Path) -> dict[str, agent.Pf]:
    return {pf.netdev: pf for pf in agent.find_pfs(str(tree)) if pf.netdev}


def _pf_named(tree: Path, name: str) -> agent.Pf | None:
    """The PF whose netdev, or whose RDMA device (``mlx5_0``, as the plan names NICs), is `name`."""
    for p in agent.find_pfs(str(tree)):
        if p.netdev == name or os.path.isdir(os.path.join(p.dir, "infiniband", name)):
            return p
    return None


def find_vf(stack: str, node_name: str, pf: str, slot: int, root: Path | None = None) -> Vf:
    """VF `slot` of the PF named `pf` (its netdev or RDMA device name) on the node; LabError when
    the node's tuning has not made it. Vf.pf is the PF's netdev."""
    what = f"VF {slot} of {pf} on node {names.node_ns(stack, node_name)}"
    tree = hw_root(stack, node_name, root)
    if tree is None:
        raise LabError(what, "the node is not running")
    p = _pf_named(tree, pf)
    if p is None or p.netdev is None:
        raise LabError(what, f"no SR-IOV PF with netdev or RDMA device {pf} in the node's hardware tree")
    count = len([n for n in os.listdir(p.dir) if n.startswith("virtfn")])
    if not 0 <= slot < count or not os.path.islink(os.path.join(p.dir, f"virtfn{slot}")):
        raise LabError(what, f"{pf} has {count} VFs (sriov_numvfs {p.attr('sriov_numvfs')}); the node's "
                             "SR-IOV tuning must create the VF before a VM can take it")
    return Vf(p.netdev, slot, p.bdf, p.vf_bdf(slot), Path(p.dir), Path(p.vf_dir(slot)), agent.vf_netdev(p.netdev, slot))


def _driver_link(tree: Path, vf: Vf, driver: str) -> None:
    drivers = tree / agent.DRIVERS / driver
    drivers.mkdir(parents=True, exist_ok=True)
    agent.symlink(os.path.relpath(drivers, vf.dir), str(vf.dir / "driver"))


def assign(stack: str, node_name: str, vf: Vf, root: Path | None = None) -> None:
    """Mark the VF as given to a VM (bound to vfio-pci): the agent leaves its netdev alone, and
    the tree no longer shows a netdev for it. Done before the netdev leaves the node."""
    tree = hw_root(stack, node_name, root)
    if tree is None:
        return
    _driver_link(tree, vf, agent.VFIO_DRIVER)
    agent.remove(str(vf.dir / "net"))
    class_net = tree / agent.CLASS_NET / vf.netdev
    if class_net.is_symlink():
        class_net.unlink()


def release(stack: str, node_name: str, vf: Vf, mac: str | None, root: Path | None = None) -> None:
    """Mark the VF as the node's again (mlx5_core), once its netdev is back in the node."""
    tree = hw_root(stack, node_name, root)
    if tree is None or not vf.dir.is_dir():
        return
    netdir = vf.dir / "net" / vf.netdev
    netdir.mkdir(parents=True, exist_ok=True)
    if mac:
        (netdir / "address").write_text(mac + "\n")
    class_net = tree / agent.CLASS_NET
    if class_net.is_dir():
        agent.symlink(os.path.relpath(netdir, class_net), str(class_net / vf.netdev))
    _driver_link(tree, vf, agent.PF_DRIVER)


def admin_mac(vf: Vf) -> str | None:
    """The MAC set for the VF through sriov/<slot>/mac (None when unset)."""
    try:
        text = (vf.pf_dir / "sriov" / str(vf.slot) / "config").read_text()
    except OSError:
        return None
    mac = agent.parse_config(text)["mac"]
    return None if mac == agent.DEFAULT_VF["mac"] else mac


def read_sriov(stack: str, node_name: str, root: Path | None = None) -> dict | None:
    """The node's PFs and VFs as its tree and netns show them, and the agent's refusals:

    {"agent": pid|None, "pfs": {netdev: {"bdf", "total_vfs", "num_vfs", "vfs": [{"slot", "bdf",
     "netdev", "driver", "present"}]}}, "errors": [agent log entries with an "error"]}
    None when the node is not running."""
    tree = hw_root(stack, node_name, root)
    if tree is None:
        return None
    links = net.links(names.node_ns(stack, node_name), with_addresses=False)
    pfs = {}
    for netdev, p in sorted(_pfs(tree).items()):
        vfs = []
        i = 0
        while os.path.islink(os.path.join(p.dir, f"virtfn{i}")):
            drv = os.path.join(p.vf_dir(i), "driver")
            name = agent.vf_netdev(netdev, i)
            vfs.append({"slot": i, "bdf": p.vf_bdf(i), "netdev": name,
                        "driver": os.path.basename(os.readlink(drv)) if os.path.islink(drv) else None,
                        "present": name in links})
            i += 1
        pfs[netdev] = {"bdf": p.bdf, "total_vfs": p.total, "num_vfs": p.int_attr("sriov_numvfs", 0), "vfs": vfs}
    return {"agent": node.agent_pid(stack, node_name, root), "pfs": pfs,
            "errors": [e for e in agent_log(stack, node_name, root) if "error" in e]}


def agent_log(stack: str, node_name: str, root: Path | None = None) -> list[dict]:
    """Every event the node's agent logged since the node started (oldest first)."""
    pid = node.init_pid(stack, node_name, root)
    if pid is None:
        return []
    try:
        text = Path(f"/proc/{pid}/root/{node.AGENT_DIR}/log.jsonl").read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
