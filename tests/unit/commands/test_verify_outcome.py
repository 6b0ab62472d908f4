"""What `railyard verify` says of a run (railyard.commands.verify): one exit status for its text
and its JSON, a repair judged by what it left, a re-reading that keeps a rail pair's finding its
pairs did not re-test, and a host the stack file no longer plans left out with a word instead of a
traceback."""

from __future__ import annotations

import argparse
import contextlib
import json
import types

import pytest

from railyard import repair
from railyard.commands import verify as command
from railyard.engine import pulumi
from railyard.model.node_health import NodeState
from railyard.verify import Finding, Report

PAIR = "gpu-3 rail2: all_reduce_perf of gpu-2 <-> gpu-3 (leaf): 0.05 GB/s bus bandwidth at its largest size"


def finding(node: str | None, message: str, kind: str = "gpu-count") -> Finding:
    return Finding(kind, node, "GPU2", "8", "7", message)


def test_a_repair_is_done_only_where_every_node_is_ready_and_nothing_was_out_of_its_reach():
    ready = {"gpu-1": NodeState(), "gpu-2": NodeState()}
    fixed = [finding("gpu-1", "gpu-1: 7 GPUs")]
    assert command._repaired(repair.Outcome(states=ready), fixed)
    # A node left drained, a faulty node acceptance or a person holds, a cable between switches.
    drained = {**ready, "gpu-2": NodeState("drained")}
    assert not command._repaired(repair.Outcome(states=drained), fixed)
    cordoned = {"gpu-1": "railyard: acceptance: x"}
    assert not command._repaired(repair.Outcome(states=ready, by_acceptance=cordoned), fixed)
    assert not command._repaired(repair.Outcome(states=ready, by_person={"gpu-1": "rma 4711"}), fixed)
    assert not command._repaired(repair.Outcome(states=ready), [finding(None, "leaf0 swp1 <-> spine0 swp3 missing",
                                                                        "link-missing")])


def test_a_rail_pair_finding_stands_through_a_re_reading_that_ran_no_pairs_at_any_depth():
    slow = finding("gpu-3", PAIR, "collective-slow")
    latest = {"gpu-3": [slow], "gpu-1": [finding("gpu-1", "gpu-1: 7 GPUs")]}
    # A plain re-reading (no --deep: no pairs run) finds nothing new on either node.
    said = command._rechecked(Report(), ["gpu-3", "gpu-1"], latest, {})
    assert said == {"gpu-3": [PAIR]} and latest["gpu-3"] == [slow] and latest["gpu-1"] == []
    # A suspect held by its record alone keeps it too; once its rail runs again, its result decides.
    assert command._rechecked(Report(), ["gpu-3"], {}, {"gpu-3": [PAIR]}) == {"gpu-3": [PAIR]}
    recorded = {"gpu-3": [PAIR]}
    assert command._rechecked(Report(pairs_run={("gpu-3", 2)}), ["gpu-3"], {"gpu-3": [slow]}, recorded) == {}
    # Settled: the reading after its reset, which runs no pair on the drained node, does not
    # bring the old finding back.
    assert recorded == {} and command._rechecked(Report(), ["gpu-3"], {"gpu-3": []}, recorded) == {}


@pytest.fixture
def lab_outputs(monkeypatch, tmp_path):
    """The lab stack's outputs with one machine more than its stack file plans (an edit not yet
    applied), in a project of its own, and verify's reading stubbed: what reaches it is recorded."""
    seen: dict = {}
    from railyard.stack import load

    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.lab.yaml").write_text(command.paths.stack_file("lab").read_text())
    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    _, plan = load(command.paths.stack_file("lab"))
    inventory = [{"name": n.name, "management_ip": n.management_ip, "host_key": "ssh-ed25519 AAAA"} for n in plan.nodes]
    inventory.append({"name": "gpu-9", "management_ip": "10.0.0.99", "host_key": "ssh-ed25519 AAAA"})
    monkeypatch.setattr(pulumi, "stack_outputs", lambda stack, secrets=False: {
        "inventory": inventory, "access": {"privateKey": "KEY"}})

    def collect(spec, plan, hosts, key, **kw):
        seen["hosts"] = sorted(hosts)
        return Report(notes=["fabric read"])

    from railyard import verify

    monkeypatch.setattr(verify, "collect", collect)
    # Its schedulers: none holds a node out, and no other run holds the cluster.
    monkeypatch.setattr(repair, "schedulers", lambda *a: types.SimpleNamespace(
        read=dict, hold=lambda who: contextlib.nullcontext()))
    return seen


