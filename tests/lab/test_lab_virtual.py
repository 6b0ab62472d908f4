"""The virtual layout on the real engine (Vela's pattern): hypervisor nodes, host tuning making
the VFs, then VMs given those VFs; VMs reachable over SSH and to each other over their VFs, across
RoCE switches routing with FRR (every session Established, traffic across rails with an uplink
down); with railyard:kubernetes, the VMs registered as the cluster's nodes."""

from __future__ import annotations

import base64
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from railyard import paths
from railyard.drivers.lab import gc
from railyard.drivers.lab.control_plane.api import Client
from railyard.engine import control_plane

from .railyard_project import STORAGE, free_networks
from .stack_project import StackProject

STACK = "tvirt"
CONFIG = {
    "railyard:region": "lab",
    "railyard:layout": "virtual",
    "railyard:driver": "lab",
    "railyard:nodePools": [{"name": "vela", "sku": "vela-a100", "count": 2, "vmsPerHost": 1,
                            "vm": {"vcpus": 80, "memoryGiB": 1200, "gpus": 8, "vfs": 2}}],
    "railyard:fabric": {
        "compute": {"kind": "roce", "speed": "100gbe", "switch": "sn5600", "cidr": "198.19.0.0/16"},
        "storage": {"cidr": STORAGE},
        "management": {"cidr": None},  # picked by the fixture: other test workers pick theirs at once
    },
    "railyard:storage": {"object": {"bucket": "datasets"}},
    # Ephemeral: a long-lived stack protects its resources, and the test destroys this one.
    "railyard:ephemeral": {"ttl": "2h"},
    "railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": 80, "perNuma": True},
                        "sriov": {"vfsPerPf": 4}, "iommu": "passthrough"},
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if not (paths.bin_dir(paths.PROJECT_ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    gc.destroy_all(STACK)
    (CONFIG["railyard:fabric"]["management"]["cidr"],) = free_networks(1, prefix=20)
    p = StackProject(tmp_path_factory.mktemp("virtual"), STACK, CONFIG)
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    yield p
    p.pulumi("destroy", "--yes", "--skip-preview", check=False)
    gc.destroy_all(STACK)


def test_up_brings_hypervisors_tuning_and_vms(project):
    project.pulumi("up", "--yes", "--skip-preview")
    names = [m["name"] for m in project.machines()]
    assert names == ["vela-0", "vela-0-vm0", "vela-1", "vela-1-vm0"]


def test_hypervisor_tuning_made_the_vfs_and_the_vm_holds_its_share(project):
    numvfs = project.ssh("vela-0", "cat /run/railyard/hw/sys/class/net/*/device/sriov_numvfs").stdout.split()
    assert numvfs and set(numvfs) == {"4"}, numvfs
    vm_links = project.ssh("vela-0-vm0", "ip -br -4 addr show").stdout
    assert "vf0" in vm_links and "vf1" in vm_links, vm_links
    assert project.ssh("vela-0-vm0", "hostname").stdout.strip() == "vela-0-vm0"


def test_vms_reach_each_other_over_their_vfs(project):
    peer = project.ssh("vela-1-vm0", "ip -o -4 addr show vf0").stdout.split()[3].split("/")[0]
    got = project.ssh("vela-0-vm0", f"ping -c1 -W2 {peer}", check=False)
    assert got.returncode == 0, got.stdout + got.stderr
    # The VFs carry the rails' planned RoCE MTU (9000): a frame of that size, which may not
    # fragment, crosses from one hypervisor's PF to the other's whole.
    link = project.ssh("vela-0-vm0", "ip -o link show vf0").stdout
    assert link.split(" mtu ")[1].split()[0] == "9000", link
    big = project.ssh("vela-0-vm0", f"ping -c1 -W2 -M do -s 8972 {peer}", check=False)
    assert big.returncode == 0, big.stdout + big.stderr


def test_the_switches_route_with_frr_and_vms_cross_rails_with_an_uplink_down(project):
    from railyard.drivers.lab import names, net, routers
    from railyard.stack import parse_config
    from railyard.model.plan import make_plan

    plan = make_plan(parse_config(CONFIG, stack=STACK))
    planned = {r.name: r for r in plan.routers()}
    states = routers.wait_established(STACK, list(planned))
    assert states == {n: {x.peer_address: "Established" for x in r.sessions} for n, r in planned.items()}
    src = project.ssh("vela-0-vm0", "ip -o -4 addr show vf0").stdout.split()[3].split("/")[0]
    dst = project.ssh("vela-1-vm0", "ip -o -4 addr show vf1").stdout.split()[3].split("/")[0]
    # Rail 0 to rail 1: up to vela-0's rail-0 leaf, across the spine, down rail 1's leaf.
    assert project.ssh("vela-0-vm0", f"ping -c1 -W2 -I {src} {dst}", check=False).returncode == 0
    leaf = planned[plan.nodes[0].nics[0].leaf]
    down = leaf.sessions[0].interface
    net.ip("link", "set", down, "down", netns=names.switch_ns(STACK, leaf.name), obj="test")
    try:
        # The route to rail 1's leaf loses exactly that uplink, and traffic still crosses.
        other = planned[plan.nodes[1].nics[1].leaf]
        want = {x.interface for x in leaf.sessions} - {down}
        deadline = time.monotonic() + 60  # until zebra has taken the downed uplink out of the route
        while True:
            [best] = [r for r in routers.status(STACK, leaf.name)["routes"][other.host_prefixes[0]] if r.get("selected")]
            hops = {h["interfaceName"] for h in best["nexthops"] if h.get("active")}
            if hops == want or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert hops == want
        got = project.ssh("vela-0-vm0", f"ping -c3 -W2 -i 0.3 -I {src} {dst}", check=False)
        assert got.returncode == 0, got.stdout + got.stderr
    finally:
        net.ip("link", "set", down, "up", netns=names.switch_ns(STACK, leaf.name), obj="test")
    routers.wait_established(STACK, [leaf.name])


def test_second_up_changes_nothing(project):
    project.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes")


def test_with_kubernetes_the_vms_are_the_nodes_and_their_hypervisors_are_not(project):
    control_plane.ensure()
    project.write({**CONFIG, "railyard:kubernetes": {}})
    project.pulumi("up", "--yes", "--skip-preview")
    kubeconfig = project.outputs(secrets=True)["kubeconfig"]
    nodes = _api_get(project, kubeconfig, "/api/v1/nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["vela-0-vm0", "vela-1-vm0"]
    vm = next(n for n in nodes if n["metadata"]["name"] == "vela-1-vm0")
    assert vm["metadata"]["labels"]["railyard.io/host"] == "vela-1"
    cap = vm["status"]["capacity"]
    # the VM's 8 GPUs and its 2 VFs, one on each of the host's two rails
    assert cap["nvidia.com/gpu"] == "8"
    assert sorted((k, v) for k, v in cap.items() if "/rail" in k) == [("nvidia.com/rail0", "1"), ("nvidia.com/rail1", "1")]
    assert sum(int(n["status"]["capacity"]["nvidia.com/gpu"]) for n in nodes) == 16  # no GPU counted twice


def _api_get(project, kubeconfig: str, path: str) -> dict:
    doc = yaml.safe_load(kubeconfig)
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    with tempfile.TemporaryDirectory() as d:
        for name, data in (("ca.crt", cluster["certificate-authority-data"]),
                           ("admin.crt", user["client-certificate-data"]), ("admin.key", user["client-key-data"])):
            (Path(d) / name).write_bytes(base64.b64decode(data))
        host, port = cluster["server"].removeprefix("https://").split(":")
        return Client(host, int(port), Path(d)).get(path)


def test_destroy_leaves_nothing(project):
    project.pulumi("destroy", "--yes", "--skip-preview")
    left = gc.inventory(STACK)
    assert {k: v for k, v in left.items() if v and k != "stack"} == {}, left
