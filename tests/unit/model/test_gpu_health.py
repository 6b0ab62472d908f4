"""The GPU health judges on real tool output (railyard/data/fixtures/gpu/SOURCES.md): each reader
takes the real format, and each judge finds the fault a real capture shows and nothing in a
healthy one. Where no real capture of a fault exists (nvidia-smi XML with ECC errors), a copy of a
real one has one value changed in place, and the test says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from railyard.model import gpu_health as gh
from railyard.model.catalog import load_catalog

DATA = Path(__file__).resolve().parents[3] / "railyard" / "data" / "fixtures" / "gpu"
A100_XML = (DATA / "nvidia-smi-q-x-a100-sxm4-mig-healthy.xml").read_text()


def test_nvidia_smi_xml_is_read_per_gpu_with_its_pci_id_and_health_counters():
    log = gh.parse_nvidia_smi(A100_XML)
    assert (log.driver_version, log.attached_gpus) == ("535.54.03", 4)
    [gpu] = log.gpus  # the capture kept one <gpu> of the four its header counts
    assert gpu.bus_id == "00000000:01:00.0" and gpu.product_name == "NVIDIA A100-SXM4-80GB"
    assert gpu.vendor_device == ("0x10de", "0x20b2")
    assert (gpu.ecc_volatile_uncorrectable, gpu.ecc_aggregate_uncorrectable) == (0, 0)
    # MIG is on: the driver shows no row remapping (N/A) and no retirement, which are unknowns.
    assert (gpu.remap_pending, gpu.remap_failure, gpu.retirement_pending, gpu.throttled_by) == (None, None, None, ())


def test_a_healthy_gpu_has_no_finding_and_a_missing_one_is_counted():
    log = gh.parse_nvidia_smi(A100_XML)
    assert gh.judge_gpus(log, count=1, pci_id=("0x10de", "0x20b2")) == []
    [f] = gh.judge_gpus(log, count=4, pci_id=("0x10de", "0x20b2"))
    assert (f.kind, f.planned, f.found) == ("gpu-count", "4", "1")


def test_a_gpu_of_another_model_than_the_skus_is_named_by_its_bus_address():
    dgx_a100 = load_catalog().nodes["dgx-a100"].gpus[0]  # the 40 GB part, 0x20b0
    [f] = gh.judge_gpus(gh.parse_nvidia_smi(A100_XML), count=1, pci_id=(dgx_a100.pci_vendor, dgx_a100.pci_device))
    assert f.kind == "gpu-model" and f.gpu == "00000000:01:00.0" and f.found == "0x10de:0x20b2"


def test_uncorrectable_ecc_and_an_active_hardware_slowdown_are_found_in_the_tools_format():
    # Changed in the copy: a volatile DRAM uncorrectable count of 2, and hw_slowdown Active (no
    # real capture of either was found; the elements are the real ones of driver 535).
    xml = (A100_XML.replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>", 1)
           .replace("<clocks_event_reason_hw_slowdown>Not Active</clocks_event_reason_hw_slowdown>",
                    "<clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>")
           .replace("<clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle>",
                    "<clocks_event_reason_gpu_idle>Active</clocks_event_reason_gpu_idle>"))
    found = gh.judge_gpus(gh.parse_nvidia_smi(xml), count=1, pci_id=("0x10de", "0x20b2"))
    assert [(f.kind, f.found) for f in found] == [("ecc-uncorrectable", "2"), ("gpu-throttled", "hw_slowdown")]


def test_not_nvidia_smi_output_is_refused():
    with pytest.raises(ValueError, match="not nvidia-smi's XML"):
        gh.parse_nvidia_smi("<html></html>")


def test_xids_are_read_with_gpu_and_code_from_real_kernel_lines():
    xids = gh.parse_xids((DATA / "xid-13-109-dmesg.txt").read_text())
    assert [(x.bus, x.code) for x in xids] == [("0000:cb:00", 13)] * 3 + [("0000:cb:00", 109)]
    found = gh.judge_kernel_log((DATA / "xid-13-109-dmesg.txt").read_text())
    assert [(f.kind, f.gpu, f.found) for f in found] == [("xid", "0000:cb:00", "Xid 13"), ("xid", "0000:cb:00", "Xid 109")]
    assert found[0].message.startswith("0000:cb:00: Xid 13 x3 (")
    nvlink = gh.judge_kernel_log((DATA / "xid-45-after-149-145-kernel.txt").read_text())
    assert sorted({f.gpu for f in nvlink}) == ["0000:97:00", "0000:ba:00", "0000:dc:00", "0000:ed:00"]
    assert gh.judge_kernel_log((DATA / "xid-45-after-149-145-kernel.txt").read_text(), ignore=[45]) == []


def test_a_gpu_fallen_off_the_bus_with_no_xid_line_is_still_found():
    text = (DATA / "gpu-fallen-off-bus-no-xid-dmesg.txt").read_text()
    assert gh.parse_xids(text) == []
    assert [(f.kind, f.gpu) for f in gh.judge_kernel_log(text)] == [("gpu-fell-off-bus", "0000:b3:00.0")]


def test_an_h100_lost_with_xid_79_is_one_xid_and_one_gpu_off_the_bus_however_often_the_driver_says_so():
    """A real H100's kernel log (SOURCES.md): the Xid 79 and the driver's own line after it, then
    the module's reload hours later failing to probe the same GPU."""
    lost = (DATA / "xid-79-h100-dmesg.txt").read_text()
    reload = (DATA / "gpu-fallen-off-bus-h100-reload-dmesg.txt").read_text()
    [xid] = gh.parse_xids(lost)
    assert (xid.bus, xid.code) == ("0000:5d:00", 79) and xid.detail.endswith("GPU has fallen off the bus.")
    assert [(f.kind, f.gpu, f.found) for f in gh.judge_kernel_log(lost)] == [
        ("xid", "0000:5d:00", "Xid 79"), ("gpu-fell-off-bus", "0000:5d:00.0", "fallen off")]
    assert [(f.kind, f.gpu) for f in gh.judge_kernel_log(reload)] == [("gpu-fell-off-bus", "0000:5d:00.0")]
    both = gh.judge_kernel_log(lost + reload)
    assert [(f.kind, f.gpu) for f in both] == [("xid", "0000:5d:00"), ("gpu-fell-off-bus", "0000:5d:00.0")]
    # Ignoring the Xid leaves the GPU off the bus.
    assert [f.kind for f in gh.judge_kernel_log(lost, ignore=[79])] == ["gpu-fell-off-bus"]


