"""A subnet held against its plan for real (issue 40, section 2): ibsim serves the planned fabric
with faults injected into its description, ibnetdiscover (infiniband-diags) discovers it, and
`railyard fabric verify` finds each fault and nothing else.

The plan is the default lab stack on an HDR fabric (QM8700 leaves): ibsim 0.10 trains links at
the width and speed a port line gives (`lid 0 4xHDR`) up to HDR, so a narrow or slow link shows
as it would on real hardware. An NDR plan trains at ibsim's default, 4xSDR: every link is a
link-speed finding and the cabling is judged all the same. Simulated only: no lab node is made.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from railyard.model.fabric import subnet as sn
from railyard.model.fabric.verify import verify
from railyard.stack import load
from railyard.sweep import Simulator

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hdr(tmp_path_factory):
    """The default lab stack's file, on an HDR fabric, and its plan."""
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.lab.yaml").read_text())
    doc["config"]["railyard:fabric"]["compute"].update(speed="hdr", switch="qm8700")
    path = tmp_path_factory.mktemp("verify") / "Pulumi.t-verify-hdr.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, load(str(path))[1]


def discovered(fabric, text: str, work: Path) -> str:
    """ibnetdiscover's output for the fabric ibsim builds from `text`."""
    work.mkdir(parents=True, exist_ok=True)
    topo = work / "topology.net"
    topo.write_text(text)
    with Simulator(topo, work, sn.simulator_limits(fabric)) as sim:
        return sim.ibnetdiscover()


def block(text: str, device: str) -> tuple[int, int]:
    """Where a device's record (header and port lines) starts and ends in a topology file."""
    start = text.index(f'"{device}"\t\t# "{device}"\n')
    start = text.rfind("\n", 0, start) + 1  # 0: the first record
    return start, text.index("\n\n", start)


def edit_line(text: str, device: str, port: int, new: str | None) -> str:
    """Replace (or with None remove) port line `[port]` of a device's record."""
    start, end = block(text, device)
    lines = text[start:end].split("\n")
    kept = [line for line in lines if not line.startswith(f"[{port}]\t")]
    assert len(kept) == len(lines) - 1, (device, port)
    if new is not None:
        kept.append(new)
    return text[:start] + "\n".join(kept) + text[end:]


def faulty(fabric) -> str:
    """The plan's topology with four faults, each on both ends of its cable:
    gpu-0 and gpu-1's rail-0 cables exchanged on their leaf; gpu-1's rail-7 cable pulled;
    gpu-0's rail-3 link at 2x (both ports enabled for 2x only); gpu-1's rail-3 HCA enabled for EDR
    only, so its link trains at EDR."""
    t = sn.topology_text(fabric)
    leaf0, leaf3, leaf7 = "gpu-su0-leaf0", "gpu-su0-leaf3", "gpu-su0-leaf7"
    a, b = "gpu-0 mlx5_0", "gpu-1 mlx5_0"
    t = edit_line(t, a, 1, f'[1]\t"{leaf0}"[2]\t\t# lid 0 4xHDR')
    t = edit_line(t, b, 1, f'[1]\t"{leaf0}"[1]\t\t# lid 0 4xHDR')
    t = edit_line(t, leaf0, 1, f'[1]\t"{b}"[1]\t\t# "{b}" lid 0 4xHDR')
    t = edit_line(t, leaf0, 2, f'[2]\t"{a}"[1]\t\t# "{a}" lid 0 4xHDR')
    t = edit_line(edit_line(t, "gpu-1 mlx5_11", 1, None), leaf7, 2, None)
    t = edit_line(t, "gpu-0 mlx5_5", 1, f'[1]\t"{leaf3}"[1]\t\t# lid 0 2xHDR')
    t = edit_line(t, leaf3, 1, '[1]\t"gpu-0 mlx5_5"[1]\t\t# "gpu-0 mlx5_5" lid 0 2xHDR')
    t = edit_line(t, "gpu-1 mlx5_5", 1, f'[1]\t"{leaf3}"[2]\t\t# lid 0 4xEDR')
    return t


def test_a_clean_subnet_verifies_as_planned(hdr, tmp_path):
    _, plan = hdr
    subnet = sn.parse_ibnetdiscover(discovered(plan.fabric, sn.topology_text(plan.fabric), tmp_path))
    assert {d.desc for d in subnet.devices.values()} >= {"gpu-0 mlx5_0", "gpu-su0-leaf0", "spine0"}
    assert set(subnet.named_rates().values()) == {"4xHDR"}
    assert verify(plan.fabric, subnet) == []


def test_each_injected_fault_is_found_and_nothing_else(hdr, tmp_path):
    path, plan = hdr
    dump = tmp_path / "ibnetdiscover.txt"
    dump.write_text(discovered(plan.fabric, faulty(plan.fabric), tmp_path / "sim"))
    done = subprocess.run([sys.executable, "-m", "railyard.cli", "fabric", "verify", "--ibnetdiscover", str(dump),
                           "--json", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1, done.stderr
    assert [(f["kind"], f["where"]) for f in json.loads(done.stdout)] == [
        ("cable-swapped", "gpu-0 mlx5_0 port 1 and gpu-1 mlx5_0 port 1"),
        ("link-missing", "gpu-1 mlx5_11 port 1 <-> gpu-su0-leaf7 port 2"),
        ("link-width", "gpu-0 mlx5_5 port 1 <-> gpu-su0-leaf3 port 1"),
        ("link-speed", "gpu-1 mlx5_5 port 1 <-> gpu-su0-leaf3 port 2"),
    ]


def test_an_ndr_plan_on_ibsim_is_judged_on_its_cabling_with_speed_apart(tmp_path):
    _, plan = load(str(ROOT / "stacks" / "Pulumi.lab.yaml"))
    findings = verify(plan.fabric, sn.parse_ibnetdiscover(
        discovered(plan.fabric, sn.topology_text(plan.fabric), tmp_path)))
    assert {f.kind for f in findings} == {"link-speed"}
    assert {(f.planned, f.found) for f in findings} == {("NDR", "trained at SDR")}
