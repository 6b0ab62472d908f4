"""Slurm placed by the fabric, end to end on the real Pulumi engine: a 12-node lab in 3 scalable
units (reservedLeafPorts 28 leaves 4 nodes per QM9700 leaf), tuned by the site playbook whose slurm
role runs Debian's munged and slurmctld on gpu-0 and slurmd in every node, configless. Slurm's own
commands, run in the controller node, are the proof: its view of the topology, and where its
scheduler puts jobs that ask for one switch."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from railyard import paths
from railyard.drivers.lab import gc, names, net, proc
from railyard.model.plan import make_plan
from railyard.stack import parse_config

from .railyard_project import STORAGE, free_networks, lab_config
from .stack_project import StackProject

ROOT = paths.PROJECT_ROOT
STACK = "tslurm"
WAIT = 20  # railyard:slurm.maxSwitchWait
HEALTH_CHECK = 15  # railyard:slurm.healthCheckInterval


def stack_config(mgmt: str, storage: str) -> dict:
    config = lab_config(12, mgmt, storage, **{"railyard:slurm": {"maxSwitchWait": WAIT,
                                                                 "healthCheckInterval": HEALTH_CHECK},
                                              "railyard:ephemeral": {"ttl": "1h"}})
    config["railyard:fabric"]["compute"]["reservedLeafPorts"] = 28
    return config


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    gc.destroy_all(STACK)
    (mgmt,), storage = free_networks(1, prefix=20), STORAGE
    p = StackProject(tmp_path_factory.mktemp("slurm"), STACK, stack_config(mgmt, storage))
    p.plan = make_plan(parse_config(stack_config(mgmt, storage), stack=STACK))
    # The program and the `railyard` commands (tune, lab fault) alike keep the lab's runtime under the copy.
    p.env["RAILYARD_ROOT"] = str(p.dir)
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    try:
        p.pulumi("up", "--yes", "--skip-preview", timeout=1500)
        yield p
    finally:
        p.pulumi("destroy", "--yes", "--skip-preview", check=False)
        gc.destroy_all(STACK, p.dir)


def ctl(p: StackProject, command: str) -> str:
    return p.ssh(p.plan.slurm.controller.name, command).stdout


def hostnames(p: StackProject, hostlist: str) -> set[str]:
    """Slurm's own expansion of a hostlist."""
    return set(ctl(p, f"scontrol show hostnames '{hostlist}'").split())


def submit(p: StackProject, nodes: int, switches: str) -> str:
    out = ctl(p, f"sbatch --parsable -N {nodes} --switches={switches} --chdir=/tmp --output=/dev/null "
                 f"--wrap 'sleep 600'")
    return out.strip().split(";")[0]


def job(p: StackProject, job_id: str) -> dict[str, str]:
    text = ctl(p, f"scontrol show job -o {job_id}")
    return dict(re.findall(r"(\w+)=(\S*)", text))


