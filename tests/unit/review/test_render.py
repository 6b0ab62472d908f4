"""The review comment for previews captured from real engine runs, pinned as golden Markdown.

The preview JSON files and how each was captured: tests/unit/data/previews/README.md. After a
deliberate change to the rendering, rewrite the goldens with RAILYARD_UPDATE_GOLDEN=1 and read
the diff before committing it.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

import pytest

from railyard.review import preview, render, rules

DATA = Path(__file__).resolve().parents[1] / "data" / "previews"
GOLDEN = DATA / "golden"

# golden file -> the captured previews it renders, in comment order
CASES = {
    # The issue's example: the lab's hugepage percentage and node count edited, beside a region
    # stack whose driver is not implemented yet, in one comment.
    "review-lab-edit": ["lab-edit", "driver-not-implemented"],
    "lab-hugepages": ["lab-hugepages"],
    "lab-shrink-protected": ["lab-shrink-protected"],
    "ephemeral-hugepages": ["ephemeral-hugepages"],
    "ephemeral-replace-shrink": ["ephemeral-replace-shrink"],
    "new-stack-64": ["new-stack-64"],
}


def stack_review(name: str) -> render.StackReview:
    case = json.loads((DATA / f"{name}.case.json").read_text())
    data = json.loads((DATA / f"{name}.json").read_text())
    return render.StackReview(case["stack"], f"stacks/Pulumi.{case['stack']}.yaml changed",
                              preview.load(data, case["stack"]),
                              config=rules.config_changes(case["before"], case["after"]))


def rendered(golden: str) -> str:
    return render.render([stack_review(n) for n in CASES[golden]], base="main")


@pytest.mark.parametrize("golden", sorted(CASES))
def test_comment_equals_its_golden(golden):
    got = rendered(golden)
    path = GOLDEN / f"{golden}.md"
    if os.environ.get("RAILYARD_UPDATE_GOLDEN"):
        path.write_text(got)
    want = path.read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(path), "rendered"))
    assert got == want, f"{path.name} differs from the rendering (RAILYARD_UPDATE_GOLDEN=1 rewrites it):\n{diff}"


def test_every_captured_preview_has_a_golden():
    captured = {p.name.removesuffix(".case.json") for p in DATA.glob("*.case.json")}
    used = {n for names in CASES.values() for n in names}
    assert captured == used, f"captured but not pinned: {sorted(captured - used)}; pinned but missing: " \
                             f"{sorted(used - captured)}"


@pytest.mark.parametrize("golden", sorted(CASES))
def test_no_secret_reaches_a_comment(golden):
    text = rendered(golden)
    assert "PRIVATE KEY" not in text
    for name in CASES[golden]:
        raw = (DATA / f"{name}.json").read_text()
        assert "PRIVATE KEY" not in raw, f"{name}.json holds a private key"


def test_the_issue_example_reads_in_ten_seconds():
    """The summary line alone says what happens to the lab and why the region stack has no preview."""
    head = rendered("review-lab-edit").split("\n### ", 1)[0]
    assert "(1 node added) · **needs a reboot**" in head, head
    assert "not previewed: railyard:driver `coreweave` is not implemented yet" in head, head
