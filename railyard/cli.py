"""The `railyard` command line: thin sub-commands over the model, the engine and the lab."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each entry is a module under railyard.commands exposing register(subparsers).
# A command whose module is missing is skipped, so the CLI grows one file at a time.
COMMANDS = ("env", "stack", "validate", "plan", "topology", "lab", "tune", "review", "reap", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="railyard",
        description="Describe a GPU training cluster as code and bring it up.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"railyard.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"railyard.commands.{name}":
                raise
            continue
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
