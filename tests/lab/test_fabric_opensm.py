"""The planned InfiniBand fabric judged by OpenSM: ibsim serves the plan, OpenSM sweeps it once
with the options Railyard chose, and infiniband-diags check the result (railyard.sweep).

Simulated only: no lab node is created. Each simulation has its own abstract socket name and work
directory, so these run beside a lab stack and beside each other.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from railyard.model.fabric import subnet as sn
from railyard.stack import load
from railyard.sweep import Simulator, SimulatorError, sweep

ROOT = Path(__file__).resolve().parents[2]


def stack(tmp_path: Path, nodes: int | list[int], reserved: int = 0, tenants: list[dict] | None = None):
    """The default lab stack resized: one pool per count, every pool dgx-h100."""
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.lab.yaml").read_text())
    cfg = doc["config"]
    counts = [nodes] if isinstance(nodes, int) else nodes
    cfg["railyard:nodePools"] = [{"name": name, "sku": "dgx-h100", "count": n}
                                 for name, n in zip(("gpu", "b"), counts)]
    cfg["railyard:fabric"]["compute"]["reservedLeafPorts"] = reserved
    if tenants is not None:
        cfg["railyard:tenants"] = tenants
    path = tmp_path / f"Pulumi.t-sweep-{'-'.join(map(str, counts))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load(str(path))


def leftovers() -> dict[str, list[str]]:
    """What a simulation of this process could leave: ibsim processes, abstract sockets, OpenSM's
    default state files."""
    mine = f"railyard-{os.getpid()}-"
    procs = []
    for stat in glob.glob("/proc/[0-9]*/environ"):
        try:
            if mine.encode() in Path(stat).read_bytes():
                procs.append(stat.split("/")[2])
        except OSError:
            continue
    sockets = [line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines() if f"@{mine}" in line]
    state = sorted(glob.glob("/var/cache/opensm/*") + glob.glob("/var/log/opensm*"))
    return {"processes": procs, "sockets": sockets, "opensm_state": state}


@pytest.fixture
def clean():
    before = leftovers()
    assert not before["processes"] and not before["sockets"]
    yield
    after = leftovers()
    assert after["processes"] == [] and after["sockets"] == []
    assert after["opensm_state"] == before["opensm_state"], "OpenSM wrote to /var/cache/opensm or /var/log"


@pytest.mark.parametrize("nodes, reserved, tiers, roots", [
    (2, 0, 2, False),     # the default lab stack: 8 leaves, 4 spines
    (12, 28, 2, False),   # 3 scalable units of 4
    (36, 28, 3, True),    # 9 SUs in spine groups of 4, 4 and 1: three tiers, not a pure fat tree
])
def test_ftree_routes_the_planned_fabric_and_it_is_the_plan(tmp_path, clean, nodes, reserved, tiers, roots):
    spec, plan = stack(tmp_path, nodes, reserved)
    report = sweep(plan.fabric, spec.tenants, workdir=tmp_path / "sim")
    assert report.problems() == []
    assert report.engine == "ftree" and report.refusals == []
    assert report.tiers == tiers and report.root_guids is roots
    assert (report.hcas, report.switches) == (nodes * 8, plan.fabric.summary()["switches"]["total"])
    assert report.cabling == []
    traced = {h.label: h.traced for h in report.hops}
    want = {"same rail and leaf": 1, "another rail, same node": 3}
    if nodes > 4 and reserved:
        want["same rail, another scalable unit"] = 3
    if tiers == 3:
        want["same rail, another spine group"] = 5
        want["another rail, another spine group"] = 5
    assert traced == want
    # Every compute port holds exactly its tenants' keys (the default lab stack: research, 0x8001).
    assert report.pkeys_checked == nodes * 8 and report.pkey_mismatches == {}
    log = (tmp_path / "sim" / "opensm.log").read_text()
    assert "ftree tables configured on all switches" in log and "minhop" not in log


def test_an_xdr_scalable_unit_of_b300_on_quantum_x800_is_swept_and_its_rates_said(tmp_path, clean):
    # NVIDIA's DGX B300 SuperPOD unit: 72 nodes, 8 rails of XDR on 144-port leaves, 4 spines.
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.lab.yaml").read_text())
    cfg = doc["config"]
    cfg["railyard:nodePools"] = [{"name": "b300", "sku": "hgx-b300", "count": 72}]
    cfg["railyard:fabric"]["compute"].update(speed="xdr", switch="q3400")
    path = tmp_path / "Pulumi.t-sweep-xdr.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec, plan = load(str(path))
    report = sweep(plan.fabric, spec.tenants, workdir=tmp_path / "sim")
    assert report.problems() == [] and report.engine == "ftree"
    assert (report.hcas, report.switches) == (576, 12) and report.cabling == []
    assert {h.label: h.traced for h in report.hops} == {"same rail and leaf": 1, "another rail, same node": 3}
    # ibsim cannot train XDR: the cabling and routing are swept as planned, the speed is not judged.
    assert report.planned_rate == "4xXDR" and report.trained_rates and "4xXDR" not in report.trained_rates


def test_without_root_guids_ftree_falls_back_on_a_partial_spine_group(tmp_path, clean):
    # The finding of docs/fabric.md: the last group's spines have 8 leaves below, the others 32;
    # ftree refuses the tree as not pure and OpenSM quietly routes min-hop instead.
    spec, plan = stack(tmp_path, 36, 28)
    report = sweep(plan.fabric, spec.tenants, roots=False, check_pkeys=False)
    assert report.engine == "minhop" and not report.ok
    assert any("Different number of downward port groups" in r for r in report.refusals)
    assert report.problems()[0].startswith("OpenSM routed with minhop, not ftree")
    assert report.cabling == []  # the cabling is still the plan; only the routing engine changed


def test_partitions_land_on_exactly_their_tenants_ports(tmp_path, clean):
    tenants = [{"name": "alpha", "pkey": "0x8005", "pools": ["gpu"]},       # full member, one pool
               {"name": "beta", "pkey": "0x0006", "pools": ["gpu", "b"]}]   # limited, every pool
    spec, plan = stack(tmp_path, [2, 2], tenants=tenants)
    report = sweep(plan.fabric, spec.tenants, workdir=tmp_path / "sim")
    assert report.problems() == [] and report.pkeys_checked == 32
    conf = (tmp_path / "sim" / "opensm" / "partitions.conf").read_text().splitlines()
    alpha = next(line for line in conf if line.startswith("alpha="))
    assert alpha.count("=full") == 16 and "beta=0x0006, ipoib, mtu=5 : ALL_CAS=limited ;" in conf
    # The keys themselves, as smpquery read them from the HCAs' P_Key tables after the sweep: a
    # port of pool gpu holds alpha's (full) and beta's (limited), one of pool b only beta's, and
    # every compute port is a limited member of the default partition but the SM's own.
    assert report.pkeys["gpu-1 mlx5_3"] == {0x7FFF, 0x8005, 0x0006}
    assert report.pkeys["b-0 mlx5_3"] == {0x7FFF, 0x0006}
    assert report.pkeys["gpu-0 mlx5_0"] == {0xFFFF, 0x8005, 0x0006}
    assert sum(1 for keys in report.pkeys.values() if 0x8005 in keys) == 16


def test_swapped_cables_are_caught_and_named(tmp_path, clean):
    spec, plan = stack(tmp_path, 2)
    text = sn.topology_text(plan.fabric)
    a, b = "gpu-0 mlx5_4", "gpu-1 mlx5_5"  # rail 2 on leaf 2 port 1, rail 3 on leaf 3 port 2
    damaged = text.replace(f'"{a}"', "\0").replace(f'"{b}"', f'"{a}"').replace("\0", f'"{b}"')
    report = sweep(plan.fabric, spec.tenants, topology=damaged, check_pkeys=False)
    assert report.engine == "ftree"  # still a fat tree: only the rails are crossed
    assert [(f.kind, str(f)) for f in report.cabling] == [(
        "cable-swapped",
        "gpu-0 mlx5_4 port 1 and gpu-1 mlx5_5 port 1: gpu-0 mlx5_4 port 1 to gpu-su0-leaf3 port 2, "
        "gpu-1 mlx5_5 port 1 to gpu-su0-leaf2 port 1, planned gpu-0 mlx5_4 port 1 to gpu-su0-leaf2 port 1, "
        "gpu-1 mlx5_5 port 1 to gpu-su0-leaf3 port 2")]
    assert not report.ok


def test_a_simulator_that_dies_leaves_nothing(tmp_path, clean):
    spec, plan = stack(tmp_path, 2)
    topo = tmp_path / "t.net"
    topo.write_text(sn.topology_text(plan.fabric))
    # Too few ports for the fabric: ibsim panics while loading it.
    with pytest.raises(SimulatorError, match="ibsim exited"):
        Simulator(topo, tmp_path / "w", {"nodes": 64, "switches": 16, "ports": 100}).start()
    sim = Simulator(topo, tmp_path / "w2", sn.simulator_limits(plan.fabric))
    with pytest.raises(RuntimeError, match="a failed check"):
        with sim:
            pid = sim.proc.pid
            assert Path(f"/proc/{pid}").exists()
            with pytest.raises(SimulatorError, match="already running"):
                sim.start()
            raise RuntimeError("a failed check")
    assert not Path(f"/proc/{pid}").exists()


def test_the_command_prints_the_report_and_exits_by_its_result(tmp_path, clean, capsys):
    from railyard.cli import main

    assert main(["fabric", "sweep", str(ROOT / "stacks" / "Pulumi.lab.yaml")]) == 0
    out = capsys.readouterr().out
    assert "routing     ftree (roots found by ftree)" in out and "cabling     as planned" in out
    assert "partitions  16 HCAs' P_Key tables read, 0 wrong" in out and out.rstrip().endswith("every check passed")
    stack(tmp_path, 36, 28)  # writes Pulumi.t-sweep-36.yaml
    spec_path = tmp_path / "Pulumi.t-sweep-36.yaml"
    assert main(["fabric", "sweep", "--roots", "no", "--no-pkeys", "--json", str(spec_path)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["engine"] == "minhop" and report["ok"] is False and report["cabling"]["ok"] is True
    assert main(["fabric", "sweep", str(ROOT / "stacks" / "Pulumi.us-south-vela.yaml")]) == 1
    assert "OpenSM sweeps InfiniBand fabrics only" in capsys.readouterr().err


def test_a_killed_sweep_leaves_no_simulator(tmp_path):
    # SIGKILL gives Python no chance to clean up; the kernel's parent-death signal still does.
    code = ("import sys, time\nfrom pathlib import Path\nfrom railyard.model.fabric import subnet as sn\n"
            "from railyard.stack import load\nfrom railyard.sweep import Simulator\n"
            "_, plan = load(sys.argv[1]); t = Path(sys.argv[2]); t.write_text(sn.topology_text(plan.fabric))\n"
            "sim = Simulator(t, t.parent / 'w', sn.simulator_limits(plan.fabric)); sim.start()\n"
            "print(sim.proc.pid, flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(ROOT / "stacks" / "Pulumi.lab.yaml"),
                              str(tmp_path / "t.net")], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        pid = int(child.stdout.readline())
        assert Path(f"/proc/{pid}").exists()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists(), "ibsim outlived the killed process that started it"


def test_a_partitions_file_opensm_rejects_is_caught(tmp_path, clean):
    # A Railyard bug would read so: OpenSM logs the line it rejects and sweeps on without it.
    from railyard.sweep import _PARSE, write_opensm_files

    spec, plan = stack(tmp_path, 2)
    topo = tmp_path / "t.net"
    topo.write_text(sn.topology_text(plan.fabric))
    with Simulator(topo, tmp_path / "w", sn.simulator_limits(plan.fabric)) as sim:
        subnet = sn.parse_ibnetdiscover(sim.ibnetdiscover())
        write_opensm_files(plan.fabric, spec.tenants, subnet, tmp_path / "o", extra={
            "log_file": str(tmp_path / "osm.log"), "accum_log_file": "FALSE", "dump_files_dir": str(tmp_path)})
        good = (tmp_path / "o" / "partitions.conf").read_text()
        (tmp_path / "o" / "partitions.conf").write_text(good + "broken=0x0009, nosuchflag : 0xzz=full ;\n")
        sim.opensm(tmp_path / "o" / "opensm.conf")
    errors = _PARSE.findall((tmp_path / "osm.log").read_text())
    assert errors and all("line" in e for e in errors), errors
