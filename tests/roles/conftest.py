"""Run the site playbook through ansible-runner against a lab hardware tree in a temp dir."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from railyard.drivers.lab import hwtree
from railyard.model.catalog import load_catalog
from railyard.model.plan import make_plan
from railyard.stack import load_stack_file
from railyard.tuning.runner import ansible_env
from railyard.tuning.vars import host_vars

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
FAKE_IP = Path(__file__).resolve().parent / "fake_ip.py"
STACKS = {"dgx-h100": "lab", "vela-a100": "lab-virtual"}
DATASET = {"train/shard-000.bin": bytes(range(256)) * 12, "train/shard-001.bin": b"railyard" * 900,
           "train/labels/index.json": b'{"classes": 10}', "eval/other.bin": b"not staged"}


def runner_env(base: dict[str, str] | None = None, *, path_first: str | None = None) -> dict[str, str]:
    """A role test's ansible-runner environment: Railyard's own (`ansible_env()`) unless `base` is
    given, no colour, and the venv's ansible-playbook whichever way pytest was started."""
    path = [*([path_first] if path_first else []), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    return {**(ansible_env() if base is None else base), "ANSIBLE_NOCOLOR": "1", "PATH": os.pathsep.join(path)}


@dataclass
class Run:
    status: str
    rc: int
    stats: dict
    events: list
    stdout: str

    def changed(self) -> int:
        return sum((self.stats.get("changed") or {}).values())

    def failed_tasks(self) -> list[str]:
        out = []
        for e in self.events:
            if e.get("event") in ("runner_on_failed", "runner_item_on_failed") and not e["event_data"].get("ignore_errors"):
                res = e["event_data"].get("res", {})
                out.append(f"{e['event_data'].get('task')}: {res.get('msg')}")
        return out

    def changed_tasks(self) -> list[str]:
        return [e["event_data"]["task"] for e in self.events
                if e.get("event") in ("runner_on_ok", "runner_item_on_ok") and e["event_data"].get("res", {}).get("changed")]


@dataclass
class Host:
    sku: str
    root: Path
    hw: Path
    etc: Path
    cache: Path
    vars: dict[str, Any]
    work: Path

    def run(self, *, check: bool = False, extra: dict | None = None, tags: str | None = None,
            playbook: str = "site.yml") -> Run:
        import ansible_runner

        pdd = self.work / f"runner-{len(list(self.work.glob('runner-*')))}"
        pdd.mkdir()
        inventory = {"all": {"hosts": {"node": {**self.vars, **(extra or {})}}}}
        cmdline = "--diff" + (" --check" if check else "")
        r = ansible_runner.run(
            private_data_dir=str(pdd), project_dir=str(PLAYBOOKS), playbook=playbook,
            inventory=inventory, cmdline=cmdline, quiet=True, tags=tags,
            envvars=runner_env(),
        )
        return Run(r.status, r.rc, r.stats or {}, list(r.events), r.stdout.read())


def make_host(sku: str, work: Path, endpoint: str) -> Host:
    work.mkdir(parents=True, exist_ok=True)
    hw, etc, cache = work / "hw", work / "etc", work / "cache"
    hwtree.build_hwtree(load_catalog().nodes[sku], hw)
    etc.mkdir()
    spec = load_stack_file(ROOT / "stacks" / f"Pulumi.{STACKS[sku]}.yaml")
    plan = make_plan(spec)
    v = host_vars(spec, plan, plan.nodes[0], object_endpoint=endpoint, dataset_prefix="train/")
    ipdir = work / "ip"
    ipdir.mkdir()
    (ipdir / "ip").write_text(f"#!{sys.executable}\n" + FAKE_IP.read_text())
    (ipdir / "ip").chmod(0o755)
    sysfs, procfs = str(hw / "sys"), str(hw / "proc")
    for role in ("host_hw", "sriov", "gpu_nic_affinity"):
        v[f"{role}_sysfs_root"] = sysfs
    for role in ("hugepages", "iommu", "sriov", "gpu_nic_affinity"):
        v[f"{role}_etc_root"] = str(etc)
    for role in ("host_hw", "gpu_nic_affinity"):
        v[f"{role}_procfs_root"] = procfs
    v |= {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        # Never the host's bootloader or service manager: the handlers run a harmless command.
        "host_boot_bootloader_command": ["true"],
        "cpu_isolation_systemd_command": ["true"],
        "cpu_isolation_etc_root": str(etc),
        "cpu_isolation_run_root": str(work / "run"),
        "cpu_isolation_procfs_root": procfs,
        "sriov_ip_command": [str(ipdir / "ip")],
        # An Ethernet host's lldpd: its drop-in written under etc, no daemon started on this machine.
        "lldp_etc_root": str(etc),
        "lldp_install_packages": False,
        "lldp_service_manager": "none",
        "dataset_cache_mount": str(cache),
        "dataset_cache_access_key": "test",
        "dataset_cache_secret_key": "test",
    }
    return Host(sku, work, hw, etc, cache, v, work)


@pytest.fixture(scope="session")
def s3():
    from tests.roles.s3stub import S3Stub

    with S3Stub({"datasets": dict(DATASET)}) as stub:
        yield stub


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
