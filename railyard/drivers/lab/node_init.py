"""The init of one lab node (run as a script, standard library only: `python -I -S node_init.py`).

node/processes.py starts it already inside the node's network namespace, in a fresh mount and UTS namespace
with private propagation, and without CAP_SYS_BOOT, CAP_SYS_MODULE and CAP_SYS_TIME in its
bounding set, so nothing started from here can regain them. It builds the node's private view of
the filesystem with mount(2) directly (a process per mount would cost more than the whole node),
sets the hostname, starts sshd, prints "ready <pid>" on stdout and then becomes `sleep infinity`
named after the node, holding the namespaces. Anything that fails before "ready" fails the create,
with the reason on stderr.

Inputs (environment): RY_NODE (hostname), RY_NODE_DIR (the node's runtime dir on the host),
RY_HW (directory shown at /run/railyard/hw), RY_MARKER (argv[0] of the holder), RY_MOUNT_MARKER
(source name of the node's /run), RY_SHIM_TARGETS (host binaries the reboot-pending shim is
bound over, one per line), RY_AGENT (agent.py, the node's SR-IOV agent, started once sshd runs).

Every module is imported before the first mount: the interpreter's own library may live below a
directory the node mounts over (a pyenv under /root).
"""

import ctypes
import importlib.util
import os
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND = 32, 4096
MNT_DETACH = 2

libc = ctypes.CDLL(None, use_errno=True)


def fail(msg: str) -> None:
    sys.stderr.write(f"{msg}\n")
    sys.stderr.flush()
    os._exit(1)


