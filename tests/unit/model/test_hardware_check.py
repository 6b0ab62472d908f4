"""The hardware check: a host's facts against its SKU, before anything on the host changes.

Trees come from the lab's hardware tree (railyard.drivers.lab.hwtree), which writes a SKU's sysfs
and procfs as the kernel shows them (IB ports up at the SKU's rate, NVMe block devices, cpuinfo);
the tests change or remove what they need in the kernel's own formats.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from railyard.drivers.lab import hwtree
from railyard.model import hardware_check
from railyard.model.catalog import load_catalog
from railyard.model.sysfs_discovery import host_facts

CATALOG = load_catalog()
SKUS = sorted(CATALOG.nodes)
DGX = CATALOG.nodes["dgx-h100"]
# Namespace sizes of real drives, in 512-byte sectors: 3.84 TB and 1.92 TB data-center NVMe.
SECTORS_3_84TB = 7501476528
SECTORS_1_92TB = 3750748848


def _tree(root: Path, sku: str = "dgx-h100") -> dict:
    return hwtree.build_hwtree(CATALOG.nodes[sku], root)


def _facts(root: Path) -> dict:
    return host_facts(str(root / "sys"), str(root / "proc"), str(root / "dev"))


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        os.chmod(path, 0o644)
    path.write_text(text + "\n")


def _port(root: Path, nic: str, **files: str) -> None:
    for name, text in files.items():
        _write(root, f"sys/class/infiniband/{nic}/ports/1/{name}", text)


def _all_ports(root: Path, sku=DGX, **files: str) -> None:
    for nic in sku.nics:
        _port(root, nic.rdma, **files)


def _nvme(root: Path, sectors: list[int]) -> None:
    for i, n in enumerate(sectors):
        _write(root, f"sys/block/nvme{i}n1/size", str(n))
        _write(root, f"sys/block/nvme{i}n1/device/model", "SAMSUNG MZQL23T8HCLS-00A07")


def _remove_gpu(root: Path, manifest: dict, gpu: str) -> None:
    link = root / "sys/bus/pci/devices" / manifest["bus_ids"][gpu]
    shutil.rmtree(os.path.realpath(link))
    link.unlink()


def _messages(host: str, facts: dict, sku=DGX, **kw) -> list[str]:
    return [str(m) for m in hardware_check.check(host, facts, sku, **kw)]


@pytest.mark.parametrize("sku", SKUS)
def test_every_sku_matches_the_facts_of_its_own_lab_tree(sku, tmp_path):
    """The facts and the check agree: a tree built from the SKU has no difference from it, except
    the devices the catalog cannot place (the lab tree leaves them out, so the host lacks them)."""
    manifest = _tree(tmp_path, sku)
    facts = _facts(tmp_path)
    assert json.loads(json.dumps(facts)) == facts, "the facts are JSON as they are"
    got = hardware_check.check("lab-0", facts, CATALOG.nodes[sku])
    omitted = sorted(manifest["omitted"])
    assert sorted(m.what for m in got) == sorted(f"nics.{n}" for n in omitted), [str(m) for m in got]
    for m in got:
        assert str(m).startswith("lab-0: mlx5_") and " not found, " in str(m)


@pytest.mark.parametrize("sku, gpu, message", [
    ("dgx-h100", "GPU4", "gpu-07: 7 GPUs found, dgx-h100 has 8; none under the switch of mlx5_6 (NUMA 1)"),
    ("dgx-h100", "GPU0", "gpu-07: 7 GPUs found, dgx-h100 has 8; none under the switch of mlx5_0 (NUMA 0)"),
    ("hgx-h100", "GPU1", "gpu-07: 7 GPUs found, hgx-h100 has 8; none under the switch of mlx5_1 (NUMA 0)"),
    ("dgx-a100", "GPU5", "gpu-07: 7 GPUs found, dgx-a100 has 8; 1 of 2 under the switch of mlx5_6 and mlx5_7 (NUMA 7)"),
    ("vela-a100", "GPU6", "gpu-07: 7 GPUs found, vela-a100 has 8; 3 of 4 on NUMA 1"),
])
def test_a_missing_gpu_is_named_by_the_switch_and_numa_node_it_belongs_under(sku, gpu, message, tmp_path):
    manifest = _tree(tmp_path, sku)
    _remove_gpu(tmp_path, manifest, gpu)
    got = [m for m in hardware_check.check("gpu-07", _facts(tmp_path), CATALOG.nodes[sku])
           if m.what.removeprefix("nics.") not in manifest["omitted"]]
    assert [str(m) for m in got] == [message]
    assert got[0].what == "gpus"


def test_two_missing_gpus_are_both_named(tmp_path):
    manifest = _tree(tmp_path)
    _remove_gpu(tmp_path, manifest, "GPU1")
    _remove_gpu(tmp_path, manifest, "GPU7")
    assert _messages("gpu-07", _facts(tmp_path)) == [
        "gpu-07: 6 GPUs found, dgx-h100 has 8; none under the switch of mlx5_3 (NUMA 0), "
        "none under the switch of mlx5_11 (NUMA 1)"]


def test_a_compute_nic_whose_port_is_down_is_link_down(tmp_path):
    _tree(tmp_path)
    _port(tmp_path, "mlx5_4", state="1: DOWN")
    assert _messages("gpu-03", _facts(tmp_path)) == ["gpu-03: mlx5_4 link down"]
    _port(tmp_path, "mlx5_4", state="1: DOWN", phys_state="2: Polling")
    assert _messages("gpu-03", _facts(tmp_path)) == ["gpu-03: mlx5_4 link down (physical state Polling)"]
    _port(tmp_path, "mlx5_4", state="2: INIT", phys_state="5: LinkUp")
    assert _messages("gpu-03", _facts(tmp_path)) == [
        "gpu-03: mlx5_4 link INIT, not ACTIVE (up, but no subnet manager has brought it to ACTIVE)"]


def test_a_netdev_without_carrier_is_link_down_when_the_port_state_is_unknown(tmp_path):
    _tree(tmp_path)
    for name in ("state", "phys_state"):
        (tmp_path / f"sys/class/infiniband/mlx5_4/ports/1/{name}").unlink()
    _write(tmp_path, "sys/class/net/ibp79s0/operstate", "down")
    assert _messages("gpu-03", _facts(tmp_path)) == ["gpu-03: mlx5_4 link down (ibp79s0 down)"]


def test_a_storage_port_down_is_a_mismatch_only_when_its_link_must_be_up(tmp_path):
    _tree(tmp_path)
    _port(tmp_path, "mlx5_1", state="1: DOWN")
    facts = _facts(tmp_path)
    assert _messages("gpu-03", facts) == []
    links = [n.rdma for n in DGX.nics]
    assert _messages("gpu-03", facts, links_up=links) == ["gpu-03: mlx5_1 link down"]


def test_a_nic_on_the_wrong_link_layer(tmp_path):
    _tree(tmp_path)
    _all_ports(tmp_path, link_layer="InfiniBand")
    _port(tmp_path, "mlx5_0", link_layer="Ethernet")
    facts = _facts(tmp_path)
    assert _messages("gpu-02", facts) == ["gpu-02: mlx5_0 is ethernet, dgx-h100's is infiniband"]
    # A VPI card runs what the pool's compute fabric needs: RoCE wants every compute port Ethernet.
    got = _messages("gpu-02", facts, fabric="roce")
    assert got[0] == "gpu-02: mlx5_3 is infiniband, the compute fabric (roce) needs ethernet"
    assert len(got) == len(DGX.compute_nics) - 1


def test_a_link_slower_than_the_sku_names_its_speed(tmp_path):
    _tree(tmp_path)
    _all_ports(tmp_path, state="4: ACTIVE", rate="400 Gb/sec (4X NDR)")
    _port(tmp_path, "mlx5_6", rate="200 Gb/sec (4X HDR)")
    facts = _facts(tmp_path)
    assert _messages("gpu-05", facts) == ["gpu-05: mlx5_6 runs at 200 Gb/s, dgx-h100's at 400"]
    # A fabric run below the NICs' own speed sets what the compute ports must run at.
    got = _messages("gpu-05", facts, speed_gbps=200)
    assert "gpu-05: mlx5_0 runs at 400 Gb/s, the compute fabric at 200" in got
    assert not any("mlx5_6" in m for m in got)


def test_the_netdev_speed_stands_in_for_a_missing_rate(tmp_path):
    _tree(tmp_path)
    (tmp_path / "sys/class/infiniband/mlx5_6/ports/1/rate").unlink()
    _write(tmp_path, "sys/class/net/ibp154s0/speed", "200000")
    assert _messages("gpu-05", _facts(tmp_path)) == ["gpu-05: mlx5_6 runs at 200 Gb/s, dgx-h100's at 400"]


def test_fewer_nvme_data_drives(tmp_path):
    _tree(tmp_path)
    _nvme(tmp_path, [SECTORS_1_92TB] * 2 + [SECTORS_3_84TB] * 8)
    assert _messages("gpu-01", _facts(tmp_path)) == []
    shutil.rmtree(tmp_path / "sys/block")
    _nvme(tmp_path, [SECTORS_1_92TB] * 2 + [SECTORS_3_84TB] * 4)
    assert _messages("gpu-01", _facts(tmp_path)) == ["gpu-01: 4 NVMe data drives found, dgx-h100 has 8 (of 3.84 TB)"]


def test_an_nvme_drive_of_a_size_the_sku_has_not(tmp_path):
    _tree(tmp_path)
    _nvme(tmp_path, [SECTORS_1_92TB] * 2 + [SECTORS_3_84TB] * 8 + [2 * SECTORS_3_84TB])
    assert _messages("gpu-01", _facts(tmp_path)) == [
        "gpu-01: nvme10n1 (7.68 TB) found, dgx-h100 has no NVMe drive of that size"]


def test_memory_within_what_firmware_keeps_passes_and_below_it_fails(tmp_path):
    _tree(tmp_path)
    _write(tmp_path, "proc/meminfo", f"MemTotal:       {int(2048 * 2**20 * 0.98)} kB")
    assert _messages("gpu-04", _facts(tmp_path)) == []
    _write(tmp_path, "proc/meminfo", f"MemTotal:       {1536 * 2**20} kB")
    assert _messages("gpu-04", _facts(tmp_path)) == [
        "gpu-04: 1536 GiB of memory found, dgx-h100 has 2048 (more than 4% below; firmware and the kernel keep about 2%)"]


def test_numa_nodes_and_cpus_against_the_sku(tmp_path):
    _tree(tmp_path)
    facts = _facts(tmp_path)
    one = dict(facts, numa_nodes=facts["numa_nodes"][:1])
    assert _messages("gpu-06", one) == ["gpu-06: 1 NUMA node found, dgx-h100 has 2"]
    # SMT off: half the CPUs, each node without its sibling threads.
    _write(tmp_path, "sys/devices/system/node/node0/cpulist", "0-55")
    _write(tmp_path, "sys/devices/system/node/node1/cpulist", "56-111")
    _write(tmp_path, "proc/cpuinfo", "\n".join(
        f"processor\t: {i}\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n" for i in range(112)))
    assert _messages("gpu-06", _facts(tmp_path)) == [
        "gpu-06: NUMA 0 has CPUs 0-55, dgx-h100's has 0-55,112-167",
        "gpu-06: NUMA 1 has CPUs 56-111, dgx-h100's has 56-111,168-223",
        "gpu-06: 112 CPUs found, dgx-h100 has 224 (SMT off?)"]


def test_the_cpu_model_is_compared_by_its_model_number(tmp_path):
    _tree(tmp_path)
    cpuinfo = "".join(f"processor\t: {i}\nmodel name\t: Intel(R) Xeon(R) Platinum {{}}\n\n" for i in range(224))
    _write(tmp_path, "proc/cpuinfo", cpuinfo.format(*["8480C"] * 224))
    assert _messages("gpu-06", _facts(tmp_path)) == []
    _write(tmp_path, "proc/cpuinfo", cpuinfo.format(*["8468"] * 224))
    assert _messages("gpu-06", _facts(tmp_path)) == [
        "gpu-06: CPU is Intel(R) Xeon(R) Platinum 8468, dgx-h100's is Intel Xeon Platinum 8480C"]


def test_nics_missing_extra_and_on_other_addresses(tmp_path):
    _tree(tmp_path)
    facts = _facts(tmp_path)
    nics = [n for n in facts["nics"] if n["name"] != "mlx5_9"]
    moved = next(n for n in nics if n["name"] == "mlx5_4")
    moved.update(bdf="0000:50:00.0", numa=1, netdev="ibp80s0", device="0x101b")
    nics.append(dict(moved, name="mlx5_12", bdf="0000:e0:00.0"))
    assert _messages("gpu-08", dict(facts, nics=nics)) == [
        "gpu-08: mlx5_4 is at 0000:50:00.0, dgx-h100's at 0000:4f:00.0",
        "gpu-08: mlx5_4 is on NUMA 1, dgx-h100's on NUMA 0",
        "gpu-08: mlx5_4's netdev is ibp80s0, dgx-h100's is ibp79s0",
        "gpu-08: mlx5_9 not found, dgx-h100 has it (compute, NUMA 1)",
        "gpu-08: mlx5_4 is 0x15b3:0x101b, dgx-h100's is 0x15b3:0x1021",
        "gpu-08: mlx5_12 found (0000:e0:00.0, NUMA 1), dgx-h100 has no such NIC"]


def test_gpus_of_another_model_are_named_together(tmp_path):
    _tree(tmp_path)
    facts = _facts(tmp_path)
    gpus = [dict(g, device="0x2331") if g["index"] < 2 else g for g in facts["gpus"]]
    assert _messages("gpu-09", dict(facts, gpus=gpus)) == [
        "gpu-09: GPU0 and GPU1 are 0x10de:0x2331, dgx-h100's are 0x10de:0x2330"]


def test_unknown_facts_are_not_mismatches_but_listed_as_not_checked(tmp_path):
    _tree(tmp_path)
    shutil.rmtree(tmp_path / "sys/block")
    for nic in DGX.compute_nics:
        (tmp_path / f"sys/class/infiniband/{nic.rdma}/ports/1/state").unlink()
        (tmp_path / f"sys/class/net/{nic.netdev}/operstate").unlink()
        (tmp_path / f"sys/class/net/{nic.netdev}/carrier").unlink()
    facts = _facts(tmp_path)
    assert hardware_check.check("gpu-01", facts, DGX) == []
    lines = hardware_check.not_checked("gpu-01", facts, DGX)
    assert "gpu-01: NVMe drives not checked (unknown on the host)" in lines
    assert "gpu-01: link state not checked (unknown on the host): " + ", ".join(
        n.rdma for n in DGX.compute_nics) in lines
    bare = {k: None for k in facts}
    assert hardware_check.check("gpu-01", bare, DGX) == []
    assert "gpu-01: GPUs not checked (no PCI facts)" in hardware_check.not_checked("gpu-01", bare, DGX)
    # What the SKU does not say is not checked either: hgx-h100 gives no memory size.
    facts["memory_kb"] = 1
    assert "gpu-01: memory not checked (hgx-h100 does not say)" in hardware_check.not_checked(
        "gpu-01", facts, CATALOG.nodes["hgx-h100"])


def test_drift_between_two_discoveries(tmp_path):
    manifest = _tree(tmp_path)
    _all_ports(tmp_path, state="4: ACTIVE", rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand")
    _nvme(tmp_path, [SECTORS_1_92TB] * 2 + [SECTORS_3_84TB] * 8)
    before = _facts(tmp_path)
    assert hardware_check.drift(before, before) == []
    _remove_gpu(tmp_path, manifest, "GPU4")
    _port(tmp_path, "mlx5_4", state="1: DOWN")
    _port(tmp_path, "mlx5_6", rate="200 Gb/sec (4X HDR)")
    (tmp_path / "sys/block/nvme9n1/size").unlink()
    shutil.rmtree(tmp_path / "sys/block/nvme9n1")
    _write(tmp_path, "proc/cmdline", "iommu=pt default_hugepagesz=1G")
    after = _facts(tmp_path)
    gpu4 = manifest["bus_ids"]["GPU4"]
    assert hardware_check.drift(before, after, host="gpu-07") == [
        f"gpu-07: GPUs 8 -> 7; gone {gpu4} (GPU4, NUMA 1)",
        "gpu-07: mlx5_4 link: ACTIVE -> DOWN",
        "gpu-07: mlx5_6 speed: 400 Gb/s -> 200 Gb/s",
        "gpu-07: NVMe drives 10 -> 9; gone 1 x 3.84 TB SAMSUNG MZQL23T8HCLS-00A07"]
    settings = hardware_check.drift(before, after, settings=True)
    assert settings[-1] == "kernel command line: +iommu=pt +default_hugepagesz=1G"


def test_drift_ignores_counters_that_move_on_their_own_and_small_memory_changes(tmp_path):
    _tree(tmp_path)
    before = _facts(tmp_path)
    after = json.loads(json.dumps(before))
    after["hugepages"]["2048kB"]["free_hugepages"] = 7
    after["memory_kb"] = int(before["memory_kb"] * 0.995)
    assert hardware_check.drift(before, after, settings=True) == []
    after["hugepages"]["2048kB"]["nr_hugepages"] = 512
    assert hardware_check.drift(before, after) == []
    assert hardware_check.drift(before, after, settings=True) == ["hugepages 2048kB: 0 -> 512"]


def test_an_unknown_fabric_kind_is_refused(tmp_path):
    _tree(tmp_path)
    with pytest.raises(ValueError, match="fabric 'ib' is not one of infiniband, roce"):
        hardware_check.check("gpu-01", _facts(tmp_path), DGX, fabric="ib")


# PCIe links, firmware and pinned versions (issue 40, section 4). The kernel's formats are those of
# a real host's sysfs (railyard/data/fixtures/topologies/lenovo_sd665n_v3_nic_numa.txt: pcilnkspd
# "32.0 GT/s PCIe", pcilnkwdth 16, ConnectX-7 firmware 28.37.1014).

def _bdf(root: Path, device: str) -> str:
    return json.loads((root / hwtree.MANIFEST).read_text())["bus_ids"][device]


def _link(root: Path, device: str, speed: str | None = None, width: str | None = None) -> None:
    d = f"sys/bus/pci/devices/{_bdf(root, device)}"
    if speed is not None:
        _write(root, f"{d}/current_link_speed", speed)
    if width is not None:
        _write(root, f"{d}/current_link_width", width)


def test_a_nic_trained_at_a_lower_pcie_speed_or_width_is_degraded_and_named_with_its_address(tmp_path):
    _tree(tmp_path)
    _link(tmp_path, "mlx5_6", speed="16.0 GT/s PCIe")
    _link(tmp_path, "mlx5_9", width="8")
    got = hardware_check.check("gpu-3", _facts(tmp_path), DGX)
    assert [(m.kind, str(m), m.planned, m.found) for m in got] == [
        ("pcie-degraded", "gpu-3: mlx5_6 (0000:9a:00.0) PCIe link at 16 GT/s x16, dgx-h100's 32 GT/s x16",
         "32 GT/s x16", "16 GT/s x16"),
        ("pcie-degraded", "gpu-3: mlx5_9 (0000:c0:00.0) PCIe link at 32 GT/s x8, dgx-h100's 32 GT/s x16",
         "32 GT/s x16", "32 GT/s x8")]


def test_a_gpu_is_judged_on_its_pcie_width_only_because_an_idle_gpu_lowers_its_speed(tmp_path):
    _tree(tmp_path)
    _link(tmp_path, "GPU2", speed="2.5 GT/s PCIe")  # an idle H100: Gen1, healthy
    assert hardware_check.check("gpu-0", _facts(tmp_path), DGX) == []
    _link(tmp_path, "GPU2", width="8")
    [m] = hardware_check.check("gpu-0", _facts(tmp_path), DGX)
    assert (m.kind, m.what, m.found, m.planned) == ("pcie-degraded", "gpus.GPU2.pcie_link", "x8", "x16")


def test_without_the_skus_link_a_device_is_held_to_its_own_maximum(tmp_path):
    _tree(tmp_path, "hgx-h100")  # no PCIe link in the catalog: the tree shows none
    bdf = _bdf(tmp_path, "mlx5_0")
    for name, text in (("max_link_speed", "32.0 GT/s PCIe"), ("max_link_width", "16"),
                       ("current_link_speed", "32.0 GT/s PCIe"), ("current_link_width", "4")):
        _write(tmp_path, f"sys/bus/pci/devices/{bdf}/{name}", text)
    got = [m for m in hardware_check.check("n", _facts(tmp_path), CATALOG.nodes["hgx-h100"]) if m.kind == "pcie-degraded"]
    assert [str(m) for m in got] == [f"n: mlx5_0 ({bdf}) PCIe link at 32 GT/s x4, its maximum 32 GT/s x16"]


def test_firmware_driver_and_kernel_are_held_to_the_stacks_pins_and_unknown_ones_are_not_checked(tmp_path):
    hwtree.build_hwtree(DGX, tmp_path, nic_firmware="28.37.1014")
    _write(tmp_path, "sys/class/infiniband/mlx5_4/fw_ver", "28.39.1002")
    facts = _facts(tmp_path)
    facts["kernel"]["release"] = "6.1.0-18-amd64"
    pins = hardware_check.Pins(nic_firmware="28.37.1014", nvidia_driver="550.54.15", kernel="6.1.0-18-amd64")
    got = hardware_check.check("gpu-1", facts, DGX, pins=pins)
    assert [(m.kind, str(m)) for m in got] == [
        ("firmware", "gpu-1: mlx5_4 runs firmware 28.39.1002, the stack pins 28.37.1014")]
    # The tree has no nvidia module: the driver pin is not checked, and says so.
    assert "gpu-1: NVIDIA driver not checked (unknown on the host)" in hardware_check.not_checked(
        "gpu-1", facts, DGX, pins=pins)
    facts["nvidia_driver"] = "535.104.05"
    facts["kernel"]["release"] = "6.1.0-17-amd64"
    assert [(m.kind, m.found, m.planned) for m in hardware_check.check("gpu-1", facts, DGX, pins=pins)][1:] == [
        ("driver-version", "535.104.05", "550.54.15"), ("kernel-version", "6.1.0-17-amd64", "6.1.0-18-amd64")]
    # Nothing pinned: nothing compared.
    assert hardware_check.check("gpu-1", facts, DGX) == []


def test_every_mismatch_has_a_stable_kind(tmp_path):
    _tree(tmp_path)
    shutil.rmtree(os.path.realpath(tmp_path / f"sys/bus/pci/devices/{_bdf(tmp_path, 'GPU5')}"))
    (tmp_path / f"sys/bus/pci/devices/{_bdf(tmp_path, 'GPU5')}").unlink()
    _port(tmp_path, "mlx5_0", state="1: DOWN", phys_state="3: Disabled")
    got = hardware_check.check("gpu-2", _facts(tmp_path), DGX)
    assert [m.kind for m in got] == ["gpu-missing", "nic-down"]
    assert all(m.kind in hardware_check.KINDS for m in got)


def test_a_lab_tree_on_a_slower_fabric_shows_its_compute_ports_trained_at_the_fabrics_speed(tmp_path):
    _tree(tmp_path)
    assert hwtree.set_link_speed(tmp_path, DGX, 200) == [n.rdma for n in DGX.compute_nics]
    facts = _facts(tmp_path)
    assert (tmp_path / "sys/class/infiniband/mlx5_0/ports/1/rate").read_text() == "200 Gb/sec (4X HDR)\n"
    # Held to the HDR fabric it is cabled to, the node is as planned; held to its NICs' own 400, it is not.
    assert hardware_check.check("gpu-0", facts, DGX, fabric="infiniband", speed_gbps=200) == []
    assert {m.kind for m in hardware_check.check("gpu-0", facts, DGX)} == {"nic-speed"}
    assert hwtree.set_link_speed(tmp_path, DGX, 400) == []  # at their own speed: nothing to change


def _lab_config(verify: dict) -> dict:
    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[3] / "stacks" / "Pulumi.lab.yaml").read_text())["config"]
    return {**config, "railyard:verify": verify}


def test_the_verify_keys_are_read_with_their_paths_named_and_a_numeric_version_refused_with_a_hint():
    from railyard.model.errors import SpecError
    from railyard.stack import from_config

    spec, _ = from_config(_lab_config({"onDrift": "skip-node", "pins": {"nicFirmware": "28.39.1002",
                                                                       "kernel": "6.1.0-18-amd64"}}), "t")
    assert (spec.verify.on_drift, spec.verify.pins.nic_firmware, spec.verify.pins.kernel,
            spec.verify.pins.nvidia_driver) == ("skip-node", "28.39.1002", "6.1.0-18-amd64", None)
    assert from_config(_lab_config({}), "t")[0].verify.on_drift is None
    with pytest.raises(SpecError) as err:
        from_config(_lab_config({"onDrift": "skip", "pins": {"nvidiaDriver": 550.54, "bios": "1.2"}}), "t")
    problems = {p.path: p for p in err.value.problems}
    assert set(problems) == {"railyard:verify.onDrift", "railyard:verify.pins.nvidiaDriver", "railyard:verify.pins.bios"}
    assert "skip-node" in str(problems["railyard:verify.onDrift"])
    assert 'quote it, e.g. "550.54.15"' in str(problems["railyard:verify.pins.nvidiaDriver"])
