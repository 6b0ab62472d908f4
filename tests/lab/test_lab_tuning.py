"""Host tuning from `pulumi up` on lab nodes: the roles converge, a second up changes nothing, an
edit of the hugepage percentage shows in preview with host-level drift lines, and no run leaves
the SSH key or the object store's secret on disk.

A stack of the test's own in a copy of the project with a throwaway backend (never `lab`).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from railyard import paths
from railyard.drivers.lab import gc
from .railyard_project import STORAGE, free_networks
from .stack_project import StackProject

ROOT = paths.PROJECT_ROOT
STACK = "ttune"
# Picked once by the fixture (other test workers pick theirs at once); every config() names it.
MANAGEMENT: list[str] = []
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
            "storage": {"cidr": STORAGE},
            "management": {"cidr": MANAGEMENT[0]},
        },
        # Ephemeral: a long-lived stack protects its resources, and the test destroys this one.
        "railyard:ephemeral": {"ttl": "2h"},
        "railyard:storage": {"object": {"bucket": "datasets"}, "localCache": {"mount": "/mnt/cache", "fs": "xfs"},
                             "parallelFs": {"kind": "lustre", "mount": "/mnt/pfs", "capacityTiB": 10}},
        "railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": percent, "perNuma": True},
                            "previewDrift": True},
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    gc.destroy_all(STACK)
    MANAGEMENT[:] = free_networks(1, prefix=20)
    p = StackProject(tmp_path_factory.mktemp("tuning"), STACK, config(40))
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    yield p
    subprocess.run([str(paths.bin_dir(ROOT) / "pulumi"), "destroy", "--yes", "--skip-preview", "--stack", STACK,
                    "--non-interactive"], cwd=p.dir, env=p.env, capture_output=True, timeout=600, check=False)
    gc.destroy_all(STACK)


def test_up_tunes_every_node_and_pairs_gpus_from_the_pcie_tree(project):
    project.pulumi("up", "--yes", "--skip-preview")
    for node in ("gpu-0", "gpu-1"):
        affinity = json.loads(project.ssh(node, "cat /etc/railyard/affinity.json").stdout)
        assert {g["name"]: g["nic"] for g in affinity["gpus"]} == DGX_H100_TABLE_6, node
        nccl = project.ssh(node, "cat /etc/nccl.conf").stdout
        assert "NCCL_IB_HCA==mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1" in nccl


def test_hugepages_are_split_across_numa_nodes_and_the_cache_is_staged(project):
    counters = project.ssh("gpu-0", "cat /run/railyard/hw/sys/devices/system/node/node*/hugepages/"
                                    "hugepages-1048576kB/nr_hugepages").stdout.split()
    # 40% of a DGX H100's 2 TB (2048 GiB) in 1 GiB pages, split by the GPUs on each NUMA node (4 + 4).
    assert counters == ["410", "409"] or counters == ["409", "410"] or counters == ["410", "410"], counters
    listing = project.ssh("gpu-1", "ls /mnt/cache/datasets").stdout
    assert "shard-00000.bin" in listing


def test_second_up_reports_no_change(project):
    project.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes")


def test_railyard_tune_check_mode_finds_nothing_to_change(project):
    # The operators' command outside Pulumi, as its console script runs it (without the project
    # root on sys.path, so it must not need the Pulumi program's packages).
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "railyard"), "tune", "--stack", STACK, "--check"],
                          cwd=project.dir, env={**project.env, "RAILYARD_ROOT": str(project.dir)},
                          text=True, capture_output=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    hosts = [line for line in proc.stdout.splitlines() if line.startswith("gpu-")]
    assert len(hosts) == 2 and all("changed=0 failed=0 unreachable=0" in line for line in hosts), proc.stdout
    assert "would change" not in proc.stdout


def test_a_hugepage_edit_previews_as_a_tuning_change_with_host_drift_lines(project):
    project.write(config(50))
    try:
        preview = json.loads(project.pulumi("preview", "--diff", "--json").stdout)
    finally:
        project.write(config(40))
    changed = {s["urn"].rsplit("::", 1)[1]: s["op"] for s in preview["steps"] if s["op"] != "same"}
    # Acceptance runs again after tuning that changed.
    assert changed == {"ttune-tuning-run": "update", "ttune-acceptance-run": "update"}, changed
    lines = [d["message"].strip() for d in preview.get("diagnostics", [])
             if d["severity"] == "info" and "HostTuning" in d.get("urn", "")]
    # What the drift check said otherwise (a node it could not reach, a task that failed), so a
    # failure here says why it found nothing.
    said = [d["message"].strip() for d in preview.get("diagnostics", []) if d["severity"] != "info"]
    assert any(line.startswith("gpu-0: node0 hugepages-1G ") and "→ 51" in line for line in lines), (lines, said)
    assert any(line.startswith("gpu-1: node1 hugepages-1G ") for line in lines), (lines, said)


def test_runs_keep_no_secret_on_disk(project):
    out = project.outputs(secrets=True)
    secrets = [out["access"]["privateKey"].strip(), out["storage"]["secret_key"]]
    runs = paths.runs_dir(STACK)
    files = [p for p in runs.rglob("*") if p.is_file()]
    assert files, "no run artifacts were kept"
    for p in files:
        blob = p.read_bytes()
        for s in secrets:
            assert s.encode() not in blob, f"{p} holds a secret"
    assert not list(runs.rglob("ssh_key*")), "ansible-runner left a key file"
