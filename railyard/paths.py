"""Where Railyard keeps things: the project's ignored `.railyard/` tree and the per-user build cache.

Every other module asks here instead of joining paths itself, so the layout is written down once.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def project_root() -> Path:
    """The checkout holding Pulumi.yaml (RAILYARD_ROOT overrides it for tests on copies)."""
    return Path(os.environ.get("RAILYARD_ROOT", PROJECT_ROOT)).resolve()


# Pulumi.yaml's stackConfigDir, and the name Pulumi gives a stack's file in it.
STACKS_DIR = "stacks"


def stack_file_name(stack: str) -> str:
    """The stack file's path relative to the project root (as git and reviews name it)."""
    return f"{STACKS_DIR}/Pulumi.{stack}.yaml"


def stack_files(root: Path | None = None) -> dict[str, Path]:
    """Every stack with a stack file under `root`, by name."""
    return {p.name[len("Pulumi."):-len(".yaml")]: p
            for p in sorted(((root or project_root()) / STACKS_DIR).glob("Pulumi.*.yaml"))}


def stack_file(stack: str, root: Path | None = None) -> Path:
    return (root or project_root()) / stack_file_name(stack)


def local_dir(root: Path | None = None) -> Path:
    return (root or project_root()) / ".railyard"


def bin_dir(root: Path | None = None) -> Path:
    return local_dir(root) / "bin"


def state_dir(root: Path | None = None) -> Path:
    """The default file backend (Pulumi.yaml points at it)."""
    return local_dir(root) / "state"


def pulumi_home(root: Path | None = None) -> Path:
    """PULUMI_HOME: plugin cache and workspace settings, kept per project so nothing leaks to ~/.pulumi."""
    return local_dir(root) / "pulumi-home"


def lab_dir(stack: str, root: Path | None = None) -> Path:
    return local_dir(root) / "lab" / stack


def node_states(stack: str, root: Path | None = None) -> Path:
    """Each node's health state and its history (railyard.model.node_health), per stack."""
    return local_dir(root) / "health" / f"{stack}.json"


def runs_dir(stack: str, root: Path | None = None) -> Path:
    return local_dir(root) / "runs" / stack


def bench_dir(root: Path | None = None) -> Path:
    return local_dir(root) / "bench"


def cache_root() -> Path:
    """Heavy, reusable build outputs live outside the clone so a fresh clone reuses them."""
    env = os.environ.get("RAILYARD_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "railyard"
