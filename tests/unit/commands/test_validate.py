"""`railyard validate STACKFILE`: exit 0 with one OK line, or 1 with every problem; never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from railyard.cli import main

ROOT = Path(__file__).resolve().parents[3]
BAD = Path(__file__).resolve().parents[1] / "data" / "bad_stacks"
SHIPPED = ("lab", "lab-virtual", "us-east-bm", "us-south-vela")


def expected_paths(path: Path) -> list[str]:
    return re.findall(r"^# expect: (\S+)$", path.read_text(), re.M)


def not_shown(path: Path) -> list[str]:
    return re.findall(r"^# not-shown: (\S+)$", path.read_text(), re.M)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["validate", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("stack", SHIPPED)
def test_shipped_stack_passes_with_one_ok_line(capsys, stack):
    rc, out, err = run(capsys, str(ROOT / "stacks" / f"Pulumi.{stack}.yaml"))
    assert (rc, err) == (0, ""), err
    assert len(out.splitlines()) == 1 and out.startswith("OK ") and f"stack {stack}:" in out


@pytest.mark.parametrize("path", sorted(BAD.glob("*.yaml")), ids=lambda p: p.stem)
def test_malformed_stack_exits_1_naming_the_offending_key_without_a_traceback(capsys, path):
    rc, out, err = run(capsys, str(path))
    assert rc == 1
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines[0].startswith(f"railyard validate: {path}: ") and "problem" in lines[0]
    for want in expected_paths(path):
        assert any(line.strip().startswith(f"{want}: ") for line in lines[1:]), f"{want} not in:\n{err}"
    for secret in not_shown(path):
        assert secret not in out + err


def test_every_problem_is_one_line_of_stderr(capsys):
    path = BAD / "many_problems_at_once.yaml"
    rc, _, err = run(capsys, str(path))
    lines = err.splitlines()
    assert rc == 1
    assert lines[0].endswith(f"{len(lines) - 1} problems")
    assert len(lines) - 1 >= len(expected_paths(path))


def test_missing_file_is_a_problem_not_a_traceback(capsys, tmp_path):
    missing = tmp_path / "Pulumi.nope.yaml"
    rc, out, err = run(capsys, str(missing))
    assert rc == 1 and "no such file" in err and "Traceback" not in err


def test_directory_is_a_problem_not_a_traceback(capsys, tmp_path):
    rc, out, err = run(capsys, str(tmp_path))
    assert rc == 1 and "a directory" in err and "Traceback" not in err


def test_binary_file_is_a_problem_not_a_traceback(capsys, tmp_path):
    path = tmp_path / "Pulumi.bin.yaml"
    path.write_bytes(b"\xff\xfe\x00config")
    rc, out, err = run(capsys, str(path))
    assert rc == 1 and "Traceback" not in err


def test_validate_in_a_real_process_prints_no_traceback(tmp_path):
    # The in-process tests would let an exception through to pytest; this one checks the process.
    for target in (tmp_path / "missing.yaml", tmp_path, BAD / "yaml_syntax_error.yaml",
                   BAD / "vm_shape_does_not_fit_host.yaml"):
        proc = subprocess.run([sys.executable, "-m", "railyard.cli", "validate", str(target)],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_validate_needs_a_stack_file_argument(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["validate"])
    assert exit_.value.code == 2


@pytest.mark.parametrize("argv, heading", [
    (["validate"], "railyard validate: {path}"),
    (["plan"], "railyard plan: {path}"),
    (["fabric", "sweep"], "railyard fabric sweep: {path}"),
])
def test_every_command_reports_a_bad_stack_file_the_same_way(capsys, argv, heading):
    # One SpecError.report for every command that reads a stack file: the count, then a line each.
    path = BAD / "many_problems_at_once.yaml"
    assert main([*argv, str(path)]) == 1
    lines = capsys.readouterr().err.splitlines()
    n = len(lines) - 1
    assert lines[0] == f"{heading.format(path=path)}: {n} problems" and n >= len(expected_paths(path))
    assert all(line.startswith("  railyard:") for line in lines[1:]), lines
