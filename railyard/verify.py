"""The running cluster held against its plan (`railyard verify`): each node's hardware as its own
sysfs shows it, and the InfiniBand subnet as ibnetdiscover shows it, compared with what the stack
plans. It only reads.

Nodes are read over SSH, the way tuning reaches them (the inventory's addresses and pinned host
keys, the driver's user, port and jump host), with the model's own discovery run there
(railyard.model.bundle): the reading `up` checks a host with is the reading verify judges. Reads run
concurrently, WORKERS at a time, each bounded by ssh's connect timeout and READ_TIMEOUT_S for the
whole read, so a host that does not answer is an `unreachable` finding, never a hang, and the
others' findings still come out.

Every finding is one record with a stable kind: the hardware check's (railyard.model.hardware_check
KINDS), the subnet's (railyard.model.fabric.verify KINDS), and `unreachable`.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, TypeVar

from railyard.drivers import SubnetReading, SwitchLldp
from railyard.model.gpu_health import COLLECTIVE_TOLERANCE
from railyard.ssh_client import DEFAULT_PORT, JUMP_VAR

if TYPE_CHECKING:
    from railyard.model.health_check import Expect
    from railyard.inventory import MachineEntry
    from railyard.model.fabric.subnet import Subnet
    from railyard.model.plan import Plan
    from railyard.model.spec.types import Spec
    from railyard.remote.ssh import Target

# Concurrent reads: each holds one ssh process and its pipe; 32 keep a 448-node read within the
# scale target (docs/verify.md) without exhausting a controller's process or file limits.
WORKERS = 32
# srun sessions at once, all to the Slurm controller: below sshd's MaxStartups (10 by default).
PAIR_WORKERS = 8
READ_TIMEOUT_S = 60.0
PARTS = ("hardware", "fabric", "health")
# The health part's checks only --deep runs, as the part of what they find: a quick reading does
# not read them again (DCGM level 3 runs tests level 1 does not; all_reduce_perf runs only then).
DEEP = "deep"
DEEP_KINDS = ("dcgm-diag", "collective-failed", "collective-slow", "collective-wrong")
UNREACHABLE = "unreachable"


_F = TypeVar("_F", "Finding", str)


@dataclass(frozen=True)
class Finding:
    """One thing a technician acts on. node: the node it is on (None for a cable between two
    devices); where: the device, port or cable; planned and found where one value says each;
    part: the part of the verification (PARTS) that found it, or DEEP."""

    kind: str
    node: str | None
    where: str
    planned: str | None
    found: str | None
    message: str
    part: str = ""

    def to_json(self) -> dict[str, str | None]:
        return asdict(self)

    def __str__(self) -> str:
        return self.message


def targets(spec: Spec, plan: Plan, inventory: Iterable[MachineEntry],
            node_vars: Callable[[str], Mapping]) -> dict[str, Target]:
    """How SSH reaches each machine of the inventory: its address and pinned key, and the user,
    port and jump host its driver's connection variables give (as the tuning run's inventory)."""
    from railyard.remote.ssh import JumpHost, Target

    out = {}
    for m in inventory:
        v = node_vars(m["name"])
        j = v.get(JUMP_VAR)
        jump = JumpHost(j["address"], j.get("user"), int(j["port"]), tuple(j.get("host_keys") or ())) if j else None
        out[m["name"]] = Target(m["name"], m["management_ip"], user=v.get("ansible_user") or "root",
                                port=int(v.get("ansible_port") or DEFAULT_PORT), jump=jump,
                                host_keys=(m["host_key"],) if m.get("host_key") else ())
    return out


def read_facts(hosts: Mapping[str, Target], private_key: str | None, *, workers: int = WORKERS,
               timeout: float = READ_TIMEOUT_S, lldp: bool = False) -> dict[str, dict | str]:
    """Each host's facts (sysfs_discovery.host_facts), with its LLDP neighbours where `lldp`, or
    why it could not be read."""
    from railyard.drivers.hosts import remote
    from railyard.remote.ssh import SshError

    def one(name: str) -> tuple[str, dict | str]:
        try:
            facts, _ = remote.host_facts(hosts[name], private_key=private_key, timeout=timeout, lldp=lldp)
            return name, facts
        except SshError as exc:
            return name, str(exc).split(": ", 1)[-1]

    if not hosts:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
        return dict(pool.map(one, sorted(hosts)))


def read_health(hosts: Mapping[str, Target], private_key: str | None, *, level: int = 1,
                gpus: Mapping[str, int] | None = None, workers: int = WORKERS,
                timeout: float = READ_TIMEOUT_S) -> dict[str, dict[str, str] | str]:
    """Each node's GPU tools' output by section (health_check.HEALTH_SCRIPT), or why it could not
    be read. level: dcgmi diag's run level (1 quick, 3 deep, which also runs all_reduce_perf over
    the node's planned `gpus`)."""
    from railyard.model.health_check import HEALTH_SCRIPT, split_sections
    from railyard.remote.ssh import SshError, run

    def one(name: str) -> tuple[str, dict[str, str] | str]:
        try:
            argv = ["sh", "-c", HEALTH_SCRIPT, "health", str(level), str((gpus or {}).get(name, 0))]
            result = run(hosts[name], argv, private_key=private_key, timeout=timeout)
        except SshError as exc:
            return name, str(exc).split(": ", 1)[-1]
        return name, split_sections(result.stdout)

    if not hosts:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
        return dict(pool.map(one, sorted(hosts)))


