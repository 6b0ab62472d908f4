"""`railyard fabric sweep [--json] [--roots auto|yes|no] [--no-pkeys] [--keep DIR] STACKFILE`:
the stack's InfiniBand fabric simulated by ibsim and swept by OpenSM (railyard.sweep).
`railyard fabric verify --ibnetdiscover FILE [--json] STACKFILE`: a dump of a subnet held against
the plan (railyard.model.fabric.verify).

Prints the routing engine OpenSM used (ftree, or what it fell back to and why), the sweep's
time and the simulator's memory, then the checks against the plan: cabling, hops and partitions.
Exit 0 when every check passes, 1 when one fails or the stack is refused, 2 on an internal error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from railyard.model.errors import SpecError


def register(sub) -> None:
    p = sub.add_parser("fabric", help="check a stack's fabric with its own software (ibsim, OpenSM)",
                       description="Check a stack's compute fabric with the software that runs it.")
    fsub = p.add_subparsers(dest="fabric_command", metavar="SUBCOMMAND")
    fsub.required = True
    s = fsub.add_parser(
        "sweep", help="simulate the InfiniBand fabric with ibsim and sweep it with OpenSM",
        description="Simulate the stack's InfiniBand fabric with ibsim (every switch, HCA and planned "
                    "cable), sweep it once with OpenSM and the options Railyard chose, and check the "
                    "routing engine, the cabling, the hops and the partitions against the plan.")
    s.add_argument("stackfile", metavar="STACKFILE")
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument("--roots", choices=("auto", "yes", "no"), default="auto",
                   help="tell OpenSM the root switches' GUIDs: auto (where the tree is not pure), yes, no")
    s.add_argument("--no-pkeys", action="store_true", help="skip reading every HCA's P_Key table")
    s.add_argument("--keep", metavar="DIR", help="keep the simulation's files (topology, OpenSM's files and log) in DIR")
    s.set_defaults(func=handle_sweep)
    v = fsub.add_parser(
        "verify", help="hold an ibnetdiscover dump of the subnet against the plan",
        description="Compare a subnet as ibnetdiscover printed it with the stack's planned InfiniBand "
                    "fabric, by node description: cables swapped, moved, missing or not planned, devices "
                    "not planned, links trained below the planned width or speed. Reads no state: a "
                    "cabling crew checks a dump with it before the cluster exists. Exit 1 on any finding.")
    v.add_argument("stackfile", metavar="STACKFILE")
    v.add_argument("--ibnetdiscover", metavar="FILE", required=True,
                   help="ibnetdiscover's output (run on a host of the fabric, or with --load-cache)")
    v.add_argument("--json", action="store_true", help="one record per finding: kind, where, planned, found")
    v.set_defaults(func=handle_verify)


def handle_sweep(args) -> int:
    from railyard.stack import load
    from railyard.sweep import SimulatorError, sweep

    try:
        spec, plan = load(args.stackfile)
    except SpecError as exc:
        print(exc.report(f"railyard fabric sweep: {args.stackfile}"), file=sys.stderr)
        return 1
    if plan.fabric.kind != "infiniband":
        print(f"railyard fabric sweep: {args.stackfile}: the compute fabric is {plan.fabric.kind}; "
              "OpenSM sweeps InfiniBand fabrics only", file=sys.stderr)
        return 1
    roots = {"auto": None, "yes": True, "no": False}[args.roots]
    progress = None if args.json else (lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    try:
        report = sweep(plan.fabric, spec.tenants, workdir=Path(args.keep) if args.keep else None, roots=roots,
                       check_pkeys=not args.no_pkeys, progress=progress)
    except (SimulatorError, ValueError) as exc:
        print(f"railyard fabric sweep: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"railyard fabric sweep: {exc.filename or args.keep}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug must still read as one line
        print(f"railyard fabric sweep: {args.stackfile}: internal error ({type(exc).__name__}: {exc}); "
              "please report it with the stack file", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render(report))
    return 0 if report.ok else 1


# How many findings of one kind the text report lists before it counts the rest.
SHOWN_PER_KIND = 20


def handle_verify(args) -> int:
    from railyard.model.fabric.subnet import parse_ibnetdiscover
    from railyard.model.fabric.verify import verify
    from railyard.stack import load

    what = f"railyard fabric verify: {args.stackfile}"
    try:
        spec, plan = load(args.stackfile)
    except SpecError as exc:
        print(exc.report(what), file=sys.stderr)
        return 1
    if plan.fabric.kind != "infiniband":
        print(f"{what}: the compute fabric is {plan.fabric.kind}; ibnetdiscover shows InfiniBand subnets "
              "only", file=sys.stderr)
        return 1
    try:
        text = Path(args.ibnetdiscover).read_text(encoding="utf-8", errors="replace")
        subnet = parse_ibnetdiscover(text)
    except OSError as exc:
        print(f"railyard fabric verify: {args.ibnetdiscover}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"railyard fabric verify: {args.ibnetdiscover}: not ibnetdiscover's output ({exc})", file=sys.stderr)
        return 1
    if not subnet.devices:
        print(f"railyard fabric verify: {args.ibnetdiscover}: no device in it; is it ibnetdiscover's output?",
              file=sys.stderr)
        return 1
    findings = verify(plan.fabric, subnet.renamed({guid: name for name, guid in spec.verify.switch_guids}))
    if args.json:
        print(json.dumps([f.to_json() for f in findings], indent=2))
        return 1 if findings else 0
    print(f"{len(subnet.devices)} devices and {len(subnet.cables)} cables read from {args.ibnetdiscover}; "
          f"{plan.fabric.nodes} nodes planned")
    shown: dict[str, int] = {}
    for f in findings:
        shown[f.kind] = shown.get(f.kind, 0) + 1
        if shown[f.kind] <= SHOWN_PER_KIND:
            print(f"{f.kind:<16} {f}")
    for kind, n in shown.items():
        if n > SHOWN_PER_KIND:
            print(f"{kind:<16} ... and {n - SHOWN_PER_KIND} more (--json lists every one)")
    print("as planned" if not findings else counted(findings))
    return 1 if findings else 0


def counted(findings) -> str:
    """`2 findings: 1 cable-swapped, 1 link-missing`."""
    from collections import Counter

    kinds = Counter(f.kind for f in findings)
    return f"{len(findings)} finding{'s' if len(findings) != 1 else ''}: " + \
        ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))


def render(report) -> str:
    r = report
    rss = f"{r.ibsim_rss_kib / 1024:.0f} MiB" if r.ibsim_rss_kib else "unknown"
    lines = [
        f"subnet      {r.nodes} nodes: {r.hcas} HCAs, {r.switches} switches, {r.tiers} tiers",
        f"routing     {r.engine or 'none'}" + (" (root GUIDs given)" if r.root_guids else " (roots found by ftree)"),
    ]
    if r.refusals:
        lines.append("  ftree refused: " + "; ".join(r.refusals))
    lines += [
        f"sweep       {r.seconds:.2f} s (all steps {r.total_seconds:.2f} s), ibsim peak memory {rss}",
        f"cabling     {'as planned' if not r.cabling else counted(r.cabling)}",
    ]
    if r.trained_rates and r.trained_rates != [r.planned_rate]:
        # ibsim trains links at the rates it knows; the cabling and routing are what a sweep judges.
        lines.append(f"rates       planned {r.planned_rate}; ibsim trained the links at {', '.join(r.trained_rates)} "
                     "(its rates stop short of the plan's), so speed is not judged here")
    lines += [f"  {f.kind}: {f}" for f in r.cabling[:20]]
    for h in r.hops:
        mark = "ok" if h.ok else "WRONG"
        traced = f"{h.traced} switches" if h.traced is not None else "not traced"
        lines.append(f"hops        {h.label}: {h.a} -> {h.b}: {traced} (planned {h.planned}) {mark}")
    if r.pkeys_checked:
        bad = len(r.pkey_mismatches)
        lines.append(f"partitions  {r.pkeys_checked} HCAs' P_Key tables read, {bad} wrong")
    lines.append("result      " + ("every check passed" if r.ok else "FAILED: " + "; ".join(r.problems()[:5])))
    return "\n".join(lines)