def args(**kw) -> argparse.Namespace:
    base = dict(stack="lab", json=False, only="hardware", deep=False, ibnetdiscover=None, timeout=None, repair=False)
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("as_json", [False, True])
def test_text_and_json_give_one_exit_status_for_a_repair_that_left_a_node_drained(lab_outputs, monkeypatch,
                                                                                   capsys, as_json):
    left = repair.Outcome(states={"gpu-0": NodeState("drained", "railyard: x")})
    monkeypatch.setattr(command, "_states", lambda *a: left)
    assert command.handle(args(json=as_json, repair=True)) == 1
    out = capsys.readouterr().out
    if as_json:
        assert json.loads(out) == []
    else:
        assert "as planned; the repair left nodes not ready (above)" in out
    monkeypatch.setattr(command, "_states", lambda *a: repair.Outcome(states={"gpu-0": NodeState()}))
    assert command.handle(args(json=as_json, repair=True)) == 0


def test_a_machine_the_stack_file_no_longer_plans_is_named_and_the_rest_read(lab_outputs, monkeypatch, capsys):
    monkeypatch.setattr(command, "_states", lambda *a: repair.Outcome(states={}))
    assert command.handle(args()) == 0
    err = capsys.readouterr().err
    assert "not read: gpu-9: in stack lab's inventory, not in Pulumi.lab.yaml (its next `up` removes them)" in err
    assert "gpu-9" not in lab_outputs["hosts"] and lab_outputs["hosts"]


def test_a_repair_stopped_part_way_still_reports_what_was_found_and_fails(lab_outputs, monkeypatch, capsys):
    """The controller stops answering mid-loop: the changes the loop saved stand, the findings
    and the states are shown, and the run fails (1, not 2: the stack was verified)."""
    from railyard import verify
    from railyard.model.node_health import reason

    found = finding("gpu-0", "gpu-0: GPU2 (0000:3a:00.0) missing", "gpu-missing")
    monkeypatch.setattr(verify, "collect", lambda *a, **kw: Report(findings=[found]))
    monkeypatch.setattr(repair, "schedulers", lambda *a: types.SimpleNamespace(hold=lambda who: contextlib.nullcontext()))
    monkeypatch.setattr(repair, "actions", lambda *a: types.SimpleNamespace())
    monkeypatch.setattr(repair, "budgets", lambda *a: ({"gpu": ["gpu-0", "gpu-1"]}, {"gpu": 1}))
    monkeypatch.setattr(command, "_record_outputs", lambda *a: None)

    def stops(states, findings, nodes, pools, budgets, act, **kw):
        act.save({"gpu-0": NodeState().to("drained", reason(findings["gpu-0"][0]), 1.0, findings["gpu-0"][0])})
        raise repair.RepairError("Slurm's controller gpu-0: ssh: connect timed out")

    monkeypatch.setattr(repair, "repair", stops)
    assert command.handle(args(repair=True)) == 1
    out, err = capsys.readouterr()
    assert "railyard verify: the repair stopped: Slurm's controller gpu-0: ssh: connect timed out" in err
    assert "gpu-missing      gpu-0: GPU2 (0000:3a:00.0) missing" in out
    assert "node drained     gpu-0: railyard: gpu-0: GPU2" in out
    assert json.loads(command.paths.node_states("lab").read_text())["nodes"]["gpu-0"]["state"] == "drained"


