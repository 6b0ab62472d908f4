"""Collectives across node pairs, rail by rail (railyard.model.pair_collectives): the pairs from
acceptance's rings, the rounds they run in, the srun line each rank's settings come from, and the
judging of real nccl-tests tables against the rail's speed or the other pairs."""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from railyard.bench.fixtures import two_rank_table
from railyard.model import pair_collectives as pc
from railyard.model.catalog import load_catalog
from railyard.model.gpu_health import parse_all_reduce_perf

from .test_acceptance import config, plan_of

CATALOG = load_catalog()
GPU = Path(__file__).resolve().parents[3] / "railyard" / "data" / "fixtures" / "gpu"
# A real two-node run's table cut to one rank a node (the real runs of two ranks kept, below, are a
# slow one on HDR and a healthy one on Slingshot, neither on the NDR rails these pairs are planned on).
REAL = two_rank_table()


# What a run that started prints before it fails: nccl-tests' header lines.
STARTED = "\n".join(REAL.splitlines()[1:4]) + "\n"
# What srun and slurmstepd print, captured from Debian 12's Slurm 22.05 in the lab (its SOURCES.md).
SLURM = GPU.parent / "slurm"


def srun(name: str) -> str:
    return (SLURM / f"srun_{name}.txt").read_text()


def pairs_of(count: int) -> tuple[pc.PairRun, ...]:
    return pc.plan_pairs(plan_of(config(count)), CATALOG.nodes)


def test_every_ring_pair_runs_once_on_the_nic_and_gpu_the_sku_pairs():
    plan = plan_of(config(4))
    pairs = pc.plan_pairs(plan, CATALOG.nodes)
    assert len(pairs) == 4 * 8  # the ring of four on each of eight rails
    paired = CATALOG.nodes["dgx-h100"].pairing()
    gpu_index = {g.name: g.index for g in CATALOG.nodes["dgx-h100"].gpus}
    for p in pairs:
        a, b = plan.node_named(p.a), plan.node_named(p.b)
        assert (p.hca_a, p.hca_b) == (a.nics[p.rail].name, b.nics[p.rail].name)
        assert (p.ip_a, p.ip_b, p.netdev_a) == (a.nics[p.rail].ip, b.nics[p.rail].ip, a.nics[p.rail].netdev)
        assert paired[next(g for g, i in gpu_index.items() if i == p.gpu_a)] == p.hca_a


def test_a_two_node_ring_is_one_pair_a_rail():
    pairs = pairs_of(2)
    assert [(p.rail, p.a, p.b) for p in pairs] == [(r, "gpu-0", "gpu-1") for r in range(8)]


def test_no_node_is_in_two_pairs_of_a_round_and_every_pair_runs_once():
    pairs = pairs_of(12)
    rounds = pc.rounds(pairs)
    assert sorted(id(p) for r in rounds for p in r) == sorted(id(p) for p in pairs)
    for r in rounds:
        nodes = [n for p in r for n in (p.a, p.b)]
        assert len(nodes) == len(set(nodes))
    assert len(rounds) == 2 * 8  # an even ring takes two rounds a rail


def ranks_env(pair: pc.PairRun, node: str, procid: int) -> dict[str, str]:
    """What the srun line's shell hands each rank, run for real with `env` as the tool."""
    argv = pair.srun_argv(mpi="pmix")
    # What srun runs on the node, as the remote shell ssh hands the joined line to parses it.
    task = argv[argv.index("sh"):argv.index("all_reduce_perf")] + ["env"]
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": node, "SLURM_PROCID": str(procid)}
    out = subprocess.run(["sh", "-c", shlex.join(task)], env=env, capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if line.startswith(("NCCL_", "CUDA_")))


