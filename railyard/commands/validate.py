"""`railyard validate STACKFILE`: check a stack file before anything is built.

Exit 0 with a one-line summary, or 1 with every problem on stderr, one per line. A user sees
problems, never a traceback: a missing file, a directory or bad YAML are problems too.
"""

from __future__ import annotations

import sys

from railyard.model.errors import SpecError


def register(sub) -> None:
    p = sub.add_parser(
        "validate",
        help="check a stack file and report every problem in it",
        description="Check the railyard:* keys of a Pulumi stack file; Pulumi's own keys are left alone.",
    )
    p.add_argument("stackfile", metavar="STACKFILE", help="a stack file, e.g. stacks/Pulumi.lab.yaml")
    p.set_defaults(func=handle)


def summary(spec) -> str:
    pools = ", ".join(
        f"{p.count} x {p.sku}" + (f" ({p.vms_per_host} VM/host)" if spec.virtual else "") for p in spec.node_pools
    )
    c = spec.fabric.compute
    return (f"stack {spec.stack}: {spec.layout}, driver {spec.driver}, region {spec.region}; "
            f"{pools}; {c.kind} {c.speed} on {c.switch}")


def handle(args) -> int:
    path = args.stackfile
    try:
        from railyard.stack import load_stack_file

        spec = load_stack_file(path)
    except SpecError as exc:
        print(exc.report(f"railyard validate: {path}"), file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug in the model must still read as one line
        print(f"railyard validate: {path}: internal error ({type(exc).__name__}: {exc}); "
              "please report it with the stack file", file=sys.stderr)
        return 2
    print(f"OK {path}: {summary(spec)}")
    return 0
