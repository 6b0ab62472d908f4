"""The benchmark harness: sections yield figures, the harness repeats, takes medians and reports.

A section is a function `run(ctx) -> Iterable[Sample]`; the harness calls it `repeat` times and
records, per figure, every value and the median. Targets (the bar each figure should meet) are
data on the figure, so the table says met / missed without any timed test.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from railyard import __version__, paths


@dataclass(frozen=True)
class Sample:
    figure: str
    value: float
    unit: str
    target: float | None = None  # the figure should be <= target
    note: str = ""


@dataclass
class Context:
    repeat: int
    quick: bool
    workdir: Path


@dataclass(frozen=True)
class Section:
    name: str
    description: str
    run: Callable[[Context], Iterable[Sample]]


@dataclass
class Figure:
    section: str
    figure: str
    unit: str
    values: list[float] = field(default_factory=list)
    target: float | None = None
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def status(self) -> str:
        if self.target is None:
            return ""
        return "met" if self.median <= self.target else "MISSED"


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def versions() -> dict:
    out = {"railyard": __version__}
    pulumi = paths.bin_dir() / "pulumi"
    if pulumi.exists():
        proc = subprocess.run([str(pulumi), "version"], capture_output=True, text=True, check=False)
        out["pulumi"] = proc.stdout.strip()
    return out


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def peak_rss_mib_of_children() -> float:
    """Peak RSS of the largest child process waited for so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def run_sections(sections: list[Section], repeat: int, quick: bool, out: Path | None = None) -> dict:
    out = out or paths.bench_dir() / "latest.json"
    workdir = paths.bench_dir() / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    figures: dict[tuple[str, str], Figure] = {}
    ctx = Context(repeat=repeat, quick=quick, workdir=workdir)
    # Wall times mean little on a machine others are loading: the load average before and after
    # each section goes into the report beside them.
    load: dict[str, dict[str, list[float]]] = {}
    errors: list[dict] = []
    for section in sections:
        print(f"bench: {section.name}: {section.description}", file=sys.stderr, flush=True)
        before = list(os.getloadavg())
        try:
            for _ in range(repeat):
                for s in section.run(ctx):
                    key = (section.name, s.figure)
                    fig = figures.setdefault(key, Figure(section.name, s.figure, s.unit, target=s.target, note=s.note))
                    fig.values.append(s.value)
        except Exception as exc:  # the other sections' figures still count; the report says what failed
            errors.append({"section": section.name, "error": f"{type(exc).__name__}: {exc}"[-4000:]})
            print(f"bench: {section.name} failed: {exc}", file=sys.stderr, flush=True)
        load[section.name] = {"before": before, "after": list(os.getloadavg())}
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "repeat": repeat,
        "quick": quick,
        "load_average": load,
        "errors": errors,
        "figures": [
            {"section": f.section, "figure": f.figure, "median": f.median, "unit": f.unit,
             "values": f.values, "target": f.target, "status": f.status, "note": f.note}
            for f in figures.values()
        ],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(out)
    print(render_table(report))
    print(f"\nwritten: {out}")
    return report


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def render_table(report: dict) -> str:
    rows = [("section", "figure", "median", "unit", "target", "status", "n")]
    for f in report["figures"]:
        rows.append((f["section"], f["figure"], _fmt(f["median"]), f["unit"],
                     "" if f["target"] is None else f"<= {_fmt(f['target'])}", f["status"], str(len(f["values"]))))
    if len(rows) == 1:
        return "no figures" + "".join(f"\n{e['section']} failed: {e['error'].splitlines()[0]}"
                                      for e in report.get("errors") or ())
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    # A note says what a number alone cannot (the routing engine OpenSM used, say).
    lines += [f"note: {f['figure']}: {f['note']}" for f in report["figures"] if f.get("note")]
    for name, la in (report.get("load_average") or {}).items():
        lines.append(f"load average (1, 5, 15 min) around {name}: "
                     f"{' '.join(f'{v:.1f}' for v in la['before'])} before, {' '.join(f'{v:.1f}' for v in la['after'])} after")
    for e in report.get("errors") or ():
        lines.append(f"{e['section']} failed: {e['error'].splitlines()[0]}")
    return "\n".join(lines)
