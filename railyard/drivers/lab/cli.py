"""`railyard lab nodes|ssh|gc`: look at and reach a lab stack's nodes, and clean up after a lost state."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from railyard import paths
from railyard.drivers import CliHooks
from railyard.engine import pulumi
from railyard.engine.toolchain import ToolchainError
from railyard.ssh_client import write_key


def register(sub) -> None:
    lab = sub.add_parser("lab", help="the local lab: list nodes, ssh to one, garbage-collect")
    labsub = lab.add_subparsers(dest="lab_command", metavar="COMMAND")
    labsub.required = True

    p = labsub.add_parser("nodes", help="one line per node and VM: name, management address, pool, SKU")
    p.add_argument("--stack", "-s", default=None, help="stack (default: the selected stack, else lab)")
    p.add_argument("--json", action="store_true", help="print the inventory as JSON")
    p.set_defaults(func=nodes)

    p = labsub.add_parser("ssh", help="open a shell on NODE, or run CMD there and return its exit code")
    p.add_argument("--stack", "-s", default=None, help="stack (default: the selected stack, else lab)")
    p.add_argument("node", metavar="NODE")
    p.add_argument("cmd", nargs="*", metavar="CMD")
    p.set_defaults(func=ssh)

    p = labsub.add_parser("gc", help="remove lab objects of STACK (or, with --all, of every stack of this "
                                     "checkout) that no state knows about")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--stack", "-s", default=None, help="stack (default: the selected stack, else lab)")
    which.add_argument("--all", action="store_true",
                       help="every lab stack of this checkout, hashed names too; objects of other checkouts and "
                            "of test project copies are listed and never removed")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    p.set_defaults(func=gc)

    from railyard.drivers.lab.faults import ARGS, KINDS, TRANSIENT

    p = labsub.add_parser("fault", help="break a running lab on purpose (for `railyard verify`), list its "
                                        "faults, or --clear them",
                          epilog="kinds: " + "; ".join(f"{k} {' '.join(a)}" for k, a in ARGS.items()))
    p.add_argument("--stack", "-s", default=None, help="stack (default: the selected stack, else lab)")
    p.add_argument("--clear", action="store_true", help="undo the faults (of NODE or SWITCH, if given), newest first")
    p.add_argument("--transient", action="store_true",
                   help=f"the node's next boot clears it (only {', '.join(TRANSIENT)}); else it outlives reboots")
    p.add_argument("kind", nargs="?", metavar="KIND", help=", ".join(KINDS))
    p.add_argument("target", nargs="*", metavar="TARGET")
    p.set_defaults(func=fault)


def default_stack(explicit: str | None) -> str:
    if explicit:
        return explicit
    proc = pulumi.run(["stack", "--show-name"], capture=True, check=False)
    name = proc.stdout.strip() if proc.returncode == 0 else ""
    return name or "lab"


def inventory_from(outputs: dict) -> list[dict]:
    """Nodes and, after each, its VMs (virtual layout), from a stack's outputs."""
    machines = []
    for node in outputs.get("inventory") or []:
        machines.append(node)
        machines.extend({**vm, "pool": node.get("pool"), "sku": "vm", "host": node["name"]}
                        for vm in node.get("vms") or [])
    return machines


def after_up(spec) -> None:
    """What `railyard up` prints once a lab stack is up: its machines and how to reach them."""
    print(f"\nNodes of {spec.stack} (reach one with: .venv/bin/railyard lab ssh --stack {spec.stack} NODE [CMD]):")
    for m in inventory_from(pulumi.stack_outputs(spec.stack)):
        print(f"  {m['name']:<16} {m['management_ip']}")


def _fail(msg: str) -> int:
    print(f"railyard lab: {msg}", file=sys.stderr)
    return 1


def nodes(args) -> int:
    try:
        stack = default_stack(args.stack)
        machines = inventory_from(pulumi.stack_outputs(stack))
    except (ToolchainError, pulumi.PulumiError) as exc:
        return _fail(f"cannot read the stack's outputs: {exc}")
    if args.json:
        print(json.dumps(machines, indent=2))
        return 0
    for m in machines:
        print(f"{m['name']:<16} {m['management_ip']:<15} {m.get('pool', ''):<10} {m.get('sku', '')}")
    return 0


def ssh(args) -> int:
    try:
        stack = default_stack(args.stack)
        outputs = pulumi.stack_outputs(stack, secrets=True)
    except (ToolchainError, pulumi.PulumiError) as exc:
        return _fail(f"cannot read the stack's outputs: {exc}")
    machines = {m["name"]: m for m in inventory_from(outputs)}
    target = machines.get(args.node)
    if target is None:
        return _fail(f"no node {args.node!r} in stack {stack}; nodes: {', '.join(sorted(machines)) or 'none'}")
    key = (outputs.get("access") or {}).get("privateKey")
    if not key:
        return _fail(f"stack {stack} exports no access key")
    lab = paths.lab_dir(stack)
    lab.mkdir(parents=True, exist_ok=True)
    # The key lives only as long as the ssh process, in a 0600 file in a 0700 directory.
    with tempfile.TemporaryDirectory(dir=lab, prefix=".ssh-") as d:
        key_file = write_key(d, key)
        known = Path(d) / "known_hosts"
        known.write_text("".join(f"{m['management_ip']} {m['host_key']}\n" for m in machines.values()
                                 if m.get("host_key")))
        argv = ["ssh", "-i", str(key_file), "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
                "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
                f"root@{target['management_ip']}"]
        if not args.cmd:
            argv.insert(1, "-t")
        return subprocess.run([*argv, *args.cmd], check=False).returncode


