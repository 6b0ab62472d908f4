"""A discovered subnet held against the plan (railyard.model.fabric.verify): each fault a
technician acts on is one finding of its own kind, and nothing else is reported."""

from __future__ import annotations

import json
import subprocess
import sys

from railyard import paths
from railyard.model.fabric import subnet as sn
from railyard.model.fabric.subnet import End, cable_of
from railyard.model.fabric.verify import KINDS, verify

from .test_subnet import dgx

LEAF0 = "gpu-su0-leaf0"


def planned(fabric) -> sn.Subnet:
    return sn.parse_ibnetdiscover(sn.topology_text(fabric))


def rewire(subnet: sn.Subnet, old: tuple[End, End] | None, new: tuple[End, End] | None, rate: str = "") -> None:
    """Move, add or remove one cable of a discovered subnet (its devices are named by their ids)."""
    ids = {d.desc: d.id for d in subnet.devices.values()}

    def key(cable):
        return tuple(sorted((ids[e.device], e.port) for e in cable))

    if old is not None:
        subnet.cables.remove(key(old))
        rate = rate or subnet.rates.pop(key(old))
    if new is not None:
        subnet.cables.append(key(new))
        subnet.rates[key(new)] = rate or "4xNDR"


def hca(node: int, nic: str) -> End:
    return End(f"gpu-{node} {nic}", 1)


def test_the_plan_itself_has_no_finding():
    assert verify(dgx(2), planned(dgx(2))) == []


def test_a_cable_on_a_free_port_is_misplaced_and_names_both_ports():
    subnet = planned(dgx(2))
    rewire(subnet, (hca(0, "mlx5_0"), End(LEAF0, 1)), (hca(0, "mlx5_0"), End(LEAF0, 9)))
    (f,) = verify(dgx(2), subnet)
    assert (f.kind, str(f)) == ("cable-misplaced", "gpu-0 mlx5_0 port 1: cabled to gpu-su0-leaf0 port 9, "
                                                   "planned cabled to gpu-su0-leaf0 port 1")


def test_two_hcas_exchanged_on_one_leaf_are_one_swap():
    subnet = planned(dgx(2))
    a, b = hca(0, "mlx5_0"), hca(1, "mlx5_0")
    rewire(subnet, (a, End(LEAF0, 1)), None)
    rewire(subnet, (b, End(LEAF0, 2)), None)
    rewire(subnet, None, (a, End(LEAF0, 2)))
    rewire(subnet, None, (b, End(LEAF0, 1)))
    (f,) = verify(dgx(2), subnet)
    assert f.kind == "cable-swapped" and f.where == "gpu-0 mlx5_0 port 1 and gpu-1 mlx5_0 port 1"


def test_a_pulled_cable_is_missing_and_a_new_one_between_planned_switches_is_extra():
    subnet = planned(dgx(2))
    rewire(subnet, (hca(1, "mlx5_11"), End("gpu-su0-leaf7", 2)), None)
    rewire(subnet, None, (End(LEAF0, 20), End("gpu-su0-leaf1", 20)))
    assert [(f.kind, f.where) for f in verify(dgx(2), subnet)] == [
        ("link-missing", "gpu-1 mlx5_11 port 1 <-> gpu-su0-leaf7 port 2"),
        ("link-extra", "gpu-su0-leaf0 port 20 <-> gpu-su0-leaf1 port 20"),
    ]


def test_a_device_the_plan_does_not_have_is_named_once_not_as_its_cables():
    subnet = planned(dgx(2))
    subnet.devices["intruder"] = sn.Device("intruder", "Ca", 2, "login-0 mlx5_0")
    subnet.cables += [(("gpu-su0-leaf0", 30), ("intruder", 1)), (("gpu-su0-leaf1", 30), ("intruder", 2))]
    assert [(f.kind, f.where) for f in verify(dgx(2), subnet)] == [("unknown-device", "login-0 mlx5_0")]


def test_a_link_trained_narrow_or_slow_is_told_apart_from_its_cabling():
    subnet = planned(dgx(2))
    narrow = cable_of(hca(0, "mlx5_3"), End("gpu-su0-leaf1", 1))
    slow = cable_of(hca(1, "mlx5_3"), End("gpu-su0-leaf1", 2))
    rewire(subnet, narrow, narrow, rate="2xNDR")
    rewire(subnet, slow, slow, rate="4xHDR")
    assert [(f.kind, str(f)) for f in verify(dgx(2), subnet)] == [
        ("link-width", "gpu-0 mlx5_3 port 1 <-> gpu-su0-leaf1 port 1: trained at 2x, planned 4x"),
        ("link-speed", "gpu-1 mlx5_3 port 1 <-> gpu-su0-leaf1 port 2: trained at HDR, planned NDR"),
    ]


def test_every_kind_is_one_a_finding_can_have():
    subnet = planned(dgx(2))
    rewire(subnet, (hca(0, "mlx5_0"), End(LEAF0, 1)), (hca(0, "mlx5_0"), End(LEAF0, 9)), rate="1xSDR")
    assert {f.kind for f in verify(dgx(2), subnet)} <= set(KINDS)


def run_verify(tmp_path, text: str, *args: str) -> subprocess.CompletedProcess:
    dump = tmp_path / "ibnetdiscover.txt"
    dump.write_text(text)
    return subprocess.run([sys.executable, "-m", "railyard.cli", "fabric", "verify", "--ibnetdiscover", str(dump),
                           *args, str(paths.PROJECT_ROOT / "stacks" / "Pulumi.lab.yaml")],
                          capture_output=True, text=True, cwd=paths.PROJECT_ROOT, timeout=120)


