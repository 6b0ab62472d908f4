"""A rail pair's finding recorded in a node's state stands while its pairs cannot run
(railyard.commands.verify._standing): a drained node gets no allocation, so a reading that did not
re-test that rail must not return it to service."""

from __future__ import annotations

from railyard.commands.verify import _standing
from railyard.model.node_health import Change, NodeState

PAIR = "gpu-3 rail2: all_reduce_perf of gpu-2 <-> gpu-3 (leaf): 0.05 GB/s bus bandwidth at its largest size"
XID = "gpu-1: Xid 79 on GPU 00000000:1B:00.0"


def state(name: str, finding: str) -> NodeState:
    return NodeState(name, "railyard: " + finding, 0, (Change(1.0, "suspect", "", finding),
                                                       Change(2.0, name, "railyard: " + finding, finding)))


def test_a_drained_nodes_rail_pair_finding_stands_until_that_rail_runs_again():
    states = {"gpu-3": state("drained", PAIR), "gpu-1": state("drained", XID), "gpu-2": NodeState()}
    hosts = {"gpu-1": 0, "gpu-2": 0, "gpu-3": 0}
    # gpu-3's rail 2 did not run (drained): its finding stands; gpu-1's is no pair's; gpu-2 is ready.
    assert _standing(states, {}, {("gpu-3", 0)}, hosts) == {"gpu-3": [PAIR]}
    # Its rail 2 ran (a person resumed it): what that run found is all that counts.
    assert _standing(states, {}, {("gpu-3", 2)}, hosts) == {}
    # Found again: not doubled.
    assert _standing(states, {"gpu-3": [PAIR]}, set(), hosts) == {}


def test_a_pair_result_counted_wrong_stands_like_a_slow_one():
    # judge()'s message for a pair's results counted wrong names the rail after "over", not before.
    wrong = "gpu-3: all_reduce_perf over rail2 gpu-2 <-> gpu-3 (through leaf) counted 3 wrong result(s)"
    states = {"gpu-3": state("drained", wrong)}
    assert _standing(states, {}, {("gpu-3", 0)}, {"gpu-3": 0}) == {"gpu-3": [wrong]}
    assert _standing(states, {}, {("gpu-3", 2)}, {"gpu-3": 0}) == {}
