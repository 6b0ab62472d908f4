"""The one GPU -> NIC pairing rule: worked examples, the DGX H100, and properties against brute force."""

from __future__ import annotations

import ast
import itertools
import math
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from railyard.model import pairing, pcie
from railyard.model.catalog import load_catalog
from railyard.model.pairing import RANK, Device, capacity, pair, pairing_cost

CATALOG = load_catalog()


# --- worked examples ------------------------------------------------------------------------------


def test_dgx_h100_pairs_each_gpu_with_the_nic_on_its_own_pcie_switch():
    assert CATALOG.nodes["dgx-h100"].pairing() == {
        "GPU0": "mlx5_0", "GPU1": "mlx5_3", "GPU2": "mlx5_4", "GPU3": "mlx5_5",
        "GPU4": "mlx5_6", "GPU5": "mlx5_9", "GPU6": "mlx5_10", "GPU7": "mlx5_11",
    }


def test_dgx_h100_pairing_follows_the_pcie_tree_not_the_names():
    # Rename the NICs to opaque names and hand them over in reverse: the answer moves with the tree.
    sku = CATALOG.nodes["dgx-h100"]
    rename = {n.rdma: f"nic-{i:02d}" for i, n in enumerate(reversed(sku.compute_nics))}
    back = {v: k for k, v in rename.items()}
    gpus = [Device(g.name, g.numa, g.index) for g in sku.gpus]
    nics = [Device(rename[n.rdma], n.numa, i) for i, n in enumerate(reversed(sku.compute_nics))]
    got = pair(gpus, nics, lambda g, n: sku.distance(g, back[n]))
    assert {g: back[n] for g, n in got.items()} == sku.pairing()


def test_every_gpu_of_the_dgx_h100_is_pxb_to_its_nic():
    sku = CATALOG.nodes["dgx-h100"]
    assert {sku.distance(g, n) for g, n in sku.pairing().items()} == {"PXB"}


def test_hgx_h100_pairs_each_gpu_with_its_pix_nic():
    sku = CATALOG.nodes["hgx-h100"]
    assert {sku.distance(g, n) for g, n in sku.pairing().items()} == {"PIX"}
    assert sku.pairing()["GPU4"] == "mlx5_6"


def test_at_most_ceil_gpus_over_nics_share_a_nic():
    got = CATALOG.nodes["vela-a100"].pairing()
    assert sorted(got.values()).count("mlx5_0") == 4 and sorted(got.values()).count("mlx5_1") == 4
    assert got["GPU0"] == "mlx5_0" and got["GPU7"] == "mlx5_1"


def test_the_bound_pushes_a_gpu_to_its_second_best_nic():
    # Both GPUs are PIX to a, but a takes only ceil(2/2) = 1 of them; the first in index order wins it.
    d = {("g0", "a"): "PIX", ("g0", "b"): "NODE", ("g1", "a"): "PIX", ("g1", "b"): "NODE"}
    assert pair(["g0", "g1"], ["a", "b"], d) == {"g0": "a", "g1": "b"}


def test_the_sum_of_classes_is_minimised_not_each_gpu_greedily():
    # Greedy in index order would give g0 -> a (PIX) and g1 -> b (SYS), sum 0 + 4 = 4;
    # the optimum is g0 -> b (PXB), g1 -> a (PIX), sum 1 + 0 = 1.
    d = {("g0", "a"): "PIX", ("g0", "b"): "PXB", ("g1", "a"): "PIX", ("g1", "b"): "SYS"}
    got = pair(["g0", "g1"], ["a", "b"], d)
    assert got == {"g0": "b", "g1": "a"}
    assert pairing_cost(got, d) == 1


def test_never_across_numa_while_a_nic_of_the_gpus_own_node_is_free():
    # The classes claim the far NIC is closer (inconsistent data); locality still wins.
    gpus = [Device("g0", numa=0)]
    nics = [Device("near", numa=0), Device("far", numa=1)]
    d = {("g0", "near"): "NODE", ("g0", "far"): "PIX"}
    assert pair(gpus, nics, d) == {"g0": "near"}


