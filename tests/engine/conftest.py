"""Fixtures for tests that run the real Pulumi engine in a throwaway backend."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from railyard import paths
from railyard.engine.toolchain import engine_env

ROOT = paths.PROJECT_ROOT


class Engine:
    """`pulumi` in one temporary project and file backend, with the project's toolchain."""

    def __init__(self, project: Path, backend: Path):
        self.project = project
        self.env = engine_env(ROOT)
        self.env["PULUMI_BACKEND_URL"] = f"file://{backend}"
        self.env["PULUMI_CONFIG_PASSPHRASE"] = ""

    def __call__(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(paths.bin_dir(ROOT) / "pulumi"), *args, "--non-interactive"],
            cwd=self.project, env=self.env, text=True, capture_output=True, timeout=timeout, check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"pulumi {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def json(self, *args: str):
        return json.loads(self(*args, "--json").stdout)


@pytest.fixture
def engine_project(tmp_path: Path):
    """A copy of tests/engine/smoke as a Pulumi project using the project's .venv."""
    pulumi_bin = paths.bin_dir(ROOT) / "pulumi"
    if not pulumi_bin.exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain` (make test does it first)")
    project = tmp_path / "project"
    shutil.copytree(Path(__file__).parent / "smoke", project)
    (project / "Pulumi.yaml").write_text(
        "name: smoke\n"
        "runtime:\n  name: python\n  options:\n"
        f"    virtualenv: {ROOT / '.venv'}\n    toolchain: pip\n"
    )
    backend = tmp_path / "state"
    backend.mkdir()
    return Engine(project, backend)
