"""`railyard verify --stack S [--json] [--only hardware,fabric,health] [--deep] [--ibnetdiscover FILE]
[--repair]`: the running cluster held against its plan (railyard.verify). Without --repair it
changes nothing on the cluster: it records each node's health state (railyard.model.node_health)
under .railyard/health/ and in the stack's `nodeHealth` output, and shows the nodes that are not
ready. With --repair, the faulty nodes go through the repair loop (railyard.repair): drained in
Slurm, reset, checked again, returned.

Exit status, the same with --json: 0 when everything read is as planned (with --repair: when
every node is ready at the end and every finding was a node's the loop could act on), 1 on any
finding (with --repair: a node left not ready, a faulty node a person or acceptance holds, a
finding of no node), 2 when the stack cannot be verified at all (no such stack, a driver whose
machines Railyard cannot read, no subnet to read, no scheduler to repair through, another repair
run holding the cluster).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from contextlib import ExitStack
from typing import Mapping

from railyard import drivers, paths, repair
from railyard.engine import pulumi
from railyard.engine.toolchain import ToolchainError
from railyard.model.node_health import as_output

SHOWN_PER_KIND = 20
# The record run is one run of the program; at 448 nodes it is about as long as a preview.
RECORD_TIMEOUT_S = 600.0


def register(sub) -> None:
    p = sub.add_parser("verify", help="hold the running cluster against its plan: node hardware, the "
                                      "InfiniBand subnet and GPU health (changes nothing on the cluster; exit 1 on "
                                      "any finding)")
    p.add_argument("--stack", "-s", default="lab", help="stack (default: lab)")
    p.add_argument("--json", action="store_true", help="one record per finding, with a stable kind")
    p.add_argument("--only", default=",".join(_parts()), metavar="PARTS",
                   help="what to read, comma-separated: hardware, fabric, health (default: all)")
    p.add_argument("--deep", action="store_true",
                   help="the health part's DCGM diagnostics at level 3 (minutes per node) instead of 1, "
                        "all_reduce_perf within each node against its NVLinks, and, with Slurm, across each "
                        "rail's ring pairs one rail at a time against the rail's speed")
    p.add_argument("--ibnetdiscover", metavar="FILE",
                   help="judge this ibnetdiscover dump instead of reading the subnet")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds one node's read may take (default: 60)")
    p.add_argument("--repair", action="store_true",
                   help="drain the faulty nodes in Slurm, reset, re-check and return them, within each pool's "
                        "railyard:health.maxUnavailable; a node a person drained is left alone")
    p.set_defaults(func=handle)


def _parts() -> tuple[str, ...]:
    from railyard.verify import PARTS

    return PARTS


def _fail(message: str) -> int:
    print(f"railyard verify: {message}", file=sys.stderr)
    return 2


def handle(args) -> int:
    from railyard import verify
    from railyard.model.errors import SpecError
    from railyard.stack import load

    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in parts if p not in verify.PARTS]
    if unknown or not parts:
        return _fail(f"--only {args.only!r}: give one or more of {', '.join(verify.PARTS)}")
    if args.repair and args.ibnetdiscover:
        return _fail("--repair reads each node again after its reset, and the file --ibnetdiscover names would "
                     "say the same as before it: give one or the other")
    stack_file = paths.stack_file(args.stack)
    try:
        spec, plan = load(stack_file)
    except SpecError as exc:
        print(exc.report(f"railyard verify: {stack_file.name}"), file=sys.stderr)
        return 2
    why_not = drivers.entry(spec.driver).capabilities.unverifiable
    if why_not:
        return _fail(f"stack {args.stack}'s driver {spec.driver}: {why_not}")
    try:
        outputs = pulumi.stack_outputs(args.stack, secrets=True)
    except (ToolchainError, pulumi.PulumiError) as exc:
        return _fail(f"cannot read stack {args.stack}'s outputs (is it up?): {exc}")
    inventory = outputs.get("inventory") or []
    planned = {n.name for n in plan.nodes}
    strays = [m["name"] for m in inventory if m["name"] not in planned]
    if strays:
        # An edit not yet applied (a host taken out of the stack file): the rest is still read.
        print(f"railyard verify: not read: {', '.join(strays)}: in stack {args.stack}'s inventory, not in "
              f"{stack_file.name} (its next `up` removes them)", file=sys.stderr)
        inventory = [m for m in inventory if m["name"] in planned]
    if not inventory:
        return _fail(f"stack {args.stack} has no nodes; run `make up STACK={args.stack}`")
    key = (outputs.get("access") or {}).get("privateKey") or None
    if key is None and not os.environ.get("SSH_AUTH_SOCK"):
        return _fail(f"stack {args.stack} exports no access key, so its key is ssh-agent's, and SSH_AUTH_SOCK "
                     "is not set here")
    progress = (lambda line: None) if args.json else (lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    started = time.monotonic()
    hosts = verify.targets(spec, plan, inventory, lambda n: drivers.node_vars(spec, plan, n))
    with ExitStack() as held:
        scheduler = None
        if args.repair:
            # The cluster is the run's before anything is read: a reading made while another run
            # resets nodes would send this one after the same nodes.
            try:
                scheduler = _own(args.stack, spec, plan, hosts, key, outputs, held)
                outputs = pulumi.stack_outputs(args.stack, secrets=True)  # as the last holder left them
            except repair.RepairError as exc:
                return _fail(str(exc))
            except (ToolchainError, pulumi.PulumiError) as exc:
                return _fail(f"cannot read stack {args.stack}'s outputs: {exc}")
        report = verify.collect(spec, plan, hosts, key, parts=parts, timeout=args.timeout or verify.READ_TIMEOUT_S,
                                dump=args.ibnetdiscover, deep=args.deep, progress=progress)
        if parts and all(p in report.unread for p in parts):
            return _fail("; ".join(report.unread.values()))
        try:
            outcome = _states(args, spec, plan, hosts, key, outputs, report, parts, progress, strays, scheduler)
        except repair.RepairError as exc:
            return _fail(str(exc))
    findings, notes = report.findings, report.notes
    took = time.monotonic() - started
    rc = (0 if _repaired(outcome, findings) else 1) if args.repair else (1 if findings else 0)
    if args.json:
        print(json.dumps([f.to_json() for f in findings], indent=2))
        return rc
    shown: Counter = Counter()
    for f in findings:
        shown[f.kind] += 1
        if shown[f.kind] <= SHOWN_PER_KIND:
            print(f"{f.kind:<16} {f}")
    for kind, n in shown.items():
        if n > SHOWN_PER_KIND:
            print(f"{kind:<16} ... and {n - SHOWN_PER_KIND} more (--json lists every one)")
    for note in notes:
        print(note)
    _show_states(outcome)
    read = [p for p in parts if p not in report.unread]
    head = (f"{len(inventory)} node(s) of stack {args.stack} verified in {took:.1f} s ({', '.join(read)}"
            + (f"; not read: {', '.join(report.unread)}" if report.unread else "") + "): ")
    if not findings:
        print(head + "as planned" + (f"; the repair stopped ({outcome.stopped})" if outcome.stopped
                                     else "; the repair left nodes not ready (above)" if rc else ""))
        return rc
    print(head + f"{len(findings)} finding{'s' if len(findings) != 1 else ''} ("
          + ", ".join(f"{n} {k}" for k, n in shown.items()) + ")")
    return rc


def _by_node(findings, nodes) -> dict[str, list]:
    """Each node's findings, for the nodes given (nodes without any left out)."""
    out: dict[str, list] = {}
    for f in findings:
        if f.node in nodes:
            out.setdefault(f.node, []).append(f)
    return out


