"""A lab node's stand-in for the kernel's SR-IOV (standard library and railyard.model.mac only;
runs inside the node, isolated from the virtualenv).

Lab nodes have no SR-IOV hardware: a PF is a veth named like the SKU's netdev, and the node's
hardware tree (``/run/railyard/hw``, see node/processes.py) presents its PCI device as sysfs would. This
agent watches that tree and does what the PF driver would:

- a write of N to ``<pf>/sriov_numvfs`` creates N VFs: each a macvlan (mode bridge, so VFs of one
  PF reach each other as through the NIC's embedded switch) on the PF netdev, named
  ``<pf netdev>v<i>`` as udev names VFs, with a stable MAC; in the tree, a VF device directory
  beside the PF's (vendor, device, class, numa_node, ... copied from the PF; ``physfn`` back to
  it; ``driver`` → mlx5_core; ``net/<vf netdev>/address``), ``virtfn<i>`` in the PF's directory,
  ``bus/pci/devices/<vf>`` and ``class/net/<vf netdev>`` links where the tree has those
  directories, and mlx5's per-VF directory ``<pf>/sriov/<i>/``. A write of 0 removes them all.
- per-VF settings live where mlx5 (MLNX_OFED's sriov_sysfs) puts them, since ``ip link set <pf>
  vf N ...`` is netlink to a PF driver a veth does not have: ``<pf>/sriov/<i>/mac`` (an address
  or ``Random``), ``trust`` and ``spoofcheck`` (``ON``/``OFF``), ``link_state``
  (``Up``/``Down``/``Follow``). As in mlx5, reading those files shows their usage line and
  ``sriov/<i>/config`` shows the settings. A MAC is applied to the VF's macvlan, a link state to
  its up/down flag; trust and spoof-check are recorded only (a macvlan sends from its own MAC
  anyway, so spoof-checking holds trivially).

A plain file cannot refuse a write the way the kernel does (``echo 8 > sriov_numvfs`` failing
with EBUSY while 4 VFs exist). The agent keeps the kernel's outcome instead: the refused value is
replaced by the count in force (so a read-back shows the write had no effect, as on real
hardware), and the refusal is logged with the kernel's errno and message to
``/run/railyard/agent/log.jsonl``. Refused, as by drivers/pci/iov.c: not a number (EINVAL), more
than ``sriov_totalvfs`` (ERANGE), a non-zero count over another non-zero count (EBUSY); and, to
keep a VM's VF from vanishing under it, 0 while a VF is given to a VM (EPERM; vm.py marks such a
VF bound to vfio-pci, as passthrough does). Settings files refuse bad values (EINVAL) the same
way.

Writes are applied asynchronously, a few tens of milliseconds later, so writes closer together
than that (``echo 0 >f; echo 4 >f`` in one shell) show only the last value. The agent counts them
(each write's IN_CLOSE_WRITE, kept apart by its IN_MODIFY, as inotify merges identical events
queued back to back, less the agent's own writes); when more than one landed since it last
looked, it cannot know whether a 0 came between them, assumes it did, and logs that it assumed so.
A write's value is in the file before its close is queued, so a count over a count read from one
write is refused only after REFUSE_WAIT_S more without another write's close (a loaded machine
queued the close of ``echo 3`` after ``echo 0 >f; echo 3 >f`` that late).
A reader that needs the VFs waits for ``virtfn<N-1>``, which the agent writes last.

The count in force is ``/run/railyard/agent/state.json`` (written before the VFs are changed, so
a restart finishes what a killed agent began), else the ``virtfn*`` links of the tree. The agent
is idempotent: at start and every FULL_RESCAN_S it converges every PF to its count, recreating
what is missing (never a VF given to a VM) and removing what is beyond. It blocks on inotify between
events, so an idle agent costs no CPU.

Started by node_init.py (its module loaded before the node's mounts: the interpreter may live
under a directory the node hides), or from the host by node.start_agent, which enters the node's
namespaces with setns(2) after loading everything (``python -I -S agent.py --enter PID``).
"""

import ctypes
import errno
import hashlib
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import time

try:
    from railyard.model.mac import hashed_mac, local_unicast
except ImportError:
    # Run by path with -I -S inside a node (no site-packages, no script directory on sys.path):
    # the checkout's root, three levels up, holds the one MAC helper (standard library only).
    # Only then: imported by the lab's own code, railyard is on the path already.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    from railyard.model.mac import hashed_mac, local_unicast

HW = "/run/railyard/hw"
DEVICES = "sys/bus/pci/devices"
CLASS_NET = "sys/class/net"
DRIVERS = "sys/bus/pci/drivers"
AGENT_DIR = "/run/railyard/agent"
PROC_NAME = b"railyard-agent"  # comm (15 bytes at most); sriov.py finds the agent by it and its pid file
RESCAN_S = 10.0  # a cheap look for new PFs and missed writes
FULL_RESCAN_S = 60.0  # a full convergence, netdevs included
WAIT_TREE_S = 1.0  # how often to look for a tree that does not exist yet
REFUSE_WAIT_S = 0.5  # how long a count over a count waits for a late write before it is refused
PF_DRIVER = "mlx5_core"
VFIO_DRIVER = "vfio-pci"

