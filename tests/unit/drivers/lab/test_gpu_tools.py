"""The lab node's nvidia-smi, all_reduce_perf and dcgmi stand-ins (railyard/drivers/lab/gpu_tools.py) against
the real tools' output kept as fixtures: it prints no element and no line shape the real tool lacks, the health
judges read it as they read the real thing, and the GPU state `railyard lab fault` writes shows in
it as the real tool would show it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from railyard.drivers.lab import gpu_tools, hwtree
from railyard.model import gpu_health as gh
from railyard.model.catalog import load_catalog
from railyard.model.health_check import expect_of
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[4]
GPU = ROOT / "railyard" / "data" / "fixtures" / "gpu"
CATALOG = load_catalog()


def paths(e: ET.Element, prefix: str = "") -> set[str]:
    here = f"{prefix}/{e.tag}"
    return {here}.union(*(paths(c, here) for c in e))


@pytest.fixture
def h100(tmp_path):
    hwtree.build_hwtree(CATALOG.nodes["dgx-h100"], tmp_path)
    return tmp_path


def query(hw: Path) -> str:
    return gpu_tools.query_xml(str(hw))


def test_every_element_it_prints_is_one_the_real_tool_prints(h100):
    real = paths(ET.parse(GPU / "nvidia-smi-q-x-a100-sxm4-mig-healthy.xml").getroot())
    ours = paths(ET.fromstring(query(h100)))
    assert ours <= real, sorted(ours - real)
    # and in the real file's header and indentation
    head = query(h100).splitlines()
    real_head = (GPU / "nvidia-smi-q-x-a100-sxm4-mig-healthy.xml").read_text().splitlines()
    assert head[:3] == real_head[:3]
    assert re.fullmatch(r"    <timestamp>\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}</timestamp>", head[3])


def test_a_healthy_node_reads_as_its_sku_and_the_judges_find_nothing(h100):
    sku = CATALOG.nodes["dgx-h100"]
    log = gh.parse_nvidia_smi(query(h100))
    assert log.attached_gpus == 8 and len(log.gpus) == 8
    assert {g.product_name for g in log.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g.vendor_device for g in log.gpus} == {("0x10de", "0x2330")}
    expect = expect_of(sku)
    assert gh.judge_gpus(log, count=expect.gpus, pci_id=(expect.vendor, expect.device)) == []
    links = gh.parse_nvlink_status(gpu_tools.nvlink_status(str(h100)))
    assert len(links) == 8 and all(len(v) == 18 and set(v.values()) == {26.562} for v in links.values())
    assert gh.judge_nvlink(links, per_gpu=18, link_gbps=None) == []


def test_its_nvlink_lines_are_the_real_tools_lines(h100):
    ours = gpu_tools.nvlink_status(str(h100), only=0).splitlines()
    real = (GPU / "nvidia-smi-nvlink-status-h100-gpu0.txt").read_text().splitlines()
    # The H100 copy was pasted, which shows the tool's tab and space as 9 spaces; the byte-for-byte
    # comparison with outputs written to a file is the test below.
    assert [line.expandtabs() for line in ours[1:]] == real[1:]
    assert re.fullmatch(r"GPU 0: NVIDIA H100 80GB HBM3 \(UUID: GPU-[0-9a-f-]{36}\)", ours[0])


def _gpu_blocks(text: str) -> list[list[str]]:
    """Each GPU's lines of `nvlink -s`, its header without index and UUID (the node's own)."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("GPU "):
            blocks.append([re.sub(r"^GPU \d+: (.*) \(UUID: GPU-[0-9a-f-]{36}\)$", r"\1", line)])
        else:
            blocks[-1].append(line)
    return blocks


@pytest.mark.parametrize("sku, kept", [("dgx-b200", "nvidia-smi-nvlink-s-b200-8gpu.txt"),
                                       ("hgx-h200", "nvidia-smi-nvlink-s-h200-8gpu-vm.txt"),
                                       ("dgx-a100", "nvidia-smi-nvlink-s-a100-sxm4-40gb-4gpu.txt")])
