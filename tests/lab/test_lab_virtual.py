"""The virtual layout on the real engine (Vela's pattern): hypervisor nodes, host tuning making
the VFs, then VMs given those VFs; VMs reachable over SSH and to each other over their VFs."""

from __future__ import annotations

import pytest

from railyard import paths
from railyard.drivers.lab import gc

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
        "storage": {"cidr": "198.18.176.0/20"},
        "management": {"cidr": "198.18.160.0/20"},
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


def test_second_up_changes_nothing(project):
    project.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes")


def test_destroy_leaves_nothing(project):
    project.pulumi("destroy", "--yes", "--skip-preview")
    left = gc.inventory(STACK)
    assert {k: v for k, v in left.items() if v and k != "stack"} == {}, left
