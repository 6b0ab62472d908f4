"""The planned InfiniBand fabric judged by its own software: ibsim simulates it, OpenSM sweeps it,
and the infiniband-diags tools check what OpenSM made of it against the plan.

`sweep` follows the steps an operator takes on a real subnet, in order: discover the subnet
(`ibnetdiscover`, before any SM), write OpenSM's files from the plan and that discovery
(railyard.model.fabric.subnet: partitions by port GUID, root GUIDs where the tree is not pure),
run one OpenSM sweep with the options Railyard chose, then discover again and check:

* the routing engine OpenSM says configured the switches (ftree falls back to min-hop silently,
  so its log is the evidence), and that its parser took Railyard's partitions.conf whole;
* the cabling: every planned cable and no other (`ibnetdiscover`);
* the hops: `ibtracert` between probe pairs takes the planned number of switches;
* the partitions: each compute port's P_Key table (`smpquery pkeys`) holds its tenants' keys.

`railyard fabric sweep STACKFILE` prints the report; the lab test and the bench call `sweep`.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from railyard.model.fabric import subnet as sn
from railyard.model.fabric.verify import Finding, verify
from railyard.sweep.simulator import Simulator, SimulatorError, tools

if TYPE_CHECKING:
    from railyard.model.fabric import FabricPlan
    from railyard.model.spec.types import Tenant

__all__ = ["SweepReport", "Simulator", "SimulatorError", "sweep", "tools", "write_opensm_files"]

_CONFIGURED = re.compile(r"osm_ucast_mgr_process: (\S+) tables configured on all switches")
# OpenSM's partition parser reports a line it rejects (or half-takes) so, and carries on without it.
_PARSE = re.compile(r"PARSE (?:ERROR|WARN)[^\n]*")
_FTREE_REFUSAL = re.compile(r"(fabric_validate_topology: ERR \w+: .*|Fabric topology is not a fat-tree"
                            r"|ftree: cannot build lid matrices)")


@dataclass
class Hop:
    label: str
    a: str
    b: str
    planned: int
    traced: int | None

    @property
    def ok(self) -> bool:
        return self.planned == self.traced


@dataclass
class SweepReport:
    nodes: int
    hcas: int
    switches: int
    tiers: int
    engine: str | None                  # what OpenSM's log says configured the switches
    root_guids: bool                    # whether OpenSM was told the roots
    refusals: list[str]                 # ftree's reasons, when it refused the fabric
    config_errors: list[str]            # what OpenSM's parser rejected in Railyard's files: a bug
    seconds: float                      # the OpenSM sweep
    total_seconds: float
    ibsim_rss_kib: int | None
    cabling: list[Finding]             # the subnet against the plan (verify), but for speed: see sweep()
    hops: list[Hop] = field(default_factory=list)
    pkeys_checked: int = 0
    pkey_mismatches: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    pkeys: dict[str, set[int]] = field(default_factory=dict)  # what each HCA's P_Key table holds
    planned_rate: str = ""                                      # the plan's, `4xXDR`
    trained_rates: list[str] = field(default_factory=list)      # what ibsim's links trained at

    @property
    def ok(self) -> bool:
        return (self.engine == sn.ROUTING_ENGINE and not self.config_errors and not self.cabling
                and all(h.ok for h in self.hops) and not self.pkey_mismatches)

    def problems(self) -> list[str]:
        out = [f"OpenSM rejected Railyard's partitions: {e}" for e in self.config_errors]
        if self.engine != sn.ROUTING_ENGINE:
            why = f" ({'; '.join(self.refusals[:3])})" if self.refusals else ""
            out.append(f"OpenSM routed with {self.engine or 'nothing'}, not {sn.ROUTING_ENGINE}{why}")
        out += [str(f) for f in self.cabling]
        out += [f"{h.label}: {h.a} -> {h.b} " + (f"took {h.traced} switches" if h.traced is not None
                                                  else "could not be traced") + f", planned {h.planned}"
                for h in self.hops if not h.ok]
        for name, (want, got) in sorted(self.pkey_mismatches.items()):
            out.append(f"{name}: P_Keys {', '.join(got) or 'none'}, planned {', '.join(want)}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes, "hcas": self.hcas, "switches": self.switches, "tiers": self.tiers,
            "engine": self.engine, "root_guids": self.root_guids, "refusals": self.refusals,
            "config_errors": self.config_errors,
            "sweep_seconds": round(self.seconds, 3), "total_seconds": round(self.total_seconds, 3),
            "ibsim_peak_rss_kib": self.ibsim_rss_kib,
            "rates": {"planned": self.planned_rate, "trained": self.trained_rates},
            "cabling": {"ok": not self.cabling, "findings": [f.to_json() for f in self.cabling]},
            "hops": [{"label": h.label, "a": h.a, "b": h.b, "planned": h.planned, "traced": h.traced} for h in self.hops],
            "pkeys": {"checked": self.pkeys_checked,
                      "mismatches": {k: {"planned": w, "found": g} for k, (w, g) in self.pkey_mismatches.items()}},
            "ok": self.ok, "problems": self.problems(),
        }


def _pkey_hex(keys) -> list[str]:
    return [f"0x{k:04x}" for k in sorted(keys)]


def traced_switches(ibtracert_output: str) -> int:
    """Switches on the path ibtracert printed (one `-> switch port` line each)."""
    return sum(1 for line in ibtracert_output.splitlines() if "-> switch port" in line)


def pkey_table(smpquery_output: str) -> set[int]:
    """The non-zero entries of `smpquery pkeys` output."""
    keys = set()
    for line in smpquery_output.splitlines():
        head, sep, rest = line.partition(":")
        if not sep or not head.strip().isdigit():
            continue
        keys |= {int(v, 16) for v in rest.split() if v.startswith("0x") and int(v, 16) & 0x7FFF}
    return keys


def write_opensm_files(fabric: FabricPlan, tenants: Sequence[Tenant], subnet: sn.Subnet | None, out: Path, *,
                       roots: bool | None = None, installed_in: str | None = None,
                       extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write OpenSM's files for this fabric into `out` and return the options chosen:
    partitions.conf, root_guids.conf (where the tree needs it, or `roots` says), root-switches.txt
    (their names, for reference) and opensm.conf, which names the other files where they will be
    installed (`installed_in`, else `out`). GUIDs come from `subnet` (ibnetdiscover of the subnet);
    a file that needs them without it is refused with ValueError before anything is written."""
    where = Path(installed_in) if installed_in else out
    files = {"partitions.conf": sn.partitions_conf(tenants, fabric, subnet),
             "root-switches.txt": "".join(f"{n}\n" for n in sn.root_switches(fabric))}
    use_roots = not fabric.pure_fat_tree if roots is None else roots
    if use_roots:
        if subnet is None:
            raise ValueError("this fabric is not a pure fat tree (a partial spine group), so OpenSM's ftree needs "
                             "the root switches' GUIDs: pass the subnet's ibnetdiscover output")
        files["root_guids.conf"] = sn.guid_lines(sn.root_guids(fabric, subnet))
    options = sn.opensm_options(partition_file=str(where / "partitions.conf"),
                                root_guid_file=str(where / "root_guids.conf") if use_roots else None)
    options.update(extra or {})
    files["opensm.conf"] = sn.opensm_conf(options)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return options


