"""The `railyard` command line: thin sub-commands over the model, the engine and the lab."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Protocol

from railyard import drivers
from railyard.commands import bench, env, fabric, plan, plugins, reap, review, stack, topology, tune, validate, verify

# Each module exposes register(subparsers); the order is the order of `railyard --help`. The
# drivers' own commands (`railyard lab ...`) live with their drivers and follow `topology`.
class _Command(Protocol):
    def register(self, sub: Any) -> None: ...


COMMANDS: tuple[_Command, ...] = (env, stack, validate, plan, fabric, topology, *drivers.cli_modules(), tune, verify, review, reap, plugins, bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="railyard",
        description="Describe a GPU training cluster as code and bring it up.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
