"""The lab's hardware tree: a catalog SKU laid out as the kernel's sysfs and procfs would show it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from railyard.drivers.lab import hwtree
from railyard.model import hardware_check, pci_layout
from railyard.model.catalog import load_catalog
from railyard.model.sysfs_discovery import host_facts

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


# --------------------------------------------------------------------------------------------------
# The SKU check finds a lab tree clean: host_facts of a tree built for a SKU against that SKU

# Differences no tree can avoid: NICs the catalog does not place in the PCIe tree have no sysfs
# home (the layout leaves them out and the manifest's "omitted" says so), so the host lacks them.
UNAVOIDABLE = {
    "dgx-a100": ["lab-0: mlx5_10 not found, dgx-a100 has it (storage)",
                 "lab-0: mlx5_11 not found, dgx-a100 has it (storage)"],
}
# What the check cannot compare on a tree: each line a fact the catalog does not give (the tree
# leaves the file out, so check() calls it unknown on the host).
_GPUS = [f"GPU{i}" for i in range(8)]


def _pcie(devices: list[str]) -> str:
    # The tree shows a PCIe link only where the catalog gives one (dgx-h100's GPUs and OSFP NICs).
    return "lab-0: PCIe links not checked (unknown on the host): " + ", ".join(devices)


NOT_CHECKED = {
    "dgx-a100": [_pcie(_GPUS + [f"mlx5_{i}" for i in range(10)])],
    # The dual-port QSFP112 storage adapters: VPI with no PCI class (so no link mode) and no speed.
    # The BlueField-3 ports: speed and link mode unknown; no PCIe link in the sources.
    "dgx-b200": ["lab-0: link layer not checked (unknown on the host): mlx5_5, mlx5_6, mlx5_11, mlx5_12",
                 "lab-0: link speed not checked (unknown on the host): mlx5_5, mlx5_6, mlx5_11, mlx5_12",
                 _pcie(_GPUS + [f"mlx5_{i}" for i in range(4, 16)])],
    "dgx-h100": ["lab-0: link layer not checked (unknown on the host): mlx5_1, mlx5_2, mlx5_7, mlx5_8",
                 "lab-0: link speed not checked (unknown on the host): mlx5_1, mlx5_2, mlx5_7, mlx5_8",
                 _pcie(["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"])],
    # The BlueField-3: VPI with no PCI class and no speed. No PCIe link, tray memory, NVMe drives or
    # Grace model number in the sources.
    "gb200-nvl72": ["lab-0: link layer not checked (unknown on the host): mlx5_2, mlx5_3, mlx5_6, mlx5_7",
                    "lab-0: link speed not checked (unknown on the host): mlx5_2, mlx5_3, mlx5_6, mlx5_7",
                    _pcie(_GPUS[:4] + [f"mlx5_{i}" for i in range(8)]),
                    "lab-0: CPU model not checked (gb200-nvl72's names no model number)",
                    "lab-0: memory not checked (unknown on the host)",
                    "lab-0: NVMe drives not checked (unknown on the host)"],
    # The ConnectX-8 are VPI with no PCI class in the sources (so no link mode); no CPU model,
    # memory, NVMe drives or PCIe links.
    "hgx-b300": ["lab-0: link layer not checked (unknown on the host): " + ", ".join(f"mlx5_{i}" for i in range(10, 18)),
                 _pcie(_GPUS + [f"mlx5_{i}" for i in range(10, 18)] + ["mlx5_bond_0"]),
                 "lab-0: CPU model not checked (unknown on the host)",
                 "lab-0: memory not checked (unknown on the host)",
                 "lab-0: NVMe drives not checked (unknown on the host)"],
    # As hgx-b300: ConnectX-7 of no PCI class, the bond of no speed.
    "hgx-h200": ["lab-0: link layer not checked (unknown on the host): mlx5_0, "
                 + ", ".join(f"mlx5_{i}" for i in range(3, 10)),
                 "lab-0: link speed not checked (unknown on the host): mlx5_bond_0",
                 _pcie(_GPUS + ["mlx5_0"] + [f"mlx5_{i}" for i in range(3, 10)] + ["mlx5_bond_0"]),
                 "lab-0: CPU model not checked (unknown on the host)",
                 "lab-0: memory not checked (unknown on the host)",
                 "lab-0: NVMe drives not checked (unknown on the host)"],
    # No NIC model, CPU model, memory size or NVMe drives in the catalog.
    "hgx-h100": ["lab-0: link layer not checked (unknown on the host): " + ", ".join(f"mlx5_{i}" for i in range(12)),
                 "lab-0: link speed not checked (unknown on the host): " + ", ".join(f"mlx5_{i}" for i in range(12)),
                 _pcie(_GPUS + [f"mlx5_{i}" for i in range(12)]),
                 "lab-0: CPU model not checked (unknown on the host)",
                 "lab-0: memory not checked (unknown on the host)",
                 "lab-0: NVMe drives not checked (unknown on the host)"],
    # No CPU lists and no thread count (so no cpuinfo); the CPU is named by generation only.
    "vela-a100": [_pcie(_GPUS + ["mlx5_0", "mlx5_1"]),
                  "lab-0: NUMA CPU lists not checked (unknown on the host): NUMA 0, NUMA 1",
                  "lab-0: CPU count not checked (unknown on the host)",
                  "lab-0: CPU model not checked (unknown on the host)"],
}


def _facts(root: Path) -> dict:
    return host_facts(str(root / "sys"), str(root / "proc"), str(root / "dev"))


def test_every_catalog_node_has_its_expected_check_result():
    assert sorted(NOT_CHECKED) == SKUS, "a new catalog node needs its not_checked list here"


@pytest.mark.parametrize("sku", SKUS)
def test_the_sku_check_finds_the_tree_of_every_catalog_node_clean(sku, tmp_path):
    s = CATALOG.nodes[sku]
    manifest = hwtree.build_hwtree(s, tmp_path)
    facts = _facts(tmp_path)
    got = hardware_check.check("lab-0", facts, s)
    assert [str(m) for m in got] == UNAVOIDABLE.get(sku, [])
    assert sorted(m.what for m in got) == sorted(f"nics.{n}" for n in manifest["omitted"])
    assert hardware_check.not_checked("lab-0", facts, s) == NOT_CHECKED[sku]
    # Storage ports too are shown up, so requiring every link up changes nothing.
    every = [n.rdma for n in s.nics if n.rdma not in manifest["omitted"]]
    assert [str(m) for m in hardware_check.check("lab-0", facts, s, links_up=every)] == UNAVOIDABLE.get(sku, [])


@pytest.mark.parametrize("sku", SKUS)
def test_what_the_check_cannot_see_on_a_tree_is_what_the_catalog_does_not_say(sku, tmp_path):
    s = CATALOG.nodes[sku]
    hwtree.build_hwtree(s, tmp_path)
    facts = _facts(tmp_path)
    nics = {n["name"]: n for n in facts["nics"]}
    for n in s.nics:
        if n.rdma not in nics:
            continue
        f = nics[n.rdma]
        knows_link = n.link in ("infiniband", "ethernet") or (n.pci_class or "").startswith(("0x0207", "0x0200"))
        assert (f["link_layer"] is not None) == knows_link, f"{sku} {n.rdma}"
        assert f["speed_gbps"] == n.speed_gbps, f"{sku} {n.rdma}"
        assert f["state"] == "ACTIVE" and f["phys_state"] == "LinkUp"
    assert (facts["cpus"]["count"], facts["cpus"]["model"]) == (
        (s.cpus.threads, s.cpus.model) if s.cpus.threads else (None, None))
    assert facts["memory_kb"] == (None if s.memory_gib is None else s.memory_gib * 2**20)
    if s.nvme is None:
        assert facts["nvme"] is None
    else:
        sizes = sorted(round(g.size_tb * 1e12 / 512) * 512 for g in s.nvme for _ in range(g.count))
        assert sorted(d["size_bytes"] for d in facts["nvme"]) == sizes
        assert all(d["model"] is None and d["numa"] is None and d["bdf"] is None for d in facts["nvme"]), \
            "the catalog gives no NVMe model or place"


@pytest.mark.parametrize("sku", SKUS)
def test_the_check_does_not_need_the_trees_class_net(sku, tmp_path):
    """Inside a lab node /sys/class/net stays the node's live interfaces: state and speed come
    from the IB port files, so the check sees the same without the tree's netdevs."""
    s = CATALOG.nodes[sku]
    hwtree.build_hwtree(s, tmp_path)
    for link in (tmp_path / "sys/class/net").glob("*"):  # hgx-h100 has none (no link mode known)
        link.unlink()
    facts = _facts(tmp_path)
    assert [str(m) for m in hardware_check.check("lab-0", facts, s)] == UNAVOIDABLE.get(sku, [])
    assert hardware_check.not_checked("lab-0", facts, s) == NOT_CHECKED[sku]