def test_the_command_exits_0_on_the_plan_and_1_with_a_record_per_finding(tmp_path):
    from railyard.stack import load

    _, plan = load(paths.PROJECT_ROOT / "stacks" / "Pulumi.lab.yaml")
    text = sn.topology_text(plan.fabric)
    clean = run_verify(tmp_path, text)
    assert clean.returncode == 0 and clean.stdout.strip().endswith("as planned"), clean.stdout + clean.stderr
    swapped = run_verify(tmp_path, text.replace('"gpu-0 mlx5_0"', "\0").replace('"gpu-1 mlx5_0"', '"gpu-0 mlx5_0"')
                         .replace("\0", '"gpu-1 mlx5_0"'), "--json")
    assert swapped.returncode == 1
    assert [r["kind"] for r in json.loads(swapped.stdout)] == ["cable-swapped"]
    missing = run_verify(tmp_path, "not a dump\n")
    assert missing.returncode == 1 and "no device in it" in missing.stderr


def test_the_448_node_pods_planned_fabric_verifies_clean():
    # How fast (issue 40: under 5 s for its 10,752 cables) is a benchmark figure: railyard bench
    # fabric-verify.
    from railyard.stack import load

    _, plan = load(paths.PROJECT_ROOT / "stacks" / "Pulumi.us-east-bm.yaml")
    subnet = planned(plan.fabric)
    assert len(subnet.cables) >= 10_752
    assert verify(plan.fabric, subnet) == []


def test_a_cable_moved_onto_a_pulled_cables_port_is_one_move_and_one_missing_link():
    # gpu-0's rail-0 cable now sits on leaf port 2, where gpu-1's rail-0 cable was, which is gone:
    # one move and one missing link, and the moved cable is not reported again from its other end.
    subnet = planned(dgx(2))
    a, b = hca(0, "mlx5_0"), hca(1, "mlx5_0")
    rewire(subnet, (b, End(LEAF0, 2)), None)
    rewire(subnet, (a, End(LEAF0, 1)), (a, End(LEAF0, 2)))
    assert [(f.kind, f.where) for f in verify(dgx(2), subnet)] == [
        ("cable-misplaced", "gpu-0 mlx5_0 port 1"),
        ("link-missing", "gpu-1 mlx5_0 port 1 <-> gpu-su0-leaf0 port 2"),
    ]


def test_an_unknown_device_on_a_planned_port_is_named_beside_the_cable_it_displaced():
    subnet = planned(dgx(2))
    subnet.devices["intruder"] = sn.Device("intruder", "Ca", 1, "login-0 mlx5_0")
    rewire(subnet, (hca(0, "mlx5_0"), End(LEAF0, 1)), None)
    subnet.cables.append((("gpu-su0-leaf0", 1), ("intruder", 1)))
    assert sorted((f.kind, f.where) for f in verify(dgx(2), subnet)) == [
        ("cable-misplaced", "gpu-su0-leaf0 port 1"), ("unknown-device", "login-0 mlx5_0")]


def test_switches_that_do_not_describe_themselves_by_plan_name_are_known_by_the_stacks_guid_map():
    """A real capture of ibsim's subnet (data/ibnetdiscover-lab.txt) whose switches are renamed
    to their model, as a switch may describe itself before anyone sets its description: the
    stack's railyard:verify.switchGuids names them again, and the subnet is as planned."""
    import re

    import yaml

    from railyard.model.errors import SpecError
    from railyard.stack import from_config
    from railyard.verify import fabric as fabric_findings

    text = (paths.PROJECT_ROOT / "tests/unit/model/fabric/data/ibnetdiscover-lab.txt").read_text()
    guids = dict(re.findall(r'switchguid=(0x[0-9a-f]+)\(\w+\)\nSwitch\t\d+ "[^"]+"\t\t# "([^"]+)"', text))
    assert len(guids) == 12
    for name in guids.values():
        text = text.replace(f'"{name}"', '"MQM9700"')
    config = yaml.safe_load((paths.PROJECT_ROOT / "stacks" / "Pulumi.lab.yaml").read_text())["config"]
    spec, plan = from_config(config, "t")
    subnet = sn.parse_ibnetdiscover(text)
    unnamed = fabric_findings(plan, subnet, speeds_judged=False)
    assert "unknown-device" in {f.kind for f in unnamed} and all(f.kind != "link-speed" for f in unnamed)
    spec, plan = from_config({**config, "railyard:verify": {"switchGuids": {n: g for g, n in guids.items()}}}, "t")
    assert fabric_findings(plan, subnet, speeds_judged=False, switch_guids=spec.verify.switch_guids) == []
    # A name the plan does not have, and a GUID given twice, are refused with their paths.
    wrong = {"gpu-su0-leaf9": "0x200007", "gpu-su0-leaf1": "0x200007"}
    try:
        from_config({**config, "railyard:verify": {"switchGuids": wrong}}, "t")
        raise AssertionError("refused")
    except SpecError as err:
        paths_found = {p.path for p in err.problems}
    assert paths_found == {"railyard:verify.switchGuids.gpu-su0-leaf1", "railyard:verify.switchGuids.gpu-su0-leaf9"}