def _summary(removed: dict) -> str:
    counts = [f"{len(v)} {k.replace('_', ' ')}" for k, v in removed.items() if v]
    return ", ".join(counts) or "nothing"


def _print_objects(removed: dict, verb: str) -> None:
    for kind, items in removed.items():
        for item in items:
            print(f"    {verb} {kind}: {item if isinstance(item, str) else json.dumps(item)}")


def gc_all(dry_run: bool) -> int:
    """Every lab stack of this checkout: objects of a stack the backend has no state for go
    entirely; of a stack with state, those its state does not know."""
    from railyard.drivers.lab import gc as lab_gc
    from railyard.drivers.lab.errors import LabError, require_root
    from railyard.engine import orphans
    from railyard.engine.lock import CheckoutBusy, checkout_lock

    try:
        require_root()
    except LabError as exc:
        return _fail(str(exc))
    engines = orphans.live_engines()
    if engines:
        return _fail(f"a Pulumi engine of this checkout is running (pid {', '.join(map(str, engines))}); its stack's "
                     "new objects are in no state yet. Run gc --all when it has finished; nothing was removed")
    root = paths.project_root()
    verb = "would remove" if dry_run else "removed"
    try:
        with checkout_lock(root, exclusive=True):
            # One listing decides which stacks have state: a backend that cannot be read is an
            # error, never "no state" (that would destroy live stacks).
            in_backend = {s["name"] for s in pulumi.run_json(["stack", "ls"])}
            print(f"railyard lab gc --all{' --dry-run' if dry_run else ''}: lab stacks of the checkout {root}")
            total = 0
            for owner in lab_gc.owners(root):
                if not owner.here:
                    where = f" ({', '.join(owner.roots)})" if owner.roots else ""
                    print(f"  tag {owner.tag}: belongs elsewhere: {owner.why}{where}; left alone")
                    continue
                assert owner.stack is not None, "owners() names the stack of every tag of this checkout"
                unmarked = " (unmarked objects, this checkout's by its lab directory)" if owner.unmarked else ""
                if owner.stack not in in_backend:
                    removed = lab_gc.destroy_all(owner.stack, root, dry_run=dry_run)
                    state = "no state in the backend"
                else:
                    known = pulumi.stack_resource_ids(owner.stack)
                    if known is None:
                        raise pulumi.PulumiError(["stack", "export", "--stack", owner.stack], 1,
                                                 "the stack is listed but its state cannot be read")
                    removed = lab_gc.gc(owner.stack, known, root, dry_run=dry_run)
                    state = f"state knows {len(known)} lab object(s)"
                total += sum(len(v) for v in removed.values())
                print(f"  stack {owner.stack} (tag {owner.tag}){unmarked}: {state}; {verb} {_summary(removed)}")
                _print_objects(removed, verb)
    except CheckoutBusy as exc:
        return _fail(str(exc))
    except (ToolchainError, pulumi.PulumiError, LabError) as exc:
        return _fail(f"{exc}{': ' + exc.output.strip()[-500:] if isinstance(exc, pulumi.PulumiError) else ''}; "
                     "nothing more was removed")
    print(f"railyard lab gc --all: {verb} {total} object(s) no state knows about")
    return 0


def gc(args) -> int:
    from railyard.drivers.lab import gc as lab_gc
    from railyard.drivers.lab.errors import LabError

    if args.all:
        return gc_all(args.dry_run)
    try:
        stack = default_stack(args.stack)
        known = pulumi.stack_resource_ids(stack)
    except (ToolchainError, pulumi.PulumiError) as exc:
        return _fail(str(exc))
    verb = "would remove" if args.dry_run else "removed"
    try:
        removed = lab_gc.gc(stack, known or set(), dry_run=args.dry_run)
    except LabError as exc:
        return _fail(str(exc))
    total = sum(len(v) for v in removed.values())
    print(f"railyard lab gc: stack {stack}: {verb} {total} object(s) no state knows about")
    _print_objects(removed, verb)
    return 0


def fault(args) -> int:
    from railyard.drivers.lab import faults
    from railyard.drivers.lab.errors import LabError
    from railyard.model.errors import SpecError
    from railyard.stack import load

    stack = default_stack(args.stack)
    try:
        _, plan = load(paths.stack_file(stack))
    except SpecError as exc:
        print(exc.report(f"railyard lab fault: {paths.stack_file(stack).name}"), file=sys.stderr)
        return 1
    try:
        if args.clear:
            node = args.kind  # `--clear [NODE]`
            if args.target:
                return _fail("fault --clear takes at most one NODE")
            for line in faults.clear(stack, plan, node):
                print(f"cleared: {line}")
            return 0
        if args.kind is None:
            for e in faults.faults(stack):
                print(e["said"])
            return 0
        print(faults.inject(stack, plan, args.kind, list(args.target), transient=args.transient))
    except LabError as exc:
        return _fail(str(exc))
    return 0


# The contract's hooks this module provides (railyard.drivers.CliHooks).
HOOKS = CliHooks(register=register, after_up=after_up)
