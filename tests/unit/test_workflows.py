"""The GitHub Actions workflows for the project's users: they parse, call only make targets that
exist, deploy every region stack (and no lab or on-premises stack) one at a time per stack, and post
the comment `railyard review` marks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from railyard.review.render import MARKER

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
SECRETS = ("PULUMI_BACKEND_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "PULUMI_CONFIG_PASSPHRASE")


def load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def triggers(doc: dict) -> dict:
    # YAML 1.1 reads a bare `on` key as the boolean true.
    return doc.get("on", doc.get(True)) or {}


def make_targets() -> set[str]:
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w-]*)\s*:(?!=)", (ROOT / "Makefile").read_text(), re.M)}


def run_steps(doc: dict) -> list[tuple[str, dict, str]]:
    return [(job_id, job, step["run"]) for job_id, job in doc["jobs"].items() for step in job.get("steps", [])
            if "run" in step]


# Stacks the deploy workflow never runs: the lab's live on a workstation; a hosts stack's servers
# are on premises, out of a hosted runner's reach (and the shipped one is an example).
NOT_DEPLOYED = ("lab", "hosts")


def region_stacks() -> list[str]:
    out = []
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        config = yaml.safe_load(path.read_text())["config"]
        if config.get("railyard:driver") not in NOT_DEPLOYED:
            out.append(path.name[len("Pulumi."):-len(".yaml")])
    return out


@pytest.mark.parametrize("name", ["review.yml", "deploy.yml", "health.yml"])
def test_workflow_parses_and_runs_only_existing_make_targets(name):
    doc = load(name)
    targets = make_targets()
    called = []
    for job_id, _job, script in run_steps(doc):
        for m in re.finditer(r"\bmake\s+(?:-\S+\s+)*([A-Za-z][\w-]*)", script):
            called.append(m.group(1))
            assert m.group(1) in targets, f"{name} job {job_id} runs `make {m.group(1)}`; the Makefile has " \
                                          f"{sorted(targets)}"
    assert called, f"{name} runs no make target: the workflows go through the make interface"


@pytest.mark.parametrize("name", ["review.yml", "deploy.yml", "health.yml"])
def test_jobs_that_run_make_get_the_team_backend_from_secrets(name):
    for job_id, job, script in run_steps(load(name)):
        if "make " not in script:
            continue
        env = job.get("env") or {}
        for key in SECRETS:
            assert env.get(key) == f"${{{{ secrets.{key} }}}}", f"{name} job {job_id}: {key} must come from secrets"


def test_review_runs_on_pull_requests_and_updates_one_marked_comment():
    doc = load("review.yml")
    assert "pull_request" in triggers(doc)
    assert "pull_request_target" not in triggers(doc), "untrusted code must never run with the backend's secrets"
    scripts = "\n".join(s for _, _, s in run_steps(doc))
    assert MARKER in scripts, "the comment step must find the comment by railyard review's marker"
    assert "--method PATCH" in scripts and "--method POST" in scripts
    assert "make review" in scripts


def test_deploy_runs_on_main_one_job_per_region_stack():
    doc = load("deploy.yml")
    assert triggers(doc)["push"]["branches"] == ["main"]
    job = doc["jobs"]["up"]
    assert job["strategy"]["matrix"]["stack"] == region_stacks(), \
        f"deploy.yml's matrix must list every stacks/Pulumi.*.yaml whose driver is not one of {NOT_DEPLOYED}"
    assert "make up STACK=${{ matrix.stack }}" in "\n".join(s for _, _, s in run_steps(doc))


def test_deploy_never_runs_two_ups_on_one_stack():
    job = load("deploy.yml")["jobs"]["up"]
    assert "${{ matrix.stack }}" in job["concurrency"]["group"]
    assert job["concurrency"]["cancel-in-progress"] is False
    assert job["strategy"]["max-parallel"] == 1


def hosts_stacks() -> list[str]:
    return [path.name[len("Pulumi."):-len(".yaml")] for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
            if yaml.safe_load(path.read_text())["config"].get("railyard:driver") == "hosts"]


def test_health_repairs_every_hosts_stack_on_a_schedule_and_keeps_node_states_between_runs():
    doc = load("health.yml")
    assert "schedule" in triggers(doc) and "workflow_dispatch" in triggers(doc)
    job = doc["jobs"]["repair"]
    # The stacks whose servers Railyard reads over SSH; verify refuses the region drivers'.
    assert job["strategy"]["matrix"]["stack"] == hosts_stacks() and hosts_stacks()
    assert "self-hosted" in job["runs-on"], "on-premises servers are out of a hosted runner's reach"
    assert ".venv/bin/railyard verify --stack ${{ matrix.stack }} --repair" in "\n".join(s for _, _, s in run_steps(doc))
    assert job["concurrency"]["cancel-in-progress"] is False and "${{ matrix.stack }}" in job["concurrency"]["group"]
    caches = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/cache/")]
    assert [s["with"]["path"] for s in caches] == [".railyard/health", ".railyard/health"]
    assert caches[0]["with"]["restore-keys"] == "railyard-health-${{ matrix.stack }}-"
    assert caches[1]["if"] == "always()"  # a failed run's tries count at the next
