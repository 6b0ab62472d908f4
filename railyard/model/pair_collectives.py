"""Collectives across nodes, one rail at a time (issue 41): nccl-tests' all_reduce_perf between
the two nodes of each ring pair acceptance probes (railyard.model.acceptance.rail_ring), one GPU
and one NIC a node, launched by Slurm, and judged against the rail's planned speed.

Why one rail at a time: a run over all eight rails says the node pair is slow, not which rail
is; a run held to one NIC (NCCL_IB_HCA, `=` for the exact name) on the GPU paired with it (the
SKU's pairing rule) names the rail. Two ranks move each byte once each way, so a pair's bus
bandwidth is its algorithm bandwidth, and a healthy pair's reaches the NIC's speed (400 Gb/s:
50 GB/s) less NCCL's headers.

Why Slurm: nccl-tests across nodes is an MPI program (built with MPI=1), and srun starts its two
ranks with the PMI the cluster's MPI speaks (--mpi, railyard:slurm.mpi), on nodes no job holds
(--exclusive, --immediate), with the GPUs in the job (--gres: a cgroup-confined job sees no other).
NCCL_COMM_ID names where rank 0 listens for the other (NCCL's bootstrap), rank 0's rail address,
so the ranks meet over the rail under test; the lab's stand-in (railyard/drivers/lab/gpu_tools.py)
carries its bytes there. A stack without Slurm says so and runs none.

Pairs run in rounds in which no node is in two pairs, each pair on its own GPU and NIC: a node
measures one pair at a time, so what one pair moves does not slow another's figure.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from railyard.model.acceptance import rail_ring
from railyard.model.gpu_health import CollectiveRun, expected_busbw_pair, parse_all_reduce_perf
from railyard.model.health_check import NCCL_TESTS_FAILURE
from railyard.model.node_health import Held

if TYPE_CHECKING:
    from railyard.model.catalog import NodeSku
    from railyard.model.plan_types import PlanView

# Where rank 0 listens (NCCL_COMM_ID's port); one pair a node a round, so one port serves all.
PORT = 29411
# How long srun waits for the two nodes to be free.
ALLOCATE_S = 10
# How long timeout(1) gives srun after its TERM (srun cancels the step) before it kills it.
KILL_AFTER_S = 5


@dataclass(frozen=True)
class Sizes:
    """all_reduce_perf's sizes and iterations (-b -e -f, -w -n), one GPU a rank (-g 1)."""

    low: str
    high: str
    high_bytes: int
    factor: int = 4
    warmup: int = 1
    iters: int = 4

    def argv(self) -> list[str]:
        return ["-b", self.low, "-e", self.high, "-f", str(self.factor), "-w", str(self.warmup),
                "-n", str(self.iters), "-g", "1"]


# 8 MiB to 128 MiB, warmed once and timed over four iterations: at 128 MiB a 400 Gb/s rail's pair
# is past its latency-bound sizes (2.7 ms a transfer), and a pair costs well under a second.
SIZES = Sizes("8M", "128M", 128 << 20)
# Where rails go at the host's rate (a driver's rails_at_host_rate: the lab's veths, a few GB/s at
# best), an eighth of the bytes: 128 MiB would keep a slowed rail's pair busy for minutes there.
HOST_RATE_SIZES = Sizes("1M", "16M", 16 << 20)


# Each rank's NCCL settings, chosen on its own node: which end of the pair it is (SLURMD_NODENAME),
# its NIC, interface and GPU, and rank 0's rail address. Slurm, not the order the nodes are named
# in, decides which node rank 0 lands on (of two ranks, rank 0 is on `a` where `a`'s own rank
# is 0), so the address is rank 0's wherever that is. The GPU is the catalog's index, nvidia-smi's
# PCI order, which CUDA follows only with CUDA_DEVICE_ORDER=PCI_BUS_ID.
RANK_SETUP = r"""if [ "$SLURMD_NODENAME" = "$1" ]; then me=0 hca=$5 dev=$7 gpu=$9; else me=1 hca=$6 dev=$8 gpu=${10}; fi
if [ "$SLURM_PROCID" = "$me" ]; then root=$3; else root=$4; fi
shift 10
exec env NCCL_IB_HCA="=$hca" NCCL_COMM_ID="$root:%d" ${dev:+NCCL_SOCKET_IFNAME="=$dev"} CUDA_DEVICE_ORDER=PCI_BUS_ID ${gpu:+CUDA_VISIBLE_DEVICES="$gpu"} "$@"
""" % PORT


