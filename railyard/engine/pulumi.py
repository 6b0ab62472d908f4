"""Running the Pulumi CLI for Railyard: always the toolchain's binary, always the offline environment."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Sequence

from railyard import paths
from railyard.engine.state_types import is_dynamic
from railyard.engine.toolchain import ToolchainError, command_settings, engine_env


class PulumiError(RuntimeError):
    def __init__(self, args: Sequence[str], returncode: int, output: str):
        self.returncode = returncode
        self.output = output
        super().__init__(f"pulumi {' '.join(args)} failed with exit code {returncode}")


def pulumi_bin(root: Path | None = None) -> Path:
    p = paths.bin_dir(root) / "pulumi"
    if not p.exists():
        raise ToolchainError("the Pulumi engine is not set up here yet: run `make toolchain` (or any make target)")
    return p


def run(
    args: Sequence[str],
    *,
    root: Path | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    capture: bool = False,
    check: bool = True,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `pulumi ARGS` in the project (or cwd) with the engine environment."""
    root = root or paths.project_root()
    full_env = {**engine_env(root, env), **command_settings(args)}
    proc = subprocess.run(
        [str(pulumi_bin(root)), *args, "--non-interactive"],
        cwd=cwd or root,
        env=full_env,
        text=True,
        capture_output=capture,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise PulumiError(args, proc.returncode, (proc.stdout or "") + (proc.stderr or ""))
    return proc


def run_json(args: Sequence[str], **kw: Any) -> Any:
    proc = run([*args, "--json"], capture=True, **kw)
    return json.loads(proc.stdout)


def ensure_stack(stack: str, **kw: Any) -> None:
    """Select STACK, creating it with the passphrase secrets provider the first time."""
    if run(["stack", "select", stack], capture=True, check=False, **kw).returncode != 0:
        run(["stack", "init", stack, "--secrets-provider", "passphrase"], capture=True, **kw)


def stack_outputs(stack: str, *, secrets: bool = False, **kw: Any) -> dict:
    args = ["stack", "output", "--stack", stack]
    if secrets:
        args.append("--show-secrets")
    return run_json(args, **kw)


def failure_line(proc: subprocess.CompletedProcess[str], what: str) -> str:
    """Why a pulumi command failed, in one line: its first `error:` line, after any noise; else
    stderr's last (stdout may be a --json document)."""
    err = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
    out = [ln.strip() for ln in (proc.stdout or "").splitlines() if ln.strip()]
    return next((ln for ln in err + out if ln.startswith("error:")),
                err[-1] if err else f"pulumi {what} exited {proc.returncode}")


# Set by record_outputs for the program: a run that only records outputs leaves out what reads or
# acts on the cluster (the drift check, which would read every node and may stop the run).
OUTPUTS_ONLY_ENV = "RAILYARD_OUTPUTS_ONLY"


def stack_urn(stack: str, root: Path | None = None) -> str:
    """The URN of the stack's own resource, whose outputs are the stack's outputs."""
    from railyard.model import yamlio

    project = yamlio.load((root or paths.project_root()).joinpath("Pulumi.yaml").read_text())["name"]
    return f"urn:pulumi:{stack}::{project}::pulumi:pulumi:Stack::{project}-{stack}"


def record_args(stack: str, root: Path | None = None) -> list[str]:
    """Record what the program exports now in the stack's outputs, and change nothing else: a
    refresh of the stack's own resource alone, with the program run (`pulumi up --target` of it
    would do as much, but shows in the history as an update of the cluster). Run with
    OUTPUTS_ONLY_ENV set."""
    return ["refresh", "--run-program", "--target", stack_urn(stack, root), "--yes", "--skip-preview"]


def record_outputs(stack: str, *, root: Path | None = None, timeout: float | None = None
                   ) -> subprocess.CompletedProcess[str]:
    return run([*record_args(stack, root), "--stack", stack], root=root, env={**os.environ, OUTPUTS_ONLY_ENV: "1"},
               capture=True, check=False, timeout=timeout)


def _resources(stack: str, **kw: Any) -> list[dict] | None:
    """The resources in a stack's state; None when the stack is unknown."""
    proc = run(["stack", "export", "--stack", stack], capture=True, check=False, **kw)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout).get("deployment", {}).get("resources") or []


def stack_resource_ids(stack: str, **kw: Any) -> set[str] | None:
    """The ids of a stack's Python dynamic resources (the lab's objects among them), from its state,
    whatever their type's name; None when the stack is unknown."""
    resources = _resources(stack, **kw)
    if resources is None:
        return None
    return {r["id"] for r in resources if is_dynamic(r.get("type") or "") and r.get("id")}


def holds_resources(stack: str, **kw: Any) -> bool | None:
    """Whether the stack's state holds anything beyond the stack and its providers (a destroy
    limited by --target leaves some); None when the stack is unknown."""
    resources = _resources(stack, **kw)
    if resources is None:
        return None
    return any(r.get("type") != "pulumi:pulumi:Stack" and not (r.get("type") or "").startswith("pulumi:providers:")
               for r in resources)
