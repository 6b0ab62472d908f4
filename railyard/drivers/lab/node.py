"""A lab node: a network, mount and UTS namespace held by one init process, with sshd inside.

What a node is made of (stack tag T, node N, runtime dir D = lab_dir(stack)/nodes/N):

- netns ``ry-T-n-N`` holding the node's NICs. Each NIC is a veth whose node end carries the name
  the caller gives (the SKU's real netdev name, e.g. ``ibp24s0``) and whose other end is a port
  of the fabric namespace on the NIC's bridge (names.node_port). Rail NICs route per NIC, as on a
  rail-optimized cluster: ``ip rule from <nic address> lookup 100+rail`` (pref 1000+rail), and
  that table holds the rail's subnet on the NIC and, when a spine exists, the compute network via
  the rail's gateway. Same-rail traffic is one hop, other rails cross the spine; there is no
  default route.
- an init process (``node_init.py``) started in that netns with new mount and UTS namespaces. It
  overlays the host's /etc and /var with the node's own layers (D/etc, D/var: what the node
  writes stays there, with ssh host keys of its own), binds D/boot, D/mnt, D/root on /boot,
  /mnt, /root, mounts tmpfs on /run, /tmp and /dev/shm, a read-only sysfs of the node's netns on
  /sys, makes /proc/sys, /proc/irq, /proc/sysrq-trigger, /proc/bus and the rest of the host's root
  filesystem read-only, sets the hostname to N and starts sshd on the management address only
  (root, by key only). The hardware tree directory (D/hw unless `hw_tree_source` names another)
  is bound at /run/railyard/hw. Every node process lacks CAP_SYS_BOOT, CAP_SYS_MODULE and
  CAP_SYS_TIME, so a tuning mistake fails instead of reaching the host's kernel.
- "reboot pending": reboots and bootloader updates inside a node are recorded by a shim (see
  lab-shim.sh and `reboot_pending`), never done.
- an SR-IOV agent (agent.py), started by the init once sshd runs and again by create when it died:
  it makes VFs when tuning writes sriov_numvfs in the node's hardware tree.

VMs (vm.py) are built by the same `converge`, with their VFs moved in instead of veths made.

Every function is idempotent: `create_node` adopts whatever of the node exists (a crash halfway
leaves nothing it cannot finish) and converges it to the request; `delete_node` of a missing node
succeeds; `read_node` reports what is there now in the shape `create_node` returns, or None.
Results are plain JSON data.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from railyard import paths
from railyard.drivers.lab import names, net, proc
from railyard.drivers.lab.errors import LabError, require_root
from railyard.drivers.lab.fabric import LAB_NETNS_SYSCTLS

HERE = Path(__file__).resolve().parent
INIT_SCRIPT = HERE / "node_init.py"
SHIM_SCRIPT = HERE / "lab-shim.sh"
AGENT_SCRIPT = HERE / "agent.py"
AGENT_DIR = "run/railyard/agent"  # relative to the node's root, see agent.py

# What node processes may never do: reboot or kexec the host, load kernel modules, set its clock.
DROPPED_CAPS = ("sys_boot", "sys_module", "sys_time")
NODE_PATH = "/run/railyard/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHIMMED = (
    "reboot", "shutdown", "halt", "poweroff", "telinit", "systemctl", "kexec",
    "grub-mkconfig", "grub2-mkconfig", "update-grub", "update-grub2", "grub-install", "grub2-install",
    "grubby", "update-initramfs", "dracut", "kernel-install",
)
REBOOT_PENDING = "run/railyard/reboot-pending"  # relative to the node's root, see lab-shim.sh
HW_TREE = "/run/railyard/hw"

RULE_PREF_BASE = 1000
TABLE_BASE = 100

# The node's private mounts would hide a runtime dir below them (see node_init.py for the order).
_FORBIDDEN_DIRS = ("/run", "/etc", "/var", "/boot", "/mnt", "/proc", "/sys", "/dev")


@dataclass(frozen=True)
class Nic:
    """One NIC of a node: `name` is the node-side netdev name, `role` a rail number, "mgmt" or
    "storage"; `address` an address with prefix; `gateway` (rails only) the rail's gateway.

    `table` (rail NICs) numbers the NIC's routing rule and table (RULE_PREF_BASE+table,
    TABLE_BASE+table): the rail for a node's NICs, the VF's position for a VM, which may hold
    several VFs of one rail. `veth` NICs are made here with a fabric port; the others (a VM's VFs)
    are moved into the namespace by the caller and only addressed here."""

    name: str
    role: int | str
    address: str
    gateway: str | None = None
    table: int | None = None
    veth: bool = True

    @property
    def bridge(self) -> str:
        if isinstance(self.role, int):
            return names.rail_bridge(self.role)
        return names.MGMT_BRIDGE if self.role == "mgmt" else names.STORAGE_BRIDGE


def node_dir(stack: str, node: str, root: Path | None = None) -> Path:
    return paths.lab_dir(stack, root) / "nodes" / names.check_node(node)


# --- create -----------------------------------------------------------------------------------

def create_node(
    stack: str,
    node: str,
    *,
    mgmt: dict,
    authorized_keys: str | Sequence[str],
    rails: Iterable[dict] = (),
    storage: dict | None = None,
    compute_cidr: str | None = None,
    hw_tree_source: str | None = None,
    root: Path | None = None,
) -> dict:
    """Ensure node `node` of `stack` exists, is running and matches the request.

    mgmt:            {"name": "eno3", "address": "198.18.0.11/24"}, on the mgmt bridge; sshd
                     listens on this address only
    rails:           [{"name": "ibp24s0", "rail": 0, "address": "198.19.0.11/24",
                       "gateway": "198.19.0.1"}, ...]; gateway only where a spine routes the rail
    storage:         {"name": "enp170s0f0", "address": "198.18.1.11/24"} on the storage bridge
    compute_cidr:    the network reached via a rail's gateway (all rails' subnets), e.g.
                     ``198.19.0.0/16``; needed when a rail has a gateway
    authorized_keys: public key line(s) allowed to log in as root
    hw_tree_source:  directory shown at /run/railyard/hw (default: the node's own, empty, dir)
    root:            the project root (paths.project_root() by default)

    The fabric (and its bridges for every rail used) must exist. Returns read_node's result.
    """
    require_root()
    nics = _parse_nics(stack, node, mgmt, rails, storage, compute_cidr)
    keys = parse_keys(node, authorized_keys)
    return converge(stack, node, nics=nics, keys=keys, compute_cidr=compute_cidr,
                    hw_tree_source=hw_tree_source, root=root)


def converge(stack: str, node: str, *, nics: list[Nic], keys: list[str], compute_cidr: str | None,
             hw_tree_source: str | None, root: Path | None, attach=None) -> dict:
    """Bring a namespace set (a node, or a VM, see vm.py) to the request: its dir, netns, veth
    NICs, addressing, init, sshd and agent. `attach(netns)`, when given, runs once the netns and
    veths exist and before addressing: it moves in the NICs that are not veths (a VM's VFs).
    Returns read_node's result."""
    ns = names.node_ns(stack, node)
    fab = names.fabric_ns(stack)
    d = node_dir(stack, node, root)
    check_dir_location(d)

    if not net.netns_exists(fab):
        raise LabError(f"node {ns}", f"the fabric namespace {fab} does not exist; create the fabric first")
    fab_links = net.links(fab, with_addresses=False)
    missing = sorted({n.bridge for n in nics if n.veth} - set(fab_links))
    if missing:
        raise LabError(f"node {ns}", f"bridges {missing} are missing in {fab}; create the fabric with them first")

    hw = Path(hw_tree_source).resolve() if hw_tree_source else d / "hw"
    if hw_tree_source and not hw.is_dir():
        raise LabError(f"node {ns}", f"hw_tree_source {hw} is not a directory")
    config_changed = _prepare_dir(d, node, nics[0], keys)

    net.claim_netns(ns, names.owner(stack, root))
    # Before any interface is created, so new ones inherit them; every time, because a create
    # killed right after `ip netns add` leaves a namespace without them.
    net.sysctls(ns, LAB_NETNS_SYSCTLS)
    _ensure_links(stack, node, ns, fab, [n for n in nics if n.veth], fab_links)
    if attach is not None:
        attach(ns)
    _ensure_addressing(ns, nics, compute_cidr)

    pid = init_pid(stack, node, root)
    if pid is not None and _hw_source_of(pid) != _identity(hw):
        _kill_node_processes(stack, node)  # the hw tree is bound at start: restart to change it
        pid = None
    if pid is None:
        _kill_node_processes(stack, node)  # leftovers of an init that died or a removed netns
        pid = _start_init(stack, node, d, hw, root)
    else:
        if config_changed or not _sshd_pid(stack, node, pid):
            _restart_sshd(stack, node, pid)
        if not agent_pid(stack, node, root):
            start_agent(stack, node, root)
    state = read_node(stack, node, root)
    if state is None:
        raise LabError(f"node {ns}", "vanished while it was being created")
    return state


def _parse_nics(stack: str, node: str, mgmt: dict, rails: Iterable[dict], storage: dict | None,
                compute_cidr: str | None) -> list[Nic]:
    ns = names.node_ns(stack, node)

    def one(spec: dict, role: int | str) -> Nic:
        what = f"node {ns} {role if isinstance(role, str) else f'rail {role}'} NIC"
        if not isinstance(spec, dict) or "name" not in spec or "address" not in spec:
            raise LabError(what, f"expected {{'name': ..., 'address': ...}}, got {spec!r}")
        name = names.check_ifname(spec["name"])
        if name == "lo":
            raise LabError(what, "'lo' is the loopback, not a NIC name")
        iface = net.lab_interface(spec["address"], what)
        gw = spec.get("gateway")
        if gw is not None:
            if not isinstance(role, int):
                raise LabError(what, "only rail NICs have a gateway")
            gw_ip = net.lab_address(gw, what)
            if gw_ip not in iface.network or gw_ip == iface.ip:
                raise LabError(what, f"gateway {gw} is not another address of {iface.network}")
            gw = str(gw_ip)
        return Nic(name, role, str(iface), gw, role if isinstance(role, int) else None)

    nics = [one(mgmt, "mgmt")]
    for spec in rails:
        rail = spec.get("rail") if isinstance(spec, dict) else None
        if not isinstance(rail, int) or isinstance(rail, bool):
            raise LabError(f"node {ns} rail NIC", f"expected an integer 'rail', got {spec!r}")
        names.rail_bridge(rail)
        nics.append(one(spec, rail))
    if storage is not None:
        nics.append(one(storage, "storage"))
    check_unique(ns, nics)
    check_compute_cidr(ns, nics, compute_cidr)
    return nics


def check_unique(ns: str, nics: list[Nic]) -> None:
    tables = [n.table for n in nics if n.table is not None]
    for kind_, values in (("NIC name", [n.name for n in nics]), ("rail", tables),
                          ("address", [n.address.split("/")[0] for n in nics])):
        dup = sorted({str(v) for v in values if values.count(v) > 1})
        if dup:
            raise LabError(f"node {ns}", f"{kind_} used twice: {', '.join(dup)}")


def check_compute_cidr(ns: str, nics: list[Nic], compute_cidr: str | None) -> None:
    if any(n.gateway for n in nics):
        if not compute_cidr:
            raise LabError(f"node {ns}", "rails have gateways but no compute_cidr says what lies behind them")
        net.lab_network(compute_cidr, f"node {ns} compute_cidr")


def parse_keys(node: str, keys: str | Sequence[str]) -> list[str]:
    lines = [keys] if isinstance(keys, str) else list(keys)
    out = []
    for k in lines:
        for line in k.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                if not line.split()[0].startswith(("ssh-", "ecdsa-", "sk-")):
                    raise LabError(f"node {node} authorized_keys", f"not a public key line: {line[:40]}...")
                out.append(line)
    if not out:
        raise LabError(f"node {node} authorized_keys", "at least one public key is needed to reach the node")
    return out


def check_dir_location(d: Path) -> None:
    """Refuse a lab directory where every node mounts a directory of its own."""
    real = os.path.realpath(d)
    for bad in _FORBIDDEN_DIRS:
        if real == bad or real.startswith(bad + "/"):
            raise LabError(f"dir {d}", f"lies under {bad}, which every lab node mounts over; "
                                       "keep the project (RAILYARD_ROOT) elsewhere")


def _write_if_changed(path: Path, text: str, mode: int) -> bool:
    try:
        if path.read_text() == text:
            os.chmod(path, mode)
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


def _sshd_config(node: str, mgmt_ip: str) -> str:
    return f"""\
# Managed by railyard: lab node {node}. Rewritten on every create; edits are lost.
ListenAddress {mgmt_ip}:22
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile /run/sshd.pid
AllowUsers root
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
# PAM would reach for the host's logind and session services through sockets the node hides.
UsePAM no
UseDNS no
X11Forwarding no
PrintMotd no
# Ansible opens many sessions at once.
MaxStartups 100:30:200
MaxSessions 64
AcceptEnv LANG LC_*
SetEnv PATH={NODE_PATH}
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def _prepare_dir(d: Path, node: str, mgmt: Nic, keys: list[str]) -> bool:
    """The node's runtime dir: the upper layer of its /etc, its /boot, /mnt, /root and hw tree.
    What the node writes to /etc stays in the layer across restarts; the files the lab owns are
    rewritten every time. True when sshd's configuration changed."""
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    etc = d / "etc"  # the upper layer of the node's /etc overlay (see node_init.py)
    for sub in ("etc", "etc.work", "etc/ssh", "var", "var.work"):
        (d / sub).mkdir(exist_ok=True)
    if not (etc / "machine-id").exists():
        _write_if_changed(etc / "machine-id", secrets.token_hex(16) + "\n", 0o444)
    # The host's host keys are the host's identity: whiteouts hide them, the node has its own.
    for key in Path("/etc/ssh").glob("ssh_host_*"):
        hidden = etc / "ssh" / key.name
        if key.name.startswith("ssh_host_ed25519_key"):
            continue
        if not hidden.exists() and not hidden.is_symlink():
            os.mknod(hidden, stat.S_IFCHR | 0o600, os.makedev(0, 0))
    for sub in ("boot", "mnt", "root", "hw"):
        (d / sub).mkdir(exist_ok=True)
    os.chmod(d / "root", 0o700)
    ssh_dir = d / "root" / ".ssh"
    ssh_dir.mkdir(exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    _write_if_changed(ssh_dir / "authorized_keys", "\n".join(keys) + "\n", 0o600)

    mgmt_ip = mgmt.address.split("/")[0]
    _write_if_changed(etc / "hostname", node + "\n", 0o644)
    _write_if_changed(etc / "hosts", f"127.0.0.1\tlocalhost\n{mgmt_ip}\t{node}\n", 0o644)
    # The shim and its names, bound at /run/railyard/bin (first on the node's PATH).
    bin_dir = d / "bin"
    bin_dir.mkdir(exist_ok=True)
    _write_if_changed(bin_dir / ".lab-shim", SHIM_SCRIPT.read_text(), 0o755)
    for name in SHIMMED:
        link = bin_dir / name
        if not link.is_symlink():
            link.unlink(missing_ok=True)
            link.symlink_to(".lab-shim")
    hostkey = etc / "ssh" / "ssh_host_ed25519_key"
    if not hostkey.exists() or not hostkey.with_suffix(".pub").exists():
        hostkey.unlink(missing_ok=True)
        hostkey.with_suffix(".pub").unlink(missing_ok=True)
        net.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node}", "-f", str(hostkey)],
                obj=f"node {node} host key")
    return _write_if_changed(etc / "ssh" / "sshd_config", _sshd_config(node, mgmt_ip), 0o644)


# --- links and addressing -----------------------------------------------------------------------

def _own_ports(node: str, links: dict[str, dict]) -> set[str]:
    """This node's ports in the fabric namespace (see names.node_port for why this is exact)."""
    prefix = names.node_tag(node) + "-"
    out = set()
    for name in links:
        rest = name[len(prefix):] if name.startswith(prefix) else None
        if rest is not None and (rest in ("s", "m") or (rest[:1] == "r" and rest[1:].isdigit())):
            out.add(name)
    return out


def _ensure_links(stack: str, node: str, ns: str, fab: str, nics: list[Nic], fab_links: dict[str, dict]) -> None:
    node_links = net.links(ns)
    ports = {names.node_port(node, n.role): n for n in nics}
    fbatch = net.Batch(fab)
    # NICs no longer asked for (a stack edit removed a rail): both ends go.
    for port in sorted(_own_ports(node, fab_links) - set(ports)):
        fbatch.add(f"link {port}", "link", "del", port)
    wanted_names = {n.name for n in nics}
    for name, info in sorted(node_links.items()):
        if name not in wanted_names and net.kind(info) == "veth":
            net.link_delete(name, ns)
            node_links.pop(name)
    if len(fbatch):
        fbatch.run()
        fab_links = net.links(fab, with_addresses=False)
    for port, nic in ports.items():
        inner = node_links.get(nic.name)
        outer = fab_links.get(port)
        paired = (inner is not None and outer is not None and net.kind(inner) == "veth"
                  and net.kind(outer) == "veth" and inner.get("link_index") == outer.get("ifindex"))
        if not paired:
            # Half a pair, or a pair crossed with another node's: start this NIC over.
            if inner is not None:
                net.link_delete(nic.name, ns)
            if outer is not None:
                net.link_delete(port, fab)
            fbatch.add(f"link {port} (node {node} NIC {nic.name})", "link", "add", port,
                       "address", names.mac(stack, node, port), "type", "veth",
                       "peer", "name", nic.name, "address", names.mac(stack, node, nic.name), "netns", ns)
        if outer is None or outer.get("master") != nic.bridge or "UP" not in outer.get("flags", []) or not paired:
            fbatch.add(f"link {port}", "link", "set", port, "master", nic.bridge, "up")
    fbatch.run()


def _ensure_addressing(ns: str, nics: list[Nic], compute_cidr: str | None) -> None:
    links = net.links(ns)
    batch = net.Batch(ns)
    if "UP" not in links.get("lo", {}).get("flags", []):
        batch.add("link lo", "link", "set", "lo", "up")
    for nic in nics:
        net.queue_addresses(batch, nic.name, links.get(nic.name), [nic.address])
        if "UP" not in links.get(nic.name, {}).get("flags", []):
            batch.add(f"link {nic.name}", "link", "set", nic.name, "up")

    rail_nics = {n.table: n for n in nics if n.table is not None}
    wanted_rules = {RULE_PREF_BASE + r: (n.address.split("/")[0], TABLE_BASE + r) for r, n in rail_nics.items()}
    for rule in net.rules(ns):
        pref = rule.get("priority")
        if pref is None or not RULE_PREF_BASE <= pref < RULE_PREF_BASE + 100:
            continue
        want = wanted_rules.get(pref)
        if want and (rule.get("src"), str(rule.get("table")), rule.get("srclen", 32)) == (want[0], str(want[1]), 32):
            wanted_rules.pop(pref)
        else:
            batch.add(f"rule pref {pref}", "rule", "del", "pref", str(pref))
    for pref, (src, table) in sorted(wanted_rules.items()):
        batch.add(f"rule pref {pref}", "rule", "add", "pref", str(pref), "from", src, "lookup", str(table))

    routes = net.routes(ns)
    by_table: dict[int, set[tuple]] = {}
    for r in routes:
        t = r.get("table")
        if isinstance(t, int) or (isinstance(t, str) and t.isdigit()):
            by_table.setdefault(int(t), set()).add((r.get("dst"), r.get("gateway"), r.get("dev")))
    for table in sorted(by_table):
        if TABLE_BASE <= table < TABLE_BASE + 100 and table - TABLE_BASE not in rail_nics:
            batch.add(f"route table {table}", "route", "flush", "table", str(table))
    for rail, nic in sorted(rail_nics.items()):
        table = TABLE_BASE + rail  # "rail" here is the NIC's table slot (Nic.table)
        iface = ipaddress.ip_interface(nic.address)
        want = {(str(iface.network), None, nic.name)}
        if nic.gateway:
            want.add((str(net.lab_network(compute_cidr, "compute_cidr")), nic.gateway, nic.name))
        if by_table.get(table, set()) == want:
            continue
        what = f"route table {table} (rail {rail})"
        if table in by_table:
            batch.add(what, "route", "flush", "table", str(table))
        batch.add(what, "route", "add", str(iface.network), "dev", nic.name, "src", str(iface.ip),
                  "scope", "link", "table", str(table))
        if nic.gateway:
            batch.add(what, "route", "add", str(compute_cidr), "via", nic.gateway, "dev", nic.name,
                      "src", str(iface.ip), "table", str(table))
    batch.run()


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


def _start_init(stack: str, node: str, d: Path, hw: Path, root: Path | None) -> int:
    ns = names.node_ns(stack, node)
    env = _clean_env(stack, node)
    env.update({
        "RY_NODE": node,
        "RY_NODE_DIR": str(d.resolve()),
        "RY_HW": str(hw),
        "RY_MARKER": names.init_marker(stack, node),
        "RY_MOUNT_MARKER": names.mount_marker(stack, node),
        "RY_SHIM_TARGETS": "\n".join(shim_targets()),
        "RY_AGENT": str(AGENT_SCRIPT),
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
        _kill_node_processes(stack, node)
        raise LabError(f"node {ns}", "the node's init did not report ready within 30s") from None
    pid = None
    for line in out.splitlines():
        if line.startswith("ready "):
            pid = int(line.split()[1])
    if pid is None:
        _kill_node_processes(stack, node)
        raise LabError(f"node {ns}", f"the node's init failed: {err.strip() or out.strip() or 'no output'}")
    (d / "init.pid").write_text(f"{pid}\n")
    # "ready" comes just before the init execs its holder; init_pid() knows it by the holder's name.
    deadline = time.monotonic() + 10
    while init_pid(stack, node, root) is None:
        if not proc.alive(pid) or time.monotonic() > deadline:
            _kill_node_processes(stack, node)
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
    found = set()
    ino = net.netns_inode(names.node_ns(stack, node))
    if ino is not None:
        found.update(p.pid for p in proc.in_namespaces({ino}))
    mark = names.mount_marker(stack, node)
    found.update(p.pid for p, _ in proc.by_mount_source("/run", lambda s: s == mark))
    marker = names.env_marker(stack, node)
    found.update(p.pid for p, _ in proc.marked(names.ENV_MARKER, lambda v: v == marker))
    return sorted(found)


def _kill_node_processes(stack: str, node: str) -> None:
    proc.kill_all(_node_processes(stack, node), what=f"node {names.node_ns(stack, node)}")


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


def _restart_sshd(stack: str, node: str, init: int) -> None:
    old = _sshd_pid(stack, node, init)
    if old:
        proc.kill_all([old], what=f"sshd of node {node}")
    run_in_node(stack, node, ["/usr/sbin/sshd", "-f", "/etc/ssh/sshd_config", "-E", "/run/railyard/sshd.log"],
                check=True, _pid=init)


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


# --- read and delete ----------------------------------------------------------------------------

def read_node(stack: str, node: str, root: Path | None = None) -> dict | None:
    """The node as it is now, or None when its netns is gone.

    {"id", "stack", "node", "netns", "hostname", "running", "init_pid", "sshd", "agent",
     "mgmt_address", "host_key", "nics": {name: [addresses]}, "reboot_pending", "runtime_dir"}

    "nics" are the node's own NICs (veths); VFs are the tuning's (sriov.read_sriov) or a VM's
    (vm.read_vm), so making them does not show as drift of the node.
    """
    ns = names.node_ns(stack, node)
    if not net.netns_exists(ns):
        return None
    d = node_dir(stack, node, root)
    pid = init_pid(stack, node, root)
    links = net.links(ns)
    # The node's own NICs; VFs (macvlans) belong to the tuning that made them or the VM holding them.
    nics = {n: net.addresses(i) for n, i in sorted(links.items()) if net.kind(i) == "veth"}
    mgmt = None
    try:
        for line in (d / "etc" / "ssh" / "sshd_config").read_text().splitlines():
            if line.startswith("ListenAddress "):
                mgmt = line.split()[1].rsplit(":", 1)[0]
    except OSError:
        pass
    return {
        "id": ns,
        "stack": stack,
        "node": node,
        "netns": ns,
        "hostname": node,
        "running": pid is not None,
        "init_pid": pid,
        "sshd": bool(pid and _sshd_pid(stack, node, pid)),
        "agent": bool(pid and agent_pid(stack, node, root, _init=pid)),
        "mgmt_address": mgmt,
        "host_key": host_key(stack, node, root),
        "nics": nics,
        "reboot_pending": bool(pid and reboot_pending(stack, node, root)),
        "runtime_dir": str(d),
    }


def node_exists(stack: str, node: str) -> bool:
    return net.netns_exists(names.node_ns(stack, node))


def delete_node(stack: str, node: str, root: Path | None = None) -> dict:
    """Stop every process of the node, remove its netns, its NICs (both ends) and its runtime
    dir. Its mounts live only in its own mount namespace and go with its last process."""
    require_root()
    ns, fab = names.node_ns(stack, node), names.fabric_ns(stack)
    d = node_dir(stack, node, root)
    existed = net.netns_exists(ns) or d.exists()
    _kill_node_processes(stack, node)
    net.netns_delete(ns)
    # Freeing the netns takes its veths (and so the fabric ports) along, all in one batch; that
    # happens asynchronously, so wait for it, and delete what a straggling holder of the netns
    # keeps alive one by one (slower: each veth deletion waits for its own RCU grace period).
    if net.netns_exists(fab):
        left = net.wait_links_gone(fab, lambda links: _own_ports(node, links), with_addresses=False)
        for port in sorted(left):
            net.link_delete(port, fab)
    # Loop devices of the node's local cache (storage.py) free themselves with its last
    # process; wait for that, so none outlives the node.
    proc.release_loops(d)
    proc.remove_tree(d)
    return {"id": ns, "deleted": existed}