def expects(plan: Plan, nodes: Iterable[str]) -> dict[str, Expect]:
    """What each node's GPU tools should show, from its SKU (health_check.Expect)."""
    from railyard.model import health_check
    from railyard.model.catalog import load_catalog, nvlink_gbs

    skus = load_catalog().nodes
    out = {}
    for node in nodes:
        sku = skus[plan.node_named(node).sku]
        out[node] = health_check.expect_of(sku, nvlink_gbs(sku))
    return out


def health(plan: Plan, readings: Mapping[str, dict[str, str] | str],
           addresses: Mapping[str, str] | None = None, *, tolerance: float = COLLECTIVE_TOLERANCE,
           expected: Mapping[str, Expect] | None = None) -> tuple[list[Finding], list[str], set[str]]:
    """Each node's GPU health (railyard.model.gpu_health) against its SKU: findings, a note per
    check that could not run and on which nodes (never a pass), and the nodes any check ran on.
    tolerance: railyard:health.collectiveTolerance; expected: expects() of the nodes read, where
    the caller has it already."""
    from railyard.model import health_check

    if expected is None:
        expected = expects(plan, (n for n, got in readings.items() if not isinstance(got, str)))
    out: list[Finding] = []
    not_run: dict[str, list[str]] = {}
    ran: set[str] = set()
    for node in sorted(readings):
        got = readings[node]
        if isinstance(got, str):
            out.append(Finding(UNREACHABLE, node, (addresses or {}).get(node, node), "reachable over SSH", got,
                               f"{node}: not read ({got})"))
            continue
        found, why_not, ran_here = health_check.judge(got, expected[node], tolerance=tolerance)
        for why in why_not:
            not_run.setdefault(why, []).append(node)
        if ran_here:
            ran.add(node)
        out += [Finding(f.kind, node, f.gpu or node, f.planned, f.found, f"{node}: {f.message}") for f in found]
    notes = [f"health not run: {why}: {', '.join(nodes)}" for why, nodes in not_run.items()]
    return out, notes, ran


