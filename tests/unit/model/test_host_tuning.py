"""Host tuning arithmetic: the hugepage split over NUMA nodes, VF MACs and the VF plan."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railyard.model import host_tuning
from railyard.model.numa_split import split_pages
from railyard.model.plan import make_plan
from railyard.stack import load_stack_file
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

weights = st.dictionaries(st.integers(0, 7), st.integers(0, 16), min_size=1, max_size=8)


@given(total=st.integers(0, 10_000), w=weights)
@settings(max_examples=300, deadline=None)
def test_hugepage_split_adds_up_and_each_node_is_within_one_page_of_its_share(total, w):
    split = split_pages(total, w)
    assert sorted(split) == sorted(w)
    assert sum(split.values()) == total
    eff = w if sum(w.values()) else dict.fromkeys(w, 1)
    whole = sum(eff.values())
    for node, pages in split.items():
        exact = total * eff[node] / whole
        assert exact - 1 < pages < exact + 1, f"node {node}: {pages} pages for an exact share of {exact}"


@given(total=st.integers(0, 10_000), w=weights)
@settings(max_examples=200, deadline=None)
def test_hugepage_split_gives_nodes_without_gpus_nothing_unless_no_node_has_any(total, w):
    split = split_pages(total, w)
    if sum(w.values()):
        assert all(split[n] == 0 for n, x in w.items() if x == 0)
    else:
        assert max(split.values()) - min(split.values()) <= 1


@given(total=st.integers(0, 10_000), w=weights)
@settings(max_examples=100, deadline=None)
def test_hugepage_split_is_deterministic_and_order_free(total, w):
    assert split_pages(total, w) == split_pages(total, dict(reversed(list(w.items()))))


def test_hugepage_split_refuses_nonsense():
    with pytest.raises(ValueError):
        split_pages(-1, {0: 1})
    with pytest.raises(ValueError):
        split_pages(1, {})
    with pytest.raises(ValueError):
        split_pages(1, {0: -1})


def test_hugepage_split_of_a_dgx_h100_is_even_and_odd_pages_go_to_node_zero():
    assert split_pages(1024, {0: 4, 1: 4}) == {0: 512, 1: 512}
    assert split_pages(1025, {0: 4, 1: 4}) == {0: 513, 1: 512}


@given(st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=12), st.integers(0, 126))
@settings(max_examples=100, deadline=None)
def test_vf_macs_are_stable_locally_administered_unicast(node, pf, vf):
    mac = host_tuning.vf_mac("lab", node, pf, vf)
    assert re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", mac)
    first = int(mac[:2], 16)
    assert first & 0x02 and not first & 0x01
    assert mac == host_tuning.vf_mac("lab", node, pf, vf)
    assert mac != host_tuning.vf_mac("other-stack", node, pf, vf)


def test_vf_plan_gives_each_vm_the_plans_vfs_and_keeps_spares():
    spec = load_stack_file(ROOT / "stacks/Pulumi.lab-virtual.yaml")
    plan = make_plan(spec)
    node = plan.nodes[0]
    nics = [n.name for n in node.nics]
    out = host_tuning.vf_assignments(spec.stack, node, spec.tuning.sriov.vfs_per_pf, nics)
    assert len(out) == spec.tuning.sriov.vfs_per_pf * len(nics)
    given_ = [a for a in out if a.vm]
    assert {(a.pf, a.index) for a in given_} == {(vf.pf, vf.slot) for vm in node.vms for vf in vm.vfs}
    assert len({a.mac for a in out}) == len(out), "every VF has its own MAC"
    with pytest.raises(ValueError, match="does not create"):
        host_tuning.vf_assignments(spec.stack, node, 0, nics)
