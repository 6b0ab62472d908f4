"""`railyard review [--base REF] [--stack S]... [--output FILE] [--skip-lab]`: one Markdown comment
saying what a change does to each stack it touches.

Which stacks: those named with --stack, else the ones the change touches since the merge base of
REF and HEAD, uncommitted and untracked files included (rules.touched_stacks: a stack's own file,
or code the program runs for stacks whose driver is implemented). For each, `pulumi preview --diff
--json` runs against the configured backend; a preview that fails (a driver not implemented yet,
a protected resource in the way) is reported in the comment, not raised. The exit status is
non-zero only when the review itself cannot run (no git, no engine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from railyard import drivers, paths, repair
from railyard.engine import pulumi
from railyard.engine.toolchain import ToolchainError
from railyard.model import yamlio
from railyard.review import preview as preview_mod
from railyard.review import render, rules


def register(sub) -> None:
    p = sub.add_parser("review", help="preview every stack a change touches and write one Markdown comment",
                       description=__doc__.split("\n\n", 1)[1])
    p.add_argument("--base", default=None, metavar="REF",
                   help="compare with the merge base of REF and HEAD (default: origin/$GITHUB_BASE_REF in a pull "
                        "request, else origin/main, else main)")
    p.add_argument("--stack", "-s", action="append", default=[], metavar="S",
                   help="review these stacks (repeatable) instead of the ones the change touches")
    p.add_argument("--output", "-o", metavar="FILE", help="write the comment to FILE instead of stdout")
    p.add_argument("--skip-lab", action="store_true",
                   help="leave out stacks on the lab driver (they live on a workstation, not in a team backend)")
    p.set_defaults(func=handle)


class ReviewError(RuntimeError):
    pass


def git(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=paths.project_root(), text=True, capture_output=True, check=False)
    if check and proc.returncode != 0:
        raise ReviewError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout if proc.returncode == 0 else ""


def default_base() -> str:
    candidates = []
    if os.environ.get("GITHUB_BASE_REF"):
        candidates.append(f"origin/{os.environ['GITHUB_BASE_REF']}")
    candidates += ["origin/main", "main"]
    for ref in candidates:
        if git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).strip():
            return ref
    raise ReviewError(f"none of {', '.join(candidates)} exists here; name the base with --base REF")


def changed_files(merge_base: str) -> list[str]:
    """Files that differ between the merge base and the working tree, untracked ones included."""
    tracked = git("diff", "--name-only", "--no-renames", merge_base).splitlines()
    untracked = git("ls-files", "--others", "--exclude-standard").splitlines()
    return sorted({f for f in tracked + untracked if f})


def driver_of(doc: dict | None) -> str | None:
    value = ((doc or {}).get("config") or {}).get("railyard:driver")
    return value if isinstance(value, str) else None


def runnable(driver: str | None) -> bool:
    """A driver runs when the registry names its implementation (railyard.drivers, Pulumi-free)."""
    entry = drivers.DRIVERS.get(driver) if driver else None
    return entry is not None and entry.implementation is not None


def checked_by_acceptance(doc: dict | None) -> bool:
    """Whether `up` runs acceptance on the stack: its driver's machines are Railyard's to tune (the
    stack may still turn it off, railyard:acceptance.enabled)."""
    entry = drivers.DRIVERS.get(driver_of(doc) or "")
    return entry is None or entry.capabilities.railyard_tunes


def read_yaml(text: str | None) -> dict | None:
    if text is None:
        return None
    try:
        doc = yamlio.load(text)  # strict, as the stack loader: a key given twice is refused
    except yaml.YAMLError:
        return None
    return doc if isinstance(doc, dict) else None


def preview_stack(stack: str, doc: dict | None) -> preview_mod.Preview | None:
    """The stack's preview, or None when the backend has no such stack. Asking the preview itself
    (the engine's StackNotFoundError) instead of listing the backend first saves a `pulumi stack
    ls`, which reads every stack's checkpoint: most of what a review of a large stack cost beyond
    its preview (docs/benchmarks.md)."""
    why = drivers.ensure_engine(driver_of(doc) or "", "railyard:kubernetes" in ((doc or {}).get("config") or {}))
    if why is not None:
        return preview_mod.failed_run(stack, why)
    # Else the program would show the nodes another checkout recorded back as they were here.
    repair.take_recorded_from_stack(stack, driver_of(doc) or "")
    proc = pulumi.run(["preview", "--diff", "--json", "--stack", stack], capture=True, check=False)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        if f"no stack named '{stack}' found" in (proc.stderr or ""):
            return None
        return preview_mod.failed_run(stack, (proc.stderr or "") + (proc.stdout or ""))
    result = preview_mod.load(data, stack)
    if proc.returncode != 0 and not result.failed:
        # The engine stopped before the program (a missing virtualenv, a wrong passphrase).
        result.failure = pulumi.failure_line(proc, "preview")
    return result


def review(stacks: list[str] | None, base: str | None,
           skip_lab: bool) -> tuple[list[render.StackReview], str | None, list[str]]:
    root = paths.project_root()
    files = paths.stack_files(root)
    docs = {name: read_yaml(path.read_text()) for name, path in files.items()}
    if not stacks or base:
        base = base or default_base()
        merge_base = git("merge-base", base, "HEAD").strip()
    else:
        merge_base = None  # named stacks and no base: no stack-file comparison
    if stacks:
        touched = {s: "named on the command line" for s in stacks}
    else:
        assert merge_base is not None, "no stack named: the merge base was found above"
        stack_drivers = {name: driver_of(doc) or "" for name, doc in docs.items()}
        touched = rules.touched_stacks(changed_files(merge_base), stack_drivers,
                                       {d for d in set(stack_drivers.values()) if runnable(d)})
    reviews, left_out = [], []
    for stack, why in touched.items():
        doc = docs.get(stack)
        if skip_lab and driver_of(doc) == "lab":
            left_out.append(stack)
            continue
        before = read_yaml(git("show", f"{merge_base}:{paths.stack_file_name(stack)}", check=False) or None) \
            if merge_base else None
        r = render.StackReview(stack, why, config=rules.config_changes(before, doc) if merge_base else [])
        if not checked_by_acceptance(doc):
            r.notes.append("acceptance: not run by this driver")
            r.notes.append(f"host tuning: {drivers.platform_tuning(driver_of(doc) or '')}")
        if doc is None:
            r.skipped = f"{paths.stack_file_name(stack)} is missing or not YAML"
        elif (absent := drivers.missing_plugins(driver_of(doc) or "")) is not None:
            # The engine cannot preview it here; the rest of the comment still gets written.
            r.skipped = f"plugin missing: {absent}"
        else:
            r.preview = preview_stack(stack, doc)
            if r.preview is None:
                r.skipped = (f"the stack is not in this backend yet: its first `make up STACK={stack}` creates "
                             "everything it declares")
                if not runnable(driver_of(doc)):
                    r.skipped += f" (and railyard:driver {driver_of(doc)!r} is not implemented yet)"
        reviews.append(r)
    return reviews, base, left_out


def handle(args) -> int:
    try:
        reviews, base, left_out = review(args.stack or None, args.base, args.skip_lab)
    except (ReviewError, ToolchainError, pulumi.PulumiError) as exc:
        print(f"railyard review: {exc}", file=sys.stderr)
        if isinstance(exc, pulumi.PulumiError):
            print(exc.output, file=sys.stderr)
        return 1
    text = render.render(reviews, base=base, left_out=left_out)
    if args.output:
        Path(args.output).write_text(text)
        print(f"railyard review: wrote {args.output} ({len(reviews)} stack(s))", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
