"""Acceptance in `up`, end to end on the real Pulumi engine and real lab nodes: a ring of rail
pairs at the planned MTU with iperf3 between the nodes' rail addresses, the cache and the object
tier read from every node. A clean 2-node and 8-node run; a rail slowed with tc tbf inside a node
is the only one flagged; a rail taken down fails `up` naming node and rail; with
`onFailure: cordon` and Slurm the node is drained with the finding as its reason, and `up` goes
on. Every probe sends only to the stack's own addresses."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from railyard.drivers.lab import names

from .railyard_project import free_networks, lab_config
from .stack_project import StackProject, lab_stack

TWO, EIGHT = "tacc2", "tacc8"


def config(stack_nodes: int, mgmt: str, storage: str, **extra) -> dict:
    return lab_config(stack_nodes, mgmt, storage, **{"railyard:storage": {"object": {}},
                                                     "railyard:ephemeral": {"ttl": "1h"}, **extra})


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    mgmt, storage = free_networks(2, prefix=24)
    with lab_stack(tmp_path_factory, TWO, config(2, mgmt, storage)) as p:
        yield p


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    mgmt, storage = free_networks(2, prefix=24)
    cfg = config(8, mgmt, storage, **{"railyard:slurm": {}, "railyard:acceptance": {"onFailure": "cordon"}})
    with lab_stack(tmp_path_factory, EIGHT, cfg) as p:
        yield p


def in_node(p: StackProject, node: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", names.node_ns(p.stack, node), *argv], check=True,
                          capture_output=True, text=True)


def lab_fault(p: StackProject, *args: str) -> str:
    """`railyard lab fault`, as a user runs it in the project; its output."""
    proc = p.railyard("lab", "fault", "--stack", p.stack, *args, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def rerun(p: StackProject, check: bool = True) -> subprocess.CompletedProcess:
    """`up` with acceptance run again, as after any change to the nodes or their tuning."""
    urn = next(r["urn"] for r in json.loads(p.pulumi("stack", "export").stdout)["deployment"]["resources"]
               if r["urn"].endswith("-acceptance-run"))
    return p.pulumi("up", "--yes", "--skip-preview", "--replace", urn, check=check, timeout=900)


def netdev(p: StackProject, node: str, rail: int) -> str:
    return p.plan.node_named(node).nics[rail].netdev


def test_a_clean_two_node_run_passes_and_reports_every_rail_pair(two):
    out = two.outputs()["acceptance"]
    assert out["passed"] and out["findings"] == [] and out["flagged"] == [], out
    assert out["rail_pairs"] == 16 and out["median_gbps"] > 0  # 8 rails, a ring of two each way
    report = Path(out["report"]).read_text()
    assert "| gpu-0 | 0 | gpu-1 |" in report and "None: every check passed." in report
    # Nothing of the probes is left running in the nodes.
    left = subprocess.run(["pgrep", "-af", "iperf3 --server"], capture_output=True, text=True).stdout
    assert names.node_ns(TWO, "gpu-0") not in left and not [l for l in left.splitlines() if "acceptance" in l]


def test_a_rail_slowed_in_a_node_is_the_only_one_flagged(two):
    dev = netdev(two, "gpu-0", 3)
    # `railyard lab fault link-slow`: a token bucket on the node's netdev, whose burst is above the
    # MTU: the pings pass, the bandwidth does not.
    made = lab_fault(two, "link-slow", "gpu-0", dev, "20")
    assert made == f"gpu-0: {dev} slowed to 20 Mbit/s\n"
    assert "tbf" in in_node(two, "gpu-0", "tc", "qdisc", "show", "dev", dev).stdout
    # A second token bucket on the same rail is refused, and nothing changes.
    again = two.railyard("lab", "fault", "--stack", TWO, "link-slow", "gpu-0", dev, "50")
    assert again.returncode != 0 and "slowed already" in again.stderr
    try:
        proc = rerun(two, check=False)
        assert proc.returncode != 0
        found = set(re.findall(r"^\s+(gpu-\d+) rail(\d+): ([\w-]+):", proc.stdout + proc.stderr, re.M))
        # gpu-0's probe on rail 3 is slow; so may gpu-1's be, whose acknowledgements gpu-0 sends
        # through the same queue. No other rail, and nothing but bandwidth.
        assert ("gpu-0", "3", "bandwidth") in found and {(rail, check) for _, rail, check in found} == \
            {("3", "bandwidth")}, proc.stdout[-3000:] + proc.stderr[-2000:]
    finally:
        assert lab_fault(two, "--clear") == f"cleared: gpu-0: {dev} slowed to 20 Mbit/s\n"
    assert "tbf" not in in_node(two, "gpu-0", "tc", "qdisc", "show", "dev", dev).stdout


def test_a_rail_taken_down_fails_up_naming_node_and_rail(two):
    dev = netdev(two, "gpu-1", 5)
    in_node(two, "gpu-1", "ip", "link", "set", dev, "down")
    try:
        proc = rerun(two, check=False)
        text = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "acceptance failed" in text
        assert "gpu-1 rail5: rail-mtu" in text and "gpu-0 rail5: rail-mtu" in text, text[-3000:]
        assert not re.search(r"gpu-\d+ rail[0-46-7]:", text)  # the other rails passed
    finally:
        in_node(two, "gpu-1", "ip", "link", "set", dev, "up")
    rerun(two)
    assert two.outputs()["acceptance"]["passed"]


def test_a_clean_eight_node_run_passes(eight):
    out = eight.outputs()["acceptance"]
    assert out["passed"] and out["rail_pairs"] == 64 and out["drained"] == [], out


def test_cordon_drains_the_failed_node_in_slurm_with_the_finding_and_up_goes_on(eight):
    dev = netdev(eight, "gpu-3", 2)
    in_node(eight, "gpu-3", "ip", "link", "set", dev, "down")
    try:
        rerun(eight)  # succeeds: cordon
        out = eight.outputs()["acceptance"]
        assert not out["passed"] and out["drained"] == ["gpu-3"], out
        assert [(f["node"], f["rail"], f["check"]) for f in out["findings"]] == [("gpu-3", 2, "rail-mtu")]
        reasons = eight.ssh("gpu-0", "sinfo --noheader --list-reasons --format '%N|%E'").stdout
        assert re.search(r"^gpu-3\|railyard: acceptance: gpu-3 rail2: rail-mtu", reasons, re.M), reasons
        state = eight.ssh("gpu-0", "sinfo --noheader --Node --nodes gpu-3 --format %T").stdout.strip()
        assert state in ("drained", "draining"), state
    finally:
        in_node(eight, "gpu-3", "ip", "link", "set", dev, "up")
