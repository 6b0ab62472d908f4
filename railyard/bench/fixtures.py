"""Outputs derived from the kept real ones (railyard/data/fixtures), where no real output of the
shape needed is kept: one derivation, which the benchmarks and the tests both judge. Imports
nothing heavy, so a model test may use it."""

from __future__ import annotations

from pathlib import Path

GPU = Path(__file__).resolve().parents[1] / "data" / "fixtures" / "gpu"


def two_rank_table() -> str:
    """The kept real two-node run (8 ranks a node) with its rank lines cut to the first on each
    host and renumbered: what a pair's run of two ranks, one a node, prints on NDR rails. No real
    run of that shape on InfiniBand at NDR is kept (railyard/data/fixtures/gpu/SOURCES.md: the
    real two-rank runs are on HDR and Slingshot); the tests judge the same table."""
    kept = (GPU / "all_reduce_perf-h100-2node-16gpu-nvls-healthy.txt").read_text().splitlines()
    ranks = [line for line in kept if "Rank" in line]
    return "\n".join(line for line in kept if "Rank" not in line or line in (ranks[0], ranks[8])).replace(
        "Rank  8 Group", "Rank  1 Group") + "\n"
