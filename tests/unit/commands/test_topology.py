"""`railyard topology import [--json] FILE`: tables by default, JSON on request, one line and exit 1 on refusal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from railyard.cli import main
from railyard.model.catalog import FIXTURES_DIR

from ..model.test_topology import EXPECTED

TOPOLOGIES = FIXTURES_DIR / "topologies"
ROOT = Path(__file__).resolve().parents[3]
# The model's tests say which fixtures import refuses (their expectation None): PCIe trees, NUMA lists.
READABLE = sorted(name for name, want in EXPECTED.items() if want is not None)
REFUSED = sorted(name for name, want in EXPECTED.items() if want is None)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["topology", "import", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("name", READABLE)
def test_import_prints_a_table_of_gpus_nics_and_pairing(capsys, name):
    rc, out, err = run(capsys, str(TOPOLOGIES / name))
    assert (rc, err) == (0, ""), err
    assert "GPU" in out and "NUMA" in out and "NIC" in out, out


@pytest.mark.parametrize("name", READABLE)
def test_import_json_has_complete_gpus_and_nics(capsys, name):
    rc, out, err = run(capsys, "--json", str(TOPOLOGIES / name))
    assert (rc, err) == (0, ""), err
    data = json.loads(out)
    assert isinstance(data["complete"], bool)
    assert all({"name", "numa", "nic"} <= set(g) for g in data["gpus"]), "gpus[] keys"
    assert all({"name", "numa"} <= set(n) for n in data["nics"]), "nics[] keys"


def test_import_json_of_the_complete_hgx_matrix(capsys):
    rc, out, _ = run(capsys, "--json", str(TOPOLOGIES / "h100_hgx_12nic_sequential_complete.tsv"))
    data = json.loads(out)
    assert rc == 0 and data["complete"] is True
    assert [(g["name"], g["numa"], g["nic"]) for g in data["gpus"]] == [
        ("GPU0", 0, "mlx5_0"), ("GPU1", 0, "mlx5_1"), ("GPU2", 0, "mlx5_2"), ("GPU3", 0, "mlx5_3"),
        ("GPU4", 1, "mlx5_6"), ("GPU5", 1, "mlx5_7"), ("GPU6", 1, "mlx5_8"), ("GPU7", 1, "mlx5_9"),
    ]
    assert {n["name"]: n["numa"] for n in data["nics"]}["mlx5_10"] == 1


def test_an_excerpt_is_flagged_incomplete_in_the_table(capsys):
    rc, out, _ = run(capsys, str(TOPOLOGIES / "h100_flux14_excerpt.txt"))
    assert rc == 0 and "INCOMPLETE" in out and "Notes:" in out


def test_numa_is_printed_as_the_file_gives_it_unknown_or_inferred(capsys):
    rc, out, _ = run(capsys, str(TOPOLOGIES / "pcie_8gpu_1nic_mlx5_header_quda669.tsv"))
    gpu_rows = [line.split() for line in out.splitlines() if line.startswith("GPU") and "mlx5_0" in line]
    assert rc == 0 and len(gpu_rows) == 8 and all(r[1] == "unknown" for r in gpu_rows), out
    rc, out, _ = run(capsys, str(TOPOLOGIES / "b300_9nic_ansi_bond_sglang26039.tsv"))
    nic_row = next(line for line in out.splitlines() if line.startswith("mlx5_10 "))
    assert nic_row.split() == ["mlx5_10", "NIC0", "0", "(inferred)", "compute", "GPU0"], out


def test_import_json_keeps_an_empty_cpu_affinity_and_marks_what_is_inferred(capsys):
    rc, out, _ = run(capsys, "--json", str(TOPOLOGIES / "a100_pcie_8gpu_empty_cpu_affinity_daskcuda1381_excerpt.txt"))
    data = json.loads(out)
    assert rc == 0
    assert [(g["numa"], g["numa_inferred"], g["cpu_affinity"]) for g in data["gpus"][3:5]] == [
        (0, False, "0-15,56-71"), (1, False, None)]
    assert (data["nics"][0]["numa"], data["nics"][0]["numa_inferred"]) == (1, True)


def test_a_row_that_lost_a_cell_exits_1_naming_the_row(capsys, tmp_path):
    lines = (TOPOLOGIES / "b300_9nic_ansi_bond_sglang26039.tsv").read_text().splitlines()
    lines[4] = lines[4].replace("\tNODE\tNODE\tNODE\tPXB", "\tNODE\tNODE\tPXB", 1)  # GPU3 loses a cell
    bad = tmp_path / "topo.tsv"
    bad.write_text("\n".join(lines))
    rc, out, err = run(capsys, str(bad))
    assert rc == 1 and out == "" and err.count("\n") == 1 and "row GPU3" in err and "Traceback" not in err, err


@pytest.mark.parametrize("name", REFUSED)
def test_a_refused_format_exits_1_with_one_line_on_stderr(capsys, name):
    rc, out, err = run(capsys, str(TOPOLOGIES / name))
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("railyard topology import: "), err
    assert "Traceback" not in err


def test_a_missing_file_exits_1_with_one_line(capsys, tmp_path):
    rc, out, err = run(capsys, str(tmp_path / "none.tsv"))
    assert rc == 1 and err.count("\n") == 1 and "cannot read" in err


def test_the_installed_command_runs_without_a_traceback():
    lspci = TOPOLOGIES / "lenovo_sd665n_v3_4xh100_lspci_t.txt"
    proc = subprocess.run([sys.executable, "-m", "railyard.cli", "topology", "import", str(lspci)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "lspci" in proc.stderr