# The PCI attributes a VF shows like its PF (drivers/pci/iov.c gives a VF its PF's NUMA node
# and CPU affinity; vendor and class are the same device's).
COPIED = ("vendor", "class", "subsystem_vendor", "subsystem_device", "numa_node", "local_cpulist", "local_cpus")

USAGE = {
    "mac": "usage: write <LLADDR|Random> to set VF Mac Address\n",
    "trust": "usage: write <ON|OFF> to trust|untrust VF\n",
    "spoofcheck": "usage: write <ON|OFF> to enable|disable VF SpoofCheck\n",
    "link_state": "usage: write <Up|Down|Follow> to set VF State\n",
}
DEFAULT_VF = {"mac": "00:00:00:00:00:00", "trust": "OFF", "spoofcheck": "OFF", "link_state": "Follow"}

IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x2, 0x8, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_IGNORED, IN_Q_OVERFLOW = 0x400, 0x800, 0x8000, 0x4000
IN_CLOEXEC, IN_NONBLOCK = 0o2000000, 0o4000
PR_SET_NAME, PR_CAPBSET_DROP = 15, 24
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWNET = 0x20000, 0x4000000, 0x40000000
CAPS_TO_DROP = {"sys_boot": 22, "sys_module": 16, "sys_time": 25}  # as node.DROPPED_CAPS

_libc = ctypes.CDLL(None, use_errno=True)
_BDF = re.compile(r"([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")
_MAC = re.compile(r"[0-9a-f]{1,2}(:[0-9a-f]{1,2}){5}")


# --- small helpers ------------------------------------------------------------------------------

def read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return default


def write(path, text, mode=None):
    """Write in place, not by rename: the watched inode stays the same, as a sysfs file does.
    `mode` as sysfs shows it (0444 read-only, 0644 writable; root writes either)."""
    with open(path, "w") as f:
        f.write(text)
    if mode is not None:
        os.chmod(path, mode)


def symlink(target, path):
    if os.path.islink(path):
        if os.readlink(path) == target:
            return
        os.unlink(path)
    elif os.path.exists(path):
        return  # a real file or directory of the tree: not ours to replace
    os.symlink(target, path)


def remove(path):
    """rm -rf for the agent's own entries (never follows a link)."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        for name in os.listdir(path):
            remove(os.path.join(path, name))
        os.rmdir(path)


def vf_netdev(pf_netdev, index):
    """The VF's netdev name as udev names VFs (<pf>v<i>), or a hashed one when that is too long."""
    name = f"{pf_netdev}v{index}"
    if len(name) <= 15:
        return name
    return f"vf{hashlib.sha256(pf_netdev.encode()).hexdigest()[:6]}v{index}"


def vf_bdf(pf_bdf, offset, stride, index):
    """The VF's address: routing ID of the PF + First VF Offset + index x VF Stride (PCIe SR-IOV)."""
    m = _BDF.fullmatch(pf_bdf)
    if not m:
        raise ValueError(f"not a PCI address: {pf_bdf}")
    dom, bus, dev, fn = (int(x, 16) for x in m.groups())
    rid = (bus << 8 | dev << 3 | fn) + offset + stride * index
    if rid > 0xFFFF:
        raise ValueError(f"VF {index} of {pf_bdf} lies beyond bus ff")
    return f"{dom:04x}:{rid >> 8:02x}:{(rid >> 3) & 0x1F:02x}.{rid & 7}"


def _int(text):
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def log(event):
    event = {"time": round(time.time(), 3), **event}
    os.makedirs(AGENT_DIR, exist_ok=True)
    with open(os.path.join(AGENT_DIR, "log.jsonl"), "a") as f:
        f.write(json.dumps(event, sort_keys=True) + "\n")


def ip(*args, input=None, check=True):
    p = subprocess.run(["ip", *args], input=input.encode() if input is not None else None,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if check and p.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {p.stderr.decode(errors='replace').strip()}")
    return p


def links():
    out = ip("-json", "-d", "link", "show").stdout.decode()
    return {d["ifname"]: d for d in json.loads(out or "[]")}


# --- the tree -----------------------------------------------------------------------------------

def resolve(root, rel):
    """`root`/`rel` with the tree's links followed inside the tree (an absolute target counts from
    `root`). Not os.path.realpath: seen from the host, `root` lies below /proc/PID/root, a link
    realpath would resolve to the host's own /."""
    parts = [p for p in rel.split("/") if p]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        path = os.path.join(root, *done, part)
        if os.path.islink(path):
            hops += 1
            if hops > 40:
                raise OSError(errno.ELOOP, "too many links", path)
            target = os.readlink(path)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p] + parts
        else:
            done.append(part)
    return os.path.join(root, *done)


