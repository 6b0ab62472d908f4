"""A lab node's processes: the init holding its namespaces, sshd, the SR-IOV agent.

Finding each (by pid file, checked against the node's current namespaces), starting them,
killing every process of a node, running a command inside the node, and reading what the node
recorded: the reboots its shim intercepted and its host key.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Collection, Sequence

from railyard.drivers.lab import names, net, proc
from railyard.drivers.lab.errors import LabError
from railyard.drivers.lab.node import drives
from railyard.drivers.lab.node.config import LAB_DIR, NODE_PATH, SHIMMED, node_dir

INIT_SCRIPT = LAB_DIR / "node_init.py"
AGENT_SCRIPT = LAB_DIR / "agent.py"
AGENT_DIR = "run/railyard/agent"  # relative to the node's root, see agent.py

# What node processes may never do: reboot or kexec the host, load kernel modules, set its clock,
# or make a device node (one for a host disk would bypass the node's private /dev).
DROPPED_CAPS = ("sys_boot", "sys_module", "sys_time", "mknod")

REBOOT_PENDING = "run/railyard/reboot-pending"  # relative to the node's root, see lab-shim.sh
HW_TREE = "/run/railyard/hw"


# --- the init process -------------------------------------------------------------------------

def _pid_file(stack: str, node: str, root: Path | None = None) -> Path:
    return node_dir(stack, node, root) / "init.pid"


def init_pid(stack: str, node: str, root: Path | None = None) -> int | None:
    """The node's init, if it is running and holds the node's current netns; else None."""
    try:
        pid = int(_pid_file(stack, node, root).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    argv = proc.cmdline(pid)
    ino = net.netns_inode(names.node_ns(stack, node))
    if not argv or argv[0] != names.init_marker(stack, node) or not proc.alive(pid):
        return None
    if ino is None or proc.ns_inode(pid) != ino:
        return None
    return pid


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _hw_source_of(pid: int) -> tuple[int, int] | None:
    return _identity(Path(f"/proc/{pid}/root{HW_TREE}"))


def _clean_env(stack: str, node: str) -> dict[str, str]:
    """Node processes start from this environment, not the caller's (which may carry secrets)."""
    return {
        "PATH": NODE_PATH,
        "HOME": "/root",
        "USER": "root",
        "LOGNAME": "root",
        "LANG": "C.UTF-8",
        "TERM": os.environ.get("TERM", "dumb"),
        names.ENV_MARKER: names.env_marker(stack, node),
    }


def _bounding() -> str:
    return ",".join(f"-{c}" for c in DROPPED_CAPS)


def _start_init(stack: str, node: str, d: Path, hw: Path, root: Path | None, *, boot: bool = False,
                spare: Collection[int] = ()) -> int:
    """Start the node's init; `boot`: as a power-on, applying boot-time settings (node_init.boot);
    spare: the node's processes a failed start must not kill (_kill_node_processes)."""
    ns = names.node_ns(stack, node)
    env = _clean_env(stack, node)
    if boot:
        env["RY_BOOT"] = "1"
    env.update({
        "RY_NODE": node,
        "RY_NODE_DIR": str(d.resolve()),
        "RY_HW": str(hw),
        "RY_MARKER": names.init_marker(stack, node),
        "RY_MOUNT_MARKER": names.mount_marker(stack, node),
        "RY_SHIM_TARGETS": "\n".join(shim_targets()),
        "RY_AGENT": str(AGENT_SCRIPT),
        "RY_DRIVES": drives.env_value(drives.ensure(d, hw)),
    })
    # setsid --fork: the init is not our child, so it outlives this process (a Pulumi provider)
    # and never lingers as our zombie.
    argv = ["setsid", "--fork", "nsenter", f"--net={net.netns_path(ns)}", "--",
            "unshare", "--mount", "--uts", "--propagation", "private", "--",
            "setpriv", f"--bounding-set={_bounding()}", "--",
            sys.executable, "-I", "-S", str(INIT_SCRIPT)]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, cwd="/", text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        _kill_node_processes(stack, node, spare)
        raise LabError(f"node {ns}", "the node's init did not report ready within 30s") from None
    pid = None
    for line in out.splitlines():
        if line.startswith("ready "):
            pid = int(line.split()[1])
    if pid is None:
        _kill_node_processes(stack, node, spare)
        raise LabError(f"node {ns}", f"the node's init failed: {err.strip() or out.strip() or 'no output'}")
    (d / "init.pid").write_text(f"{pid}\n")
    # "ready" comes just before the init execs its holder; init_pid() knows it by the holder's name.
    deadline = time.monotonic() + 10
    while init_pid(stack, node, root) is None:
        if not proc.alive(pid) or time.monotonic() > deadline:
            _kill_node_processes(stack, node, spare)
            raise LabError(f"node {ns}", "the node's init exited right after it reported ready")
        time.sleep(0.002)
    return pid


