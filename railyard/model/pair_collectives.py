"""Collectives across nodes, one rail at a time (issue 41): nccl-tests' all_reduce_perf between
the two nodes of each ring pair acceptance probes (railyard.model.acceptance.rail_ring), one GPU
and one NIC a node, launched by Slurm, and judged against the rail's planned speed.

Why one rail at a time: a run over all eight rails at once is as fast as its slowest rail times
eight, so one rail at half speed hides as a 6% slower collective; a run held to one NIC
(NCCL_IB_HCA, `=` for the exact name) on the GPU paired with it (the SKU's pairing rule) shows that
rail alone. Two ranks move each byte once each way, so a pair's bus bandwidth is its algorithm
bandwidth, and a healthy pair's reaches the NIC's speed (400 Gb/s: 50 GB/s) less NCCL's headers.

Why Slurm: nccl-tests across nodes needs a launcher that starts one rank per node and lets the
ranks find each other; a Slurm stack has one on every node (srun), and it never starts a pair on
a node a job holds. NCCL_COMM_ID names where rank 0 listens for the others (NCCL's bootstrap), here
rank 0's rail address, so the ranks meet over the rail under test, and the lab's stand-in
(railyard/drivers/lab/gpu_tools.py) carries its bytes there. A stack without Slurm says so and runs
none.

Pairs run in rounds in which no node is in two pairs, each pair on its own GPU and NIC: a node
measures one pair at a time, so what one pair moves does not slow another's figure.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from railyard.model.acceptance import blame, rail_ring
from railyard.model.gpu_health import CollectiveRun, expected_busbw_pair, parse_all_reduce_perf

if TYPE_CHECKING:
    from railyard.model.catalog import NodeSku
    from railyard.model.plan_types import PlanView

# Where rank 0 listens (NCCL_COMM_ID's port); one pair a node a round, so one port serves all.
PORT = 29500
# How long srun waits for the two nodes to be free.
ALLOCATE_S = 10
# 8 MiB to 128 MiB, each size warmed once and timed over four iterations: at 128 MiB a 400 Gb/s
# rail's pair is past its latency-bound sizes (2.7 ms a transfer), and a pair costs well under a
# second of the rail's time.
SIZES = ("-b", "8M", "-e", "128M", "-f", "4", "-w", "1", "-n", "4", "-g", "1")
# Where rails go at the host's rate (a driver's rails_at_host_rate: the lab's veths, a few GB/s at
# best), an eighth of the bytes: 128 MiB would keep a slowed rail's pair busy for minutes there.
HOST_RATE_SIZES = ("-b", "1M", "-e", "16M", "-f", "4", "-w", "1", "-n", "4", "-g", "1")
# A pair that has not finished this long before its reading's own bound is stopped (timeout(1),
# which makes srun end the job step) and is a failed run, with time left to say so.
STOP_MARGIN_S = 5


# Each rank's NCCL settings, chosen on its own node: which end of the pair it is (SLURMD_NODENAME),
# its NIC, interface and GPU, and rank 0's rail address. Slurm, not the order the nodes are named
# in, decides which node rank 0 lands on (of two ranks, rank 0 is on `a` where `a`'s own rank
# is 0), so the address is rank 0's wherever that is.
RANK_SETUP = r"""if [ "$SLURMD_NODENAME" = "$1" ]; then me=0 hca=$5 dev=$7 gpu=$9; else me=1 hca=$6 dev=$8 gpu=${10}; fi
if [ "$SLURM_PROCID" = "$me" ]; then root=$3; else root=$4; fi
shift 10
exec env NCCL_IB_HCA="=$hca" NCCL_COMM_ID="$root:%d" ${dev:+NCCL_SOCKET_IFNAME="=$dev"} ${gpu:+CUDA_VISIBLE_DEVICES="$gpu"} "$@"
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

    @property
    def where(self) -> str:
        return f"rail{self.rail} {self.a} <-> {self.b} (through {self.path})"

    def srun_argv(self, sizes: tuple[str, ...] = SIZES, limit_s: float = 60) -> list[str]:
        """The one command that runs the pair from any node with Slurm's client, stopped after
        `limit_s`: one rank on each node (NCCL_IB_HCA held to the rail's NIC, `=` for its exact
        name; the socket interface its netdev; the GPU paired with it)."""
        ends = [self.a, self.b, self.ip_a, self.ip_b, self.hca_a, self.hca_b, self.netdev_a or "",
                self.netdev_b or "", "" if self.gpu_a is None else str(self.gpu_a),
                "" if self.gpu_b is None else str(self.gpu_b)]
        # --immediate: a pair whose node a job holds (or that is drained) is not run, rather than
        # queued behind the job.
        return ["timeout", "-k", "5", f"{limit_s:g}",
                "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", f"--nodelist={self.a},{self.b}",
                f"--immediate={ALLOCATE_S}", "--job-name=railyard-pair", "sh", "-c", RANK_SETUP, "pair", *ends,
                "all_reduce_perf", *sizes]


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
                           gpus[b.sku].get(p.target_device), p.path))
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


