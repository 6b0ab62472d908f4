"""Whose lab objects are whose (railyard.drivers.lab.gc.owners and gc's refusal), on a machine
described to it: namespaces with their lo aliases, root-namespace links, marked processes and
this checkout's lab directories. Nothing real is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from railyard.drivers.lab import gc, names
from railyard.drivers.lab.errors import LabError

HERE = Path("/work/checkout-a")
THERE = "/work/checkout-b"


@pytest.fixture
def machine(monkeypatch, tmp_path):
    here = tmp_path / "a"
    state = {"netns": {}, "links": {}, "marked": [], "dirs": []}

    def netns_list(prefix=""):
        return sorted(n for n in state["netns"] if n.startswith(prefix))

    monkeypatch.setattr(gc, "require_root", lambda: None)
    monkeypatch.setattr(gc.net, "netns_list", netns_list)
    monkeypatch.setattr(gc, "_alias", lambda ns, dev: state["netns"].get(ns))
    monkeypatch.setattr(gc.net, "links", lambda netns=None, **kw: {
        n: ({"ifalias": a} if a else {}) for n, a in state["links"].items()})
    monkeypatch.setattr(gc.proc, "marked", lambda key, match: [(None, v) for v in state["marked"] if match(v)])

    def add_stack(stack, marker_root, nodes=("gpu-0",), lab_dir=False):
        alias = names.owner_marker(stack, str(marker_root)) if marker_root else None
        for ns in (names.fabric_ns(stack), *(names.node_ns(stack, n) for n in nodes)):
            state["netns"][ns] = alias
        state["links"][names.host_link(stack)] = alias
        if lab_dir:
            (here / ".railyard" / "lab" / stack).mkdir(parents=True)

    return here, add_stack, state


def by_tag(here):
    return {o.tag: o for o in gc.owners(here)}


def test_marked_stacks_are_this_checkouts_or_anothers_by_their_marker(machine):
    here, add, _ = machine
    add("lab-virtual", here)          # hashed tag, this checkout's marker, no lab dir needed
    add("gcbk", THERE, lab_dir=True)  # another checkout's marker wins over a lab dir of ours
    found = by_tag(here)
    mine = found[names.stack_tag("lab-virtual")]
    assert (mine.here, mine.stack, mine.unmarked) == (True, "lab-virtual", False)
    theirs = found["gcbk"]
    assert not theirs.here and theirs.roots == (THERE,) and "another checkout" in theirs.why


def test_unmarked_objects_are_this_checkouts_only_with_its_lab_directory(machine):
    here, add, _ = machine
    add("old", None, lab_dir=True)  # made before markers existed
    add("stray", None)              # no marker, no lab directory here
    found = by_tag(here)
    assert (found["old"].here, found["old"].stack, found["old"].unmarked) == (True, "old", True)
    assert not found["stray"].here and found["stray"].roots == ()


def test_a_lab_directory_without_objects_is_still_collected_and_processes_count(machine):
    here, _, state = machine
    (here / ".railyard" / "lab" / "gone").mkdir(parents=True)
    state["marked"].append("zzz:gpu-0")  # a node process whose namespaces are gone, of nobody here
    found = by_tag(here)
    assert found["gone"].here and found["gone"].stack == "gone"
    assert not found["zzz"].here


def test_gc_refuses_a_stack_whose_objects_carry_another_checkouts_marker(machine):
    here, add, _ = machine
    add("gcbk", THERE)
    with pytest.raises(LabError) as err:
        gc.gc("gcbk", (), here)
    assert THERE in str(err.value) and "Nothing was removed" in str(err.value)