def pair_collectives(spec: Spec, plan: Plan, hosts: Mapping[str, Target], private_key: str | None, *,
                     nodes: Iterable[str] | None = None, skip: Iterable[str] = (), workers: int = PAIR_WORKERS,
                     timeout: float = READ_TIMEOUT_S, progress: Callable[[str], None] = lambda line: None,
                     ) -> tuple[list[Finding], list[str], set[tuple[str, int]]]:
    """all_reduce_perf across each rail's ring pairs (railyard.model.pair_collectives), launched
    with srun from the Slurm controller: findings, notes on what did not run, and each (node,
    rail) with a pair that ran. hosts: every node that may take part (the controller too); nodes:
    only the pairs touching these (all where None); skip: nodes not to run on (unreachable). Pairs
    run round by round, `workers` at a time, each stopped after `timeout`."""
    import uuid

    from railyard import drivers
    from railyard.model import pair_collectives as pc
    from railyard.model.catalog import load_catalog
    from railyard.model.node_health import SINFO, parse_sinfo
    from railyard.remote.ssh import CONNECT_TIMEOUT_S, SshError, run

    if plan.slurm is None or spec.slurm is None:
        return [], ["pair collectives not run: they are launched with Slurm's srun, and the stack has no "
                    "railyard:slurm"], set()
    launcher = plan.slurm.controller.name
    skip = set(skip)
    if launcher not in hosts or launcher in skip:
        return [], [f"pair collectives not run: Slurm's controller {launcher} could not be reached"], set()
    wanted = set(hosts) if nodes is None else set(nodes)
    pairs = [p for p in pc.plan_pairs(plan, load_catalog().nodes)
             if {p.a, p.b} <= hosts.keys() and {p.a, p.b} & wanted and not {p.a, p.b} & skip]
    if not pairs:
        return [], [], set()
    # A node Slurm would not give (drained, down, running a job) is known before any pair waits
    # srun's --immediate for it; where sinfo cannot be read, srun says so pair by pair.
    try:
        listed = run(hosts[launcher], SINFO, private_key=private_key, timeout=timeout)
        taken = pc.unavailable(parse_sinfo(listed.stdout)) if listed.rc == 0 else {}
    except SshError:
        taken = {}

    capabilities = drivers.entry(spec.driver).capabilities
    at_host_rate = capabilities.rails_at_host_rate
    sizes = pc.HOST_RATE_SIZES if at_host_rate is not None else pc.SIZES
    mpi = spec.slurm.mpi
    # Each run's own job name: a run stopped in time is cancelled by it, and by nothing broader.
    token = uuid.uuid4().hex[:8]
    names = {p: f"railyard-pair-{token}-{i}" for i, p in enumerate(pairs)}

    def one(pair: pc.PairRun) -> pc.Outcome:
        # ssh keeps 255 for itself: a run's 255 is told apart as 254. ssh waits for timeout(1)'s
        # kill too, and for its own connection.
        argv = ["sh", "-c", '"$@"; rc=$?; [ "$rc" -ne 255 ] || rc=254; exit "$rc"', "pair",
                *pair.srun_argv(sizes, timeout, mpi=mpi, job_name=names[pair])]
        try:
            result = run(hosts[launcher], argv, private_key=private_key,
                         timeout=timeout + pc.KILL_AFTER_S + CONNECT_TIMEOUT_S + 5)
            got = pc.outcome(pair, result.rc, result.stdout, result.stderr, sizes)
            if result.rc in pc.TIMED_OUT:
                # A run killed after its TERM may leave its job holding the two nodes until its --time.
                try:
                    run(hosts[launcher], ["scancel", f"--name={names[pair]}"], private_key=private_key,
                        timeout=timeout)
                except SshError:
                    pass  # the run's own failure stands; its job ends at its --time
        except SshError as exc:
            return pc.Outcome(pair, None, not_run=f"srun on {launcher}: {str(exc).split(': ', 1)[-1]}")
        return got

    def in_rounds(batches: list[list[pc.PairRun]]) -> dict[pc.PairRun, pc.Outcome]:
        done: dict[pc.PairRun, pc.Outcome] = {}
        for batch in batches:
            with ThreadPoolExecutor(max_workers=max(1, min(workers, len(batch)))) as pool:
                done.update(zip(batch, pool.map(one, batch)))
        return done

    tolerance = at_host_rate if at_host_rate is not None else spec.health.collective_tolerance
    bar = functools.partial(pc.yardstick, nic_gbps=spec.fabric.compute.speed_gbps,
                            against_median=at_host_rate is not None)
    held = {p: pc.Outcome(p, None, not_run=f"Slurm has {n} {taken[n]}") for p in pairs
            for n in (p.a, p.b) if n in taken}
    held.update({p: pc.Outcome(p, None, not_run="its two nodes' SKUs have different GPU counts, or none")
                 for p in pairs if not p.gpus and p not in held})
    pairs = [p for p in pairs if p not in held]
    batches = pc.rounds(pairs)
    progress(f"running all_reduce_perf across {len(pairs)} rail pair(s), {len(batches)} round(s)")
    outcomes = {**held, **in_rounds(batches)}
    again = pc.suspects(outcomes.values(), bar, tolerance)
    if again:
        # Only a pair slow or failed twice is judged so; one that could not run again keeps its first result.
        progress(f"running {len(again)} slow or failed pair(s) again")
        outcomes.update({p: o for p, o in in_rounds(pc.rounds(again)).items() if o.not_run is None})
    found = pc.judge(outcomes.values(), bar, tolerance)
    out = [Finding(f.kind, f.node, f.where, f.planned, f.found, f.message) for f in found]
    why_not: dict[str, list[str]] = {}
    for o in outcomes.values():
        if o.not_run is not None:
            why_not.setdefault(o.not_run, []).append(o.pair.where)
    notes = [f"pair collectives not run: {why}: {', '.join(where)}" for why, where in why_not.items()]
    return out, notes, {(n, o.pair.rail) for o in outcomes.values() if o.not_run is None for n in (o.pair.a, o.pair.b)}