def test_only_hardware_keeps_a_node_drained_for_an_xid_and_keeps_what_it_found_standing(
        lab_outputs, monkeypatch, capsys):
    """A node drained for an Xid is neither returned nor counted clean by a reading of the
    hardware alone, and says why; what that reading finds is kept with its part, so a later
    `--only hardware` can settle it."""
    from dataclasses import replace

    from railyard import verify
    from railyard.model.node_health import dump_states, reason

    xid = "gpu-0: Xid 79 on GPU 00000000:1B:00.0"
    drained = replace(NodeState().to("drained", reason(xid), 1.0, xid), open=("health",))
    path = command.paths.node_states("lab")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_states({"gpu-0": drained}))
    nic = Finding("nic-missing", "gpu-1", "mlx5_3", "mlx5_3", None, "gpu-1: mlx5_3 missing", "hardware")
    monkeypatch.setattr(verify, "collect", lambda *a, **kw: Report(findings=[nic]))
    monkeypatch.setattr(repair, "schedulers", lambda *a: types.SimpleNamespace(read=dict))
    monkeypatch.setattr(command, "_record_outputs", lambda *a: None)
    assert command.handle(args(only="hardware")) == 1
    out = capsys.readouterr().out
    assert f"node drained     gpu-0: {reason(xid)} (kept: its findings in health not read this time)" in out
    saved = json.loads(path.read_text())["nodes"]
    assert saved["gpu-1"]["state"] == "suspect" and saved["gpu-1"]["open"] == ["hardware"]
    # A clean hardware reading settles what a hardware reading found; health where its tools ran
    # on a node settles that node alone.
    monkeypatch.setattr(verify, "collect", lambda *a, **kw: Report())
    assert command.handle(args(only="hardware")) == 0
    assert json.loads(path.read_text())["nodes"]["gpu-1"]["state"] == "ready"
    path.write_text(dump_states({"gpu-0": drained, "gpu-1": replace(drained, reason="railyard: x")}))
    monkeypatch.setattr(verify, "collect", lambda *a, **kw: Report(unread_on={"gpu-1": {"health"}}))
    monkeypatch.setattr(repair, "schedulers", lambda *a: types.SimpleNamespace(read=lambda: {
        n: repair.Held(out=True, reason="railyard: x") for n in ("gpu-0", "gpu-1")}))
    command.handle(args(only="hardware,health"))
    after = json.loads(path.read_text())["nodes"]
    # (Without --repair both stay drained: the loop returns nodes.) gpu-0's Xid is settled, and
    # gpu-1's, whose tools did not run, stands; it is not the loop's to return.
    assert "open" not in after["gpu-0"] and after["gpu-1"]["open"] == ["health"]
    assert "gpu-1: railyard: x (kept: its findings in health not read this time)" in capsys.readouterr().out


def test_a_re_reading_that_could_not_read_a_part_keeps_that_parts_findings():
    """After a reboot the node's port is not yet up and ibnetdiscover fails on it: the cable it
    was drained for is not thereby mended."""
    swapped = Finding("cable-swapped", "gpu-0", "gpu-0 mlx5_0 port 1 and gpu-0 mlx5_3 port 1", None, None,
                      "gpu-0 mlx5_0 port 1 and gpu-0 mlx5_3 port 1: swapped", "fabric")
    latest = {"gpu-0": [swapped]}
    said = command._rechecked(Report(unread={"fabric": "ibnetdiscover exited 1"}), ["gpu-0"], latest, {})
    assert said == {"gpu-0": [swapped.message]} and latest["gpu-0"] == [swapped]
    # Read, and clean: gone.
    assert command._rechecked(Report(), ["gpu-0"], latest, {}) == {} and latest["gpu-0"] == []


def test_repair_with_a_dump_file_is_refused_before_anything_is_read(lab_outputs, capsys):
    assert command.handle(args(repair=True, ibnetdiscover="subnet.txt")) == 2
    assert "--repair reads each node again after its reset, and the file --ibnetdiscover names" in \
        capsys.readouterr().err
    assert "hosts" not in lab_outputs


