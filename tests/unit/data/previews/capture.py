"""Capture the preview JSON files beside this script from real engine runs (root; a few minutes).

    .venv/bin/python tests/unit/data/previews/capture.py [SCENARIO ...]

Each scenario brings up lab stacks of its own in a throwaway copy of the project and backend
(tests/lab/railyard_project.py), edits their stack files, and stores what `pulumi preview --diff
--json` printed, as the engine printed it except for `stackTrace`/`sourcePosition` (paths of the
machine that captured it). Everything is destroyed at the end. README.md says what each file is.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
sys.path.insert(0, str(ROOT))

from tests.lab.railyard_project import RailyardProject, free_networks, lab_config  # noqa: E402

DROP = {"stackTrace", "sourcePosition"}


def clean(value):
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items() if k not in DROP}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def preview(project: RailyardProject, stack: str, name: str, before: dict | None, *extra: str) -> None:
    """Store the preview as NAME.json, and NAME.case.json: the stack, the stack file before and
    after the edit (what `railyard review` compares) and the command."""
    proc = project.pulumi("preview", "--diff", "--json", *extra, stack=stack, check=False)
    data = clean(json.loads(proc.stdout))
    text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    assert "PRIVATE KEY" not in text, f"{name}: a private key in the preview output"
    (HERE / f"{name}.json").write_text(text)
    after = yaml.safe_load(project.stack_file(stack).read_text())
    case = {"stack": stack, "command": " ".join(["pulumi", "preview", "--diff", "--json", *extra]),
            "exit": proc.returncode, "before": before, "after": after}
    (HERE / f"{name}.case.json").write_text(json.dumps(case, indent=1) + "\n")
    print(f"captured {name}.json (pulumi exit {proc.returncode}, {len(data.get('steps') or [])} steps)")


def tuning(percent: int) -> dict:
    return {"hugepages": {"size": "1G", "percentOfMemory": percent, "perNuma": True}, "previewDrift": True}


def edit(project: RailyardProject, stack: str, config: dict) -> dict:
    """Write the stack's new config; return the stack file as it was."""
    before = yaml.safe_load(project.stack_file(stack).read_text())
    project.write_stack(stack, config)
    return before


def lab_edit(project: RailyardProject, nets: list[str]) -> None:
    """A long-lived 2-node lab like stacks/Pulumi.lab.yaml (previewDrift on), after its up:
    lab-hugepages: the hugepage percentage 50 → 60 (the check run reports host drift);
    lab-edit: the issue's example, 50 → 60 and the node count 2 → 3 (a new node's host key is
    unknown until up, so the tuning inputs are too and the check run cannot start);
    lab-shrink-protected: the count 2 → 1, which the protected (long-lived) cluster refuses."""
    stack = "rvlab"
    project.write_stack(stack, lab_config(2, nets[0], nets[1], **{"railyard:tuning": tuning(50)}))
    project.railyard("up", "--stack", stack)
    before = edit(project, stack, lab_config(2, nets[0], nets[1], **{"railyard:tuning": tuning(60)}))
    preview(project, stack, "lab-hugepages", before)
    edit(project, stack, lab_config(3, nets[0], nets[1], **{"railyard:tuning": tuning(60)}))
    preview(project, stack, "lab-edit", before)
    edit(project, stack, lab_config(1, nets[0], nets[1], **{"railyard:tuning": tuning(50)}))
    preview(project, stack, "lab-shrink-protected", before)


def ephemeral_rework(project: RailyardProject, nets: list[str]) -> None:
    """An ephemeral 8-node lab after its up:
    ephemeral-hugepages: hugepages 50 → 40 (one identical change on every node) and ttl 8h → 2d;
    ephemeral-replace-shrink: one node fewer and a forced replacement of another (`--replace`)."""
    stack = "rveph"
    project.write_stack(stack, lab_config(8, nets[2], nets[3], **{"railyard:tuning": tuning(50)},
                                          **{"railyard:ephemeral": {"ttl": "8h"}}))
    project.railyard("up", "--stack", stack)
    before = edit(project, stack, lab_config(8, nets[2], nets[3], **{"railyard:tuning": tuning(40)},
                                             **{"railyard:ephemeral": {"ttl": "2d"}}))
    preview(project, stack, "ephemeral-hugepages", before)
    edit(project, stack, lab_config(7, nets[2], nets[3], **{"railyard:tuning": tuning(50)},
                                    **{"railyard:ephemeral": {"ttl": "8h"}}))
    urn = f"urn:pulumi:{stack}::railyard::railyard:index:Cluster$railyard:index:NodePool$railyard:index:HgxNode" \
          f"$pulumi-python:dynamic:Resource::gpu-3-host"
    preview(project, stack, "ephemeral-replace-shrink", before, "--replace", urn)


def new_stack(project: RailyardProject, nets: list[str]) -> None:
    """A stack that does not exist yet: 64 nodes, previewed only (nothing is created)."""
    stack = "rvnew"
    # 64 nodes need /22 networks; nothing is created, so they may overlap the live stacks'.
    project.write_stack(stack, lab_config(64, "198.18.192.0/22", "198.18.196.0/22",
                                          **{"railyard:ephemeral": {"ttl": "30m"}}))
    project.pulumi("stack", "init", "--secrets-provider", "passphrase", stack=stack)
    preview(project, stack, "new-stack-64", None)


def driver_not_implemented(project: RailyardProject, nets: list[str]) -> None:
    """A region stack whose driver is validated but not implemented: the program stops at once."""
    stack = "us-east-bm"
    project.stack_file(stack).write_text((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    project.stacks.append(stack)
    project.pulumi("stack", "init", "--secrets-provider", "passphrase", stack=stack)
    before = yaml.safe_load(project.stack_file(stack).read_text())
    config = json.loads(json.dumps(before["config"]))
    config["railyard:nodePools"][0]["count"] = 480
    edit(project, stack, config)
    preview(project, stack, "driver-not-implemented", before)


SCENARIOS = {f.__name__.replace("_", "-"): f for f in (lab_edit, ephemeral_rework, new_stack, driver_not_implemented)}


def main(argv: list[str]) -> int:
    chosen = argv or list(SCENARIOS)
    unknown = [c for c in chosen if c not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    nets = free_networks(4)
    with tempfile.TemporaryDirectory(prefix="railyard-capture-") as tmp:
        project = RailyardProject(Path(tmp))
        try:
            for name in chosen:
                SCENARIOS[name](project, nets)
        finally:
            project.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