def mount(source: str, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    rc = libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                    data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        what = f"{fstype} " if fstype else ""
        fail(f"mount {what}{source} on {target} ({data or ''}): {os.strerror(err)}")


def detach(target: str) -> None:
    libc.umount2(target.encode(), MNT_DETACH)  # nothing mounted there is fine too


def mountpoints() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


def bind_ro(path: str) -> None:
    mount(path, path, flags=MS_BIND)
    mount(path, path, flags=MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


SYSFS_RO = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
TREE = "/run/railyard/hw"
REAL_SYS = "/run/railyard/sysfs"  # a second view of the node's real sysfs, while /sys is composed


def _lstat_kind(path: str) -> str:
    if os.path.islink(path):
        return "link"
    return "dir" if os.path.isdir(path) else "file"


def _stand_in(target_dir: str, name: str, source: str) -> str:
    """An entry of `target_dir` (a tmpfs) standing where `source` will be bound: a directory, an
    empty file, or the same symlink (a link needs no mount)."""
    path = f"{target_dir}/{name}"
    kind = _lstat_kind(source)
    if kind == "link":
        os.symlink(os.readlink(source), path)
    elif kind == "dir":
        os.mkdir(path)
    else:
        open(path, "w").close()
    return kind


def _bind(source: str, target: str, read_only: bool) -> None:
    mount(source, target, flags=MS_BIND)
    if read_only:
        mount(source, target, flags=MS_REMOUNT | MS_BIND | SYSFS_RO)


def _compose(sys_dir: str, real: str, tree: str, *, hidden=frozenset(), live=frozenset()) -> None:
    """`sys_dir` (e.g. /sys/class) as a tmpfs holding the tree's entries (writable, as sysfs is
    to root) and the real ones it lacks (read-only): the real entries named in `live` win over the
    tree's, those named in `hidden` (or starting with one of its prefixes) are left out."""
    tree_names = set(os.listdir(tree)) - set(live)
    mount("ry-sysfs", sys_dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=1m")
    for name in sorted(tree_names):
        if _stand_in(sys_dir, name, f"{tree}/{name}") != "link":
            _bind(f"{tree}/{name}", f"{sys_dir}/{name}", read_only=False)
    for name in sorted(os.listdir(real)):
        if name in tree_names or name.startswith(tuple(hidden)):
            continue
        if _stand_in(sys_dir, name, f"{real}/{name}") != "link":
            _bind(f"{real}/{name}", f"{sys_dir}/{name}", read_only=True)
    mount("ry-sysfs", sys_dir, None, MS_REMOUNT | SYSFS_RO)


def show_hardware() -> None:
    """The node's hardware where hardware shows itself, so discovery and tuning code that reads
    the real paths runs unchanged in the lab: the tree's PCI and RDMA devices, NUMA nodes, CPUs,
    hugepage counters and block devices replace the host's in /sys, and its cmdline, meminfo and
    cpuinfo in /proc. Links stay live: /sys/class/net and /sys/devices/virtual are the node's real
    interfaces (operstate, carrier, mtu of its veths). Where the tree has no such entry, the real
    one stays (a tree without sys/ leaves /sys as mounted)."""
    tree_sys = f"{TREE}/sys"
    if not os.path.isdir(tree_sys):
        return
    os.makedirs(REAL_SYS, mode=0o755, exist_ok=True)
    mount("sysfs", REAL_SYS, "sysfs", SYSFS_RO)
    # /sys/devices: the tree's PCI roots instead of the host's, its NUMA nodes and CPUs; the rest
    # (virtual, platform, ...) as it is, so class/net's links resolve to the live interfaces.
    if os.path.isdir(f"{tree_sys}/devices"):
        _compose("/sys/devices", f"{REAL_SYS}/devices", f"{tree_sys}/devices", hidden={"pci"}, live={"virtual"})
    # /sys/class: the tree's RDMA devices; net stays the node's live interfaces (the tree's
    # class/net is its static view of the PCI NICs, which their device directories still show).
    if os.path.isdir(f"{tree_sys}/class"):
        _compose("/sys/class", f"{REAL_SYS}/class", f"{tree_sys}/class", live={"net"})
    for rel in ("bus/pci", "kernel/mm/hugepages", "block"):
        if os.path.isdir(f"{tree_sys}/{rel}") and os.path.isdir(f"/sys/{rel}"):
            _bind(f"{tree_sys}/{rel}", f"/sys/{rel}", read_only=False)
    detach(REAL_SYS)
    for name in ("cmdline", "meminfo", "cpuinfo"):
        if os.path.isfile(f"{TREE}/proc/{name}"):
            _bind(f"{TREE}/proc/{name}", f"/proc/{name}", read_only=True)


def main() -> None:
    env = os.environ
    node, node_dir, hw, marker = env["RY_NODE"], env["RY_NODE_DIR"], env["RY_HW"], env["RY_MARKER"]
    shim_targets = [t for t in env.get("RY_SHIM_TARGETS", "").splitlines() if t]
    os.chdir("/")
    # The agent's module (and with it every module it uses) is loaded now, before the mounts
    # below may hide the interpreter's library; it is forked off once the node is built.
    agent = None
    if env.get("RY_AGENT"):
        spec = importlib.util.spec_from_file_location("railyard_lab_agent", env["RY_AGENT"])
        agent = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(agent)

    # The new mount namespace starts as a copy of the host's, including the host's /run/netns
    # handles of every lab namespace. Each copy would keep its namespace alive after
    # `ip netns del`, so a deleted node's links would linger. Detach them; the host keeps its own.
    for mp in sorted((m for m in mountpoints() if m == "/run/netns" or m.startswith("/run/netns/")), reverse=True):
        detach(mp)

    # Sources are bound before anything could hide them: /run gets its tmpfs first, /root is
    # the last bind (a checkout under /root stays reachable until then), /tmp comes after it.
    # Its source names the node: every process of the node can be found by it (proc.by_mount_source).
    mount(env["RY_MOUNT_MARKER"], "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64m")
    for d in ("/run/lock", "/run/sshd", "/run/railyard/hw", "/run/railyard/bin"):
        os.makedirs(d, mode=0o755, exist_ok=True)
    mount(hw, "/run/railyard/hw", flags=MS_BIND)
    mount(f"{node_dir}/bin", "/run/railyard/bin", flags=MS_BIND)
    # /etc and /var are the host's, overlaid by the node's own layers: what the node writes lands
    # in <node dir>/etc and /var and never reaches the host, and a node costs a few files, not a copy.
    for d in ("etc", "var"):
        mount(f"ry-{d}", f"/{d}", "overlay", 0,
              f"lowerdir=/{d},upperdir={node_dir}/{d},workdir={node_dir}/{d}.work")
    for d in ("boot", "mnt", "root"):
        if not os.path.isdir(f"/{d}"):
            fail(f"/{d} does not exist on the host; a lab node needs it as a mount point")
        mount(f"{node_dir}/{d}", f"/{d}", flags=MS_BIND)
    mount("ry-tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=256m")
    mount("ry-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")

    # A sysfs mounted from inside the node's netns shows the node's own class/net; read-only, so
    # a tuning mistake (a write meant for a device) fails loudly instead of reaching the host.
    detach("/sys")
    mount("sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    show_hardware()
    for p in ("/proc/sys", "/proc/irq", "/proc/sysrq-trigger", "/proc/bus"):
        if os.path.exists(p):
            bind_ro(p)

    # The rest of the host's root filesystem (/usr, /opt, /home, ...) is read-only in the node: a
    # package install or a write outside the node's own directories fails instead of changing the
    # host. Per-mount flag, so the host's own mount stays writable.
    mount("/", "/", flags=MS_REMOUNT | MS_BIND | MS_RDONLY)

    name = node.encode()
    if libc.sethostname(name, len(name)) != 0:
        fail(f"sethostname {node}: {os.strerror(ctypes.get_errno())}")

    # Reboots and bootloader changes are recorded, not done (lab-shim.sh). The shim is on PATH
    # under every name, and bound over the host's binaries of those names so an absolute path
    # (/sbin/reboot) lands there too; the real systemctl stays reachable for the other verbs.
    for target in shim_targets:
        if os.path.basename(target) == "systemctl":
            open("/run/railyard/real-systemctl", "w").close()
            mount(target, "/run/railyard/real-systemctl", flags=MS_BIND)
        mount("/run/railyard/bin/.lab-shim", target, flags=MS_BIND)

    sshd = ["/usr/sbin/sshd", "-f", "/etc/ssh/sshd_config", "-E", "/run/railyard/sshd.log"]
    pid = os.posix_spawn(sshd[0], sshd, dict(env))
    _, status = os.waitpid(pid, 0)  # sshd forks its daemon after it listens, then the parent exits
    if status != 0:
        try:
            with open("/run/railyard/sshd.log") as f:
                log = f.read().strip()
        except OSError:
            log = ""
        fail(f"sshd did not start (wait status {status}): {log}")
    if agent is not None:
        try:
            agent.daemonize()
        except OSError as exc:
            fail(f"the SR-IOV agent did not start: {exc}")

    sys.stdout.write(f"ready {os.getpid()}\n")
    sys.stdout.flush()
    null = os.open("/dev/null", os.O_RDWR)
    log = os.open("/run/railyard/init.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(log, 2)
    for key in [k for k in env if k.startswith("RY_")]:
        del env[key]
    os.execv("/bin/sleep", [marker, "infinity"])


if __name__ == "__main__":
    main()