@pytest.mark.parametrize("rank_of_a", [0, 1])
def test_each_rank_gets_its_own_nic_gpu_and_rank_zeros_address_wherever_slurm_puts_it(rank_of_a):
    pair = next(p for p in pairs_of(4) if p.rail == 3 and p.a == "gpu-3")  # the ring's wrap-around pair
    argv = pair.srun_argv(limit_s=55, mpi="pmi2")
    assert argv[:16] == ["timeout", "-k", "5", "55", "srun", "--mpi=pmi2", "--nodes=2", "--ntasks=2",
                         "--ntasks-per-node=1", "--nodelist=gpu-3,gpu-0", "--exclusive", "--gres=gpu:8",
                         f"--immediate={pc.ALLOCATE_S}", "--kill-on-bad-exit=1", "--time=2", "--job-name=railyard-pair"]
    assert argv[argv.index("all_reduce_perf") + 1:] == pc.SIZES.argv()
    on_a, on_b = ranks_env(pair, "gpu-3", rank_of_a), ranks_env(pair, "gpu-0", 1 - rank_of_a)
    root = pair.ip_a if rank_of_a == 0 else pair.ip_b
    assert on_a == {"NCCL_IB_HCA": f"={pair.hca_a}", "NCCL_COMM_ID": f"{root}:{pc.PORT}",
                    "NCCL_SOCKET_IFNAME": f"={pair.netdev_a}", "CUDA_VISIBLE_DEVICES": str(pair.gpu_a),
                    "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert on_b == {"NCCL_IB_HCA": f"={pair.hca_b}", "NCCL_COMM_ID": f"{root}:{pc.PORT}",
                    "NCCL_SOCKET_IFNAME": f"={pair.netdev_b}", "CUDA_VISIBLE_DEVICES": str(pair.gpu_b),
                    "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def scaled(text: str, factor: float) -> str:
    """The real table with every bus bandwidth at the largest size scaled (what a slower rail shows)."""
    lines = text.splitlines()
    last = max(i for i, line in enumerate(lines) if line.strip() and line.strip()[0].isdigit())
    cols = lines[last].split()
    for i in (7, 11):
        cols[i] = f"{float(cols[i]) * factor:.2f}"
    lines[last] = "  ".join(cols)
    return "\n".join(lines) + "\n"


def bar(nic_gbps: float, median: bool = False) -> pc.Bar:
    return functools.partial(pc.yardstick, nic_gbps=nic_gbps, against_median=median)


def outcomes(pairs, texts) -> list[pc.Outcome]:
    return [pc.outcome(p, 0, t, "") for p, t in zip(pairs, texts)]


def test_a_pair_below_the_rails_speed_names_the_nic_both_of_its_pairs_touch():
    pairs = [p for p in pairs_of(4) if p.rail == 5]
    peak = parse_all_reduce_perf(REAL).peak_busbw
    # Judged against a rail of the real run's own figure: gpu-2's NIC on rail 5 spoils its two pairs.
    texts = [scaled(REAL, 0.5) if "gpu-2" in (p.a, p.b) else REAL for p in pairs]
    found = pc.judge(outcomes(pairs, texts), bar(peak * 8), 0.15)
    assert [(f.kind, f.node, f.where) for f in found] == [("collective-slow", "gpu-2", "rail5")]
    slow = parse_all_reduce_perf(scaled(REAL, 0.5)).peak_busbw
    assert found[0].planned == f"{peak:.4g} GB/s" and found[0].found == f"{slow:g} GB/s"
    assert "more than 15% below the rail's planned speed" in found[0].message


def test_healthy_pairs_at_the_rails_speed_are_not_findings():
    pairs = [p for p in pairs_of(4) if p.rail == 0]
    peak = parse_all_reduce_perf(REAL).peak_busbw
    assert pc.judge(outcomes(pairs, [REAL] * 4), bar(peak * 8), 0.15) == []
    # and the same table is slow on a rail planned twice as fast
    assert {f.node for f in pc.judge(outcomes(pairs, [REAL] * 4), bar(peak * 16), 0.15)} == \
        {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}


def test_against_the_median_only_the_outlier_is_named_whatever_the_plans_speed():
    pairs = [p for p in pairs_of(4) if p.rail == 2]
    texts = [scaled(REAL, 0.01) if "gpu-1" in (p.a, p.b) else REAL for p in pairs]
    found = pc.judge(outcomes(pairs, texts), bar(400, median=True), 0.9)
    assert [(f.kind, f.node) for f in found] == [("collective-slow", "gpu-1")]
    assert "the median of the pairs run" in found[0].message


def test_in_a_two_node_ring_both_nodes_are_named():
    pairs = [p for p in pairs_of(2) if p.rail == 1]
    # One rank exited 1; srun ended the other (--kill-on-bad-exit) and exits with its SIGTERM, 143.
    found = pc.judge([pc.outcome(pairs[0], 143, STARTED, srun("rank_exit_1"))], bar(400), 0.15)
    assert [(f.kind, f.node) for f in found] == [("collective-failed", "gpu-0"), ("collective-failed", "gpu-1")]
    # The rank that failed first is said, not srun's last words about the one it ended.
    assert "exited 143: srun: error: gpu-2: task 1: Exited with exit code 1" in found[0].message


def test_a_pair_stopped_at_its_time_limit_is_a_failed_run():
    pair = pairs_of(2)[0]
    stopped = pc.outcome(pair, 124, STARTED, srun("timeout"))  # timeout(1)'s status, srun's words
    assert stopped.not_run is None and stopped.error.startswith("did not finish in time")
    assert "srun: error: gpu-1: task 0: Killed" in stopped.error  # the first rank srun says ended


def test_no_allocation_and_a_missing_tool_are_not_run_never_failed():
    pair = pairs_of(2)[0]
    # Each as srun answers: a job holds the pair (--immediate gave up), a node drained, more GPUs
    # than the nodes have, a node Slurm does not know; then the pair's own command where the tool
    # is not installed (env's 127 through srun).
    held = [pc.outcome(pair, 1, "", srun(name)) for name in ("busy_immediate", "drained_immediate",
                                                            "gres_unavailable", "invalid_node")]
    missing = pc.outcome(pair, 127, "", srun("tool_missing"))
    assert all(o.not_run and o.not_run.startswith("Slurm gave no allocation") for o in held), held
    assert "Requested nodes are busy" in held[0].not_run and "Invalid node name" in held[3].not_run
    assert missing.not_run == "all_reduce_perf missing"
    assert pc.judge([*held, missing], bar(400), 0.15) == []


def test_a_run_that_counted_wrong_results_names_both_nodes():
    pair = pairs_of(2)[0]
    rows = REAL.splitlines()
    i = max(i for i, line in enumerate(rows) if line.strip() and line.strip()[0].isdigit())
    cols = rows[i].split()
    cols[8] = "3"
    rows[i] = "  ".join(cols)
    # nccl-tests exits 1 when it counted wrong results; the table is judged all the same.
    found = pc.judge([pc.outcome(pair, 1, "\n".join(rows), "")], bar(0), 0.15)
    assert sorted((f.kind, f.node) for f in found) == [("collective-wrong", "gpu-0"), ("collective-wrong", "gpu-1")]


def test_only_the_slow_or_failed_pairs_are_run_again():
    pairs = [p for p in pairs_of(4) if p.rail == 6]
    outs = outcomes(pairs, [scaled(REAL, 0.5) if p.a == "gpu-0" else REAL for p in pairs])
    outs[2] = pc.outcome(pairs[2], 1, STARTED, "gone")
    outs[3] = pc.outcome(pairs[3], 1, "", srun("busy_immediate"))
    peak = parse_all_reduce_perf(REAL).peak_busbw
    assert pc.suspects(outs, bar(peak * 8), 0.15) == [pairs[0], pairs[2]]


def test_two_runs_of_one_rank_each_are_a_launcher_mismatch_not_a_node_fault():
    # A build without MPI (or srun without the PMI it speaks): each process runs alone and prints its own table.
    pair = pairs_of(2)[0]
    alone = "\n".join(line for line in REAL.splitlines() if "Rank  1" not in line)
    o = pc.outcome(pair, 0, alone + "\n" + alone, "")
    assert o.run is None and o.not_run and "did not form one run (2 tables" in o.not_run
    assert pc.judge([o], bar(400), 0.15) == []


def test_a_nic_with_one_failed_and_one_slow_pair_is_named_alone_as_failed():
    pairs = [p for p in pairs_of(4) if p.rail == 4]
    peak = parse_all_reduce_perf(REAL).peak_busbw
    outs = []
    for p in pairs:
        if {p.a, p.b} == {"gpu-1", "gpu-2"}:
            outs.append(pc.outcome(p, 1, STARTED, "Test NCCL failure common.cu:1005 'remote process exited'\n"))
        elif {p.a, p.b} == {"gpu-2", "gpu-3"}:
            outs.append(pc.outcome(p, 0, scaled(REAL, 0.5), ""))
        else:
            outs.append(pc.outcome(p, 0, REAL, ""))
    found = pc.judge(outs, bar(peak * 8), 0.15)
    assert [(f.kind, f.node, f.where) for f in found] == [("collective-failed", "gpu-2", "rail4")]
    assert "Test NCCL failure common.cu:1005" in found[0].message and "GB/s bus bandwidth" in found[0].message


def test_a_lone_bad_pair_names_the_end_whose_other_pair_did_not_run_well():
    pairs = [p for p in pairs_of(4) if p.rail == 0]
    peak = parse_all_reduce_perf(REAL).peak_busbw
    # gpu-0 <-> gpu-1 is slow; gpu-1's other pair ran healthy, gpu-0's other pair did not run.
    outs = []
    for p in pairs:
        if {p.a, p.b} == {"gpu-0", "gpu-1"}:
            outs.append(pc.outcome(p, 0, scaled(REAL, 0.5), ""))
        elif "gpu-0" in (p.a, p.b):
            outs.append(pc.outcome(p, 1, "", srun("busy_immediate")))
        else:
            outs.append(pc.outcome(p, 0, REAL, ""))
    assert [(f.kind, f.node) for f in pc.judge(outs, bar(peak * 8), 0.15)] == [("collective-slow", "gpu-0")]


def test_sinfo_names_the_nodes_slurm_would_give_no_pair():
    from railyard.model.node_health import parse_sinfo

    assert pc.unavailable(parse_sinfo((SLURM / "sinfo_drained_mixed.txt").read_text())) == {
        "gpu-1": "out of scheduling", "gpu-2": "running a job"}
    assert pc.unavailable(parse_sinfo((SLURM / "sinfo_idle.txt").read_text())) == {}
    assert set(pc.unavailable(parse_sinfo((SLURM / "sinfo_not_responding.txt").read_text())).values()) <= {
        "out of scheduling", "not responding"}


def test_a_launch_that_never_started_the_tool_is_not_run_never_every_nodes_fault():
    pair = pairs_of(2)[0]
    # srun --mpi=pmix where Slurm has the plugin but cannot load the PMIx library (Debian 12 without libpmix-dev).
    o = pc.outcome(pair, 1, "", srun("pmix_unavailable"))
    assert o.not_run == ("srun cannot start the PMI asked for (srun: error: Invalid MPI type 'pmix', --mpi=list for "
                         "acceptable types): railyard:slurm.mpi must be one that `srun --mpi=list` names and slurmd "
                         "can load")
    assert pc.judge([o], bar(400), 0.15) == []
    assert pc.outcome(pair, 127, "", "timeout: failed to run command 'srun': No such file or directory\n").not_run \
        .startswith("a command was not found")
    # all_reduce_perf there without NCCL: the loader's 127 (glibc ld.so's words, as it says them for a
    # binary linked against a libnccl.so.2 that is gone), not a missing tool.
    lib = pc.outcome(pair, 127, "", "all_reduce_perf: error while loading shared libraries: libnccl.so.2: cannot open "
                                    "shared object file: No such file or directory\n"
                                    "srun: error: gpu-1: task 1: Exited with exit code 127\n")
    assert lib.not_run and lib.not_run.startswith("all_reduce_perf cannot load its libraries (all_reduce_perf: error "
                                                  "while loading shared libraries: libnccl.so.2")


def test_a_finding_message_says_its_node_and_rail():
    pairs = [p for p in pairs_of(2) if p.rail == 7]
    [f, _] = pc.judge([pc.outcome(pairs[0], 1, STARTED, "x")], bar(400), 0.15)
    assert pc.pair_rail(f.message) == (f.node, 7) and pc.pair_rail("gpu-0: Xid 79 on GPU 3") is None


def test_a_real_run_of_two_ranks_on_two_nodes_is_read_through_nccls_info_lines_and_judged_slow():
    """nccl-tests#293 (SOURCES.md): one A100 and one ConnectX-6 HDR a node, NCCL's INFO lines among
    nccl-tests' own, 6.44 GB/s where an HDR rail carries 25: slow, on both nodes of the pair."""
    text = (GPU / "all_reduce_perf-a100-2node-2rank-hdr-slow-nccltests293-excerpt.txt").read_text()
    pair = pairs_of(2)[0]
    o = pc.outcome(pair, 0, text, "")
    assert o.not_run is None and o.error is None
    assert (o.run.ranks, o.run.hosts, len(o.run.rows), o.run.peak_busbw) == (2, ("test1", "test2"), 28, 6.44)
    found = pc.judge([o], bar(200), 0.15)
    assert [(f.kind, f.node, f.where, f.planned, f.found) for f in found] == [
        ("collective-slow", n, "rail0", "25 GB/s", "6.44 GB/s") for n in ("gpu-0", "gpu-1")]
    # The same run where the rail is planned at what it carried passes.
    assert pc.judge([o], bar(6.44 * 8), 0.15) == []


def test_a_real_healthy_run_of_two_ranks_passes_at_its_rails_speed_and_is_slow_at_twice_it():
    """Two GH200 nodes of CSCS's Alps, one rank each (SOURCES.md), nccl-tests 2.18's header: 22.88
    GB/s at 128 MiB over Slingshot-11, which the same docs give as 200 Gb/s (25 GB/s) a NIC."""
    text = (GPU / "all_reduce_perf-gh200-2node-2rank-slingshot.txt").read_text()
    o = pc.outcome(pairs_of(2)[0], 0, text, "")
    assert o.not_run is None and o.error is None
    assert (o.run.ranks, o.run.hosts, o.run.peak_busbw) == (2, ("nid007106", "nid007109"), 22.88)
    assert max(r.size for r in o.run.rows) == pc.SIZES.high_bytes
    assert pc.judge([o], bar(200), 0.15) == []
    assert [(f.kind, f.planned, f.found) for f in pc.judge([o], bar(400), 0.15)] == [
        ("collective-slow", "50 GB/s", "22.88 GB/s")] * 2