def shim_targets() -> list[str]:
    """The host binaries the shim covers inside a node, each real file once (reboot, halt and
    shutdown are all systemctl on Debian)."""
    found: dict[str, None] = {}
    for name in SHIMMED:
        for d in ("/usr/sbin", "/usr/bin"):
            path = os.path.join(d, name)
            if os.path.exists(path):
                found.setdefault(os.path.realpath(path))
    return list(found)


def _node_processes(stack: str, node: str) -> list[int]:
    """Every process of the node: those in its netns, those in a mount namespace of the node
    (an earlier incarnation's too, whose netns was removed behind our back), and any carrying
    its environment marker (an nsenter on its way in)."""
    found: set[int] = set()
    ino = net.netns_inode(names.node_ns(stack, node))
    if ino is not None:
        found.update(p.pid for p in proc.in_namespaces({ino}))
    mark = names.mount_marker(stack, node)
    found.update(p.pid for p, _ in proc.by_mount_source("/run", lambda s: s == mark))
    marker = names.env_marker(stack, node)
    found.update(p.pid for p, _ in proc.marked(names.ENV_MARKER, lambda v: v == marker))
    return sorted(found)


# Scans of a node's processes before it is given up as unkillable.
KILL_ROUNDS = 5


def _kill_node_processes(stack: str, node: str, spare: Collection[int] = ()) -> None:
    """Kill until a scan finds none: a process scanned but not yet killed may fork one the scan
    missed (slurmd's health check starting sinfo as the node goes), which would outlive the node
    in a netns no name leads to any more.

    spare: processes that carry the node's marker but must outlive its boot (its power supervisor,
    which powers it off and on); this process is never killed either."""
    what = f"node {names.node_ns(stack, node)}"
    keep = {os.getpid(), *spare}
    for _ in range(KILL_ROUNDS):
        found = [p for p in _node_processes(stack, node) if p not in keep]
        if not found:
            return
        proc.kill_all(found, what=what)
    left = [p for p in _node_processes(stack, node) if p not in keep]
    if left:
        raise LabError(what, f"processes {left} kept appearing after {KILL_ROUNDS} rounds of SIGKILL")


