"""The repair loop's rules (railyard.repair, railyard.model.node_health) on a cluster of fakes:
a Slurm that keeps each node's drain and reason and jobs, and nodes whose faults a reset clears
(transient) or keeps (persistent). What a user relies on: a person's drain is never touched, a
pool never has more than its budget out, a node is never reset under a job, a persistent fault
ends in `failed` after two resets with its history, and every change is recorded."""

from __future__ import annotations

import json
import types
from dataclasses import replace

import pytest

from railyard.model.node_health import MAX_TRIES, PREFIX, Held, NodeState, dump_states, load_states, reason
from railyard.model.node_health import as_output, parse_sinfo, states_from
from railyard import repair as repair_mod
from railyard.repair import Actions, RepairError, judge, repair


class Cluster:
    """Slurm's view of the nodes and the nodes' faults, with a log of what was done."""

    name = "Slurm"

    def __init__(self, nodes: list[str], *, transient=(), persistent=(), busy=(), person: dict | None = None):
        self.held = {n: Held() for n in nodes}
        for n, why in (person or {}).items():
            self.held[n] = Held(out=True, reason=why)
        self.transient, self.persistent = set(transient), set(persistent)
        self.jobs = {n: 0 for n in nodes}
        for n in busy:
            self.jobs[n] = 10**9
        self.log: list[tuple[str, str]] = []
        self.clock = 1000.0
        self.most_out = 0

    # the scheduler
    def read(self):
        return {n: Held(h.out, h.reason, busy=self.jobs[n] > self.clock, system=h.system, responding=h.responding)
                for n, h in self.held.items()}

    def drain(self, node, why):
        self.held[node] = Held(out=True, reason=why)
        self.log.append(("drain", node))
        self.most_out = max(self.most_out, sum(h.out for h in self.held.values()))

    def resume(self, node):
        self.held[node] = Held()
        self.log.append(("resume", node))

    # the nodes
    def findings(self):
        return {n: [f"{n}: GPU2 (0000:3a:00.0) missing"] for n in sorted(self.transient | self.persistent)}

    def reset(self, node):
        self.log.append(("reset", node))
        self.transient.discard(node)
        return "rebooted"

    def retune(self, node):
        self.log.append(("retune", node))

    def recheck(self, nodes):
        return {n: f for n, f in self.findings().items() if n in nodes}

    def scheduler(self, read=None, resume=None):
        """This cluster's Slurm with its read or resume replaced (a controller that stops
        answering, a node that will not come back)."""
        return types.SimpleNamespace(name=self.name, read=read or self.read, drain=self.drain,
                                     resume=resume or self.resume)

    def actions(self):
        def sleep(s):
            self.clock += s

        def now():
            self.clock += 0.1
            return self.clock

        return Actions(scheduler=self, reset=self.reset, retune=self.retune, recheck=self.recheck, now=now,
                       sleep=sleep)


NODES = [f"gpu-{i}" for i in range(4)]
POOLS = {"gpu": NODES}


def run(c: Cluster, states=None, budget=1, drain_timeout=60.0, **kw):
    return repair(states or {}, c.findings(), NODES, POOLS, {"gpu": budget}, c.actions(),
                  drain_timeout=drain_timeout, **kw)


def test_a_transient_fault_is_drained_with_railyards_reason_reset_rechecked_and_returned():
    c = Cluster(NODES, transient=["gpu-1"])
    out = run(c)
    assert c.log == [("drain", "gpu-1"), ("reset", "gpu-1"), ("retune", "gpu-1"), ("resume", "gpu-1")]
    s = out.states["gpu-1"]
    assert s.state == "ready" and s.tries == 0
    assert [ch.state for ch in s.history] == ["suspect", "drained", "repairing", "ready"]
    drained = s.history[1]
    assert drained.reason.startswith(PREFIX) and "GPU2" in drained.reason and drained.finding
    assert [ch.time for ch in s.history] == sorted(ch.time for ch in s.history)
    assert not c.held["gpu-1"].out and out.failed() == {}
    # How the node was reset is said, between its reset and its return.
    assert out.done.index("gpu-1: rebooted") == out.done.index("gpu-1: resetting (try 1 of 2)") + 1


def test_a_persistent_fault_fails_after_two_resets_and_stays_drained_for_a_person():
    c = Cluster(NODES, persistent=["gpu-2"])
    out = run(c)
    assert [a for a in c.log if a[0] == "reset"] == [("reset", "gpu-2")] * MAX_TRIES
    assert ("resume", "gpu-2") not in c.log
    s = out.states["gpu-2"]
    assert s.state == "failed" and s.tries == MAX_TRIES and "GPU2" in s.reason
    assert c.held["gpu-2"].out and c.held["gpu-2"].reason.startswith(PREFIX)
    assert list(out.failed()) == ["gpu-2"]
    # The next run leaves it alone: no second round of resets, even were it to pass.
    c.persistent.clear()
    c.log.clear()
    again = run(c, states=out.states)
    assert c.log == [] and again.states["gpu-2"].state == "failed"


def test_three_faulty_nodes_with_a_budget_of_one_are_repaired_one_at_a_time():
    c = Cluster(NODES, transient=["gpu-0", "gpu-2", "gpu-3"])
    out = run(c, budget=1)
    assert c.most_out == 1
    order = [(a, n) for a, n in c.log if a in ("drain", "resume")]
    assert order == [("drain", "gpu-0"), ("resume", "gpu-0"), ("drain", "gpu-2"), ("resume", "gpu-2"),
                     ("drain", "gpu-3"), ("resume", "gpu-3")]
    assert all(s.state == "ready" for s in out.states.values())


def test_a_budget_of_two_takes_two_out_at_once_and_no_more():
    c = Cluster(NODES, transient=["gpu-0", "gpu-1", "gpu-2"])
    run(c, budget=2)
    assert c.most_out == 2


def test_a_failed_node_keeps_its_place_in_the_budget_so_the_others_wait():
    c = Cluster(NODES, persistent=["gpu-0"], transient=["gpu-3"])
    out = run(c, budget=1)
    assert out.states["gpu-0"].state == "failed"
    assert ("drain", "gpu-3") not in c.log and out.waiting == ["gpu-3"]
    assert out.states["gpu-3"].state == "suspect"


def test_a_node_a_person_drained_is_untouched_and_reported_and_counts_against_the_budget():
    c = Cluster(NODES, transient=["gpu-1", "gpu-2"], person={"gpu-1": "RMA 4711: reseat GPU2"})
    out = run(c, budget=1)
    assert not [a for a in c.log if a[1] == "gpu-1"]
    assert c.held["gpu-1"] == Held(out=True, reason="RMA 4711: reseat GPU2")
    assert out.by_person == {"gpu-1": "RMA 4711: reseat GPU2"}
    assert "gpu-1" not in out.states or out.states["gpu-1"].state == "ready"
    # The person's node fills the pool's one place: gpu-2 waits.
    assert ("drain", "gpu-2") not in c.log and out.waiting == ["gpu-2"]


