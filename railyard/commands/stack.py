"""`railyard up|preview|down|recover`: the make targets' engine commands for one stack.

Each validates the stack file before the engine starts (bad input touches nothing), stops this
checkout's plugin processes that outlived a killed engine (railyard.engine.orphans), selects or
creates the stack in the configured backend, then runs the real `pulumi` with the offline
environment, streaming its output.
"""

from __future__ import annotations

import sys

from railyard import drivers, paths, repair
from railyard.engine import pulumi
from railyard.engine.toolchain import ToolchainError


def register(sub) -> None:
    for name, help_text in (
        ("up", "create or update a stack (pulumi up --yes)"),
        ("preview", "show what `up` would change (pulumi preview --diff)"),
        ("down", "destroy a stack's resources (pulumi destroy --yes)"),
        ("recover", "after a killed up: stop its orphaned plugins, release the stack's lock and clear "
                    "pending creates (pulumi cancel; pulumi refresh --clear-pending-creates); then run up"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--stack", "-s", default="lab", help="stack name (stacks/Pulumi.<stack>.yaml); default: lab")
        p.add_argument("extra", nargs="*", help="extra arguments passed to pulumi after --")
        if name == "down":
            p.add_argument("--force", action="store_true",
                           help="a long-lived stack: unprotect every resource (pulumi state unprotect --all), "
                                "then destroy")
        p.set_defaults(func=handle, action=name)


PULUMI_ARGS = {
    "up": ["up", "--yes", "--skip-preview"],
    "preview": ["preview", "--diff"],
    "down": ["destroy", "--yes", "--skip-preview"],
    "recover": ["refresh", "--yes", "--skip-preview", "--clear-pending-creates"],
}


def validate(stack: str):
    """The stack's Spec, or None after saying why nothing will run."""
    from railyard.model.errors import SpecError
    from railyard.stack import load_stack_file

    path = paths.stack_file(stack)
    if not path.is_file():
        print(f"railyard: no stack file {path.relative_to(paths.project_root())}", file=sys.stderr)
        return None
    try:
        spec = load_stack_file(path)
    except SpecError as exc:
        print(exc.report(f"railyard: {path.name} is invalid; nothing was changed"), file=sys.stderr)
        return None
    why = drivers.ensure_engine(spec.driver, spec.kubernetes is not None) or drivers.preflight(spec)
    if why is not None:
        print(f"railyard: {why}", file=sys.stderr)
        return None
    return spec


def handle(args) -> int:
    spec = validate(args.stack)
    if spec is None:
        return 1
    from railyard.engine import orphans
    from railyard.engine.lock import checkout_lock

    orphans.stop_all()
    if args.action == "up":
        why = drivers.prepare(spec)
        if why is not None:
            print(f"railyard: {why}", file=sys.stderr)
            return 1
    try:
        # Shared with other engine commands; `lab gc --all` waits for none of them and they wait for it.
        with checkout_lock():
            pulumi.ensure_stack(args.stack)
            if args.action in ("up", "preview"):
                # Else the program, which exports them, would show the nodes another checkout
                # recorded back as they were here.
                repair.take_recorded_from_stack(args.stack, spec.driver)
            if args.action == "down" and not unprotect_for_down(args.stack, args.force):
                return 1
            if args.action == "recover":
                # The file backend holds no lock to cancel; a team backend may.
                pulumi.run(["cancel", "--yes", "--stack", args.stack], capture=True, check=False)
            proc = pulumi.run([*PULUMI_ARGS[args.action], "--stack", args.stack, *args.extra], check=False)
            if args.action == "up":
                # Even after a failed up: whatever it created is ephemeral and must be reaped.
                report_expiry(args.stack)
    except (ToolchainError, pulumi.PulumiError) as exc:
        print(f"railyard: {exc}", file=sys.stderr)
        if isinstance(exc, pulumi.PulumiError):
            print(exc.output, file=sys.stderr)
        return 1
    if proc.returncode == 0 and args.action == "up":
        drivers.after_up(spec)
        if spec.health.repair:
            return repair_after_up(args.stack)
    if proc.returncode == 0 and args.action == "down":
        # A destroy limited with --target leaves machines, and their states.
        repair.forget_states(args.stack, spec.driver, lambda: pulumi.holds_resources(args.stack) is not False)
    return proc.returncode


def repair_after_up(stack: str) -> int:
    """railyard:health.repair: the repair loop over the stack just brought up, as `railyard verify
    --repair` runs it. `up` fails only where the loop could not run at all; the nodes it could not
    return are in its report and hand-off list."""
    import argparse

    from railyard.commands import verify

    print(f"railyard: railyard:health.repair: verifying and repairing stack {stack}'s nodes", file=sys.stderr)
    rc = verify.handle(argparse.Namespace(stack=stack, json=False, only=",".join(verify._parts()), deep=False,
                                          ibnetdiscover=None, timeout=None, repair=True))
    return 1 if rc == 2 else 0


def unprotect_for_down(stack: str, force: bool) -> bool:
    """Whether `down` may go on: a long-lived stack's protected resources stop it unless --force,
    which unprotects them first. Checked before the engine starts, because `destroy --skip-preview`
    would delete every unprotected resource before it reached the first protected one."""
    from railyard.lifecycle import backend

    urns = backend.protected(backend.export(stack))
    if not urns:
        return True
    if not force:
        print(f"railyard: stack {stack} is protected: {len(urns)} of its resources are (a long-lived stack on a "
              f"driver of real machines, or railyard:protect: true, as of its last up), so nothing was destroyed.\n"
              f"To destroy it deliberately: railyard down --stack {stack} --force "
              f"(make down STACK={stack} FORCE=1), which runs `pulumi state unprotect --all` and then destroys.",
              file=sys.stderr)
        return False
    print(f"railyard: unprotecting {len(urns)} resources of {stack} (--force)", file=sys.stderr)
    pulumi.run(["state", "unprotect", "--all", "--yes", "--stack", stack], capture=True)
    return True


def report_expiry(stack: str) -> None:
    from railyard import lifecycle
    from railyard.lifecycle import backend

    when = backend.sync_expiry_tag(stack)
    if when is None:
        return
    now = lifecycle.utcnow()
    life = lifecycle.classify(stack, when, now)
    note = " — `railyard reap` destroys it" if life.state == lifecycle.EXPIRED else ""
    print(f"\nStack {stack} is ephemeral: {life.describe(now)}{note} (stack tag {lifecycle.EXPIRES_TAG}).")
