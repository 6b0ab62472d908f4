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
bound over, one per line), RY_AGENT (agent.py, the node's SR-IOV agent, started once sshd runs),
RY_DRIVES (the node's drives on their loop devices, shown in its private /dev), RY_BOOT (set when the node is powered on again, node/power.py: boot-time settings apply, see boot()).

Every start is a boot of the node: /run is a fresh tmpfs and /proc/sys/kernel/random/boot_id a
new one. A power-on (RY_BOOT) also does what firmware and the kernel do at boot: the command line
is the one the bootloader was last configured with (the shim's update-grub writes it to
/boot/railyard/cmdline), the hugepage counters are what its hugepages= reserve, and no VF survives.

Every module is imported before the first mount: the interpreter's own library may live below a
directory the node mounts over (a pyenv under /root).
"""

import ctypes
import importlib.util
import os
import sys
import time
import uuid

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND = 32, 4096
MNT_DETACH = 2

libc = ctypes.CDLL(None, use_errno=True)


def fail(msg: str) -> None:
    sys.stderr.write(f"{msg}\n")
    sys.stderr.flush()
    os._exit(1)


# Under the 30 s the host gives the whole init to say "ready" (node.processes._start_init).
SSHD_LISTEN_TIMEOUT = 20


def sshd_listening() -> bool:
    """The pid file sshd writes after it binds names a live process (/run is this boot's own)."""
    try:
        with open("/run/sshd.pid") as f:
            os.kill(int(f.read().strip()), 0)
    except (OSError, ValueError):  # not written yet, or written half (fopen truncates first)
        return False
    return True


def sshd_log() -> str:
    try:
        with open("/run/railyard/sshd.log") as f:
            return f.read().strip()
    except OSError:
        return ""


def mount(source: str, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    rc = libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                    data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        what = f"{fstype} " if fstype else ""
        fail(f"mount {what}{source} on {target} ({data or ''}): {os.strerror(err)}")


def detach(target: str) -> None:
    libc.umount2(target.encode(), MNT_DETACH)  # nothing mounted there is fine too


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"{path} is a Python file"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The one mountinfo reader (it unescapes), loaded by path: this script runs without the package.
mount_points = _load("railyard_mount_points",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "model", "mount_points.py"))


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


def show_hardware() -> bool:
    """The node's hardware where hardware shows itself, so discovery and tuning code that reads
    the real paths runs unchanged in the lab: the tree's PCI and RDMA devices, NUMA nodes, CPUs,
    hugepage counters and block devices replace the host's in /sys, and its cmdline, meminfo and
    cpuinfo in /proc. Links stay live: /sys/class/net and /sys/devices/virtual are the node's real
    interfaces (operstate, carrier, mtu of its veths). Where the tree has no such entry, the real
    one stays (a tree without sys/ leaves /sys as mounted). True when /proc/irq is the tree's."""
    tree_sys = f"{TREE}/sys"
    if not os.path.isdir(tree_sys):
        return False
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
    # The NICs' interrupts are the tree's (their msi_irqs name them), writable as on a host; the
    # host's own /proc/irq is never the node's to change.
    if os.path.isdir(f"{TREE}/proc/irq") and os.path.isdir("/proc/irq"):
        _bind(f"{TREE}/proc/irq", "/proc/irq", read_only=False)
        return True
    return False


# The host's character devices every node process may use; nothing else of the host's /dev.
DEV_CHARS = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"}


def private_dev(drives: str, tree: str) -> None:
    """The node's own /dev: the basic character devices, its own pseudo-terminals and /dev/shm,
    and its drives (RY_DRIVES: `name=/dev/loopN` lines, node/drives.py) under their names. The
    host's disks are not there, and the node cannot make a device node for one (CAP_MKNOD is
    dropped), so nothing the node runs (mkfs, wipefs, mdadm) can reach a host disk. The host's
    device nodes are bound, not made: the init lacks CAP_MKNOD too."""
    pairs = []
    for line in drives.splitlines():
        name, _, dev = line.partition("=")
        if not name or "/" in name or not dev.startswith("/dev/"):
            fail(f"RY_DRIVES: bad line {line!r}")
        pairs.append((name, dev))
    # Opened before /dev is covered: the host's nodes are bound from these descriptors' paths.
    host = {name: os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC) for name in DEV_CHARS if os.path.exists(f"/dev/{name}")}
    disks = {name: os.open(dev, os.O_PATH | os.O_CLOEXEC) for name, dev in pairs}
    mount("ry-dev", "/dev", "tmpfs", MS_NOSUID, "mode=0755,size=64k")
    for name, fd in {**host, **disks}.items():
        open(f"/dev/{name}", "w").close()
        mount(f"/proc/self/fd/{fd}", f"/dev/{name}", flags=MS_BIND)
        os.close(fd)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"/dev/{name}")
    for d in ("pts", "shm"):
        os.mkdir(f"/dev/{d}", 0o755)
    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5")
    mount("ry-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    # The drives' device numbers where the kernel shows them, /sys/block/<name>/dev (in the tree:
    # they exist only while the node runs) and /proc/partitions: libblkid finds a filesystem by
    # UUID (mount UUID=..., an fstab line) by reading them.
    lines = ["major minor  #blocks  name", ""]
    for name, _ in pairs:
        rdev = os.stat(f"/dev/{name}").st_rdev
        major, minor = os.major(rdev), os.minor(rdev)
        block = f"{tree}/sys/block/{name}"
        if _inside(f"{block}/size", tree):
            fd = os.open(f"{block}/dev", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o444)
            with os.fdopen(fd, "w") as f:
                f.write(f"{major}:{minor}\n")
        with open(f"/sys/dev/block/{major}:{minor}/size") as f:
            kib = int(f.read()) // 2
        lines.append(f"{major:4d} {minor:7d} {kib:10d} {name}")
    with open("/run/railyard/partitions", "w") as f:
        f.write("\n".join(lines) + "\n")
    _bind("/run/railyard/partitions", "/proc/partitions", read_only=True)


def _hugepages_at_boot(cmdline: str) -> dict:
    """{page kB: {numa node or None (the whole host): count}} as the kernel reads hugepagesz=,
    hugepages= (a count, or node:count pairs) and default_hugepagesz= (Documentation/admin-guide/
    kernel-parameters.txt); a hugepages= applies to the hugepagesz= before it, else the default."""
    def kb(size: str) -> int:
        unit = size[-1:].upper()
        return int(size[:-1]) * {"K": 1, "M": 1024, "G": 1024 * 1024}[unit] if unit in "KMG" else int(size) // 1024

    words = cmdline.split()
    default = 2048
    for w in words:
        if w.startswith("default_hugepagesz="):
            default = kb(w.split("=", 1)[1])
    out: dict = {}
    size = None
    for w in words:
        key, _, value = w.partition("=")
        if key == "hugepagesz":
            size = kb(value)
        elif key == "hugepages" and value:
            counts = out.setdefault(size or default, {})
            for part in value.split(","):
                node, _, count = part.rpartition(":")
                counts[int(node) if node else None] = int(count)
    return out


def _inside(path: str, root: str) -> bool:
    """Whether `path` is a file below `root` by its real path: the node writes its tree and its
    /boot, and a link it planted there must not point this host-side code at a host file."""
    real = os.path.realpath(path)
    return real.startswith(os.path.realpath(root) + "/") and not os.path.islink(path)


def _write(path: str, text: str, root: str) -> None:
    if not _inside(path, root):
        return
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _read(path: str, root: str) -> str | None:
    if not _inside(path, root) or not os.path.isfile(path):
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as f:
        return f.read()


def boot(node_dir: str, tree: str) -> None:
    """Boot-time state in the node's hardware tree (tree: its host path, writable): the command
    line the bootloader holds, hugepages reserved by it and nothing else, every PF without VFs
    (the agent removes the VFs it finds when it starts)."""
    cmdline = _read(f"{node_dir}/boot/railyard/cmdline", f"{node_dir}/boot")
    if cmdline is not None and os.path.isfile(f"{tree}/proc/cmdline"):
        _write(f"{tree}/proc/cmdline", cmdline.strip() + "\n", tree)
    reserved = _hugepages_at_boot(_read(f"{tree}/proc/cmdline", tree) or "")
    nodes_dir = f"{tree}/sys/devices/system/node"
    numa = sorted(int(n[4:]) for n in os.listdir(nodes_dir) if n[4:].isdigit()) if os.path.isdir(nodes_dir) else []
    global_dir = f"{tree}/sys/kernel/mm/hugepages"
    for size in sorted(os.listdir(global_dir)) if os.path.isdir(global_dir) else ():
        page_kb = int(size[len("hugepages-"):-2])
        want = reserved.get(page_kb, {})
        per_node = {n: want.get(n, 0) for n in numa}
        if None in want:  # a total: the kernel spreads it over the nodes
            for i, n in enumerate(numa):
                per_node[n] = want[None] // len(numa) + (1 if i < want[None] % len(numa) else 0)
        for n, count in per_node.items():
            for counter in ("nr_hugepages", "free_hugepages"):
                path = f"{nodes_dir}/node{n}/hugepages/{size}/{counter}"
                if os.path.isfile(path):
                    _write(path, f"{count}\n", tree)
        total = sum(per_node.values()) if numa else want.get(None, 0)
        for counter in ("nr_hugepages", "free_hugepages"):
            if os.path.isfile(f"{global_dir}/{size}/{counter}"):
                _write(f"{global_dir}/{size}/{counter}", f"{total}\n", tree)
    devices = f"{tree}/sys/bus/pci/devices"
    for bdf in sorted(os.listdir(devices)) if os.path.isdir(devices) else ():
        numvfs = f"{devices}/{bdf}/sriov_numvfs"
        if (_read(numvfs, tree) or "").strip() not in ("", "0"):
            _write(numvfs, "0\n", tree)


def main() -> None:
    env = os.environ
    node, node_dir, hw, marker = env["RY_NODE"], env["RY_NODE_DIR"], env["RY_HW"], env["RY_MARKER"]
    shim_targets = [t for t in env.get("RY_SHIM_TARGETS", "").splitlines() if t]
    os.chdir("/")
    # The agent's module (and with it every module it uses) is loaded now, before the mounts
    # below may hide the interpreter's library; it is forked off once the node is built.
    agent = None
    if env.get("RY_AGENT"):
        agent = _load("railyard_lab_agent", env["RY_AGENT"])

    # The new mount namespace starts as a copy of the host's, including the host's /run/netns
    # handles of every lab namespace. Each copy would keep its namespace alive after
    # `ip netns del`, so a deleted node's links would linger. Detach them; the host keeps its own.
    for mp in sorted((m["path"] for m in mount_points.mounts() if m["path"] == "/run/netns"
                      or m["path"].startswith("/run/netns/")), reverse=True):
        detach(mp)

    # Sources are bound before anything could hide them: /run gets its tmpfs first, /root is
    # the last bind (a checkout under /root stays reachable until then), /tmp comes after it.
    # Its source names the node: every process of the node can be found by it (proc.by_mount_source).
    mount(env["RY_MOUNT_MARKER"], "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64m")
    for d in ("/run/lock", "/run/sshd", "/run/railyard/hw", "/run/railyard/bin", "/run/railyard/power"):
        os.makedirs(d, mode=0o755, exist_ok=True)
    if env.get("RY_BOOT"):
        boot(node_dir, hw)
    mount(hw, "/run/railyard/hw", flags=MS_BIND)
    mount(f"{node_dir}/bin", "/run/railyard/bin", flags=MS_BIND)
    # The node's power button (node/power.py): the shim's reboot and poweroff write to its fifo.
    # Only the fifo's directory: the supervisor's own files (its pid, the hardware tree it boots
    # the node with, its log) stay out of the node's reach.
    if os.path.isdir(f"{node_dir}/power/door"):
        mount(f"{node_dir}/power/door", "/run/railyard/power", flags=MS_BIND)
    with open("/run/railyard/boot_id", "w") as f:
        f.write(f"{uuid.uuid4()}\n")
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
    private_dev(env.get("RY_DRIVES", ""), TREE)

    # A sysfs mounted from inside the node's netns shows the node's own class/net; read-only, so
    # a tuning mistake (a write meant for a device) fails loudly instead of reaching the host.
    detach("/sys")
    mount("sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    own_irqs = show_hardware()
    for p in ("/proc/sys", "/proc/irq", "/proc/sysrq-trigger", "/proc/bus"):
        if os.path.exists(p) and not (p == "/proc/irq" and own_irqs):
            bind_ro(p)
    # After /proc/sys's own bind, which would hide it. This boot's identity, as the kernel's.
    if os.path.isfile("/proc/sys/kernel/random/boot_id"):
        _bind("/run/railyard/boot_id", "/proc/sys/kernel/random/boot_id", read_only=True)

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
    _, status = os.waitpid(pid, 0)
    if status != 0:
        fail(f"sshd did not start (wait status {status}): {sshd_log()}")
    # sshd's first process exits as it daemonizes, before the daemon listens; the daemon writes
    # its pid file once its sockets are bound (OpenSSH's sshd.c), so "ready" waits for that.
    deadline = time.monotonic() + SSHD_LISTEN_TIMEOUT
    while not sshd_listening():
        if time.monotonic() > deadline:
            fail(f"sshd did not listen within {SSHD_LISTEN_TIMEOUT} s: {sshd_log()}")
        time.sleep(0.01)
    if agent is not None:
        try:
            agent.daemonize()
        except OSError as exc:
            fail(f"the SR-IOV agent did not start: {exc}")

    sys.stdout.write(f"ready {os.getpid()}\n")
    sys.stdout.flush()
    null = os.open("/dev/null", os.O_RDWR)
    log_fd = os.open("/run/railyard/init.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(log_fd, 2)
    for key in [k for k in env if k.startswith("RY_")]:
        del env[key]
    os.execv("/bin/sleep", [marker, "infinity"])


if __name__ == "__main__":
    main()