def test_a_node_still_running_jobs_at_the_drain_timeout_stays_drained_and_is_not_reset():
    c = Cluster(NODES, transient=["gpu-1"], busy=["gpu-1"])
    out = run(c, drain_timeout=30)
    assert ("drain", "gpu-1") in c.log and ("reset", "gpu-1") not in c.log
    assert out.states["gpu-1"].state == "drained" and out.left == ["gpu-1"]
    # Its jobs end; the next run resets it without draining it again.
    c.jobs["gpu-1"] = 0
    c.log.clear()
    again = run(c, states=out.states)
    assert c.log == [("reset", "gpu-1"), ("retune", "gpu-1"), ("resume", "gpu-1")]
    assert again.states["gpu-1"].state == "ready"


def test_a_fault_gone_at_the_second_look_leaves_the_node_in_service():
    c = Cluster(NODES, transient=["gpu-1"])
    findings = c.findings()
    c.transient.clear()  # gone before the second look
    out = repair({}, findings, NODES, POOLS, {"gpu": 1}, c.actions(), drain_timeout=60)
    assert c.log == [] and out.states["gpu-1"].state == "ready"
    assert [ch.state for ch in out.states["gpu-1"].history] == ["suspect", "ready"]


def test_a_node_never_reset_is_failed_with_why_and_not_rebooted():
    c = Cluster(NODES, transient=["gpu-0"])
    out = run(c, keep_out={"gpu-0": "it runs the Slurm controller"})
    assert ("reset", "gpu-0") not in c.log and out.states["gpu-0"].state == "failed"
    assert "Slurm controller" in out.states["gpu-0"].reason


