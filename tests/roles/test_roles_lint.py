"""ansible-lint at the production profile, offline: nothing is fetched, the pinned bundle is used."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.roles


def test_playbooks_are_ansible_lint_clean_at_the_production_profile():
    lint = Path(sys.executable).parent / "ansible-lint"
    if not lint.exists() and not shutil.which("ansible-lint"):
        pytest.fail("ansible-lint is not installed: pip install -e '.[test]'")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "playbooks/ansible.cfg"), NO_COLOR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    run = subprocess.run([str(lint) if lint.exists() else "ansible-lint", "--offline", "--profile", "production",
                          "playbooks"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "production" in run.stderr + run.stdout
