"""The cpu_isolation role on a dgx-h100 hypervisor's hardware tree (railyard:nodePools[].cpuIsolation):
check mode writes nothing, the kernel mode's drop-in carries exactly the planned kernel arguments
(railyard.model.boot_args, which decides the hosts driver's reboots), a second run changes nothing,
a change of mode leaves only the new mode's file, and a host without isolation gets Railyard's
files removed; each time the role says whether a boot is still needed, and its handlers run."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from railyard.drivers.lab import hwtree
from railyard.model import pci_layout
from railyard.model.boot_args import isolation_args
from railyard.model.catalog import load_catalog
from railyard.model.plan import make_plan
from railyard.model.sysfs_discovery import format_cpulist
from railyard.stack import parse_config
from railyard.tuning.vars import host_vars

from .conftest import PLAYBOOKS, Host, Run

CONFIG = {
    "railyard:region": "lab",
    "railyard:layout": "virtual",
    "railyard:driver": "lab",
    "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 1, "vmsPerHost": 2, "cpuIsolation": "kernel",
                            "vm": {"gpus": 4, "vfs": 4, "memoryGiB": 700}}],
    "railyard:fabric": {"compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": "198.19.0.0/16"},
                        "storage": {"cidr": "198.18.48.0/20"}, "management": {"cidr": "198.18.16.0/20"}},
    "railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": 80}},
}
GRUB = "etc/default/grub.d/railyard-cpu-isolation.cfg"
SYSTEMD = "etc/systemd/system.conf.d/railyard-cpu-isolation.conf"
MARK = "railyard/cpu-isolation.reboot"
IRQBALANCE = "etc/systemd/system/irqbalance.service.d/railyard-cpu-isolation.conf"
KEYS = ("cpu_isolation_mode", "cpu_isolation_cpus", "cpu_isolation_housekeeping")
# A host whose pool sets no cpuIsolation (or no longer does): none of the role's variables.
NONE = {"cpu_isolation_cpus": "", "cpu_isolation_housekeeping": "", "cpu_isolation_irq_cpus": {}}


# A VF of mlx5_6 (NUMA node 1) with vectors of its own, as a real ConnectX VF bound to mlx5_core
# has (the lab's VFs have none): the tree as sriov leaves it, before cpu_isolation places them.
VF_BDF = "0000:9a:00.2"
VF_IRQS = (900, 901)


def _add_vf(hw, pf: str, bdf: str, irqs) -> None:
    pf_dir = (hw / "sys/bus/pci/devices" / pci_layout.layout(load_catalog().nodes["dgx-h100"]).bus_ids[pf]).resolve()
    vf = pf_dir.parent / bdf
    vf.mkdir()
    for attr in ("vendor", "device", "class", "numa_node", "local_cpulist"):
        (vf / attr).write_text((pf_dir / attr).read_text())
    (vf / "physfn").symlink_to(os.path.relpath(pf_dir, vf))
    (hw / "sys/bus/pci/devices" / bdf).symlink_to(os.path.relpath(vf, hw / "sys/bus/pci/devices"))
    for irq in irqs:
        (vf / "msi_irqs").mkdir(exist_ok=True)
        (vf / "msi_irqs" / str(irq)).write_text("msix\n")
        (hw / f"proc/irq/{irq}").mkdir()
        (hw / f"proc/irq/{irq}/smp_affinity_list").write_text("0-223\n")


def planned(mode: str):
    cfg = copy.deepcopy(CONFIG)
    cfg["railyard:nodePools"][0]["cpuIsolation"] = mode
    spec = parse_config(cfg, stack="iso")
    plan = make_plan(spec)
    return spec, plan, plan.nodes[0]


def mode_vars(mode: str) -> dict:
    """The role's variables under `mode`: the same CPUs either way (the lab driver, whose stack this
    plans, takes only the kernel mode; a hosts stack takes both)."""
    spec, plan, node = planned("kernel")
    v = host_vars(spec, plan, node)
    return {**{k: v[k] for k in KEYS}, "cpu_isolation_mode": mode}


def reboot_required(run: Run) -> bool:
    facts = [e["event_data"]["res"]["ansible_facts"]["cpu_isolation_reboot_required"] for e in run.events
             if e.get("event") == "runner_on_ok"
             and "cpu_isolation_reboot_required" in (e["event_data"].get("res", {}).get("ansible_facts") or {})]
    assert len(facts) == 1, facts
    return facts[0] in (True, "True", "true")


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Host:
    work = tmp_path_factory.mktemp("cpu-isolation")
    hw, etc = work / "hw", work / "etc"
    hwtree.build_hwtree(load_catalog().nodes["dgx-h100"], hw)
    _add_vf(hw, "mlx5_6", VF_BDF, VF_IRQS)
    etc.mkdir()
    spec, plan, node = planned("kernel")
    v = host_vars(spec, plan, node)
    v |= {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
          "cpu_isolation_etc_root": str(etc), "cpu_isolation_run_root": str(work / "run"),
          "cpu_isolation_procfs_root": str(hw / "proc"), "cpu_isolation_sysfs_root": str(hw / "sys"),
          # Never this machine's irqbalance: the drop-in and the policy script are read instead.
          "cpu_isolation_irqbalance_restart": False,
          # Never this machine's bootloader or service manager: the handlers leave a trace instead.
          "host_boot_bootloader_command": ["touch", str(work / "bootloader-ran")],
          "cpu_isolation_systemd_command": ["touch", str(work / "reexec-ran")]}
    return Host("dgx-h100", work, hw, etc, work / "cache", v, work)


def handler_ran(host: Host, name: str) -> bool:
    trace = host.work / name
    ran = trace.exists()
    trace.unlink(missing_ok=True)
    return ran


def test_check_mode_reports_the_change_and_writes_nothing(host):
    run = host.run(check=True, tags="cpu_isolation")
    assert run.rc == 0, run.stdout[-3000:]
    assert run.changed() > 0 and not (host.etc / GRUB).exists() and not handler_ran(host, "bootloader-ran")
    assert not (host.etc / IRQBALANCE).exists()
    assert (host.hw / f"proc/irq/{VF_IRQS[0]}/smp_affinity_list").read_text().strip() == "0-223"


def test_the_kernel_drop_in_isolates_exactly_the_vms_cpus_and_a_second_run_changes_nothing(host):
    spec, plan, node = planned("kernel")
    run = host.run(tags="cpu_isolation")
    assert run.rc == 0 and not run.failed_tasks(), run.stdout[-3000:]
    text = (host.etc / GRUB).read_text()
    # The drop-in's arguments are the plan's, which the hosts driver's reboot decision reads.
    args = text.split('GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} ', 1)[1].rstrip('"\n').split()
    assert args == list(isolation_args(plan.tuning(node).cpu_isolation))
    pinned = sorted(p for g in plan.guests("gpu") for c in g.cells for p in c.pins)
    assert args[1] == f"nohz_full={format_cpulist(pinned)}"
    assert handler_ran(host, "bootloader-ran")
    # The hardware tree's kernel was not booted with them: a reboot stays pending, run after run.
    assert reboot_required(run)
    again = host.run(tags="cpu_isolation")
    assert again.rc == 0 and again.changed() == 0, again.changed_tasks()
    assert reboot_required(again) and not handler_ran(host, "bootloader-ran")
    # Booted with them, nothing is pending.
    cmdline = host.hw / "proc/cmdline"
    before = cmdline.read_text()
    cmdline.write_text(before.rstrip("\n") + " " + " ".join(args) + "\n")
    try:
        assert not reboot_required(host.run(tags="cpu_isolation"))
    finally:
        cmdline.write_text(before)


def test_device_interrupts_go_to_their_nodes_housekeeping_cpus_and_irqbalance_is_told_to_leave_them(host):
    spec, plan, node = planned("kernel")
    iso = plan.tuning(node).cpu_isolation
    run = host.run(tags="cpu_isolation")
    assert run.rc == 0 and not run.failed_tasks(), run.stdout[-3000:]
    manifest = json.loads((host.hw / hwtree.MANIFEST).read_text())
    sku = load_catalog().nodes["dgx-h100"]
    keep = dict(iso.irq_cpus)
    numa = {g.name: g.numa for g in sku.gpus} | {n.rdma: n.numa for n in sku.nics}
    placed = {dev: {(host.hw / f"proc/irq/{irq}/smp_affinity_list").read_text().strip() for irq in irqs}
              for dev, irqs in manifest["irqs"].items()}
    # Every GPU's and NIC's vectors: on its node's housekeeping CPUs, none on a CPU pinned to a VM.
    assert {dev for dev in placed if dev.startswith("GPU")} == {g.name for g in sku.gpus}
    assert placed == {dev: {format_cpulist(keep[numa[dev]])} for dev in placed}
    assert not set(iso.isolated) & {c for cpus in keep.values() for c in cpus}
    # The VF sriov made (NUMA node 1): its vectors too.
    for irq in VF_IRQS:
        assert (host.hw / f"proc/irq/{irq}/smp_affinity_list").read_text().strip() == format_cpulist(keep[1])
    # A vector made later starts on the host's CPUs, never on one pinned to a VM.
    default = int((host.hw / "proc/irq/default_smp_affinity").read_text().replace(",", ""), 16)
    assert default == sum(1 << c for c in iso.housekeeping)
    # irqbalance keeps every interrupt off the pinned CPUs and leaves those devices' alone.
    conf = (host.etc / IRQBALANCE).read_text()
    assert f'IRQBALANCE_BANNED_CPULIST={format_cpulist(iso.isolated)}"' in conf
    assert 'IRQBALANCE_ARGS=--policyscript=/etc/railyard/irqbalance-policy"' in conf
    policy = host.etc / "etc/railyard/irqbalance-policy"
    gpu = host.hw / "sys/bus/pci/devices" / pci_layout.layout(sku).bus_ids["GPU0"]
    asked = subprocess.run([str(policy), str(gpu.resolve()), "120"], capture_output=True, text=True, check=True)
    assert asked.stdout.split() == ["ban=true"]
    vf = subprocess.run([str(policy), f"/sys/devices/pci0000:98/{VF_BDF}", "900"], capture_output=True, text=True,
                        check=True)
    assert vf.stdout.split() == ["ban=true"]
    spine = subprocess.run([str(policy), "/sys/devices/pci0000:00/0000:00:14.0", "7"], capture_output=True,
                           text=True, check=True)
    assert spine.stdout == ""
    # A second run changes nothing.
    again = host.run(tags="cpu_isolation")
    assert again.rc == 0 and again.changed() == 0, again.changed_tasks()


def test_verify_checks_the_hypervisors_interrupt_placement_not_gpu_nic_affinitys(host):
    host.run(tags="cpu_isolation")
    quiet = {"verify_hugepages_per_node": {}, "verify_sriov_pfs": [], "verify_expected_pairing": {},
             "verify_sysfs_root": str(host.hw / "sys"), "verify_procfs_root": str(host.hw / "proc")}
    # On a hypervisor that isolates CPUs, gpu_nic_affinity leaves interrupts alone.
    assert host.vars["gpu_nic_affinity_irqs"] is False
    ok = host.run(tags="verify", extra=quiet)
    assert ok.rc == 0, ok.stdout[-3000:]
    manifest = json.loads((host.hw / hwtree.MANIFEST).read_text())
    irq = manifest["irqs"]["GPU3"][0]
    path = host.hw / f"proc/irq/{irq}/smp_affinity_list"
    before = path.read_text()
    path.write_text("0-223\n")  # irqbalance, or a driver reload, moved it
    try:
        bad = host.run(tags="verify", extra=quiet)
        assert bad.rc != 0 and f"GPU3 irq {irq} smp_affinity_list" in bad.stdout, bad.stdout[-3000:]
    finally:
        path.write_text(before)


def test_the_systemd_mode_replaces_the_kernel_drop_in_and_waits_for_a_boot(host):
    spec, plan, node = planned("kernel")
    extra = mode_vars("systemd")
    run = host.run(tags="cpu_isolation", extra=extra)
    assert run.rc == 0 and not run.failed_tasks(), run.stdout[-3000:]
    assert not (host.etc / GRUB).exists() and handler_ran(host, "bootloader-ran")
    conf = (host.etc / SYSTEMD).read_text()
    keep = plan.tuning(node).cpu_isolation.housekeeping
    assert f"CPUAffinity={format_cpulist(keep).replace(',', ' ')}\n" in conf
    assert set(keep).isdisjoint(p for g in plan.guests("gpu") for c in g.cells for p in c.pins)
    assert handler_ran(host, "reexec-ran") and reboot_required(run)
    # A second run changes nothing, and the reboot stays pending until a boot empties /run.
    again = host.run(tags="cpu_isolation", extra=extra)
    assert again.changed() == 0 and reboot_required(again)
    (host.work / "run" / MARK).unlink()
    assert not reboot_required(host.run(tags="cpu_isolation", extra=extra))


def test_a_host_without_isolation_loses_both_drop_ins_as_teardown_does(host):
    # Both drop-ins at once (a mode switch interrupted half way): the kernel one as the role writes it.
    (host.etc / GRUB).parent.mkdir(parents=True, exist_ok=True)
    (host.etc / GRUB).write_text("# Managed by Railyard (role cpu_isolation); do not edit.\n"
                                 "GRUB_CMDLINE_LINUX=\"${GRUB_CMDLINE_LINUX} isolcpus=1\"\n")
    assert (host.etc / SYSTEMD).exists()
    # The site play with no CPUs to isolate (the pool dropped cpuIsolation).
    assert (host.etc / IRQBALANCE).exists()
    run = host.run(tags="cpu_isolation", extra=NONE)
    assert run.rc == 0 and not (host.etc / GRUB).exists() and not (host.etc / SYSTEMD).exists(), run.stdout[-3000:]
    assert not (host.etc / IRQBALANCE).exists() and not (host.etc / "etc/railyard/irqbalance-policy").exists()
    assert reboot_required(run) and handler_ran(host, "bootloader-ran") and handler_ran(host, "reexec-ran")
    # irqbalance's files alone (an interrupted run): removed, and no boot-time change is said or done.
    (host.etc / IRQBALANCE).parent.mkdir(parents=True, exist_ok=True)
    (host.etc / IRQBALANCE).write_text("# Managed by Railyard (role cpu_isolation); do not edit.\n")
    only = host.run(tags="cpu_isolation", extra=NONE)
    assert only.rc == 0 and not (host.etc / IRQBALANCE).exists(), only.stdout[-3000:]
    assert not reboot_required(only) and not handler_ran(host, "bootloader-ran")
    assert not reboot_required(host.run(tags="cpu_isolation", extra=NONE))
    # teardown.yml's own task, alone: the whole teardown would reach roles this host has no roots for.
    host.run(tags="cpu_isolation")
    assert (host.etc / GRUB).exists()
    play = host.work / "absent.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.include_role: {name: cpu_isolation, tasks_from: absent}\n")
    assert "include_role: {name: cpu_isolation, tasks_from: absent}" in (PLAYBOOKS / "teardown.yml").read_text()
    gone = host.run(playbook=str(play))
    assert gone.rc == 0 and not (host.etc / GRUB).exists(), gone.stdout[-3000:]
