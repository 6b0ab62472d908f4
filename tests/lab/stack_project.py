"""The lab tests' project copy: railyard.bench.stack_project, shared with the benchmarks so both
run the engine the same way; and `lab_stack`, one lab stack up for a module's tests."""

from __future__ import annotations

import contextlib
import json
from typing import Iterator

import pytest

from railyard import paths
from railyard.bench.stack_project import PulumiFailed, StackProject
from railyard.drivers.lab import gc
from railyard.model.plan import make_plan
from railyard.stack import parse_config

__all__ = ["PulumiFailed", "StackProject", "lab_stack", "recorded_facts"]


@contextlib.contextmanager
def lab_stack(tmp_path_factory, stack: str, cfg: dict, *, timeout: float = 1500) -> Iterator[StackProject]:
    """`stack` up on the real engine in a project copy of its own (`cfg` and its plan kept as
    .cfg and .plan). The program and the `railyard` commands (tune, lab fault, verify) alike keep
    the lab's runtime under the copy. Afterwards, even after an `up` that failed half-way: its
    faults cleared, the stack destroyed and whatever the lab still holds of it collected."""
    if not (paths.bin_dir(paths.PROJECT_ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    gc.destroy_all(stack)
    p = StackProject(tmp_path_factory.mktemp(stack), stack, cfg)
    p.env["RAILYARD_ROOT"] = str(p.dir)
    p.cfg = cfg
    p.plan = make_plan(parse_config(cfg, stack=stack))
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    try:
        p.pulumi("up", "--yes", "--skip-preview", timeout=timeout)
        yield p
    finally:
        p.railyard("lab", "fault", "--stack", stack, "--clear")
        p.pulumi("destroy", "--yes", "--skip-preview", check=False)
        gc.destroy_all(stack, p.dir)


def recorded_facts(project: StackProject, node: str) -> dict:
    """The node's facts as the stack's state holds them (a refresh records them)."""
    state = json.loads(project.pulumi("stack", "export").stdout)
    return json.loads(next(r["outputs"]["facts"] for r in state["deployment"]["resources"]
                           if r["type"].endswith("lab:Node") and json.loads(r["outputs"]["spec"])["node"] == node))
