"""The RoCE switches' configurations as FRR and the switch OS read them: every rendered frr.conf
passes FRR's own parser (`vtysh --dryrun`, Debian's frr, which the set-up installs), carries each
planned session with its peer's ASN, and the lossless QoS commands carry the fixture's values."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from railyard.model.fabric.roce import QOS_TABLE
from railyard.stack import load
from railyard.switches import frr_config, qos_config, write_switch_configs
from tests.unit.model.fabric.test_routing import three_tier_routers, three_tiers

ROOT = Path(__file__).resolve().parents[2]


def vtysh_check(text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    vtysh = shutil.which("vtysh")
    if vtysh is None:
        pytest.fail("FRR's vtysh is not installed: run `bash scripts/host-deps.sh` (make test does)")
    f = tmp_path / "frr.conf"
    f.write_text(text)
    return subprocess.run([vtysh, "--dryrun", "--inputfile", str(f)], capture_output=True, text=True)


def test_every_switch_of_the_lab_virtual_stack_gets_a_configuration_frr_accepts(tmp_path):
    _, plan = load(ROOT / "stacks/Pulumi.lab-virtual.yaml")
    assert write_switch_configs(plan, tmp_path / "out") == 3
    for router in plan.routers():
        text = (tmp_path / "out" / router.name / "frr.conf").read_text()
        check = vtysh_check(text, tmp_path)
        assert check.returncode == 0, (router.name, check.stdout + check.stderr)
        assert f"router bgp {router.asn}\n bgp router-id {router.loopback}\n" in text
        assert f"  maximum-paths {router.maximum_paths}\n" in text
        for s in router.sessions:
            assert f" neighbor {s.peer_address} remote-as {s.peer_asn}\n" in text
            assert f"interface {s.interface}\n description {s.peer} {s.peer_interface}\n ip address {s.address}/31\n" \
                in text
        for prefix in router.host_prefixes:
            assert f"ip route {prefix} hosts\n" in text and f"  network {prefix}\n" in text


def test_three_tier_leaves_spines_and_cores_get_configurations_frr_accepts(tmp_path):
    routers = three_tier_routers(three_tiers(("gpu", 68)))
    for tier in ("leaf", "spine", "core"):
        router = next(r for r in routers if r.tier == tier)
        check = vtysh_check(frr_config(router, "t", log_file="/var/log/frr/t.log"), tmp_path)
        assert check.returncode == 0, (router.name, check.stdout + check.stderr)


def test_a_configuration_frr_would_refuse_is_caught(tmp_path):
    # The check is FRR's parser, not a string compare: a session to an ASN out of range fails it.
    _, plan = load(ROOT / "stacks/Pulumi.lab-virtual.yaml")
    text = frr_config(plan.routers()[0], "lab-virtual").replace("remote-as 4200000001", "remote-as 4294967296", 1)
    assert vtysh_check(text, tmp_path).returncode != 0


def test_the_qos_commands_carry_the_fixtures_values_and_say_they_are_not_applied_in_the_lab():
    _, plan = load(ROOT / "stacks/Pulumi.lab-virtual.yaml")
    text = qos_config(plan)
    rows = {r["setting"]: r["value"] for r in csv.DictReader(
        (ROOT / "railyard/data/fixtures/tables" / QOS_TABLE).open(encoding="utf-8"))}
    assert rows["PFC"].startswith("enabled on switch priority 3")
    assert "nv set qos pfc default-global switch-priority 3\n" in text
    assert rows["ECN absolute threshold TC3"].startswith("150000-1500000 bytes")
    assert "traffic-class 3 min-threshold 150000\n" in text and "traffic-class 3 max-threshold 1500000\n" in text
    assert rows["Port trust"] == "L3 (DSCP)" and "nv set qos mapping default-global trust l3\n" in text
    assert "traffic-class 6 mode strict\n" in text and "traffic-class 3 bw-percent 50\n" in text
    assert "NOT APPLIED IN THE LAB" in text