class Pf:
    """One SR-IOV capable PCI device of the tree: its bus entry, real directory and netdev."""

    def __init__(self, root, bdf):
        self.root = root
        self.bdf = bdf
        self.entry = os.path.join(root, DEVICES, bdf)
        self.dir = resolve(root, os.path.join(DEVICES, bdf))
        nets = sorted(os.listdir(os.path.join(self.dir, "net"))) if os.path.isdir(os.path.join(self.dir, "net")) else []
        self.netdev = nets[0] if nets else None

    def attr(self, name, default=None):
        text = read(os.path.join(self.dir, name))
        return text.strip() if text is not None else default

    def int_attr(self, name, default):
        try:
            return int(self.attr(name, ""), 0)
        except ValueError:
            return default

    @property
    def group(self):
        """The link group of this PF's VFs in the node (stable, from its address)."""
        return 1 + int(hashlib.sha256(self.bdf.encode()).hexdigest()[:6], 16)

    @property
    def total(self):
        return self.int_attr("sriov_totalvfs", 0)

    def offset(self):
        """First VF Offset: the tree's sriov_offset, else what ConnectX-class devices use: the VFs
        of function 0 right after the device's last PF function, each later PF's after those of
        the PFs before it (a dual-port card with 8 VFs each: 00.2-01.1, then 01.2-...)."""
        given = self.int_attr("sriov_offset", None)
        if given is not None:
            return given
        m = _BDF.fullmatch(self.bdf)
        if not m:
            return 1
        parent = os.path.dirname(self.dir)
        prefix = self.bdf[:-1]
        pfs = []
        for fn in range(8):
            sib = os.path.join(parent, f"{prefix}{fn}")
            if os.path.isdir(sib) and not os.path.islink(os.path.join(sib, "physfn")):
                pfs.append((fn, sib))
        mine = int(m.group(4))
        before = sum(_int(read(os.path.join(sib, "sriov_totalvfs"), "0")) or 0 for fn, sib in pfs if fn < mine)
        last = max((fn for fn, _ in pfs), default=mine)
        return last - mine + 1 + before

    def vf_bdf(self, index):
        return vf_bdf(self.bdf, self.offset(), self.int_attr("sriov_stride", 1), index)

    def vf_dir(self, index):
        return os.path.join(os.path.dirname(self.dir), self.vf_bdf(index))

    def virtfns(self):
        """Indices of the virtfn links present, contiguous from 0 (what the tree says is in force)."""
        n = 0
        while os.path.islink(os.path.join(self.dir, f"virtfn{n}")):
            n += 1
        return n

    def assigned(self, index):
        """True when VF `index` is bound to vfio-pci: given to a VM (vm.py), its netdev gone from here."""
        link = os.path.join(self.vf_dir(index), "driver")
        return os.path.islink(link) and os.path.basename(os.readlink(link)) == VFIO_DRIVER


def find_pfs(root):
    devices = os.path.join(root, DEVICES)
    try:
        names = sorted(os.listdir(devices))
    except OSError:
        return []
    out = []
    for bdf in names:
        d = os.path.join(devices, bdf)
        if os.path.exists(os.path.join(d, "sriov_totalvfs")) and not os.path.islink(os.path.join(d, "physfn")):
            out.append(Pf(root, bdf))
    return out


# --- the agent ------------------------------------------------------------------------------------

