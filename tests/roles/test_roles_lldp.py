"""The lldp role on a real lldpd (Debian's, from scripts/host-deps.sh), in a mount and network
namespace of its own whose /run is a tmpfs (lldpd's pid file, control socket and chroot are fixed
paths under /run), so nothing reaches this machine's own: a host that ran lldpd before Railyard
gets it back at teardown, running; a host that did not has it stopped; a second run and a second
teardown change nothing, and check mode writes nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from railyard.tuning.runner import ansible_env

from .conftest import PLAYBOOKS, runner_env

LLDPD = Path("/usr/sbin/lldpd")

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and mounts need root"),
              pytest.mark.skipif(not LLDPD.exists(), reason="lldpd is installed by scripts/host-deps.sh")]

PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role: {{name: lldp, tasks_from: {entry}}}
"""


class Host:
    """A process holding the namespaces, and the role run inside them."""

    def __init__(self, pid: int, tmp: Path):
        self.pid, self.tmp, self.etc = pid, tmp, tmp / "root"
        self.etc.mkdir()
        self.runs = 0

    def sh(self, script: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-n", "sh", "-c", script],
                              capture_output=True, text=True, check=check)

    def lldpd_pid(self) -> int | None:
        """The running lldpd its pid file names, or None."""
        got = self.sh("pid=$(cat /run/lldpd.pid 2>/dev/null) && [ \"$(readlink /proc/$pid/exe)\" = /usr/sbin/lldpd ]"
                      " && echo $pid", check=False).stdout.strip()
        return int(got) if got else None

    def role(self, entry: str = "main", check: bool = False) -> dict:
        """Run the role's entry point; its stats (changed, failed) and the text it printed."""
        self.runs += 1
        play = self.tmp / f"play-{self.runs}.yml"
        play.write_text(PLAY.format(entry=entry))
        extra = {"lldp_interfaces": ["rail0"], "lldp_install_packages": False, "lldp_service_manager": "direct",
                 "lldp_etc_root": str(self.etc), "ansible_python_interpreter": sys.executable}
        env = {**os.environ, **runner_env(ansible_env()), "ANSIBLE_STDOUT_CALLBACK": "json"}
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play),
                "-e", json.dumps(extra), *(["--check"] if check else [])]
        run = subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-n", *argv], capture_output=True, text=True,
                             env=env, cwd=PLAYBOOKS, timeout=300)
        out = json.loads(run.stdout[run.stdout.index("{"):])
        stats = out["stats"]["localhost"]
        assert run.returncode == 0 and not stats["failures"], run.stdout[-3000:] + run.stderr[-2000:]
        return stats


@pytest.fixture
def host(tmp_path):
    holder = subprocess.Popen(["unshare", "--mount", "--net", "--propagation", "private", "sh", "-c",
                               "mount -t tmpfs tmpfs /run && ip link add rail0 type veth peer name leaf0 && "
                               "ip link set rail0 up && ip link set leaf0 up && exec sleep 600"])
    try:
        for _ in range(200):  # until /run is its own
            if (os.readlink(f"/proc/{holder.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
                    and subprocess.run(["nsenter", "-t", str(holder.pid), "-m", "mountpoint", "-q", "/run"]).returncode == 0):
                break
            time.sleep(0.02)
        yield Host(holder.pid, tmp_path)
    finally:
        # lldpd daemonizes: whatever the test left running in the namespace goes with it.
        subprocess.run(["nsenter", "-t", str(holder.pid), "-m", "-n", "sh", "-c",
                        "[ -f /run/lldpd.pid ] && kill $(cat /run/lldpd.pid)"], check=False)
        holder.kill()
        holder.wait()
        shutil.rmtree(tmp_path / "root", ignore_errors=True)


def record(host: Host) -> Path:
    return host.etc / "var/lib/railyard/lldp-before.json"


def test_a_host_that_ran_lldpd_before_railyard_gets_it_back_running_at_teardown(host):
    host.sh("/usr/sbin/lldpd")  # the site's own lldpd, before any run of the role
    for _ in range(100):
        if host.lldpd_pid():
            break
        time.sleep(0.05)
    site = host.lldpd_pid()
    assert site is not None
    assert host.role(check=True)["changed"] >= 1 and not record(host).exists()

    assert host.role()["changed"] >= 1
    assert json.loads(record(host).read_text()) == {"running": True, "enabled": False}
    ours = host.lldpd_pid()
    assert ours is not None and ours != site, "restarted on Railyard's drop-in"
    assert host.role()["changed"] == 0
    assert json.loads(record(host).read_text())["running"] is True, "a later run keeps the first record"

    assert host.role("absent")["changed"] >= 1
    back = host.lldpd_pid()
    assert back is not None and back != ours, "restarted without Railyard's drop-in"
    assert not (host.etc / "etc/lldpd.d/railyard.conf").exists() and not record(host).exists()
    assert not (host.etc / "var/lib/railyard").exists(), sorted(map(str, host.etc.rglob("*")))
    assert host.role("absent")["changed"] == 0 and host.lldpd_pid() == back


def test_a_host_without_lldpd_before_has_it_stopped_at_teardown(host):
    assert host.lldpd_pid() is None
    host.role()
    assert json.loads(record(host).read_text()) == {"running": False, "enabled": False}
    assert host.lldpd_pid() is not None
    host.role("absent")
    assert host.lldpd_pid() is None and not record(host).exists()