def test_nvlink_status_is_judged_against_the_skus_link_count_and_speed():
    text = (DATA / "nvidia-smi-nvlink-status-h100-gpu0.txt").read_text()
    links = gh.parse_nvlink_status(text)
    assert list(links) == [0] and len(links[0]) == 18 and set(links[0].values()) == {26.562}
    assert gh.judge_nvlink(links, per_gpu=18, link_gbps=26.562) == []
    # Changed in the copy: link 5 shown inactive, as the tool shows a link that is down.
    down = gh.parse_nvlink_status(text.replace("Link 5: 26.562 GB/s", "Link 5: <inactive>"))
    [f] = gh.judge_nvlink(down, per_gpu=18, link_gbps=None)
    assert (f.kind, f.gpu, f.found) == ("nvlink-down", "GPU 0", "17") and "(down: 5)" in f.message
    gb200 = gh.parse_nvlink_status((DATA / "nvidia-smi-nvlink-s-gb200-excerpt.txt").read_text())
    assert set(gb200[0].values()) == {53.125} and gh.judge_nvlink(gb200, per_gpu=18, link_gbps=None) == []
    b200_text = (DATA / "nvidia-smi-nvlink-s-b200-8gpu.txt").read_text()
    b200 = gh.parse_nvlink_status(b200_text)
    assert list(b200) == list(range(8)) and all(len(v) == 18 for v in b200.values())
    assert gh.judge_nvlink(b200, per_gpu=18, link_gbps=53.125) == []
    # Changed in the copy: GPU 6's link 17 trained at half the speed.
    [slow] = gh.judge_nvlink(gh.parse_nvlink_status(b200_text.replace(
        "\t Link 17: 53.125 GB/s\nGPU 7", "\t Link 17: 26.562 GB/s\nGPU 7")), per_gpu=18, link_gbps=53.125)
    assert (slow.kind, slow.gpu, slow.found) == ("nvlink-slow", "GPU 6", "26.562 GB/s")


