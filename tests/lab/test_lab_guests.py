"""The Vela half on the real engine: DGX H100 hypervisors whose VMs see the host's topology
(stacks/Pulumi.lab-virtual-dgx.yaml, on networks of its own). Each VM presents its planned guest
tree; guest tuning runs the host's roles inside it. The guest's files are checked against what the
hypervisor itself discovered and holds (its /etc/railyard/affinity.json, its VFs as the VM holds
them), not against the plan: GPU i and the VF of its host-side pair under one virtual switch in
the guest's NCCL topology file, NCCL_IB_HCA in GPU order, the vCPUs of a GPU's cell pinned on
that GPU's host NUMA node, and the hypervisor's isolated CPUs exactly those pinned."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from railyard import paths
from railyard.drivers.lab import vm as lab_vm
from railyard.model.sysfs_discovery import parse_cpulist
from railyard.model.spec import read_stack_file

from .railyard_project import stack_up

ROOT = paths.PROJECT_ROOT
STACK = "tguest"
HW = "/run/railyard/hw"


def stack_config(mgmt: str, storage: str) -> dict:
    config, _ = read_stack_file(ROOT / "stacks/Pulumi.lab-virtual-dgx.yaml")
    config = dict(config)
    config["railyard:fabric"] = {**config["railyard:fabric"], "management": {"cidr": mgmt},
                                 "storage": {"cidr": storage}}
    # Ephemeral: a long-lived stack protects its resources, and the test destroys this one.
    config["railyard:ephemeral"] = {"ttl": "2h"}
    return config


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    with stack_up(tmp_path_factory.mktemp("guests"), STACK, stack_config) as p:
        yield p


@pytest.fixture(scope="module")
def vms(project) -> dict[str, dict]:
    """Per VM: its hypervisor, the hypervisor's affinity map, the VFs the VM holds (the lab's own
    record), the guest's files and its libvirt domain from the guest tuning run's artifacts."""
    last = project.outputs()["guestTuning"]["lastRun"]
    run = next(r for r in (paths.runs_dir(STACK, project.dir), paths.runs_dir(STACK)) if (r / last).is_dir()) / last
    out = {}
    for m in project.machines():
        if "-vm" not in m["name"]:
            continue
        name = m["name"]
        record = lab_vm.read_vm(STACK, name)
        hv = record["hypervisor"]
        # The guest's VFs: each netdev's RDMA device in the guest's own tree.
        script = (f"for n in {HW}/sys/class/net/vf*; do echo $(basename $n) "
                  f"$(ls $(readlink -f $n/device)/infiniband); done")
        rdma = dict(line.split() for line in project.ssh(name, script).stdout.splitlines())
        out[name] = {
            "hypervisor": hv,
            "affinity": json.loads(project.ssh(hv, "cat /etc/railyard/affinity.json").stdout),
            "held": record["vfs"],
            "rdma": rdma,
            "topo": ET.fromstring(project.ssh(name, "cat /etc/railyard/nccl-topo.xml").stdout),
            "conf": dict(line.split("=", 1) for line in project.ssh(name, "cat /etc/nccl.conf").stdout.splitlines()
                         if "=" in line and not line.startswith("#")),
            "domain": ET.parse(run / "domains" / f"{name}.xml").getroot(),
        }
    assert sorted(out) == ["dgx-0-vm0", "dgx-1-vm0"]
    return out


def _host_pair_vf(v: dict, gpu: str) -> str:
    """The guest's RDMA name of the VF the VM holds on the NIC the hypervisor pairs `gpu` with."""
    (nic,) = [g["nic"] for g in v["affinity"]["gpus"] if g["name"] == gpu]
    (held,) = [name for name, f in v["held"].items() if f["pf"] == nic]
    return v["rdma"][held]


def _vm_gpus(v: dict, vm: str) -> list[str]:
    (entry,) = [e for e in v["affinity"]["vms"] if e["name"] == vm]
    return entry["gpus"]


