"""The site playbook on lab hardware trees: check mode, converge, idempotence, verify, refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from railyard.model.topology import Topology, parse_topology_file
from tests.roles.conftest import DATASET, make_host, read_json

DGX_H100_PAIRING = {"GPU0": "mlx5_0", "GPU1": "mlx5_3", "GPU2": "mlx5_4", "GPU3": "mlx5_5",
                    "GPU4": "mlx5_6", "GPU5": "mlx5_9", "GPU6": "mlx5_10", "GPU7": "mlx5_11"}

pytestmark = pytest.mark.roles


def _tree_files(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = p.read_bytes().hex()
    return out


@pytest.fixture(scope="module", params=["dgx-h100", "vela-a100"])
def converged(request, tmp_path_factory, s3):
    """One host per layout taken through the whole sequence; each step's result is kept."""
    host = make_host(request.param, tmp_path_factory.mktemp(request.param), s3.url)
    before = _tree_files(host.hw)
    gets = len(s3.gets)  # the stub serves every test of the session
    steps = {"check": host.run(check=True)}
    steps["after_check"] = {"hw": _tree_files(host.hw) == before,
                            "etc": not any(host.etc.rglob("*")),
                            "cache": not host.cache.exists() or not any(host.cache.rglob("*")),
                            "gets": len(s3.gets) - gets}
    steps["converge"] = host.run()
    gets = len(s3.gets)
    steps["again"] = host.run()
    steps["gets_again"] = len(s3.gets) - gets
    return host, steps


def test_check_mode_reports_changes_and_writes_nothing(converged):
    host, steps = converged
    run = steps["check"]
    assert run.rc == 0, run.failed_tasks() or run.stdout[-3000:]
    assert run.changed() > 0, "a fresh host must show pending changes in check mode"
    assert steps["after_check"]["hw"], f"{host.sku}: check mode wrote into the hardware tree"
    assert steps["after_check"]["etc"], f"{host.sku}: check mode wrote files under the etc root"
    assert steps["after_check"]["cache"], f"{host.sku}: check mode staged data"
    assert steps["after_check"]["gets"] == 0, "check mode downloaded objects"
    assert "--- before" in run.stdout, "check mode shows diffs"


def test_converge_then_second_run_changes_nothing_and_verify_passes(converged):
    host, steps = converged
    first, again = steps["converge"], steps["again"]
    assert first.rc == 0, first.failed_tasks() or first.stdout[-3000:]
    assert first.changed() > 0
    assert again.rc == 0, again.failed_tasks() or again.stdout[-3000:]
    assert again.changed() == 0, f"{host.sku}: second run changed {again.changed_tasks()}"
    assert "Verify the tuned state" in again.stdout and "verify : The tuned state is the plan's" in again.stdout


def test_an_ethernet_hosts_rails_and_only_they_speak_lldp(converged):
    host, _ = converged
    dropin = host.etc / "etc/lldpd.d/railyard.conf"
    if host.sku == "dgx-h100":  # an InfiniBand fabric: no LLDP, nothing written
        assert "lldp_interfaces" not in host.vars and not dropin.exists()
        return
    rails = host.vars["lldp_interfaces"]
    assert rails and len(rails) == len(host.vars["gpu_nic_affinity_compute_nics"])
    assert dropin.read_text() == ("# Managed by Railyard (role lldp); do not edit.\n"
                                  f"configure system interface pattern {','.join(rails)}\n"
                                  "configure lldp portidsubtype ifname\nconfigure lldp tx-interval 30\n")


def test_hugepages_are_split_over_numa_nodes_as_planned(converged):
    host, _ = converged
    for node, count in host.vars["hugepages_per_node"].items():
        nr = host.hw / f"sys/devices/system/node/node{node}/hugepages/hugepages-1048576kB/nr_hugepages"
        assert nr.read_text().strip() == str(count), f"{host.sku} node{node}"
    dropin = (host.etc / "etc/default/grub.d/railyard-hugepages.cfg").read_text()
    assert dropin.startswith("# Managed by Railyard")
    per_node = ",".join(f"{k}:{v}" for k, v in sorted(host.vars["hugepages_per_node"].items()))
    assert f"hugepagesz=1G hugepages={per_node}" in dropin