@dataclass(frozen=True)
class PairRun:
    """One rail's pair: node `a`'s NIC on rail `rail` and node `b`'s, each with its interface and
    the GPU paired with it (None where the SKU pairs none with it)."""

    rail: int
    a: str
    b: str
    ip_a: str
    ip_b: str
    hca_a: str
    hca_b: str
    netdev_a: str | None
    netdev_b: str | None
    gpu_a: int | None
    gpu_b: int | None
    path: str
    gpus: int = 0
    """GPUs each node of the pair has, which the job asks for, so the paired GPU's index is the
    node's own; 0 where the two SKUs' counts differ (or they have none): such a pair is not run."""

    @property
    def where(self) -> str:
        return f"rail{self.rail} {self.a} <-> {self.b} (through {self.path})"

    def srun_argv(self, sizes: Sizes = SIZES, limit_s: float = 60, *, mpi: str,
                  job_name: str = "railyard-pair") -> list[str]:
        """The one command that runs the pair from any node with Slurm's client, stopped after
        `limit_s`: one rank on each node (NCCL_IB_HCA held to the rail's NIC, `=` for its exact
        name; the socket interface its netdev; the GPU paired with it), started with `mpi`."""
        ends = [self.a, self.b, self.ip_a, self.ip_b, self.hca_a, self.hca_b, self.netdev_a or "",
                self.netdev_b or "", "" if self.gpu_a is None else str(self.gpu_a),
                "" if self.gpu_b is None else str(self.gpu_b)]
        # --immediate: a pair whose node a job holds (or that is drained) is not run, rather than
        # queued behind the job; --kill-on-bad-exit: a rank that fails ends its peer, which would
        # otherwise wait for it; --time: Slurm ends the job should srun itself be killed.
        return ["timeout", "-k", str(KILL_AFTER_S), f"{limit_s:g}",
                "srun", f"--mpi={mpi}", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                f"--nodelist={self.a},{self.b}", "--exclusive", *([f"--gres=gpu:{self.gpus}"] if self.gpus else []),
                f"--immediate={ALLOCATE_S}", "--kill-on-bad-exit=1", f"--time={-(-int(limit_s) // 60) + 1}",
                f"--job-name={job_name}", "sh", "-c", RANK_SETUP, "pair", *ends, "all_reduce_perf", *sizes.argv()]


def paired_gpus(sku: NodeSku) -> dict[str, int]:
    """{compute NIC: the index of the GPU paired with it}; a NIC that serves several GPUs takes the
    first of them."""
    by_name = {g.name: g.index for g in sku.gpus}
    out: dict[str, int] = {}
    for gpu, nic in sorted(sku.pairing().items(), key=lambda kv: by_name[kv[0]]):
        out.setdefault(nic, by_name[gpu])
    return out


def plan_pairs(plan: PlanView, skus: Mapping[str, NodeSku]) -> tuple[PairRun, ...]:
    """Every ring pair of every rail, once: a two-node ring's two probes are one pair."""
    nodes = {n.name: n for n in plan.nodes}
    gpus = {sku_id: paired_gpus(skus[sku_id]) for sku_id in {n.sku for n in plan.nodes}}
    seen: set[tuple[int, frozenset[str]]] = set()
    out = []
    for p in rail_ring(plan):
        key = (p.rail, frozenset((p.source, p.target)))
        if key in seen:
            continue
        seen.add(key)
        a, b = nodes[p.source], nodes[p.target]
        out.append(PairRun(p.rail, p.source, p.target, p.source_ip, p.target_ip, p.source_device, p.target_device,
                           a.nics[p.rail].netdev, b.nics[p.rail].netdev, gpus[a.sku].get(p.source_device),
                           gpus[b.sku].get(p.target_device), p.path,
                           len(skus[a.sku].gpus) if len(skus[a.sku].gpus) == len(skus[b.sku].gpus) else 0))
    return tuple(out)


