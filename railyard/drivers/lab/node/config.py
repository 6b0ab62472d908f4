"""A lab node's own configuration, checked and written on the host before anything runs in it.

The NICs as requested (Nic: checked for names, addresses, gateways, duplicates), the node's
runtime dir (the upper layers of its /etc and /var overlays, its /boot, /mnt, /root, hardware-tree
dir and the reboot shim), sshd's configuration, the authorized keys and the node's host key.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from railyard import paths
from railyard.drivers.lab import names, net, routers
from railyard.drivers.lab.errors import LabError
from railyard.drivers.lab.routers import HOST_SIDE

# The scripts a node runs (node_init.py, lab-shim.sh, agent.py) live in the lab driver's
# directory, one above this package.
LAB_DIR = Path(__file__).resolve().parent.parent
SHIM_SCRIPT = LAB_DIR / "lab-shim.sh"
# The node's nvidia-smi: it answers from the node's hardware tree (a lab node has no GPU or driver).
GPU_TOOLS_SCRIPT = LAB_DIR / "gpu_tools.py"
# Its dmesg: the node's own kernel messages (the machine's ring buffer is not the node's).
DMESG_SCRIPT = LAB_DIR / "dmesg.sh"

NODE_PATH = "/run/railyard/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHIMMED = (
    "reboot", "shutdown", "halt", "poweroff", "telinit", "systemctl", "kexec",
    "grub-mkconfig", "grub2-mkconfig", "update-grub", "update-grub2", "grub-install", "grub2-install",
    "grubby", "update-initramfs", "dracut", "kernel-install",
)

# /etc/network/interfaces as ifupdown's package creates it on a Debian host (its postinst).
IFUPDOWN_INTERFACES = """# interfaces(5) file used by ifup(8) and ifdown(8)
# Include files from /etc/network/interfaces.d:
source /etc/network/interfaces.d/*

auto lo
iface lo inet loopback
"""

# The node's private mounts would hide a runtime dir below them (see node_init.py for the order).
_FORBIDDEN_DIRS = ("/run", "/etc", "/var", "/boot", "/mnt", "/proc", "/sys", "/dev")


@dataclass(frozen=True)
class Nic:
    """One NIC of a node: `name` is the node-side netdev name, `role` a rail number, "mgmt" or
    "storage"; `address` an address with prefix, or None for a rail the node's own network files
    address (as a server's are); `gateway` (rails only) the rail's gateway.

    `table` (rail NICs) numbers the NIC's routing rule and table (RULE_PREF_BASE+table,
    TABLE_BASE+table): the rail for a node's NICs, the VF's position for a VM, which may hold
    several VFs of one rail. `veth` NICs are made here with a fabric port; the others (a VM's VFs)
    are moved into the namespace by the caller and only addressed here."""

    name: str
    role: int | str
    address: str | None
    """None (rails only): the node's own network configuration addresses it, never the lab."""
    gateway: str | None = None
    table: int | None = None
    veth: bool = True
    mtu: int | None = None
    """Both ends of the veth (the plan's MTU of the NIC's network); None leaves the kernel's."""
    switch: str | None = None
    """A rail NIC of a RoCE stack whose switches route (routers.py): the leaf whose host bridge its
    port is on. None: the fabric namespace's bridge for its role."""
    switch_port: str | None = None
    """That leaf's planned port, as the switch names it (`swp1s0`): the alias of the NIC's port
    there, which the leaf's lldpd sends as its port id (routers.lldp_ports)."""

    @property
    def bridge(self) -> str:
        if self.switch is not None:
            return HOST_SIDE
        if isinstance(self.role, int):
            return names.rail_bridge(self.role)
        return names.MGMT_BRIDGE if self.role == "mgmt" else names.STORAGE_BRIDGE

    def port_ns(self, stack: str) -> str:
        """The namespace holding the NIC's port: its leaf's, or the fabric's."""
        return names.switch_ns(stack, self.switch) if self.switch is not None else names.fabric_ns(stack)



def node_dir(stack: str, node: str, root: Path | None = None) -> Path:
    return paths.lab_dir(stack, root) / "nodes" / names.check_node(node)


def _parse_nics(stack: str, node: str, mgmt: dict, rails: Iterable[dict], storage: dict | None,
                compute_cidr: str | None) -> list[Nic]:
    ns = names.node_ns(stack, node)

    def one(spec: dict, role: int | str) -> Nic:
        nic = _one(spec, role)
        if isinstance(spec, dict) and spec.get("leaf") is not None:
            if not isinstance(role, int):
                raise LabError(f"node {ns} NIC {nic.name}", "only a rail NIC hangs off a leaf")
            port = spec.get("leaf_port")
            if port is not None and not (isinstance(port, str) and routers.is_port(port)):
                raise LabError(f"node {ns} NIC {nic.name}", f"leaf_port must name a switch port (swp1s0), got {port!r}")
            nic = dataclasses.replace(nic, switch=names.check_node(spec["leaf"]), switch_port=port)
        mtu = spec.get("mtu")
        if mtu is None:
            return nic
        if isinstance(mtu, bool) or not isinstance(mtu, int) or not 68 <= mtu <= 65535:
            raise LabError(f"node {ns} NIC {nic.name}", f"mtu must be an integer 68..65535, got {spec['mtu']!r}")
        return dataclasses.replace(nic, mtu=mtu)

    def _one(spec: dict, role: int | str) -> Nic:
        what = f"node {ns} {role if isinstance(role, str) else f'rail {role}'} NIC"
        if not isinstance(spec, dict) or "name" not in spec or "address" not in spec:
            raise LabError(what, f"expected {{'name': ..., 'address': ...}}, got {spec!r}")
        name = names.check_ifname(spec["name"])
        if name == "lo":
            raise LabError(what, "'lo' is the loopback, not a NIC name")
        if spec["address"] is None:
            if not isinstance(role, int) or spec.get("gateway") is not None:
                raise LabError(what, "only a rail may come without an address (and then without a gateway)")
            return Nic(name, role, None, None, role)
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
    checks: tuple[tuple[str, Sequence[object]], ...] = (
        ("NIC name", [n.name for n in nics]), ("rail", tables),
        ("address", [n.address.split("/")[0] for n in nics if n.address]))
    for kind_, values in checks:
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

    assert mgmt.address is not None, "_parse_nics() refuses a management NIC without an address"
    mgmt_ip = mgmt.address.split("/")[0]
    # The node is a Debian server whose network stack is ifupdown, Debian's default: the file its
    # installer leaves. Written once; what the node's own tuning adds under interfaces.d stays.
    interfaces = etc / "network" / "interfaces"
    if not interfaces.exists():
        (etc / "network" / "interfaces.d").mkdir(parents=True, exist_ok=True)
        _write_if_changed(interfaces, IFUPDOWN_INTERFACES, 0o644)
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
    gpu_tools = GPU_TOOLS_SCRIPT.read_text()
    for tool in ("nvidia-smi", "all_reduce_perf", "dcgmi"):  # one program, answering as the name it is run by
        _write_if_changed(bin_dir / tool, gpu_tools, 0o755)
    _write_if_changed(bin_dir / "dmesg", DMESG_SCRIPT.read_text(), 0o755)
    hostkey = etc / "ssh" / "ssh_host_ed25519_key"
    if not hostkey.exists() or not hostkey.with_suffix(".pub").exists():
        hostkey.unlink(missing_ok=True)
        hostkey.with_suffix(".pub").unlink(missing_ok=True)
        net.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node}", "-f", str(hostkey)],
                obj=f"node {node} host key")
    return _write_if_changed(etc / "ssh" / "sshd_config", _sshd_config(node, mgmt_ip), 0o644)