def _sshd_pid(stack: str, node: str, init: int) -> int | None:
    try:
        pid = int(Path(f"/proc/{init}/root/run/sshd.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    if proc.alive(pid) and proc.ns_inode(pid) == proc.ns_inode(init) and "sshd" in " ".join(proc.cmdline(pid)):
        return pid
    return None


def agent_pid(stack: str, node: str, root: Path | None = None, *, _init: int | None = None) -> int | None:
    """The node's SR-IOV agent (agent.py), if it runs in the node; else None."""
    init = _init or init_pid(stack, node, root)
    if init is None:
        return None
    try:
        pid = int(Path(f"/proc/{init}/root/{AGENT_DIR}/pid").read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    if comm == "railyard-agent" and proc.alive(pid) and proc.ns_inode(pid, "mnt") == proc.ns_inode(init, "mnt"):
        return pid
    return None


def start_agent(stack: str, node: str, root: Path | None = None) -> int:
    """Start the node's agent again (node_init starts the first): a fresh interpreter loads it on
    the host, then enters the node's namespaces, since the node may hide the interpreter's files."""
    init = init_pid(stack, node, root)
    if init is None:
        raise LabError(f"node {names.node_ns(stack, node)}", "is not running")
    p = subprocess.run([sys.executable, "-I", "-S", str(AGENT_SCRIPT), "--enter", str(init)],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
                       env=_clean_env(stack, node), cwd="/", start_new_session=True)
    out = p.stdout.split()
    if p.returncode != 0 or len(out) != 2 or out[0] != "ready":
        raise LabError(f"node {names.node_ns(stack, node)}", f"the SR-IOV agent did not start: {p.stderr.strip()}")
    return int(out[1])


# How long sshd's daemon may take to bind its sockets after its first process exits (a busy host).
SSHD_LISTEN_TIMEOUT = 30


def _restart_sshd(stack: str, node: str, init: int) -> None:
    old = _sshd_pid(stack, node, init)
    if old:
        proc.kill_all([old], what=f"sshd of node {node}")
    # A killed sshd leaves its pid file: gone, the new daemon's is the only one waited for.
    Path(f"/proc/{init}/root/run/sshd.pid").unlink(missing_ok=True)
    run_in_node(stack, node, ["/usr/sbin/sshd", "-f", "/etc/ssh/sshd_config", "-E", "/run/railyard/sshd.log"],
                check=True, _pid=init)
    # sshd's first process exits as it daemonizes, before the daemon listens; the daemon writes
    # its pid file once its sockets are bound (OpenSSH's sshd.c), so that is what is waited for.
    deadline = time.monotonic() + SSHD_LISTEN_TIMEOUT
    while _sshd_pid(stack, node, init) is None:
        if time.monotonic() > deadline:
            raise LabError(f"node {names.node_ns(stack, node)}",
                           f"sshd did not listen within {SSHD_LISTEN_TIMEOUT} s: {_sshd_log(init)}")
        time.sleep(0.01)


def _sshd_log(init: int) -> str:
    try:
        return Path(f"/proc/{init}/root/run/railyard/sshd.log").read_text().strip()[-2000:] or "no log"
    except OSError:
        return "no log"


# --- using a node -------------------------------------------------------------------------------

def run_in_node(stack: str, node: str, argv: Sequence[str], *, input: str | None = None, check: bool = False,
                timeout: float = 60, env: dict[str, str] | None = None, root: Path | None = None,
                _pid: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run argv inside the node (its net, mount and UTS namespaces, without the dropped
    capabilities), as root with the node's PATH; for tests and debugging without ssh."""
    pid = _pid or init_pid(stack, node, root)
    if pid is None:
        raise LabError(f"node {names.node_ns(stack, node)}", "is not running")
    full_env = _clean_env(stack, node)
    full_env.update(env or {})
    cmd = ["nsenter", "-t", str(pid), "--net", "--mount", "--uts", "--",
           "setpriv", f"--bounding-set={_bounding()}", "--", *argv]
    try:
        p = subprocess.run(cmd, input=input, text=True, capture_output=True, timeout=timeout, env=full_env,
                           cwd="/", stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"node {node}", f"`{' '.join(argv)}` did not finish within {timeout:g}s") from exc
    if check and p.returncode != 0:
        raise LabError(f"node {node}", f"`{' '.join(argv)}` exited {p.returncode}: {(p.stderr or p.stdout).strip()}")
    return p


def reboot_pending(stack: str, node: str, root: Path | None = None) -> list[dict]:
    """The reboots and bootloader changes requested inside the node since it started, oldest
    first: [{"time": 1700000000, "kind": "reboot"|"poweroff"|"bootloader", "command": "..."}]."""
    pid = init_pid(stack, node, root)
    if pid is None:
        return []
    try:
        text = Path(f"/proc/{pid}/root/{REBOOT_PENDING}").read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3:
            out.append({"time": int(parts[0]) if parts[0].isdigit() else 0, "kind": parts[1], "command": parts[2]})
    return out


def host_key(stack: str, node: str, root: Path | None = None) -> str | None:
    """The node's public host key as ``ssh-ed25519 AAAA...`` (for known_hosts), or None."""
    pub = node_dir(stack, node, root) / "etc" / "ssh" / "ssh_host_ed25519_key.pub"
    try:
        kind_, key = pub.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return f"{kind_} {key}"