def standing_pair_findings(before: Mapping[str, list[_F]], nodes: Iterable[str],
                           pairs_run: set[tuple[str, int]]) -> dict[str, list[_F]]:
    """The rail pair findings (Findings, or their messages) of `nodes` from an earlier reading or
    record that a reading in which that node's pairs on that rail did not run cannot clear: Slurm
    allocates no drained node, so a node drained for one keeps it until its pairs run again (a
    person resumes it)."""
    from railyard.model.pair_collectives import pair_rail

    out = {}
    for n in nodes:
        kept = [f for f in before.get(n, [])
                if (where := pair_rail(f if isinstance(f, str) else f.message)) and where not in pairs_run]
        if kept:
            out[n] = kept
    return out


def subnet_over_ssh(hosts: Mapping[str, Target], private_key: str | None, *, tries: int = 3,
                    timeout: float = READ_TIMEOUT_S) -> SubnetReading:
    """ibnetdiscover's output as the first of `tries` nodes that can run it prints it (any HCA on
    the subnet sees all of it), and where; or None and what each node said."""
    from railyard.remote.ssh import SshError, run

    said = []
    for name in sorted(hosts)[:tries]:
        try:
            # ibnetdiscover exits 255 on its own errors, the status ssh keeps for a failed
            # connection: another status keeps the tool's failure apart from the host's.
            result = run(hosts[name], ["sh", "-c", 'ibnetdiscover; rc=$?; [ "$rc" -ne 255 ] || rc=1; exit "$rc"'],
                         private_key=private_key, timeout=timeout)
        except SshError as exc:
            said.append(str(exc))
            continue
        if result.rc == 0 and result.stdout.strip():
            return SubnetReading(result.stdout, f"ibnetdiscover on {name}")
        err = [line for line in result.stderr.splitlines() if line.strip()]
        said.append(f"{name}: ibnetdiscover exited {result.rc}: {err[-1] if err else 'no output'}")
    return SubnetReading(None, "; ".join(said) or "no node to run ibnetdiscover on")


def hardware(spec: Spec, plan: Plan, facts: Mapping[str, dict | str],
             addresses: Mapping[str, str] | None = None) -> list[Finding]:
    """The findings of every node read: its facts against its SKU and the stack's pins, or
    `unreachable` where it could not be read."""
    from railyard.model import hardware_check
    from railyard.model.catalog import load_catalog

    catalog = load_catalog()
    compute = spec.fabric.compute
    out: list[Finding] = []
    for node in sorted(facts):
        got = facts[node]
        if isinstance(got, str):
            where = (addresses or {}).get(node, node)
            out.append(Finding(UNREACHABLE, node, where, "reachable over SSH", got,
                               f"{node}: not read ({got})"))
            continue
        sku = catalog.nodes[plan.node_named(node).sku]
        for m in hardware_check.check(node, got, sku, fabric=compute.kind, speed_gbps=compute.speed_gbps,
                                      pins=spec.verify.pins):
            out.append(Finding(m.kind, node, m.what, m.planned, m.found, str(m)))
    return out


