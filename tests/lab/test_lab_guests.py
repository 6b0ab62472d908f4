"""The Vela half on the real engine: DGX H100 hypervisors whose VMs see the host's topology
(stacks/Pulumi.lab-virtual-dgx.yaml, on networks of its own). Each VM presents its planned guest
tree; guest tuning runs the host's roles inside it. The guest's files are checked against what the
hypervisor itself discovered and holds (its /etc/railyard/affinity.json, its VFs as the VM holds
them), not against the plan: GPU i and the VF of its host-side pair under one switch, at the
host's distance, in the guest's NCCL topology file, NCCL_IB_HCA in GPU order, the vCPUs of a GPU's cell pinned on
that GPU's host NUMA node, and the hypervisor's isolated CPUs exactly those pinned."""

from __future__ import annotations

import ipaddress
import json
import xml.etree.ElementTree as ET

import pytest

from railyard import paths
from railyard.drivers.lab import vm as lab_vm
from railyard.drivers.lab.node import power
from railyard.model.sysfs_discovery import parse_cpulist
from railyard.model.spec import read_stack_file
from railyard.ssh_client import JUMP_VAR

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
    record: PF, slot and the VF's address in the hypervisor's tree), the guest's devices and files,
    and its libvirt domain from the guest tuning run's artifacts."""
    last = project.outputs()["guestTuning"]["lastRun"]
    run = next(r for r in (paths.runs_dir(STACK, project.dir), paths.runs_dir(STACK)) if (r / last).is_dir()) / last
    out = {}
    for m in project.machines():
        if "-vm" not in m["name"]:
            continue
        name = m["name"]
        record = lab_vm.read_vm(STACK, name)
        hv = record["hypervisor"]
        # The guest's VFs, from its own tree: netdev, RDMA device, guest PCI address.
        script = (f"for n in {HW}/sys/class/net/vf*; do d=$(readlink -f $n/device); "
                  f"echo $(basename $n) $(ls $d/infiniband) $(basename $d); done")
        vfs = [line.split() for line in project.ssh(name, script).stdout.splitlines()]
        # The guest's GPUs, from its own tree: guest PCI address and NUMA cell.
        script = (f"for d in {HW}/sys/bus/pci/devices/*; do [ -L $d/driver ] && "
                  f"[ $(basename $(readlink $d/driver)) = nvidia ] && echo $(basename $d) $(cat $d/numa_node); "
                  "done; true")
        gpus = {bdf: int(cell) for bdf, cell in (line.split() for line in project.ssh(name, script).stdout.splitlines())}
        domain = ET.parse(run / "domains" / f"{name}.xml").getroot()
        out[name] = {
            "hypervisor": hv,
            "affinity": json.loads(project.ssh(hv, "cat /etc/railyard/affinity.json").stdout),
            "held": record["vfs"],
            "guest_vfs": {rdma: bdf for _, rdma, bdf in vfs},
            "guest_gpus": gpus,
            "topo": ET.fromstring(project.ssh(name, "cat /etc/railyard/nccl-topo.xml").stdout),
            "conf": dict(line.split("=", 1) for line in project.ssh(name, "cat /etc/nccl.conf").stdout.splitlines()
                         if "=" in line and not line.startswith("#")),
            "domain": domain,
            "host_of": passthrough(domain),
            "pf_netdevs": sorted({f.get("pf_netdev") or f["pf"] for f in lab_vm.read_record(STACK, name)["vfs"]}),
        }
    assert sorted(out) == ["dgx-0-vm0", "dgx-1-vm0"]
    return out


