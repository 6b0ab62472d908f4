"""host_boot on a dgx-h100 lab hardware tree: a run in which hugepages, iommu and cpu_isolation (kernel
mode) all change the kernel command line regenerates the bootloader configuration once, and reaches
the reboot once, after it and before the interrupts are placed; check mode writes nothing, a second
run changes nothing, teardown regenerates once too, and an inventory that still sets a role's
former bootloader or reboot variable is refused before anything changes."""

from __future__ import annotations

import pytest

from tests.roles.conftest import Host, Run, make_host

pytestmark = pytest.mark.roles

TAGS = "hugepages,iommu,cpu_isolation"
GRUB_D = "etc/default/grub.d"
DROP_INS = ("railyard-hugepages.cfg", "railyard-iommu.cfg", "railyard-cpu-isolation.cfg")
# A hypervisor's isolation under the kernel mode (the lab stack's pool sets none): some CPUs of
# each socket for the VMs, the rest for the host.
ISOLATION = {"cpu_isolation_mode": "kernel", "cpu_isolation_cpus": "8-55,120-167",
             "cpu_isolation_housekeeping": "0-7,56-119,168-223"}
REGENERATE = "Regenerate the bootloader configuration"
REBOOT = "Reboot to apply the kernel command line"
PLACE_IRQS = "Place a hypervisor's device interrupts"


def regenerations(host: Host) -> list[str]:
    log = host.work / "regenerated.log"
    return log.read_text().splitlines() if log.exists() else []


def handler_events(run: Run, name: str) -> list[str]:
    """The events of handler `name`, in order: 'runner_on_ok', 'runner_on_skipped', ..."""
    return [e["event"] for e in run.events
            if e.get("event", "").startswith("runner_on_") and e["event"] != "runner_on_start"
            and e.get("event_data", {}).get("task") == name]


def boot_host(work) -> tuple[Host, dict]:
    host = make_host("dgx-h100", work, "http://127.0.0.1:9")
    # Each regeneration leaves a line, so the log counts them.
    extra = {**ISOLATION, "host_boot_bootloader_command": ["sh", "-c", 'echo regenerated >> "$0"',
                                                           str(host.work / "regenerated.log")]}
    return host, extra


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    host, extra = boot_host(tmp_path_factory.mktemp("host-boot"))
    steps = {"check": host.run(check=True, tags=TAGS, extra=extra)}
    steps["after_check"] = {"etc": sorted(str(p) for p in host.etc.rglob("*")), "log": regenerations(host)}
    steps["converge"] = host.run(tags=TAGS, extra=extra)
    steps["after_converge"] = {"drop_ins": sorted(p.name for p in (host.etc / GRUB_D).glob("*")), "log": regenerations(host)}
    steps["again"] = host.run(tags=TAGS, extra=extra)
    steps["after_again"] = regenerations(host)
    steps["teardown"] = host.run(playbook="teardown.yml", extra=extra)
    steps["after_teardown"] = regenerations(host)
    return host, steps


def test_check_mode_reports_the_drop_ins_and_regenerates_nothing(runs):
    _, steps = runs
    run = steps["check"]
    assert run.rc == 0, run.failed_tasks() or run.stdout[-3000:]
    assert run.changed() > 0
    assert steps["after_check"] == {"etc": [], "log": []}


def test_three_changed_drop_ins_regenerate_the_bootloader_once_and_reboot_not_unless_allowed(runs):
    host, steps = runs
    run = steps["converge"]
    assert run.rc == 0, run.failed_tasks() or run.stdout[-3000:]
    assert steps["after_converge"] == {"drop_ins": sorted(DROP_INS), "log": ["regenerated"]}
    assert handler_events(run, REGENERATE) == ["runner_on_ok"]
    assert handler_events(run, REBOOT) == ["runner_on_skipped"]  # host_boot_reboot_ok is false
    # Before the interrupts are placed, which a reboot would undo, under --tags too.
    tasks = [e["event_data"].get("task") for e in run.events if e.get("event", "").startswith("runner_on_")]
    assert tasks.index(REBOOT) < tasks.index(PLACE_IRQS), tasks


def test_a_second_run_changes_nothing_and_regenerates_nothing(runs):
    _, steps = runs
    run = steps["again"]
    assert run.rc == 0, run.failed_tasks() or run.stdout[-3000:]
    assert run.changed() == 0, run.changed_tasks()
    assert steps["after_again"] == ["regenerated"]
    assert handler_events(run, REGENERATE) == []


def test_teardown_removes_the_three_drop_ins_and_regenerates_once(runs):
    host, steps = runs
    run = steps["teardown"]
    assert run.rc == 0, run.failed_tasks() or run.stdout[-3000:]
    assert not any((host.etc / GRUB_D / name).exists() for name in DROP_INS)
    assert steps["after_teardown"] == ["regenerated"] * 2
    assert handler_events(run, REGENERATE) == ["runner_on_ok"]


def test_with_reboot_ok_the_reboot_comes_once_after_the_regeneration(tmp_path):
    host, extra = boot_host(tmp_path / "h")
    # A dry run, on the local connection: the reboot action neither reboots this machine in check
    # mode nor on a local connection (it fails there, saying it would reboot the control node).
    run = host.run(check=True, tags=TAGS, extra={**extra, "host_boot_reboot_ok": True})
    order = [e["event_data"]["task"] for e in run.events
             if e.get("event") in ("runner_on_ok", "runner_on_skipped", "runner_on_failed")
             and e["event_data"].get("task") in (REGENERATE, REBOOT)]
    assert order == [REGENERATE, REBOOT], run.stdout[-3000:]
    assert handler_events(run, REBOOT) in (["runner_on_failed"], ["runner_on_ok"])
    if run.rc != 0:
        assert run.failed_tasks() == [f"{REBOOT}: Running ansible.builtin.reboot with local connection would "
                                      "reboot the control node."], run.failed_tasks()


# cpu_isolation alone: host_boot counts as run once hugepages' import checked its arguments.
@pytest.mark.parametrize("tags", [TAGS, "cpu_isolation"])
def test_a_former_role_variable_is_refused_naming_the_one_that_replaced_it(tmp_path, tags):
    host, extra = boot_host(tmp_path / "h")
    run = host.run(tags=tags, extra={**extra, "hugepages_bootloader_command": ["true"], "iommu_reboot_ok": True,
                                     "cpu_isolation_reboot_timeout": 600})
    assert run.rc != 0
    msg = " ".join(run.failed_tasks())
    for old, new in (("hugepages_bootloader_command", "host_boot_bootloader_command"),
                     ("iommu_reboot_ok", "host_boot_reboot_ok"),
                     ("cpu_isolation_reboot_timeout", "host_boot_reboot_timeout")):
        assert f"{old} is no longer read: set {new} instead" in msg, msg
    assert not any(host.etc.rglob("*")) and regenerations(host) == [], "refused before anything changed"
