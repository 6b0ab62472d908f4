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


def test_plan_opensm_writes_what_a_subnet_manager_is_given(tmp_path, capsys):
    out = tmp_path / "osm"
    assert main(["plan", "--opensm", str(out), LAB]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["opensm.conf", "partitions.conf", "root-switches.txt",
                                                     "topology.net"]
    conf = (out / "opensm.conf").read_text()
    # Named where the subnet manager reads them; a pure fat tree needs no root GUIDs.
    assert "routing_engine ftree\n" in conf and "partition_config_file /etc/opensm/partitions.conf\n" in conf
    assert "root_guid_file" not in conf
    assert "research=0x0001, ipoib, mtu=5 : ALL_CAS=full ;" in (out / "partitions.conf").read_text()
    assert (out / "root-switches.txt").read_text().split() == ["spine0", "spine1", "spine2", "spine3"]
    from railyard.model.fabric import subnet as sn
    from railyard.model.fabric.verify import verify
    from railyard.stack import load

    _, plan = load(LAB)
    assert verify(plan.fabric, sn.parse_ibnetdiscover((out / "topology.net").read_text())) == []


def test_plan_opensm_without_the_subnet_refuses_a_tree_that_needs_root_guids(tmp_path, capsys):
    out = tmp_path / "osm"
    assert main(["plan", "--opensm", str(out), "stacks/Pulumi.us-east-bm.yaml"]) == 1
    err = capsys.readouterr().err
    assert "not a pure fat tree" in err and "ibnetdiscover" in err
    assert not out.exists()  # refused before anything was written


def test_plan_opensm_with_the_subnet_names_the_root_guids(tmp_path, capsys):
    from railyard.model.fabric import subnet as sn
    from railyard.model.fabric.verify import verify
    from railyard.stack import load

    _, plan = load("stacks/Pulumi.us-east-bm.yaml")
    # The planned subnet, with GUIDs given as a discovery would print them.
    text, guid = [], 0x200000
    for line in sn.topology_text(plan.fabric).splitlines():
        if line.startswith("Switch"):
            text.append(f"switchguid=0x{guid:x}")
            guid += 1
        text.append(line)
    subnet = tmp_path / "subnet.txt"
    subnet.write_text("\n".join(text) + "\n")
    out = tmp_path / "osm"
    assert main(["plan", "--opensm", str(out), "--subnet", str(subnet), "stacks/Pulumi.us-east-bm.yaml"]) == 0
    assert "root_guid_file /etc/opensm/root_guids.conf\n" in (out / "opensm.conf").read_text()
    roots = (out / "root_guids.conf").read_text().split()
    cores = (out / "root-switches.txt").read_text().split()
    assert len(roots) == len(cores) == 64 and all(c.startswith("plane") for c in cores)
    assert roots[0] == f"0x{0x200000 + 304 - 64:016x}"  # the cores are the last 64 switches of the file


def test_plan_opensm_refuses_a_roce_stack(tmp_path, capsys):
    assert main(["plan", "--opensm", str(tmp_path / "o"), "stacks/Pulumi.us-south-vela.yaml"]) == 1
    assert "InfiniBand" in capsys.readouterr().err


def test_plan_diagram_draws_svg_and_png_and_refuses_another_suffix(tmp_path, capsys):
    svg, png = tmp_path / "fabric.svg", tmp_path / "fabric.png"
    assert main(["plan", "--diagram", str(svg), "stacks/Pulumi.us-east-bm.yaml"]) == 0
    assert svg.read_text().startswith("<?xml") and "h100-sg3: 32 spines" in svg.read_text()
    assert main(["plan", "--diagram", str(png), LAB]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plan", "--diagram", str(tmp_path / "fabric.pdf"), LAB]) == 1
    assert "use .svg or .png" in capsys.readouterr().err and not (tmp_path / "fabric.pdf").exists()


def test_plan_subnet_errors_name_what_is_wrong(tmp_path, capsys):
    assert main(["plan", "--subnet", str(tmp_path / "s.txt"), LAB]) == 2
    assert "give --opensm DIR too" in capsys.readouterr().err
    assert main(["plan", "--opensm", str(tmp_path / "o"), "--subnet", str(tmp_path / "missing.txt"), LAB]) == 1
    assert f"cannot read {tmp_path / 'missing.txt'}" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text('Ca\t1 "H-1"\t\t# "n"\n[1](2)\t"S-9"[1]\n')
    assert main(["plan", "--opensm", str(tmp_path / "o"), "--subnet", str(bad), LAB]) == 1
    assert "has no record for it" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_plan_frr_writes_every_roce_switchs_frr_conf_and_the_qos_commands(tmp_path, capsys):
    out = tmp_path / "frr"
    assert main(["plan", "--frr", str(out), "stacks/Pulumi.lab-virtual.yaml"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["roce-qos.nvue", "spine0", "vela-su0-leaf0", "vela-su0-leaf1"]
    leaf = (out / "vela-su0-leaf0" / "frr.conf").read_text()
    assert "router bgp 4210551921\n" in leaf and " neighbor 198.19.128.0 remote-as 4200000001\n" in leaf
    assert "wrote the FRR configuration of 3 switches and roce-qos.nvue" in capsys.readouterr().err


def test_plan_frr_refuses_an_infiniband_fabric_in_one_line(tmp_path, capsys):
    assert main(["plan", "--frr", str(tmp_path / "frr"), LAB]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "railyard plan: --frr is for RoCE fabrics, whose switches route with BGP; this one is infiniband"
    assert not (tmp_path / "frr").exists()


def test_the_plan_says_who_tunes_the_machines(capsys):
    assert main(["plan", "stacks/Pulumi.us-east-bm.yaml"]) == 0
    assert "host tuning: none by Railyard: driver coreweave's platform tunes its own machines" in capsys.readouterr().out
    assert main(["plan", "--json", "stacks/Pulumi.us-east-bm.yaml"]) == 0
    assert json.loads(capsys.readouterr().out)["host_tuning"].startswith("none by Railyard")
    assert main(["plan", "stacks/Pulumi.lab.yaml"]) == 0
    assert "host tuning: by Railyard" in capsys.readouterr().out


def test_railyard_plugins_lists_each_drivers_plugins_and_whether_they_are_here(capsys):
    from railyard import paths
    from railyard.engine import plugins

    assert main(["plugins"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for driver, sdk, name in (("coreweave", "pulumi_coreweave", "coreweave v1.0.3"),
                              ("coreweave", "pulumi_kubernetes", "kubernetes v4.25.0"),
                              ("openstack", "pulumi_openstack", "openstack v5.5.3")):
        state = "installed" if plugins.installed(plugins.declared(sdk), paths.project_root()) else "missing"
        assert f"{driver:10} {name}: {state}" in lines