def test_across_numa_only_when_the_own_nodes_nics_are_full():
    gpus = [Device(f"g{i}", numa=0) for i in range(3)]
    nics = [Device("n0", numa=0), Device("n1", numa=1), Device("n2", numa=1)]
    d = {(g.name, n.name): ("PIX" if n.numa == 0 else "SYS") for g in gpus for n in nics}
    got = pair(gpus, nics, d)
    assert list(got.values()).count("n0") == 1, "capacity ceil(3/3) = 1"
    assert sorted(got.values()) == ["n0", "n1", "n2"]


def test_ties_go_to_the_nic_first_in_numa_then_index_order():
    nics = [Device("x", numa=1, index=5), Device("y", numa=0, index=9), Device("z", numa=1, index=2)]
    # A GPU of unknown NUMA node crosses nothing: the NIC on the lowest NUMA node wins.
    assert pair([Device("g0", numa=None)], nics, lambda g, n: "NODE") == {"g0": "y"}
    # A GPU on NUMA 1 stays there, and takes the lower index.
    assert pair([Device("g0", numa=1)], nics, lambda g, n: "NODE") == {"g0": "z"}


def test_ties_are_settled_for_gpus_in_numa_then_index_order():
    # One PIX NIC for two equally placed GPUs: the GPU on the lower NUMA node gets it.
    gpus = [Device("late", numa=1, index=0), Device("early", numa=0, index=7)]
    nics = [Device("a", numa=0), Device("b", numa=0)]
    d = {("late", "a"): "PIX", ("early", "a"): "PIX", ("late", "b"): "PXB", ("early", "b"): "PXB"}
    assert pair(gpus, nics, d) == {"late": "b", "early": "a"}


def test_a_free_nic_one_bridge_further_beats_sharing_a_pix_nic():
    # Without rule 3 the class sum alone pairs a{g0,g1} b{g2,g3} (sum 0) and leaves c idle.
    d = {(g, n): "NODE" for g in ("g0", "g1", "g2", "g3") for n in ("a", "b", "c")}
    d.update({("g0", "a"): "PIX", ("g1", "a"): "PIX", ("g2", "b"): "PIX", ("g3", "b"): "PIX", ("g3", "c"): "PXB"})
    got = pair(["g0", "g1", "g2", "g3"], ["a", "b", "c"], d)
    assert got == {"g0": "a", "g1": "a", "g2": "b", "g3": "c"}
    assert set(got.values()) == {"a", "b", "c"}, "every compute NIC serves a GPU"


def test_gpus_that_tie_for_two_nics_take_one_each():
    # Two GPUs PXB to the same two NICs (a DGX A100 pair): the tie-break alone gave both the first.
    d = {("g0", "a"): "PXB", ("g0", "b"): "PXB", ("g1", "a"): "PXB", ("g1", "b"): "PXB",
         ("g2", "a"): "SYS", ("g2", "b"): "SYS", ("g3", "a"): "SYS", ("g3", "b"): "SYS",
         ("g0", "c"): "SYS", ("g1", "c"): "SYS", ("g2", "c"): "PIX", ("g3", "c"): "PIX"}
    assert pair(["g0", "g1", "g2", "g3"], ["a", "b", "c"], d) == {"g0": "a", "g1": "b", "g2": "c", "g3": "c"}


def test_an_idle_nic_on_the_other_socket_does_not_pull_a_gpu_across():
    # Rule 2 outranks rule 3: the NUMA 0 GPUs fit on their own NICs, so the NUMA 1 NIC stays idle.
    gpus = [Device(f"g{i}", numa=0) for i in range(4)]
    nics = [Device("x", numa=0), Device("y", numa=0), Device("z", numa=1)]
    d = {(g.name, n.name): ("PIX" if n.numa == 0 else "SYS") for g in gpus for n in nics}
    got = pair(gpus, nics, d)
    assert "z" not in got.values() and sorted(got.values()) == ["x", "x", "y", "y"]


def test_more_nics_than_gpus_leaves_nics_unused():
    got = pair(["g0"], ["a", "b", "c"], {("g0", "a"): "SYS", ("g0", "b"): "PHB", ("g0", "c"): "PIX"})
    assert got == {"g0": "c"}