def test_a_plain_verify_during_a_repair_shows_the_states_as_that_run_saved_them(lab_outputs, monkeypatch, capsys):
    """A node being reset reads as `repairing`, not as a reset interrupted, and nothing is written."""
    from railyard import verify
    from railyard.model.node_health import dump_states, reason

    found = finding("gpu-0", "gpu-0: GPU2 (0000:3a:00.0) missing", "gpu-missing")
    drained = NodeState().to("drained", reason(found.message), 1.0, found.message)
    resetting = drained.to("repairing", "reset 1 of 2", 2.0, tries=1)
    path = command.paths.node_states("lab")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_states({"gpu-0": resetting}))
    monkeypatch.setattr(verify, "collect", lambda *a, **kw: Report(findings=[found]))
    with repair.holding(path):
        assert command.handle(args()) == 1
        out, err = capsys.readouterr()
    assert "node repairing   gpu-0: reset 1 of 2" in out and "interrupted" not in out
    assert "shown as the running repair last saved them" in err
    assert repair.read_states(path) == {"gpu-0": resetting}


def test_a_machine_the_stack_file_no_longer_plans_keeps_its_record_until_up_removes_it(lab_outputs, monkeypatch):
    from railyard.model.node_health import dump_states, reason

    handed = NodeState().to("failed", reason("failed after 2 resets: gpu-9: GPU2 missing"), 1.0, "gpu-9: GPU2 missing")
    path = command.paths.node_states("lab")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_states({"gpu-9": handed}))
    monkeypatch.setattr(repair, "schedulers", lambda *a: types.SimpleNamespace(read=dict))
    monkeypatch.setattr(command, "_record_outputs", lambda *a: None)
    assert command.handle(args()) == 0
    assert repair.read_states(path)["gpu-9"] == handed


def test_the_parts_read_on_each_node_and_the_part_of_each_finding_reach_the_states(lab_outputs, monkeypatch):
    from railyard import verify

    xid = Finding("xid", "gpu-0", "0000:1b:00", None, "Xid 79", "gpu-0: Xid 79 on GPU 00000000:1B:00.0", "health")
    gone = Finding("unreachable", "gpu-1", "10.0.0.2", "reachable over SSH", "timed out",
                   "gpu-1: not read (ssh: connect timed out)", "hardware")
    monkeypatch.setattr(verify, "collect", lambda *a, **kw: Report(findings=[xid, gone], unread_on={"gpu-0": {"fabric"}}))
    seen: dict = {}

    def judge(states, findings, nodes, scheduler, now, **kw):
        seen.update(kw, findings=findings)
        return repair.Outcome(states={})

    monkeypatch.setattr(repair, "judge", judge)
    monkeypatch.setattr(repair, "schedulers", lambda *a: None)
    monkeypatch.setattr(command, "_record_outputs", lambda *a: None)
    assert command.handle(args(only="hardware,fabric,health", deep=True)) == 1
    assert seen["read"] == {"gpu-0": ["hardware", "health", "deep"], "gpu-1": ["hardware", "fabric", "health", "deep"]}
    # An unreachable node's finding read nothing on it: no part, so what stood before stands.
    assert seen["part_of"] == {xid.message: "health"} and seen["findings"]["gpu-1"] == [gone.message]


def test_a_repair_refused_the_cluster_reads_nothing_and_says_who_holds_it(lab_outputs, monkeypatch, capsys):
    @contextlib.contextmanager
    def busy(who):
        raise repair.RepairError("another repair run holds this cluster (ci run 42); try again when it ends")
        yield

    monkeypatch.setattr(repair, "schedulers", lambda *a: types.SimpleNamespace(read=dict, hold=busy))
    assert command.handle(args(repair=True)) == 2
    assert "railyard verify: another repair run holds this cluster (ci run 42)" in capsys.readouterr().err
    assert "hosts" not in lab_outputs  # refused before anything was read
    # This checkout's own lock went with the refusal: a plain verify records again.
    monkeypatch.setattr(command, "_record_outputs", lambda *a: None)
    assert command.handle(args()) == 0 and command.paths.node_states("lab").exists()