def rounds(pairs: Iterable[PairRun]) -> list[list[PairRun]]:
    """The pairs in rounds in which no node is in two pairs, first come first placed."""
    out: list[tuple[set[str], list[PairRun]]] = []
    for pair in pairs:
        for busy, runs in out:
            if pair.a not in busy and pair.b not in busy:
                busy.update((pair.a, pair.b))
                runs.append(pair)
                break
        else:
            out.append(({pair.a, pair.b}, [pair]))
    return [runs for _, runs in out]


@dataclass(frozen=True)
class PairFinding:
    kind: str
    node: str
    where: str
    message: str
    planned: str | None = None
    found: str | None = None


@dataclass(frozen=True)
class Outcome:
    """A pair's run: its table; or why there is none, and whether it failed (a run that started)
    or was not run (no allocation, no all_reduce_perf), which is no finding."""

    pair: PairRun
    run: CollectiveRun | None
    error: str | None = None
    not_run: str | None = None


def unavailable(held: Mapping[str, Held]) -> dict[str, str]:
    """{node: why} of the nodes Slurm would give no pair now, from sinfo as the repair loop reads
    it (node_health.parse_sinfo): out of scheduling (drained, down), running a job, or not
    responding."""
    return {n: "out of scheduling" if h.out else "running a job" if h.busy else "not responding"
            for n, h in held.items() if h.out or h.busy or not h.responding}


# srun's words when it gets no allocation (a node busy, drained or down); the exit status env
# gives a command it cannot find; timeout(1)'s for a run it stopped, and for one it then killed.
NO_ALLOCATION = "Unable to allocate resources"
# nccl-tests' first line, once a run: each process of a build without MPI prints its own.
_HEADER = re.compile(r"^# nThread ", re.M)
NOT_FOUND = 127
TIMED_OUT = (124, 137)
# srun's line for each rank that ended badly (an exit code, a signal); the first is the one that
# failed, those srun then ended (--kill-on-bad-exit) say Terminated, and srun's own status is
# theirs (143): railyard/data/fixtures/slurm/srun_rank_exit_1.txt.
_TASK_FAILED = re.compile(r"^srun: error: \S+: tasks? [\d,-]+: (?!Terminated$)")
# The loader's words for a binary that is there without its libraries (no NCCL): exit 127 too.
_NO_LIBRARY = "error while loading shared libraries"
# srun's last words where it cannot start the PMI asked for (Debian 12's mpi/pmix plugin, which
# loads the libpmix.so only libpmix-dev ships: railyard/data/fixtures/slurm/srun_pmix_unavailable.txt).
_NO_MPI = "Invalid MPI type"