def passthrough(domain: ET.Element) -> dict[str, str]:
    """Guest PCI address -> host PCI address of each hostdev, the guest's buses numbered as its
    firmware numbers them from the domain alone (depth first from each expander's busNr, each
    bridge's ports in slot order), not as the plan says they are."""
    controllers = {int(c.get("index")): c for c in domain.iter("controller") if c.get("type") == "pci"}
    below: dict[int, list[tuple[int, int]]] = {}
    for index, c in controllers.items():
        a = c.find("address")
        if a is not None:
            below.setdefault(int(a.get("bus"), 16), []).append((int(a.get("slot"), 16), index))
    secondary: dict[int, int] = {}

    def walk(index: int, bus: int) -> int:
        """Number the bus below controller `index` and everything under it; the next free bus."""
        secondary[index] = bus
        bus += 1
        for _, child in sorted(below.get(index, [])):
            bus = walk(child, bus)
        return bus

    for index, c in controllers.items():
        if c.get("model") == "pcie-expander-bus":
            bus = int(c.find("target").get("busNr")) + 1  # its root bus is busNr; its ports' start after
            for _, child in sorted(below.get(index, [])):
                bus = walk(child, bus)
    out = {}
    for hd in domain.iter("hostdev"):
        src = {k: int(v, 16) for k, v in hd.find("source/address").attrib.items()}
        port = int(hd.find("address").get("bus"), 16)
        out[f"0000:{secondary[port]:02x}:00.0"] = \
            f"{src['domain']:04x}:{src['bus']:02x}:{src['slot']:02x}.{src['function']}"
    return out


def _host_gpu(v: dict, guest_bdf: str) -> dict:
    """The hypervisor's GPU (its affinity map's entry) passed through at guest address guest_bdf."""
    (gpu,) = [g for g in v["affinity"]["gpus"] if g["pci_bus_id"] == v["host_of"][guest_bdf]]
    return gpu


def _guest_vf_of(v: dict, host_gpu: dict) -> str:
    """The guest's RDMA name of the VF the VM holds on the NIC the hypervisor pairs host_gpu with."""
    (held,) = [f for f in v["held"].values() if f["pf"] == host_gpu["nic"]]
    assert held["present"], held
    (guest_bdf,) = [g for g, h in v["host_of"].items() if h == held["bdf"]]
    (rdma,) = [r for r, bdf in v["guest_vfs"].items() if bdf == guest_bdf]
    return rdma


def test_each_gpu_and_the_vf_of_its_host_side_pair_share_one_switch_at_the_hosts_distance(vms):
    for name, v in vms.items():
        parent = {child: p for p in v["topo"].iter("pci") for child in p.findall("pci")}
        leaves = {p.get("busid"): p for p in v["topo"].iter("pci") if not p.findall("pci")}
        tops = [p for cpu in v["topo"].iter("cpu") for p in cpu.findall("pci")]
        below = {top.get("busid"): {p.get("busid") for p in top.iter("pci") if p.get("busid") in leaves}
                 for top in tops}
        assert sorted(b for b, p in leaves.items() if (p.get("class") or "").startswith("0x0302")) == \
            sorted(v["guest_gpus"]) and len(v["guest_gpus"]) == 8
        for gpu in sorted(v["guest_gpus"]):
            host_gpu = _host_gpu(v, gpu)
            vf = v["guest_vfs"][_guest_vf_of(v, host_gpu)]
            # The switch the GPU hangs under holds the VF of its host-side pair, and nothing else.
            (top,) = [t for t, held in below.items() if gpu in held]
            assert below[top] == {gpu, vf}, (name, gpu, below)
            # As far apart as on the hypervisor: one bridge apart is PIX there, more is PXB.
            shown = "PIX" if parent[leaves[gpu]] is parent[leaves[vf]] else "PXB"
            assert shown == v["affinity"]["distances"][host_gpu["name"]][host_gpu["nic"]], (name, gpu, shown)


def test_nccl_ib_hca_lists_the_vfs_in_gpu_order(vms):
    for name, v in vms.items():
        # NCCL (and CUDA) number the guest's GPUs in bus order.
        want = [_guest_vf_of(v, _host_gpu(v, g)) for g in sorted(v["guest_gpus"])]
        assert v["conf"]["NCCL_IB_HCA"] == "=" + ",".join(f"{r}:1" for r in want), name
        assert v["conf"]["NCCL_TOPO_FILE"] == "/etc/railyard/nccl-topo.xml"