def test_affinity_json_has_the_topology_import_schema_and_the_plan_pairing(converged):
    host, _ = converged
    doc = read_json(host.etc / "etc/railyard/affinity.json")
    cli = Topology.from_sysfs(host.hw / "sys", compute_nics=host.vars["gpu_nic_affinity_compute_nics"],
                              nvlink_class=host.vars["gpu_nic_affinity_nvlink_class"] or None).to_json()
    vms = doc.pop("vms")
    assert doc == cli, "affinity.json is what `railyard topology import --json` prints for the same tree"
    pairing = {g["name"]: g["nic"] for g in doc["gpus"]}
    assert pairing == host.vars["verify_expected_pairing"]
    if host.sku == "dgx-h100":
        assert pairing == DGX_H100_PAIRING
        assert vms == []
    else:
        assert vms == host.vars["gpu_nic_affinity_vms"] and vms[0]["gpus"] == [f"GPU{i}" for i in range(8)]


def test_nccl_topology_file_reads_back_with_the_same_pairing_and_nccl_conf_lists_compute_nics(converged):
    host, _ = converged
    xml = host.etc / "etc/railyard/nccl-topo.xml"
    assert xml.read_text().startswith("<!-- Managed by Railyard")
    topo = parse_topology_file(xml)
    assert topo.complete, topo.notes
    names = {g.pci_bus_id: g.name for g in Topology.from_sysfs(host.hw / "sys").gpus}
    want = host.vars["verify_expected_pairing"]
    got = {names[g]: n for g, n in topo.pairing().items()}
    assert got == want
    conf = (host.etc / "etc/nccl.conf").read_text().splitlines()
    assert conf[0].startswith("# Managed by Railyard")
    settings = dict(line.split("=", 1) for line in conf if line and not line.startswith("#"))
    assert settings["NCCL_IB_HCA"] == "=" + ",".join(f"{n}:1" for n in host.vars["gpu_nic_affinity_compute_nics"])
    assert settings["NCCL_CROSS_NIC"] == "0"
    assert settings["NCCL_TOPO_FILE"] == "/etc/railyard/nccl-topo.xml"


def test_nic_interrupts_are_pinned_to_their_numa_node(converged):
    host, _ = converged
    manifest = read_json(host.hw / "railyard-hwtree.json")
    if host.sku != "dgx-h100":
        pytest.skip("vela-a100's CPU lists are unknown to the catalog: IRQs are left alone")
    for nic, irqs in manifest["irqs"].items():
        if nic.startswith("GPU"):
            # On bare metal gpu_nic_affinity places NIC vectors only; a GPU's stay where the kernel put them.
            assert {(host.hw / f"proc/irq/{irq}/smp_affinity_list").read_text().strip() for irq in irqs} == {"0-223"}
            continue
        numa = 0 if int(nic.split("_")[1]) < 6 else 1
        want = {0: "0-55,112-167", 1: "56-111,168-223"}[numa]
        for irq in irqs:
            assert (host.hw / f"proc/irq/{irq}/smp_affinity_list").read_text().strip() == want, f"{nic} irq {irq}"


def test_verify_fails_on_an_edited_affinity_map_and_on_a_moved_irq(converged):
    host, _ = converged
    amap = host.etc / "etc/railyard/affinity.json"
    good = amap.read_text()
    doc = json.loads(good)
    doc["gpus"][0]["nic"] = "mlx5_99"  # a hand edit: GPU0 paired with a NIC the plan never named
    amap.write_text(json.dumps(doc))
    try:
        run = host.run(tags="verify")
    finally:
        amap.write_text(good)
    assert run.rc != 0 and "verify: the host pairs GPU0->mlx5_99" in run.stdout, run.stdout[-2000:]
    if host.sku != "dgx-h100":  # the only layout whose IRQs the roles pin
        return
    irq = host.hw / f"proc/irq/{read_json(host.hw / 'railyard-hwtree.json')['irqs']['mlx5_0'][0]}/smp_affinity_list"
    pinned = irq.read_text()
    irq.write_text("56-111\n")
    try:
        run = host.run(tags="verify")
    finally:
        irq.write_text(pinned)
    assert run.rc != 0 and "IRQs not on their NIC's NUMA node: mlx5_0 irq" in run.stdout, run.stdout[-2000:]