def _messages(by_node: Mapping[str, list]) -> dict[str, list[str]]:
    return {n: [f.message for f in fs] for n, fs in by_node.items()}


def _read_on(report, nodes, parts, deep: bool) -> dict[str, list[str]]:
    """The parts a reading (a verify.Report) read on each of `nodes`: those asked, less those it
    could not read at all or on the node; health's deep checks where it was --deep; and any part
    that found something on the node (a switch's LLDP table saw its cable where its own lldpd
    could not be asked)."""
    from railyard import verify

    found: dict[str, set[str]] = {}
    for f in report.findings:
        if f.kind != verify.UNREACHABLE:
            found.setdefault(f.node, set()).add(f.part)
    out = {}
    for n in nodes:
        read = [p for p in parts if p not in report.unread and p not in report.unread_on.get(n, ())]
        read += [verify.DEEP] * (deep and "health" in read)
        out[n] = read + sorted(found.get(n, set()) - set(read))
    return out


def _parts_of(report) -> dict[str, str]:
    """Each finding message's part; an unreachable node's finding read nothing on it, so it has none."""
    from railyard import verify

    return {f.message: f.part for f in report.findings if f.kind != verify.UNREACHABLE}


def _own(stack: str, spec, plan, hosts, key, outputs, held: ExitStack):
    """The locks a repair run holds, in `held`: this checkout's states file, then the cluster, in
    each of its schedulers; the schedulers. RepairError where either is held, or there is none."""
    held.enter_context(repair.holding(paths.node_states(stack)))
    scheduler = repair.schedulers(spec, plan, hosts, key, outputs, held)
    if scheduler is None:
        raise repair.RepairError(repair.NO_SCHEDULER)
    held.enter_context(scheduler.hold(_holder(stack)))
    return scheduler


