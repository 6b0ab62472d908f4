"""Engine section: `pulumi preview` of Railyard's program at 448 and 2,500 nodes beside a baseline
program of as many no-op Python dynamic resources, so the ratio is Railyard's own overhead.

Both run the way `railyard preview` runs the engine (the toolchain's binary, the offline
environment, toolchain.command_settings), on a fresh stack in a throwaway backend: nothing is
created. Wall time and the peak of the whole process tree's memory (CLI, language host, program,
dynamic provider) come from railyard.bench.proctree.

Beside them, a preview of a stack with state at 224, 448 and 2,500 nodes: a checkpoint in which
every resource exists (railyard.bench.stack_state, imported with `pulumi stack import`), so the
nodes' outputs are known and the program does at preview what it does only once nodes exist (host
tuning's role variables for every node). Its time must grow no faster than the nodes from 224 to
448. At each size the baseline is given a checkpoint the same way (issue 43): as many no-op
resources, each holding the inputs of one of the stack's (stack_state.payloads), imported and
settled; Railyard's preview with state beside it is the engine's floor with state.

Across the two sizes: the peak RSS of the largest preview beside its baseline's, and what each
node added from the smaller size to the larger costs beside the smaller size's average per node
(`marginal_cost`), from the same run's fresh previews.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from railyard import paths
from railyard.bench import proctree, stack_state
from railyard.bench.harness import Context, Sample, Section
from railyard.bench.stack_project import PulumiFailed, StackProject
from railyard.engine.pulumi import OUTPUTS_ONLY_ENV, record_args
from railyard.engine.toolchain import command_settings, engine_env

# Nodes: the MLPerf GPT-3 175B record's 448 DGX H100 (3,584 GPUs), and a 20,000-GPU site.
SIZES = (448, 2_500)
QUICK_SIZES = (8, 32)
TARGET_WALL_S = {448: 60.0, 2_500: 300.0}
TARGET_RATIO = {448: 1.15, 2_500: 1.10}
# Peak RSS of the process tree beside the baseline's, for the largest size only.
TARGET_RSS_RATIO = {2_500: 1.15}
# A node added costs no more than the average node already there: preview time at most
# proportional to the nodes, so whatever is fixed (engine start, the cluster's own resources)
# does not hide a per-node cost that grows with the stack.
TARGET_MARGINAL = {(448, 2_500): 1.0}
# Resources per node (an HgxNode component and what is under it), an upper bound as every target.
TARGET_RESOURCES_PER_NODE = 2
PREVIEW_TIMEOUT_S = 3_600
# The preview with state: two sizes a factor of two apart, so linear growth is a ratio of 2.0,
# and the 2,500-node site beside its own baseline with state (issue 43).
STATE_SIZES = (224, 448, 2_500)
# Railyard's preview with state beside the baseline with state (issue 43): at the engine's floor.
TARGET_STATE_RATIO = {448: 1.2, 2_500: 1.2}
QUICK_STATE_SIZES = QUICK_SIZES
# Growth up to a tenth above linear is within what the machine's noise allows: "not faster
# than linear". A quadratic part shows as more (an n^2 term of a tenth of the time at 224 nodes
# alone makes 2.2).
GROWTH_SLACK = 1.1
# Previews of the checkpoint until it plans no change: each round fills in inputs made of the
# outputs the round before put in state (access key -> nodes -> host tuning: three rounds).
SETTLE_ROUNDS = 5

BASELINE_PROGRAM = """
import json
from pathlib import Path

import pulumi
from railyard.bench.noop import Noop

payloads = Path("payloads.json")
held = json.loads(payloads.read_text()) if payloads.exists() else []
for i in range(int(pulumi.Config().require("count"))):
    Noop(f"noop-{i}", held[i] if i < len(held) else None)
