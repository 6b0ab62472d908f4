"""`railyard review` end to end, as `make review` and the review workflow run it: git finds the
touched stacks in a checkout of its own, the real engine previews them, one comment comes out.

The stacks are never brought up (a preview of a stack with no resources is all creates), so this
takes seconds; what a preview of a live stack renders to is pinned by the golden tests.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from railyard import paths
from tests.lab.railyard_project import RailyardProject, lab_config

ROOT = paths.PROJECT_ROOT


def git(project: RailyardProject, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=project.dir,
                   check=True, capture_output=True)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    project = RailyardProject(tmp_path_factory.mktemp("review"))
    tuning = {"hugepages": {"size": "1G", "percentOfMemory": 50, "perNuma": True}}
    project.write_stack("rvcmd", lab_config(2, "198.18.200.0/24", "198.18.201.0/24", **{"railyard:tuning": tuning}))
    project.write_stack("rvother", lab_config(2, "198.18.202.0/24", "198.18.203.0/24"))
    region = yaml.safe_load((ROOT / "stacks" / "Pulumi.us-east-bm.yaml").read_text())
    project.write_stack("us-east-bm", region["config"])
    for stack in ("rvcmd", "rvother"):
        project.pulumi("stack", "init", "--secrets-provider", "passphrase", stack=stack)
    (project.dir / ".gitignore").write_text(".railyard/\n")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "base")
    # The example: the hugepage percentage and the node count, left uncommitted.
    tuning["hugepages"]["percentOfMemory"] = 60
    project.write_stack("rvcmd", lab_config(3, "198.18.200.0/24", "198.18.201.0/24", **{"railyard:tuning": tuning}))
    region["config"]["railyard:nodePools"][0]["count"] = 480
    project.write_stack("us-east-bm", region["config"])
    yield project
    project.cleanup()


def test_review_of_an_edited_lab_stack_and_a_region_stack(checkout):
    proc = checkout.railyard("review", "--base", "main")
    text = proc.stdout
    assert text.startswith("<!-- railyard-review -->\n"), text
    assert "- **`rvcmd`**: " in text and "(3 nodes added) · **needs a reboot**" in text, text
    assert "- `railyard:tuning.hugepages.percentOfMemory`: `50` → `60`: **needs a reboot**" in text, text
    assert "- `railyard:nodePools[0].count`: `2` → `3`" in text, text
    # Its provider plugin cannot be installed here: reported with the command, not raised.
    assert "- **`us-east-bm`**: not previewed: plugin missing: railyard:driver coreweave needs the Pulumi " \
           "resource plugin coreweave v1.0.3" in text, text
    assert "pulumi plugin install resource coreweave v1.0.3" in text and "was not run here" in text, text
    assert "rvother" not in text, "an untouched stack must not be reviewed"
    assert "PRIVATE KEY" not in text


def test_review_writes_the_comment_file_and_can_leave_lab_stacks_out(checkout, tmp_path):
    out = tmp_path / "review.md"
    proc = checkout.railyard("review", "--base", "main", "--skip-lab", "--output", str(out))
    assert proc.stdout == ""
    text = out.read_text()
    assert "rvcmd" not in text.split("Left out", 1)[0], text
    assert "Left out (lab stacks live on a workstation, not in this backend): `rvcmd`." in text, text
    assert "us-east-bm" in text


def test_review_of_named_stacks_ignores_git(checkout):
    text = checkout.railyard("review", "--stack", "rvother").stdout
    assert "- **`rvother`**: " in text and "(2 nodes added)" in text, text
    assert "_Why it is reviewed: named on the command line._" in text


def test_a_stack_the_backend_does_not_hold_is_reported_not_previewed(checkout):
    # Last in this module: its stack file stays in the checkout, uncommitted.
    checkout.write_stack("rvnever", lab_config(2, "198.18.204.0/24", "198.18.205.0/24"))
    proc = checkout.railyard("review", "--stack", "rvnever", "--stack", "rvother")
    text = proc.stdout
    assert "- **`rvnever`**: not previewed: the stack is not in this backend yet: its first " \
           "`make up STACK=rvnever` creates everything it declares" in text, text
    # The stack beside it is still previewed, from the same command.
    assert "- **`rvother`**: " in text and "(2 nodes added)" in text, text