def _states(args, spec, plan, hosts, key, outputs, report, parts, progress, strays=(), scheduler=None
            ) -> repair.Outcome:
    """Each node's health state after this verification: recorded, and with --repair, the loop run
    through `scheduler`, whose locks (_own) the caller holds. strays: machines of the stack's
    inventory its stack file no longer plans (not read)."""
    from railyard import verify
    from railyard.model.gpu_health import gpu_reset_targets

    path = paths.node_states(args.stack)
    nodes = sorted(hosts)
    # Each node's last reading, whole: its messages for the loop, its kinds for whether a GPU
    # reset would clear it (repair.actions).
    latest = _by_node(report.findings, hosts)
    findings = _messages(latest)
    recorded_pairs: dict[str, list[str]] = {}
    # What a state may move on (NodeState.reread): the parts read on each node, and the part of
    # each message, this reading's and, as the loop reads again, its re-readings'.
    read = _read_on(report, hosts, parts, args.deep)
    part_of = _parts_of(report)

    def recheck(which: list[str]) -> dict[str, list[str]]:
        again = verify.collect(spec, plan, {n: hosts[n] for n in which}, key, parts=parts,
                               timeout=args.timeout or verify.READ_TIMEOUT_S, dump=args.ibnetdiscover,
                               deep=args.deep, peers=hosts)
        part_of.update(_parts_of(again))
        read.update(_read_on(again, which, parts, args.deep))
        return _rechecked(again, which, latest, recorded_pairs)

    def gpu_resets(node: str) -> list[str] | None:
        return gpu_reset_targets((f.kind, f.where) for f in latest.get(node, []))

    with ExitStack() as held:
        try:
            if not args.repair:
                held.enter_context(repair.holding(path))
        except repair.RepairError as exc:
            # A repair run holds the states: this reading reports and records nothing, and shows
            # them as that run last saved them (judged here, a node it is resetting would read as
            # a reset interrupted).
            progress(f"states not recorded: {exc}; shown as the running repair last saved them")
            return repair.Outcome(states=repair.read_states(path))
        try:
            recorded = repair.recorded_in(outputs)
        except repair.RepairError as exc:
            # This run's record writes the output again.
            progress(f"node states not taken from the stack's outputs: {exc}")
            recorded = {}
        states, taken = repair.take_recorded(path, recorded)
        if taken:
            progress(repair.taken_line(args.stack, taken))
        # A stray's record (a failed node's hand-off among them) is kept, unread, while the machine
        # is in the inventory: an edit reverted before the `up` that removes it finds it as it was.
        strayed = {n: states[n] for n in strays if n in states}
        recorded_pairs.update(_standing(states, findings, report.pairs_run, hosts))
        for n, kept in recorded_pairs.items():
            findings[n] = [*findings.get(n, []), *kept]
            # The record's, not this reading's: a rail pair runs only --deep.
            part_of.update(dict.fromkeys(kept, verify.DEEP))
        if args.repair:
            act = repair.actions(spec, plan, hosts, key, outputs, scheduler, recheck, progress, gpu_resets)
            act.save = lambda now: repair.write_states(path, {**now, **strayed})
            pools, budgets = repair.budgets(spec, plan, nodes)
            keep_out = {plan.slurm.controller.name: "it runs the Slurm controller"} if plan.slurm is not None else {}
            try:
                outcome = repair.repair(states, findings, nodes, pools, budgets, act, read=read, part_of=part_of,
                                        drain_timeout=spec.health.drain_timeout_s, keep_out=keep_out)
            except repair.RepairError as exc:
                # The loop stopped part way (its scheduler stopped answering, a host answered with
                # another key): every change it made is saved, and the reading is still reported.
                print(f"railyard verify: the repair stopped: {exc}", file=sys.stderr)
                saved = repair.read_states(path)
                outcome = repair.Outcome(states={n: s for n, s in saved.items() if n not in strayed}, stopped=str(exc))
        else:
            try:
                outcome = repair.judge(states, findings, nodes, repair.schedulers(spec, plan, hosts, key, outputs, held),
                                       time.time(), read=read, part_of=part_of)
            except repair.RepairError as exc:
                # Without the schedulers' view the states still move; a person's drain is just not seen.
                progress(f"schedulers not read ({exc}); states judged without them")
                outcome = repair.judge(states, findings, nodes, None, time.time(), read=read, part_of=part_of)
        repair.write_states(path, {**outcome.states, **strayed})
        planned = [n.name for n in plan.nodes]
        # Against what the stack holds, so a record that failed before is made by the next run.
        if as_output(outcome.states, planned) != outputs.get("nodeHealth"):
            _record_outputs(args.stack, outputs, progress)
    return outcome