def wait_state(p: StackProject, job_id: str, state: str, timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        info = job(p, job_id)
        if info.get("JobState") == state or time.monotonic() > deadline:
            return info
        time.sleep(1)


def units_of(p: StackProject, nodes: set[str]) -> set[str]:
    by_node = {n.name: n.switch for n in p.plan.slurm.nodes}
    return {by_node[n] for n in nodes}


def test_scontrol_shows_the_planned_topology(project):
    shown = {}
    for line in ctl(project, "scontrol show topology").splitlines():
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        shown[fields["SwitchName"]] = fields
    planned = project.plan.slurm.switches
    assert set(shown) == {s.name for s in planned} == {"gpu-su0", "gpu-su1", "gpu-su2", "spine"}
    for s in planned:
        got = shown[s.name]
        assert int(got["Level"]) == s.level, s.name
        if s.nodes:
            assert hostnames(project, got["Nodes"]) == set(s.nodes), s.name
            assert "Switches" not in got
        else:
            assert hostnames(project, got["Switches"]) == set(s.switches), s.name
    # Every node registered, with the SKU's GPUs, and none drained.
    nodes = ctl(project, "sinfo --noheader --Node --format '%N %T %G'").split("\n")
    states = {line.split()[0]: line.split()[1:] for line in nodes if line.strip()}
    assert set(states) == {n.name for n in project.plan.slurm.nodes}
    assert all(st[0] == "idle" and st[1] == "gpu:h100:8" for st in states.values()), states


def test_four_nodes_on_one_switch_run_in_one_scalable_unit(project):
    job_id = submit(project, 4, "1")
    try:
        info = wait_state(project, job_id, "RUNNING", 60)
        assert info["JobState"] == "RUNNING", info
        assert len(units_of(project, hostnames(project, info["NodeList"]))) == 1, info["NodeList"]
    finally:
        ctl(project, f"scancel {job_id}")


def test_five_nodes_on_one_switch_wait_then_run_across_two_units(project):
    ctl(project, "scancel --user=root")  # whatever an earlier test left holds no nodes
    submitted = time.monotonic()
    job_id = submit(project, 5, f"1@0:{WAIT}")
    try:
        time.sleep(WAIT / 2)
        info = job(project, job_id)
        assert info["JobState"] == "PENDING", info
        # The wait is counted from the job's first scheduling pass, and the job then starts at the
        # next pass (the main loop runs every 60 s by default).
        info = wait_state(project, job_id, "RUNNING", WAIT + 120)
        assert info["JobState"] == "RUNNING", info
        assert time.monotonic() - submitted >= WAIT
        nodes = hostnames(project, info["NodeList"])
        assert len(nodes) == 5 and len(units_of(project, nodes)) == 2, info["NodeList"]
    finally:
        ctl(project, f"scancel {job_id}")


def sinfo_line(p: StackProject, node: str) -> tuple[str, str]:
    """(state, reason) of one node, as sinfo prints them."""
    _, state, _, reason = ctl(p, f"sinfo --noheader --Node --nodes {node} --format '%N|%T|%u|%E'").strip().split("|", 3)
    return state, reason


def wait_node(p: StackProject, node: str, done, timeout: float) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        got = sinfo_line(p, node)
        if done(*got) or time.monotonic() > deadline:
            return got
        time.sleep(1)


def test_slurmds_health_check_drains_a_faulty_node_on_its_own_and_returns_it_healthy(project):
    """No railyard command runs here but the fault, which only changes what the node's own
    nvidia-smi shows: slurmd's HealthCheckProgram, installed by the slurm role, finds it, drains its
    node through Slurm with the finding as the reason, and returns the node once it is healthy
    again; a node a person drained stays theirs through the same checks."""
    def railyard(*args: str) -> str:
        done = subprocess.run([str(ROOT / ".venv" / "bin" / "railyard"), *args], cwd=project.dir, env=project.env,
                              text=True, capture_output=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "HealthCheckInterval=15" in ctl(project, "grep ^HealthCheck /etc/slurm/slurm.conf")
    ctl(project, "scontrol update NodeName=gpu-10 State=DRAIN Reason='rma 4711'")
    railyard("lab", "fault", "--stack", STACK, "ecc", "gpu-11", "GPU3", "2")
    railyard("lab", "fault", "--stack", STACK, "ecc", "gpu-10", "GPU1", "1")  # faulty too, and a person's
    try:
        state, reason = wait_node(project, "gpu-11", lambda st, _: st == "drained", 3 * HEALTH_CHECK + 30)
        assert state == "drained", (state, reason)
        assert reason.startswith("railyard: health check: ") and "2 uncorrectable ECC error(s)" in reason, reason
        # The check ran on every node meanwhile: the person's drain of a faulty node is as they left it.
        assert sinfo_line(project, "gpu-10") == ("drained", "rma 4711")
        # slurmd logged the program's finding, in the node's own log.
        log = project.ssh("gpu-11", "grep 'health_check failed' /var/log/slurm/slurmd.log").stdout
        assert "ecc-uncorrectable" in log, log
    finally:
        railyard("lab", "fault", "--stack", STACK, "--clear")
    assert wait_node(project, "gpu-11", lambda st, _: st == "idle", 3 * HEALTH_CHECK + 30) == ("idle", "none")
    assert sinfo_line(project, "gpu-10") == ("drained", "rma 4711")
    ctl(project, "scontrol update NodeName=gpu-10 State=RESUME")
    assert wait_node(project, "gpu-10", lambda st, _: st == "idle", 30)[0] == "idle"


def test_a_second_tuning_run_changes_nothing_and_restarts_no_daemon(project):
    daemons = "cat /run/slurmctld.pid /run/munge/munged.pid /run/slurmd.pid"
    pids = ctl(project, daemons)
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "railyard"), "tune", "--stack", STACK],
                          cwd=project.dir, env=project.env,
                          text=True, capture_output=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    hosts = [line for line in proc.stdout.splitlines() if line.startswith("gpu-")]
    assert len(hosts) == 12 and all("changed=0 failed=0 unreachable=0" in line for line in hosts), proc.stdout
    assert ctl(project, daemons) == pids


def test_destroy_leaves_no_slurm_or_munge_process(project):
    inodes = {net.netns_inode(names.node_ns(STACK, n.name)) for n in project.plan.nodes}
    daemons = [p for p in proc.in_namespaces(inodes - {None})
               if p.argv and Path(p.argv[0]).name in ("munged", "slurmctld", "slurmd")]
    assert len(daemons) >= 1 + 2 * len(project.plan.nodes)  # slurmctld, and munged and slurmd everywhere
    project.pulumi("destroy", "--yes", "--skip-preview")
    assert [p for p in daemons if proc.alive(p.pid)] == []
    left = gc.inventory(STACK, project.dir)
    assert left["netns"] == [] and left["processes"] == [], left
