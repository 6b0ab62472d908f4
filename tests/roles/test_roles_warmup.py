"""railyard_warmup: the worker Ansible forks for each task and host finds Jinja's filter and test
plugins already loaded by the controller's process, where railyard's runs name the callback's
directory (ansible-runner's own ANSIBLE_CALLBACK_PLUGINS hides ansible.cfg's callback_plugins)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from railyard.tuning.runner import PLAYBOOKS, ansible_env
from tests.roles.conftest import runner_env

pytestmark = pytest.mark.roles

# Runs in the worker, after it templated the task (which has nothing to template): what it inherited.
PROBE = """\
import sys
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        return {"changed": False, "loaded": sorted(m for m in sys.modules if m.startswith("ansible.plugins."))}
"""

PLAY = """\
- name: Probe
  hosts: all
  gather_facts: false
  tasks:
    - name: What the worker found loaded
      railyard_probe:
"""


def _loaded(tmp_path: Path, env: dict[str, str]) -> list[str]:
    import ansible_runner

    (tmp_path / "action").mkdir(exist_ok=True)
    (tmp_path / "action" / "railyard_probe.py").write_text(PROBE)
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "probe.yml").write_text(PLAY)
    pdd = tmp_path / f"runner-{len(list(tmp_path.glob('runner-*')))}"
    pdd.mkdir()
    r = ansible_runner.run(
        private_data_dir=str(pdd), project_dir=str(project), playbook="probe.yml", quiet=True,
        inventory={"all": {"hosts": {"node": {"ansible_connection": "local",
                                              "ansible_python_interpreter": sys.executable}}}},
        envvars={**runner_env(env), "ANSIBLE_ACTION_PLUGINS": str(tmp_path / "action")})
    assert r.rc == 0, r.stdout.read()
    (ok,) = [e for e in r.events if e.get("event") == "runner_on_ok"]
    return ok["event_data"]["res"]["loaded"]


def _jinja_plugins(modules: list[str]) -> set[str]:
    return {kind for kind in ("filter", "test") if any(m.startswith(f"ansible.plugins.{kind}.core") for m in modules)}


def test_a_worker_inherits_the_filter_and_test_plugins_the_controller_loaded(tmp_path):
    assert _jinja_plugins(_loaded(tmp_path, ansible_env())) == {"filter", "test"}


def test_without_the_callback_directory_in_the_environment_each_worker_would_load_them_itself(tmp_path):
    # ansible.cfg names callback_plugins, but ansible-runner's ANSIBLE_CALLBACK_PLUGINS takes its place.
    assert _jinja_plugins(_loaded(tmp_path, {"ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg")})) == set()