def fabric(plan: Plan, subnet: Subnet, *, speeds_judged: bool = True,
           switch_guids: Iterable[tuple[str, int]] = ()) -> list[Finding]:
    """The subnet's findings against the planned fabric (railyard.model.fabric.verify); without
    link-speed findings where the speeds are a simulator's, not the cables'. switch_guids: the
    stack's railyard:verify.switchGuids, naming switches by GUID."""
    from railyard.model.fabric.verify import verify

    nodes = {n.name for n in plan.nodes}
    out = []
    for f in verify(plan.fabric, subnet.renamed({guid: name for name, guid in switch_guids})):
        if f.kind == "link-speed" and not speeds_judged:
            continue
        # An HCA is named "<host> <device>" (its node description): a finding that starts at one
        # names its node; one between switches names none.
        node = f.where.split(" ", 1)[0]
        out.append(Finding(f.kind, node if node in nodes else None, f.where, f.planned, f.found, str(f)))
    return out


@dataclass
class Report:
    """What one verification found, what it says about what it read, and why a part asked for
    could not be read."""

    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unread: dict[str, str] = field(default_factory=dict)
    """Each part asked for that could not be read (or run anywhere), and why."""
    unread_on: dict[str, set[str]] = field(default_factory=dict)
    """Parts read, but not on these nodes: health where none of the GPU tools ran on the node;
    fabric where an Ethernet fabric's cabling was judged without the node's (its lldpd not read,
    or a rail not heard yet). An unreachable node is a finding of its own."""
    pairs_run: set[tuple[str, int]] = field(default_factory=set)
    """Each (node, rail) with a run across a rail pair that ran (`deep`)."""

    def drifted(self) -> list[str]:
        """The nodes with a finding of their own, in name order."""
        return sorted({f.node for f in self.findings if f.node})


