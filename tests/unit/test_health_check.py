"""slurmd's health check (railyard.model.health_check): what it holds a node to, when it drains or
returns its node, and the program the slurm role installs, run as slurmd runs it (an empty
environment, the model code copied beside it, nothing of railyard importable) against tools that
print what the real ones print: nvidia-smi's XML from the real fixture, sinfo's lines in the format
captured from Debian's Slurm (railyard/data/fixtures/slurm)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from railyard.bench.bench_verify import install_health_check
from railyard.model import health_check as hc
from railyard.model.catalog import load_catalog
from railyard.model.node_health import Held

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "railyard" / "data" / "fixtures" / "gpu"
ROLE = ROOT / "playbooks" / "roles" / "slurm"
A100 = hc.Expect(gpus=1, vendor="0x10de", device="0x20b2")  # the real nvidia-smi fixture's one GPU


def test_a_skus_expectation_is_its_gpu_count_pci_id_and_nvlinks():
    from railyard.model.catalog import nvlink_gbs

    sku = load_catalog().nodes["dgx-h100"]
    assert hc.expect_of(sku) == hc.Expect(8, "0x10de", "0x2330", 18)
    assert hc.Expect.from_json(json.loads(json.dumps(hc.expect_of(sku).to_json()))) == hc.expect_of(sku)
    # One link's speed as the real nvidia-smi shows an H100's; none kept for a B300's.
    assert nvlink_gbs(sku) == 26.562 and nvlink_gbs(load_catalog().nodes["hgx-b300"]) is None
    full = hc.expect_of(sku, nvlink_gbs(sku))
    assert full.nvlink_busbw == pytest.approx(478.116)
    assert hc.Expect.from_json(json.loads(json.dumps(full.to_json()))) == full


H100 = hc.Expect(8, "0x10de", "0x2330", 18, 26.562)
REAL_2NODE = (GPU / "all_reduce_perf-h100-2node-16gpu-nvls-healthy.txt").read_text()
REAL_SLOW = (GPU / "all_reduce_perf-h100-8node-64gpu-slow.txt").read_text()


def test_the_deep_checks_collective_is_judged_against_the_nodes_nvlinks():
    # No real run within one node is kept (SOURCES.md): these real runs across nodes give the
    # judge the tool's own output to read. The healthy one reaches 469 GB/s: within 15% of an H100
    # node's 478.
    # (Each case reads only the collective: nvidia-smi is not among the sections, so it is not run.)
    found, not_run, ran = hc.judge({"all_reduce_perf": REAL_2NODE}, H100)
    assert (found, not_run, ran) == ([], ["nvidia-smi missing"], True)
    # The real slow run (320 GB/s) is a finding, naming what was planned and what was found.
    [slow], _, _ = hc.judge({"all_reduce_perf": REAL_SLOW}, H100)
    assert (slow.kind, slow.planned, slow.found) == ("collective-slow", "478 GB/s", "320.7 GB/s")
    # A tolerance the stack widens lets it pass.
    assert hc.judge({"all_reduce_perf": REAL_SLOW}, H100, tolerance=0.4)[0] == []


def test_a_collective_that_fails_is_a_finding_and_one_that_cannot_be_judged_is_not_run():
    failed = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
              "agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"
              "Invalid number of GPUs: 8 requested but only 7 were found.\n")
    [f], not_run, ran = hc.judge({"all_reduce_perf": failed}, H100)
    assert f.kind == "collective-failed" and "8 requested but only 7 were found" in f.message and ran
    # A run that died after 2 GiB (its rows up to there read 461 GB/s, a pass on their own) and
    # the status the script keeps: a failure, not a judgement of the sizes it finished.
    lines = REAL_2NODE.splitlines()
    cut = "\n".join(ln for ln in lines if not ln.lstrip()[:1].isdigit() or int(ln.split()[0]) <= 2 ** 31
                    if not ln.startswith("# Avg")) + "\nbm-h100-01: Test CUDA failure common.cu:892 'out of memory'\n"
    [died], _, _ = hc.judge({"all_reduce_perf": cut, "all_reduce_perf-exit": "1\n"}, H100)
    assert died.kind == "collective-failed" and died.message.endswith("Test CUDA failure common.cu:892 'out of memory'")
    assert died.found == "exit status 1, up to 2147483648 bytes"
    [status], _, _ = hc.judge({"all_reduce_perf": REAL_2NODE, "all_reduce_perf-exit": "3\n"}, H100)
    assert (status.kind, status.found) == ("collective-failed", "exit status 3, up to 17179869184 bytes")
    assert hc.judge({"all_reduce_perf": REAL_2NODE, "all_reduce_perf-exit": "0\n"}, H100)[0] == []
    # One GPU alone: nothing to hold a collective to.
    assert hc.Expect(1, "0x10de", "0x2330", 18, 26.562).nvlink_busbw is None
    assert hc.judge({"all_reduce_perf-missing": ""}, H100)[1:] == (["nvidia-smi missing", "all_reduce_perf missing"],
                                                                   False)
    # No real output gives this GPU's link speed: no yardstick, so not run rather than a guess.
    found, not_run, ran = hc.judge({"all_reduce_perf": REAL_2NODE}, hc.Expect(8, "0x10de", "0x3182", 18))
    assert found == [] and not ran and "no real output of this GPU's links" in not_run[1]


@pytest.mark.parametrize("findings, ran, held, verb", [
    # A finding drains a node in service, with the finding as the reason.
    (["00000000:01:00.0: 2 uncorrectable ECC error(s)"], True, Held(), "drain"),
    # A node the check drained and now finds healthy goes back.
    ([], True, Held(out=True, reason=f"{hc.SLURMD_PREFIX} gpu lost"), "resume"),
    # A person's drain, the repair loop's, acceptance's and Slurm's own are not the check's to lift
    # or to overwrite, healthy or not.
    ([], True, Held(out=True, reason="rma 4711"), None),
    (["x"], True, Held(out=True, reason="rma 4711"), None),
    ([], True, Held(out=True, reason="railyard: gpu-1: GPU2 not on the bus"), None),
    (["x"], True, Held(out=True, reason="railyard: acceptance: rail3 down"), None),
    ([], True, Held(out=True, reason="Not responding", system=True), None),
    # A check whose tools are missing neither drains nor returns: "not run" is no verdict.
    ([], False, Held(), None),
    ([], False, Held(out=True, reason=f"{hc.SLURMD_PREFIX} gpu lost"), None),
    ([], True, Held(), None),
])
def test_the_check_drains_and_returns_only_its_own_nodes(findings, ran, held, verb):
    assert hc.decide(findings, ran, held).verb == verb


def test_an_nvidia_smi_that_fails_is_a_finding_and_never_returns_a_node():
    # The driver gone: nvidia-smi is there and prints its failure instead of XML.
    sections = {"nvidia-smi": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
                "nvlink": "", "kernel-log": ""}
    found, not_run, ran = hc.judge(sections, A100)
    assert [(f.kind, f.message) for f in found] == [
        ("nvidia-smi-failed", "nvidia-smi -q -x failed: NVIDIA-SMI has failed because it couldn't communicate with "
                              "the NVIDIA driver.")]
    drained = Held(out=True, reason=f"{hc.SLURMD_PREFIX} 00000000:01:00.0: 2 uncorrectable ECC error(s)")
    assert hc.decide([f.message for f in found], ran, drained).verb == "drain"  # its reason updated, not lifted


def test_a_link_slower_than_its_gpus_real_speed_is_a_finding_of_verify():
    real = (GPU / "nvidia-smi-nvlink-status-h100-gpu0.txt").read_text()
    h100 = hc.Expect(8, "0x10de", "0x2330", 18, 26.562)
    sections = {"nvidia-smi": (GPU / "nvidia-smi-q-x-a100-sxm4-mig-healthy.xml").read_text(), "kernel-log": ""}

    def nvlink_findings(text: str) -> list[tuple[str, str | None, str]]:
        found = hc.judge({**sections, "nvlink": text}, h100)[0]
        return [(f.kind, f.gpu, f.found) for f in found if f.kind.startswith("nvlink")]

    assert nvlink_findings(real) == []
    # Changed in the copy: link 7 trained at half its speed.
    assert nvlink_findings(real.replace("Link 7: 26.562 GB/s", "Link 7: 13.281 GB/s")) == [
        ("nvlink-slow", "GPU 0", "13.281 GB/s")]


def test_xids_a_job_may_cause_are_verifys_to_report_and_not_slurmds_check_to_drain_for():
    log = (GPU / "xid-13-109-dmesg.txt").read_text()
    sections = {"nvidia-smi": (GPU / "nvidia-smi-q-x-a100-sxm4-mig-healthy.xml").read_text(), "kernel-log": log}
    assert sorted(f.found for f in hc.judge(sections, A100)[0]) == ["Xid 109", "Xid 13"]
    assert [f.found for f in hc.judge(sections, A100, ignore_xids=hc.APPLICATION_XIDS)[0]] == ["Xid 109"]


def test_a_drain_reason_names_the_first_finding_and_counts_the_rest_within_slurms_column():
    action = hc.decide(["00000000:01:00.0: 2 uncorrectable ECC error(s) since the driver loaded", "second", "third"],
                       True, Held())
    assert action.reason is not None and action.reason.startswith(hc.SLURMD_PREFIX + " 00000000:01:00.0: 2 ")
    assert action.reason.endswith("(+2 more)") and len(action.reason) <= 120
    # The same finding again leaves the drain as it is; another one updates its reason.
    assert hc.decide(["00000000:01:00.0: 2 uncorrectable ECC error(s) since the driver loaded", "second", "third"],
                     True, Held(out=True, reason=action.reason)).verb is None
    assert hc.decide(["another"], True, Held(out=True, reason=action.reason)).verb == "drain"


# --- the installed program ------------------------------------------------------------------------

# Stand-ins for the node's tools, their settings baked in (the program hands its tools no more
# than PATH and LC_ALL, as on a node). sinfo prints the node's line as Debian's Slurm does; scontrol
# records what it was asked and changes that line as slurmctld would; nvidia-smi prints the real
# A100 output, its volatile SRAM uncorrectable count replaced by the number in the file `ecc`.
FAKE_SINFO = """#!/bin/sh
cat {tmp}/state
"""
FAKE_SCONTROL = """#!/bin/sh
printf '%s\\n' "$*" >> {tmp}/log
node=${{2#NodeName=}}
case "$3" in
  State=DRAIN) printf '%s|drained|root|%s\\n' "$node" "${{4#Reason=}}" > {tmp}/state ;;
  State=RESUME) printf '%s|idle|Unknown|none\\n' "$node" > {tmp}/state ;;
