"""playbooks/teardown.yml (the hosts driver's destroy) on a lab hardware tree: after the site play,
it removes what the roles wrote and reserved, puts back a file the host had before, changes
nothing in check mode, and a second run changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.roles.conftest import make_host

pytestmark = pytest.mark.roles

OWN_NCCL_CONF = "NCCL_DEBUG=WARN\n"


def _files(root: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(root)): (p.read_text(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file()}


def _counters(hw: Path) -> dict[str, str]:
    paths = [*hw.glob("sys/devices/system/node/node*/hugepages/*/nr_hugepages"),
             *hw.glob("sys/kernel/mm/hugepages/*/nr_hugepages"), *hw.glob("sys/bus/pci/devices/*/sriov_numvfs")]
    return {str(p.relative_to(hw)): p.read_text().strip() for p in paths}


@pytest.fixture(scope="module")
def torn_down(tmp_path_factory, s3):
    host = make_host("dgx-h100", tmp_path_factory.mktemp("teardown"), s3.url)
    # The host had its own /etc/nccl.conf before Railyard.
    (host.etc / "etc").mkdir()
    (host.etc / "etc/nccl.conf").write_text(OWN_NCCL_CONF)
    os.chmod(host.etc / "etc/nccl.conf", 0o600)
    before = {"etc": _files(host.etc), "counters": _counters(host.hw)}
    site = host.run()
    assert site.rc == 0, site.failed_tasks()
    tuned = {"etc": _files(host.etc), "counters": _counters(host.hw)}
    steps = {"check": host.run(playbook="teardown.yml", check=True)}
    steps["after_check"] = {"etc": _files(host.etc), "counters": _counters(host.hw)}
    steps["teardown"] = host.run(playbook="teardown.yml")
    steps["after"] = {"etc": _files(host.etc), "counters": _counters(host.hw)}
    steps["again"] = host.run(playbook="teardown.yml")
    return before, tuned, steps


def test_the_site_play_changed_what_teardown_must_undo(torn_down):
    before, tuned, _ = torn_down
    assert tuned["etc"]["etc/nccl.conf"][0] != OWN_NCCL_CONF
    assert any(k.startswith("etc/default/grub.d/") for k in tuned["etc"])
    assert any(v != "0" for k, v in tuned["counters"].items() if "hugepages" in k)


def test_check_mode_reports_the_removals_and_changes_nothing(torn_down):
    _, tuned, steps = torn_down
    assert steps["check"].rc == 0, steps["check"].failed_tasks()
    assert steps["check"].changed() > 0
    assert steps["after_check"] == tuned


def test_teardown_leaves_etc_and_the_counters_as_they_were_found(torn_down):
    before, _, steps = torn_down
    assert steps["teardown"].rc == 0, steps["teardown"].failed_tasks()
    # The host's own nccl.conf back, with its mode; every file Railyard added gone, its records too.
    assert steps["after"]["etc"] == before["etc"]
    assert steps["after"]["counters"] == before["counters"]


def test_a_second_teardown_changes_nothing(torn_down):
    _, _, steps = torn_down
    assert steps["again"].rc == 0 and steps["again"].changed() == 0, steps["again"].changed_tasks()
