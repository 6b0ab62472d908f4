"""Engine section: `pulumi preview` of Railyard's program at 448 and 2,500 nodes beside a baseline
program of as many no-op Python dynamic resources, so the ratio is Railyard's own overhead.

Both run the way `railyard preview` runs the engine (the toolchain's binary, the offline
environment, toolchain.command_settings), on a fresh stack in a throwaway backend: nothing is
created. Wall time and the peak of the whole process tree's memory (CLI, language host, program,
dynamic provider) come from railyard.bench.proctree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from railyard import paths
from railyard.bench import proctree
from railyard.bench.harness import Context, Sample, Section
from railyard.bench.stack_project import PulumiFailed, StackProject
from railyard.engine.toolchain import command_settings, engine_env

# Nodes: the MLPerf GPT-3 175B record's 448 DGX H100 (3,584 GPUs), and a 20,000-GPU site.
SIZES = (448, 2_500)
QUICK_SIZES = (8, 32)
TARGET_WALL_S = {448: 60.0, 2_500: 300.0}
TARGET_RATIO = {448: 1.25}
PREVIEW_TIMEOUT_S = 3_600

BASELINE_PROGRAM = """
import pulumi
from railyard.bench.noop import Noop

for i in range(int(pulumi.Config().require("count"))):
    Noop(f"noop-{i}")
"""


def pools(nodes: int) -> list[dict]:
    """One pool up to 448 nodes; above, eight equal scalable units (the most pools a stack has),
    because one pool's address blocks at 2,500 nodes would need a /14 of rails and the lab's
    networks all live in 198.18.0.0/15."""
    if nodes <= 448:
        return [{"name": "gpu", "sku": "dgx-h100", "count": nodes}]
    return [{"name": f"su{i}", "sku": "dgx-h100", "count": nodes // 8 + (1 if i < nodes % 8 else 0)} for i in range(8)]


def preview_config(nodes: int) -> dict:
    """A bare-metal DGX H100 stack on the lab driver with every storage tier, as `lab` has.
    Nothing is created, so its networks may overlap a running lab's."""
    return {
        "railyard:region": "lab",
        "railyard:layout": "bare-metal",
        "railyard:driver": "lab",
        "railyard:nodePools": pools(nodes),
        "railyard:fabric": {
            "compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": "198.19.0.0/16"},
            "storage": {"cidr": "198.18.80.0/20"},
            "management": {"cidr": "198.18.64.0/20"},
        },
        "railyard:ephemeral": {"ttl": "2h"},
        "railyard:storage": {
            "object": {"bucket": "datasets"},
            "parallelFs": {"kind": "lustre", "mount": "/mnt/pfs", "capacityTiB": 10},
            "localCache": {"mount": "/mnt/cache", "raid": "raid0", "fs": "xfs"},
        },
    }


