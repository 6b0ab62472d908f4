"""The cpu_isolation role on a dgx-h100 hypervisor's hardware tree (railyard:nodePools[].cpuIsolation):
check mode writes nothing, the kernel mode's drop-in carries exactly the planned kernel arguments
(railyard.model.boot_args, which decides the hosts driver's reboots), a second run changes nothing,
and a change of mode leaves only the new mode's file."""

from __future__ import annotations

import copy
import sys

import pytest

from railyard.drivers.lab import hwtree
from railyard.model.boot_args import isolation_args
from railyard.model.catalog import load_catalog
from railyard.model.plan import make_plan
from railyard.model.sysfs_discovery import format_cpulist
from railyard.stack import parse_config
from railyard.tuning.vars import host_vars

from .conftest import PLAYBOOKS, Host

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


def planned(mode: str):
    cfg = copy.deepcopy(CONFIG)
    cfg["railyard:nodePools"][0]["cpuIsolation"] = mode
    spec = parse_config(cfg, stack="iso")
    plan = make_plan(spec)
    return spec, plan, plan.nodes[0]


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Host:
    work = tmp_path_factory.mktemp("cpu-isolation")
    hw, etc = work / "hw", work / "etc"
    hwtree.build_hwtree(load_catalog().nodes["dgx-h100"], hw)
    etc.mkdir()
    spec, plan, node = planned("kernel")
    v = host_vars(spec, plan, node)
    v |= {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
          "cpu_isolation_etc_root": str(etc), "cpu_isolation_procfs_root": str(hw / "proc"),
          # Never this machine's bootloader or service manager: harmless commands.
          "cpu_isolation_bootloader_command": ["true"], "cpu_isolation_systemd_command": ["true"]}
    return Host("dgx-h100", work, hw, etc, work / "cache", v, work)


def test_check_mode_reports_the_change_and_writes_nothing(host):
    run = host.run(check=True, tags="cpu_isolation")
    assert run.rc == 0, run.stdout[-3000:]
    assert run.changed() > 0 and not (host.etc / GRUB).exists()


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
    # The hardware tree's kernel was not booted with them: the role says a reboot is pending.
    assert "the running kernel was not booted with" in run.stdout
    again = host.run(tags="cpu_isolation")
    assert again.rc == 0 and again.changed() == 0, again.changed_tasks()


def test_the_systemd_mode_replaces_the_kernel_drop_in_with_the_managers_affinity(host):
    spec, plan, node = planned("systemd")
    v = host_vars(spec, plan, node)
    extra = {k: v[k] for k in ("cpu_isolation_mode", "cpu_isolation_cpus", "cpu_isolation_housekeeping")}
    run = host.run(tags="cpu_isolation", extra=extra)
    assert run.rc == 0 and not run.failed_tasks(), run.stdout[-3000:]
    assert not (host.etc / GRUB).exists()
    conf = (host.etc / SYSTEMD).read_text()
    keep = plan.tuning(node).cpu_isolation.housekeeping
    assert f"CPUAffinity={format_cpulist(keep).replace(',', ' ')}\n" in conf
    assert set(keep).isdisjoint(p for g in plan.guests("gpu") for c in g.cells for p in c.pins)
    assert host.run(tags="cpu_isolation", extra=extra).changed() == 0


def test_the_absent_tasks_teardown_runs_remove_both_drop_ins(host):
    host.run(tags="cpu_isolation", extra={"cpu_isolation_mode": "kernel"})
    assert (host.etc / GRUB).exists()
    # teardown.yml's own task, alone: the whole teardown would reach roles this host has no roots for.
    play = host.work / "absent.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.include_role: {name: cpu_isolation, tasks_from: absent}\n")
    assert "include_role: {name: cpu_isolation, tasks_from: absent}" in (PLAYBOOKS / "teardown.yml").read_text()
    gone = host.run(playbook=str(play))
    assert gone.rc == 0 and not (host.etc / GRUB).exists() and not (host.etc / SYSTEMD).exists(), gone.stdout[-3000:]
    assert host.run(playbook=str(play)).changed() == 0
