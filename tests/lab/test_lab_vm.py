"""VMs of the virtual layout on real lab nodes, laid out by the plan of the lab-virtual stack: two
vela-a100 hypervisors whose "tuning" made VFs, a VM on each holding VFs of both rails, reachable
over ssh on its management address and over its VFs from the other hypervisor's VM."""

from __future__ import annotations

import ipaddress
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from railyard import paths
from railyard.drivers.lab import fabric, gc, hwtree, names, net, node, proc, sriov, vm
from railyard.drivers.lab.errors import LabError
from railyard.model.catalog import load_catalog
from railyard.model.plan import make_plan
from railyard.stack import parse_config

from .conftest import free_mgmt_cidr, keypair

SKU = "vela-a100"
MGMT_NIC, STORAGE_NIC = "eno1", "stor0"
VM_MGMT_NIC, VM_STORAGE_NIC = "enp1s0", "enp2s0"  # as virtio NICs show in a guest


class Virtual:
    """The lab-virtual stack's plan, with a management network of the test's own."""

    def __init__(self, stack: str, base: Path):
        self.stack = stack
        cfg = yaml.safe_load((paths.PROJECT_ROOT / "stacks" / "Pulumi.lab-virtual.yaml").read_text())["config"]
        self.mgmt_cidr = free_mgmt_cidr()
        cfg["railyard:fabric"]["management"]["cidr"] = self.mgmt_cidr
        self.spec = parse_config(cfg, stack)
        self.plan = make_plan(self.spec)
        self.networks = self.plan.networks.to_json()
        self.key, self.pubkey = keypair(base)
        self.base = base
        self.trees: dict[str, Path] = {}
        self.netdevs: dict[str, str] = {}

    def prefix(self, network: str) -> int:
        return ipaddress.ip_network(self.networks[network]["cidr"]).prefixlen

    @property
    def gateways(self) -> list[str]:
        return self.networks["compute"]["gateways"]

    def create_fabric(self) -> None:
        mgmt = ipaddress.ip_network(self.mgmt_cidr)
        fabric.create_fabric(self.stack, rails=len(self.gateways), mgmt_cidr=self.mgmt_cidr,
                             host_address=str(mgmt.network_address + 1))
        fabric.create_spine(self.stack, gateways=[
            f"{gw}/{ipaddress.ip_network(r).prefixlen}" for gw, r in zip(self.gateways, self.networks["compute"]["rails"])])

    def node_args(self, n) -> dict:
        return {
            "mgmt": {"name": MGMT_NIC, "address": f"{n.management_ip}/{self.prefix('management')}"},
            "rails": [{"name": self.netdevs[nic.name], "rail": nic.rail, "address": f"{nic.ip}/{nic.prefixlen}",
                       "gateway": self.gateways[nic.rail]} for nic in n.nics],
            "storage": {"name": STORAGE_NIC, "address": f"{n.storage_ip}/{self.prefix('storage')}"},
            "compute_cidr": self.networks["compute"]["cidr"],
            "authorized_keys": self.pubkey,
            "hw_tree_source": str(self.trees[n.name]),
        }

    def create_node(self, n) -> dict:
        tree = self.base / "hw" / n.name
        manifest = hwtree.build_hwtree(load_catalog().nodes[n.sku], tree, replace=True)
        self.trees[n.name] = tree
        self.netdevs.update(manifest["netdevs"])
        return node.create_node(self.stack, n.name, **self.node_args(n))

    def tune_sriov(self, n) -> None:
        """What the sriov role does on a hypervisor: 0 first, then the spec's VFs per PF."""
        count = self.spec.tuning.sriov.vfs_per_pf
        script = "; ".join(f"d=/run/railyard/hw/sys/class/net/{self.netdevs[nic.name]}/device; "
                           f"echo 0 > $d/sriov_numvfs; echo {count} > $d/sriov_numvfs" for nic in n.nics)
        node.run_in_node(self.stack, n.name, ["sh", "-c", script], check=True)
        deadline = time.monotonic() + 5
        while True:
            state = sriov.read_sriov(self.stack, n.name)
            if all(len(p["vfs"]) == count and all(v["present"] or v["driver"] == "vfio-pci" for v in p["vfs"])
                   for p in state["pfs"].values()):
                return
            assert time.monotonic() < deadline, state
            time.sleep(0.01)

    def vm_args(self, n, v) -> dict:
        return {
            "hypervisor": n.name,
            "mgmt": {"name": VM_MGMT_NIC, "address": f"{v.management_ip}/{self.prefix('management')}"},
            "storage": {"name": VM_STORAGE_NIC, "address": f"{v.storage_ip}/{self.prefix('storage')}"},
            "vfs": [{"name": f.name, "pf": f.pf, "slot": f.slot, "rail": f.rail, "address": f"{f.ip}/{f.prefixlen}",
                     "gateway": self.gateways[f.rail]} for f in v.vfs],
            "compute_cidr": self.networks["compute"]["cidr"],
            "authorized_keys": self.pubkey,
        }

    def ssh(self, state: dict, command: str, tmp: Path) -> subprocess.CompletedProcess[str]:
        known = tmp / f"known-{state['node']}"
        known.write_text(f"{state['mgmt_address']} {state['host_key']}\n")
        return subprocess.run(
            ["ssh", "-F", "/dev/null", "-i", str(self.key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}", "-o", "ConnectTimeout=5",
             "-o", "LogLevel=ERROR", f"root@{state['mgmt_address']}", command],
            text=True, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def virtual(tmp_path_factory, record_property_module):
    import os

    v = Virtual(f"t-lab-{os.getpid()}-virt", tmp_path_factory.mktemp("virt"))
    timings = record_property_module
    try:
        v.create_fabric()
        for n in v.plan.nodes:
            v.create_node(n)
            v.tune_sriov(n)
        v.vms = {}
        for n in v.plan.nodes:
            for plan_vm in n.vms:
                started = time.monotonic()
                v.vms[plan_vm.name] = vm.create_vm(v.stack, plan_vm.name, **v.vm_args(n, plan_vm))
                timings.setdefault("create_vm_s", []).append(round(time.monotonic() - started, 3))
        yield v
    finally:
        gc.destroy_all(v.stack)


@pytest.fixture(scope="module")
def record_property_module():
    timings: dict = {}
    yield timings
    if timings:
        print(f"\nVM timings: {timings}")


def in_node(v, name: str, *argv: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return node.run_in_node(v.stack, name, list(argv), check=check, timeout=30)


def test_vms_follow_the_plan(virtual):
    assert sorted(virtual.vms) == ["vela-0-vm0", "vela-1-vm0"]
    state = virtual.vms["vela-0-vm0"]
    plan_vm = virtual.plan.nodes[0].vms[0]
    assert state["hypervisor"] == "vela-0" and state["hostname"] == "vela-0-vm0"
    assert state["mgmt_address"] == plan_vm.management_ip and state["running"] and state["sshd"]
    assert state["nics"] == {VM_MGMT_NIC: [f"{plan_vm.management_ip}/{virtual.prefix('management')}"],
                             VM_STORAGE_NIC: [f"{plan_vm.storage_ip}/{virtual.prefix('storage')}"]}
    for f in plan_vm.vfs:
        got = state["vfs"][f.name]
        assert got["present"] and got["addresses"] == [f"{f.ip}/{f.prefixlen}"] and got["slot"] == f.slot, got


def test_a_vm_is_reachable_over_ssh_on_its_management_address(virtual, tmp_path):
    for name, state in virtual.vms.items():
        result = virtual.ssh(state, "hostname; ls /sys/class/net", tmp_path)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.split()
        assert lines[0] == name
        assert {"vf0", "vf1", VM_MGMT_NIC} <= set(lines[1:]), lines


def test_vms_on_two_hypervisors_reach_each_other_over_their_vfs(virtual):
    a, b = virtual.plan.nodes[0].vms[0], virtual.plan.nodes[1].vms[0]
    for fa, fb in zip(a.vfs, b.vfs):
        # Same rail: one hop across the rail's leaf (TTL 1 arrives).
        r = in_node(virtual, a.name, "ping", "-n", "-c", "1", "-W", "2", "-t", "1", "-I", fa.ip, fb.ip)
        assert r.returncode == 0, f"{a.name} {fa.name} -> {b.name} {fb.name}: {r.stdout}{r.stderr}"
    # Another rail: through the spine, two hops.
    src, dst = a.vfs[0], b.vfs[1]
    out = in_node(virtual, a.name, "traceroute", "-n", "-q", "1", "-N", "1", "-w", "2", "-m", "4", "-s", src.ip,
                  dst.ip, check=True).stdout
    hops = [line.split()[1] for line in out.splitlines()[1:]]
    assert hops == [virtual.gateways[src.rail], dst.ip], out


def test_a_vf_given_to_a_vm_leaves_the_hypervisor_and_shows_bound_to_vfio(virtual):
    n = virtual.plan.nodes[0]
    plan_vm = n.vms[0]
    state = sriov.read_sriov(virtual.stack, n.name)
    for f in plan_vm.vfs:
        pf = state["pfs"][virtual.netdevs[f.pf]]
        given = pf["vfs"][f.slot]
        assert given["driver"] == "vfio-pci" and not given["present"], given
        others = [x for x in pf["vfs"] if x["slot"] != f.slot]
        assert all(x["driver"] == "mlx5_core" and x["present"] for x in others), others
    tree = virtual.trees[n.name]
    assert not list(tree.glob(f"sys/class/net/{virtual.netdevs[plan_vm.vfs[0].pf]}v{plan_vm.vfs[0].slot}"))


def test_create_vm_again_changes_nothing(virtual):
    n = virtual.plan.nodes[1]
    plan_vm = n.vms[0]
    # The same VM, not a new one: its namespace, its init and its VFs' addresses are those it had.
    # (How fast this is belongs to the benchmarks: a timed assert failed under a loaded machine.)
    ns_before = net.netns_inode(names.node_ns(virtual.stack, plan_vm.name))
    again = vm.create_vm(virtual.stack, plan_vm.name, **virtual.vm_args(n, plan_vm))
    assert again == vm.read_vm(virtual.stack, plan_vm.name)
    assert net.netns_inode(names.node_ns(virtual.stack, plan_vm.name)) == ns_before
    assert again["init_pid"] == virtual.vms[plan_vm.name]["init_pid"]
    assert {k: v["mac"] for k, v in again["vfs"].items()} == {k: v["mac"] for k, v in virtual.vms[plan_vm.name]["vfs"].items()}


def test_a_vm_cannot_take_a_vf_the_tuning_has_not_made(virtual):
    n = virtual.plan.nodes[0]
    args = virtual.vm_args(n, n.vms[0])
    args["vfs"] = [{**args["vfs"][0], "slot": 9}]
    with pytest.raises(LabError, match="sriov_numvfs"):
        vm.create_vm(virtual.stack, "stray-vm", **args)
    assert not vm.vm_exists(virtual.stack, "stray-vm") and not net.netns_exists(names.node_ns(virtual.stack, "stray-vm"))


def test_disabling_sriov_under_a_vm_is_refused(virtual):
    n = virtual.plan.nodes[0]
    pf = virtual.netdevs[n.nics[0].name]
    path = f"/run/railyard/hw/sys/class/net/{pf}/device/sriov_numvfs"
    in_node(virtual, n.name, "sh", "-c", f"echo 0 > {path}", check=True)
    deadline = time.monotonic() + 2
    while not [e for e in sriov.agent_log(virtual.stack, n.name) if e.get("error") == "EPERM"]:
        assert time.monotonic() < deadline, sriov.agent_log(virtual.stack, n.name)
        time.sleep(0.01)
    assert in_node(virtual, n.name, "cat", path, check=True).stdout.strip() == str(virtual.spec.tuning.sriov.vfs_per_pf)
    assert vm.read_vm(virtual.stack, n.vms[0].name)["vfs"]["vf0"]["present"]


def test_delete_vm_gives_its_vfs_back_and_a_new_vm_takes_them(virtual, tmp_path):
    n = virtual.plan.nodes[1]
    plan_vm = n.vms[0]
    state = virtual.vms[plan_vm.name]
    pids = [state["init_pid"], node.agent_pid(virtual.stack, plan_vm.name)]
    started = time.monotonic()
    result = vm.delete_vm(virtual.stack, plan_vm.name)
    took = time.monotonic() - started
    assert result == {"id": state["id"], "deleted": True, "returned_vfs": ["vf0", "vf1"]}
    assert not [p for p in pids if p and proc.alive(p)]
    back = sriov.read_sriov(virtual.stack, n.name)
    for f in plan_vm.vfs:
        vf = back["pfs"][virtual.netdevs[f.pf]]["vfs"][f.slot]
        assert vf["driver"] == "mlx5_core" and vf["present"], vf
    hv_links = net.links(names.node_ns(virtual.stack, n.name))
    assert all(not hv_links[f"{virtual.netdevs[f.pf]}v{f.slot}"].get("addr_info") for f in plan_vm.vfs)
    assert vm.delete_vm(virtual.stack, plan_vm.name)["deleted"] is False
    print(f"\ndelete_vm: {took:.3f}s")

    again = vm.create_vm(virtual.stack, plan_vm.name, **virtual.vm_args(n, plan_vm))
    virtual.vms[plan_vm.name] = again
    assert all(v["present"] for v in again["vfs"].values())
    assert virtual.ssh(again, "true", tmp_path).returncode == 0


def test_gc_gives_the_vfs_of_an_unknown_vm_back(virtual):
    n = virtual.plan.nodes[0]
    args = virtual.vm_args(n, n.vms[0])
    args["mgmt"] = {"name": VM_MGMT_NIC, "address": f"{ipaddress.ip_network(virtual.mgmt_cidr).network_address + 200}"
                                                    f"/{virtual.prefix('management')}"}
    args["storage"] = None
    args["vfs"] = [{**args["vfs"][0], "name": "vf0", "slot": 3, "address": "198.19.0.200/18"}]
    vm.create_vm(virtual.stack, "orphan-vm", **args)
    known = {names.fabric_ns(virtual.stack), names.spine_ns(virtual.stack)} | {
        names.node_ns(virtual.stack, x) for x in ["vela-0", "vela-1", *virtual.vms]}
    removed = gc.gc(virtual.stack, known)
    assert removed["netns"] == [names.node_ns(virtual.stack, "orphan-vm")]
    vf = sriov.read_sriov(virtual.stack, n.name)["pfs"][virtual.netdevs[n.nics[0].name]]["vfs"][3]
    assert vf["driver"] == "mlx5_core" and vf["present"], vf
    assert set(gc.inventory(virtual.stack)["netns"]) == known


def test_destroy_leaves_nothing_of_the_virtual_stack(virtual):
    stack = virtual.stack
    prefix = names.stack_prefix(stack)
    pids = [node.init_pid(stack, n) for n in ["vela-0", "vela-1", *virtual.vms]]
    pids += [node.agent_pid(stack, n) for n in ["vela-0", "vela-1", *virtual.vms]]
    assert all(pids)
    started = time.monotonic()
    gc.destroy_all(stack)
    print(f"\ndestroy_all (2 hypervisors, 2 VMs): {time.monotonic() - started:.3f}s")
    assert not [p for p in pids if proc.alive(p)]
    assert gc.inventory(stack) == {"stack": stack, "netns": [], "host_links": [], "processes": [], "mounts": [],
                                   "loops": [], "dirs": []}
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert prefix not in out and not net.netns_list(prefix)
    assert all(tree.is_dir() for tree in virtual.trees.values()), "the hardware trees are the caller's"
