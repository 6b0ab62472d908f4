"""Splitting a whole over NUMA cells: a host's hugepages over its nodes, a VM's vCPUs, memory and
own hugepages over its guest cells. Host tuning and guest topology both split this way, so it
lives below both."""

from __future__ import annotations

from typing import Mapping


def split_pages(total: int, weights: Mapping[int, float]) -> dict[int, int]:
    """Split `total` pages over NUMA nodes in proportion to `weights` (largest remainder).

    Every node gets the floor of its exact share, and the pages left over go one each to the nodes
    with the largest remainders (ties: the lower node id), so the parts add up to `total` and none
    is more than one page from its exact share. Nodes of weight 0 get nothing unless every weight
    is 0, when the pages are split evenly (a host with no GPUs still has memory on every node).
    """
    if total < 0:
        raise ValueError(f"cannot split {total} pages")
    if not weights:
        raise ValueError("no NUMA nodes to split hugepages over")
    if any(w < 0 for w in weights.values()):
        raise ValueError(f"negative weight in {dict(weights)}")
    nodes = sorted(weights)
    w = {n: weights[n] for n in nodes}
    if sum(w.values()) == 0:
        w = dict.fromkeys(nodes, 1)
    whole = sum(w.values())
    # Integer arithmetic where the weights allow it, so shares are exact.
    exact = {n: total * w[n] / whole for n in nodes}
    out = {n: int(total * w[n] // whole) for n in nodes}
    left = total - sum(out.values())
    for n in sorted(nodes, key=lambda n: (-(exact[n] - out[n]), n))[:left]:
        out[n] += 1
    return out


def cell_weights(gpus_per_cell: dict[int, int]) -> dict[int, int]:
    """Cell -> its share of the VM (its vCPUs, its memory, the guest's own hugepages): the GPUs on
    it; a cell of VFs alone counts as one."""
    return {c: n or 1 for c, n in gpus_per_cell.items()}