def test_no_nics_means_no_pairing():
    assert pair(["g0"], [], {}) == {}
    assert capacity(8, 0) == 0


def test_accepts_mappings_and_names():
    got = pair([{"name": "g0", "numa": 0}], [{"name": "a", "numa": 0, "index": 3}], lambda g, n: "PIX")
    assert got == {"g0": "a"}


def test_an_unknown_class_is_refused_naming_the_pair():
    with pytest.raises(ValueError, match="g0->a is 'NV18'"):
        pair(["g0"], ["a"], {("g0", "a"): "NV18"})


def test_a_missing_distance_is_refused_naming_the_pair():
    with pytest.raises(ValueError, match="no distance given for g0->b"):
        pair(["g0"], ["a", "b"], {("g0", "a"): "PIX"})


def test_repeated_names_are_refused():
    with pytest.raises(ValueError, match="repeated: g0"):
        pair(["g0", "g0"], ["a"], lambda g, n: "PIX")


def test_sixteen_gpus_on_eighteen_nics_is_fast():
    gpus = [Device(f"g{i}", numa=i // 8) for i in range(16)]
    nics = [Device(f"n{j}", numa=j // 9) for j in range(18)]
    classes = pairing.DISTANCE_CLASSES
    start = time.perf_counter()
    got = pair(gpus, nics, lambda g, n: classes[(int(g[1:]) * 7 + int(n[1:]) * 3) % 4] if (int(g[1:]) // 8) == (int(n[1:]) // 9) else "SYS")
    assert time.perf_counter() - start < 2.0
    assert len(got) == 16 and len(set(got.values())) == 16


def test_pairing_module_is_stdlib_only_so_it_can_ship_as_module_utils():
    tree = ast.parse(Path(pairing.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "pairing.py: no relative imports"
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names), f"pairing.py imports {imported - set(sys.stdlib_module_names)}"


# --- properties against brute force -----------------------------------------------------------------


def _tie(d: Device):
    return (1, 0, d.index, d.name) if d.numa is None else (0, d.numa, d.index, d.name)


def _brute(gpus, nics, dist, *, lexicographic_numa: bool):
    """Every assignment within the bound; the literal NUMA rule as a filter; most NICs in use; min
    class sum; ties in order.

    lexicographic_numa: rank by the number of cross-NUMA pairs first (the implementation's reading,
    needed when classes disagree with NUMA nodes) instead of only filtering by the literal rule.
    """
    n, m = len(gpus), len(nics)
    cap = capacity(n, m)
    g_order = sorted(range(n), key=lambda i: _tie(gpus[i]))
    n_pos = {j: q for q, j in enumerate(sorted(range(m), key=lambda j: _tie(nics[j])))}
    best = None
    for combo in itertools.product(range(m), repeat=n):
        load = [combo.count(j) for j in range(m)]
        if max(load) > cap:
            continue
        crossing = [i for i in range(n) if pairing.crosses_numa(gpus[i], nics[combo[i]])]
        if any(load[j] < cap for i in crossing for j in range(m)
               if nics[j].numa is not None and nics[j].numa == gpus[i].numa):
            continue
        cost = sum(RANK[dist(gpus[i].name, nics[combo[i]].name)] for i in range(n))
        idle = m - len(set(combo))
        key = ((len(crossing),) if lexicographic_numa else ()) + (idle, cost, tuple(n_pos[combo[i]] for i in g_order))
        if best is None or key < best[0]:
            best = (key, combo)
    return {gpus[i].name: nics[best[1][i]].name for i in range(n)}


@st.composite
def _topologies(draw):
    """A random PCIe forest with GPUs and NICs placed anywhere in it; NUMA nodes from host bridges."""
    nodes = []
    bridges = []
    for numa in range(draw(st.integers(1, 3))):
        for h in range(draw(st.integers(1, 2))):
            hb = f"hb{numa}.{h}"
            nodes.append(pcie.PcieNode(hb, pcie.HOST_BRIDGE, numa=numa))
            bridges.append(hb)
    for k in range(draw(st.integers(0, 6))):
        parent = draw(st.sampled_from(bridges))
        kind = draw(st.sampled_from([pcie.ROOT_PORT, pcie.SWITCH]))
        nodes.append(pcie.PcieNode(f"br{k}", kind, parent))
        bridges.append(f"br{k}")
    n_gpus, n_nics = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    for i in range(n_gpus):
        nodes.append(pcie.PcieNode(f"GPU{i}", pcie.ENDPOINT, draw(st.sampled_from(bridges))))
    for j in range(n_nics):
        nodes.append(pcie.PcieNode(f"nic{j}", pcie.ENDPOINT, draw(st.sampled_from(bridges))))
    tree = pcie.PcieTree(nodes)
    gpus = [Device(f"GPU{i}", tree.numa(f"GPU{i}"), i) for i in range(n_gpus)]
    nics = [Device(f"nic{j}", tree.numa(f"nic{j}"), j) for j in range(n_nics)]
    return tree, gpus, nics


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_topologies())
def test_pairing_on_a_pcie_tree_equals_the_brute_force_optimum_of_the_rule(topology):
    tree, gpus, nics = topology
    dist = tree.distance_class
    got = pair(gpus, nics, dist)
    assert got == _brute(gpus, nics, dist, lexicographic_numa=False)


@st.composite
def _matrices(draw):
    """Arbitrary classes and NUMA labels, which need not agree with each other."""
    n_gpus, n_nics = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    numa = st.one_of(st.none(), st.integers(0, 2))
    gpus = [Device(f"g{i}", draw(numa), draw(st.integers(0, 3))) for i in range(n_gpus)]
    nics = [Device(f"n{j}", draw(numa), draw(st.integers(0, 3))) for j in range(n_nics)]
    table = {(g.name, n.name): draw(st.sampled_from(pairing.DISTANCE_CLASSES)) for g in gpus for n in nics}
    return gpus, nics, table


@settings(max_examples=300, deadline=None)
@given(_matrices())
def test_pairing_on_any_matrix_respects_the_bound_and_the_numa_rule_and_is_optimal(case):
    gpus, nics, table = case
    got = pair(gpus, nics, table)
    assert set(got) == {g.name for g in gpus}
    cap = capacity(len(gpus), len(nics))
    load = {n.name: list(got.values()).count(n.name) for n in nics}
    assert max(load.values()) <= cap, f"a NIC carries more than ceil(GPUs/NICs) = {cap}: {load}"
    by_name = {n.name: n for n in nics}
    for g in gpus:
        if pairing.crosses_numa(g, by_name[got[g.name]]):
            own = [n.name for n in nics if n.numa == g.numa]
            assert all(load[n] == cap for n in own), f"{g.name} crosses NUMA while one of {own} has room"
    assert got == _brute(gpus, nics, lambda a, b: table[(a, b)], lexicographic_numa=True)


@settings(max_examples=300, deadline=None)
@given(_matrices())
def test_without_numa_nodes_every_compute_nic_serves_a_gpu_before_any_serves_two(case):
    gpus, nics, table = case
    gpus = [g._replace(numa=None) for g in gpus]
    nics = [n._replace(numa=None) for n in nics]
    got = pair(gpus, nics, table)
    used = list(got.values())
    assert len(set(used)) == min(len(gpus), len(nics)), f"NICs in use {sorted(set(used))} of {[n.name for n in nics]}"


@settings(max_examples=100, deadline=None)
@given(_matrices(), st.randoms())
def test_pairing_does_not_depend_on_the_order_devices_are_given_in(case, rnd):
    gpus, nics, table = case
    # Give every device a distinct index so (NUMA, index) orders them fully.
    gpus = [g._replace(index=i) for i, g in enumerate(gpus)]
    nics = [n._replace(index=j) for j, n in enumerate(nics)]
    shuffled_g, shuffled_n = gpus[:], nics[:]
    rnd.shuffle(shuffled_g)
    rnd.shuffle(shuffled_n)
    assert pair(shuffled_g, shuffled_n, table) == pair(gpus, nics, table)