class BaselineProject:
    """A throwaway project and backend whose program declares `count` no-op dynamic resources."""

    def __init__(self, base: Path, count: int):
        self.dir = base / "project"
        self.dir.mkdir(parents=True)
        (self.dir / "Pulumi.yaml").write_text(
            "name: baseline\nruntime:\n  name: python\n  options:\n"
            f"    virtualenv: {paths.PROJECT_ROOT / '.venv'}\n    toolchain: pip\n")
        (self.dir / "__main__.py").write_text(BASELINE_PROGRAM)
        (base / "state").mkdir()
        self.env = {**engine_env(paths.PROJECT_ROOT), "PULUMI_BACKEND_URL": f"file://{base / 'state'}",
                    "PULUMI_CONFIG_PASSPHRASE": ""}
        self.stack = "bench"
        self.pulumi("stack", "init", "--secrets-provider", "passphrase")
        self.pulumi("config", "set", "count", str(count))

    def argv(self, *args: str) -> list[str]:
        return [str(paths.bin_dir(paths.PROJECT_ROOT) / "pulumi"), *args, "--stack", self.stack, "--non-interactive"]

    def env_for(self, *args: str) -> dict[str, str]:
        return {**self.env, **command_settings(args)}

    def pulumi(self, *args: str) -> None:
        proc = subprocess.run(self.argv(*args), cwd=self.dir, env=self.env_for(*args), capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise PulumiFailed(f"pulumi {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def profiler(name: str):
    """With RAILYARD_BENCH_PROFILE=DIR, py-spy records the program and the dynamic provider of each
    preview into DIR/<name>-<kind>-<pid>.txt (collapsed stacks, idle time included: a program
    waiting on the engine shows as waiting)."""
    out = os.environ.get("RAILYARD_BENCH_PROFILE")
    spy = Path(sys.executable).parent / "py-spy"
    if not out:
        return None, []
    if not spy.exists():
        raise RuntimeError("RAILYARD_BENCH_PROFILE needs py-spy: pip install -e '.[test]'")
    Path(out).mkdir(parents=True, exist_ok=True)
    spies: list[subprocess.Popen] = []

    def on_new(pid: int, kind: str) -> None:
        if kind in ("program", "dynamic provider"):
            spies.append(subprocess.Popen(
                [str(spy), "record", "--pid", str(pid), "--idle", "--format", "raw", "--rate", "50",
                 "--output", str(Path(out) / f"{name}-{kind.replace(' ', '-')}-{pid}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    return on_new, spies


def preview(project, name: str) -> tuple[proctree.TreeRun, dict]:
    """`pulumi preview --json` on the project's stack; the run and its JSON result."""
    on_new, spies = profiler(name)
    run = proctree.run(project.argv("preview", "--json"), cwd=project.dir, env=project.env_for("preview"),
                       timeout=PREVIEW_TIMEOUT_S, on_new=on_new)
    for spy in spies:  # each ends with the process it records, writing its file
        spy.wait(timeout=120)
    try:
        result = json.loads(run.stdout)
    except ValueError:
        result = {}
    if run.returncode != 0 or not result.get("steps"):
        raise RuntimeError(f"preview failed (rc {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return run, result


def resource_count(result: dict) -> int:
    """Resources a preview would create, the stack itself left out (the baseline has one too)."""
    return sum(1 for s in result["steps"] if (s.get("newState") or {}).get("type") != "pulumi:pulumi:Stack")


def node_resource_count(result: dict) -> int:
    """Resources that are a node or under one: an HgxNode component and its children (a URN's
    type part names the parents' types)."""
    return sum(1 for s in result["steps"] if "railyard:index:HgxNode" in s.get("urn", "").split("::")[2])


def run(ctx: Context):
    sizes = QUICK_SIZES if ctx.quick else SIZES
    for nodes in sizes:
        base = Path(tempfile.mkdtemp(prefix=f"engine-{nodes}-", dir=ctx.workdir))
        try:
            project = StackProject(base / "railyard", f"bench{nodes}", preview_config(nodes))
            project.pulumi("stack", "init", "--secrets-provider", "passphrase")
            ours, result = preview(project, f"railyard-{nodes}")
            count = resource_count(result)
            per_node = node_resource_count(result)
            baseline, _ = preview(BaselineProject(base / "baseline", count), f"baseline-{count}")
        finally:
            shutil.rmtree(base, ignore_errors=True)
        label = f"preview, {nodes:,} nodes"
        yield Sample(f"{label}: wall", ours.wall_s, "s", target=TARGET_WALL_S.get(nodes))
        yield Sample(f"{label}: peak RSS (process tree)", ours.peak_rss_mib, "MiB")
        yield Sample(f"{label}: CPU (process tree)", ours.total_cpu_s, "s",
                     note="sampled every 0.2 s; " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(ours.cpu_s.items())))
        yield Sample(f"{label}: resources", count, "")
        yield Sample(f"{label}: resources per node", per_node / nodes, "",
                     note="an HgxNode component and everything under it, per node")
        yield Sample(f"{label}: resources outside the nodes", count - per_node, "",
                     note="cluster, fabric, storage and pool components, key, fabric, spine, object store, tuning, expiry")
        yield Sample(f"baseline preview, {count:,} no-op dynamic resources: wall", baseline.wall_s, "s")
        yield Sample(f"baseline preview, {count:,} no-op dynamic resources: peak RSS (process tree)",
                     baseline.peak_rss_mib, "MiB")
        yield Sample(f"baseline preview, {count:,} no-op dynamic resources: CPU (process tree)", baseline.total_cpu_s,
                     "s", note="sampled every 0.2 s; " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(baseline.cpu_s.items())))
        yield Sample(f"{label}: ratio to baseline", ours.wall_s / baseline.wall_s, "x", target=TARGET_RATIO.get(nodes),
                     note="wall of Railyard's preview / wall of the baseline with as many resources")


SECTIONS = (Section("engine", "pulumi preview at 448 and 2,500 nodes beside a baseline of no-op dynamic resources",
                    run),)