def test_dcgm_diag_results_are_read_from_a_document_cut_short():
    results = gh.parse_dcgm_diag((DATA / "dcgmi-diag-r3-v4-pass-8gpu-excerpt.json").read_text())
    assert [(r.test, r.entity, r.status) for r in results] == [("diagnostic", f"GPU {i}", "Pass") for i in range(8)]
    assert gh.judge_dcgm(results) == []
    failed = [gh.DiagResult("diagnostic", "GPU 3", "Fail", ("GPU 3 calculated at approximately 12.1 gigaflops",)),
              gh.DiagResult("pcie", "GPU 0", "Skip"), gh.DiagResult("pcie", "GPU 1", "Warn")]
    assert [(f.kind, f.gpu, f.found) for f in gh.judge_dcgm(failed)] == [("dcgm-diag", "GPU 3", "Fail"),
                                                                         ("dcgm-diag", "GPU 1", "Warn")]
    assert gh.dcgm_skipped(failed) == ["DCGM pcie skipped (GPU 0)"]


def test_a_test_dcgm_skipped_on_many_gpus_is_said_in_one_short_line():
    # Changed in the copy: the eight GPUs' diagnostic skipped, as DCGM skips a test it cannot run.
    text = (DATA / "dcgmi-diag-r3-v4-pass-8gpu-excerpt.json").read_text()
    results = gh.parse_dcgm_diag(text.replace('"Pass"', '"Skip"'))
    assert len(results) == 8 and gh.dcgm_skipped(results) == ["DCGM diagnostic skipped (GPU 0-7)"]
    some = [r for r in results if r.entity not in ("GPU 3", "GPU 4")]
    assert gh.dcgm_skipped(some) == ["DCGM diagnostic skipped (GPU 0-2, 5-7)"]
    # In the report's order, as before: a GPU listed out of turn starts a span of its own.
    shuffled = [gh.DiagResult("pcie", f"GPU {i}", "Skip") for i in (5, 1, 2)]
    assert gh.dcgm_skipped(shuffled) == ["DCGM pcie skipped (GPU 5, 1-2)"]


def test_a_whole_dcgm_3_document_names_each_result_by_its_gpus_and_keeps_its_info_whole():
    """DCGM 3's schema (microsoft/VirtualClient's kept level-3 run, SOURCES.md): `gpu_ids` for a
    GPU's tests, none for the node's, the info one string; its EUD test skipped, as DCGM skips it
    without its optional package."""
    results = gh.parse_dcgm_diag((DATA / "dcgmi-diag-r3-v3-1gpu-virtualclient.json").read_text())
    assert len(results) == 16 and {r.status for r in results} == {"Pass", "Skip"}
    assert [(r.test, r.entity) for r in results[:2]] == [("Denylist", None), ("NVML Library", None)]
    memory = next(r for r in results if r.test == "GPU Memory")
    assert (memory.entity, memory.info) == ("GPU 0", ("GPU 0 Allocated 15206918958 bytes (97.3%)",))
    assert gh.judge_dcgm(results) == [] and gh.dcgm_skipped(results) == ["DCGM EUD Test skipped (GPU 0)"]
    # Changed in the copy: the Diagnostic test failed, as a GPU whose compute falls short reports.
    text = (DATA / "dcgmi-diag-r3-v3-1gpu-virtualclient.json").read_text()
    i = text.index('"name" : "Diagnostic"')
    failed = text[:i] + text[i:].replace('"status" : "Pass"', '"status" : "Fail"', 1)
    [f] = gh.judge_dcgm(gh.parse_dcgm_diag(failed))
    assert (f.gpu, f.found) == ("GPU 0", "Fail") and f.message.startswith("GPU 0: DCGM Diagnostic Fail (GPU 0 Allocated")


