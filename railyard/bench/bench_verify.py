"""Verify section: `railyard verify`'s reading of every node (issue 40, section 7), on 32 and 64 lab
nodes standing in for dgx-h100 servers, and what that projects for the 448-node pod.

Each node is a lab node with its dgx-h100 hardware tree, reached over SSH; the reading is the one
`railyard verify` makes (railyard.verify.read_facts: the model's discovery run on each node, 32 at
a time) and the SKU check of every node's facts. The projection fits the two walls to a line
(a fixed cost plus a cost per node) and reads it at 448. Here the nodes share the controller's two
cores, so every node's share of the work is on the controller's CPUs too: a real controller only
runs the ssh clients and the check, so the projection is an upper bound.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import time
from pathlib import Path

from railyard.bench.bench_hosts import lab_servers
from railyard.bench.fixtures import two_rank_table
from railyard.bench.harness import Context, Sample, Section

SIZES = (32, 64)
QUICK_SIZES = (8, 16)
POD = 448
TARGET_POD_S = 60.0


def read_size(ctx: Context, hosts: int) -> tuple[float, float]:
    """(wall, controller CPU-s) of verify's reading of `hosts` lab nodes, findings required empty."""
    from railyard import verify
    from railyard.remote.ssh import Target

    with lab_servers(ctx, f"bench-verify{hosts}", hosts) as servers:
        targets = {n.name: Target(n.name, servers.addresses[i], host_keys=(servers.host_keys[i],))
                   for i, n in enumerate(servers.plan.nodes)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.monotonic()
        facts = verify.read_facts(targets, servers.key)
        findings = verify.hardware(servers.spec, servers.plan, facts)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        own_after = resource.getrusage(resource.RUSAGE_SELF)
    if findings:
        raise RuntimeError(f"verify of {hosts} lab nodes as planned found: {'; '.join(map(str, findings[:5]))}")
    cpu = sum((a.ru_utime - b.ru_utime) + (a.ru_stime - b.ru_stime)
              for a, b in ((after, before), (own_after, own_before)))
    return wall, cpu


def run(ctx: Context):
    sizes = QUICK_SIZES if ctx.quick else SIZES
    walls = {}
    for hosts in sizes:
        wall, cpu = read_size(ctx, hosts)
        walls[hosts] = wall
        yield Sample(f"verify, {hosts} lab nodes: wall", wall, "s",
                     note=f"every node's facts over SSH, {min(32, hosts)} at a time, and its SKU check")
        yield Sample(f"verify, {hosts} lab nodes: controller CPU-s per node", cpu / hosts, "s",
                     note="ssh clients, the program's transfer, the check (the nodes' own share is not in it)")
    (a, wa), (b, wb) = sorted(walls.items())
    per_node = (wb - wa) / (b - a)
    fixed = max(0.0, wa - per_node * a)
    yield Sample(f"verify, projected for {POD} nodes from {a} and {b}: wall", fixed + per_node * POD, "s",
                 target=TARGET_POD_S,
                 note=f"the line through both walls ({per_node * 1000:.0f} ms per node) at {POD}; the lab's "
                      f"nodes share the controller's {os.cpu_count()} cores, so an upper bound")


# --- slurmd's health check on one node ------------------------------------------------------------

ROLE = Path(__file__).resolve().parents[2] / "playbooks" / "roles" / "slurm"
HEALTH_RUNS = 20


def install_health_check(root: Path, node: str, expect: dict, path: str) -> Path:
    """The slurm role's health check laid out under root as the role writes it on a node: the model
    code copied from the role's files (links to railyard/model), the program from its template,
    the node's settings. Returns the program."""
    import jinja2

    lib = root / "lib"
    lib.mkdir(parents=True)
    for m in ("health_check.py", "gpu_health.py", "node_health.py"):
        shutil.copyfile(ROLE / "files" / "health-check" / m, lib / m)
    config = root / "health-check.json"
    config.write_text(json.dumps({"node": node, "expect": expect, "path": path}))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    env.filters["to_json"] = json.dumps
    program = root / "railyard-health-check"
    program.write_text(env.from_string((ROLE / "templates" / "railyard-health-check.j2").read_text()).render(
        slurm_health_check_dir=str(lib), __slurm_health_config=str(config)))
    program.chmod(0o755)
    return program


def run_health_check(ctx: Context):
    """The program as slurmd runs it on a healthy dgx-h100 lab node: its nvidia-smi the lab's stand-in
    over the node's hardware tree, Slurm's sinfo a stand-in printing the idle line Debian's prints."""
    import statistics

    from railyard.drivers.lab import hwtree
    from railyard.model.catalog import load_catalog
    from railyard.model.health_check import expect_of

    root = ctx.workdir / "health-check"
    shutil.rmtree(root, ignore_errors=True)
    sku = load_catalog().nodes["dgx-h100"]
    hwtree.build_hwtree(sku, root / "hw")
    tools = root / "bin"
    tools.mkdir(parents=True)
    script = Path(hwtree.__file__).with_name("gpu_tools.py")
    (tools / "nvidia-smi").write_text(f"#!/bin/sh\nexec /usr/bin/python3 -I -c 'import runpy, sys; "
                                      f"sys.exit(runpy.run_path(\"{script}\")[\"main\"](sys.argv[1:], \"{root / 'hw'}\"))' \"$@\"\n")
    (tools / "sinfo").write_text("#!/bin/sh\necho 'gpu-0|idle|Unknown|none'\n")
    for tool in ("nvidia-smi", "sinfo"):
        (tools / tool).chmod(0o755)
    program = install_health_check(root, "gpu-0", expect_of(sku).to_json(), f"{tools}:/usr/bin:/bin")
    walls, cpus = [], []
    runs = 5 if ctx.quick else HEALTH_RUNS
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        done = subprocess.run([str(program)], env={"SLURMD_NODENAME": "gpu-0"}, capture_output=True, text=True)
        walls.append(time.monotonic() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        if done.returncode != 0 or "gpu-0: healthy" not in done.stdout:
            raise RuntimeError(f"the health check of a healthy node said: {done.stdout}{done.stderr}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    yield Sample("slurmd's health check, one dgx-h100 node: wall (median)", statistics.median(walls), "s",
                 note=f"{runs} runs of the installed program: the GPU tools (the lab's nvidia-smi stand-in, no "
                      "dcgmi), the judges, sinfo; a real nvidia-smi's own time is not in it")
    yield Sample("slurmd's health check, one dgx-h100 node: CPU-s (median)", statistics.median(cpus), "s",
                 note="the program and every tool it ran")
    yield Sample("slurmd's health check: peak RSS of one process", peak, "MiB",
                 note="the largest child this bench process has waited for: an upper bound on the program's "
                      "and its tools'")


TARGET_PAIRS_JUDGED_S = 5.0


def run_pairs(ctx: Context):
    """The 448-node pod's collectives across rail pairs (issue 41): planning its pairs and rounds,
    and judging one real nccl-tests table per pair, one NIC's pairs slowed (what `verify --deep`
    does besides waiting for the runs). The runs themselves take the cluster's time, not this."""
    import functools

    from railyard.model import pair_collectives as pc
    from railyard.model.catalog import load_catalog
    from railyard.stack import load

    _, plan = load(str(Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.us-east-bm.yaml"))
    real = two_rank_table()
    slow = real.replace("17179869184    4294967296     float     sum      -1    68652  250.24  469.21",
                        "17179869184    4294967296     float     sum      -1   137304  125.12  234.60")
    slow = slow.replace("0    68668  250.19  469.10", "0   137336  125.10  234.55")
    started = time.perf_counter()
    pairs = pc.plan_pairs(plan, load_catalog().nodes)
    rounds = pc.rounds(pairs)
    planned = time.perf_counter() - started
    target = plan.nodes[7].name
    started = time.perf_counter()
    outcomes = [pc.outcome(p, 0, slow if p.rail == 3 and target in (p.a, p.b) else real, "") for p in pairs]
    found = pc.judge(outcomes, functools.partial(pc.yardstick, nic_gbps=469.21 * 8), 0.15)
    judged = time.perf_counter() - started
    if [(f.kind, f.node, f.where) for f in found] != [("collective-slow", target, "rail3")]:
        raise RuntimeError(f"the pod's pairs were judged {[str(f) for f in found[:3]]}, not {target}'s rail 3")
    note = f"{len(pairs):,} pairs in {len(rounds)} rounds"
    yield Sample(f"{len(plan.nodes)} nodes: the rail pairs and their rounds planned", planned, "s", note=note)
    yield Sample(f"{len(plan.nodes)} nodes: {len(pairs):,} real tables read and judged", judged, "s",
                 target=TARGET_PAIRS_JUDGED_S, note="one NIC slowed, named alone")


SECTIONS = (Section("verify", "railyard verify: reading 32 and 64 lab nodes over SSH with their SKU check, "
                              f"projected to the {POD}-node pod (target {TARGET_POD_S:.0f} s)", run),
            Section("health-check", "slurmd's health check (issue 41): what one run costs a node, the program as "
                                    "the slurm role installs it", run_health_check),
            Section("pair-collectives", "the 448-node pod's all_reduce_perf rail pairs (issue 41): planned, and "
                                        "a real table per pair judged", run_pairs))