"""


def pools(nodes: int) -> list[dict]:
    """One pool up to 448 nodes; above, eight equal scalable units (the most pools a stack has),
    because one pool's address blocks at 2,500 nodes would need a /14 of rails and the lab's
    networks all live in 198.18.0.0/15."""
    if nodes <= 448:
        return [{"name": "gpu", "sku": "dgx-h100", "count": nodes}]
    return [{"name": f"su{i}", "sku": "dgx-h100", "count": nodes // 8 + (1 if i < nodes % 8 else 0)} for i in range(8)]


def preview_config(nodes: int) -> dict:
    """A bare-metal DGX H100 stack on the lab driver with every storage tier, as `lab` has.
    Nothing is created, so its networks may overlap a running lab's."""
    return {
        "railyard:region": "lab",
        "railyard:layout": "bare-metal",
        "railyard:driver": "lab",
        "railyard:nodePools": pools(nodes),
        "railyard:fabric": {
            "compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": "198.19.0.0/16"},
            "storage": {"cidr": "198.18.80.0/20"},
            "management": {"cidr": "198.18.64.0/20"},
        },
        "railyard:ephemeral": {"ttl": "2h"},
        "railyard:storage": {
            "object": {"bucket": "datasets"},
            "parallelFs": {"kind": "lustre", "mount": "/mnt/pfs", "capacityTiB": 10},
            "localCache": {"mount": "/mnt/cache", "raid": "raid0", "fs": "xfs"},
        },
    }