def test_each_gpu_and_the_vf_of_its_host_side_pair_share_one_virtual_switch(vms):
    for name, v in vms.items():
        switches = {}  # the guest's GPUs and NICs below each bridge
        for sw in v["topo"].iter("pci"):
            below = [p for p in sw.iter("pci") if p is not sw]
            gpus = sorted(p.get("busid") for p in below if p.find("gpu") is not None)
            nets = sorted(n.get("name") for p in below for n in p.findall("nic/net"))
            if gpus and nets:
                assert sw.get("class") == "0x060400", sw.attrib  # a PCI bridge: a port of a (virtual) switch
                switches[sw.get("busid")] = (gpus, nets)
        guest_gpus = sorted(p.get("busid") for p in v["topo"].iter("pci") if p.find("gpu") is not None)
        host_gpus = _vm_gpus(v, name)
        assert len(guest_gpus) == len(host_gpus) == 8
        for i, gpu in enumerate(host_gpus):
            vf = _host_pair_vf(v, gpu)
            # The smallest switch holding guest GPU i holds the VF of its host-side pair, and no other device.
            (gpus, nets) = min((s for s in switches.values() if guest_gpus[i] in s[0]), key=lambda s: len(s[0]))
            assert (gpus, nets) == ([guest_gpus[i]], [vf]), (name, i, gpu, switches)


def test_nccl_ib_hca_lists_the_vfs_in_gpu_order(vms):
    for name, v in vms.items():
        want = [_host_pair_vf(v, g) for g in _vm_gpus(v, name)]
        assert v["conf"]["NCCL_IB_HCA"] == "=" + ",".join(f"{r}:1" for r in want), name
        assert v["conf"]["NCCL_TOPO_FILE"] == "/etc/railyard/nccl-topo.xml"


def test_the_vcpus_of_each_gpus_cell_are_pinned_on_that_gpus_host_numa_node(vms, project):
    for name, v in vms.items():
        hv = v["hypervisor"]
        node_cpus = {int(n): set(parse_cpulist(project.ssh(hv, f"cat {HW}/sys/devices/system/node/node{n}/cpulist")
                                             .stdout.strip())) for n in (0, 1)}
        pins = {int(p.get("vcpu")): int(p.get("cpuset")) for p in v["domain"].iter("vcpupin")}
        cells = {int(c.get("id")): parse_cpulist(c.get("cpus")) for c in v["domain"].iter("cell")}
        host_numa = {g["name"]: g["numa"] for g in v["affinity"]["gpus"]}
        # The guest's own tree: which cell each of its GPUs is on (GPU i is the VM's i-th).
        guest_numa = project.ssh(name, f"for d in {HW}/sys/bus/pci/devices/*; do "
                                       f"[ -L $d/driver ] && [ $(basename $(readlink $d/driver)) = nvidia ] "
                                       f"&& echo $(basename $d) $(cat $d/numa_node); done; true").stdout.split("\n")
        guest_cells = [int(line.split()[1]) for line in sorted(x for x in guest_numa if x.strip())]
        for i, gpu in enumerate(_vm_gpus(v, name)):
            pinned = {pins[c] for c in cells[guest_cells[i]]}
            assert pinned and pinned <= node_cpus[host_numa[gpu]], (name, gpu, pinned)


def test_the_hypervisors_isolation_drop_in_lists_exactly_the_cpus_pinned_to_its_vms(vms, project):
    for name, v in vms.items():
        pinned = sorted(int(p.get("cpuset")) for p in v["domain"].iter("vcpupin"))
        dropin = project.ssh(v["hypervisor"], "cat /etc/default/grub.d/railyard-cpu-isolation.cfg").stdout
        (isolcpus,) = [w for w in dropin.replace('"', " ").split() if w.startswith("isolcpus=")]
        listed = isolcpus.removeprefix("isolcpus=managed_irq,domain,")
        assert parse_cpulist(listed) == pinned, name


def test_guest_tuning_reserved_the_jobs_hugepages_on_the_guests_cells(vms, project):
    for name in vms:
        counts = [int(project.ssh(name, f"cat {HW}/sys/devices/system/node/node{n}/hugepages/"
                                        "hugepages-1048576kB/nr_hugepages").stdout) for n in (0, 1)]
        assert counts == [600, 600], name


def test_a_second_up_changes_nothing(project):
    project.pulumi("preview", "--expect-no-changes")