# srun's words when it gets no allocation (a node busy, drained or down), env's exit status for a
# command it cannot find, and timeout(1)'s for a run it stopped.
NO_ALLOCATION = "Unable to allocate resources"
NOT_FOUND = 127
TIMED_OUT = 124


def outcome(pair: PairRun, rc: int, stdout: str, stderr: str) -> Outcome:
    """What one pair's srun printed, read: a run that failed (a non-zero status, or no table) is
    its launcher's or tool's last words."""
    try:
        run = parse_all_reduce_perf(stdout)
    except ValueError:
        run = None
    if rc == 0 and run is not None:
        return Outcome(pair, run)
    said = [line.strip() for line in (stderr + "\n" + stdout).splitlines() if line.strip()]
    last = said[-1] if said else "no output"
    if NO_ALLOCATION in stderr:
        return Outcome(pair, None, not_run=f"Slurm gave no allocation ({last})")
    if rc == TIMED_OUT:
        return Outcome(pair, None, f"did not finish in time (stopped; {last})")
    if rc == NOT_FOUND and "all_reduce_perf" in stderr:
        return Outcome(pair, None, not_run="all_reduce_perf missing")
    return Outcome(pair, None, f"exited {rc}: {last}")


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
    more than `tolerance` below the bar (yardstick, its settings given). A failed or slow NIC
    spoils both pairs that touch it on its rail, so the ring's rule names it once
    (acceptance.blame); a run that counted wrong results names both its nodes."""
    outcomes = [o for o in outcomes if o.not_run is None]
    bar_gbs, said = bar(outcomes)
    failed: list[tuple[str, dict, str]] = []
    slow: list[tuple[str, dict, str]] = []
    out: list[PairFinding] = []
    for o in outcomes:
        p = o.pair
        probes = [(p.a, {"rail": p.rail, "peer": p.b}), (p.b, {"rail": p.rail, "peer": p.a})]
        if o.run is None:
            failed += [(src, r, f"all_reduce_perf to {r['peer']} failed ({o.error})") for src, r in probes[:1]]
            continue
        peak = o.run.peak_busbw
        if bar_gbs is not None and peak is not None and peak < bar_gbs * (1 - tolerance):
            what = (f"all_reduce_perf to {p.b} over rail {p.rail} ({p.path}): {peak:g} GB/s bus bandwidth at "
                    f"its largest size, more than {tolerance:.0%} below {said} ({bar_gbs:.4g} GB/s)")
            slow += [(p.a, probes[0][1], what)]
        wrong = sum(r.wrong for r in o.run.rows)
        if wrong:
            for node in (p.a, p.b):
                out.append(PairFinding("collective-wrong", node, p.where,
                                       f"all_reduce_perf over {p.where} counted {wrong} wrong result(s)", "0",
                                       str(wrong)))
    planned = f"{bar_gbs:.4g} GB/s" if bar_gbs is not None else None
    # The lowest figure of a node's slow pairs on a rail is what it was found at.
    lowest: dict[tuple[str, int], float] = {}
    for o in outcomes:
        peak = o.run.peak_busbw if o.run is not None else None
        if peak is not None:
            for node in (o.pair.a, o.pair.b):
                key = (node, o.pair.rail)
                lowest[key] = min(peak, lowest.get(key, peak))
    for kind, bad in (("collective-failed", failed), ("collective-slow", slow)):
        for f in blame(_both_ways(bad, outcomes), kind, ""):
            rail = f.rail if f.rail is not None else -1
            found = lowest.get((f.node, rail)) if kind == "collective-slow" else None
            out.append(PairFinding(kind, f.node, f"rail{rail}", f"{f.node} rail{rail}: {f.message}",
                                   planned if kind == "collective-slow" else None,
                                   f"{found:g} GB/s" if found is not None else None))
    return sorted(out, key=lambda f: (f.node, f.where, f.kind))


def _both_ways(bad: list[tuple[str, dict, str]], outcomes: list[Outcome]) -> list[tuple[str, dict, str]]:
    """A two-node ring's one pair counts as its two probes, as acceptance sends them: neither
    node can be told from the other, and both are named."""
    ring_sizes: dict[int, set[str]] = {}
    for o in outcomes:
        ring_sizes.setdefault(o.pair.rail, set()).update((o.pair.a, o.pair.b))
    out = list(bad)
    for src, r, what in bad:
        if len(ring_sizes.get(r["rail"], ())) == 2:
            out.append((r["peer"], {"rail": r["rail"], "peer": src}, what))
    return out


