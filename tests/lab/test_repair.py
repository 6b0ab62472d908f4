"""The repair loop on a running lab (issue 41): a four-node dgx-h100 stack with Slurm (slurmctld on
gpu-0, slurmd everywhere) and the Kubernetes layer (the lab's real API server), up on the real
engine. `railyard lab fault gpu-lost` takes a GPU off a
node's bus where its own sysfs shows it, transient (the node's next boot brings it back) or not;
`railyard verify --repair` must find it, drain the node in the real slurmctld with a `railyard:`
reason and cordon and taint it in Kubernetes, reboot it through its power supervisor, tune and read it again, and return it, or hand
it to a person after two resets. Slurm's own log and commands and the nodes' power logs are the
proof, beside the states Railyard records.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from railyard import paths
from railyard.drivers.lab import gc
from railyard.drivers.lab.node.power import events
from railyard.engine import control_plane as binaries
from railyard.kube_api import from_kubeconfig
from railyard.model.plan import make_plan
from railyard.stack import parse_config

from .railyard_project import STORAGE, free_networks, lab_config
from .stack_project import StackProject

ROOT = paths.PROJECT_ROOT
STACK = "trepair"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    binaries.ensure()
    gc.destroy_all(STACK)
    (mgmt,) = free_networks(1, prefix=24)
    # slurmd's own health check off: these tests hold the loop's every step to account (test_lab_slurm
    # has the check drain and return a node on its own).
    cfg = lab_config(4, mgmt, STORAGE, **{"railyard:slurm": {"healthCheckInterval": 0},
                                         "railyard:acceptance": {"enabled": False},
                                         "railyard:health": {"drainTimeout": 30}, "railyard:kubernetes": {},
                                         "railyard:ephemeral": {"ttl": "2h"}})
    p = StackProject(tmp_path_factory.mktemp("repair"), STACK, cfg)
    p.cfg = cfg
    p.plan = make_plan(parse_config(cfg, stack=STACK))
    p.env["RAILYARD_ROOT"] = str(p.dir)
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    try:
        p.pulumi("up", "--yes", "--skip-preview", timeout=1500)
        yield p
    finally:
        p.railyard("lab", "fault", "--stack", STACK, "--clear", timeout=900)
        p.pulumi("destroy", "--yes", "--skip-preview", check=False)
        gc.destroy_all(STACK, p.dir)


@pytest.fixture(scope="module")
def api(project):
    with from_kubeconfig(project.outputs(secrets=True)["kubeconfig"]) as client:
        yield client


TAINT = {"key": "railyard.io/unhealthy", "effect": "NoSchedule"}


def verify(p: StackProject, *extra: str) -> subprocess.CompletedProcess[str]:
    return p.railyard("verify", "--stack", STACK, "--only", "hardware", *extra, timeout=900)


def fault(p: StackProject, *args: str) -> None:
    proc = p.railyard("lab", "fault", "--stack", STACK, *args, timeout=900)
    assert proc.returncode == 0, proc.stderr


def states(p: StackProject) -> dict:
    return json.loads(paths.node_states(STACK, p.dir).read_text())["nodes"]


def boots(p: StackProject, node: str) -> list[float]:
    """When the node came back from each reboot, by its power supervisor's log."""
    return [e["time"] for e in events(STACK, node, p.dir) if e["event"] == "on" and e["why"] == "reboot"]


def ctl(p: StackProject, command: str) -> str:
    return p.ssh("gpu-0", command).stdout


def slurm_node(p: StackProject, node: str) -> tuple[str, str]:
    """(state, reason) as sinfo shows them."""
    line = ctl(p, f"sinfo --noheader --Node --nodes {node} --format '%T|%E'").splitlines()[0]
    state, _, reason = line.partition("|")
    return state.strip(), reason.strip()


def out_intervals(node_state: dict) -> list[tuple[float, float]]:
    """When Railyard held the node out of service: each drain to the next return."""
    out, start = [], None
    for c in node_state["history"]:
        if c["state"] == "drained" and start is None:
            start = c["time"]
        elif c["state"] == "ready" and start is not None:
            out.append((start, c["time"]))
            start = None
    return out


def deep_health(p: StackProject) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    proc = p.railyard("verify", "--stack", STACK, "--only", "health", "--deep", "--json", timeout=900)
    return proc, json.loads(proc.stdout or "[]")


