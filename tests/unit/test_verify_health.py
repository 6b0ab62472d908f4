"""The health part of `railyard verify` (railyard.verify.health) on real tool output: the script a
node runs splits into its tools' sections, a node's findings name it, and a tool that is missing is
a note that says so, never a pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

from railyard import verify
from railyard.model import health_check
from railyard.model.node_health import SINFO
from railyard.stack import load

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "railyard" / "data" / "fixtures" / "gpu"
SLURM = ROOT / "railyard" / "data" / "fixtures" / "slurm"


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


def slurm_plan(count: int, slurm: dict | None = None):
    from railyard.model.catalog import load_catalog
    from railyard.model.plan import make_plan
    from railyard.remote import ssh
    from railyard.stack import parse_config

    from .model.test_acceptance import config

    spec = parse_config(config(count, extra={"railyard:slurm": slurm or {}}), stack="t")
    plan = make_plan(spec, load_catalog())
    return spec, plan, {n.name: ssh.Target(n.name, f"10.0.0.{i}") for i, n in enumerate(plan.nodes)}


def controller(monkeypatch, answer, sinfo: str = "gpu-0|idle|Unknown|none\ngpu-1|idle|Unknown|none\n") -> list[list[str]]:
    """ssh.run on Slurm's controller: sinfo says `sinfo`, every other command is answer(argv)'s
    (rc, stdout, stderr); the commands answered, in order."""
    from railyard.remote import ssh

    ran: list[list[str]] = []

    def run(target, argv, **_):
        if argv == SINFO:
            return ssh.Result(0, sinfo, "", "")
        ran.append(argv)
        return ssh.Result(*answer(argv), "")

    monkeypatch.setattr(ssh, "run", run)
    return ran


def test_pairs_are_launched_with_srun_on_the_controller_and_judged_there(monkeypatch):
    from .model.test_pair_collectives import REAL

    spec, plan, hosts = slurm_plan(2)
    rail4 = plan.node_named("gpu-0").nics[4].name
    busy = (1, "", (SLURM / "srun_busy_immediate.txt").read_text())  # real Slurm 22.05 (its SOURCES.md)
    # A job holds rail 4's pair.
    ran = controller(monkeypatch, lambda argv: busy if rail4 in argv else (0, REAL, ""))
    found, notes, ran_on = verify.pair_collectives(spec, plan, hosts, None)
    # Eight rails of a two-node ring: eight pairs, each one srun on Slurm's controller.
    assert len(ran) == 8 and all(argv[4:10] == ["timeout", "-k", "5", "60", "srun", "--mpi=pmix"] for argv in ran)
    assert ran_on == {(n, r) for n in ("gpu-0", "gpu-1") for r in range(8) if r != 4}
    # Every pair's table is alike, so none is below the median (the lab's rails are held to each
    # other); the pair that got no allocation is said, not passed.
    assert found == [] and len(notes) == 1 and notes[0].startswith("pair collectives not run: Slurm gave no "
                                                                  "allocation") and "rail4 gpu-0 <-> gpu-1" in notes[0]


def test_a_stack_naming_pmi2_launches_every_pair_with_it(monkeypatch):
    from .model.test_pair_collectives import REAL

    spec, plan, hosts = slurm_plan(2, {"mpi": "pmi2"})
    ran = controller(monkeypatch, lambda argv: (0, REAL, ""))
    found, _, _ = verify.pair_collectives(spec, plan, hosts, None)
    assert found == [] and len(ran) == 8 and all(argv[8:10] == ["srun", "--mpi=pmi2"] for argv in ran)


def test_a_stack_without_slurm_runs_no_pair_and_says_why():
    _, plain = load(ROOT / "stacks" / "Pulumi.lab.yaml")
    found, notes, ran = verify.pair_collectives(plain.spec, plain, {}, None)
    assert (found, ran) == ([], set()) and "the stack has no railyard:slurm" in notes[0]


def test_a_slow_pair_whose_second_run_gets_no_allocation_keeps_its_first_result(monkeypatch):
    from .model.test_pair_collectives import REAL, scaled

    spec, plan, hosts = slurm_plan(2)
    rail2, seen = plan.node_named("gpu-0").nics[2].name, []

    def answer(argv):
        if rail2 not in argv:
            return 0, REAL, ""
        seen.append(argv)
        return (0, scaled(REAL, 0.01), "") if len(seen) == 1 else \
            (1, "", (SLURM / "srun_busy_immediate.txt").read_text())

    controller(monkeypatch, answer)
    found, _, _ = verify.pair_collectives(spec, plan, hosts, None)
    assert len(seen) == 2 and [(f.kind, f.node, f.where) for f in found] == [
        ("collective-slow", "gpu-0", "rail2"), ("collective-slow", "gpu-1", "rail2")]


def test_a_pair_stopped_at_its_time_limit_stays_failed_when_its_cancel_cannot_reach_the_controller(monkeypatch):
    from railyard.remote import ssh

    from .model.test_pair_collectives import REAL, STARTED

    spec, plan, hosts = slurm_plan(2)
    rail3 = plan.node_named("gpu-0").nics[3].name

    def answer(argv):
        if argv[0] == "scancel":
            raise ssh.SshError("gpu-0: ssh: connect to host 198.18.0.2 port 22: Connection timed out")
        return (124, STARTED, "") if rail3 in argv else (0, REAL, "")

    controller(monkeypatch, answer)
    found, notes, _ = verify.pair_collectives(spec, plan, hosts, None)
    assert {(f.kind, f.where) for f in found} == {("collective-failed", "rail3")}
    assert not any("rail3" in n for n in notes)


def test_a_rail_pair_finding_stands_through_a_reading_whose_pairs_did_not_run():
    pair = verify.Finding("collective-slow", "gpu-1", "rail5", "50 GB/s", "0.05 GB/s",
                          "gpu-1 rail5: all_reduce_perf of gpu-0 <-> gpu-1 (through leaf): 0.05 GB/s ...")
    own = verify.Finding("collective-slow", "gpu-1", "gpu-1", "478 GB/s", "318 GB/s",
                         "gpu-1: all_reduce_perf over 8 ranks (gpu-1): 318 GB/s bus bandwidth ...")
    other = verify.Finding("collective-slow", "gpu-2", "rail5", "50 GB/s", "0.05 GB/s",
                           "gpu-2 rail5: all_reduce_perf of gpu-1 <-> gpu-2 (through leaf): 0.05 GB/s ...")
    wrong = verify.Finding("collective-wrong", "gpu-1", "rail5 gpu-0 <-> gpu-1 (through leaf)", "0", "3",
                           "gpu-1: all_reduce_perf over rail5 gpu-0 <-> gpu-1 (through leaf) counted 3 wrong result(s)")
    before = {"gpu-1": [pair, own, wrong], "gpu-2": [other]}
    # gpu-1's rail 5 pairs did not run (drained; only its rail 0 ran): that finding stands, its own
    # collective's does not; gpu-2's rail 5 pairs ran, and what they found now is all that counts.
    assert verify.standing_pair_findings(before, ["gpu-1", "gpu-2"], {("gpu-1", 0), ("gpu-2", 5)}) == \
        {"gpu-1": [pair, wrong]}
    from railyard.model.pair_collectives import pair_rail

    # One reading of what a rail pair's finding is, for findings and recorded states alike.
    assert [pair_rail(f.message) for f in (pair, wrong, own)] == [("gpu-1", 5), ("gpu-1", 5), None]


def test_a_node_slurm_shows_drained_or_busy_runs_no_pair_and_is_named(monkeypatch):
    from .model.test_pair_collectives import REAL

    spec, plan, hosts = slurm_plan(4)
    # Real sinfo: gpu-1 drained, gpu-2 running a job, gpu-0 idle (gpu-3 is not in that capture).
    ran = controller(monkeypatch, lambda argv: (0, REAL, ""), sinfo=(SLURM / "sinfo_drained_mixed.txt").read_text())
    found, notes, ran_on = verify.pair_collectives(spec, plan, hosts, None)
    # Of a four-node ring's pairs on each rail, only gpu-3 <-> gpu-0 has neither node: it alone runs.
    assert found == [] and len(ran) == 8 and all("--nodelist=gpu-3,gpu-0" in argv for argv in ran)
    assert ran_on == {(n, r) for n in ("gpu-0", "gpu-3") for r in range(8)}
    assert any(n.startswith("pair collectives not run: Slurm has gpu-1 out of scheduling: rail0 gpu-0 <-> gpu-1")
               for n in notes)
    assert any(n.startswith("pair collectives not run: Slurm has gpu-2 running a job") for n in notes)


def test_a_driver_whose_rails_carry_their_rate_holds_each_pair_to_the_rails_speed(monkeypatch):
    import dataclasses

    from railyard import drivers
    from railyard.model import pair_collectives as pc

    from .model.test_pair_collectives import REAL, scaled

    entry = drivers.entry
    monkeypatch.setattr(drivers, "entry", lambda name: dataclasses.replace(
        entry(name), capabilities=dataclasses.replace(entry(name).capabilities, rails_at_host_rate=None)))
    spec, plan, hosts = slurm_plan(2)
    rail6 = plan.node_named("gpu-0").nics[6].name
    # Every rail's pair at the real run's 469 GB/s, rail 6's at 5% of it: 23 GB/s, below 85% of 50.
    ran = controller(monkeypatch, lambda argv: (0, scaled(REAL, 0.05) if rail6 in argv else REAL, ""))
    found, _, _ = verify.pair_collectives(spec, plan, hosts, None)
    assert all("--mpi=pmix" in argv and argv[-len(pc.SIZES.argv()):] == pc.SIZES.argv() for argv in ran)
    assert [(f.kind, f.node, f.where, f.planned) for f in found] == [
        ("collective-slow", "gpu-0", "rail6", "50 GB/s"), ("collective-slow", "gpu-1", "rail6", "50 GB/s")]
    assert "more than 15% below the rail's planned speed (50 GB/s)" in found[0].message


def test_a_reading_names_each_findings_part_and_the_nodes_a_part_did_not_read(monkeypatch):
    """What a node's state may move on (NodeState.reread): an Xid is health's; a DCGM diagnostic
    of a --deep reading is its deep checks', which a quick reading does not run again; a node none
    of whose GPU tools ran was not read by the health part, though the other node was."""
    import types

    spec, plan = load(ROOT / "stacks" / "Pulumi.lab.yaml")
    readings = {
        "gpu-0": {"nvidia-smi": (GPU / "nvidia-smi-q-x-a100-sxm4-mig-healthy.xml").read_text(),
                  "nvlink": (GPU / "nvidia-smi-nvlink-status-h100-gpu0.txt").read_text(),
                  "kernel-log": (GPU / "xid-13-109-dmesg.txt").read_text(),
                  "dcgmi": (GPU / "dcgmi-diag-r2-v4-gb10-software-fail.json").read_text()},
        "gpu-1": {"nvidia-smi-missing": "", "dcgmi-missing": ""},
    }
    monkeypatch.setattr(verify, "read_health", lambda *a, **kw: readings)
    monkeypatch.setattr(verify, "pair_collectives", lambda *a, **kw: ([], ["pairs not run"], set()))
    hosts = {n: types.SimpleNamespace(address=f"10.0.0.{i}") for i, n in enumerate(readings)}
    report = verify.collect(spec, plan, hosts, None, parts=["health"], deep=True)
    parts = {(f.kind, f.part) for f in report.findings}
    assert ("xid", "health") in parts and ("dcgm-diag", verify.DEEP) in parts, parts
    assert report.unread_on == {"gpu-1": {"health"}} and "health" not in report.unread
    quick = verify.collect(spec, plan, hosts, None, parts=["health"], deep=False)
    assert {f.part for f in quick.findings} == {"health"}
