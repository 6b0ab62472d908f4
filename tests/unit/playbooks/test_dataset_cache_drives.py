"""The dataset_cache role's drive module: which drives it takes for the cache, and which signatures
count as Railyard's own (everything else refuses the drive). Its runs on real block devices are
the lab tests' (tests/lab/test_hosts_up.py, on lab nodes' loop-backed drives)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from railyard.drivers.hosts.tuning import node_vars
from railyard.stack import load

ROOT = Path(__file__).resolve().parents[3]


def _load():
    path = ROOT / "playbooks/roles/dataset_cache/library/dataset_cache_drives.py"
    spec = importlib.util.spec_from_file_location("dataset_cache_drives", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drives = _load()


def _block(tmp_path, sizes: dict[str, float]) -> Path:
    """A /sys/block of NVMe namespaces of the given sizes (decimal TB), and a partition and a
    loop device that are never candidates."""
    block = tmp_path / "block"
    for name, tb in {**sizes, "loop0": 3.84}.items():
        (block / name).mkdir(parents=True)
        (block / name / "size").write_text(f"{round(tb * 1e12 / 512)}\n")
    (block / "nvme0n1p1").mkdir()
    return block


def test_the_data_drives_are_chosen_by_size_in_the_kernels_order(tmp_path):
    # A DGX H100: two 1.92 TB OS drives, eight 3.84 TB data drives; names out of order on purpose.
    sizes = {f"nvme{i}n1": 1.92 if i < 2 else 3.84 for i in (10, 2, 0, 3, 1, 4, 5, 6, 7, 8, 9)}
    sizes["nvme10n1"] = 3.84
    chosen, missing = drives.choose(str(_block(tmp_path, sizes)), 8, 3_840_000_000_000, 0.05)
    assert missing is None
    assert chosen == [f"/dev/nvme{i}n1" for i in (2, 3, 4, 5, 6, 7, 8, 9)]


def test_too_few_drives_of_the_size_are_named_with_the_others_found(tmp_path):
    block = _block(tmp_path, {"nvme0n1": 1.92, "nvme1n1": 3.84, "nvme2n1": 7.68})
    chosen, missing = drives.choose(str(block), 2, 3_840_000_000_000, 0.05)
    assert chosen == []
    assert missing == ("1 NVMe drive(s) of 3.84 TB found (nvme1n1), the cache wants 2; "
                       "others: nvme0n1 (1.92 TB), nvme2n1 (7.68 TB)")


def test_only_the_signature_railyard_recorded_is_its_own():
    single = {"members": ["/dev/nvme2n1"], "fstype": "xfs", "fs_uuid": "u-1", "array_uuid": ""}
    assert drives.recorded_signature(single, "/dev/nvme2n1", {"TYPE": "xfs", "UUID": "u-1"})
    # A filesystem made again by someone else, another drive, or no record at all: not ours.
    assert not drives.recorded_signature(single, "/dev/nvme2n1", {"TYPE": "xfs", "UUID": "u-2"})
    assert not drives.recorded_signature(single, "/dev/nvme3n1", {"TYPE": "xfs", "UUID": "u-1"})
    assert not drives.recorded_signature(None, "/dev/nvme2n1", {"TYPE": "xfs", "UUID": "u-1"})
    array = {"members": ["/dev/nvme2n1", "/dev/nvme3n1"], "fstype": "xfs", "fs_uuid": "f", "array_uuid": "a-1"}
    assert drives.recorded_signature(array, "/dev/nvme3n1", {"TYPE": "linux_raid_member", "UUID": "a-1"})
    assert not drives.recorded_signature(array, "/dev/nvme3n1", {"TYPE": "linux_raid_member", "UUID": "a-9"})
    assert not drives.recorded_signature(array, "/dev/nvme3n1", {"TYPE": "xfs", "UUID": "f"})


def test_what_a_drive_holds_is_said_as_an_operator_would_read_it():
    assert drives.describe({"PTTYPE": "gpt", "PTUUID": "x"}) == "a gpt partition table"
    assert drives.describe({"TYPE": "ext4", "UUID": "u"}) == "an ext4 signature (UUID u)"
    assert drives.describe({"TYPE": "linux_raid_member", "UUID": "a"}) == "a linux_raid_member signature (UUID a)"


def test_the_hosts_driver_hands_the_role_the_skus_data_drives_and_the_stacks_raid():
    spec, plan = load(ROOT / "stacks/Pulumi.onprem-dgx.yaml")
    got = node_vars(spec, plan, plan.nodes[0])
    assert (got["dataset_cache_drive_count"], got["dataset_cache_drive_bytes"], got["dataset_cache_raid"]) == \
        (8, 3_840_000_000_000, spec.storage.local_cache.raid)
