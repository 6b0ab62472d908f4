"""Host tuning from `pulumi up` on lab nodes: the roles converge, a second up changes nothing, an
edit of the hugepage percentage shows in preview with host-level drift lines, and no run leaves
the SSH key or the object store's secret on disk.

A stack of the test's own in a copy of the project with a throwaway backend (never `lab`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from railyard import paths
from railyard.drivers.lab import gc
from railyard.engine.toolchain import engine_env

ROOT = paths.PROJECT_ROOT
STACK = "ttune"
DGX_H100_TABLE_6 = {"GPU0": "mlx5_0", "GPU1": "mlx5_3", "GPU2": "mlx5_4", "GPU3": "mlx5_5",
                    "GPU4": "mlx5_6", "GPU5": "mlx5_9", "GPU6": "mlx5_10", "GPU7": "mlx5_11"}


def config(percent: int) -> dict:
    return {
        "railyard:region": "lab",
        "railyard:layout": "bare-metal",
        "railyard:driver": "lab",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 2}],
        "railyard:fabric": {
            "compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": "198.19.0.0/16"},
            "storage": {"cidr": "198.18.144.0/20"},
            "management": {"cidr": "198.18.128.0/20"},
        },
        "railyard:storage": {"object": {"bucket": "datasets"}, "localCache": {"mount": "/mnt/cache", "fs": "xfs"},
                             "parallelFs": {"kind": "lustre", "mount": "/mnt/pfs", "capacityTiB": 10}},
        "railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": percent, "perNuma": True},
                            "previewDrift": True},
    }


class Project:
    def __init__(self, base: Path):
        self.dir = base / "project"
        (self.dir / "stacks").mkdir(parents=True)
        for name in ("__main__.py", "components"):
            os.symlink(ROOT / name, self.dir / name)
        (self.dir / "Pulumi.yaml").write_text(
            "name: railyard\nruntime:\n  name: python\n  options:\n"
            f"    virtualenv: {ROOT / '.venv'}\n    toolchain: pip\nstackConfigDir: stacks\n")
        (base / "state").mkdir()
        self.env = {**engine_env(ROOT), "PULUMI_BACKEND_URL": f"file://{base / 'state'}", "PULUMI_CONFIG_PASSPHRASE": ""}
        self.set(40)

    def set(self, percent: int) -> None:
        path = self.dir / "stacks" / f"Pulumi.{STACK}.yaml"
        doc = yaml.safe_load(path.read_text()) if path.exists() else {}
        doc["config"] = config(percent)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def pulumi(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(paths.bin_dir(ROOT) / "pulumi"), *args, "--stack", STACK, "--non-interactive"],
                              cwd=self.dir, env=self.env, text=True, capture_output=True, timeout=900, check=False)
        assert proc.returncode == 0, f"pulumi {' '.join(args)}:\n{proc.stdout[-5000:]}\n{proc.stderr[-3000:]}"
        return proc

    def ssh(self, node: str, command: str) -> str:
        out = json.loads(self.pulumi("stack", "output", "--json", "--show-secrets").stdout)
        target = next(n for n in out["inventory"] if n["name"] == node)
        d = self.dir / ".ssh"
        d.mkdir(exist_ok=True, mode=0o700)
        (d / "id").write_text(out["access"]["privateKey"])
        (d / "id").chmod(0o600)
        (d / "kh").write_text("".join(f"{n['management_ip']} {n['host_key']}\n" for n in out["inventory"]))
        proc = subprocess.run(["ssh", "-i", str(d / "id"), "-o", f"UserKnownHostsFile={d / 'kh'}",
                               "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                               f"root@{target['management_ip']}", command],
                              text=True, capture_output=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    gc.destroy_all(STACK)
    p = Project(tmp_path_factory.mktemp("tuning"))
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    yield p
    subprocess.run([str(paths.bin_dir(ROOT) / "pulumi"), "destroy", "--yes", "--skip-preview", "--stack", STACK,
                    "--non-interactive"], cwd=p.dir, env=p.env, capture_output=True, timeout=600, check=False)
    gc.destroy_all(STACK)


def test_up_tunes_every_node_and_pairs_gpus_from_the_pcie_tree(project):
    project.pulumi("up", "--yes", "--skip-preview")
    for node in ("gpu-0", "gpu-1"):
        affinity = json.loads(project.ssh(node, "cat /etc/railyard/affinity.json"))
        assert {g["name"]: g["nic"] for g in affinity["gpus"]} == DGX_H100_TABLE_6, node
        nccl = project.ssh(node, "cat /etc/nccl.conf")
        assert "NCCL_IB_HCA==mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1" in nccl


def test_hugepages_are_split_across_numa_nodes_and_the_cache_is_staged(project):
    counters = project.ssh("gpu-0", "cat /run/railyard/hw/sys/devices/system/node/node*/hugepages/"
                                    "hugepages-1048576kB/nr_hugepages").split()
    # 40% of a DGX H100's 2 TB (2048 GiB) in 1 GiB pages, split by the GPUs on each NUMA node (4 + 4).
    assert counters == ["410", "409"] or counters == ["409", "410"] or counters == ["410", "410"], counters
    listing = project.ssh("gpu-1", "cd /mnt/cache/datasets && sha256sum -c manifest.sha256 2>/dev/null || ls")
    assert "shard-00000.bin" in listing


def test_second_up_reports_no_change(project):
    project.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes")


def test_a_hugepage_edit_previews_as_a_tuning_change_with_host_drift_lines(project):
    project.set(50)
    try:
        preview = json.loads(project.pulumi("preview", "--diff", "--json").stdout)
    finally:
        project.set(40)
    changed = {s["urn"].rsplit("::", 1)[1]: s["op"] for s in preview["steps"] if s["op"] != "same"}
    assert changed == {"ttune-tuning-run": "update"}, changed
    lines = [d["message"].strip() for d in preview.get("diagnostics", [])
             if d["severity"] == "info" and "HostTuning" in d.get("urn", "")]
    assert any(line.startswith("gpu-0: node0 hugepages-1G ") and "→ 51" in line for line in lines), lines
    assert any(line.startswith("gpu-1: node1 hugepages-1G ") for line in lines), lines


def test_runs_keep_no_secret_on_disk(project):
    out = json.loads(project.pulumi("stack", "output", "--json", "--show-secrets").stdout)
    secrets = [out["access"]["privateKey"].strip(), out["storage"]["secret_key"]]
    runs = paths.runs_dir(STACK)
    files = [p for p in runs.rglob("*") if p.is_file()]
    assert files, "no run artifacts were kept"
    for p in files:
        blob = p.read_bytes()
        for s in secrets:
            assert s.encode() not in blob, f"{p} holds a secret"
    assert not list(runs.rglob("ssh_key*")), "ansible-runner left a key file"
