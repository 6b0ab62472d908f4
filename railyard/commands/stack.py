"""`railyard up|preview|down`: the make targets' engine commands for one stack.

Each validates the stack file before the engine starts (bad input touches nothing), selects or
creates the stack in the configured backend, then runs the real `pulumi` with the offline
environment, streaming its output.
"""

from __future__ import annotations

import os
import sys

from railyard import paths
from railyard.engine import pulumi
from railyard.engine.toolchain import ToolchainError


def register(sub) -> None:
    for name, help_text in (
        ("up", "create or update a stack (pulumi up --yes)"),
        ("preview", "show what `up` would change (pulumi preview --diff)"),
        ("down", "destroy a stack's resources (pulumi destroy --yes)"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--stack", "-s", default="lab", help="stack name (stacks/Pulumi.<stack>.yaml); default: lab")
        p.add_argument("extra", nargs="*", help="extra arguments passed to pulumi after --")
        p.set_defaults(func=handle, action=name)


PULUMI_ARGS = {
    "up": ["up", "--yes", "--skip-preview"],
    "preview": ["preview", "--diff"],
    "down": ["destroy", "--yes", "--skip-preview"],
}


def stack_file(stack: str):
    return paths.project_root() / "stacks" / f"Pulumi.{stack}.yaml"


def validate(stack: str):
    """The stack's Spec, or None after saying why nothing will run."""
    from railyard.model.errors import SpecError
    from railyard.model.spec import load_stack_file

    path = stack_file(stack)
    if not path.is_file():
        print(f"railyard: no stack file {path.relative_to(paths.project_root())}", file=sys.stderr)
        return None
    try:
        spec = load_stack_file(path)
    except SpecError as exc:
        print(f"railyard: {path.name} is invalid; nothing was changed:\n{exc}", file=sys.stderr)
        return None
    if spec.driver == "lab" and os.geteuid() != 0:
        print(f"railyard: stack {stack} uses the lab driver, which needs root (it creates network namespaces, "
              "links, mounts and sshd processes); nothing was changed. Run it as root.", file=sys.stderr)
        return None
    return spec


def handle(args) -> int:
    spec = validate(args.stack)
    if spec is None:
        return 1
    try:
        pulumi.ensure_stack(args.stack)
        proc = pulumi.run([*PULUMI_ARGS[args.action], "--stack", args.stack, *args.extra], check=False)
    except (ToolchainError, pulumi.PulumiError) as exc:
        print(f"railyard: {exc}", file=sys.stderr)
        if isinstance(exc, pulumi.PulumiError):
            print(exc.output, file=sys.stderr)
        return 1
    if proc.returncode == 0 and args.action == "up" and spec.driver == "lab":
        print(f"\nNodes of {args.stack} (reach one with: .venv/bin/railyard lab ssh --stack {args.stack} NODE [CMD]):")
        from railyard.commands.lab import inventory_from

        for m in inventory_from(pulumi.stack_outputs(args.stack)):
            print(f"  {m['name']:<16} {m['management_ip']}")
    return proc.returncode
