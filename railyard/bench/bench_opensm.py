"""OpenSM section: the us-east-bm pod (448 DGX H100: 3,584 compute HCA ports, 304 switches)
simulated by ibsim and swept once by OpenSM (railyard.sweep), with the root GUIDs Railyard gives
it and without them, where ftree refuses the partial last spine group. Figures: the sweep, every
step (discovery, sweep, the checks), and ibsim's peak memory; the engine OpenSM used is the note.
Quick mode sweeps 36 nodes (spine groups of 4, 4 and 1 scalable units) instead.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from railyard.bench.harness import Context, Sample, Section
from railyard.model import yamlio
from railyard.stack import load
from railyard.sweep import sweep

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "stacks" / "Pulumi.us-east-bm.yaml"
TARGET_SWEEP_448_S = 60.0


def _quick_stack(workdir: Path) -> Path:
    doc = yamlio.load((ROOT / "stacks" / "Pulumi.lab.yaml").read_text())
    doc["config"]["railyard:nodePools"][0]["count"] = 36
    doc["config"]["railyard:fabric"]["compute"]["reservedLeafPorts"] = 28
    path = workdir / "Pulumi.bench-opensm36.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run(ctx: Context):
    path = _quick_stack(ctx.workdir) if ctx.quick else STACK
    spec, plan = load(str(path))
    n = plan.fabric.nodes
    for roots, label in ((None, "root GUIDs as Railyard chooses"), (False, "no root GUIDs")):
        report = sweep(plan.fabric, spec.tenants, roots=roots, check_pkeys=False)
        if report.cabling or not all(h.ok for h in report.hops):
            raise RuntimeError(f"the {n}-node sweep disagrees with the plan: {report.problems()[:3]}")
        note = f"engine {report.engine}" + (f" ({report.refusals[0]})" if report.refusals else "")
        target = TARGET_SWEEP_448_S if n == 448 and roots is None else None
        yield Sample(f"{n} nodes, {label}: OpenSM sweep", report.seconds, "s", target=target, note=note)
        yield Sample(f"{n} nodes, {label}: all steps", report.total_seconds, "s")
        if report.ibsim_rss_kib:
            yield Sample(f"{n} nodes, {label}: ibsim peak RSS", report.ibsim_rss_kib / 1024, "MiB")


# Issue 40: holding the 448-node pod's subnet (10,752 cables) against its plan.
TARGET_VERIFY_448_S = 5.0


def verify_pod(ctx: Context):
    """`railyard fabric verify` of the pod's subnet, given as ibnetdiscover prints it (the plan's
    own topology with two HCAs' cables swapped): reading the dump, then the comparison."""
    import time

    from railyard.model.fabric import subnet as sn
    from railyard.model.fabric.verify import verify

    _, plan = load(str(STACK))
    text = sn.topology_text(plan.fabric)
    hcas = sn.compute_hcas(plan.fabric)
    (a, *_), _, _, _, (b, *_) = (next(hcas) for _ in range(5))  # node 0's rail-0 and rail-4 HCAs
    text = text.replace(f'"{a}"', "\0").replace(f'"{b}"', f'"{a}"').replace("\0", f'"{b}"')
    started = time.perf_counter()
    subnet = sn.parse_ibnetdiscover(text)
    read = time.perf_counter() - started
    findings = verify(plan.fabric, subnet)
    total = time.perf_counter() - started
    if [f.kind for f in findings] != ["cable-swapped"]:
        raise RuntimeError(f"the pod's verify found {[str(f) for f in findings[:3]]}, not the one swap")
    note = f"{len(subnet.cables):,} cables"
    yield Sample(f"{plan.fabric.nodes} nodes: read the dump and compare", total, "s", target=TARGET_VERIFY_448_S,
                 note=note)
    yield Sample(f"{plan.fabric.nodes} nodes: the comparison alone", total - read, "s")


SECTIONS = (Section("opensm", "the 448-node pod simulated by ibsim and swept by OpenSM, with and without root GUIDs", run),
            Section("fabric-verify", "the 448-node pod's subnet (an ibnetdiscover dump) held against its plan",
                    verify_pod))
