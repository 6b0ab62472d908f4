"""`railyard bench` (make bench): run benchmark sections, print a table, write latest.json."""

from __future__ import annotations

import signal
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("bench", help="run benchmarks; prints a table and writes .railyard/bench/latest.json")
    p.add_argument("sections", nargs="*", help="section names (default: all)")
    p.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is reported (default 3)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    p.add_argument("--list", action="store_true", help="list the sections and exit")
    p.add_argument("--output", type=Path, help="JSON output path (default .railyard/bench/latest.json)")
    p.set_defaults(func=handle)


def handle(args) -> int:
    from railyard.bench.harness import run_sections
    from railyard.bench.sections import all_sections

    sections = all_sections()
    if args.list:
        for s in sections.values():
            print(f"{s.name:10} {s.description}")
        return 0
    unknown = [n for n in args.sections if n not in sections]
    if unknown:
        print(f"railyard bench: unknown section(s) {', '.join(unknown)}; known: {', '.join(sections)}", file=sys.stderr)
        return 1
    if args.repeat < 1:
        print("railyard bench: --repeat must be at least 1", file=sys.stderr)
        return 1
    chosen = [sections[n] for n in args.sections] if args.sections else list(sections.values())
    # A terminated bench unwinds like an interrupted one, so the lab section's cleanup runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    report = run_sections(chosen, args.repeat, args.quick, args.output)
    return 1 if report["errors"] else 0