esac
"""
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  "-q -x") sed "/<volatile>/,/<\\/volatile>/s/<sram_uncorrectable>0</<sram_uncorrectable>$(cat {tmp}/ecc)</" {xml} ;;
esac
"""


def install(tmp: Path, *, nvidia_smi: bool) -> Path:
    """The slurm role's health check laid out as the role writes it (the bench's layout, the model
    code copied from the role's files), with the stand-in tools in tmp/bin. Returns the program."""
    bindir = tmp / "bin"
    bindir.mkdir()
    tools = [("sinfo", FAKE_SINFO), ("scontrol", FAKE_SCONTROL), ("dmesg", "#!/bin/sh\n")]
    tools += [("nvidia-smi", FAKE_NVIDIA_SMI)] if nvidia_smi else []
    for name, text in tools:
        (bindir / name).write_text(text.format(tmp=tmp, xml=GPU / "nvidia-smi-q-x-a100-sxm4-mig-healthy.xml"))
        (bindir / name).chmod(0o755)
    # The PATH holds these and the shell's few tools alone: this machine's own GPU tools, if it has
    # any, stay out.
    for tool in ("sh", "cat", "sed"):
        (bindir / tool).symlink_to(shutil.which(tool))
    return install_health_check(tmp / "node", "gpu-1", A100.to_json(), str(bindir))