def allocations(p: StackProject) -> int:
    """The allocations slurmctld has granted srun (its log's own line for each)."""
    return int(ctl(p, "grep -c '_slurm_rpc_allocate_resources JobId=' /var/log/slurm/slurmctld.log || true").strip() or 0)


def test_deep_verify_runs_all_reduce_perf_across_each_rail_pair_and_names_a_slowed_rail(project):
    """--deep runs all_reduce_perf across every rail's ring pairs with srun from slurmctld's node, one
    rank a node on the rail's NIC and its GPU; the lab's stand-in moves the bytes over the rail
    itself. A rail slowed with tc on one node is named on that node and rail alone, both its pairs
    being slow and each run twice before it is judged; cleared, the stack is clean again. Runs
    first: later tests drain nodes."""
    before = allocations(project)
    proc, found = deep_health(project)
    assert proc.returncode == 0 and found == [], proc.stdout + proc.stderr
    assert allocations(project) - before == 4 * 8  # a ring of four on each of eight rails
    dev = project.plan.node_named("gpu-2").nics[5].netdev
    fault(project, "link-slow", "gpu-2", dev, "200")  # 25 MB/s, where a lab pair goes at about 1 GB/s
    try:
        before = allocations(project)
        proc, found = deep_health(project)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert [(f["kind"], f["node"], f["where"]) for f in found] == [("collective-slow", "gpu-2", "rail5")], found
        assert "gpu-2 <-> gpu-3" in found[0]["message"] and "gpu-1 <-> gpu-2" in found[0]["message"], found[0]
        assert allocations(project) - before == 4 * 8 + 2
        assert states(project)["gpu-2"]["state"] == "suspect"
    finally:
        fault(project, "--clear", "gpu-2")
    proc, found = deep_health(project)
    assert proc.returncode == 0 and found == [], proc.stdout + proc.stderr
    assert states(project)["gpu-2"]["state"] == "ready"


def test_a_node_drained_for_a_slow_rail_goes_to_a_person_without_a_reset(project, api):
    """--deep --repair on a slow rail: the suspect's pairs are run again with its ring neighbours,
    still slow, so it is drained; a drained node gets no allocation, so no reset could be re-tested,
    and it is handed to a person without one. A plain verify keeps the finding (its pairs did not
    run); the person's resume lets the next --deep run its pairs, which pass."""
    before = boots(project, "gpu-3")
    dev = project.plan.node_named("gpu-3").nics[2].netdev
    fault(project, "link-slow", "gpu-3", dev, "200")
    try:
        proc = project.railyard("verify", "--stack", STACK, "--only", "health", "--deep", "--repair", timeout=1200)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        hand_off = proc.stdout[proc.stdout.index("hand-off:"):]
        assert "  gpu-3: railyard: not reset: a rail pair's finding" in hand_off and "gpu-3 rail2" in hand_off, hand_off
        s = states(project)["gpu-3"]
        assert s["state"] == "failed" and s["tries"] == 0 and boots(project, "gpu-3") == before
        assert slurm_node(project, "gpu-3")[0] == "drained"
    finally:
        fault(project, "--clear")
    # Its pairs cannot run while it is drained: a reading does not clear it.
    verify(project)
    assert states(project)["gpu-3"]["state"] == "failed"
    ctl(project, "scontrol update NodeName=gpu-3 State=RESUME")
    proc, found = deep_health(project)
    assert proc.returncode == 0 and found == [], proc.stdout + proc.stderr
    assert states(project)["gpu-3"]["state"] == "ready"
    assert project.railyard("verify", "--stack", STACK, "--only", "health", "--repair", timeout=900).returncode == 0
    node = api.get("/api/v1/nodes/gpu-3")
    assert not node["spec"].get("unschedulable") and TAINT not in (node["spec"].get("taints") or [])


