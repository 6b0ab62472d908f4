"""The lab's hardware tree: a catalog SKU laid out as the kernel's sysfs and procfs would show it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from railyard.drivers.lab import hwtree
from railyard.model import pci_layout
from railyard.model.catalog import load_catalog

CATALOG = load_catalog()
SKUS = sorted(CATALOG.nodes)


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_text() + f" mode={p.stat().st_mode & 0o777:o}"
    return out


@pytest.fixture(scope="module")
def h100(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dgx-h100")
    hwtree.build_hwtree(CATALOG.nodes["dgx-h100"], root)
    return root


@pytest.mark.parametrize("sku", SKUS)
def test_every_catalog_node_builds_the_same_tree_twice(sku, tmp_path):
    hwtree.build_hwtree(CATALOG.nodes[sku], tmp_path / "a")
    hwtree.build_hwtree(CATALOG.nodes[sku], tmp_path / "b")
    a, b = _snapshot(tmp_path / "a"), _snapshot(tmp_path / "b")
    assert a == b, f"{sku}: the tree differs between two builds"


def test_dgx_h100_devices_are_reached_through_bus_links_into_the_bridge_hierarchy(h100):
    link = h100 / "sys/bus/pci/devices/0000:18:00.0"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link)), "links must be relative, as in sysfs"
    real = Path(os.path.realpath(link))
    rel = real.relative_to(h100 / "sys/devices")
    assert rel.parts[0].startswith("pci0000:") and rel.parts[-1] == "0000:18:00.0"
    assert len(rel.parts) == 5, f"mlx5_0 sits below a root port and a switch's two ports: {rel}"
    assert (real / "vendor").read_text() == "0x15b3\n"
    assert (real / "class").read_text() == "0x020700\n"
    assert (real / "numa_node").read_text() == "0\n"
    assert (real / "local_cpulist").read_text() == "0-55,112-167\n"
    assert (real / "sriov_totalvfs").read_text() == "127\n"
    assert (real / "sriov_numvfs").read_text() == "0\n"
    assert os.access(real / "sriov_numvfs", os.W_OK) or os.geteuid() == 0
    assert (real / "sriov_numvfs").stat().st_mode & 0o200, "sriov_numvfs is writable"
    assert not (real / "sriov_totalvfs").stat().st_mode & 0o200, "sriov_totalvfs is read-only"


def test_dgx_h100_class_links_pair_ib_netdevs_with_mlx5_devices_as_on_the_machine(h100):
    want = {"ibp24s0": "mlx5_0", "ibp64s0": "mlx5_3", "ibp79s0": "mlx5_4", "ibp94s0": "mlx5_5",
            "ibp154s0": "mlx5_6", "ibp192s0": "mlx5_9", "ibp206s0": "mlx5_10", "ibp220s0": "mlx5_11"}
    for netdev, rdma in want.items():
        dev = Path(os.path.realpath(h100 / "sys/class/net" / netdev / "device"))
        assert (dev / "infiniband" / rdma).is_dir(), f"{netdev} is not on the function of {rdma}"
        assert Path(os.path.realpath(h100 / "sys/class/infiniband" / rdma / "device")) == dev


def test_dgx_h100_irqs_hugepages_and_cmdline(h100):
    manifest = json.loads((h100 / hwtree.MANIFEST).read_text())
    irqs = manifest["irqs"]["mlx5_0"]
    assert len(irqs) == hwtree.MSI_VECTORS
    dev = h100 / "sys/bus/pci/devices/0000:18:00.0"
    assert sorted(int(p.name) for p in (dev / "msi_irqs").iterdir()) == irqs
    assert (h100 / f"proc/irq/{irqs[0]}/smp_affinity_list").read_text() == "0-223\n"
    for node in (0, 1):
        base = h100 / f"sys/devices/system/node/node{node}"
        assert (base / "hugepages/hugepages-1048576kB/nr_hugepages").read_text() == "0\n"
        assert (base / "hugepages/hugepages-2048kB/free_hugepages").read_text() == "0\n"
        assert "HugePages_Total" in (base / "meminfo").read_text()
    assert (h100 / "sys/devices/system/node/node1/cpulist").read_text() == "56-111,168-223\n"
    assert (h100 / "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages").read_text() == "0\n"
    assert f"MemTotal:       {2048 * 1024 * 1024} kB" in (h100 / "proc/meminfo").read_text()
    assert (h100 / "proc/cmdline").read_text() == "\n"


def test_unknown_catalog_values_are_left_out_not_invented(tmp_path):
    vela = CATALOG.nodes["vela-a100"]
    hwtree.build_hwtree(vela, tmp_path / "vela")
    assert not (tmp_path / "vela/sys/devices/system/node/node0/cpulist").exists(), "vela's CPU lists are unknown"
    gpu0 = tmp_path / "vela/sys/bus/pci/devices" / pci_layout.layout(vela).bus_ids["GPU0"]
    assert not (gpu0 / "class").exists(), "vela's GPU class is unknown"
    assert os.path.basename(os.readlink(gpu0 / "driver")) == "nvidia"
    assert not any((tmp_path / "vela/proc/irq").glob("*/smp_affinity_list")), "vela's CPU count is unknown"
    hgx = CATALOG.nodes["hgx-h100"]
    hwtree.build_hwtree(hgx, tmp_path / "hgx")
    nic = tmp_path / "hgx/sys/bus/pci/devices" / pci_layout.layout(hgx).bus_ids["mlx5_0"]
    assert not (nic / "sriov_totalvfs").exists() and not (nic / "sriov_numvfs").exists()
    assert not (tmp_path / "hgx/proc/meminfo").read_text().startswith("MemTotal"), "hgx memory is unknown"
    a100 = CATALOG.nodes["dgx-a100"]
    manifest = hwtree.build_hwtree(a100, tmp_path / "a100")
    assert set(manifest["omitted"]) == {"mlx5_10", "mlx5_11"}, "unplaced NICs are left out and said so"
    assert "GPU0" not in manifest["synthesized_bus_ids"] and "GPU1" in manifest["synthesized_bus_ids"]


def test_rebuild_refuses_a_non_empty_dir_unless_replace_and_then_resets_counters(tmp_path):
    sku = CATALOG.nodes["dgx-h100"]
    hwtree.build_hwtree(sku, tmp_path)
    numvfs = tmp_path / "sys/bus/pci/devices/0000:18:00.0/sriov_numvfs"
    numvfs.write_text("8\n")
    with pytest.raises(FileExistsError):
        hwtree.build_hwtree(sku, tmp_path)
    hwtree.build_hwtree(sku, tmp_path, replace=True)
    assert numvfs.read_text() == "0\n"