def run_as_slurmd(program: Path) -> subprocess.CompletedProcess[str]:
    """As slurmd runs it: SLURMD_NODENAME and nothing else in its environment, not even PATH."""
    return subprocess.run([str(program)], env={"SLURMD_NODENAME": "gpu-1"}, capture_output=True, text=True,
                          timeout=60, cwd="/")


def test_the_installed_program_drains_its_node_on_a_finding_and_returns_it_when_healthy(tmp_path):
    program = install(tmp_path, nvidia_smi=True)
    state, log, ecc = tmp_path / "state", tmp_path / "log", tmp_path / "ecc"
    state.write_text("gpu-1|idle|Unknown|none\n")

    ecc.write_text("0")
    healthy = run_as_slurmd(program)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    # slurmd's check runs no DCGM diagnostic (a job may hold the GPUs), so none is missing either.
    assert healthy.stdout.splitlines() == ["gpu-1: healthy"]
    assert not log.exists()  # nothing asked of Slurm

    ecc.write_text("2")
    faulty = run_as_slurmd(program)
    assert faulty.returncode == 1 and "ecc-uncorrectable" in faulty.stdout, faulty.stdout + faulty.stderr
    assert log.read_text().splitlines() == [
        "update NodeName=gpu-1 State=DRAIN Reason=railyard: health check: 00000000:01:00.0: 2 uncorrectable "
        "ECC error(s) since the driver loaded"]
    assert state.read_text().startswith("gpu-1|drained|root|railyard: health check: ")
    again = run_as_slurmd(program)  # the next interval: drained already for it, nothing asked
    assert again.returncode == 1 and len(log.read_text().splitlines()) == 1

    ecc.write_text("0")
    back = run_as_slurmd(program)
    assert back.returncode == 0 and log.read_text().splitlines()[-1] == "update NodeName=gpu-1 State=RESUME"
    assert state.read_text() == "gpu-1|idle|Unknown|none\n"

    # A person's drain is theirs: the check neither overwrites nor lifts it.
    state.write_text("gpu-1|drained|root|rma 4711\n")
    ecc.write_text("2")
    run_as_slurmd(program)
    ecc.write_text("0")
    run_as_slurmd(program)
    assert state.read_text() == "gpu-1|drained|root|rma 4711\n" and len(log.read_text().splitlines()) == 2