def test_dgx_h100_ports_netdevs_drives_and_cpus_in_the_kernels_formats(h100):
    port = h100 / "sys/class/infiniband/mlx5_0/ports/1"
    assert {f.name: f.read_text() for f in port.iterdir()} == {
        "link_layer": "InfiniBand\n", "state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n",
        "rate": "400 Gb/sec (4X NDR)\n"}
    assert not any(f.stat().st_mode & 0o222 for f in port.iterdir()), "port attributes are read-only"
    storage = h100 / "sys/class/infiniband/mlx5_1/ports/1"
    assert sorted(f.name for f in storage.iterdir()) == ["phys_state", "state"], "link mode and speed unknown"
    net = Path(os.path.realpath(h100 / "sys/bus/pci/devices/0000:18:00.0")) / "net/ibp24s0"
    assert {f.name: f.read_text() for f in net.iterdir() if not f.is_symlink()} == {
        "operstate": "up\n", "carrier": "1\n", "speed": "400000\n"}, "an IPoIB MTU is the fabric's: left out"
    blocks = sorted((h100 / "sys/block").iterdir(), key=lambda p: int(p.name[4:-2]))
    assert [b.name for b in blocks] == [f"nvme{i}n1" for i in range(10)]
    assert [(b / "size").read_text() for b in blocks] == ["3750000000\n"] * 2 + ["7500000000\n"] * 8
    assert not any((b / "device").exists() for b in blocks), "the catalog does not place the drives"
    cpuinfo = (h100 / "proc/cpuinfo").read_text()
    assert cpuinfo.startswith("processor\t: 0\nmodel name\t: Intel Xeon Platinum 8480C\n\nprocessor\t: 1\n")
    assert cpuinfo.endswith("processor\t: 223\nmodel name\t: Intel Xeon Platinum 8480C\n\n")
    assert cpuinfo.count("processor\t: ") == 224
    assert (h100 / "sys/devices/system/cpu/online").read_text() == "0-223\n"
    assert not (h100 / "proc/sys/kernel/osrelease").exists(), "a lab node runs the host's kernel"
    assert (h100 / "proc/cmdline").read_text() == "\n", "the catalog has no boot line"
    assert "MemTotal" not in (h100 / "sys/devices/system/node/node0/meminfo").read_text(), "no per-node memory"
    manifest = json.loads((h100 / hwtree.MANIFEST).read_text())
    assert manifest["links_up"] == [n.rdma for n in CATALOG.nodes["dgx-h100"].nics]
    assert manifest["ib_rates"]["mlx5_0"] == "400 Gb/sec (4X NDR)" and "mlx5_1" not in manifest["ib_rates"]
    assert manifest["nvme"] == {f"nvme{i}n1": "os" if i < 2 else "data" for i in range(10)}