def test_a_nodes_nvlink_status_is_its_gpus_real_output_byte_for_byte_but_its_uuids(tmp_path, sku, kept):
    """Against `nvidia-smi nvlink -s` of such GPUs redirected to a file: each GPU named as there and
    its link lines the same bytes (a tab and a space before `Link`; A100's `25 GB/s` with no decimals).
    The A100 capture is of a 4-GPU node, so a dgx-a100's eight are held against its GPUs in turn."""
    hwtree.build_hwtree(CATALOG.nodes[sku], tmp_path)
    printed = gpu_tools.nvlink_status(str(tmp_path))
    ours, real = _gpu_blocks(printed), _gpu_blocks((GPU / kept).read_text())
    assert len(ours) == len(CATALOG.nodes[sku].gpus) == 8
    assert ours == [real[i % len(real)] for i in range(len(ours))]
    assert list(gh.parse_nvlink_status(printed)) == list(range(8)), "GPU 0 .. GPU 7"


def test_the_gpu_state_faults_write_shows_as_the_real_tool_shows_it(h100):
    bdfs = sorted(os.listdir(h100 / "sys/bus/pci/devices"))
    gpus = [g["bdf"] for g in gpu_tools.gpus(str(h100))]
    assert len(gpus) == 8 and set(gpus) <= set(bdfs)
    state = h100 / hwtree.NVIDIA_STATE / gpus[2]
    state.mkdir(parents=True)
    (state / "ecc_volatile_uncorrectable").write_text("3\n")
    (state / "nvlinks_down").write_text("4\n17\n")
    sku = CATALOG.nodes["dgx-h100"]
    expect = expect_of(sku)
    found = gh.judge_gpus(gh.parse_nvidia_smi(query(h100)), count=8, pci_id=(expect.vendor, expect.device))
    assert [(f.kind, f.found) for f in found] == [("ecc-uncorrectable", "3")]
    assert found[0].gpu == "00000000:" + gpus[2].split(":", 1)[1].upper()
    down = gh.judge_nvlink(gh.parse_nvlink_status(gpu_tools.nvlink_status(str(h100))), per_gpu=18, link_gbps=None)
    assert [(f.kind, f.gpu, f.found) for f in down] == [("nvlink-down", "GPU 2", "16")]
    assert "(down: 4, 17)" in down[0].message


ROW = re.compile(r"^\s+\d+\s+\d+\s+float")
KEPT_RUN = GPU / "all_reduce_perf-h100-2node-16gpu-nvls-healthy.txt"