def _holder(stack: str) -> str:
    """Who holds a cluster's repair, as the run another checkout is refused names it."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a container's uid with no passwd entry
        user = f"uid {os.getuid()}"
    return (f"railyard verify --repair of stack {stack} by {user}@{socket.gethostname()} "
            f"(pid {os.getpid()}), since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")


def _record_outputs(stack: str, outputs: Mapping, progress) -> None:
    """The states just written, in the stack's `nodeHealth` output too. The file stays the record
    the loop works from: a stack whose outputs cannot be written now gets them at its next `up`."""
    from railyard.engine.lock import checkout_lock
    from railyard.stack import applied_from

    # The record run computes every output from this checkout's stack file: after an edit not
    # yet applied, the stack's outputs would describe settings it does not have.
    last = outputs.get("appliedFrom") or {}
    if not last:
        why = "the stack's last up was made by a Railyard that exported no appliedFrom"
    elif last.get("stackFile") != applied_from(paths.stack_file(stack))["stackFile"]:
        why = f"{paths.stack_file_name(stack)} has changed since the stack's last up"
    else:
        progress(f"recording the node states in stack {stack}'s outputs (nodeHealth)")
        try:
            with checkout_lock():
                proc = pulumi.record_outputs(stack, timeout=RECORD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            why = (f"the program did not finish in {RECORD_TIMEOUT_S:.0f} s; `railyard recover --stack {stack}` "
                   "clears what the stopped engine left")
        except (ToolchainError, OSError) as exc:
            why = str(exc)
        else:
            if proc.returncode == 0:
                return
            why = pulumi.failure_line(proc, "refresh")
    print(f"railyard verify: node states not recorded in stack {stack}'s outputs ({why}); "
          f"{paths.node_states(stack).relative_to(paths.project_root())} holds them, and the next `up` "
          "records them", file=sys.stderr)


def _standing(states: Mapping, findings: Mapping[str, list[str]], pairs_run: set[tuple[str, int]],
              hosts: Mapping) -> dict[str, list[str]]:
    """The recorded rail pair finding of each node out of service (or suspect) for one whose pairs
    on that rail did not run in this reading (drained, busy, or not asked for with --deep), where
    this reading's `findings` do not hold it already: it stands, so a reading that could not
    re-test it does not return the node."""
    from railyard import verify

    recorded = {node: [said] for node, state in states.items()
                if node in hosts and state.state in ("suspect", "drained", "failed")
                and (basis := state.basis()) is not None and (said := basis.finding) is not None
                and said not in findings.get(node, [])}
    return verify.standing_pair_findings(recorded, recorded, pairs_run)


def _rechecked(again, which: list[str], latest: dict[str, list], recorded_pairs: dict[str, list[str]]
               ) -> dict[str, list[str]]:
    """A reading again of the nodes `which` (a verify.Report) as the loop takes it: each node's
    messages, with every finding of the last reading (`latest`, each node's whole Findings) that
    stands through it: one of a part it could not read on the node (the subnet not read just after
    a reboot), and a rail pair's whose pairs did not run again, whatever the depth, as those a
    record held (`_standing`); both are brought up to date here."""
    from railyard import verify

    read = _by_node(again.findings, which)
    for n in which:
        unread = {*again.unread, *again.unread_on.get(n, ())}
        kept = [f for f in latest.get(n, []) if f.part in unread and f not in read.get(n, [])]
        if kept:
            read.setdefault(n, []).extend(kept)
    for n, kept in verify.standing_pair_findings(latest, which, again.pairs_run).items():
        read.setdefault(n, []).extend(f for f in kept if f not in read.get(n, []))
    latest.update({n: read.get(n, []) for n in which})
    said = _messages(read)
    standing = verify.standing_pair_findings(recorded_pairs, which, again.pairs_run)
    for n in which:
        # A pair that ran again settles its record: a later reading that cannot run it does not
        # bring the old finding back.
        if n in standing:
            recorded_pairs[n] = standing[n]
            said.setdefault(n, []).extend(m for m in standing[n] if m not in said[n])
        else:
            recorded_pairs.pop(n, None)
    return said


def _repaired(outcome: repair.Outcome, findings: list) -> bool:
    """Whether the loop ran to its end, left every node ready, and found nothing faulty out of its
    reach: a faulty node a person or acceptance holds, and a finding of no node (a cable between
    two switches), are not the loop's to mend."""
    faulty = {f.node for f in findings if f.node}
    return (not outcome.stopped and all(f.node for f in findings)
            and not faulty & {*outcome.by_person, *outcome.by_acceptance}
            and all(s.state == "ready" for s in outcome.states.values()))


def _show_states(outcome: repair.Outcome) -> None:
    """The nodes that are not ready, those a person holds, and the hand-off list."""
    for node, s in sorted(outcome.states.items()):
        if s.state not in ("ready", "failed"):
            unread = outcome.unjudged.get(node)
            print(f"{'node ' + s.state:<16} {node}: {s.reason}"
                  + (f" (kept: its findings in {', '.join(unread)} not read this time)" if unread else ""))
    for node, why in sorted(outcome.by_person.items()):
        print(f"{'node held':<16} {node}: out of service by a person ({why}); left alone")
    for node, why in sorted(outcome.by_acceptance.items()):
        print(f"{'node held':<16} {node}: cordoned by acceptance ({why}); acceptance's next run decides")
    failed = outcome.failed()
    if failed:
        print(f"hand-off: {len(failed)} node(s) failed and need a person:")
        for node, s in failed.items():
            print(f"  {node}: {s.reason}")
            for c in s.history:
                print(f"    {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(c.time))}Z {c.state}: {c.reason}")
