"""`railyard reap [--dry-run] [--stack S]...`: destroy the ephemeral stacks whose time is up.

Every stack of the project in the backend is classified by its `railyard:expires-at` tag (written
by `railyard up` from the stack's Expiry resource): no tag is a long-lived stack, a time in the
future an unexpired one; both are left alone, and naming one with --stack gets a refusal that says
why. An expired stack is destroyed and then removed from the backend (`pulumi stack rm`, keeping
its stack file, which belongs to the checkout). A stack whose state still holds protected
resources is refused too: reap never unprotects anything. The exit status is non-zero only when a
destroy (or the removal after it) fails.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from railyard import drivers, lifecycle, paths, repair
from railyard.engine import pulumi
from railyard.engine.toolchain import ToolchainError, engine_env
from railyard.lifecycle import backend


def register(sub) -> None:
    p = sub.add_parser("reap", help="destroy and remove expired ephemeral stacks; never touches the others",
                       description=__doc__.split("\n\n", 1)[1])
    p.add_argument("--dry-run", action="store_true", help="list every stack with its expiry; change nothing")
    p.add_argument("--stack", "-s", action="append", default=[], metavar="S",
                   help="only these stacks (repeatable); a named stack that may not be reaped is refused")
    p.set_defaults(func=handle)


@dataclass
class Outcome:
    life: lifecycle.Lifetime
    action: str
    failed: bool = False
    detail: str = ""


def _destroy(stack: str) -> tuple[bool, str]:
    """Destroy, then remove the stack from the backend; (ok, what happened)."""
    stack_file = paths.stack_file(stack)
    had_file = stack_file.exists()
    # The stack file of an expired stack may be gone, and its state may hold Kubernetes objects.
    why = drivers.ensure_engine("", True)
    if why is not None:
        return False, why
    proc = pulumi.run(["destroy", "--yes", "--skip-preview", "--stack", stack], capture=True, check=False)
    if proc.returncode != 0:
        return False, "destroy failed:\n" + _tail(proc.stdout + proc.stderr)
    # --preserve-config: the stack file is the checkout's, not the backend's.
    proc = pulumi.run(["stack", "rm", "--yes", "--preserve-config", "--stack", stack], capture=True, check=False)
    if proc.returncode != 0:
        return False, "destroyed, but `pulumi stack rm` failed:\n" + _tail(proc.stdout + proc.stderr)
    if not had_file and stack_file.exists():
        stack_file.unlink()  # written by the engine for this destroy only (its secrets salt)
    repair.forget_states(stack, _driver(stack_file) if had_file else None)
    return True, "destroyed and removed"


def _driver(stack_file) -> str | None:
    """The stack file's driver, as written; None where it cannot be read."""
    from railyard.model.errors import SpecError
    from railyard.model.spec import read_stack_file

    try:
        driver = read_stack_file(stack_file)[0].get("railyard:driver")
    except SpecError:
        return None
    return driver if isinstance(driver, str) else None


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join("      " + line for line in text.strip().splitlines()[-lines:])


def plan(names: list[str], explicit: bool, now) -> list[tuple[lifecycle.Lifetime, str | None]]:
    """Each stack with its lifetime and, when it must be left alone, why."""
    out = []
    for name in names:
        life = lifecycle.classify(name, backend.stack_tags(name).get(lifecycle.EXPIRES_TAG), now)
        why = {
            lifecycle.LONG_LIVED: "long-lived: reap never touches it (railyard down --force destroys it deliberately)",
            lifecycle.UNEXPIRED: "not expired yet",
            lifecycle.INVALID: f"its {lifecycle.EXPIRES_TAG} tag is not an RFC 3339 time; fix or remove the tag",
        }.get(life.state)
        if why is None:
            urns = backend.protected(backend.export(name))
            if urns:
                why = (f"{len(urns)} resources are protected (it was long-lived once); reap never unprotects: "
                       f"remove the tag, or railyard down --stack {name} --force")
        if why is not None and explicit:
            why = "refused: " + why
        out.append((life, why))
    return out


def handle(args) -> int:
    now = lifecycle.utcnow()
    try:
        known = backend.list_stacks()
        missing = [s for s in args.stack if s not in known]
        names = [s for s in args.stack if s in known] if args.stack else known
        decisions = plan(names, bool(args.stack), now)
    except (ToolchainError, pulumi.PulumiError) as exc:
        print(f"railyard reap: {exc}", file=sys.stderr)
        if isinstance(exc, pulumi.PulumiError):
            print(exc.output, file=sys.stderr)
        return 1
    where = engine_env(paths.project_root())["PULUMI_BACKEND_URL"].split("?", 1)[0]
    mode = " (dry run: nothing is changed)" if args.dry_run else ""
    print(f"railyard reap: {len(names)} stack(s) in {where} at {lifecycle.rfc3339(now)}{mode}")
    for name in missing:
        print(f"  {name}: no such stack in this backend")
    outcomes = []
    for life, why in decisions:
        if why is not None:
            outcomes.append(Outcome(life, why))
        elif args.dry_run:
            outcomes.append(Outcome(life, "would be destroyed and removed"))
        else:
            print(f"  {life.stack}: {life.describe(now)}: destroying...", flush=True)
            try:
                ok, detail = _destroy(life.stack)
            except (ToolchainError, pulumi.PulumiError) as exc:
                ok, detail = False, str(exc)
            outcomes.append(Outcome(life, detail.split("\n", 1)[0], failed=not ok,
                                    detail=detail.split("\n", 1)[1] if "\n" in detail else ""))
    width = max((len(o.life.stack) for o in outcomes), default=0)
    for o in outcomes:
        print(f"  {o.life.stack:<{width}}  {o.life.describe(now)}: {o.action}")
        if o.detail:
            print(o.detail)
    failed = [o.life.stack for o in outcomes if o.failed]
    destroyed = [o.life.stack for o in outcomes if o.action == "destroyed and removed"]
    if not args.dry_run:
        print(f"railyard reap: {len(destroyed)} destroyed and removed"
              + (f", {len(failed)} failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
