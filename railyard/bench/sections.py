"""The registry of benchmark sections; a new section module is added here by name."""

from __future__ import annotations

from railyard.bench import (
    bench_engine, bench_hosts, bench_kubernetes, bench_lab, bench_opensm, bench_planner, bench_regions, bench_review,
    bench_verify,
)
from railyard.bench.harness import Section

_MODULES = (bench_planner, bench_engine, bench_review, bench_lab, bench_hosts, bench_verify, bench_kubernetes,
            bench_opensm, bench_regions)


def all_sections() -> dict[str, Section]:
    found = {}
    for mod in _MODULES:
        for section in mod.SECTIONS:
            found[section.name] = section
    return found