def outcome(pair: PairRun, rc: int, stdout: str, stderr: str, sizes: Sizes = SIZES) -> Outcome:
    """What one pair's srun printed, read. A table from one run of two ranks on the two nodes that
    reached the largest size is judged, wrong results and all (nccl-tests exits 1 on them); a run
    that stopped, failed or timed out is a failed run, said in nccl-tests' first failure line where
    it printed one, else srun's line for the rank that failed first, else the last line printed.
    No allocation, a missing tool or library, a PMI Slurm cannot start, and ranks that did not form
    one run (srun's --mpi and the MPI build disagree) are not run: no node's fault."""
    try:
        run = parse_all_reduce_perf(stdout)
    except ValueError:
        run = None
    said = [line.strip() for line in (stderr + "\n" + stdout).splitlines()
            if line.strip() and not line.lstrip().startswith("#") and not line.strip()[:1].isdigit()]
    failures = [line for line in said if NCCL_TESTS_FAILURE.search(line)]
    first_failed = [line for line in said if _TASK_FAILED.match(line)]
    last = (failures[:1] or first_failed[:1] or said[-1:] or ["no output"])[0][:160]
    if NO_ALLOCATION in stderr:
        return Outcome(pair, None, not_run=f"Slurm gave no allocation ({last})")
    if _NO_MPI in stderr:
        return Outcome(pair, None, not_run=f"srun cannot start the PMI asked for ({last}): railyard:slurm.mpi "
                                           "must be one that `srun --mpi=list` names and slurmd can load")
    if rc == NOT_FOUND or "exit code 127" in stderr:
        if _NO_LIBRARY in stderr:
            return Outcome(pair, None, not_run=f"all_reduce_perf cannot load its libraries "
                                               f"({next(x for x in said if _NO_LIBRARY in x)[:160]})")
        return Outcome(pair, None, not_run="all_reduce_perf missing" if "all_reduce_perf" in stderr
                       else f"a command was not found ({last})")
    if rc in TIMED_OUT:
        return Outcome(pair, None, f"did not finish in time, stopped ({last})")
    if rc != 0 and not _HEADER.search(stdout):
        # nccl-tests prints its header before it starts NCCL: a run without one never started (a
        # PMI srun or the MPI build does not have, a launcher's error), which is no node's fault.
        return Outcome(pair, None, not_run=f"the launch failed before all_reduce_perf started ({last})")
    tables = len(_HEADER.findall(stdout))
    if run is not None and (tables != 1 or run.ranks != 2 or len(run.hosts) != 2):
        return Outcome(pair, None, not_run=f"its two ranks did not form one run ({tables} tables, {run.ranks} "
                                           "ranks): srun's --mpi (railyard:slurm.mpi) and the MPI build of "
                                           "nccl-tests must agree")
    reached = run is not None and max(r.size for r in run.rows) >= sizes.high_bytes
    if reached and run is not None and (rc == 0 or any(r.wrong for r in run.rows)):
        return Outcome(pair, run)
    return Outcome(pair, None, f"exited {rc}: {last}" if rc else f"stopped before {sizes.high} ({last})")


# What a run is held to, given the runs: yardstick() with a stack's settings.
Bar = Callable[[Iterable["Outcome"]], "tuple[float | None, str]"]


def yardstick(outcomes: Iterable[Outcome], *, nic_gbps: float | None,
              against_median: bool = False) -> tuple[float | None, str]:
    """The bus bandwidth a pair is held to, and what it is: the rail's planned speed (nic_gbps),
    or, with against_median (a driver whose rails do not carry their planned rate), the median of
    the pairs that ran."""
    if against_median:
        peaks = [o.run.peak_busbw for o in outcomes if o.run is not None and o.run.peak_busbw is not None]
        return (statistics.median(peaks) if peaks else None), "the median of the pairs run"
    return (expected_busbw_pair(rails=1, nic_gbps=nic_gbps) if nic_gbps else None), "the rail's planned speed"


def suspects(outcomes: Iterable[Outcome], bar: Bar, tolerance: float) -> list[PairRun]:
    """The pairs that ran and failed, or fell more than `tolerance` below the bar: the ones to
    run again before any is judged, so that a moment's contention (another job's traffic on a
    shared switch, a busy host) is not a finding."""
    outcomes = [o for o in outcomes if o.not_run is None]
    floor, _ = bar(outcomes)
    return [o.pair for o in outcomes
            if o.run is None or (floor is not None and o.run.peak_busbw is not None
                                 and o.run.peak_busbw < floor * (1 - tolerance))]