class Agent:
    def __init__(self, root=HW, hostname=None):
        self.root = root
        self.hostname = hostname or os.uname().nodename
        self.state_path = os.path.join(AGENT_DIR, "state.json")
        self.own_writes = {}
        self.state = self._load_state()

    # state: {"pfs": {bdf: {"num_vfs": n, "vfs": {"0": {"mac": ..., ...}}}}}
    def _load_state(self):
        try:
            with open(self.state_path) as f:
                data = json.load(f)
            if isinstance(data, dict) and isinstance(data.get("pfs"), dict):
                return data
        except (OSError, ValueError):
            pass
        return {"pfs": {}}

    def _save_state(self):
        os.makedirs(AGENT_DIR, exist_ok=True)
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.state, f, sort_keys=True)
        os.replace(tmp, self.state_path)

    def pf_state(self, pf):
        st = self.state["pfs"].get(pf.bdf)
        if st is None:
            # No record (first start, or the node's /run was cleared by a restart): the tree says
            # what is in force, and its config files what each VF was set to.
            st = {"num_vfs": pf.virtfns(), "vfs": {}}
            for i in range(st["num_vfs"]):
                st["vfs"][str(i)] = parse_config(read(os.path.join(pf.dir, "sriov", str(i), "config"), ""))
            self.state["pfs"][pf.bdf] = st
        return st

    # --- sriov_numvfs ---

    def on_numvfs(self, pf, writes=1, later_writes=None, scan=False):
        """Apply what sriov_numvfs says now, as the kernel would apply one write.

        later_writes(wait) counts writes to this file that completed after the agent last looked
        (their events are queued, or come within `wait` seconds): the content read may be theirs,
        so they count as part of this burst, and the file is read again until no further write
        landed."""
        st = self.pf_state(pf)
        current = st["num_vfs"]
        raw = pf.attr("sriov_numvfs", "")
        while later_writes is not None:
            more = later_writes()
            if not more:
                break
            writes += more
            raw = pf.attr("sriov_numvfs", "")
        if raw == "":
            return  # a write under way (opened and truncated, not written): its close comes next
        if raw == str(current):
            if writes or scan:
                self.converge(pf)
            return  # else only the agent's own write, or one already taken with an earlier burst
        writes = max(writes, 1)  # a scan that finds a changed count saw a write whose event it missed
        refuse = None
        try:
            want = int(raw, 0)
            if want < 0:
                raise ValueError(raw)
        except ValueError:
            want, refuse = None, ("EINVAL", f"{raw!r} is not a VF count")
        if refuse is None and want > pf.total:
            refuse = ("ERANGE", f"{want} VFs requested, sriov_totalvfs is {pf.total}")
        if refuse is None and want == 0 and any(pf.assigned(i) for i in range(current)):
            refuse = ("EPERM", f"VFs {[i for i in range(current) if pf.assigned(i)]} are assigned to VMs; "
                               "remove the VMs before disabling SR-IOV")
        if refuse is None and want and current and want != current and writes == 1 and later_writes is not None:
            # The one outcome a write read before its close can change: `echo 0 >f; echo 3 >f`'s
            # 3 is in the file before its close is queued, and on a loaded machine that close came
            # more than the usual wait later (a fresh-root `make test`). Before refusing, wait
            # longer for it; a real refusal is only that much later.
            more = later_writes(REFUSE_WAIT_S)
            if more:
                return self.on_numvfs(pf, writes + more, later_writes, scan)
        if refuse is None and want and current and want != current:
            if writes > 1 and not any(pf.assigned(i) for i in range(current)):
                log({"pf": pf.bdf, "file": "sriov_numvfs", "wrote": raw, "note":
                     f"{writes} writes landed together; assumed a 0 among them ({current} -> 0 -> {want})"})
                self.set_count(pf, 0)
            else:
                refuse = ("EBUSY", f"{current} VFs already enabled. Disable before enabling {want} VFs")
        if refuse is None and want and pf.netdev is None:
            refuse = ("ENODEV", f"{pf.bdf} has no net/<netdev> in the tree, so there is no PF to put VFs on")
        if refuse is None and want and pf.netdev not in links():
            refuse = ("ENODEV", f"the PF netdev {pf.netdev} does not exist in this node")
        if refuse is not None:
            # The kernel's value stays: put it back before the refusal is logged, so whoever sees
            # the refusal reads the count in force, not the write the node's shell just made.
            self.write_numvfs(pf, current)
            log({"pf": pf.bdf, "file": "sriov_numvfs", "wrote": raw, "error": refuse[0],
                 "errno": getattr(errno, refuse[0]), "message": refuse[1]})
            return
        self.set_count(pf, want)
        log({"pf": pf.bdf, "file": "sriov_numvfs", "wrote": raw, "num_vfs": want})

    def write_numvfs(self, pf, n):
        """The agent's own write of sriov_numvfs: counted, so its event is not taken for a write
        of tuning's."""
        self.own_writes[pf.dir] = self.own_writes.get(pf.dir, 0) + 1
        write(os.path.join(pf.dir, "sriov_numvfs"), f"{n}\n")

    def writes_in(self, pf_dir, events, paths):
        """How many writes of others to the PF's sriov_numvfs `events` hold.

        inotify merges an event with the one queued just before it when they are the same, so two
        writes' IN_CLOSE_WRITE would be one; the IN_MODIFY each write makes keeps them apart
        (the watch asks for both and counts closes only)."""
        n = 0
        for wd, mask, name in events:
            if name == "sriov_numvfs" and paths.get(wd) == pf_dir and mask & (IN_CLOSE_WRITE | IN_MOVED_TO):
                if self.own_writes.get(pf_dir):
                    self.own_writes[pf_dir] -= 1
                else:
                    n += 1
        return n

    def set_count(self, pf, n):
        st = self.pf_state(pf)
        st["num_vfs"] = n
        st["vfs"] = {k: v for k, v in st["vfs"].items() if int(k) < n}
        self._save_state()  # before acting: a restart finishes what a killed agent began
        self.converge(pf)

    def converge(self, pf):
        """Make the node's netdevs and the tree match the count in force."""
        st = self.pf_state(pf)
        n = st["num_vfs"]
        have = links()
        batch = []
        # VFs beyond the count: netdev, then tree entries (virtfn first, highest first, so the
        # tree never shows a gap).
        stray = []
        for name, info in have.items():
            m = re.fullmatch(r"(.+)v(\d+)", name)
            if m and info.get("link") == pf.netdev and (info.get("linkinfo") or {}).get("info_kind") == "macvlan":
                if int(m.group(2)) >= n:
                    stray.append(name)
        if n == 0 and stray:
            # One deletion for all: the kernel then waits for one RCU grace period, not one per VF
            # (127 VFs: a tenth of a second instead of seconds).
            batch.append(f"link del group {pf.group}")
            stray = [name for name in stray if have[name].get("group") != str(pf.group)]
        for name in sorted(stray):
            batch.append(f"link del dev {name}")
        k = n
        while os.path.islink(os.path.join(pf.dir, f"virtfn{k}")) or os.path.isdir(os.path.join(pf.dir, "sriov", str(k))):
            k += 1
        for i in range(k - 1, n - 1, -1):
            self._remove_vf_tree(pf, i)
        if batch:
            ip("-batch", "-", input="\n".join(batch) + "\n", check=False)
            batch = []
        if n == 0:
            self._rmdir_if_empty(os.path.join(pf.dir, "sriov"))
        if n and pf.netdev not in have:
            log({"pf": pf.bdf, "error": "ENODEV", "message": f"the PF netdev {pf.netdev} is missing; VFs wait for it"})
            return
        # Settings first, virtfn links last: a reader that waits for virtfn<n-1> (as udev settles
        # on a real host) finds every part of every VF.
        for i in range(n):
            self._ensure_settings(pf, i, st["vfs"].setdefault(str(i), dict(DEFAULT_VF)), update=False)
        for i in range(n):
            cfg = st["vfs"][str(i)]
            name = vf_netdev(pf.netdev, i)
            mac = self._vf_mac(pf, i, cfg)
            if pf.assigned(i):
                continue  # given to a VM: its netdev lives there
            info = have.get(name)
            if info is None:
                batch.append(f"link add link {pf.netdev} name {name} address {mac} group {pf.group} "
                             "type macvlan mode bridge")
            elif info.get("address") != mac:
                batch.append(f"link set dev {name} address {mac}")
            up = cfg.get("link_state") != "Down"
            if info is None or ("UP" in info.get("flags", [])) != up:
                batch.append(f"link set dev {name} {'up' if up else 'down'}")
        if batch:
            p = ip("-batch", "-", input="\n".join(batch) + "\n", check=False)
            if p.returncode != 0:
                log({"pf": pf.bdf, "error": "EIO", "message": p.stderr.decode(errors="replace").strip()})
        for i in range(n):
            self._ensure_vf_tree(pf, i, st["vfs"][str(i)])
        self._save_state()
        # Shown as the kernel shows it ("4\n" for "0x4"), but never over another value: that is a
        # newer write, whose event is on its way.
        raw = read(os.path.join(pf.dir, "sriov_numvfs"))
        if raw is not None and raw != f"{n}\n" and _int(raw) == n:
            self.write_numvfs(pf, n)

    def _vf_mac(self, pf, i, cfg):
        admin = cfg.get("mac", DEFAULT_VF["mac"])
        if admin != DEFAULT_VF["mac"]:
            return admin
        return hashed_mac(self.hostname, pf.netdev or pf.bdf, str(i))

    def _ensure_vf_tree(self, pf, i, cfg):
        vbdf = pf.vf_bdf(i)
        vdir = pf.vf_dir(i)
        name = vf_netdev(pf.netdev, i)
        os.makedirs(vdir, exist_ok=True)
        for attr in COPIED:
            value = pf.attr(attr)
            if value is not None and read(os.path.join(vdir, attr)) != value + "\n":
                write(os.path.join(vdir, attr), value + "\n", 0o444)
        device = pf.attr("sriov_vf_device") or pf.attr("device")
        if device is not None:
            if not device.startswith("0x"):
                device = "0x" + device
            if read(os.path.join(vdir, "device")) != device + "\n":
                write(os.path.join(vdir, "device"), device + "\n", 0o444)
        symlink(os.path.relpath(pf.dir, vdir), os.path.join(vdir, "physfn"))
        drivers = os.path.join(self.root, DRIVERS)
        assigned = pf.assigned(i)
        if not assigned:
            os.makedirs(os.path.join(drivers, PF_DRIVER), exist_ok=True)
            symlink(os.path.relpath(os.path.join(drivers, PF_DRIVER), vdir), os.path.join(vdir, "driver"))
            netdir = os.path.join(vdir, "net", name)
            os.makedirs(netdir, exist_ok=True)
            symlink(os.path.relpath(vdir, netdir), os.path.join(netdir, "device"))
            mac = self._vf_mac(pf, i, cfg)
            if read(os.path.join(netdir, "address")) != mac + "\n":
                write(os.path.join(netdir, "address"), mac + "\n", 0o444)
            class_net = os.path.join(self.root, CLASS_NET)
            if os.path.isdir(class_net):
                symlink(os.path.relpath(netdir, class_net), os.path.join(class_net, name))
        # The bus's device list: a link where the tree links its devices, else the directory
        # itself already lies there (a flat tree).
        entry = os.path.join(self.root, DEVICES, vbdf)
        if os.path.islink(pf.entry):
            symlink(os.path.relpath(vdir, os.path.dirname(entry)), entry)
        self._ensure_settings(pf, i, cfg)
        symlink(os.path.relpath(vdir, pf.dir), os.path.join(pf.dir, f"virtfn{i}"))

    @staticmethod
    def _ensure_settings(pf, i, cfg, update=True):
        """mlx5's sriov/<i>: its files, and config showing `cfg`; with update=False an existing
        config stays as it is (a change shows once the netdev has it)."""
        sdir = os.path.join(pf.dir, "sriov", str(i))
        os.makedirs(sdir, exist_ok=True)
        for attr, usage in USAGE.items():
            path = os.path.join(sdir, attr)
            if read(path) is None:
                write(path, usage, 0o644)
        text = render_config(i, cfg)
        current = read(os.path.join(sdir, "config"))
        if current != text and (update or current is None):
            write(os.path.join(sdir, "config"), text, 0o644)

    def _remove_vf_tree(self, pf, i):
        name = vf_netdev(pf.netdev, i) if pf.netdev else None
        vdir = pf.vf_dir(i)
        for path in (os.path.join(pf.dir, f"virtfn{i}"),
                     os.path.join(self.root, CLASS_NET, name) if name else None,
                     os.path.join(self.root, DEVICES, pf.vf_bdf(i)) if os.path.islink(
                         os.path.join(self.root, DEVICES, pf.vf_bdf(i))) else None,
                     os.path.join(pf.dir, "sriov", str(i))):
            if path and (os.path.lexists(path)):
                remove(path)
        if os.path.isdir(vdir) and os.path.islink(os.path.join(vdir, "physfn")):
            remove(vdir)  # only a VF's directory (it has physfn), never another device's

    @staticmethod
    def _rmdir_if_empty(path):
        try:
            os.rmdir(path)
        except OSError:
            pass

    # --- per-VF settings ---

    def on_setting(self, pf, index, attr):
        """Take a write to sriov/<index>/<attr>; True when a setting changed (the caller then
        converges the PF once for all the settings written together)."""
        path = os.path.join(pf.dir, "sriov", str(index), attr)
        raw = read(path, "")
        if raw == USAGE[attr]:
            return False  # our own reset
        st = self.pf_state(pf)
        if index >= st["num_vfs"]:
            return False
        cfg = st["vfs"].setdefault(str(index), dict(DEFAULT_VF))
        value = raw.strip()
        new = None
        if attr == "mac":
            if value == "Random":
                new = local_unicast(os.urandom(6))
            elif _MAC.fullmatch(value.lower()):
                new = ":".join(f"{int(x, 16):02x}" for x in value.split(":"))
                if int(new.split(":")[0], 16) & 1:
                    new = None  # a multicast address is no VF's
        elif attr in ("trust", "spoofcheck"):
            new = value if value in ("ON", "OFF") else None
        elif attr == "link_state":
            new = value if value in ("Up", "Down", "Follow") else None
        changed = False
        write(path, USAGE[attr])  # as the kernel's file reads, before the write is logged (on_numvfs)
        if new is None:
            log({"pf": pf.bdf, "vf": index, "file": f"sriov/{index}/{attr}", "wrote": raw, "error": "EINVAL",
                 "errno": errno.EINVAL, "message": f"{value!r} is not a valid {attr}"})
        else:
            changed = cfg.get(attr) != new
            cfg[attr] = new
            self._save_state()
            log({"pf": pf.bdf, "vf": index, "file": f"sriov/{index}/{attr}", "wrote": raw, attr: new})
        return changed


