"""`railyard plan`: human table, --json, --detail, --cabling; a bad stack is a list of problems."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from railyard.cli import main

LAB = "stacks/Pulumi.lab.yaml"


def test_plan_prints_a_summary_table(capsys):
    assert main(["plan", LAB]) == 0
    out = capsys.readouterr().out
    assert "compute fabric: infiniband ndr on qm9700" in out
    assert "leaf" in out and "spine" in out and "bisection" in out
    assert "GPU1->mlx5_3" in out


def test_plan_json_is_the_summary(capsys):
    assert main(["plan", "--json", "stacks/Pulumi.us-east-bm.yaml"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["gpus"] == 3584 and s["fabrics"]["compute"]["switches"]["leaf"] == 112
    assert "detail" not in s


def test_plan_json_detail_adds_nodes_switches_and_links(capsys):
    assert main(["plan", "--json", "--detail", LAB]) == 0
    d = json.loads(capsys.readouterr().out)["detail"]
    assert len(d["links"]) == 272 and d["nodes"][0]["name"] == "gpu-0"


def test_plan_detail_as_text_lists_switches_and_links(capsys):
    assert main(["plan", "--detail", LAB]) == 0
    out = capsys.readouterr().out
    assert "gpu-su0-leaf0" in out and "gpu-0:mlx5_0 -> gpu-su0-leaf0:1/1" in out


def test_plan_writes_the_cabling_csv(tmp_path, capsys):
    target = tmp_path / "cabling.csv"
    assert main(["plan", "--cabling", str(target), LAB]) == 0
    rows = list(csv.DictReader(target.open()))
    assert len(rows) == 272
    assert "wrote 272 cables" in capsys.readouterr().err


def test_an_invalid_stack_exits_1_with_its_problems_and_no_traceback(tmp_path, capsys):
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(Path(LAB).read_text().replace("speed: ndr", "speed: ndrr"))
    assert main(["plan", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "railyard:fabric.compute.speed" in err and "Traceback" not in err


def test_a_missing_stack_exits_1(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "nope.yaml")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_an_unwritable_cabling_path_exits_1(tmp_path, capsys):
    assert main(["plan", "--cabling", str(tmp_path / "missing" / "c.csv"), LAB]) == 1
    assert "cannot write" in capsys.readouterr().err
