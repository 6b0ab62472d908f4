"""The lab's subnet edits (railyard.drivers.lab.subnet): a fault cabled into the planned topology is
found by the fabric verify as exactly that fault. The topology file is ibnetdiscover's own grammar,
so it is read here as a dump would be; the lab tier runs it through ibsim and ibnetdiscover."""

from __future__ import annotations

from pathlib import Path

import pytest

from railyard.drivers.lab import subnet
from railyard.model.fabric.subnet import End, hca_name, parse_ibnetdiscover
from railyard.stack import load
from railyard.verify import fabric as fabric_findings

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def plan():
    return load(ROOT / "stacks" / "Pulumi.lab.yaml")[1]


def _found(plan, text: str, judged: bool = False) -> list[tuple[str, str, str | None]]:
    return [(f.kind, f.where, f.node) for f in fabric_findings(plan, parse_ibnetdiscover(text), speeds_judged=judged)]


def test_the_planned_subnet_of_an_ndr_lab_is_cabled_at_hdr_and_found_as_planned(plan):
    rate, judged = subnet.simulated_rate(plan.fabric)
    assert (rate, judged) == ("4xHDR", False)  # ibsim 0.10 trains at most HDR
    text = subnet.planned(plan.fabric)
    assert "4xNDR" not in text
    assert _found(plan, text) == []
    # Judged on speed, every cable would be a finding: the reading says speeds are not judged.
    assert {k for k, _, _ in _found(plan, text, judged=True)} == {"link-speed"}


def test_two_rails_of_a_node_exchanged_are_one_swap_on_that_node(plan):
    a, b = End(hca_name("gpu-1", "mlx5_0"), 1), End(hca_name("gpu-1", "mlx5_3"), 1)
    text = subnet.swap(subnet.planned(plan.fabric), a, b)
    assert _found(plan, text) == [("cable-swapped", f"{a} and {b}", "gpu-1")]
    # Swapping back gives the plan's file again, byte for byte.
    assert subnet.swap(text, a, b) == subnet.planned(plan.fabric)


def test_an_unplugged_cable_is_missing_and_a_narrow_one_is_a_width_finding(plan):
    a = End(hca_name("gpu-0", "mlx5_4"), 1)
    far = subnet.far_end(subnet.planned(plan.fabric), a)
    gone = subnet.unplug(subnet.planned(plan.fabric), a)
    assert _found(plan, gone) == [("link-missing", f"{min(a, far)} <-> {max(a, far)}", "gpu-0")]
    narrow = subnet.retrain(subnet.planned(plan.fabric), a, "2xHDR")
    assert [(k, n) for k, _, n in _found(plan, narrow)] == [("link-width", "gpu-0")]


def test_an_end_the_subnet_has_no_cable_on_is_refused_by_name(plan):
    with pytest.raises(KeyError, match="no cable on gpu-9 mlx5_0 port 1"):
        subnet.swap(subnet.planned(plan.fabric), End("gpu-9 mlx5_0", 1), End(hca_name("gpu-0", "mlx5_0"), 1))


def test_a_swap_of_two_nodes_cables_is_one_fault_found_as_one_swap_and_cleared_with_either(plan, tmp_path, monkeypatch):
    from railyard.drivers.lab import faults, hwtree
    from railyard.drivers.lab.node.config import node_dir
    from railyard.model.catalog import load_catalog

    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    for node in ("gpu-0", "gpu-1"):
        hwtree.build_hwtree(load_catalog().nodes["dgx-h100"], node_dir("tswap", node) / "hwtree")
    said = faults.inject("tswap", plan, "cable-swap", ["gpu-0", "mlx5_5", "gpu-1:mlx5_5"])
    assert said == "gpu-0: the cables of mlx5_5 and gpu-1's mlx5_5 exchanged"
    a, b = End(hca_name("gpu-0", "mlx5_5"), 1), End(hca_name("gpu-1", "mlx5_5"), 1)
    assert _found(plan, subnet.path("tswap").read_text()) == [("cable-swapped", f"{a} and {b}", "gpu-0")]
    with pytest.raises(faults.FaultError, match="no node gpu-7"):
        faults.inject("tswap", plan, "cable-swap", ["gpu-0", "mlx5_5", "gpu-7:mlx5_5"])
    assert faults.clear("tswap", plan, "gpu-0") == [said]
    assert not subnet.path("tswap").exists()  # the plan's subnet again


def test_a_slowed_link_with_a_bad_rate_or_device_is_refused_before_anything_changes(plan, tmp_path, monkeypatch):
    from railyard.drivers.lab import faults, hwtree
    from railyard.drivers.lab.node.config import node_dir
    from railyard.model.catalog import load_catalog

    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    hwtree.build_hwtree(load_catalog().nodes["dgx-h100"], node_dir("tslow", "gpu-0") / "hwtree")
    for rate in ("0", "fast", "1.5"):
        with pytest.raises(faults.FaultError, match="link-slow takes a rate in Mbit/s"):
            faults.inject("tslow", plan, "link-slow", ["gpu-0", "mlx5_3", rate])
    with pytest.raises(faults.FaultError, match="has no RDMA device or rail netdev mlx5_99"):
        faults.inject("tslow", plan, "link-slow", ["gpu-0", "mlx5_99", "100"])
    with pytest.raises(faults.FaultError, match="outlives a reboot"):
        faults.inject("tslow", plan, "link-slow", ["gpu-0", "mlx5_3", "100"], transient=True)
    assert faults.faults("tslow") == []


def test_a_rails_far_end_is_found_among_its_own_nodes_ports_only():
    """Interface numbers repeat across namespaces (two nodes' NICs, two leaves' ports), so the far
    end of a node's veth is one of that node's own ports (names.node_port), never another node's
    whose name starts the same."""
    from railyard.drivers.lab.faults import _owns

    assert _owns("gpu-1", "gpu-1-r0") and _owns("gpu-1", "gpu-1-m") and _owns("gpu-1", "gpu-1-r12")
    assert not _owns("gpu", "gpu-1-r0") and not _owns("gpu-1", "gpu-10-r0") and not _owns("gpu-1", "swp1s0")
    assert not _owns("gpu-1", "gpu-1-rx")