def render_config(index, cfg):
    """mlx5's sriov/<i>/config (sriov_sysfs.c config_show), with the settings the lab keeps."""
    return (f"VF         : {index}\n"
            f"MAC        : {cfg.get('mac', DEFAULT_VF['mac'])}\n"
            "VLAN       : 0\n"
            "QoS        : 0\n"
            "VLAN Proto : N/A\n"
            f"SpoofCheck : {cfg.get('spoofcheck', 'OFF')}\n"
            f"Trust      : {cfg.get('trust', 'OFF')}\n"
            f"LinkState  : {cfg.get('link_state', 'Follow')}\n"
            "MinTxRate  : 0\n"
            "MaxTxRate  : 0\n"
            "VGT+       : OFF\n")


def parse_config(text):
    cfg = dict(DEFAULT_VF)
    keys = {"MAC": "mac", "SpoofCheck": "spoofcheck", "Trust": "trust", "LinkState": "link_state"}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k.strip() in keys:
            cfg[keys[k.strip()]] = v.strip()
    return cfg


# --- inotify ------------------------------------------------------------------------------------

class Inotify:
    def __init__(self):
        self.fd = _libc.inotify_init1(IN_CLOEXEC | IN_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.paths = {}  # wd -> path
        self.wds = {}  # path -> wd

    def watch(self, path, mask):
        """Watch path; True when the watch is new (what was written there before it raised no event)."""
        if path in self.wds:
            return False
        wd = _libc.inotify_add_watch(self.fd, path.encode(), mask)
        if wd >= 0:
            self.paths[wd] = path
            self.wds[path] = wd
        return wd >= 0

    def forget(self, wd):
        path = self.paths.pop(wd, None)
        if path is not None:
            self.wds.pop(path, None)

    def read(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        out = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            pos = 0
            while pos + 16 <= len(data):
                wd, mask, _cookie, length = struct.unpack_from("iIII", data, pos)
                name = data[pos + 16:pos + 16 + length].split(b"\0", 1)[0].decode(errors="replace")
                pos += 16 + length
                out.append((wd, mask, name))
            # Let a burst of writes (a role's `echo 0; echo 4`) land before acting on it.
            time.sleep(0.005)
            if not select.select([self.fd], [], [], 0)[0]:
                break
        return out


def run(root=HW):
    agent = Agent(root)
    ino = Inotify()
    file_mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MODIFY
    dir_mask = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF
    pfs: dict[str, Pf] = {}
    devices = os.path.join(root, DEVICES)

    def watch_settings(pf):
        sriov = os.path.join(pf.dir, "sriov")
        if os.path.isdir(sriov):
            ino.watch(sriov, dir_mask)
            for name in os.listdir(sriov):
                if name.isdigit():
                    watch_vf_settings(pf, int(name))

    def watch_vf_settings(pf, index):
        """Watch a VF's settings, and take those written before the watch began: a reader sees the
        VF (virtfn<N-1>) before the agent has watched its sriov/<i>/, and such a write raises no
        event (a loaded `make test` lost a MAC, trust and link state that way)."""
        if not ino.watch(os.path.join(pf.dir, "sriov", str(index)), file_mask):
            return
        try:
            changed = [agent.on_setting(pf, index, attr) for attr in USAGE
                       if read(os.path.join(pf.dir, "sriov", str(index), attr), "") not in ("", USAGE[attr])]
            if any(changed):
                agent.converge(pf)
        except Exception as exc:
            log({"pf": pf.bdf, "vf": index, "error": "EIO", "message": f"{type(exc).__name__}: {exc}"})

    backlog: list = []  # events read while acting on earlier ones: handled in the next round
    precounted: dict[str, int] = {}  # writes among them, per PF, counted when they were read

    def later_writes(pf):
        def count(wait=0.03):
            # A little wait: the content read may be a write whose close (its event) is
            # microseconds away on an idle machine, and more than 3 ms on a loaded one (a full
            # `make test` once lost `echo 0 >f; echo 3 >f`'s second write that way).
            deadline = time.monotonic() + wait
            while True:
                new = ino.read(max(0.0, deadline - time.monotonic())) or []
                backlog.extend(new)
                for d in set(pfs) & {ino.paths.get(wd) for wd, _, name in new if name == "sriov_numvfs"}:
                    precounted[d] = precounted.get(d, 0) + agent.writes_in(d, new, ino.paths)
                # This PF's are part of the write being applied; the others' wait for their round
                # (and another file's event, or this one's before its close, does not end the wait).
                if precounted.get(pf.dir) or not new or time.monotonic() >= deadline:
                    return precounted.pop(pf.dir, 0)
        return count

    def apply(pf, writes=0, scan=False):
        try:
            agent.on_numvfs(pf, writes, later_writes(pf), scan)
        except Exception as exc:  # one bad PF must not stop the others
            log({"pf": pf.bdf, "error": "EIO", "message": f"{type(exc).__name__}: {exc}"})
        watch_settings(pf)

    def own_vfs():
        """Bus addresses the agent's VFs may take (their bus/pci/devices entries are its own)."""
        out: set[str] = set()
        for pf in pfs.values():
            try:
                out.update(pf.vf_bdf(i) for i in range(pf.total))
            except ValueError:
                pass
        return out

    def rescan(full):
        """Find PFs and watch them. A full pass converges every PF (netdevs removed behind the
        agent's back come back); the cheap one acts only on PFs it did not know. Writes to known
        PFs arrive as events, and only as events: a scan acting on one would race the write's
        own event and count it twice."""
        known = set(pfs)
        pfs.clear()
        for pf in find_pfs(root):
            pfs[pf.dir] = pf
            ino.watch(pf.dir, file_mask)
            if full or pf.dir not in known:
                apply(pf, scan=True)
            else:
                watch_settings(pf)
        if os.path.isdir(devices):
            ino.watch(devices, dir_mask)

    rescan(True)
    last = last_full = time.monotonic()
    while True:
        timeout = RESCAN_S if os.path.isdir(devices) else WAIT_TREE_S
        from_backlog = bool(backlog)
        if backlog:  # their writes were counted when they were read
            events = backlog[:]
            backlog.clear()
        else:
            events = ino.read(max(0.0, timeout - (time.monotonic() - last)))
        if events is None:
            now = time.monotonic()
            full = now - last_full >= FULL_RESCAN_S
            rescan(full)
            last = now
            last_full = now if full else last_full
            continue
        numvfs_writes: dict[str, int] = {}
        settings: set[tuple[str, int, str]] = set()
        again, full = False, False
        own: set[str] | None = None
        for wd, mask, name in events:
            if mask & IN_Q_OVERFLOW:
                again = full = True  # events were lost: converge everything
                continue
            path = ino.paths.get(wd)
            if mask & IN_IGNORED:
                ino.forget(wd)
                continue
            if path is None:
                continue
            if path == devices and name in (own if own is not None else (own := own_vfs())):
                pass  # the agent's own VF entries
            elif path == devices or (mask & (IN_DELETE_SELF | IN_MOVE_SELF) and path in pfs):
                again = True
            elif mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                pass  # a settings directory the agent removed
            elif path in pfs and name == "sriov_numvfs" and mask & (IN_CLOSE_WRITE | IN_MOVED_TO):
                numvfs_writes.setdefault(path, 0)
            elif os.path.basename(os.path.dirname(path)) == "sriov" and name in USAGE and mask & (IN_CLOSE_WRITE | IN_MOVED_TO):
                pf = pfs.get(os.path.dirname(os.path.dirname(path)))
                if pf is not None and os.path.basename(path).isdigit():
                    settings.add((pf.dir, int(os.path.basename(path)), name))
            elif os.path.basename(path) == "sriov" and name.isdigit() and mask & (IN_CREATE | IN_MOVED_TO):
                pf = pfs.get(os.path.dirname(path))
                if pf is not None:
                    watch_vf_settings(pf, int(name))
                else:
                    ino.watch(os.path.join(path, name), file_mask)
        if again:
            rescan(full)
            last = time.monotonic()
        for d in numvfs_writes:
            if d in pfs:
                writes = precounted.pop(d, 0) if from_backlog else agent.writes_in(d, events, ino.paths)
                apply(pfs[d], writes)
        touched = set()
        for d, index, attr in sorted(settings):
            if d not in pfs:
                continue
            try:
                if agent.on_setting(pfs[d], index, attr):
                    touched.add(d)
            except Exception as exc:
                log({"pf": pfs[d].bdf, "vf": index, "error": "EIO", "message": f"{type(exc).__name__}: {exc}"})
        for d in sorted(touched):
            try:
                agent.converge(pfs[d])
            except Exception as exc:
                log({"pf": pfs[d].bdf, "error": "EIO", "message": f"{type(exc).__name__}: {exc}"})


# --- starting -------------------------------------------------------------------------------------

def _drop_caps():
    for bit in CAPS_TO_DROP.values():
        _libc.prctl(PR_CAPBSET_DROP, bit, 0, 0, 0)  # already gone is fine


def _setns(pid):
    """Enter the node of init `pid`: its network, mount and UTS namespaces (mount last but one:
    the paths of the other handles are the host's)."""
    fds = {kind: os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC) for kind in ("net", "uts", "mnt")}
    for kind, flag in (("net", CLONE_NEWNET), ("uts", CLONE_NEWUTS), ("mnt", CLONE_NEWNS)):
        if _libc.setns(fds[kind], flag) != 0:
            raise OSError(ctypes.get_errno(), f"setns {kind} of {pid}")
        os.close(fds[kind])
    os.chdir("/")


def daemonize(root=HW):
    """Fork the agent off as a daemon of the node (not a child of its init, which never reaps)
    and return its pid once it runs; the agent writes its pid file before that."""
    r, w = os.pipe()
    first = os.fork()
    if first == 0:
        try:
            os.close(r)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            _libc.prctl(PR_SET_NAME, ctypes.c_char_p(PROC_NAME), 0, 0, 0)
            null = os.open("/dev/null", os.O_RDWR)
            os.makedirs(AGENT_DIR, exist_ok=True)
            err = os.open(os.path.join(AGENT_DIR, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(err, 2)
            os.close(null)
            os.close(err)
            for key in [k for k in os.environ if k.startswith("RY_")]:
                del os.environ[key]
            signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
            with open(os.path.join(AGENT_DIR, "pid.tmp"), "w") as f:
                f.write(f"{os.getpid()}\n")
            os.replace(os.path.join(AGENT_DIR, "pid.tmp"), os.path.join(AGENT_DIR, "pid"))
            os.write(w, f"{os.getpid()}\n".encode())
            os.close(w)
            run(root)
        except BaseException as exc:  # noqa: BLE001 - a daemon reports and dies
            try:
                sys.stderr.write(f"railyard agent: {type(exc).__name__}: {exc}\n")
                sys.stderr.flush()
            finally:
                os._exit(1)
        os._exit(0)
    os.close(w)
    os.waitpid(first, 0)
    with os.fdopen(r) as f:
        text = f.read().strip()
    if not text.isdigit():
        raise OSError("the agent did not start")
    return int(text)


def main(argv):
    """``agent.py --enter PID``: start the agent in the node whose init is PID (from the host)."""
    if len(argv) != 2 or argv[0] != "--enter" or not argv[1].isdigit():
        sys.stderr.write("usage: agent.py --enter INIT_PID\n")
        return 2
    _setns(int(argv[1]))
    _drop_caps()
    pid = daemonize()
    sys.stdout.write(f"ready {pid}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
