"""A lab node's power: rebooting, powering off and on, as a server's own firmware would.

Lab nodes share the host's kernel, so a node's "reboot" is a restart of everything that makes it
a machine: every process of the node ends (SSH drops), its /run is cleared, and its init starts
again with RY_BOOT set, which applies the boot-time settings (node_init.boot): the command line
the bootloader holds, the hugepages it reserves, PFs without VFs. The netns and its NICs stay, as
a server's NICs stay through a reboot, with the addresses the lab's wiring gives them.

Each node has a supervisor on the host (power.sh, outside the node, started by converge) that
takes requests from the node's shim (`systemctl reboot`, `poweroff`, ...) through a fifo in the
node's runtime dir; `request()` writes to it from the host (what a BMC's power button does).
Every transition is one line of <node dir>/power/log.jsonl: {"time", "event": "off"|"on",
"why", "boot_id"}, so tests read when each node was down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from railyard import paths
from railyard.drivers.lab import names, proc
from railyard.drivers.lab.errors import LabError
from railyard.drivers.lab.node.config import LAB_DIR, node_dir

SUPERVISOR = LAB_DIR / "power.sh"
REQUESTS = ("reboot", "poweroff", "poweron")


def power_dir(stack: str, node: str, root: Path | None = None) -> Path:
    return node_dir(stack, node, root) / "power"


def prepare(stack: str, node: str, hw: Path, root: Path | None = None) -> None:
    """The supervisor's fifo, and the hardware tree the node boots with."""
    d = power_dir(stack, node, root)
    d.mkdir(mode=0o700, exist_ok=True)
    (d / "door").mkdir(mode=0o700, exist_ok=True)
    fifo = fifo_path(stack, node, root)
    if not fifo.is_fifo():
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo, 0o600)
    src = d / "hw-source"
    if not src.exists() or src.read_text() != str(hw):
        src.write_text(str(hw))


def fifo_path(stack: str, node: str, root: Path | None = None) -> Path:
    """The fifo, alone in the directory the node sees at /run/railyard/power."""
    return power_dir(stack, node, root) / "door" / "fifo"


def supervisor_pid(stack: str, node: str, root: Path | None = None) -> int | None:
    try:
        pid = int((power_dir(stack, node, root) / "pid").read_text())
    except (OSError, ValueError):
        return None
    fifo = str(fifo_path(stack, node, root))
    return pid if proc.alive(pid) and fifo in proc.cmdline(pid) else None


def ensure_supervisor(stack: str, node: str, root: Path | None = None) -> int:
    """Start the node's supervisor unless it runs."""
    pid = supervisor_pid(stack, node, root)
    if pid is not None:
        return pid
    from railyard.drivers.lab.node.processes import _clean_env

    d = power_dir(stack, node, root)
    log = open(d / "supervisor.log", "ab")
    # The root as this process resolves it (RAILYARD_ROOT stays out of the node's environment).
    argv = [str(SUPERVISOR), str(fifo_path(stack, node, root)), sys.executable, str(paths.PROJECT_ROOT), stack, node,
            str(root or paths.project_root())]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                         env={**_clean_env(stack, node), "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
                         start_new_session=True)
    log.close()
    (d / "pid").write_text(f"{p.pid}\n")
    return p.pid


def request(stack: str, node: str, what: str, root: Path | None = None) -> None:
    """Press the node's power button from the host: `what` is reboot, poweroff or poweron."""
    if what not in REQUESTS:
        raise ValueError(f"power request {what!r}: one of {', '.join(REQUESTS)}")
    if supervisor_pid(stack, node, root) is None:
        raise LabError(f"node {names.node_ns(stack, node)}", "has no power supervisor running")
    fd = os.open(fifo_path(stack, node, root), os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, f"{what}\n".encode())
    finally:
        os.close(fd)


def events(stack: str, node: str, root: Path | None = None) -> list[dict]:
    """The node's power transitions, oldest first."""
    try:
        text = (power_dir(stack, node, root) / "log.jsonl").read_text()
    except OSError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def wait_events(stack: str, node: str, since: int, count: int, within: float) -> list[str]:
    """The kinds of the node's power events after its first `since`, once `count` of them are
    logged or `within` seconds have passed. A request is done when its last event is logged: "on"
    comes after the boot it logs, whose new boot id shows a moment before."""
    deadline = time.monotonic() + within
    while len(got := events(stack, node)[since:]) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return [e["event"] for e in got]


def _record(stack: str, node: str, root: Path | None, event: dict) -> None:
    with open(power_dir(stack, node, root) / "log.jsonl", "a") as f:
        f.write(json.dumps({"time": time.time(), **event}) + "\n")


def boot_id(stack: str, node: str, root: Path | None = None) -> str | None:
    from railyard.drivers.lab.node.processes import init_pid

    pid = init_pid(stack, node, root)
    try:
        return Path(f"/proc/{pid}/root/run/railyard/boot_id").read_text().strip() if pid else None
    except OSError:
        return None


# `supervisor`: the power supervisor that started the request. It carries the node's marker, like
# every process of the node, and must outlive the boot it serves.

def power_off(stack: str, node: str, root: Path | None, why: str, supervisor: int) -> None:
    from railyard.drivers.lab.node.processes import _kill_node_processes

    # In rounds: a process of the node may fork between a scan and its kill (a health check).
    _kill_node_processes(stack, node, {supervisor})
    _record(stack, node, root, {"event": "off", "why": why})


def power_on(stack: str, node: str, root: Path | None, why: str, supervisor: int) -> None:
    from railyard.drivers.lab.node.processes import _start_init, init_pid

    if init_pid(stack, node, root) is not None:
        return
    from railyard.drivers.lab.faults import clear_at_boot

    d = node_dir(stack, node, root)
    hw = Path((power_dir(stack, node, root) / "hw-source").read_text())
    # The boot finds the hardware a reboot gives back (`railyard lab fault --transient`).
    cleared = clear_at_boot(stack, node, root)
    _start_init(stack, node, d, hw, root, boot=True, spare={supervisor})
    _record(stack, node, root, {"event": "on", "why": why, "boot_id": boot_id(stack, node, root),
                                **({"cleared": cleared} if cleared else {})})


def main(argv: list[str]) -> int:
    what, stack, node, root_arg, supervisor = argv
    root = Path(root_arg) if root_arg else None
    try:
        if what in ("reboot", "poweroff"):
            power_off(stack, node, root, why=what, supervisor=int(supervisor))
        if what in ("reboot", "poweron"):
            power_on(stack, node, root, why=what, supervisor=int(supervisor))
    except Exception as exc:  # the supervisor keeps serving; the log says what went wrong
        print(f"{time.strftime('%FT%T')} {what} of {node} failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