def test_sriov_creates_vfs_persists_them_in_udev_and_sets_vf_macs(converged):
    host, _ = converged
    rules = host.etc / "etc/udev/rules.d/70-railyard-sriov.rules"
    if not host.vars["sriov_pfs"]:
        assert not rules.exists()
        return
    text = rules.read_text()
    assert text.startswith("# Managed by Railyard")
    state = read_json(host.root / "ip/ip-state.json")
    for pf in host.vars["sriov_pfs"]:
        bdf = read_json(host.hw / "railyard-hwtree.json")["bus_ids"][pf["name"]]
        netdev = read_json(host.hw / "railyard-hwtree.json")["netdevs"][pf["name"]]
        assert (host.hw / f"sys/bus/pci/devices/{bdf}/sriov_numvfs").read_text().strip() == str(pf["numvfs"])
        assert f'KERNEL=="{netdev}", ATTR{{device/sriov_numvfs}}="{pf["numvfs"]}"' in text
        for vf in pf["vfs"]:
            assert state[netdev][str(vf["index"])]["mac"] == vf["mac"]
            assert f"vf {vf['index']} mac {vf['mac']} trust off spoofchk on" in text


def test_kernel_command_line_drop_ins_and_reboot_required(converged):
    host, steps = converged
    iommu = (host.etc / "etc/default/grub.d/railyard-iommu.cfg").read_text()
    assert "intel_iommu=on iommu=pt" in iommu
    # The lab tree's /proc/cmdline was not booted with either: both roles say a reboot is due and
    # none happened (reboot_ok is false).
    assert "reboot the host to apply it" in steps["again"].stdout
    assert "Reboot to apply" not in steps["converge"].stdout.split("RUNNING HANDLER")[-1] or \
        "skipping" in steps["converge"].stdout


def test_dataset_is_staged_verified_and_a_second_run_transfers_nothing(converged, s3):
    host, steps = converged
    dest = host.cache / "datasets"
    for key, body in DATASET.items():
        if key.startswith("train/"):
            assert (dest / key[len("train/"):]).read_bytes() == body, key
    assert not (dest / "other.bin").exists() and not list(dest.rglob("*.part"))
    assert steps["gets_again"] == 0, "the idempotent run downloaded objects"


def test_staging_resumes_a_partial_download(tmp_path, s3):
    host = make_host("dgx-h100", tmp_path / "h", s3.url)
    dest = host.cache / "datasets"
    dest.mkdir(parents=True)
    body = DATASET["train/shard-000.bin"]
    (dest / "shard-000.bin.part").write_bytes(body[:1000])
    before = len(s3.gets)
    run = host.run(tags="dataset_cache")
    assert run.rc == 0, run.failed_tasks()
    assert (dest / "shard-000.bin").read_bytes() == body
    assert ("train/shard-000.bin", "bytes=1000-") in s3.gets[before:]


def test_more_vfs_than_sriov_totalvfs_are_refused_before_anything_changes(tmp_path, s3):
    host = make_host("vela-a100", tmp_path / "v", s3.url)
    pfs = [dict(pf, numvfs=200, vfs=[]) for pf in host.vars["sriov_pfs"]]
    run = host.run(extra={"sriov_pfs": pfs}, tags="sriov")
    assert run.rc != 0
    msg = " ".join(run.failed_tasks())
    assert "mlx5_0: 200 VFs requested but" in msg and "supports at most 127 (sriov_totalvfs)" in msg, msg
    numvfs = list((host.hw / "sys/bus/pci/devices").glob("*/sriov_numvfs"))
    assert numvfs and all(p.read_text().strip() == "0" for p in numvfs), "nothing changed"


def test_a_bad_variable_of_a_late_role_is_refused_before_any_role_changes_the_host(tmp_path, s3):
    # dataset_cache and gpu_nic_affinity run after hugepages and iommu have written their drop-ins:
    # their variables are checked against their argument specs before the first role runs.
    host = make_host("dgx-h100", tmp_path / "h", s3.url)
    run = host.run(extra={"dataset_cache_fstype": "btrfs", "gpu_nic_affinity_nccl_cross_nic": 5})
    assert run.rc != 0
    msg = " ".join(run.failed_tasks())
    assert "dataset_cache_fstype" in msg and "btrfs" in msg, msg
    assert "gpu_nic_affinity_nccl_cross_nic" in msg, msg
    assert not list(host.etc.rglob("*.cfg")), "no role wrote its drop-in"
    assert not host.cache.exists() or not any(host.cache.iterdir())