def test_ethernet_ports_and_unknown_cpus_drives_and_speeds(tmp_path):
    vela = CATALOG.nodes["vela-a100"]
    hwtree.build_hwtree(vela, tmp_path / "vela")
    port = tmp_path / "vela/sys/class/infiniband/mlx5_0/ports/1"
    assert (port / "link_layer").read_text() == "Ethernet\n"
    assert (port / "rate").read_text() == "100 Gb/sec (4X EDR)\n"
    netdev = pci_layout.netdev_name(vela, "mlx5_0")
    net = tmp_path / "vela/sys/class/net" / netdev
    assert (net / "mtu").read_text() == "1500\n", "the kernel's default for an Ethernet netdev"
    assert (net / "speed").read_text() == "100000\n"
    assert not (tmp_path / "vela/proc/cpuinfo").exists(), "vela's thread count is unknown"
    assert not (tmp_path / "vela/sys/devices/system/cpu").exists()
    assert len(list((tmp_path / "vela/sys/block").iterdir())) == 4
    hgx = CATALOG.nodes["hgx-h100"]
    manifest = hwtree.build_hwtree(hgx, tmp_path / "hgx")
    assert not (tmp_path / "hgx/sys/block").exists() and manifest["nvme"] is None, "hgx's drives are unknown"
    assert "model name" not in (tmp_path / "hgx/proc/cpuinfo").read_text(), "hgx's CPU model is unknown"
    assert (tmp_path / "hgx/proc/cpuinfo").read_text().count("processor\t: ") == 224
    assert sorted(f.name for f in (tmp_path / "hgx/sys/class/infiniband/mlx5_0/ports/1").iterdir()) == [
        "phys_state", "state"], "hgx's NIC model (link mode, speed) is unknown"
    a100 = CATALOG.nodes["dgx-a100"]
    hwtree.build_hwtree(a100, tmp_path / "a100")
    assert (tmp_path / "a100/sys/class/infiniband/mlx5_0/ports/1/rate").read_text() == "200 Gb/sec (4X HDR)\n"
