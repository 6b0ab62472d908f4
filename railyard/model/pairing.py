"""The GPU -> NIC pairing rule, defined once and used by the catalog, topology import and the hosts.

The rule (issue 3, item 4; rule 3 from issue 19): among the NICs that carry compute traffic,

1. at most ceil(GPUs / NICs) GPUs share one NIC;
2. a GPU is never paired across NUMA nodes while a NIC on its own NUMA node still has room under
   that bound;
3. every NIC serves a GPU before any NIC serves a second one: as many NICs are in use as rules 1
   and 2 allow;
4. the sum of the PCIe distance classes of the pairs is as small as possible, the classes counted
   as ranks PIX=0 < PXB=1 < PHB=2 < NODE=3 < SYS=4;
5. among equally good pairings, GPUs taken in (NUMA, index) order get the NIC that comes first in
   (NUMA, index) order: the pairing whose sequence of NICs is lexicographically smallest wins.

Rule 2 is met by first minimising the number of cross-NUMA pairs and only then the rest: if a
GPU crossed while a NIC of its own node had room, moving it there would remove a crossing. When the
classes agree with the NUMA nodes (a path between nodes is SYS, within one never is, as on real
hardware) this is the same as minimising the class sum alone; when they disagree, locality wins.

Rule 3 ranks above the class sum because an idle compute NIC is bandwidth the node never uses:
two GPUs sharing their PIX NIC get half of it each, while the second GPU on a free NIC one bridge
further gets all of that one. Without it, GPUs that tie for two NICs (two GPUs PXB to the same two
NICs, as on a DGX A100) both went to the first. It ranks below rule 2: filling an idle NIC of the
other socket would send a GPU over the SMP link while its own node had room.

The optimum is exact: a min-cost assignment (Hungarian algorithm) of GPUs to NIC slots, each NIC
expanded into as many slots as the bound allows; every slot after a NIC's first costs the balance
weight, so the solver fills a NIC's first slot before any second one. All five criteria are folded
into one integer cost per (GPU, slot) so one solve gives the answer; Python integers are exact at
any size.

Stdlib only and no imports from the rest of railyard: this file ships to hosts as Ansible
module_utils.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Union

DISTANCE_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")
RANK = {name: rank for rank, name in enumerate(DISTANCE_CLASSES)}


class Device(NamedTuple):
    """A GPU or NIC as the rule sees it. index defaults to the position in the list given."""

    name: str
    numa: int | None = None
    # The field shadows tuple.index, which mypy refuses; callers name it (Device(name, numa, index=...)).
    index: int | None = None  # type: ignore[assignment]


DeviceLike = Union[Device, Mapping[str, Any], str]
# A class, or None for a pair whose distance is unknown (rank() refuses it).
Distance = Union[Callable[[str, str], "str | None"], Mapping[tuple[str, str], str]]


def capacity(n_gpus: int, n_nics: int) -> int:
    """How many GPUs may share one NIC: ceil(GPUs / NICs)."""
    if n_nics <= 0:
        return 0
    return math.ceil(n_gpus / n_nics)


def rank(distance_class: str | None) -> int:
    found = RANK.get(distance_class) if distance_class is not None else None
    if found is None:
        raise ValueError(
            f"distance class {distance_class!r} is not one of {', '.join(DISTANCE_CLASSES)}"
        )
    return found


def crosses_numa(gpu: Device, nic: Device) -> bool:
    """True when both NUMA nodes are known and differ; an unknown node proves nothing."""
    return gpu.numa is not None and nic.numa is not None and gpu.numa != nic.numa


def pair(gpus: Iterable[DeviceLike], nics: Iterable[DeviceLike], distance: Distance) -> dict[str, str]:
    """Pair every GPU with a compute NIC by the rule above; returns {gpu name: nic name}.

    gpus, nics: Device tuples, mappings with keys name/numa/index, or bare names.
    distance:   distance(gpu_name, nic_name) -> class, or a mapping {(gpu_name, nic_name): class}.
    With no NICs the pairing is empty.
    """
    gpu_list = _devices(gpus, "GPU")
    nic_list = _devices(nics, "NIC")
    if not gpu_list or not nic_list:
        return {}
    lookup = _lookup(distance)
    n, m = len(gpu_list), len(nic_list)
    cap = capacity(n, m)

    gpu_order = sorted(range(n), key=lambda i: _tie_key(gpu_list[i]))
    nic_order = sorted(range(m), key=lambda j: _tie_key(nic_list[j]))
    nic_position = {j: q for q, j in enumerate(nic_order)}

    # Weights of the folded cost, largest first: one crossing outweighs everything below it; one
    # GPU in a NIC's second (or later) slot outweighs any class sum (at most 4 per GPU); the class
    # sum outweighs any tie-break, which is a base-m number whose digits are the NIC positions
    # chosen by the GPUs in tie order. At most n - 1 GPUs sit in later slots, so n balance weights
    # exceed every sum of the lower terms.
    tie_span = m**n
    balance_weight = (RANK["SYS"] * n + 1) * tie_span
    cross_weight = n * balance_weight
    cost = [[0] * (m * cap) for _ in range(n)]
    for p, i in enumerate(gpu_order):
        gpu = gpu_list[i]
        digit = m ** (n - 1 - p)
        for j, nic in enumerate(nic_list):
            cls = lookup(gpu.name, nic.name)
            r = RANK.get(cls) if cls is not None else None
            if r is None:
                raise ValueError(
                    f"distance {gpu.name}->{nic.name} is {cls!r}, not one of {', '.join(DISTANCE_CLASSES)}"
                )
            c = cross_weight * crosses_numa(gpu, nic) + r * tie_span + nic_position[j] * digit
            for s in range(cap):
                cost[p][j * cap + s] = c + balance_weight * (s > 0)
    slots = _hungarian(cost)
    chosen = {gpu_order[p]: slots[p] // cap for p in range(n)}
    return {gpu_list[i].name: nic_list[chosen[i]].name for i in range(n)}


def pairing_cost(assignment: Mapping[str, str], distance: Distance) -> int:
    """The class sum of a pairing (rule 4), for reports and tests."""
    lookup = _lookup(distance)
    return sum(rank(lookup(g, nic)) for g, nic in assignment.items())


def _tie_key(device: Device) -> tuple[int, int, int, str]:
    # An unknown NUMA node sorts after every known one.
    numa = (1, 0) if device.numa is None else (0, device.numa)
    return (*numa, device.index if device.index is not None else 0, device.name)


def _devices(items: Iterable[DeviceLike], what: str) -> list[Device]:
    out: list[Device] = []
    for position, item in enumerate(items):
        if isinstance(item, str):
            device = Device(item)
        elif isinstance(item, Device):
            device = item
        elif isinstance(item, Mapping):
            if "name" not in item:
                raise ValueError(f"{what} #{position}: a mapping needs a 'name' key, got {sorted(item)}")
            device = Device(str(item["name"]), item.get("numa"), item.get("index"))
        else:
            raise ValueError(f"{what} #{position}: expected a Device, mapping or name, got {type(item).__name__}")
        if device.index is None:
            device = device._replace(index=position)
        out.append(device)
    names = [d.name for d in out]
    duplicates = sorted({x for x in names if names.count(x) > 1})
    if duplicates:
        raise ValueError(f"{what} names must be unique; repeated: {', '.join(duplicates)}")
    return out


def _lookup(distance: Distance) -> Callable[[str, str], str | None]:
    if callable(distance):
        return distance
    table = distance

    def from_table(gpu: str, nic: str) -> str:
        try:
            return table[(gpu, nic)]
        except KeyError:
            raise ValueError(f"no distance given for {gpu}->{nic}") from None

    return from_table


def _hungarian(cost: list[list[int]]) -> list[int]:
    """Min-cost assignment of every row to a distinct column (rows <= columns); returns row -> column.

    The O(n^2 m) potentials method (Kuhn-Munkres with Dijkstra-like row insertion), 1-indexed
    internally. Deterministic: scans columns in order and breaks ties on the first minimum.
    """
    n = len(cost)
    m = len(cost[0]) if n else 0
    if n > m:
        raise ValueError(f"cannot assign {n} rows to {m} columns")
    u: list[int | float] = [0] * (n + 1)
    v: list[int | float] = [0] * (m + 1)
    match = [0] * (m + 1)  # column -> row, 0 = free
    way = [0] * (m + 1)
    for i in range(1, n + 1):
        match[0] = i
        j0 = 0
        minv: list[int | float] = [math.inf] * (m + 1)
        used = [False] * (m + 1)
        while True:
            used[j0] = True
            i0 = match[j0]
            delta: int | float = math.inf
            j1 = 0
            for j in range(1, m + 1):
                if used[j]:
                    continue
                cur = cost[i0 - 1][j - 1] - u[i0] - v[j]
                if cur < minv[j]:
                    minv[j] = cur
                    way[j] = j0
                if minv[j] < delta:
                    delta = minv[j]
                    j1 = j
            for j in range(m + 1):
                if used[j]:
                    u[match[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if match[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            match[j0] = match[j1]
            j0 = j1
    result = [0] * n
    for j in range(1, m + 1):
        if match[j]:
            result[match[j] - 1] = j - 1
    return result
