"""`railyard tune`: the host-tuning playbook outside Pulumi, for operators."""

from __future__ import annotations

import os
import sys

from railyard import drivers, paths
from railyard.engine import pulumi
from railyard.engine.toolchain import ToolchainError


def register(sub) -> None:
    p = sub.add_parser("tune", help="run the host-tuning playbook on a stack's nodes (outside Pulumi)")
    p.add_argument("--stack", "-s", default="lab", help="stack (default: lab)")
    p.add_argument("--check", action="store_true", help="check mode with diff: report changes, change nothing")
    p.add_argument("--limit", help="only these hosts (Ansible pattern)")
    p.add_argument("--tags", help="only these roles (comma-separated tags, e.g. hugepages,sriov)")
    p.set_defaults(func=handle)


def handle(args) -> int:
    from railyard.inventory import MachineEntry
    from railyard.model.errors import SpecError
    from railyard.stack import load
    from railyard.tuning import runner

    try:
        spec, plan = load(paths.stack_file(args.stack))
    except SpecError as exc:
        print(exc.report(f"railyard tune: {paths.stack_file(args.stack).name}"), file=sys.stderr)
        return 1
    if not drivers.entry(spec.driver).capabilities.railyard_tunes:
        print(f"railyard tune: stack {args.stack}'s driver {spec.driver} has its machines tuned by the platform; "
              "Railyard runs no tuning on them", file=sys.stderr)
        return 1
    try:
        outputs = pulumi.stack_outputs(args.stack, secrets=True)
    except (ToolchainError, pulumi.PulumiError) as exc:
        print(f"railyard tune: cannot read stack {args.stack}'s outputs (is it up?): {exc}", file=sys.stderr)
        return 1
    inventory: list[MachineEntry] = outputs.get("inventory") or []
    # A stack that exports no key logs in with ssh-agent's (a hosts stack with sshKey: agent).
    key = (outputs.get("access") or {}).get("privateKey") or None
    if not inventory:
        print(f"railyard tune: stack {args.stack} has no nodes; run `make up STACK={args.stack}`", file=sys.stderr)
        return 1
    if key is None and not os.environ.get("SSH_AUTH_SOCK"):
        print(f"railyard tune: stack {args.stack} exports no access key, so its key is ssh-agent's, and "
              "SSH_AUTH_SOCK is not set here", file=sys.stderr)
        return 1
    hosts, secret_vars = runner.stack_hosts(spec, plan, outputs)
    result = runner.run(args.stack, hosts, key, check=args.check, limit=args.limit, tags=args.tags,
                        secret_vars=secret_vars,
                        progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    for host, stats in sorted(result.hosts.items()):
        print(f"{host:<16} ok={stats.ok} changed={stats.changed} failed={stats.failed} "
              f"unreachable={stats.unreachable}")
    for change in result.changes:
        print(f"  would change: {change}")
    for failure in result.failures:
        print(f"FAILED {failure}", file=sys.stderr)
    print(f"artifacts: {result.run_dir}")
    return 0 if result.ok else 2