def test_a_transient_gpu_loss_is_drained_reset_checked_returned_and_takes_jobs_again(project, api):
    before = boots(project, "gpu-1")
    fault(project, "--transient", "gpu-lost", "gpu-1", "GPU2")
    plain = verify(project)
    assert plain.returncode == 1 and re.search(r"^gpu-missing\s+gpu-1", plain.stdout, re.M), plain.stdout
    assert "node suspect" in plain.stdout and states(project)["gpu-1"]["state"] == "suspect"
    assert slurm_node(project, "gpu-1")[0] == "idle"  # verify alone changes nothing on the cluster
    assert not api.get("/api/v1/nodes/gpu-1")["spec"].get("unschedulable")

    # While the loop runs, the Node is seen cordoned and tainted with Railyard's reason.
    run = subprocess.Popen([str(ROOT / ".venv" / "bin" / "railyard"), "verify", "--stack", STACK, "--only",
                            "hardware", "--repair"], cwd=project.dir, env=project.env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = None
    while run.poll() is None:
        node = api.get("/api/v1/nodes/gpu-1")
        if node["spec"].get("unschedulable") and seen is None:
            seen = node
        time.sleep(0.5)
    stdout, stderr = run.communicate()
    assert run.returncode == 0, stdout + stderr
    assert seen is not None, "the Node was never cordoned"
    assert TAINT in seen["spec"]["taints"]
    assert seen["metadata"]["annotations"]["railyard.io/unhealthy"].startswith("railyard: gpu-1: ")
    back = api.get("/api/v1/nodes/gpu-1")
    assert not back["spec"].get("unschedulable") and TAINT not in (back["spec"].get("taints") or [])
    assert "railyard.io/unhealthy" not in back["metadata"].get("annotations", {})

    s = states(project)["gpu-1"]
    assert [c["state"] for c in s["history"]] == ["suspect", "drained", "repairing", "ready"]
    drained = s["history"][1]
    assert drained["reason"].startswith("railyard: gpu-1: ") and drained["finding"]
    # Rebooted once, while it was out of service.
    (start, end), = out_intervals(s)
    new = [t for t in boots(project, "gpu-1") if t not in before]
    assert len(new) == 1 and start < new[0] < end
    # slurmctld drained it with Railyard's reason, and it is back in service.
    log = ctl(project, "cat /var/log/slurm/slurmctld.log")
    assert re.search(r"update_node: node gpu-1 reason set to: railyard: gpu-1: ", log), log[-3000:]
    assert slurm_node(project, "gpu-1") == ("idle", "none")
    job = ctl(project, "sbatch --parsable -w gpu-1 -N1 --chdir=/tmp --output=/dev/null --wrap true").strip()
    deadline = time.monotonic() + 60
    while "JobState=COMPLETED" not in (shown := ctl(project, f"scontrol show job -o {job}")):
        assert time.monotonic() < deadline and "FAILED" not in shown, shown
        time.sleep(1)
    assert "NodeList=gpu-1" in shown
    assert verify(project).returncode == 0


def test_a_transient_xid_is_named_by_node_gpu_and_code_and_the_loop_reboots_and_returns_the_node(project):
    # The node's own kernel log (its dmesg) shows the driver's Xid 109 for GPU5, the line copied
    # from a real log; its next boot clears it, as a reboot clears a GPU's context-switch timeout.
    fault(project, "--transient", "xid", "gpu-3", "GPU5", "109")
    manifest = json.loads((paths.lab_dir(STACK, project.dir) / "nodes/gpu-3/hwtree/railyard-hwtree.json").read_text())
    bus = manifest["bus_ids"]["GPU5"].rsplit(".", 1)[0]
    plain = project.railyard("verify", "--stack", STACK, "--only", "health", "--json", timeout=900)
    assert plain.returncode == 1, plain.stdout + plain.stderr
    assert [(f["kind"], f["node"], f["where"], f["found"]) for f in json.loads(plain.stdout)] == [
        ("xid", "gpu-3", bus, "Xid 109")]
    assert slurm_node(project, "gpu-3")[0] == "idle"
    # A repair run that reads the hardware alone neither returns nor resets a node found faulty by
    # its GPU tools: it is kept as it is, and says why.
    partial = verify(project, "--repair")
    assert partial.returncode == 1, partial.stdout + partial.stderr
    assert re.search(r"^node suspect +gpu-3: railyard: gpu-3: .*Xid 109.* \(kept: its findings in health not read "
                     r"this time\)$", partial.stdout, re.M), partial.stdout
    assert states(project)["gpu-3"]["state"] == "suspect" and slurm_node(project, "gpu-3")[0] == "idle"

    fixed = project.railyard("verify", "--stack", STACK, "--only", "hardware,health", "--repair", timeout=900)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    s = states(project)["gpu-3"]
    assert [c["state"] for c in s["history"]][-4:] == ["suspect", "drained", "repairing", "ready"]
    assert "Xid 109" in s["history"][-3]["reason"]
    assert slurm_node(project, "gpu-3") == ("idle", "none")
    assert project.railyard("verify", "--stack", STACK, "--only", "health", timeout=900).returncode == 0


def test_an_ecc_error_a_gpu_reset_clears_is_repaired_without_a_reboot(project):
    # The GPU's reset (nvidia-smi -r, the node's stand-in) starts its volatile ECC count again;
    # the node stays up.
    before = boots(project, "gpu-1")
    fault(project, "--transient", "ecc", "gpu-1", "GPU6", "4")
    fixed = project.railyard("verify", "--stack", STACK, "--only", "hardware,health", "--repair", timeout=900)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert re.search(r"gpu-1: GPU reset of 0000000\d:[0-9A-F]{2}:00\.0", fixed.stdout + fixed.stderr), fixed.stdout
    assert boots(project, "gpu-1") == before
    s = states(project)["gpu-1"]
    assert [c["state"] for c in s["history"]][-4:] == ["suspect", "drained", "repairing", "ready"]
    assert "uncorrectable ECC" in s["history"][-3]["reason"]
    assert slurm_node(project, "gpu-1") == ("idle", "none")
    fault(project, "--clear")


def test_a_persistent_fault_is_failed_after_two_resets_and_handed_to_a_person(project, api):
    before = boots(project, "gpu-2")
    fault(project, "gpu-lost", "gpu-2", "GPU0")
    try:
        proc = verify(project, "--repair")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        hand_off = proc.stdout[proc.stdout.index("hand-off:"):]
        assert "1 node(s) failed" in hand_off and "  gpu-2: railyard: failed after 2 resets" in hand_off
        s = states(project)["gpu-2"]
        assert s["state"] == "failed" and s["tries"] == 2
        assert len(boots(project, "gpu-2")) == len(before) + 2
        state, reason = slurm_node(project, "gpu-2")
        assert state == "drained" and reason.startswith("railyard: "), (state, reason)
        node = api.get("/api/v1/nodes/gpu-2")
        assert node["spec"].get("unschedulable") is True and TAINT in node["spec"]["taints"]
        # The stack's outputs hold every node's state, and this one's history, as the run left them.
        recorded = project.outputs()["nodeHealth"]["nodes"]
        assert {n: r["state"] for n, r in recorded.items()} == {**{n: "ready" for n in recorded}, "gpu-2": "failed"}
        assert recorded["gpu-2"]["history"] == s["history"] and len(recorded) == 4
        # A checkout without the states file (a fresh clone, a CI runner) takes them back from
        # there, and still hands the node to a person.
        paths.node_states(STACK, project.dir).unlink()
        again = verify(project)
        assert again.returncode == 1 and "  gpu-2: railyard: failed after 2 resets" in again.stdout, again.stdout
        assert states(project)["gpu-2"]["history"][:len(s["history"])] == s["history"]
    finally:
        fault(project, "--clear")
    # The person fixes it and resumes it in Slurm; the next verification takes it as ready, and
    # the next repair run lifts Railyard's cordon and taint in Kubernetes too.
    ctl(project, "scontrol update NodeName=gpu-2 State=RESUME")
    assert verify(project).returncode == 0
    s = states(project)["gpu-2"]
    assert s["state"] == "ready" and s["history"][-1]["reason"] == "returned to service by a person"
    assert verify(project, "--repair").returncode == 0
    node = api.get("/api/v1/nodes/gpu-2")
    assert not node["spec"].get("unschedulable") and TAINT not in (node["spec"].get("taints") or [])


def test_a_node_a_person_drained_is_left_alone_and_reported(project, api):
    ctl(project, "scontrol update NodeName=gpu-3 State=DRAIN Reason='rma 4711 reseat GPU1'")
    before = boots(project, "gpu-3")
    fault(project, "--transient", "gpu-lost", "gpu-3", "GPU1")
    try:
        proc = verify(project, "--repair")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "gpu-3: out of service by a person (rma 4711 reseat GPU1); left alone" in proc.stdout
        assert slurm_node(project, "gpu-3") == ("drained", "rma 4711 reseat GPU1")
        assert boots(project, "gpu-3") == before
        assert states(project).get("gpu-3", {}).get("state", "ready") == "ready"
        assert TAINT not in (api.get("/api/v1/nodes/gpu-3")["spec"].get("taints") or [])
    finally:
        fault(project, "--clear")
        ctl(project, "scontrol update NodeName=gpu-3 State=RESUME")


def test_a_node_a_person_cordoned_in_kubernetes_stays_cordoned(project, api):
    status, _ = api.request("PATCH", "/api/v1/nodes/gpu-2", {"spec": {"unschedulable": True}},
                            "application/merge-patch+json")  # `kubectl cordon gpu-2`
    assert status == 200
    fault(project, "--transient", "gpu-lost", "gpu-2", "GPU7")
    try:
        proc = verify(project, "--repair")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "gpu-2: out of service by a person (no reason given); left alone" in proc.stdout
        node = api.get("/api/v1/nodes/gpu-2")
        assert node["spec"].get("unschedulable") is True and TAINT not in (node["spec"].get("taints") or [])
        assert slurm_node(project, "gpu-2")[0] == "idle"
    finally:
        fault(project, "--clear")
        api.request("PATCH", "/api/v1/nodes/gpu-2", {"spec": {"unschedulable": None}}, "application/merge-patch+json")


def test_a_run_from_another_checkout_is_refused_while_one_holds_the_cluster(project, api):
    """The states file's lock is this checkout's alone; a run from another clone (the scheduled
    workflow's runner) is kept out by the cluster's own locks, held here by hand as such a run
    holds them: a flock on slurmctld's node, and Kubernetes' Lease."""
    ctl(project, "nohup sh -c 'exec 9>>/run/railyard-repair.lock; flock 9; echo ws-7 run > /run/railyard-repair.lock; "
                 "exec sleep 137' > /dev/null 2>&1 &")
    try:
        proc = verify(project, "--repair")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "another repair run holds this cluster (ws-7 run); try again when it ends" in proc.stderr, proc.stderr
    finally:
        ctl(project, "pkill -f '^sleep 137$' || true")
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    api.request("DELETE", f"{leases}/railyard-repair")  # the earlier runs' lease, given up
    status, said = api.request("POST", leases, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "railyard-repair"},
        "spec": {"holderIdentity": "ci run 42", "leaseDurationSeconds": 600, "acquireTime": now, "renewTime": now}})
    assert status in (200, 201), said
    try:
        proc = verify(project, "--repair")
        assert proc.returncode == 2 and "another repair run holds this cluster (ci run 42)" in proc.stderr, proc.stderr
    finally:
        api.request("DELETE", f"{leases}/railyard-repair")
    # Free again: the run holds both while it runs, and lets both go.
    assert verify(project, "--repair").returncode == 0
    lease = api.get(f"{leases}/railyard-repair")
    assert lease is not None and not lease["spec"].get("holderIdentity"), lease
    assert ctl(project, "flock -n /run/railyard-repair.lock true && echo free").strip() == "free"


