"""The registry of benchmark sections; later issues add theirs here."""

from __future__ import annotations

import importlib

from railyard.bench.harness import Section

# Modules under railyard.bench exposing SECTION; missing ones are skipped until they exist.
_MODULES = ("bench_planner", "bench_engine", "bench_lab", "bench_tuning")


def all_sections() -> dict[str, Section]:
    found = {}
    for name in _MODULES:
        try:
            mod = importlib.import_module(f"railyard.bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"railyard.bench.{name}":
                raise
            continue
        for section in getattr(mod, "SECTIONS", ()):
            found[section.name] = section
    return found