def sweep(fabric: FabricPlan, tenants: Sequence[Tenant], *, workdir: Path | None = None, topology: str | None = None,
          roots: bool | None = None, check_pkeys: bool = True, progress: Callable[[str], None] | None = None
          ) -> SweepReport:
    """Simulate `fabric` (or the `topology` text given instead: a damaged copy, say), sweep it with
    OpenSM and check the result against the plan. `roots`: None lets the plan decide whether OpenSM
    is told the root GUIDs; True or False forces it. The work directory is removed unless given."""
    say = progress or (lambda _msg: None)
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="railyard-sweep-")) if workdir is None else Path(workdir)
    started = time.monotonic()
    try:
        work.mkdir(parents=True, exist_ok=True)
        topo = work / "topology.net"
        topo.write_text(topology if topology is not None else sn.topology_text(fabric), encoding="utf-8")
        limits = sn.simulator_limits(fabric)
        with Simulator(topo, work, limits) as sim:
            say(f"ibsim is serving {topo.name}; discovering the subnet")
            before = sn.parse_ibnetdiscover(sim.ibnetdiscover())
            options = write_opensm_files(fabric, tenants, before, work / "opensm", roots=roots, extra={
                "log_file": str(work / "opensm.log"), "accum_log_file": "FALSE",
                "dump_files_dir": str(work / "dumps")})
            (work / "dumps").mkdir(exist_ok=True)
            say("OpenSM is sweeping")
            seconds = sim.opensm(work / "opensm" / "opensm.conf")
            log = (work / "opensm.log").read_text(errors="replace")
            engines = _CONFIGURED.findall(log)
            refusals = sorted({m.group(1) for m in _FTREE_REFUSAL.finditer(log)})
            say("checking cabling, hops and partitions")
            after = sn.parse_ibnetdiscover(sim.ibnetdiscover())
            report = SweepReport(
                nodes=fabric.nodes, hcas=sum(1 for d in after.devices.values() if d.kind == "Ca"),
                switches=sum(1 for d in after.devices.values() if d.kind == "Switch"), tiers=fabric.tiers,
                engine=engines[-1] if engines else None, root_guids="root_guid_file" in options,
                refusals=refusals, config_errors=_PARSE.findall(log), seconds=seconds, total_seconds=0.0,
                ibsim_rss_kib=sim.peak_rss_kib(),
                # A simulated link trains at ibsim's speeds (0.10: up to HDR), not necessarily the plan's.
                cabling=[f for f in verify(fabric, after) if f.kind != "link-speed"],
                planned_rate=sn.link_rate(fabric), trained_rates=sorted(set(after.named_rates().values())))
            by_desc = after.by_desc()
            for label, a, b in sn.probe_pairs(fabric):
                traced = None
                da, db = by_desc.get(a.name), by_desc.get(b.name)
                if da and db and da.lid and db.lid:
                    done = sim.run("ibtracert", [str(da.lid), str(db.lid)], check=False)
                    traced = traced_switches(done.stdout) if done.returncode == 0 else None
                report.hops.append(Hop(label, a.name, b.name, fabric.switch_hops(a.key, b.key), traced))
            if check_pkeys:
                for name, want in sn.expected_pkeys(tenants, fabric, sn.sm_port(fabric)).items():
                    device = by_desc.get(name)
                    got: set[int] = set()
                    if device is not None and device.lid:
                        got = pkey_table(sim.run("smpquery", ["pkeys", str(device.lid)]).stdout)
                    report.pkeys_checked += 1
                    report.pkeys[name] = got
                    if got != want:
                        report.pkey_mismatches[name] = (_pkey_hex(want), _pkey_hex(got))
        report.total_seconds = time.monotonic() - started
        return report
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
