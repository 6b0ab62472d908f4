"""The slurm role's modules on this machine's real processes and files: railyard_daemon keeps a
self-daemonizing program running by its pid file (as munged, slurmctld and slurmd run in the lab's
nodes), and slurm_munge_key hands out the key Railyard wrote, or a new one, never the host's own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "playbooks/roles/slurm/library"
PLAYBOOK_LIBRARY = ROOT / "playbooks/library"

# A daemon as slurmd is one: it forks, the parent exits 0, the child writes its pid file.
DAEMON = """import os, sys, time
pidfile, log = sys.argv[1], sys.argv[2]
if os.fork():
    sys.exit(0)
os.setsid()
with open(log, "a") as fh:
    fh.write("started\\n")
if os.environ.get("FAIL"):
    with open(log, "a") as fh:
        fh.write("fatal: the test asked it to die\\n")
    sys.exit(1)
with open(pidfile, "w") as fh:
    fh.write(str(os.getpid()))
time.sleep(600)
"""


def run_module(module: Path, tmp: Path, check_mode: bool = False, env: dict | None = None, **args) -> dict:
    f = tmp / "args.json"
    f.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode}}))
    out = subprocess.run([sys.executable, str(module), str(f)], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}).stdout
    return json.loads(out[out.index("{"):])


@pytest.fixture
def daemon(tmp_path):
    script = tmp_path / "fakeslurmd.py"
    script.write_text(DAEMON)
    args = {"name": "fakeslurmd", "argv": [sys.executable, str(script), str(tmp_path / "run/d.pid"),
                                           str(tmp_path / "d.log")],
            "exe": sys.executable, "pidfile": str(tmp_path / "run/d.pid"), "log": str(tmp_path / "d.log"),
            "dirs": [{"path": str(tmp_path / "run"), "owner": "root", "mode": "0700"}], "timeout": 10}
    started: list[int] = []

    def call(check_mode: bool = False, env: dict | None = None, **more) -> dict:
        res = run_module(PLAYBOOK_LIBRARY / "railyard_daemon.py", tmp_path, check_mode, env, **{**args, **more})
        if res.get("pid"):
            started.append(res["pid"])
        return res

    yield call
    # Every process of this test's script, whatever became of the module runs that started them.
    for pid in [*started, *(int(d) for d in os.listdir("/proc") if d.isdigit())]:
        try:
            if pid in started or str(script).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            pass


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_daemon_is_started_once_and_a_second_run_changes_nothing(daemon, tmp_path):
    would = daemon(check_mode=True)
    assert would["changed"] and not (tmp_path / "run/d.pid").exists()
    first = daemon()
    assert first["changed"] and alive(first["pid"])
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o700
    again = daemon()
    assert not again["changed"] and again["pid"] == first["pid"]


def test_restarted_replaces_the_process_and_stopped_ends_it(daemon):
    first = daemon()
    second = daemon(state="restarted")
    assert second["changed"] and second["pid"] != first["pid"] and alive(second["pid"])
    assert not alive(first["pid"])
    stopped = daemon(state="stopped")
    assert stopped["changed"] and not alive(second["pid"])
    assert not daemon(state="stopped")["changed"]


def test_a_stale_pid_file_of_another_program_is_not_taken_for_the_daemon(daemon, tmp_path):
    other = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "run").mkdir(exist_ok=True)
        (tmp_path / "run/d.pid").write_text(str(other.pid))
        res = daemon()
        assert res["changed"] and res["pid"] != other.pid
        assert other.poll() is None  # left alone: it is not the daemon
    finally:
        other.kill()
        other.wait()


def test_a_daemon_that_dies_at_start_fails_with_its_log(daemon):
    res = daemon(env={"FAIL": "1"}, timeout=3)
    assert res.get("failed") and "fatal: the test asked it to die" in res["msg"], res


def test_the_munge_key_is_railyards_own_once_written_and_never_the_hosts(tmp_path):
    key = tmp_path / "etc/munge/munge.key"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"\x00\x01 the key Debian's package made")
    first = run_module(LIBRARY / "slurm_munge_key.py", tmp_path, path=str(key), root=str(tmp_path))
    assert first["new"] and len(first["key"]) == 1024 and "Debian" not in first["key"]
    assert not first["changed"] and key.read_bytes().startswith(b"\x00\x01")  # it writes nothing
    # Written by railyard_files (which keeps the host's key), it is the one handed out from then on.
    written = run_module(PLAYBOOK_LIBRARY / "railyard_files.py", tmp_path, root=str(tmp_path),
                         files=[{"path": str(key), "content": first["key"] + "\n", "mode": "0400"}])
    assert written["changed"]
    again = run_module(LIBRARY / "slurm_munge_key.py", tmp_path, path=str(key), root=str(tmp_path))
    assert (again["new"], again["key"]) == (False, first["key"])
    # Teardown puts the host's own key back.
    run_module(PLAYBOOK_LIBRARY / "railyard_files.py", tmp_path, root=str(tmp_path),
               files=[{"path": str(key), "state": "absent"}])
    assert key.read_bytes().startswith(b"\x00\x01")