def test_the_vcpus_of_each_gpus_cell_are_pinned_on_that_gpus_host_numa_node(vms, project):
    for name, v in vms.items():
        hv = v["hypervisor"]
        node_cpus = {int(n): set(parse_cpulist(project.ssh(hv, f"cat {HW}/sys/devices/system/node/node{n}/cpulist")
                                             .stdout.strip())) for n in (0, 1)}
        pins = {int(p.get("vcpu")): int(p.get("cpuset")) for p in v["domain"].iter("vcpupin")}
        cells = {int(c.get("id")): parse_cpulist(c.get("cpus")) for c in v["domain"].iter("cell")}
        for gpu, cell in v["guest_gpus"].items():
            pinned = {pins[c] for c in cells[cell]}
            host_gpu = _host_gpu(v, gpu)
            assert pinned and pinned <= node_cpus[host_gpu["numa"]], (name, gpu, host_gpu["name"], pinned)


def test_after_the_rollouts_reboot_the_hypervisors_isolate_exactly_the_cpus_pinned_to_its_vms(vms, project):
    for name, v in vms.items():
        hv = v["hypervisor"]
        pinned = sorted(int(p.get("cpuset")) for p in v["domain"].iter("vcpupin"))
        # The command line the hypervisor booted with (its kernel's, which the lab shows at /proc/cmdline).
        booted = project.ssh(hv, "cat /proc/cmdline").stdout.split()
        (isolcpus,) = [w for w in booted if w.startswith("isolcpus=")]
        assert parse_cpulist(isolcpus.removeprefix("isolcpus=managed_irq,domain,")) == pinned, (hv, booted)
        for key in ("nohz_full=", "rcu_nocbs="):
            (arg,) = [w for w in booted if w.startswith(key)]
            assert parse_cpulist(arg.removeprefix(key)) == pinned, (hv, arg)
        # Interrupts made after boot start on the host's own CPUs.
        (aff,) = [w for w in booted if w.startswith("irqaffinity=")]
        assert parse_cpulist(aff.removeprefix("irqaffinity=")) and \
            not set(parse_cpulist(aff.removeprefix("irqaffinity="))) & set(pinned), (hv, aff)
    # Each hypervisor was rebooted by the rollout once, one at a time (the lab's own power log).
    spans = []
    for hv in sorted({v["hypervisor"] for v in vms.values()}):
        log = power.power_dir(STACK, hv) / "log.jsonl"
        events = [json.loads(line) for line in log.read_text().splitlines()]
        offs = [e["time"] for e in events if e["event"] == "off"]
        ons = [e["time"] for e in events if e["event"] == "on"]
        assert len(offs) == 1 and len(ons) == 1, (hv, events)
        spans.append((offs[0], ons[0]))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def test_the_hypervisors_isolation_drop_in_lists_exactly_the_cpus_pinned_to_its_vms(vms, project):
    for name, v in vms.items():
        pinned = sorted(int(p.get("cpuset")) for p in v["domain"].iter("vcpupin"))
        dropin = project.ssh(v["hypervisor"], "cat /etc/default/grub.d/railyard-cpu-isolation.cfg").stdout
        (isolcpus,) = [w for w in dropin.replace('"', " ").split() if w.startswith("isolcpus=")]
        listed = isolcpus.removeprefix("isolcpus=managed_irq,domain,")
        assert parse_cpulist(listed) == pinned, name


def test_the_hypervisors_device_interrupts_run_on_its_own_cpus_of_the_devices_node(vms, project):
    for name, v in vms.items():
        hv = v["hypervisor"]
        pinned = {int(p.get("cpuset")) for p in v["domain"].iter("vcpupin")}
        manifest = json.loads(project.ssh(hv, f"cat {HW}/railyard-hwtree.json").stdout)
        numa = {d["name"]: d["numa"] for d in v["affinity"]["gpus"] + v["affinity"]["nics"]}
        script = "; ".join(f"echo {irq} $(cat {HW}/proc/irq/{irq}/smp_affinity_list)"
                           for irqs in manifest["irqs"].values() for irq in irqs)
        where = {int(irq): set(parse_cpulist(cpus)) for irq, cpus in
                 (line.split() for line in project.ssh(hv, script).stdout.splitlines())}
        node_cpus = {n: set(parse_cpulist(project.ssh(hv, f"cat {HW}/sys/devices/system/node/node{n}/cpulist")
                                          .stdout.strip())) for n in (0, 1)}
        assert any(d.startswith("GPU") for d in manifest["irqs"])
        for dev, irqs in manifest["irqs"].items():
            for irq in irqs:
                assert where[irq] and not where[irq] & pinned, (hv, dev, irq, where[irq])
                assert where[irq] <= node_cpus[numa[dev]], (hv, dev, irq, where[irq])