def test_a_reset_that_fails_counts_as_a_try():
    c = Cluster(NODES, transient=["gpu-1"])
    act = c.actions()

    def dead(node):
        raise RuntimeError(f"{node} did not come back within 120 s of `systemctl reboot`")

    act.reset = dead
    out = repair({}, c.findings(), NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    s = out.states["gpu-1"]
    assert s.state == "failed" and "did not come back" in s.reason


def test_verify_without_repair_marks_suspects_and_returns_them_when_clean():
    c = Cluster(NODES, transient=["gpu-3"])
    first = judge({}, c.findings(), NODES, c, now=1.0)
    assert first.states["gpu-3"].state == "suspect" and c.log == []
    c.transient.clear()
    second = judge(first.states, c.findings(), NODES, c, now=2.0)
    assert second.states["gpu-3"].state == "ready"


def test_states_survive_their_file_with_their_history():
    s = NodeState().to("suspect", reason("gpu-1: Xid 79"), 1.0, "gpu-1: Xid 79").to("drained", "railyard: x", 2.0)
    back = load_states(dump_states({"gpu-1": s}))
    assert back == {"gpu-1": s}


def test_the_stack_output_holds_every_planned_node_and_gives_the_states_back(tmp_path):
    s = NodeState().to("suspect", reason("gpu-1: Xid 79"), 1.0, "gpu-1: Xid 79").to("drained", "railyard: x", 2.0)
    out = as_output({"gpu-1": s, "gone-7": NodeState().to("failed", "railyard: y", 3.0)}, ["gpu-0", "gpu-1"])
    # Every planned node has its one state; one with no record is ready, and a recorded node the
    # plan no longer has keeps its history.
    assert {n: d["state"] for n, d in out["nodes"].items()} == {"gpu-0": "ready", "gpu-1": "drained",
                                                                "gone-7": "failed"}
    # What the engine hands back (numbers as floats, through JSON) is the same states.
    back = states_from(json.loads(json.dumps(out).replace('"tries": 0', '"tries": 0.0')))
    assert back["gpu-1"] == s and back["gpu-0"] == NodeState()


def test_a_checkout_without_the_states_file_takes_them_from_the_stack_output(tmp_path):
    path = tmp_path / "health" / "t.json"
    s = NodeState().to("failed", "railyard: gpu-2: GPU5 missing", 5.0, "gpu-2: GPU5 missing")
    recorded = repair_mod.recorded_in({"nodeHealth": as_output({"gpu-2": s}, ["gpu-1", "gpu-2"])})
    assert repair_mod.take_recorded(path, recorded) == ({"gpu-2": s}, ["gpu-2"])
    assert load_states(path.read_text()) == {"gpu-2": s}
    assert repair_mod.take_recorded(path, recorded)[1] == []  # taken once


def test_an_older_file_never_puts_back_a_state_another_checkout_recorded_later(tmp_path):
    path = tmp_path / "t.json"
    old = NodeState().to("suspect", "railyard: gpu-2: Xid 79", 5.0, "gpu-2: Xid 79")
    failed = old.to("drained", "railyard: x", 6.0).to("failed", "railyard: failed after 2 resets", 9.0)
    mine = NodeState().to("suspect", "railyard: gpu-1: Xid 48", 12.0, "gpu-1: Xid 48")
    only_here = NodeState().to("suspect", "railyard: gpu-3: Xid 13", 3.0)
    repair_mod.write_states(path, {"gpu-1": mine, "gpu-2": old, "gpu-3": only_here})
    theirs = {"gpu-1": NodeState().to("suspect", "railyard: gpu-1: Xid 79", 8.0), "gpu-2": failed}
    now, taken = repair_mod.take_recorded(path, repair_mod.recorded_in(
        {"nodeHealth": as_output(theirs, ["gpu-1", "gpu-2", "gpu-3"])}))
    # Each node from whichever side changed it last; one only this file knows stays.
    assert taken == ["gpu-2"] and now == {"gpu-1": mine, "gpu-2": failed, "gpu-3": only_here}
    assert load_states(path.read_text()) == now


def test_no_states_file_is_made_from_an_output_where_nothing_was_ever_recorded(tmp_path):
    path = tmp_path / "t.json"
    nothing = repair_mod.recorded_in({"nodeHealth": as_output({}, ["gpu-0", "gpu-1"])})
    assert repair_mod.take_recorded(path, nothing)[1] == []
    assert repair_mod.recorded_in({"inventory": []}) == {}  # a stack from before the output
    assert not path.exists()


def test_before_the_program_runs_later_records_are_taken_and_nothing_is_made_where_there_are_none(
        tmp_path, monkeypatch, capsys):
    from railyard import paths
    from railyard.engine import pulumi as engine

    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    s = NodeState().to("failed", "railyard: gpu-2: GPU5 missing", 5.0, "gpu-2: GPU5 missing")
    outputs = {"nodeHealth": as_output({}, ["gpu-1", "gpu-2"])}
    monkeypatch.setattr(engine, "stack_outputs", lambda stack: outputs)
    repair_mod.take_recorded_from_stack("t", "lab")
    assert not paths.local_dir().exists()  # neither a states file nor a lock file for a stack never verified
    outputs["nodeHealth"] = as_output({"gpu-2": s}, ["gpu-1", "gpu-2"])
    repair_mod.take_recorded_from_stack("t", "coreweave")  # a driver verify cannot read has no states
    assert not paths.local_dir().exists()
    repair_mod.take_recorded_from_stack("t", "lab")
    assert "railyard: node states of gpu-2 taken from stack t's nodeHealth output (recorded later there)" \
        in capsys.readouterr().err
    assert load_states(paths.node_states("t").read_text()) == {"gpu-2": s}
    outputs["nodeHealth"] = {"nodes": {"gpu-2": {"history": [{"time": 1}]}}}
    repair_mod.take_recorded_from_stack("t", "lab")
    assert "railyard: node states not taken from stack t's nodeHealth output: the stack output nodeHealth: " \
           "not node states" in capsys.readouterr().err
    assert load_states(paths.node_states("t").read_text()) == {"gpu-2": s}


def test_an_output_that_is_not_node_states_is_named(tmp_path):
    with pytest.raises(RepairError, match="the stack output nodeHealth: not node states Railyard wrote"):
        repair_mod.recorded_in({"nodeHealth": {"nodes": {"gpu-1": {"reason": "no state"}}}})


@pytest.mark.parametrize("text", ["{not json", '{"nodes": {"gpu-1": {"reason": "x"}}}', '{"nodes": ["gpu-1"]}'])
def test_a_states_file_that_is_not_ours_is_named_not_read_as_no_states(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(RepairError, match=r"t\.json: not node states Railyard wrote .*move it aside"):
        repair_mod.read_states(path)


def test_the_outputs_are_recorded_on_the_stack_resource_of_the_project():
    from railyard import paths
    from railyard.engine import pulumi as engine

    assert engine.stack_urn("lab", paths.PROJECT_ROOT) == "urn:pulumi:lab::railyard::pulumi:pulumi:Stack::railyard-lab"


def test_a_reason_is_one_prefixed_line_ansible_cannot_template():
    r = reason("gpu-1: {{ lookup('pipe','id') }}\n 100%  down")
    assert r.startswith("railyard: ") and "{" not in r and "%" not in r and "\n" not in r and len(r) <= 120


@pytest.mark.parametrize("line, held", [
    ("gpu-0|idle|Unknown|none", Held()),
    ("gpu-1|drained|root|railyard: gpu-1: GPU2 missing", Held(out=True, reason="railyard: gpu-1: GPU2 missing")),
    ("gpu-2|draining|alice|RMA 4711 | reseat", Held(out=True, reason="RMA 4711 | reseat", busy=True)),
    ("gpu-3|down*|slurm|Not responding", Held(out=True, reason="Not responding", system=True, responding=False)),
    ("gpu-4|mixed|Unknown|none", Held(busy=True)),
    ("gpu-5|idle*|Unknown|none", Held(responding=False)),
])
def test_sinfo_states_read_as_out_busy_reason_and_who_set_it(line, held):
    assert parse_sinfo(line + "\n", slurm_user="slurm") == {line.split("|")[0]: held}


def test_a_node_in_two_partitions_is_read_once_and_slurms_user_is_read_from_its_config():
    from railyard.model.node_health import slurm_user

    assert list(parse_sinfo("gpu-0|idle|Unknown|none\ngpu-0|idle|Unknown|none\n")) == ["gpu-0"]
    assert slurm_user("ClusterName             = lab\nSlurmUser               = slurm(64030)\n") == "slurm"


SLURM_OUTPUT = __import__("pathlib").Path(__file__).resolve().parents[2] / "railyard/data/fixtures/slurm"


@pytest.mark.parametrize("capture, held", [
    ("sinfo_idle.txt", {n: Held() for n in ("gpu-0", "gpu-1", "gpu-2")}),
    ("sinfo_drained_mixed.txt", {"gpu-0": Held(), "gpu-2": Held(busy=True),
                                 "gpu-1": Held(out=True, reason="railyard: gpu-lost: GPU3 not on the bus")}),
    ("sinfo_draining.txt", {"gpu-0": Held(), "gpu-1": Held(out=True, reason="railyard: gpu-lost: GPU3 not on the bus"),
                            "gpu-2": Held(out=True, reason="maintenance window", busy=True)}),
    ("sinfo_not_responding.txt", {"gpu-0": Held(responding=False),
                                  "gpu-1": Held(out=True, reason="railyard: gpu-lost: GPU3 not on the bus",
                                                responding=False),
                                  "gpu-2": Held(out=True, reason="maintenance window", busy=True)}),
])
def test_real_sinfo_output_of_slurm_22_05_reads_as_each_nodes_hold(capture, held):
    # Captured from Debian 12's slurm-wlm 22.05.8 run by the slurm role (fixtures/slurm/SOURCES.md).
    from railyard.model.node_health import slurm_user

    user = slurm_user((SLURM_OUTPUT / "scontrol_show_config.txt").read_text())
    assert user == "slurm"
    assert parse_sinfo((SLURM_OUTPUT / capture).read_text(), slurm_user=user) == held


def test_a_node_slurm_set_down_itself_is_no_persons_and_is_repaired_at_no_cost_to_the_budget():
    c = Cluster(NODES, transient=["gpu-1"])
    c.held["gpu-1"] = Held(out=True, reason="Not responding", system=True)
    c.held["gpu-3"] = Held(out=True, reason="Node unexpectedly rebooted", system=True)
    out = run(c, budget=2)
    assert out.by_person == {} and ("reset", "gpu-1") in c.log
    assert out.states["gpu-1"].state == "ready"


def test_a_person_who_drains_a_node_railyard_holds_takes_it_over():
    c = Cluster(NODES, transient=["gpu-1"], busy=["gpu-1"])
    first = run(c, drain_timeout=10)
    assert first.states["gpu-1"].state == "drained"
    c.held["gpu-1"] = Held(out=True, reason="RMA 4711 hands off")
    c.jobs["gpu-1"] = 0
    c.transient.clear()
    c.log.clear()
    again = run(c, states=first.states)
    assert c.log == [] and again.by_person == {"gpu-1": "RMA 4711 hands off"}
    assert c.held["gpu-1"].reason == "RMA 4711 hands off"


def test_a_run_that_stops_halfway_has_saved_every_change_and_the_next_run_resets_the_drained_node():
    c = Cluster(NODES, transient=["gpu-1"])
    saved = {}
    act = c.actions()
    act.save = lambda states: saved.update(states)
    reads = {"n": 0}
    real_read = c.read

    def flaky():
        reads["n"] += 1
        if reads["n"] == 3:  # the controller stops answering after the drain
            raise RepairError("Slurm's controller gpu-0: ssh: connect timed out")
        return real_read()

    act.scheduler = c.scheduler(read=flaky)
    with pytest.raises(RepairError):
        repair({}, c.findings(), NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert saved["gpu-1"].state == "drained" and c.held["gpu-1"].out
    # The record was kept; and were it lost, the drain with Railyard's reason is adopted.
    for states in (saved, {}):
        c2 = Cluster(NODES, transient=["gpu-1"])
        c2.held["gpu-1"] = c.held["gpu-1"]
        out = repair(states, c2.findings(), NODES, POOLS, {"gpu": 1}, c2.actions(), drain_timeout=60)
        assert ("reset", "gpu-1") in c2.log and out.states["gpu-1"].state == "ready"


def test_a_node_recorded_drained_but_in_service_is_drained_again_before_its_reset():
    """Its drain failed last run, or a person resumed it: the record alone never lets a node be
    reset under the jobs its scheduler keeps giving it."""
    c = Cluster(NODES, transient=["gpu-1"])
    states = {"gpu-1": NodeState().to("drained", reason("gpu-1: GPU2 missing"), 1.0, "gpu-1: GPU2 missing")}
    out = run(c, states=states)
    assert c.log == [("drain", "gpu-1"), ("reset", "gpu-1"), ("retune", "gpu-1"), ("resume", "gpu-1")]
    assert any(line.startswith("gpu-1: drained in Slurm") and line.endswith("; in service") for line in out.done)
    assert out.states["gpu-1"].state == "ready"


def test_slurmds_health_check_drain_is_taken_over_so_its_next_clean_run_cannot_resume_the_node_mid_repair():
    from railyard.model.health_check import SLURMD_PREFIX

    c = Cluster(NODES, persistent=["gpu-1"])
    c.held["gpu-1"] = Held(out=True, reason=f"{SLURMD_PREFIX} gpu-1: GPU2 missing")
    out = run(c)
    assert c.log[:2] == [("drain", "gpu-1"), ("reset", "gpu-1")]
    assert c.held["gpu-1"].reason.startswith(PREFIX) and not c.held["gpu-1"].reason.startswith(SLURMD_PREFIX)
    assert out.states["gpu-1"].state == "failed"


def test_a_node_a_person_takes_out_while_its_jobs_are_waited_for_is_theirs_and_not_reset():
    c = Cluster(NODES, persistent=["gpu-1"], busy=["gpu-1"])
    act = c.actions()
    real_read = c.read
    reads = {"n": 0}

    def person_steps_in():
        reads["n"] += 1
        if reads["n"] == 3:  # drained by the loop, then waited for: a person drains it their way
            c.held["gpu-1"] = Held(out=True, reason="rma 4711")
            c.jobs["gpu-1"] = 0
        return real_read()

    act.scheduler = c.scheduler(read=person_steps_in)
    out = repair({}, c.findings(), NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert ("reset", "gpu-1") not in c.log and out.by_person == {"gpu-1": "rma 4711"}
    assert c.held["gpu-1"].reason == "rma 4711" and out.states["gpu-1"].state == "drained"


def stopped_in_reset(c: Cluster, node: str, tries: int) -> tuple[str, NodeState]:
    """The node's finding, and its record as a run that stopped during its reset `tries` left it."""
    [found] = c.findings()[node]
    c.held[node] = Held(out=True, reason=reason(found))
    return found, NodeState().to("drained", reason(found), 1.0, found).to("repairing", f"reset {tries} of 2", 2.0,
                                                                            tries=tries)


def test_a_node_left_repairing_by_a_run_that_stopped_is_reset_again_with_its_tries_kept():
    c = Cluster(NODES, persistent=["gpu-2"])
    found, stopped = stopped_in_reset(c, "gpu-2", 1)
    out = run(c, states={"gpu-2": stopped})
    assert [a for a in c.log if a[0] == "reset"] == [("reset", "gpu-2")]
    s = out.states["gpu-2"]
    assert s.state == "failed" and s.tries == MAX_TRIES
    assert [ch.state for ch in s.history] == ["drained", "repairing", "drained", "repairing", "failed"]
    assert s.history[2].reason == reason(f"reset interrupted: {found}")
    # A plain verify takes it up the same way: out of service, waiting for its reset.
    assert judge({"gpu-2": stopped}, c.findings(), NODES, None, 3.0).states["gpu-2"].state == "drained"
    # Stopped in its last reset, it is failed rather than reset a third time.
    c = Cluster(NODES, persistent=["gpu-2"])
    found, stopped = stopped_in_reset(c, "gpu-2", MAX_TRIES)
    out = run(c, states={"gpu-2": stopped})
    assert ("reset", "gpu-2") not in c.log and out.states["gpu-2"].state == "failed"
    assert out.states["gpu-2"].reason == reason(f"failed after 2 resets: {found}")


def test_a_node_slurm_set_down_itself_is_drained_with_the_loops_reason_before_its_reset():
    """Slurm returns a DOWN node to service when its slurmd registers after the reboot
    (ReturnToService=2): a drain of the loop's outlasts that."""
    c = Cluster(NODES, transient=["gpu-1"])
    c.held["gpu-1"] = Held(out=True, reason="Not responding", system=True)
    [found] = c.findings()["gpu-1"]
    out = run(c, states={"gpu-1": NodeState().to("drained", reason(found), 1.0, found)})
    assert c.log[:2] == [("drain", "gpu-1"), ("reset", "gpu-1")] and out.states["gpu-1"].state == "ready"


def test_a_node_a_person_takes_out_during_its_reset_is_not_resumed():
    c = Cluster(NODES, transient=["gpu-1"])
    act = c.actions()

    def reset_and_a_person_steps_in(node):
        c.held[node] = Held(out=True, reason="rma 4711")
        return c.reset(node)

    act.reset = reset_and_a_person_steps_in
    out = repair({}, c.findings(), NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert ("resume", "gpu-1") not in c.log and c.held["gpu-1"].reason == "rma 4711"
    assert out.by_person == {"gpu-1": "rma 4711"} and out.waiting == []


def test_a_node_left_with_only_a_rail_pairs_finding_after_its_reset_goes_to_a_person_without_another():
    c = Cluster(NODES, persistent=["gpu-3"])
    pair = "gpu-3 rail2: all_reduce_perf of gpu-2 <-> gpu-3 (leaf): 0.05 GB/s bus bandwidth at its largest size"
    act = c.actions()
    [gpu] = c.findings()["gpu-3"]
    # The second look finds both again; the reading after the reset, the pair's alone.
    looks = iter([[gpu, pair], [pair]])
    act.recheck = lambda nodes: {n: next(looks) for n in nodes if n == "gpu-3"}
    out = repair({}, {"gpu-3": [gpu, pair]}, NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert [a for a in c.log if a[0] == "reset"] == [("reset", "gpu-3")]
    s = out.states["gpu-3"]
    assert s.state == "failed" and s.tries == 1 and s.reason == reason(f"not reset again: {pair}")


def test_whether_a_node_has_only_rail_pair_findings_is_judged_at_its_reset_on_what_was_read_last():
    """A suspect held for a pair that the second look finds unreachable is reset like any other;
    one whose second look leaves only a pair's finding goes to a person unreset."""
    pair = "gpu-3 rail2: all_reduce_perf of gpu-2 <-> gpu-3 (leaf): 0.05 GB/s bus bandwidth at its largest size"
    c = Cluster(NODES, transient=["gpu-3"])
    act = c.actions()
    looks = {"n": 0}

    def recheck(nodes):
        looks["n"] += 1
        return {"gpu-3": ["gpu-3: not read (ssh: connect timed out)"]} if looks["n"] == 1 else c.recheck(nodes)

    act.recheck = recheck
    out = repair({}, {"gpu-3": [pair]}, NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert ("reset", "gpu-3") in c.log and out.states["gpu-3"].state == "ready"
    c = Cluster(NODES)
    act = c.actions()
    act.recheck = lambda nodes: {n: [pair] for n in nodes}
    out = repair({}, {"gpu-3": [pair]}, NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert ("reset", "gpu-3") not in c.log and out.states["gpu-3"].state == "failed"
    assert out.states["gpu-3"].reason == reason(f"not reset: {repair_mod.UNTESTED}")


def test_a_node_whose_checks_passed_but_whose_return_failed_starts_its_next_fault_with_no_tries():
    c = Cluster(NODES, transient=["gpu-1"])
    act = c.actions()

    def refused(node):
        raise RepairError("Invalid node state transition requested")

    act.scheduler = c.scheduler(resume=refused)
    out = repair({}, c.findings(), NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert out.states["gpu-1"].state == "drained" and out.states["gpu-1"].tries == 0


def test_a_node_that_does_not_come_back_into_service_is_left_drained_and_the_run_goes_on():
    c = Cluster(NODES, transient=["gpu-1", "gpu-2"])
    act = c.actions()
    real_resume = c.resume

    def stuck(node):
        if node == "gpu-1":
            raise RepairError("Invalid node state transition requested")
        real_resume(node)

    act.scheduler = c.scheduler(resume=stuck)
    out = repair({}, c.findings(), NODES, POOLS, {"gpu": 2}, act, drain_timeout=60)
    assert out.states["gpu-1"].state == "drained" and "not back in service" in out.states["gpu-1"].reason
    assert out.states["gpu-2"].state == "ready" and ("reset", "gpu-2") in c.log


def test_a_host_key_mismatch_stops_the_run_instead_of_counting_as_a_try():
    from railyard.repair import Abort

    c = Cluster(NODES, transient=["gpu-1"])
    act = c.actions()

    def impostor(node):
        raise Abort(f"{node}: host key mismatch; the run stopped")

    act.reset = impostor
    with pytest.raises(Abort):
        repair({}, c.findings(), NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)


def test_an_acceptance_cordon_with_a_finding_is_reported_as_acceptances_not_waiting_for_room():
    c = Cluster(NODES, transient=["gpu-1"])
    c.held["gpu-1"] = Held(out=True, reason=reason("acceptance: gpu-1 rail2: rail-mtu: no reply"))
    out = run(c, budget=2)
    assert c.log == [] and out.waiting == [] and list(out.by_acceptance) == ["gpu-1"]


def test_states_of_nodes_no_longer_in_the_stack_are_dropped():
    gone = {"gpu-9": NodeState(state="failed", reason="railyard: x", tries=2)}
    out = judge(gone, {}, NODES, None, now=1.0)
    assert "gpu-9" not in out.states


def _config(health: dict | None) -> dict:
    from pathlib import Path

    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.lab.yaml").read_text())["config"]
    return {**config, **({"railyard:health": health} if health is not None else {})}


def test_the_health_keys_are_read_and_a_bad_one_is_named_by_its_path():
    from railyard.model.errors import SpecError
    from railyard.stack import from_config

    spec, _ = from_config(_config({"maxUnavailable": 2, "drainTimeout": 0, "repair": True,
                                   "collectiveTolerance": 0.25, "retuneTimeout": 900}), "t")
    assert (spec.health.max_unavailable, spec.health.drain_timeout_s, spec.health.repair,
            spec.health.collective_tolerance, spec.health.retune_timeout_s) == (2, 0, True, 0.25, 900)
    default = from_config(_config(None), "t")[0].health
    assert (default.max_unavailable, default.drain_timeout_s, default.repair,
            default.collective_tolerance, default.retune_timeout_s) == (None, 600, False, 0.15, 3600)
    with pytest.raises(SpecError) as err:
        from_config(_config({"maxUnavailable": 0, "drainTimeout": "10m", "repair": "sometimes",
                             "collectiveTolerance": 15, "retuneTimeout": 5}), "t")
    assert {p.path for p in err.value.problems} == {
        "railyard:health.maxUnavailable", "railyard:health.drainTimeout", "railyard:health.repair",
        "railyard:health.collectiveTolerance", "railyard:health.retuneTimeout"}
    # A percentage where a fraction is asked is refused, saying what the key takes.
    assert "a fraction between 0 and 1, e.g. 0.15" in str(err.value)


def test_each_pools_budget_is_the_stacks_else_its_drivers():
    from railyard.repair import budgets
    from railyard.stack import from_config

    spec, plan = from_config(_config(None), "t")
    nodes = [n.name for n in plan.nodes]
    pools, by_pool = budgets(spec, plan, nodes)
    assert sorted(n for ns in pools.values() for n in ns) == sorted(nodes)
    assert set(by_pool.values()) == {1}  # the lab reboots one node of a pool at a time
    spec, plan = from_config(_config({"maxUnavailable": 3}), "t")
    assert set(budgets(spec, plan, nodes)[1].values()) == {3}


def test_a_failed_node_a_person_returned_to_service_is_ready_again():
    c = Cluster(NODES, persistent=["gpu-2"])
    out = run(c)
    c.persistent.clear()
    c.resume("gpu-2")  # the person's own `scontrol update ... State=RESUME`
    again = judge(out.states, c.findings(), NODES, c, now=c.clock + 1)
    assert again.states["gpu-2"].state == "ready"
    assert again.states["gpu-2"].history[-1].reason == "returned to service by a person"
    # Without a scheduler to show it back in service, a failed node stays failed.
    assert judge(out.states, {}, NODES, None, now=c.clock + 2).states["gpu-2"].state == "failed"


class FakeApi:
    """Nodes and pods as the API server keeps them; a merge patch with a stale resourceVersion is
    refused with 409, as the API server does."""

    def __init__(self, nodes: dict[str, dict], running: dict[str, str] | None = None):
        self.nodes = {n: {"metadata": {"name": n, "resourceVersion": "1", "annotations": {}}, "spec": dict(spec)}
                      for n, spec in nodes.items()}
        self.running = running or {}  # pod -> node
        self.race = 0

    def get(self, path):
        if path == "/api/v1/nodes":
            return {"items": list(self.nodes.values())}
        if path.startswith("/api/v1/pods"):
            return {"items": [{"metadata": {"name": p, "ownerReferences": [{"kind": "Job"}]}, "spec": {"nodeName": n}}
                              for p, n in self.running.items()]}
        return self.nodes.get(path.rsplit("/", 1)[1])

    def request(self, method, path, body, content_type):
        assert method == "PATCH" and content_type == "application/merge-patch+json"
        node = self.nodes[path.rsplit("/", 1)[1]]
        if self.race:
            self.race -= 1
            node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        if body["metadata"].pop("resourceVersion") != node["metadata"]["resourceVersion"]:
            return 409, {"message": "the object has been modified"}
        for k, v in body["metadata"].get("annotations", {}).items():
            if v is None:
                node["metadata"]["annotations"].pop(k, None)
            else:
                node["metadata"]["annotations"][k] = v
        for k, v in body["spec"].items():
            if v is None:
                node["spec"].pop(k, None)
            else:
                node["spec"][k] = v
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        return 200, node


def test_kubernetes_cordons_and_taints_a_node_and_returns_it_leaving_other_taints_alone():
    from railyard.repair import Kubernetes

    api = FakeApi({"gpu-0": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}, "gpu-1": {}})
    k = Kubernetes(api, "railyard.io", {"gpu-0": ["gpu-0"], "gpu-1": ["gpu-1"]})
    api.race = 1  # someone else changes the Node between our read and our patch
    k.drain("gpu-0", "railyard: gpu-0: GPU2 missing")
    node = api.nodes["gpu-0"]
    assert node["spec"]["unschedulable"] is True
    assert {"key": "railyard.io/unhealthy", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert {"key": "nvidia.com/gpu", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert k.read()["gpu-0"] == Held(out=True, reason="railyard: gpu-0: GPU2 missing")
    k.resume("gpu-0")
    assert node["spec"] == {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}
    assert "railyard.io/unhealthy" not in node["metadata"]["annotations"]
    assert k.read()["gpu-0"] == Held()


def test_kubernetes_tells_a_persons_cordon_from_railyards_and_sees_running_jobs():
    from railyard.repair import Kubernetes

    api = FakeApi({"gpu-0": {"unschedulable": True}, "gpu-1": {"unschedulable": True}, "gpu-2": {}},
                  running={"train-0": "gpu-2"})
    api.nodes["gpu-1"]["metadata"]["annotations"]["railyard.io/cordon-reason"] = "railyard: acceptance: gpu-1: pfs"
    held = Kubernetes(api, "railyard.io", {n: [n] for n in ("gpu-0", "gpu-1", "gpu-2")}).read()
    assert held["gpu-0"].by_person  # `kubectl cordon` by hand: no reason of ours
    assert held["gpu-1"].out and not held["gpu-1"].by_person  # acceptance's
    assert held["gpu-2"] == Held(busy=True)


def test_a_machine_without_a_node_is_not_shown_by_kubernetes():
    from railyard.repair import Kubernetes

    api = FakeApi({"gpu-0": {}})
    assert set(Kubernetes(api, "railyard.io", {"gpu-0": ["gpu-0"], "gpu-1": ["gpu-1"]}).read()) == {"gpu-0"}


def test_two_schedulers_are_one_view_and_a_persons_drain_in_either_wins():
    from railyard.repair import Schedulers

    class Fixed:
        def __init__(self, name, view):
            self.name, self.view, self.log = name, view, []

        def read(self):
            return self.view

        def drain(self, node, why):
            self.log.append(("drain", node))

        def resume(self, node):
            self.log.append(("resume", node))

    slurm = Fixed("Slurm", {"gpu-0": Held(out=True, reason="railyard: x"), "gpu-1": Held()})
    kube = Fixed("Kubernetes", {"gpu-0": Held(out=True, reason=None), "gpu-1": Held(busy=True)})
    both = Schedulers([slurm, kube])
    view = both.read()
    assert both.name == "Slurm and Kubernetes"
    assert view["gpu-0"].by_person and view["gpu-1"] == Held(busy=True)
    both.drain("gpu-1", "railyard: y")
    assert slurm.log == kube.log == [("drain", "gpu-1")]


def test_a_failed_node_resumed_in_one_scheduler_is_released_from_the_other_by_the_next_repair():
    from railyard.repair import Schedulers

    slurm = Cluster(NODES, persistent=["gpu-2"])
    kube = Cluster(NODES)
    kube.name = "Kubernetes"
    both = Schedulers([slurm, kube])
    act = slurm.actions()
    act.scheduler = both
    out = repair({}, slurm.findings(), NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert out.states["gpu-2"].state == "failed" and kube.held["gpu-2"].out
    slurm.persistent.clear()
    slurm.resume("gpu-2")  # the person resumes it in Slurm only
    seen = judge(out.states, {}, NODES, both, now=slurm.clock + 1)
    assert seen.states["gpu-2"].state == "ready" and kube.held["gpu-2"].out  # verify alone changes nothing
    act = slurm.actions()
    act.scheduler = both
    again = repair(seen.states, {}, NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert not kube.held["gpu-2"].out and again.states["gpu-2"].state == "ready"
    # Acceptance's cordon is acceptance's to lift.
    kube.drain("gpu-0", reason("acceptance: gpu-0 rail2: rail-mtu: no reply"))
    repair(again.states, {}, NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert kube.held["gpu-0"].out


@pytest.mark.parametrize("health, loop_rc, up_rc", [
    ({"repair": True}, 0, 0),
    ({"repair": True}, 1, 0),  # nodes left out: reported and handed off, the up itself stands
    ({"repair": True}, 2, 1),  # the loop could not run at all
    (None, None, 0),
])
def test_railyard_up_runs_the_repair_loop_after_the_engine_where_the_stack_asks(monkeypatch, health, loop_rc, up_rc):
    import argparse
    import contextlib

    from railyard import drivers
    from railyard.commands import stack as stack_cmd, verify as verify_cmd
    from railyard.engine import lock, orphans, pulumi
    from railyard.stack import from_config

    spec, _ = from_config(_config(health), "t")
    calls = []
    monkeypatch.setattr(stack_cmd, "validate", lambda name: spec)
    monkeypatch.setattr(orphans, "stop_all", lambda: None)
    monkeypatch.setattr(drivers, "prepare", lambda s: None)
    monkeypatch.setattr(drivers, "after_up", lambda s: calls.append("after_up"))
    monkeypatch.setattr(lock, "checkout_lock", contextlib.nullcontext)
    monkeypatch.setattr(pulumi, "ensure_stack", lambda name: None)
    monkeypatch.setattr(pulumi, "run", lambda argv, **kw: calls.append(argv[0]) or types.SimpleNamespace(returncode=0))
    monkeypatch.setattr(stack_cmd, "report_expiry", lambda name: None)
    monkeypatch.setattr(verify_cmd, "handle", lambda a: calls.append(("verify", a.stack, a.repair, a.only)) or loop_rc)
    monkeypatch.setattr(repair_mod, "take_recorded_from_stack", lambda name, driver: calls.append(("take", name)))
    rc = stack_cmd.handle(argparse.Namespace(stack="t", action="up", extra=[]))
    assert rc == up_rc
    # The recorded states are taken back before the program runs, which exports them.
    expected = [("take", "t"), "up", "after_up"] + ([("verify", "t", True, "hardware,fabric,health")] if health else [])
    assert calls == expected


def test_a_node_is_returned_only_once_its_scheduler_hears_from_it_again():
    c = Cluster(NODES, transient=["gpu-1"])
    silent = {"reads": 0}
    real_read = c.read

    def read():
        view = real_read()
        if not view["gpu-1"].out and silent["reads"] < 3:  # slurmd not registered yet: idle*
            silent["reads"] += 1
            view["gpu-1"] = Held(responding=False)
        return view

    act = c.actions()
    act.scheduler = c.scheduler(read=read)
    out = repair({}, c.findings(), NODES, POOLS, {"gpu": 1}, act, drain_timeout=60)
    assert out.states["gpu-1"].state == "ready" and silent["reads"] == 3


@pytest.mark.parametrize("keeps_machines, rc, left, kept", [
    (False, 0, False, False),  # the lab's nodes went with the stack: the next up's start over
    (True, 0, False, True),    # servers outlive it: their states and hand-off list stay
    (False, 1, True, True),    # a destroy that failed left the machines
    (False, 0, True, True),    # so did one limited to some resources (--target)
])
def test_down_forgets_the_states_of_machines_that_went_with_the_stack(monkeypatch, tmp_path, keeps_machines, rc,
                                                                       left, kept):
    import argparse
    import contextlib

    from railyard import drivers, paths
    from railyard.commands import stack as stack_cmd
    from railyard.engine import lock, orphans, pulumi
    from railyard.stack import from_config

    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    spec, _ = from_config(_config(None), "t")
    repair_mod.write_states(paths.node_states("t"), {"gpu-2": NodeState().to("failed", "railyard: x", 1.0)})
    monkeypatch.setattr(stack_cmd, "validate", lambda name: spec)
    monkeypatch.setattr(stack_cmd, "unprotect_for_down", lambda stack, force: True)
    monkeypatch.setattr(orphans, "stop_all", lambda: None)
    monkeypatch.setattr(lock, "checkout_lock", contextlib.nullcontext)
    monkeypatch.setattr(pulumi, "ensure_stack", lambda name: None)
    monkeypatch.setattr(pulumi, "run", lambda argv, **kw: types.SimpleNamespace(returncode=rc))
    monkeypatch.setattr(pulumi, "holds_resources", lambda stack: left)
    caps = types.SimpleNamespace(keeps_machines=keeps_machines, unverifiable="")
    monkeypatch.setattr(drivers, "entry", lambda name: types.SimpleNamespace(capabilities=caps))
    assert stack_cmd.handle(argparse.Namespace(stack="t", action="down", extra=[], force=False)) == rc
    assert paths.node_states("t").exists() == kept


XID = "gpu-1: Xid 79 on GPU 00000000:1B:00.0"
NIC = "gpu-1: mlx5_3 missing"
PARTS = {NIC: "hardware", XID: "health"}


def only(*parts: str) -> dict[str, tuple[str, ...]]:
    """`--only`'s reading: these parts read on every node."""
    return {n: parts for n in NODES}


def test_a_reading_that_did_not_read_what_a_node_was_found_faulty_in_neither_clears_nor_returns_it():
    """`--only hardware` after an Xid: the suspect stays suspect and the drained node stays out,
    however clean the hardware reads, until a reading of the health part decides."""
    found = judge({}, {"gpu-1": [XID]}, NODES, None, 1.0, part_of=PARTS)
    assert found.states["gpu-1"].state == "suspect" and found.states["gpu-1"].open == ("health",)
    kept = judge(found.states, {}, NODES, None, 2.0, read=only("hardware"))
    assert kept.states["gpu-1"] == found.states["gpu-1"] and kept.unjudged == {"gpu-1": ("health",)}
    assert judge(found.states, {}, NODES, None, 3.0, read=only("health")).states["gpu-1"].state == "ready"

    c = Cluster(NODES)
    c.held["gpu-1"] = Held(out=True, reason=reason(XID))
    drained = replace(NodeState().to("drained", reason(XID), 1.0, XID), open=("health",))
    out = run(c, {"gpu-1": drained}, read=only("hardware"))
    assert out.states["gpu-1"] == drained and out.unjudged == {"gpu-1": ("health",)}
    assert c.log == [] and c.held["gpu-1"].out
    # Nor is it reset for a new finding of the part that was read; that finding joins what stands.
    out = repair({"gpu-1": drained}, {"gpu-1": [NIC]}, NODES, POOLS, {"gpu": 1}, c.actions(), drain_timeout=60,
                 read=only("hardware"), part_of=PARTS)
    assert out.states["gpu-1"].state == "drained" and out.states["gpu-1"].open == ("hardware", "health")
    assert c.log == []
    # So a clean health reading alone does not return it either: the NIC was not read again.
    both = out.states
    out = run(c, both, read=only("health"))
    assert out.states["gpu-1"] == replace(both["gpu-1"], open=("hardware",)) and c.log == []
    # Read whole and clean: returned.
    out = run(c, out.states, read=only("hardware", "fabric", "health"))
    assert out.states["gpu-1"].state == "ready" and out.states["gpu-1"].open == ()
    assert c.log == [("resume", "gpu-1")]


def test_what_stands_is_kept_up_to_date_while_the_state_does_not_change():
    """A suspect for a NIC found with an Xid too at the next whole reading: the NIC mended, a
    hardware reading alone leaves it suspect for the Xid."""
    first = judge({}, {"gpu-1": [NIC]}, NODES, None, 1.0, part_of=PARTS)
    both = judge(first.states, {"gpu-1": [NIC, XID]}, NODES, None, 2.0, part_of=PARTS)
    assert both.states["gpu-1"].history == first.states["gpu-1"].history
    assert both.states["gpu-1"].open == ("hardware", "health")
    mended = judge(both.states, {}, NODES, None, 3.0, read=only("hardware"), part_of=PARTS)
    assert mended.states["gpu-1"].state == "suspect" and mended.unjudged == {"gpu-1": ("health",)}
    assert mended.states["gpu-1"].open == ("health",)


def test_of_two_records_last_changed_at_once_what_stands_on_either_stands():
    """Another checkout read an Xid on a node drained for its NIC (no change of state, so no
    later history): this checkout's record does not drop it."""
    from railyard.model.node_health import latest

    mine = replace(NodeState().to("drained", reason(NIC), 1.0, NIC), open=("hardware",))
    theirs = replace(mine, open=("hardware", "health"))
    assert latest({"gpu-1": mine}, {"gpu-1": theirs})["gpu-1"].open == ("hardware", "health")
    later = theirs.to("ready", "checks passed", 2.0)
    assert latest({"gpu-1": mine}, {"gpu-1": later}) == {"gpu-1": later}


def test_a_node_whose_fault_could_not_be_read_after_its_reset_is_left_drained_for_the_next_run():
    """Drained for a cable; after the reboot its lldpd is not heard yet: not judged mended or
    faulty, the reset counted; the next run reads it."""
    cable = "gpu-1 mlx5_0 port 1 and gpu-1 mlx5_3 port 1: swapped"
    c = Cluster(NODES)
    read = only("hardware", "fabric", "health")
    act = c.actions()

    def recheck(nodes):
        read.update({n: ("hardware", "health") for n in nodes})  # the command's: fabric not read
        return {n: [cable] for n in nodes if n == "gpu-1"}  # kept, as _rechecked keeps it

    act.recheck = recheck
    out = repair({}, {"gpu-1": [cable]}, NODES, POOLS, {"gpu": 1}, act, drain_timeout=60, read=read,
                 part_of={cable: "fabric"})
    s = out.states["gpu-1"]
    # (The second look could not read it either: its first reading stands, and it is drained.)
    assert s.state == "drained" and s.tries == 1 and s.reason == "railyard: fabric not read after its reset"
    assert s.open == ("fabric",) and "gpu-1" in out.left and ("resume", "gpu-1") not in c.log
    # Its last reset so left, a next run that finds it still faulty hands it over without a third.
    spent = replace(s, tries=2)
    c.log.clear()
    out = repair({"gpu-1": spent}, {"gpu-1": [cable]}, NODES, POOLS, {"gpu": 1}, c.actions(), drain_timeout=60,
                 read=only("hardware", "fabric", "health"), part_of={cable: "fabric"})
    assert out.states["gpu-1"].state == "failed" and ("reset", "gpu-1") not in c.log


def test_a_part_not_read_on_one_node_keeps_that_nodes_state_alone():
    # Health was read on gpu-0 (its tools ran) and not on gpu-1 (nvidia-smi gone after a reimage).
    suspect = replace(NodeState().to("suspect", reason(XID), 1.0, XID), open=("health",))
    states = {"gpu-0": suspect, "gpu-1": suspect}
    out = judge(states, {}, NODES, None, 2.0, read={"gpu-0": ("health",), "gpu-1": ()})
    assert out.states["gpu-0"].state == "ready" and out.states["gpu-1"].state == "suspect"


def test_a_finding_that_read_nothing_keeps_every_part_open_and_an_old_record_is_settled_by_any_reading():
    # An unreachable node, a reset that failed: no part, so what stood before still stands.
    gone = "gpu-1: not read (ssh: connect timed out)"
    s = replace(NodeState().to("drained", reason(XID), 1.0, XID), open=("health",))
    assert s.reread(("hardware", "health"), [gone], PARTS).open == ("health",)
    assert s.reread(("hardware", "health"), [gone, NIC], PARTS).open == ("hardware", "health")
    old = load_states(json.dumps({"nodes": {"gpu-1": {"state": "suspect", "reason": reason(XID), "history": [
        {"time": 1.0, "state": "suspect", "reason": reason(XID), "finding": XID}]}}}))
    assert old["gpu-1"].open == ()
    assert judge(old, {}, NODES, None, 2.0, read=only("fabric")).states["gpu-1"].state == "ready"


def test_the_loop_keeps_what_stands_as_its_own_re_readings_find_it():
    """The second look and the check after a reset read again; the command's re-reading adds the
    part of what it found to part_of, and the node's open parts follow, through the states file."""
    c = Cluster(NODES, persistent=["gpu-2"])
    first = "gpu-2: GPU2 (0000:3a:00.0) missing"
    xid = "gpu-2: Xid 48 on GPU 00000000:3A:00.0"
    part_of = {first: "hardware"}
    act = c.actions()
    seen = []

    def recheck(nodes):
        part_of[xid] = "health"
        return {n: [xid] for n in nodes if n == "gpu-2"}

    act.recheck = recheck
    act.save = lambda states: seen.append(states["gpu-2"].open) if "gpu-2" in states else None
    out = repair({}, c.findings(), NODES, POOLS, {"gpu": 1}, act, drain_timeout=60, part_of=part_of,
                 read=only("hardware", "health"))
    s = out.states["gpu-2"]
    # The second look read the hardware clean and found the Xid: only health stands from then on.
    assert s.state == "failed" and seen[0] == s.open == ("health",)
    assert load_states(dump_states(out.states))["gpu-2"].open == ("health",)


def test_the_re_tune_after_a_reset_is_bounded_by_the_stacks_key_and_its_overrun_is_a_failed_try(monkeypatch):
    from railyard import paths
    from railyard.stack import load
    from railyard.tuning import runner

    spec, plan = load(paths.stack_file("lab"))
    asked = {}

    def hung(stack, hosts, key, **kw):
        asked.update(kw)
        return runner.RunResult(run_dir=paths.project_root(), status="timeout", rc=254)

    monkeypatch.setattr(runner, "stack_hosts", lambda *a: ([], {}))
    monkeypatch.setattr(runner, "run", hung)
    act = repair_mod.actions(spec, plan, {}, None, {}, types.SimpleNamespace(lost=lambda: None), lambda nodes: {}, print)
    with pytest.raises(RepairError, match=r"did not finish in 3600 s \(railyard:health.retuneTimeout\)"):
        act.retune("gpu-1")
    assert asked["timeout"] == spec.health.retune_timeout_s == 3600 and asked["limit"] == "gpu-1"