class BaselineProject:
    """A throwaway project and backend whose program declares `count` no-op dynamic resources."""

    def __init__(self, base: Path, count: int, payloads: list[dict] | None = None):
        """payloads: the properties each resource holds (as many as there are, in order), for the
        baseline with state; none: each holds its name only."""
        self.dir = base / "project"
        self.dir.mkdir(parents=True)
        if payloads:
            (self.dir / "payloads.json").write_text(json.dumps(payloads))
        (self.dir / "Pulumi.yaml").write_text(
            "name: baseline\nruntime:\n  name: python\n  options:\n"
            f"    virtualenv: {paths.PROJECT_ROOT / '.venv'}\n    toolchain: pip\n")
        (self.dir / "__main__.py").write_text(BASELINE_PROGRAM)
        (base / "state").mkdir()
        self.env = {**engine_env(paths.PROJECT_ROOT), "PULUMI_BACKEND_URL": f"file://{base / 'state'}",
                    "PULUMI_CONFIG_PASSPHRASE": ""}
        self.stack = "bench"
        self.pulumi("stack", "init", "--secrets-provider", "passphrase")
        self.pulumi("config", "set", "count", str(count))

    def argv(self, *args: str) -> list[str]:
        return [str(paths.bin_dir(paths.PROJECT_ROOT) / "pulumi"), *args, "--stack", self.stack, "--non-interactive"]

    def env_for(self, *args: str) -> dict[str, str]:
        return {**self.env, **command_settings(args)}

    def pulumi(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self.argv(*args), cwd=self.dir, env=self.env_for(*args), capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise PulumiFailed(f"pulumi {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc


def profiler(name: str):
    """With RAILYARD_BENCH_PROFILE=DIR, py-spy records the program and the dynamic provider of each
    preview into DIR/<name>-<kind>-<pid>.txt (collapsed stacks, idle time included: a program
    waiting on the engine shows as waiting)."""
    out = os.environ.get("RAILYARD_BENCH_PROFILE")
    spy = Path(sys.executable).parent / "py-spy"
    if not out:
        return None, []
    if not spy.exists():
        raise RuntimeError("RAILYARD_BENCH_PROFILE needs py-spy: pip install -e '.[test]'")
    Path(out).mkdir(parents=True, exist_ok=True)
    spies: list[subprocess.Popen] = []

    def on_new(pid: int, kind: str) -> None:
        if kind in ("program", "dynamic provider"):
            spies.append(subprocess.Popen(
                [str(spy), "record", "--pid", str(pid), "--idle", "--format", "raw", "--rate", "50",
                 "--output", str(Path(out) / f"{name}-{kind.replace(' ', '-')}-{pid}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    return on_new, spies


def preview(project, name: str) -> tuple[proctree.TreeRun, dict]:
    """`pulumi preview --json` on the project's stack; the run and its JSON result."""
    on_new, spies = profiler(name)
    run = proctree.run(project.argv("preview", "--json"), cwd=project.dir, env=project.env_for("preview"),
                       timeout=PREVIEW_TIMEOUT_S, on_new=on_new)
    for spy in spies:  # each ends with the process it records, writing its file
        spy.wait(timeout=120)
    try:
        result = json.loads(run.stdout)
    except ValueError:
        result = {}
    if run.returncode != 0 or not result.get("steps"):
        raise RuntimeError(f"preview failed (rc {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return run, result


def resource_count(result: dict) -> int:
    """Resources a preview would create, the stack itself left out (the baseline has one too)."""
    return sum(1 for s in result["steps"] if (s.get("newState") or {}).get("type") != "pulumi:pulumi:Stack")


def node_resource_count(result: dict) -> int:
    """Resources that are a node or under one: an HgxNode component and its children (a URN's
    type part names the parents' types)."""
    return sum(1 for s in result["steps"] if "railyard:index:HgxNode" in s.get("urn", "").split("::")[2])


def settle(project: StackProject | BaselineProject, fresh: dict, workdir: Path) -> tuple[int, dict[str, int]]:
    """Give the project's stack a checkpoint holding every resource the fresh preview `fresh`
    plans, imported with `pulumi stack import`, and preview it (engine's gRPC log on) until it
    plans no change (railyard.bench.stack_state). Returns the previews it took and the last one's
    step counts."""
    base = json.loads(project.pulumi("stack", "export").stdout)
    registered: dict[str, dict] = {}
    result: dict = {}
    for round_ in range(1, SETTLE_ROUNDS + 1):
        path = workdir / f"checkpoint-{round_}.json"
        path.write_text(json.dumps(stack_state.checkpoint(fresh, base, registered)))
        project.pulumi("stack", "import", "--file", str(path))
        log = workdir / f"grpc-{round_}.log"
        env = {**project.env_for("preview"), "PULUMI_DEBUG_GRPC": str(log)}
        proc = subprocess.run(project.argv("preview", "--json"), cwd=project.dir, env=env, capture_output=True,
                              text=True, timeout=PREVIEW_TIMEOUT_S, check=False)
        try:
            result = json.loads(proc.stdout)
        except ValueError:
            result = {}
        if proc.returncode != 0 or not result.get("changeSummary"):
            raise RuntimeError(f"preview of the checkpoint failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                               f"{proc.stderr[-3000:]}")
        registered = stack_state.registered_inputs(log)
        log.unlink()  # it holds the checkpoint's made-up secrets in the clear
        if not stack_state.changes(result):
            # Every input known: the preview computed each one from state (host tuning's hosts
            # included), not merely found an unknown where the checkpoint had a value.
            unknown = [urn for urn, inputs in registered.items() if stack_state.has_unknown(inputs)]
            if unknown:
                raise RuntimeError(f"preview with state left inputs unknown: {', '.join(unknown[:5])}")
            return round_, stack_state.plan_counts(result)
    raise RuntimeError(f"the checkpoint still plans changes after {SETTLE_ROUNDS} previews: "
                       + "; ".join(stack_state.changes(result)[:5]))


@contextlib.contextmanager
def touches_no_lab(stack: str, what: str, *roots: Path):
    """Raise if the stack's lab directory (paths.lab_dir, under each project root given, else the
    default one) appears during the block: a preview calls the providers' diffs, which only
    compare."""
    labs = [paths.lab_dir(stack, root) for root in roots] if roots else [paths.lab_dir(stack)]
    there = {lab for lab in labs if lab.exists()}
    yield
    made = [str(lab) for lab in labs if lab.exists() and lab not in there]
    if made:
        raise RuntimeError(f"{what} made {', '.join(made)}: a provider did more than diff")


def baseline_with_state(project: StackProject, base: Path, name: str) -> tuple[proctree.TreeRun, int]:
    """The no-op baseline given a checkpoint the way the stack's preview with state is: as many
    resources as the stack's settled state, each holding the inputs of one of them
    (stack_state.payloads), imported and settled the same way; the timed preview of it, and its
    resource count."""
    held = stack_state.payloads(json.loads(project.pulumi("stack", "export").stdout))
    baseline = BaselineProject(base / "baseline-state", len(held), held)
    _, fresh = preview(baseline, f"{name}-fresh")
    work = base / "baseline-settle"
    work.mkdir()
    settle(baseline, fresh, work)
    run, result = preview(baseline, name)
    planned = stack_state.changes(result)
    if planned:
        raise RuntimeError(f"the baseline with state plans changes: {'; '.join(planned[:5])}")
    return run, len(held)


def stateful_preview(project: StackProject, fresh: dict, workdir: Path, name: str) -> tuple[proctree.TreeRun, int, dict]:
    """Time `pulumi preview` of the project's stack once the settled checkpoint is in place;
    asserts it plans no change and left no lab object (the providers' diffs only compare)."""
    with touches_no_lab(project.stack, "preview with state"):
        rounds, _ = settle(project, fresh, workdir)
        run, result = preview(project, name)
    planned = stack_state.changes(result)
    if planned:
        raise RuntimeError(f"preview with state plans changes: {'; '.join(planned[:5])}")
    return run, rounds, stack_state.plan_counts(result)


def record_of_states(project: StackProject) -> proctree.TreeRun:
    """Time the run `railyard verify` makes after a run that changed a node's state
    (railyard.engine.pulumi.record_outputs) on the project's settled stack; asserts it touched no
    lab object and that the stack still plans no change."""
    with touches_no_lab(project.stack, "the record of the node states"):
        run = proctree.run(project.argv(*record_args(project.stack, project.dir)), cwd=project.dir,
                           env={**project.env_for("refresh"), OUTPUTS_ONLY_ENV: "1"}, timeout=PREVIEW_TIMEOUT_S)
    if run.returncode != 0:
        raise RuntimeError(f"the record run failed (rc {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    planned = stack_state.changes(preview(project, "after-record")[1])
    if planned:
        raise RuntimeError(f"the record run left the stack planning changes: {'; '.join(planned[:5])}")
    return run


def marginal_cost(small: int, t_small: float, large: int, t_large: float) -> float:
    """What each node added from `small` to `large` costs, over the average per node at `small`:
    ((t_large - t_small) / (large - small)) / (t_small / small). 1.0 when time is proportional to
    the nodes; below when a fixed part is spread over more nodes; above when a node costs more the
    more nodes there are."""
    return ((t_large - t_small) / (large - small)) / (t_small / small)


def scaling_samples(fresh: dict[int, proctree.TreeRun], baselines: dict[int, proctree.TreeRun]):
    """Figures across the sizes of one run: the largest preview's peak RSS beside its baseline's,
    and the marginal cost per node from the smallest size to the largest (fresh previews' walls)."""
    small, large = min(fresh), max(fresh)
    yield Sample(f"preview, {large:,} nodes: peak RSS ratio to baseline",
                 fresh[large].peak_rss_mib / baselines[large].peak_rss_mib, "x", target=TARGET_RSS_RATIO.get(large),
                 note="peak RSS (process tree) of Railyard's preview / the baseline's with as many resources")
    if small != large:
        yield Sample(f"preview: marginal cost per added node, {small:,} -> {large:,}",
                     marginal_cost(small, fresh[small].wall_s, large, fresh[large].wall_s), "x",
                     target=TARGET_MARGINAL.get((small, large)),
                     note=f"((t{large} - t{small}) / ({large} - {small})) / (t{small} / {small}), fresh previews' "
                          "walls of the same run: 1.0 is time proportional to the nodes")


def rss_note(run: proctree.TreeRun) -> str:
    return "at the peak, MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(run.rss_at_peak_mib.items()))


def cpu_note(run: proctree.TreeRun) -> str:
    return "sampled every 0.2 s; " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(run.cpu_s.items()))


def run(ctx: Context):
    sizes = QUICK_SIZES if ctx.quick else SIZES
    state_sizes = QUICK_STATE_SIZES if ctx.quick else STATE_SIZES
    with_state: dict[int, proctree.TreeRun] = {}
    fresh_runs: dict[int, proctree.TreeRun] = {}
    baselines: dict[int, proctree.TreeRun] = {}
    for nodes in sorted({*sizes, *state_sizes}):
        base = Path(tempfile.mkdtemp(prefix=f"engine-{nodes}-", dir=ctx.workdir))
        try:
            project = StackProject(base / "railyard", f"bench{nodes}", preview_config(nodes))
            project.pulumi("stack", "init", "--secrets-provider", "passphrase")
            ours, result = preview(project, f"railyard-{nodes}")
            count = resource_count(result)
            per_node = node_resource_count(result)
            if nodes in sizes:
                baseline, _ = preview(BaselineProject(base / "baseline", count), f"baseline-{count}")
                fresh_runs[nodes], baselines[nodes] = ours, baseline
            if nodes in state_sizes:
                stateful, rounds, counts = stateful_preview(project, result, base, f"railyard-state-{nodes}")
                with_state[nodes] = stateful
                record = record_of_states(project)
                floor, held = baseline_with_state(project, base, f"baseline-state-{nodes}")
        finally:
            shutil.rmtree(base, ignore_errors=True)
        label = f"preview, {nodes:,} nodes"
        yield Sample(f"{label}: wall", ours.wall_s, "s", target=TARGET_WALL_S.get(nodes))
        yield Sample(f"{label}: peak RSS (process tree)", ours.peak_rss_mib, "MiB", note=rss_note(ours))
        yield Sample(f"{label}: CPU (process tree)", ours.total_cpu_s, "s", note=cpu_note(ours))
        yield Sample(f"{label}: resources", count, "")
        if nodes in sizes:
            yield Sample(f"{label}: resources per node", per_node / nodes, "", target=TARGET_RESOURCES_PER_NODE,
                         note="an HgxNode component and everything under it, per node")
            yield Sample(f"{label}: resources outside the nodes", count - per_node, "",
                         note="cluster, fabric, storage and pool components, key, fabric, spine, object store, tuning, expiry")
            yield Sample(f"baseline preview, {count:,} no-op dynamic resources: wall", baseline.wall_s, "s")
            yield Sample(f"baseline preview, {count:,} no-op dynamic resources: peak RSS (process tree)",
                         baseline.peak_rss_mib, "MiB", note=rss_note(baseline))
            yield Sample(f"baseline preview, {count:,} no-op dynamic resources: CPU (process tree)",
                         baseline.total_cpu_s, "s", note=cpu_note(baseline))
            yield Sample(f"{label}: ratio to baseline", ours.wall_s / baseline.wall_s, "x",
                         target=TARGET_RATIO.get(nodes),
                         note="wall of Railyard's preview / wall of the baseline with as many resources")
        if nodes in state_sizes:
            label = f"preview with state, {nodes:,} nodes"
            yield Sample(f"{label}: wall", stateful.wall_s, "s")
            yield Sample(f"{label}: peak RSS (process tree)", stateful.peak_rss_mib, "MiB")
            yield Sample(f"{label}: CPU (process tree)", stateful.total_cpu_s, "s", note=cpu_note(stateful))
            yield Sample(f"{label}: steps planned, all unchanged", counts.get("same", 0), "",
                         note=f"every resource in the imported checkpoint, the stack included; "
                              f"checkpoint settled in {rounds} previews")
            yield Sample(f"{label}: ratio to the preview without state", stateful.wall_s / ours.wall_s, "x",
                         note=f"wall with state / wall of the fresh stack's preview just before ({ours.wall_s:.1f} s)")
            yield Sample(f"record of the node states, {nodes:,} nodes: wall", record.wall_s, "s",
                         note="the outputs-only refresh `railyard verify` runs after a run that changed a "
                              "node's state: the program, no resource read")
            floor_label = f"baseline preview with state, {held:,} no-op dynamic resources"
            yield Sample(f"{floor_label}: wall", floor.wall_s, "s",
                         note="each holding the inputs of one of the stack's resources, checkpoint imported")
            yield Sample(f"{floor_label}: peak RSS (process tree)", floor.peak_rss_mib, "MiB", note=rss_note(floor))
            yield Sample(f"{label}: ratio to the baseline with state", stateful.wall_s / floor.wall_s, "x",
                         target=TARGET_STATE_RATIO.get(nodes),
                         note="wall of Railyard's preview with state / wall of the baseline's")
            yield Sample(f"{label}: peak RSS ratio to the baseline with state",
                         stateful.peak_rss_mib / floor.peak_rss_mib, "x")
    yield from scaling_samples(fresh_runs, baselines)
    # Growth from the smallest size to the next: a factor of two apart (STATE_SIZES).
    sizes_with_state = sorted(with_state)
    small, large = sizes_with_state[0], sizes_with_state[min(1, len(sizes_with_state) - 1)]
    if small != large:
        linear = large / small
        label = f"preview with state, {small:,} -> {large:,} nodes"
        yield Sample(f"{label}: growth of wall", with_state[large].wall_s / with_state[small].wall_s, "x",
                     target=round(GROWTH_SLACK * linear, 2),
                     note=f"t({large})/t({small}); linear = {linear:.1f}: the target is not faster than linear")
        # The program's own CPU is where Railyard's code runs, without the engine's share to
        # dilute a quadratic part of it.
        program = [with_state[n].cpu_s.get("program", 0.0) for n in (small, large)]
        if all(program):
            yield Sample(f"{label}: growth of program CPU", program[1] / program[0], "x",
                         target=round(GROWTH_SLACK * linear, 2),
                         note=f"the Python program's CPU alone (components, plan, host tuning's variables); "
                              f"linear = {linear:.1f}")


SECTIONS = (Section("engine", "pulumi preview at 448 and 2,500 nodes beside a baseline of no-op dynamic resources; "
                              "a preview with state at 224, 448 and 2,500 nodes, the last two beside a "
                              "baseline with state", run),)