def test_without_the_gpu_tools_the_program_reports_not_run_and_changes_nothing(tmp_path):
    program = install(tmp_path, nvidia_smi=False)
    (tmp_path / "state").write_text("gpu-1|drained|root|railyard: health check: 00000000:01:00.0: gone\n")
    out = run_as_slurmd(program)
    assert out.returncode == 0, out.stderr
    assert "gpu-1: not run: nvidia-smi missing" in out.stdout and "no check ran" in out.stdout
    assert not (tmp_path / "log").exists()  # neither drained nor returned on no evidence


def test_the_roles_copies_are_the_model_code_itself():
    # The role's files are links, so the node runs byte for byte what verify and these tests run.
    for m in ("health_check.py", "gpu_health.py", "node_health.py"):
        link = ROLE / "files" / "health-check" / m
        assert link.is_symlink() and link.resolve() == ROOT / "railyard" / "model" / m


def test_the_modules_a_node_runs_import_only_the_standard_library_and_each_other():
    import ast
    import sys

    for m in ("health_check", "gpu_health", "node_health"):
        tree = ast.parse((ROOT / "railyard" / "model" / f"{m}.py").read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("__future__", "railyard", "gpu_health", "node_health"), \
                    (m, name)
                if top == "railyard":
                    assert name == "railyard.model" and all(a.name in ("gpu_health", "node_health") for a in node.names)


def test_a_test_dcgm_skipped_is_said_as_not_run_and_a_failed_one_is_a_finding():
    real = (GPU / "dcgmi-diag-r3-v3-1gpu-virtualclient.json").read_text()  # DCGM 3, level 3, EUD skipped
    found, not_run, ran = hc.judge({"dcgmi": real}, A100)
    assert (found, not_run, ran) == ([], ["nvidia-smi missing", "DCGM EUD Test skipped (GPU 0)"], True)
    found, _, _ = hc.judge({"dcgmi": real.replace('"status" : "Pass"', '"status" : "Fail"', 1)}, A100)
    assert [(f.kind, f.gpu, f.found, f.message) for f in found] == [("dcgm-diag", None, "Fail", "DCGM Denylist Fail")]


def test_a_dcgmi_that_gave_no_report_or_skipped_everything_checked_nothing():
    # dcgmi's two lines with no host engine running (the first is dcgmi's Command.cpp; both as users quote them).
    down = ("Error: unable to establish a connection to the specified host: localhost\n"
            "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
    found, not_run, ran = hc.judge({"dcgmi": down}, A100)
    assert (found, ran) == ([], False)
    assert not_run[-1] == ("dcgmi diag gave no result (Error: Unable to connect to host engine. Host engine "
                           "connection invalid/disconnected.)")
    real = (GPU / "dcgmi-diag-r3-v3-1gpu-virtualclient.json").read_text()
    found, not_run, ran = hc.judge({"dcgmi": real.replace('"Pass"', '"Skip"')}, A100)
    assert (found, ran) == ([], False) and "DCGM Denylist skipped" in not_run
