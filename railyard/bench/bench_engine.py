"""Engine section: `pulumi preview` of a baseline program of N no-op dynamic resources.

It measures the engine and the Python SDK alone; the planner and lab sections compare Railyard's
own programs against it.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from railyard import paths
from railyard.bench.harness import Context, Sample, Section
from railyard.engine.toolchain import engine_env

BASELINE_PROGRAM = """
import pulumi
from railyard.bench.noop import Noop

for i in range(int(pulumi.Config().require("count"))):
    Noop(f"noop-{i}")
"""


def baseline_project(workdir: Path, count: int) -> tuple[Path, dict]:
    """A throwaway project and backend for a baseline program of `count` resources."""
    project = workdir / f"baseline-{count}"
    project.mkdir(parents=True, exist_ok=True)
    (project / "Pulumi.yaml").write_text(
        "name: baseline\nruntime:\n  name: python\n  options:\n"
        f"    virtualenv: {paths.PROJECT_ROOT / '.venv'}\n    toolchain: pip\n"
    )
    (project / "__main__.py").write_text(BASELINE_PROGRAM)
    env = engine_env()
    env["PULUMI_BACKEND_URL"] = f"file://{workdir / 'state'}"
    env["PULUMI_CONFIG_PASSPHRASE"] = ""
    (workdir / "state").mkdir(exist_ok=True)
    return project, env


def pulumi(project: Path, env: dict, *args: str) -> float:
    """Run pulumi and return its wall time; /usr/bin/time is avoided so this needs nothing extra."""
    start = time.perf_counter()
    subprocess.run([str(paths.bin_dir() / "pulumi"), *args, "--non-interactive"], cwd=project, env=env,
                   check=True, capture_output=True, text=True)
    return time.perf_counter() - start


def preview_baseline(ctx: Context, count: int) -> float:
    project, env = baseline_project(ctx.workdir, count)
    subprocess.run([str(paths.bin_dir() / "pulumi"), "stack", "select", "--create", "bench", "--non-interactive"],
                   cwd=project, env=env, check=True, capture_output=True)
    pulumi(project, env, "config", "set", "count", str(count), "--stack", "bench")
    return pulumi(project, env, "preview", "--stack", "bench")


def run(ctx: Context):
    for count in ((20,) if ctx.quick else (100, 448)):
        yield Sample(f"baseline preview, {count} no-op dynamic resources", preview_baseline(ctx, count), "s")


SECTIONS = (Section("engine", "pulumi preview of a baseline program of no-op dynamic resources", run),)