def test_a_whole_dcgm_4_document_fails_on_its_deployment_test_and_says_the_gated_plugins_skipped():
    """DCGM 4.5.2's level 2 on a GB10 (glimmer-burnin's kept documents, SOURCES.md): the software
    test fails on persistence mode; memory and pcie pass where allowed, and are skipped, with no
    reason given, where the part is not on DCGM's list for them."""
    allowed = gh.parse_dcgm_diag((DATA / "dcgmi-diag-r2-v4-gb10-software-fail.json").read_text())
    assert [(r.test, r.entity, r.status) for r in allowed] == [
        ("software", "GPU 0", "Fail"), ("memory", "GPU 0", "Pass"), ("pcie", "GPU 0", "Pass")]
    assert allowed[1].info == ("Allocated 112427837082 bytes (87.5%)",)
    [f] = gh.judge_dcgm(allowed)
    assert (f.kind, f.gpu, f.planned, f.found) == ("dcgm-diag", "GPU 0", "Pass", "Fail")
    assert f.message.startswith("GPU 0: DCGM software Fail (Persistence Mode: Persistence mode for GPU 0 is disabled.")
    assert gh.dcgm_skipped(allowed) == []
    gated = gh.parse_dcgm_diag((DATA / "dcgmi-diag-r2-v4-gb10-plugins-skipped.json").read_text())
    assert [(r.test, r.status) for r in gated] == [("software", "Fail"), ("memory", "Skip"), ("pcie", "Skip")]
    assert [x.found for x in gh.judge_dcgm(gated)] == ["Fail"]
    assert gh.dcgm_skipped(gated) == ["DCGM memory skipped (GPU 0)", "DCGM pcie skipped (GPU 0)"]


def test_all_reduce_perf_is_judged_on_its_largest_size_against_nic_speed_times_rails():
    expected = gh.expected_busbw_pair(rails=8, nic_gbps=400)
    assert expected == 400.0
    healthy = gh.parse_all_reduce_perf((DATA / "all_reduce_perf-h100-2node-16gpu-nvls-healthy.txt").read_text())
    assert (healthy.ranks, healthy.hosts, healthy.avg_busbw) == (16, ("bm-h100-01", "bm-h100-02"), 139.56)
    assert gh.judge_collective(healthy, expected_gbs=expected, tolerance=0.15) == []
    slow = gh.parse_all_reduce_perf((DATA / "all_reduce_perf-h100-8node-64gpu-slow.txt").read_text())
    assert slow.peak_busbw == 320.70 and slow.avg_busbw == 183.055
    [f] = gh.judge_collective(slow, expected_gbs=expected, tolerance=0.15)
    assert (f.kind, f.planned, f.found) == ("collective-slow", "400 GB/s", "320.7 GB/s")
    # The same run within a looser tolerance passes: the threshold is the stack's to set.
    assert gh.judge_collective(slow, expected_gbs=expected, tolerance=0.25) == []
    with pytest.raises(ValueError, match="no result row"):
        gh.parse_all_reduce_perf("# nThread 1 nGpus 1\n")


def test_a_run_on_slower_nics_is_held_to_its_own_nics_and_every_kind_found_is_a_listed_one():
    gcp = gh.parse_all_reduce_perf((DATA / "all_reduce_perf-h100-2node-16gpu.txt").read_text())
    assert gcp.ranks == 16 and gcp.avg_busbw == 70.742 and gcp.peak_busbw is not None
    # 8 x 200 Gb/s NICs: 200 GB/s planned, which the run exceeds.
    assert gh.judge_collective(gcp, expected_gbs=gh.expected_busbw_pair(rails=8, nic_gbps=200), tolerance=0.15) == []
    kinds = {f.kind for f in [
        *gh.judge_kernel_log((DATA / "xid-13-109-dmesg.txt").read_text()),
        *gh.judge_kernel_log((DATA / "gpu-fallen-off-bus-no-xid-dmesg.txt").read_text()),
        *gh.judge_collective(gh.parse_all_reduce_perf((DATA / "all_reduce_perf-h100-8node-64gpu-slow.txt").read_text()),
                             expected_gbs=400, tolerance=0.1),
        *gh.judge_gpus(gh.parse_nvidia_smi(A100_XML), count=8, pci_id=("0x10de", "0x20b0"))]}
    assert kinds == {"xid", "gpu-fell-off-bus", "collective-slow", "gpu-count", "gpu-model"} and kinds <= set(gh.KINDS)