def collect(spec: Spec, plan: Plan, hosts: Mapping[str, Target], private_key: str | None, *,
            parts: Iterable[str] = PARTS, timeout: float = READ_TIMEOUT_S, dump: str | None = None,
            deep: bool = False, peers: Mapping[str, Target] | None = None,
            progress: Callable[[str], None] = lambda line: None) -> Report:
    """Read what `parts` name and hold it against the plan: the one verification `railyard verify`
    and the drift check of `up` and preview both make. dump: an ibnetdiscover file to judge
    instead of reading the subnet. deep: the health part's DCGM diagnostics at level 3, and
    all_reduce_perf within each node and across each rail's pairs touching it (pair_collectives),
    whose other ends and launcher come from `peers` (every node of the stack; `hosts` where None)."""
    report = Report()
    parts = list(parts)
    addresses = {n: t.address for n, t in hosts.items()}
    # An Ethernet fabric's cabling is in the nodes' own reading (their LLDP neighbours).
    lldp = "fabric" in parts and plan.fabric.cabling_by_lldp and not dump
    facts: Mapping[str, dict | str] = {}
    if "hardware" in parts or lldp:
        progress(f"reading {len(hosts)} node(s), {min(WORKERS, len(hosts))} at a time")
        facts = read_facts(hosts, private_key, timeout=timeout, lldp=lldp)
        found = hardware(spec, plan, facts, addresses)
        # Only the unreachable nodes where the hardware part was not asked for.
        report.findings += (_of("hardware", found) if "hardware" in parts
                            else _of("fabric", (f for f in found if f.kind == UNREACHABLE)))
    if "health" in parts:
        progress(f"reading {len(hosts)} node(s)' GPU tools"
                 + (" (DCGM level 3, all_reduce_perf over NVLink)" if deep else ""))
        # all_reduce_perf runs only where its result can be judged: a full run on GPUs is no free probe.
        expected = expects(plan, hosts)
        gpus = {n: e.gpus if e.nvlink_busbw is not None else 0 for n, e in expected.items()}
        readings = read_health(hosts, private_key, level=3 if deep else 1, gpus=gpus, timeout=timeout)
        found, notes, ran = health(plan, readings, addresses,
                                   tolerance=spec.health.collective_tolerance, expected=expected)
        for node, got in readings.items():
            if not isinstance(got, str) and node not in ran:
                report.unread_on.setdefault(node, set()).add("health")
        if deep:
            pairs, pair_notes, report.pairs_run = pair_collectives(
                spec, plan, peers if peers is not None else hosts, private_key, nodes=hosts, timeout=timeout,
                progress=progress, skip=[n for n, got in readings.items() if isinstance(got, str)])
            found, notes = found + pairs, notes + pair_notes
        # An unreachable node is reported once, by the hardware part, where both ran.
        seen = {(f.kind, f.node) for f in report.findings}
        report.findings += [replace(f, part=DEEP if deep and f.kind in DEEP_KINDS else "health")
                            for f in found if (f.kind, f.node) not in seen]
        report.notes += notes
        if not ran and not report.pairs_run:
            report.unread["health"] = "; ".join(notes)
    if lldp:
        progress("reading the switches' LLDP tables")
        found_lldp, note, judged, unheard = cabling_from_lldp(plan, facts,
                                                              switch_tables(spec, plan, private_key, timeout))
        report.findings += _of("fabric", found_lldp)
        for node in unheard:
            report.unread_on.setdefault(node, set()).add("fabric")
        report.notes.append(note)
        if not judged:
            report.unread["fabric"] = note
    elif "fabric" in parts:
        # The whole subnet, from any node's HCA: a node just rebooted, read again alone, may not
        # have its port up yet.
        read, note = _subnet(spec, plan, dump, progress,
                             lambda: subnet_over_ssh(peers if peers is not None else hosts, private_key,
                                                     timeout=timeout))
        if read is None:
            report.unread["fabric"] = note
            report.notes.append(f"fabric not read: {note}")
        else:
            subnet, judged = read
            report.findings += _of("fabric", fabric(plan, subnet, speeds_judged=judged,
                                                     switch_guids=spec.verify.switch_guids))
            report.notes.append(note)
    return report


def _of(part: str, found: Iterable[Finding]) -> list[Finding]:
    return [replace(f, part=part) for f in found]


def switch_tables(spec: Spec, plan: Plan, private_key: str | None, timeout: float) -> SwitchLldp:
    """The switches' own LLDP tables as the stack's driver reads them. A reading that fails as a
    whole (a tool missing here, a switch namespace gone while read) is said, never raised: the
    nodes' findings already read still come out."""
    from railyard import drivers

    try:
        return drivers.read_switch_lldp(spec, plan, private_key, timeout)
    except Exception as exc:  # noqa: BLE001 - any driver's failure is a reason, not an abort
        return SwitchLldp({}, f"reading them failed: {type(exc).__name__}: {exc}")


def planned_netdevs(plan: Plan) -> dict[str, dict[str, str | None]]:
    """{node: {RDMA device: its netdev, or None where the plan does not know it}} of every node's
    compute NICs: how a node's port ids are known where its own facts were not read."""
    return {n.name: {nic.name: nic.netdev for nic in n.nics} for n in plan.nodes}


