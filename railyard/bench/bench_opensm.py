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


def verify_pod_lldp(ctx: Context):
    """The same pod on a routed 400GbE RoCE fabric (its compute fabric swapped for SN5600 leaves and
    spines, 1:1): every node's LLDP neighbours and every switch's table as lldpd would show the
    plan's cabling, with two uplinks exchanged at a spine, held against the plan from both sides."""
    import copy
    import time

    from railyard.model.fabric.routing import port_netdev
    from railyard.model.fabric.verify import verify_lldp
    from railyard.model.plan import make_plan
    from railyard.stack import parse_config
    from railyard.verify import planned_netdevs

    config = copy.deepcopy(yamlio.load(STACK.read_text())["config"])
    config.pop("railyard:tenants", None)  # partition keys are InfiniBand's
    config["railyard:fabric"]["compute"] = {"kind": "roce", "speed": "400gbe", "switch": "sn5600",
                                            "topology": "rail-optimized", "oversubscription": 1, "cidr": "10.64.0.0/14",
                                            "asnBase": 4200000000}
    plan = make_plan(parse_config(config, stack="bench-lldp"))
    g = plan.fabric.switch
    links = list(plan.fabric.links())
    up = [lk for lk in links if lk.tier != "node_leaf"]
    # Two uplinks exchanged at their spine: each leaf port now hears the other's spine port.
    swap = {(up[0].b_device, up[0].b_port): (up[1].b_device, up[1].b_port),
            (up[1].b_device, up[1].b_port): (up[0].b_device, up[0].b_port)}
    netdev = {(n.name, x.name): x.netdev or x.name for n in plan.nodes for x in n.nics}
    facts = {n.name: {"nics": [{"name": x.name, "netdev": x.netdev} for x in n.nics],
                      "lldp": {"neighbours": {x.netdev: [{"system": x.leaf, "port": port_netdev(g, x.leaf_port)}]
                                              for x in n.nics}}} for n in plan.nodes}
    tables: dict[str, dict[str, list]] = {}

    def hears(at: tuple[str, int], system: str, port: str) -> None:
        tables.setdefault(at[0], {}).setdefault(port_netdev(g, at[1]), []).append({"system": system, "port": port})

    for lk in links:
        b = swap.get((lk.b_device, lk.b_port), (lk.b_device, lk.b_port))
        if lk.tier == "node_leaf":
            hears(b, lk.a_device, netdev[(lk.a_device, lk.a_port)])
        else:
            hears(b, lk.a_device, port_netdev(g, lk.a_port))
            hears((lk.a_device, lk.a_port), b[0], port_netdev(g, b[1]))
    started = time.perf_counter()
    findings, *_ = verify_lldp(plan.fabric, facts, tables, planned_netdevs(plan))
    took = time.perf_counter() - started
    if [f.kind for f in findings] != ["cable-swapped"]:
        raise RuntimeError(f"the pod's LLDP verify found {[str(f) for f in findings[:3]]}, not the one swap")
    yield Sample(f"{plan.fabric.nodes} nodes on RoCE: both sides' LLDP compared", took, "s", target=TARGET_VERIFY_448_S,
                 note=f"{len(links):,} cables, {len(tables)} switches' tables")


SECTIONS = (Section("opensm", "the 448-node pod simulated by ibsim and swept by OpenSM, with and without root GUIDs", run),
            Section("fabric-verify", "the 448-node pod's subnet (an ibnetdiscover dump) held against its plan",
                    verify_pod),
            Section("fabric-verify-lldp", "the 448-node pod on a RoCE fabric held against its plan from the nodes' "
                                          "LLDP neighbours and the switches' tables", verify_pod_lldp))