def test_three_faulty_nodes_with_a_budget_of_one_are_out_one_at_a_time(project):
    for node, gpu in (("gpu-1", "GPU3"), ("gpu-2", "GPU4"), ("gpu-3", "GPU5")):
        fault(project, "--transient", "gpu-lost", node, gpu)
    since = time.time()
    proc = verify(project, "--repair")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = states(project)
    spans = sorted(i for n in ("gpu-1", "gpu-2", "gpu-3") for i in out_intervals(got[n]) if i[0] >= since)
    assert len(spans) == 3
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        assert len([t for t in boots(project, node) if t >= since]) == 1
        assert slurm_node(project, node) == ("idle", "none")


def test_railyard_up_runs_the_loop_once_the_engine_is_done_where_the_stack_asks(project):
    project.write({**project.cfg, "railyard:health": {**project.cfg["railyard:health"], "repair": True}})
    try:
        fault(project, "--transient", "gpu-lost", "gpu-1", "GPU4")
        since = time.time()
        proc = project.railyard("up", "--stack", STACK, timeout=1500)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "railyard:health.repair: verifying and repairing stack trepair's nodes" in proc.stderr
        s = states(project)["gpu-1"]
        assert [c["state"] for c in s["history"] if c["time"] >= since] == ["suspect", "drained", "repairing", "ready"]
        assert slurm_node(project, "gpu-1") == ("idle", "none")
        # The loop ran after the engine: its states reached the stack's outputs all the same.
        assert project.outputs()["nodeHealth"]["nodes"]["gpu-1"]["history"] == s["history"]
    finally:
        project.write(project.cfg)
        fault(project, "--clear")