def cabling_from_lldp(plan: Plan, facts: Mapping[str, dict | str],
                      switches: SwitchLldp | None = None) -> tuple[list[Finding], str, bool, list[str]]:
    """An Ethernet fabric's cabling as LLDP shows it (railyard.model.fabric.verify.verify_lldp):
    the nodes' neighbours, and the switches' own tables where the driver read them: (findings, a
    note on what was read, whether anything was, the nodes read whose cables were not all judged).
    A node whose lldpd could not be asked, or a switch that could not be read, is named in the
    note, never passed; an unreachable node is the hardware reading's finding."""
    from railyard.model.fabric.verify import verify_lldp
    from railyard.model.lldp import LISTENING_S

    heard = {n: got for n, got in facts.items() if isinstance(got, dict) and "neighbours" in (got.get("lldp") or {})}
    why_not: dict[str, list[str]] = {}
    for n, got in sorted(facts.items()):
        if isinstance(got, dict) and n not in heard:
            why_not.setdefault((got.get("lldp") or {}).get("not_read") or "no LLDP reading", []).append(n)
    tables: dict[str, Mapping[str, list]] = {}
    unread: dict[str, list[str]] = {}
    for sw, t in sorted((switches.tables if switches else {}).items()):
        if isinstance(t, str):
            unread.setdefault(t, []).append(sw)
        else:
            tables[sw] = t
    nodes = {n.name for n in plan.nodes}
    out = []
    read = {n: got for n, got in facts.items() if isinstance(got, dict)}
    found, waiting, unjudged, judged = verify_lldp(plan.fabric, read, tables, planned_netdevs(plan))
    for f in found:
        node = f.where.split(" ", 1)[0]
        out.append(Finding(f.kind, node if node in nodes else None, f.where, f.planned, f.found, str(f)))
    said = [f"cabling: the LLDP neighbours of {len(heard)} node(s) read"] * bool(heard)
    said += [f"LLDP not read on {', '.join(ns)}: {why}" for why, ns in why_not.items()]
    where = switches.where if switches is not None else ""
    if tables:
        said.append(f"the LLDP tables of {len(tables)} switch(es) read ({where})")
    said += [f"switch LLDP table not read on {', '.join(sws)}: {why}" for why, sws in unread.items()]
    if switches is not None and not switches.tables:
        said.append(f"no switch's LLDP table read ({where}): the nodes' side alone decides")
    said += unjudged
    if waiting:
        said.append(f"LLDP not heard yet on {', '.join(waiting)}: their lldpd started under {LISTENING_S} s ago, "
                    "so those rails are not judged")
    # The fabric is read where a node's neighbours were (its waiting rails are said above), or where
    # the switches' tables judged a cable: a table that could not be matched to the plan reads
    # nothing. A node's own is read where its lldpd was and each of its rails was heard, by it or
    # by the table that judged that rail's cable (verify_lldp settles those): a node whose lldpd
    # could not be asked is not, since the table read may be another leaf's.
    unheard = sorted({*(n for n in read if n not in heard), *(hca.split(" ", 1)[0] for hca in waiting)})
    return out, "; ".join(said) or "cabling: no node read", bool(heard) or judged, unheard


def _subnet(spec: Spec, plan: Plan, dump: str | None, progress: Callable[[str], None],
            over_ssh: Callable[[], SubnetReading]) -> tuple[tuple[Subnet, bool] | None, str]:
    """((the subnet, whether its speeds are judged), where it was read), or (None, why not)."""
    from railyard import drivers
    from railyard.model.fabric.subnet import parse_ibnetdiscover

    if plan.fabric.cabling_by_lldp:
        return None, (f"the compute fabric is {plan.fabric.kind}: its cabling is read with LLDP on the nodes, "
                      "not from an ibnetdiscover dump")
    if dump:
        try:
            text = Path(dump).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return None, f"{dump}: {exc.strerror or exc}"
        where, judged = dump, True
    else:
        progress("reading the subnet (ibnetdiscover)")
        reading = drivers.read_subnet(spec, plan, over_ssh)
        if reading.text is None:
            return None, reading.where
        text, where, judged = reading.text, reading.where, reading.speeds_judged
    try:
        subnet = parse_ibnetdiscover(text)
    except ValueError as exc:
        return None, f"{where}: not ibnetdiscover's output ({exc})"
    if not subnet.devices:
        return None, f"{where}: no device in it"
    return (subnet, judged), f"subnet: {len(subnet.devices)} devices and {len(subnet.cables)} cables read from {where}"