def tool(name: str, hw: Path, *args: str) -> tuple[int, str, str]:
    """The program run as `name` on the tree: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = gpu_tools.main(list(args), str(hw), name=name)
    return rc, out.getvalue(), err.getvalue()


def collective(hw: Path, *args: str) -> tuple[int, str, str]:
    return tool("all_reduce_perf", hw, *args)


def test_all_reduce_perf_prints_the_real_tools_lines_and_reaches_the_nodes_nvlink_bandwidth(h100):
    rc, out, _ = collective(h100, "-b", "8", "-e", "8G", "-f", "2", "-g", "8")
    assert rc == 0
    real = KEPT_RUN.read_text().splitlines()
    lines = out.splitlines()
    # Every line is one the real tool prints: the header and footer lines byte for byte where they
    # carry no figure, each result row digit for digit in the kept run's column shapes.
    shape = lambda line: re.sub(r"\d", "9", line)  # noqa: E731
    assert lines[0] == real[1].replace("nGpus 1", "nGpus 8").replace("17179869184", "8589934592")
    assert {ln for ln in lines if ln.startswith("#") and "Rank" not in ln and ":" not in ln} <= set(real)
    rows = [ln for ln in lines if ROW.match(ln)]
    assert len(rows) == 31 and {shape(r) for r in rows} <= {shape(r) for r in real if ROW.match(r)}
    assert all(re.fullmatch(r"#  Rank  \d Group  0 Pid [ \d]{6} on [ \S]{10,} device  \d \[0000:[0-9a-f]{2}:00\] "
                            r"NVIDIA H100 80GB HBM3", ln) for ln in lines if "Rank" in ln)
    run = gh.parse_all_reduce_perf(out)
    expect = expect_of(CATALOG.nodes["dgx-h100"], 26.562)
    assert run.ranks == 8 and expect.nvlink_busbw == pytest.approx(478.116)
    assert run.peak_busbw == pytest.approx(477.6, abs=0.5)
    assert gh.judge_collective(run, expected_gbs=expect.nvlink_busbw, tolerance=gh.COLLECTIVE_TOLERANCE) == []


def test_an_nvlink_down_makes_the_collective_slow_and_a_lost_gpu_makes_it_fail(h100):
    gpus = [g["bdf"] for g in gpu_tools.gpus(str(h100))]
    state = h100 / hwtree.NVIDIA_STATE / gpus[3]
    state.mkdir(parents=True)
    (state / "nvlinks_down").write_text("".join(f"{n}\n" for n in range(6)))
    rc, out, _ = collective(h100, "-b", "8", "-e", "8G", "-f", "2", "-g", "8")
    expect = expect_of(CATALOG.nodes["dgx-h100"], 26.562)
    [slow] = gh.judge_collective(gh.parse_all_reduce_perf(out), expected_gbs=expect.nvlink_busbw, tolerance=0.15)
    assert rc == 0 and slow.kind == "collective-slow" and slow.found.startswith("318.")  # 12 of 18 links
    (h100 / "sys/bus/pci/devices" / gpus[5]).unlink()
    rc, out, err = collective(h100, "-b", "8", "-e", "8G", "-f", "2", "-g", "8")
    # nccl-tests' own words (util.cu, writeDeviceReport).
    assert rc == 1 and err.startswith("Invalid number of GPUs: 8 requested but only 7 were found.\n")
    assert not any(ROW.match(ln) for ln in out.splitlines())


def test_all_reduce_perf_answers_only_the_sizes_its_kept_run_has(h100):
    rc, out, err = collective(h100, "-b", "3", "-e", "300", "-f", "3", "-g", "8")
    assert rc == 2 and out == "" and "stand-in" in err


def dcgmi(hw: Path, *args: str) -> tuple[int, str, str]:
    return tool("dcgmi", hw, *args)


def test_dcgmi_reports_in_dcgm_4s_layout_the_tests_each_level_runs(h100):
    rc, out, _ = dcgmi(h100, "diag", "-r", "3", "-j")
    assert rc == 0
    doc = json.loads(out)
    tests = [(c["category"], t["name"]) for c in doc["DCGM Diagnostic"]["test_categories"] for t in c["tests"]]
    assert tests == [("Deployment", "software"), ("Integration", "pcie"), ("Hardware", "memory"),
                     ("Hardware", "diagnostic"), ("Stress", "memory_bandwidth"), ("Stress", "targeted_stress"),
                     ("Stress", "targeted_power")]
    assert [e["device_id"] for e in doc["entity_groups"][0]["entities"]] == ["2330"] * 8
    # The kept real report's "diagnostic" test, its results without info lines (GPUs 3 to 7), is
    # this one's line for line, tabs as the excerpt shows them.
    real = (GPU / "dcgmi-diag-r3-v4-pass-8gpu-excerpt.json").read_text().splitlines()
    start = next(i for i, ln in enumerate(real) if '"entity_id" : 3,' in ln) - 3
    ours = out.expandtabs(8).splitlines()
    at = next(i for i, ln in enumerate(ours) if '"name" : "diagnostic"' in ln)
    ours_start = next(i for i in range(at, len(ours)) if '"entity_id" : 3,' in ours[i]) - 3
    assert ours[ours_start:ours_start + 35] == real[start:start + 35]  # to the test's closing brace
    assert [r.status for r in gh.parse_dcgm_diag(out)] == ["Pass"] * 56
    # Level 1 is the software test alone (nvvs's quick suite), one result a GPU.
    quick = json.loads(dcgmi(h100, "diag", "-r", "1", "-j")[1])
    assert [t["name"] for c in quick["DCGM Diagnostic"]["test_categories"] for t in c["tests"]] == ["software"]
    assert dcgmi(h100, "diag", "-r", "4", "-j")[0] == 2 and "stand-in" in dcgmi(h100, "discovery", "-l")[2]


def test_dcgmi_fails_the_memory_test_of_a_gpu_whose_memory_keeps_failing_and_passes_an_old_fault(h100):
    gpus = [g["bdf"] for g in gpu_tools.gpus(str(h100))]
    state = h100 / hwtree.NVIDIA_STATE / gpus[2]
    state.mkdir(parents=True)
    (state / "ecc_volatile_uncorrectable").write_text("3\n")
    # Errors counted before the run (a transient fault): DCGM reads what changes while it tests.
    assert dcgmi(h100, "diag", "-r", "3", "-j")[0] == 0
    (state / "ecc_persistent").write_text("3\n")
    rc, out, _ = dcgmi(h100, "diag", "-r", "3", "-j")
    assert rc == 205  # DCGM_ST_NVVS_ISOLATE_ERROR
    [found] = gh.judge_dcgm(gh.parse_dcgm_diag(out))
    assert (found.kind, found.gpu, found.found) == ("dcgm-diag", "GPU 2", "Fail")
    assert found.message == ("GPU 2: DCGM memory Fail (Detected 3 ecc_dbe_volatile_total for GPU 2 "
                             "Run a field diagnostic on the GPU.)")
    # Level 1 runs no memory test.
    assert dcgmi(h100, "diag", "-r", "1", "-j")[0] == 0
    (h100 / "sys/bus/pci/devices" / gpus[5]).unlink()
    assert len(json.loads(dcgmi(h100, "diag", "-r", "1", "-j")[1])["entity_groups"][0]["entities"]) == 7


def test_a_gpu_off_the_bus_is_missing_from_its_output(h100):
    gpu = gpu_tools.gpus(str(h100))[5]["bdf"]
    (h100 / "sys/bus/pci/devices" / gpu).unlink()
    log = gh.parse_nvidia_smi(query(h100))
    found = gh.judge_gpus(log, count=8, pci_id=("0x10de", "0x2330"))
    assert [(f.kind, f.found) for f in found] == [("gpu-count", "7")]


def test_a_sku_whose_links_no_real_output_shows_gets_no_invented_speed(tmp_path):
    # hgx-b300: no kept nvidia-smi output names its GPU or its NVLinks' speed.
    hwtree.build_hwtree(CATALOG.nodes["hgx-b300"], tmp_path)
    assert gpu_tools.nvlink_status(str(tmp_path)) == ""
    assert gh.parse_nvidia_smi(query(tmp_path)).gpus[0].product_name == CATALOG.nodes["hgx-b300"].gpus[0].model


def test_an_nvlink_fault_is_refused_where_the_nodes_nvidia_smi_shows_no_links(tmp_path, monkeypatch):
    from railyard.drivers.lab import faults
    from railyard.drivers.lab.node.config import node_dir
    from railyard.stack import load

    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    _, plan = load(ROOT / "stacks" / "Pulumi.lab.yaml")
    tree = node_dir("tnolink", "gpu-0") / "hwtree"
    hwtree.build_hwtree(CATALOG.nodes["hgx-b300"], tree)  # no kept output shows a B300's links
    with pytest.raises(faults.FaultError, match="shows no NVLinks"):
        faults.inject("tnolink", plan, "nvlink-down", ["gpu-0", "GPU0", "1"])


def test_the_program_runs_as_the_node_runs_it(h100, tmp_path):
    # As /run/railyard/bin/nvidia-smi: its own interpreter line, the tree where the node binds it.
    script = ROOT / "railyard" / "drivers" / "lab" / "gpu_tools.py"
    assert script.read_text().startswith("#!/usr/bin/python3 -I\n")
    code = f"import runpy, sys; sys.argv = ['nvidia-smi'] + sys.argv[1:]; " \
           f"m = runpy.run_path({str(script)!r}); sys.exit(m['main'](sys.argv[1:], {str(h100)!r}))"
    ok = subprocess.run(["python3", "-I", "-c", code, "-q", "-x"], capture_output=True, text=True)
    assert ok.returncode == 0 and len(gh.parse_nvidia_smi(ok.stdout).gpus) == 8
    other = subprocess.run(["python3", "-I", "-c", code, "topo", "-m"], capture_output=True, text=True)
    assert other.returncode == 2 and "stand-in" in other.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    none = subprocess.run(["python3", "-I", "-c", code.replace(str(h100), str(empty))], capture_output=True, text=True)
    assert none.returncode == 6 and none.stdout == "No devices were found\n"


def test_the_gpu_faults_show_in_its_output_and_clear_back_to_the_tree_as_built(tmp_path, monkeypatch):
    from railyard.drivers.lab import faults
    from railyard.drivers.lab.node.config import node_dir
    from railyard.stack import load

    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    _, plan = load(ROOT / "stacks" / "Pulumi.lab.yaml")  # two dgx-h100
    tree = node_dir("tfault", "gpu-1") / "hwtree"
    hwtree.build_hwtree(CATALOG.nodes["dgx-h100"], tree)
    before = sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))

    said = faults.inject("tfault", plan, "ecc", ["gpu-1", "GPU3", "2"], transient=True)
    assert said == "gpu-1: GPU3 has 2 uncorrectable ECC error(s) (transient: its next boot clears it)"
    faults.inject("tfault", plan, "nvlink-down", ["gpu-1", "GPU3", "7"])
    found = gh.judge_gpus(gh.parse_nvidia_smi(query(tree)), count=8, pci_id=("0x10de", "0x2330"))
    assert [(f.kind, f.found) for f in found] == [("ecc-uncorrectable", "2")]
    down = gh.judge_nvlink(gh.parse_nvlink_status(gpu_tools.nvlink_status(str(tree))), per_gpu=18, link_gbps=None)
    assert [(f.gpu, f.found) for f in down] == [("GPU 3", "17")]

    # The node's boot clears the transient one and keeps the other, as a reboot would.
    assert faults.clear_at_boot("tfault", "gpu-1") == [said]
    assert gh.judge_gpus(gh.parse_nvidia_smi(query(tree)), count=8, pci_id=("0x10de", "0x2330")) == []
    assert faults.clear("tfault", plan) == ["gpu-1: GPU3's NVLink 7 down"]
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*")) == before

    # A transient and a persistent ECC fault on one GPU: the boot takes the transient one's errors only.
    faults.inject("tfault", plan, "ecc", ["gpu-1", "GPU3", "2"], transient=True)
    faults.inject("tfault", plan, "ecc", ["gpu-1", "GPU3", "5"])
    assert [f.found for f in gh.judge_gpus(gh.parse_nvidia_smi(query(tree)), count=8, pci_id=(None, None))] == ["7"]
    faults.clear_at_boot("tfault", "gpu-1")
    assert [f.found for f in gh.judge_gpus(gh.parse_nvidia_smi(query(tree)), count=8, pci_id=(None, None))] == ["5"]
    faults.clear("tfault", plan)
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*")) == before

    for bad, why in ((["gpu-1", "mlx5_0", "2"], "not a GPU"), (["gpu-1", "GPU3", "0"], "a count of errors")):
        with pytest.raises(faults.FaultError, match=why):
            faults.inject("tfault", plan, "ecc", bad)
    with pytest.raises(faults.FaultError, match="a link of the GPU's 18"):
        faults.inject("tfault", plan, "nvlink-down", ["gpu-1", "GPU3", "18"])
    assert faults.faults("tfault") == [] and sorted(str(p.relative_to(tree)) for p in tree.rglob("*")) == before


def test_an_xid_is_a_real_logs_line_in_the_nodes_own_kernel_log_and_a_boot_clears_only_the_transient_one(
        tmp_path, monkeypatch):
    from railyard.drivers.lab import faults
    from railyard.drivers.lab.node.config import node_dir
    from railyard.stack import load

    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    _, plan = load(ROOT / "stacks" / "Pulumi.lab.yaml")
    tree = node_dir("txid", "gpu-0") / "hwtree"
    hwtree.build_hwtree(CATALOG.nodes["dgx-h100"], tree)
    gpu1 = gpu_tools.gpus(str(tree))[1]["bdf"]
    faults.inject("txid", plan, "xid", ["gpu-0", "GPU1", "109"], transient=True)
    faults.inject("txid", plan, "xid", ["gpu-0", "GPU1", "13"])
    log = (tree / hwtree.DMESG).read_text()
    # dmesg's own stamp, then the real line's text after the bus and code.
    real = (GPU / "xid-13-109-dmesg.txt").read_text()
    assert re.fullmatch(r"\[ *\d+\.\d{6}\] NVRM: Xid \(PCI:" + re.escape(gpu1[:-2]) + r"\): 109, (.*)", log.splitlines()[0])
    assert log.splitlines()[0].split("): 109, ", 1)[1] in real
    found = gh.judge_kernel_log(log)
    assert sorted((f.kind, f.gpu, f.found) for f in found) == [("xid", gpu1[:-2], "Xid 109"), ("xid", gpu1[:-2], "Xid 13")]
    # The boot clears the transient Xid and keeps the later, persistent one.
    faults.clear_at_boot("txid", "gpu-0")
    assert [f.found for f in gh.judge_kernel_log((tree / hwtree.DMESG).read_text())] == ["Xid 13"]
    faults.clear("txid", plan)
    assert not (tree / hwtree.DMESG).exists()
    with pytest.raises(faults.FaultError, match=r"a code a kept real log shows \(13, 45, 79, 109\)"):
        faults.inject("txid", plan, "xid", ["gpu-0", "GPU1", "48"])
    # The H100's Xid 79 kept (SOURCES.md) gives the code its real text.
    faults.inject("txid", plan, "xid", ["gpu-0", "GPU1", "79"])
    [xid] = gh.judge_kernel_log((tree / hwtree.DMESG).read_text())
    assert xid.found == "Xid 79" and xid.message.endswith("GPU has fallen off the bus.)")


def test_a_gpu_reset_clears_a_transient_ecc_count_and_not_a_failing_memorys(tmp_path, monkeypatch, capsys):
    from railyard.drivers.lab import faults
    from railyard.drivers.lab.node.config import node_dir
    from railyard.stack import load

    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    _, plan = load(ROOT / "stacks" / "Pulumi.lab.yaml")
    tree = node_dir("treset", "gpu-0") / "hwtree"
    hwtree.build_hwtree(CATALOG.nodes["dgx-h100"], tree)
    found = gpu_tools.gpus(str(tree))
    faults.inject("treset", plan, "ecc", ["gpu-0", "GPU1", "2"], transient=True)
    faults.inject("treset", plan, "ecc", ["gpu-0", "GPU2", "5"])

    def ecc() -> dict[str, int]:
        return {g.bus_id: g.ecc_volatile_uncorrectable for g in gh.parse_nvidia_smi(query(tree)).gpus
                if g.ecc_volatile_uncorrectable}

    one, two = (gpu_tools._bus_id(found[i]["bdf"]) for i in (1, 2))
    assert ecc() == {one: 2, two: 5}
    assert gpu_tools.main(["-r", "-i", one], str(tree)) == 0
    assert gpu_tools.main(["--gpu-reset", "-i", two], str(tree)) == 0
    # What the real tool prints (fixtures/gpu/nvidia-smi-r-reset.txt), and the failing memory's count stays.
    real = next(line for line in (GPU / "nvidia-smi-r-reset.txt").read_text().splitlines() if line.startswith("GPU "))
    assert capsys.readouterr().out == "".join(real.replace("00000000:1A:00.0", bus) + "\n" for bus in (one, two))
    assert ecc() == {two: 5}
    assert gpu_tools.main(["-r", "-i", "00000000:FF:00.0"], str(tree)) == 6
    faults.clear("treset", plan)
    assert not (tree / hwtree.NVIDIA_STATE).exists()


def test_only_findings_a_gpu_reset_clears_are_left_to_one():
    assert gh.gpu_reset_targets([("ecc-uncorrectable", "00000000:1B:00.0"), ("row-remap-pending", "00000000:43:00.0"),
                                 ("ecc-uncorrectable", "00000000:1B:00.0")]) == ["00000000:1B:00.0", "00000000:43:00.0"]
    # An Xid, a GPU gone, a finding of the node (no GPU) or nothing at all: the node's reboot.
    assert gh.gpu_reset_targets([("ecc-uncorrectable", "00000000:1B:00.0"), ("xid", "0000:1b:00")]) is None
    assert gh.gpu_reset_targets([("gpu-count", None)]) is None
    assert gh.gpu_reset_targets([]) is None


def srun_env(rank: int, mpi: str) -> dict[str, str]:
    """What real srun --mpi=MPI --label gave the rank (fixtures/slurm/srun_<mpi>_env.txt)."""
    text = (ROOT / "railyard" / "data" / "fixtures" / "slurm" / f"srun_{mpi}_env.txt").read_text()
    return dict(line.split(": ", 1)[1].split("=", 1) for line in text.splitlines()
                if line.startswith(f"{rank}: "))


def pair_env(rank: int, port: int, gpu: int, mpi: str = "pmix") -> dict[str, str]:
    """What srun --mpi=MPI and railyard.model.pair_collectives give each rank of a pair, over loopback."""
    return {**srun_env(rank, mpi), "NCCL_COMM_ID": f"127.0.0.1:{port}", "NCCL_SOCKET_IFNAME": "=lo",
            "CUDA_VISIBLE_DEVICES": str(gpu)}


@pytest.mark.parametrize("mpi", ["pmix", "pmi2"])
def test_a_pair_across_nodes_moves_its_bytes_between_the_ranks_and_prints_rank_zeros_table(h100, mpi):
    import threading

    from railyard.model.pair_collectives import SIZES

    port, args = free_port(), SIZES.argv()
    results: dict[int, int] = {}
    peer = threading.Thread(target=lambda: results.setdefault(
        1, gpu_tools.all_reduce_perf(args, str(h100), env=pair_env(1, port, 6, mpi))))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        peer.start()
        rc = gpu_tools.all_reduce_perf(args, str(h100), env=pair_env(0, port, 2, mpi))
        peer.join(30)
    assert (rc, results.get(1)) == (0, 0), err.getvalue()
    run = gh.parse_all_reduce_perf(out.getvalue())
    bus = [g["bdf"] for g in gpu_tools.gpus(str(h100))]
    # Two ranks, each on the GPU CUDA_VISIBLE_DEVICES gave it (its device 0), in the real tool's lines.
    ranks = [ln for ln in out.getvalue().splitlines() if "Rank" in ln]
    assert run.ranks == 2 and [ln.split("[")[1][:10] for ln in ranks] == [bus[2][:10], bus[6][:10]]
    assert all(re.fullmatch(r"#  Rank  \d Group  0 Pid [ \d]{6} on [ \S]{10,} device  0 \[0000:[0-9a-f]{2}:00\] "
                            r"NVIDIA H100 80GB HBM3", ln) for ln in ranks)
    # Each row's columns end where the real tool's fixed-width columns end.
    ends = lambda line: [m.end() for m in re.finditer(r"\S+", line)]  # noqa: E731
    real = {tuple(ends(r)) for r in KEPT_RUN.read_text().splitlines() if ROW.match(r)}
    rows = [ln for ln in out.getvalue().splitlines() if ROW.match(ln)]
    assert [r.size for r in run.rows] == [8 << 20, 32 << 20, 128 << 20]
    assert len(real) == 1 and {tuple(ends(r)) for r in rows} == real, rows
    # Two ranks: the bus bandwidth is the algorithm bandwidth, bytes over the time they took.
    assert all(r.busbw_oop > 0 and r.time_oop_us > 0 for r in run.rows)
    assert run.rows[-1].busbw_oop == pytest.approx((128 << 20) / (run.rows[-1].time_oop_us * 1e3), rel=0.02)
    assert "warmup iters: 1 iters: 4" in out.getvalue().splitlines()[0]


def test_a_rank_whose_peer_never_listens_fails_saying_where_it_looked(h100, monkeypatch, capsys):
    monkeypatch.setattr(gpu_tools, "PEER_WAIT_S", 0.3)
    port = free_port()
    rc = gpu_tools.all_reduce_perf(["-b", "8M", "-e", "8M", "-g", "1"], str(h100), env=pair_env(1, port, 0))
    err = capsys.readouterr().err
    assert rc == 1 and f"rank 1 on " in err and f"could not reach its peer at 127.0.0.1:{port} from 127.0.0.1 (lo)" in err


@pytest.mark.parametrize("mpi, change, said", [
    ("pmix", {"NCCL_COMM_ID": ""}, "it needs NCCL_COMM_ID"),
    ("pmix", {"NCCL_SOCKET_IFNAME": "=no-such0"}, "no-such0 given"),
    ("pmix", {"SLURM_NTASKS": "4"}, "two ranks of one GPU each"),
    # PMI-2 tells the size itself: it counts before Slurm's.
    ("pmi2", {"PMI_SIZE": "4"}, "two ranks of one GPU each"),
])
def test_a_pair_without_what_it_needs_is_refused_naming_it(h100, capsys, mpi, change, said):
    rc = gpu_tools.all_reduce_perf(["-b", "8M", "-e", "8M", "-g", "1"], str(h100),
                                   env={**pair_env(0, 1, 0, mpi), **change})
    assert rc == 2 and said in capsys.readouterr().err
