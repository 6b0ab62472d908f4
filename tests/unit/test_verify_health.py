"""The health part of `railyard verify` (railyard.verify.health) on real tool output: the script a
node runs splits into its tools' sections, a node's findings name it, and a tool that is missing is
a note that says so, never a pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

from railyard import verify
from railyard.model import health_check
from railyard.stack import load

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "railyard" / "data" / "fixtures" / "gpu"


def test_the_node_script_names_each_missing_tool_and_its_sections_split_back():
    # Run here, with a PATH holding neither nvidia-smi nor dcgmi: what a node without them prints.
    out = subprocess.run(["/bin/sh", "-c", health_check.HEALTH_SCRIPT, "health", "1"], capture_output=True, text=True,
                         env={"PATH": "/nonexistent"}, check=True).stdout
    assert list(health_check.split_sections(out)) == ["nvidia-smi-missing", "dcgmi-missing"]


def test_findings_name_their_node_and_missing_tools_are_not_a_pass():
    _, plan = load(ROOT / "stacks" / "Pulumi.lab.yaml")  # two dgx-h100
    readings = {
        # An A100 node's real nvidia-smi output, and an H100's real Xid lines, where H100s are planned.
        "gpu-0": {"nvidia-smi": (GPU / "nvidia-smi-q-x-a100-sxm4-mig-healthy.xml").read_text(),
                  "nvlink": (GPU / "nvidia-smi-nvlink-status-h100-gpu0.txt").read_text(),
                  "kernel-log": (GPU / "xid-13-109-dmesg.txt").read_text(), "dcgmi-missing": ""},
        "gpu-1": {"nvidia-smi-missing": "", "dcgmi-missing": ""},
    }
    found, notes, ran = verify.health(plan, readings)
    assert ran
    assert [(f.kind, f.node, f.where) for f in found] == [
        ("gpu-count", "gpu-0", "gpu-0"), ("gpu-model", "gpu-0", "00000000:01:00.0"),
        ("xid", "gpu-0", "0000:cb:00"), ("xid", "gpu-0", "0000:cb:00")]
    assert all(f.message.startswith("gpu-0: ") for f in found)
    assert notes == ["health not run: dcgmi missing: gpu-0, gpu-1", "health not run: nvidia-smi missing: gpu-1"]
    _, notes, ran = verify.health(plan, {"gpu-0": {"nvidia-smi-missing": "", "dcgmi-missing": ""}})
    assert not ran and notes[0] == "health not run: nvidia-smi missing: gpu-0"


def slurm_plan(count: int):
    from railyard.model.catalog import load_catalog
    from railyard.model.plan import make_plan
    from railyard.stack import parse_config

    from .model.test_acceptance import config

    spec = parse_config(config(count, extra={"railyard:slurm": {}}), stack="t")
    return spec, make_plan(spec, load_catalog())


def test_pairs_are_launched_with_srun_on_the_controller_and_judged_there(monkeypatch):
    from railyard.remote import ssh

    spec, plan = slurm_plan(2)
    hosts = {n.name: ssh.Target(n.name, f"10.0.0.{i}") for i, n in enumerate(plan.nodes)}
    ran: list[tuple[str, list[str]]] = []
    kept = (GPU / "all_reduce_perf-h100-2node-16gpu-nvls-healthy.txt").read_text()
    rail4 = plan.node_named("gpu-0").nics[4].name

    def run(target, argv, **_):
        ran.append((target.name, argv))
        if rail4 in argv:  # a job holds rail 4's pair
            return ssh.Result(1, "", "srun: error: Unable to allocate resources: Requested node configuration "
                                     "is not available\n", "")
        return ssh.Result(0, kept, "", "")

    monkeypatch.setattr(ssh, "run", run)
    found, notes, ran_any = verify.pair_collectives(spec, plan, hosts, None)
    # Eight rails of a two-node ring: eight pairs, each one srun on Slurm's controller.
    assert len(ran) == 8 and {name for name, _ in ran} == {plan.slurm.controller.name}
    assert all(argv[:5] == ["timeout", "-k", "5", "55", "srun"] for _, argv in ran) and ran_any
    # The kept run (469 GB/s) is far above a 400 Gb/s rail's 50 GB/s: nothing found; the pair that
    # got no allocation is said, not passed.
    assert found == [] and len(notes) == 1 and notes[0].startswith("pair collectives not run: Slurm gave no "
                                                                  "allocation") and "rail4 gpu-0 <-> gpu-1" in notes[0]


def test_a_stack_without_slurm_runs_no_pair_and_says_why():
    _, plain = load(ROOT / "stacks" / "Pulumi.lab.yaml")
    found, notes, ran = verify.pair_collectives(plain.spec, plain, {}, None)
    assert (found, ran) == ([], False) and "the stack has no railyard:slurm" in notes[0]
