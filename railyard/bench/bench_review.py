"""Review section: `railyard review` of a pull request's edit to a 448-node stack, beside a plain
`pulumi preview` of the same edited stack, so the ratio is what the review adds to the preview it
runs (its start, git, the preview's JSON and the comment; it lists no stacks: a stack the backend
lacks is the preview's own error).

The stack is the engine section's lab-driver stack (bench_engine.preview_config) in a copy of the
project with a throwaway file backend (railyard/bench/stack_project.py), given state the way the
engine section's preview with state is (bench_engine.settle: a checkpoint of every resource,
imported, until a preview plans no change). The copy is made a git repository, the stack file
committed, then edited as a pull request would: the pool grows from 448 to 456 nodes, committed
again. `railyard review --base HEAD~1` runs in the copy (RAILYARD_ROOT, the same backend), and
finds the stack from the changed stack file. Nothing is created; the section fails if the stack's
lab directory appears.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from railyard import paths
from railyard.bench import bench_engine, proctree
from railyard.bench.harness import Context, Sample, Section
from railyard.bench.stack_project import StackProject

# The 448-node stack grown by one DGX SuperPOD scalable unit's worth of nodes (8): an edit that
# adds nodes and changes what the cluster's shared resources (host tuning) cover.
NODES = (448, 456)
QUICK_NODES = (32, 40)
TARGET_RATIO = {448: 1.2}
RAILYARD = paths.PROJECT_ROOT / ".venv" / "bin" / "railyard"


def grown(config: dict, nodes: int) -> dict:
    """The stack's config with its one pool grown to `nodes` (bench_engine.pools(n) above 448 would
    be eight new pools, a different stack rather than an edit)."""
    out = copy.deepcopy(config)
    (pool,) = out["railyard:nodePools"]
    pool["count"] = nodes
    return out


def git_env(env: dict[str, str]) -> dict[str, str]:
    """`env` without the caller's git settings (GIT_DIR and the like would point git elsewhere), with
    an author for the copy's commits."""
    clean = {k: v for k, v in env.items() if not k.startswith("GIT_")}
    who = {"NAME": "railyard bench", "EMAIL": "bench@railyard.invalid"}
    return {**clean, **{f"GIT_{role}_{k}": v for role in ("AUTHOR", "COMMITTER") for k, v in who.items()}}


def git(directory: Path, *args: str) -> None:
    proc = subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=directory, env=git_env(dict(os.environ)),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")


def stack_line(comment: str, stack: str) -> str:
    """The comment's summary line for `stack`; raises unless the review previewed it."""
    head = f"- **`{stack}`**"
    line = next((ln for ln in comment.splitlines() if ln.startswith(head)), None)
    if line is None:
        raise RuntimeError(f"the review does not mention {stack}:\n{comment[-3000:]}")
    if "not previewed" in line or "preview failed" in line or line.endswith(": no changes"):
        raise RuntimeError(f"the review did not preview the edit of {stack}: {line}")
    return line


def run(ctx: Context):
    nodes, edited = QUICK_NODES if ctx.quick else NODES
    stack = f"bench-review{nodes}"
    base = Path(tempfile.mkdtemp(prefix=f"review-{nodes}-", dir=ctx.workdir))
    try:
        project = StackProject(base / "railyard", stack, bench_engine.preview_config(nodes))
        # The program of `railyard review` runs with RAILYARD_ROOT at the copy, the others without.
        with bench_engine.touches_no_lab(stack, "railyard review or the preview", paths.project_root(), project.dir):
            project.pulumi("stack", "init", "--secrets-provider", "passphrase")
            _, fresh = bench_engine.preview(project, f"review-fresh-{nodes}")
            bench_engine.settle(project, fresh, base)
            (project.dir / ".gitignore").write_text(f"/{paths.local_dir(project.dir).name}/\n")
            git(project.dir, "init", "--quiet")
            git(project.dir, "add", "--all")
            git(project.dir, "commit", "--quiet", "--message", f"{stack}: {nodes} nodes")
            project.write(grown(bench_engine.preview_config(nodes), edited))
            git(project.dir, "commit", "--quiet", "--all", "--message", f"{stack}: grow the pool to {edited} nodes")

            plain = proctree.run(project.argv("preview"), cwd=project.dir, env=project.env_for("preview"),
                                 timeout=bench_engine.PREVIEW_TIMEOUT_S)
            if plain.returncode != 0:
                raise RuntimeError(f"pulumi preview of the edit failed (rc {plain.returncode}):\n"
                                   f"{plain.stdout[-3000:]}\n{plain.stderr[-3000:]}")
            out = base / "review.md"
            env = git_env({**project.env, "RAILYARD_ROOT": str(project.dir)})
            review = proctree.run([str(RAILYARD), "review", "--base", "HEAD~1", "--output", str(out)],
                                  cwd=project.dir, env=env, timeout=bench_engine.PREVIEW_TIMEOUT_S)
            if review.returncode != 0 or not out.exists():
                raise RuntimeError(f"railyard review failed (rc {review.returncode}):\n"
                                   f"{review.stdout[-3000:]}\n{review.stderr[-3000:]}")
            line = stack_line(out.read_text(), stack)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    label = f"`railyard review` of an edit to a {nodes:,}-node stack"
    yield Sample(f"{label}: wall", review.wall_s, "s", note=f"{line} ({bench_engine.cpu_note(review)})")
    yield Sample(f"plain `pulumi preview` of the edited {nodes:,}-node stack: wall", plain.wall_s, "s",
                 note=bench_engine.cpu_note(plain))
    yield Sample(f"{label} / plain `pulumi preview` of it", review.wall_s / plain.wall_s, "x",
                 target=TARGET_RATIO.get(nodes),
                 note=f"the pool grown {nodes} -> {edited} nodes, previewed against the same checkpoint; "
                      "the plain preview (text output) runs first")
    yield Sample(f"{label}: peak RSS (process tree)", review.peak_rss_mib, "MiB")


SECTIONS = (Section("review", "`railyard review` of a pull request growing a 448-node stack to 456 nodes, "
                              "beside a plain `pulumi preview` of the same edit", run),)