def judge(outcomes: Iterable[Outcome], bar: Bar, tolerance: float) -> list[PairFinding]:
    """Findings of the pairs' runs: a pair is slow when its bus bandwidth at its largest size is
    more than `tolerance` below the bar (yardstick, its settings given), failed when it did not
    finish. Each bad pair is put on the NIC that spoils it (_culprits); a run that counted wrong
    results names both its nodes."""
    outcomes = [o for o in outcomes if o.not_run is None]
    bar_gbs, said = bar(outcomes)
    bad: dict[PairRun, str] = {}
    out: list[PairFinding] = []
    for o in outcomes:
        p = o.pair
        if o.run is None:
            bad[p] = f"all_reduce_perf of {p.a} <-> {p.b} ({p.path}) failed: {o.error}"
            continue
        peak = o.run.peak_busbw
        if bar_gbs is not None and peak is not None and peak < bar_gbs * (1 - tolerance):
            bad[p] = (f"all_reduce_perf of {p.a} <-> {p.b} ({p.path}): {peak:g} GB/s bus bandwidth at its "
                      f"largest size, more than {tolerance:.0%} below {said} ({bar_gbs:.4g} GB/s)")
        wrong = sum(r.wrong for r in o.run.rows)
        if wrong:
            for node in (p.a, p.b):
                out.append(PairFinding("collective-wrong", node, p.where,
                                       f"{node}: all_reduce_perf over {p.where} counted {wrong} wrong result(s)",
                                       "0", str(wrong)))
    planned = f"{bar_gbs:.4g} GB/s" if bar_gbs is not None else None
    runs = {o.pair: o.run for o in outcomes}
    for node, rail, pairs in _culprits(list(bad), list(runs)):
        failed = [p for p in pairs if runs[p] is None]
        peaks = [r.peak_busbw for p in pairs if (r := runs[p]) is not None and r.peak_busbw is not None]
        message = f"{node} rail{rail}: " + "; ".join(bad[p] for p in pairs)
        if failed:
            out.append(PairFinding("collective-failed", node, f"rail{rail}", message))
        else:
            out.append(PairFinding("collective-slow", node, f"rail{rail}", message, planned,
                                   f"{min(peaks):g} GB/s" if peaks else None))
    return sorted(out, key=lambda f: (f.node, f.where, f.kind))


# A rail pair finding's message, as judge() writes it: a NIC's slow or failed pairs, or a pair's
# results counted wrong. What a finding (or a recorded state's) is known as a rail pair's by.
_PAIR_MESSAGE = re.compile(r"^(\S+)(?: rail(\d+): all_reduce_perf of |: all_reduce_perf over rail(\d+) )")


def pair_rail(message: str) -> tuple[str, int] | None:
    """(node, rail) of a rail pair finding's message; None for any other message (a node's own
    collective's among them)."""
    m = _PAIR_MESSAGE.match(message)
    return (m.group(1), int(m.group(2) or m.group(3))) if m else None


def _culprits(bad: list[PairRun], ran: list[PairRun]) -> list[tuple[str, int, list[PairRun]]]:
    """(node, rail, its bad pairs) for each NIC the bad pairs point at. Unlike acceptance's probes
    (acceptance.blame) a pair has no sender: a NIC in two bad pairs of its rail's ring spoils both
    and is named alone; a lone bad pair names the end whose other pair on the rail did not run
    well, or both ends where neither or both did (a two-node ring; a fault on the path between)."""
    out = []
    for rail in sorted({p.rail for p in bad}):
        mine = [p for p in bad if p.rail == rail]
        count: dict[str, int] = {}
        for p in mine:
            for n in (p.a, p.b):
                count[n] = count.get(n, 0) + 1
        named = {n for n, c in count.items() if c >= 2}
        for p in mine:
            if p.a in named or p.b in named:
                continue
            healthy = {n for n in (p.a, p.b)
                       if any(q is not p and q.rail == rail and n in (q.a, q.b) and q not in mine for q in ran)}
            ends = [n for n in (p.a, p.b) if n not in healthy] or [p.a, p.b]
            named.update(ends)
        for n in sorted(named):
            pairs = [p for p in mine if n in (p.a, p.b)]
            if pairs:
                out.append((n, rail, pairs))
    return out