def test_each_vf_reaches_its_own_hypervisors_address_on_its_rail(vms, project):
    for name, v in vms.items():
        hv = v["hypervisor"]
        # The hypervisor's rail addresses, on its PFs (their netdevs, not the macvlans beside them).
        pf_addresses = [ipaddress.ip_interface(line.split()[3]) for line in
                        project.ssh(hv, "ip -o -4 addr show").stdout.splitlines()
                        if line.split()[1] in {n for n in v["pf_netdevs"]}]
        for vf in sorted(v["held"]):
            own = ipaddress.ip_interface(project.ssh(name, f"ip -o -4 addr show {vf}").stdout.split()[3])
            (peer,) = [a for a in pf_addresses if a.network == own.network]
            got = project.ssh(name, f"ping -c1 -W2 -I {vf} {peer.ip}", check=False)
            assert got.returncode == 0, (name, vf, str(peer), got.stdout + got.stderr)


def test_guest_tuning_reserved_the_jobs_hugepages_on_the_guests_cells(vms, project):
    for name in vms:
        counts = [int(project.ssh(name, f"cat {HW}/sys/devices/system/node/node{n}/hugepages/"
                                        "hugepages-1048576kB/nr_hugepages").stdout) for n in (0, 1)]
        assert counts == [600, 600], name


def test_a_second_up_changes_nothing(project):
    project.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes")


def test_the_openstack_path_tunes_each_guest_through_a_jump_node(vms, project):
    """OpenStack's guest tuning (components/cluster.py, vms "are-nodes") on lab VMs: the guest
    playbook with the variables GuestTuning hands each VM and the openstack driver's own per-VM
    connection variables (railyard/drivers/openstack/tuning.py), through a jump host; here a lab
    hypervisor stands in for the site's bastion. A blackhole route in this namespace takes the VMs'
    addresses away from the controller, so the run reaches them through the jump node or not at all."""
    import dataclasses
    import socket
    import subprocess
    from types import SimpleNamespace

    from railyard import drivers
    from railyard.drivers.openstack import tuning as openstack_tuning
    from railyard.remote.ssh import JumpHost
    from railyard.stack import load
    from railyard.tuning import runner
    from railyard.tuning.vars import guest_vars

    spec, plan = load(paths.stack_file(STACK, project.dir))
    machines = {m["name"]: m for m in project.machines()}
    bastion = machines["dgx-0"]
    stack_of_openstack = dataclasses.replace(spec, driver_config=SimpleNamespace(
        jump_host=JumpHost(bastion["management_ip"], user="root", host_keys=(bastion["host_key"],))))
    hosts = [runner.Host(name, machines[name]["management_ip"], machines[name]["host_key"],
                         {**guest_vars(spec, plan, name), **drivers.tuning_vars("lab"),
                          **openstack_tuning.node_vars(stack_of_openstack, plan, name)})
             for name in sorted(vms)]
    assert all(h.vars[JUMP_VAR]["address"] == bastion["management_ip"] for h in hosts)
    key = project.outputs(secrets=True)["access"]["privateKey"]
    routes = [f"{h.address}/32" for h in hosts]
    for r in routes:
        subprocess.run(["ip", "route", "add", "blackhole", r], check=True)
    try:
        for h in hosts:
            with pytest.raises(OSError):
                socket.create_connection((h.address, 22), timeout=3).close()
        result = runner.run(STACK, hosts, key, user="root", playbook="guest.yml")
    finally:
        for r in routes:
            subprocess.run(["ip", "route", "del", "blackhole", r], check=False)
    assert result.ok, [str(f) for f in result.failures]
    assert sorted(result.hosts) == sorted(vms) and not any(h.unreachable or h.failed for h in result.hosts.values())
    # The guests are as up's own guest tuning left them: the same roles, nothing to change.
    assert result.changed == 0, [str(c) for c in result.changes]
