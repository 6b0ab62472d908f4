"""The rail_network role through ansible-runner, on localhost with every root in a temp dir: for
each stack the files appear as the unit goldens pin them, a second run changes nothing, check mode
writes nothing, absent removes exactly the role's files; an unsupported host is refused by name;
with rail_network_apply the stack's commands run once per change (stand-ins record them)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.roles.conftest import Run, runner_env
from tests.unit.playbooks.test_rail_network import (IB, IB_IFUPDOWN, IB_NETPLAN, IB_NETWORKD_RAIL0, ROCE, ROCE_CIDR,
                                                    ROCE_IFUPDOWN, ROCE_NETPLAN, ROCE_NETWORKD_RAIL0,
                                                    ROCE_NETWORKD_RAIL1)

pytestmark = pytest.mark.roles

PLAY = """\
- name: Rail addresses
  hosts: all
  gather_facts: false
  roles:
    - role: rail_network
"""
DEBIAN_INTERFACES = """\
# This file describes the network interfaces available on your system
# and how to activate them. For more information, see interfaces(5).

source /etc/network/interfaces.d/*

# The loopback network interface
auto lo
iface lo inet loopback
"""
# What marks each stack under the root, beside a file of the user's own that must stay as it is.
MARKERS = {
    "networkd": {"etc/systemd/system/multi-user.target.wants/systemd-networkd.service": None,
                 "etc/systemd/network/10-mgmt.network": "[Match]\nName=eno1\n\n[Network]\nDHCP=yes\n"},
    "netplan": {"etc/netplan/50-cloud-init.yaml": "network:\n  version: 2\n  ethernets:\n    eno1:\n      dhcp4: true\n"},
    "ifupdown": {"etc/network/interfaces": DEBIAN_INTERFACES},
}
ROCE_FILES = {
    "networkd": {"etc/systemd/network/60-railyard-enp9s0np0.network": ROCE_NETWORKD_RAIL0,
                 "etc/systemd/network/60-railyard-enp19s0np0.network": ROCE_NETWORKD_RAIL1},
    "netplan": {"etc/netplan/60-railyard-rails.yaml": ROCE_NETPLAN},
    "ifupdown": {"etc/network/interfaces.d/railyard-rails": ROCE_IFUPDOWN},
}
# A stand-in for networkctl, netplan and ip: records its argv (and ip's batch input) and succeeds.
RECORDER = """\
import json, os, sys
stdin = sys.stdin.read() if "-batch" in sys.argv else None
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.jsonl"), "a") as fh:
    fh.write(json.dumps({"argv": [os.path.basename(sys.argv[0])] + sys.argv[1:], "stdin": stdin}) + "\\n")
"""


RECORDS = "var/lib/railyard/originals"


class Host:
    """localhost with a temp root holding /etc and /run, and stand-in commands on PATH."""

    def __init__(self, work: Path, markers: dict[str, str | None]):
        self.work, self.root, self.bin = work, work / "root", work / "bin"
        self.root.mkdir(parents=True)
        for rel, text in markers.items():
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            if text is None:  # an enabled unit's link: its target is outside the temp root
                os.symlink("/lib/systemd/system/" + p.name, p)
            else:
                p.write_text(text)
        self.bin.mkdir()
        for name in ("networkctl", "netplan", "ip"):
            (self.bin / name).write_text(f"#!{sys.executable}\n" + RECORDER)
            (self.bin / name).chmod(0o755)
        (work / "project").mkdir()
        (work / "project/rail.yml").write_text(PLAY)

    def run(self, *, check: bool = False, **variables) -> Run:
        import ansible_runner

        pdd = self.work / f"runner-{len(list(self.work.glob('runner-*')))}"
        pdd.mkdir()
        hostvars = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "rail_network_etc_root": str(self.root), "rail_network_run_root": str(self.root),
                    "rail_network_apply": False, "rail_network_interfaces": ROCE,
                    "rail_network_compute_cidr": ROCE_CIDR} | variables
        r = ansible_runner.run(
            private_data_dir=str(pdd), project_dir=str(self.work / "project"), playbook="rail.yml",
            inventory={"all": {"hosts": {"node": hostvars}}}, cmdline="--diff" + (" --check" if check else ""),
            quiet=True,
            envvars=runner_env(path_first=str(self.bin)),
        )
        return Run(r.status, r.rc, r.stats or {}, list(r.events), r.stdout.read())

    def files(self) -> dict[str, str]:
        """The host's files, without railyard_files' records of what was there before (records())."""
        return {str(p.relative_to(self.root)): p.read_text() for p in sorted(self.root.rglob("*"))
                if p.is_file() and not p.is_symlink() and not str(p.relative_to(self.root)).startswith(RECORDS)}

    def records(self) -> list[str]:
        return sorted(str(p.relative_to(self.root / RECORDS)) for p in (self.root / RECORDS).rglob("*") if p.is_file())

    def calls(self) -> list[dict]:
        log = self.bin / "calls.jsonl"
        out = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        log.unlink(missing_ok=True)
        return out


def _ok(run: Run) -> Run:
    assert run.rc == 0, run.failed_tasks() or run.stdout[-3000:]
    return run


@pytest.fixture(scope="module", params=sorted(MARKERS))
def sequence(request, tmp_path_factory):
    """One host per stack through check, converge, again, check absent, absent, absent again."""
    stack = request.param
    host = Host(tmp_path_factory.mktemp(stack), MARKERS[stack])
    before = host.files()
    steps = {"check": host.run(check=True)}
    steps["after_check"] = host.files()
    steps["converge"] = host.run()
    steps["after_converge"] = host.files()
    steps["records_converged"] = host.records()
    steps["modes"] = {rel: (host.root / rel).stat().st_mode & 0o777 for rel in ROCE_FILES[stack]}
    steps["again"] = host.run()
    steps["check_absent"] = host.run(check=True, rail_network_state="absent")
    steps["after_check_absent"] = host.files()
    steps["absent"] = host.run(rail_network_state="absent")
    steps["after_absent"] = host.files()
    steps["records_absent"] = host.records()
    steps["absent_again"] = host.run(rail_network_state="absent")
    return stack, host, before, steps


def test_check_mode_reports_the_files_it_would_write_and_writes_nothing(sequence):
    stack, _, before, steps = sequence
    run = _ok(steps["check"])
    assert run.changed() == 1, f"{stack}: {run.changed_tasks()}"
    assert steps["after_check"] == before, f"{stack}: check mode wrote files"
    for rel in ROCE_FILES[stack]:
        assert f"+++ after: {rel}" in run.stdout.replace(str(sequence[1].root) + "/", ""), f"{stack}: no diff for {rel}"


def test_converge_writes_the_stacks_files_as_rendered_and_leaves_the_users_alone(sequence):
    stack, host, before, steps = sequence
    _ok(steps["converge"])
    written = {k: v for k, v in steps["after_converge"].items() if k not in before}
    assert written == ROCE_FILES[stack], f"{stack}: {sorted(written)}"
    assert {k: steps["after_converge"][k] for k in before} == before, f"{stack}: a file of the user's changed"
    # netplan warns about configuration others can read; the rest are 0644 like any network config.
    assert steps["modes"] == {rel: 0o600 if stack == "netplan" else 0o644 for rel in ROCE_FILES[stack]}


def test_a_second_run_changes_nothing(sequence):
    stack, _, _, steps = sequence
    run = _ok(steps["again"])
    assert run.changed() == 0, f"{stack}: second run changed {run.changed_tasks()}"


def test_absent_removes_exactly_the_roles_files_and_check_mode_removes_nothing(sequence):
    stack, _, before, steps = sequence
    assert _ok(steps["check_absent"]).changed() == 1
    assert steps["after_check_absent"] == steps["after_converge"], f"{stack}: check mode removed files"
    assert _ok(steps["absent"]).changed() == 1
    assert steps["after_absent"] == before, f"{stack}: {sorted(set(steps['after_absent']) ^ set(before))}"
    assert _ok(steps["absent_again"]).changed() == 0
    # What the files replaced was recorded when they were written, and the records went with them.
    assert len(steps["records_converged"]) == len(ROCE_FILES[stack]) and steps["records_absent"] == []


@pytest.mark.parametrize("name, markers, message", [
    ("NetworkManager", {"etc/NetworkManager/NetworkManager.conf": "[main]\nplugins=keyfile\n"},
     "no supported network stack on this host (found: NetworkManager (/etc/NetworkManager/NetworkManager.conf))"),
    ("nothing", {}, "(found: no network configuration: no /etc/netplan/*.yaml, no enabled or running "
                    "systemd-networkd, no /etc/network/interfaces)"),
    ("ifupdown without a source line", {"etc/network/interfaces": "auto lo\niface lo inet loopback\n"},
     "ifupdown: /etc/network/interfaces does not include /etc/network/interfaces.d/railyard-rails"),
])
def test_an_unsupported_host_is_refused_by_name_before_anything_is_written(tmp_path, name, markers, message):
    host = Host(tmp_path, markers)
    before = host.files()
    run = host.run()
    assert run.rc != 0, f"{name}: the role ran on an unsupported host"
    failed = "\n".join(run.failed_tasks())
    assert message in failed, failed or run.stdout[-2000:]
    if name != "ifupdown without a source line":
        assert "systemd-networkd, netplan and ifupdown" in failed
    assert host.files() == before
    # The hosts driver's destroy still succeeds there: nothing of the role's to remove.
    assert _ok(host.run(rail_network_state="absent")).changed() == 0


def test_a_renamed_netdevs_old_file_and_another_stacks_files_are_removed(tmp_path):
    host = Host(tmp_path, MARKERS["networkd"] | {
        "etc/systemd/network/60-railyard-enp8s0np0.network": "# Managed by Railyard (role rail_network)\n",
        "etc/network/interfaces.d/railyard-rails": "# Managed by Railyard (role rail_network)\n"})
    _ok(host.run())
    names = set(host.files())
    assert "etc/systemd/network/60-railyard-enp8s0np0.network" not in names
    assert "etc/network/interfaces.d/railyard-rails" not in names
    assert set(ROCE_FILES["networkd"]) <= names


def test_infiniband_rails_get_addresses_and_no_routes(tmp_path):
    for stack, golden in (("networkd", {"etc/systemd/network/60-railyard-ibp24s0.network": IB_NETWORKD_RAIL0}),
                          ("netplan", {"etc/netplan/60-railyard-rails.yaml": IB_NETPLAN}),
                          ("ifupdown", {"etc/network/interfaces.d/railyard-rails": IB_IFUPDOWN})):
        host = Host(tmp_path / stack, MARKERS[stack])
        _ok(host.run(rail_network_interfaces=IB, rail_network_compute_cidr=""))
        files = host.files()
        for rel, text in golden.items():
            assert files[rel] == text, f"{stack}: {rel}"


# What each stack runs after a write, then after a removal (handlers in their file's order: what
# the role set with ip is cleared before a daemon configures the rails).
APPLY = {
    "networkd": ([["networkctl", "reload"], ["networkctl", "reconfigure", "enp9s0np0", "enp19s0np0"]],
                 [["ip", "-4", "-force", "-batch", "-"], ["networkctl", "reload"]]),
    "netplan": ([["netplan", "apply"]], [["ip", "-4", "-force", "-batch", "-"], ["netplan", "apply"]]),
    "ifupdown": ([["ip", "-4", "-force", "-batch", "-"], ["ip", "-4", "-batch", "-"]],
                 [["ip", "-4", "-force", "-batch", "-"]]),
}
CLEAR = ("rule del pref 1000\nroute flush table 100\naddr flush dev enp9s0np0 scope global\n"
         "rule del pref 1001\nroute flush table 101\naddr flush dev enp19s0np0 scope global\n")
SET = ("link set dev enp9s0np0 mtu 9000\naddr replace 10.128.0.2/18 dev enp9s0np0\nlink set dev enp9s0np0 up\n"
       "route replace 10.128.0.0/18 dev enp9s0np0 src 10.128.0.2 scope link table 100\n"
       "route replace 10.128.0.0/16 via 10.128.0.1 dev enp9s0np0 src 10.128.0.2 table 100\n"
       "rule add pref 1000 from 10.128.0.2 lookup 100\n"
       "link set dev enp19s0np0 mtu 9000\naddr replace 10.128.64.2/18 dev enp19s0np0\nlink set dev enp19s0np0 up\n"
       "route replace 10.128.64.0/18 dev enp19s0np0 src 10.128.64.2 scope link table 101\n"
       "route replace 10.128.0.0/16 via 10.128.64.1 dev enp19s0np0 src 10.128.64.2 table 101\n"
       "rule add pref 1001 from 10.128.64.2 lookup 101\n")


@pytest.mark.parametrize("stack", sorted(APPLY))
def test_apply_runs_the_stacks_commands_once_per_change_and_not_when_nothing_changed(tmp_path, stack):
    host = Host(tmp_path, MARKERS[stack])
    on_write, on_remove = APPLY[stack]
    _ok(host.run(check=True, rail_network_apply=True))
    assert host.calls() == [], f"{stack}: check mode applied"
    _ok(host.run(rail_network_apply=True))
    calls = host.calls()
    assert [c["argv"] for c in calls] == on_write, f"{stack}: {calls}"
    if stack == "ifupdown":
        assert [c["stdin"] for c in calls] == [CLEAR, SET]
    _ok(host.run(rail_network_apply=True))
    assert host.calls() == [], f"{stack}: applied although nothing changed"
    _ok(host.run(rail_network_apply=True, rail_network_state="absent"))
    calls = host.calls()
    assert [c["argv"] for c in calls] == on_remove, f"{stack}: {calls}"
    assert [c["stdin"] for c in calls if c["argv"][0] == "ip"] == [CLEAR]
