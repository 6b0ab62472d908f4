"""Every kept tool output is accounted for: in a fixture directory with a SOURCES.md, each file is
named there (where and how it was captured), so no typed or unexplained file passes as real output."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "railyard" / "data" / "fixtures"


def test_each_file_of_a_fixture_directory_is_named_in_its_sources():
    dirs = sorted(p.parent for p in FIXTURES.rglob("SOURCES.md"))
    assert {d.name for d in dirs} >= {"gpu", "slurm", "lldp"}, dirs
    unnamed = [str(f.relative_to(FIXTURES)) for d in dirs for f in sorted(d.iterdir())
               if f.is_file() and f.name != "SOURCES.md" and f.name not in (d / "SOURCES.md").read_text()]
    assert not unnamed, f"fixtures not named in their directory's SOURCES.md: {unnamed}"
