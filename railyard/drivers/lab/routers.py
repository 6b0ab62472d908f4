"""A RoCE stack's switches as routers: one namespace per planned switch, wired port to port by
veths as the plan cables them, each running FRR (zebra, bgpd, staticd under watchfrr) on the very
frr.conf `railyard plan --frr` writes (railyard.switches).

Each switch is `ry-T-sw-<switch>`: its ports carry the plan's port names (`swp33s0`), a leaf has a
bridge `hosts` for its hosts' rail ports (proxy ARP on: the rail subnet spans the leaves), and
the kernel forwards. FRR runs with its own pathspace (`watchfrr -N <switch>`), because every
switch namespace shares the host's /etc: the daemons see /etc/frr/<switch> and /var/run/frr/<switch>
in a mount namespace of their own, bound from the switch's directory
(`<lab dir>/switches/<switch>/{etc,run}`), so nothing is written to the host's /etc/frr or
/var/run/frr. The configuration sets every address (zebra owns them, as on a switch); its log is
`run/frr.log`. `status` asks FRR through its vty sockets there (vtysh --vty_socket).

Each switch also runs lldpd (`lldpcli()` reaches it), naming itself and its ports as a Cumulus
switch does in its LLDP frames, so the nodes' neighbours say which leaf port each rail is cabled to.

`ensure(stack, switches, mtu)` converges: namespaces, links and daemons of the listed switches,
FRR restarted where its configuration changed, and switches or links no longer listed removed.
`delete_all(stack)` removes every switch of the stack with its processes and directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Sequence

from railyard import paths
from railyard.drivers.lab import names, net, proc
from railyard.drivers.lab.errors import LabError, require_root
from railyard.drivers.lab.fabric import LAB_NETNS_SYSCTLS

FRR_LIB = Path("/usr/lib/frr")
LLDPD = Path("/usr/sbin/lldpd")
# A frame a second (lldpd's default is 30 s), as the nodes' lldpd sends in the lab
# (drivers/lab/tuning.LLDP_VARS), so that a cable `railyard lab fault` moves shows in the next verify.
LLDP_TX_S = 1
HOST_SIDE = "hosts"
_PORT = re.compile(r"swp\d+(s\d+)?")
# Only what the configurations use; the rest stay off. No TCP vty: vtysh reaches the daemons by
# their unix sockets.
DAEMONS = "zebra=yes\nbgpd=yes\nstaticd=yes\nvtysh_enable=yes\n" + "".join(
    f'{d}_options="-P 0"\n' for d in ("zebra", "bgpd", "staticd"))


def is_port(name: str) -> bool:
    """A switch port's name as the plan gives it (routing.port_netdev: swp12, swp1s0)."""
    return _PORT.fullmatch(name) is not None


def switches_dir(stack: str, root: Path | None = None) -> Path:
    return paths.lab_dir(stack, root) / "switches"


def switch_dir(stack: str, switch: str, root: Path | None = None) -> Path:
    return switches_dir(stack, root) / names.check_node(switch)


def log_file(switch: str) -> str:
    """Where the switch's FRR logs, as its daemons see it (its run directory)."""
    return f"/var/run/frr/{switch}/frr.log"


def _frr_user() -> tuple[int, int]:
    import pwd

    try:
        pw = pwd.getpwnam("frr")
    except KeyError:
        raise LabError("FRR", "the frr user is missing: install Debian's frr (bash scripts/host-deps.sh)") from None
    return pw.pw_uid, pw.pw_gid


def _write(path: Path, text: str, uid: int, gid: int, mode: int = 0o640) -> bool:
    """True when the file changed."""
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.chown(tmp, uid, gid)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


def lldp_conf(switch: str) -> str:
    """What the switch's lldpd is configured with at start: its name, and its ports named as a
    Cumulus switch names them in its frames (port id subtype ifname: `swp12`)."""
    return (f"configure system hostname {switch}\nconfigure lldp portidsubtype ifname\n"
            f"configure lldp tx-interval {LLDP_TX_S}\n")


def _is_lldpd(p: proc.Proc) -> bool:
    """lldpd by its argv[0]: `/usr/sbin/lldpd` as exec'd, `lldpd: monitor.` once it names its
    processes (setproctitle)."""
    return bool(p.argv) and p.argv[0].rsplit("/", 1)[-1].startswith("lldpd")


def _lldpd_pid(stack: str, switch: str) -> int | None:
    """The switch's lldpd (its first process: the privileged monitor), or None."""
    pids = [p.pid for p in _daemons(names.switch_ns(stack, switch)) if _is_lldpd(p)]
    return min(pids) if pids else None


def lldpcli(stack: str, switch: str, *args: str, commands: str | None = None,
            pid: int | None = None, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    """lldpcli against the switch's lldpd (`pid`, found when not given), whose control socket is
    in the /run of its own mount namespace (lldpd's default path there): a path under the lab's
    directory could pass the 108 bytes a socket's path may have."""
    pid = pid if pid is not None else _lldpd_pid(stack, switch)
    if pid is None:
        return subprocess.CompletedProcess(["lldpcli", *args], 1, "", f"switch {switch} runs no lldpd")
    return subprocess.run(["nsenter", "-t", str(pid), "-m", "lldpcli", *args], input=commands,
                          capture_output=True, text=True, timeout=timeout)


def _lldp_serving(stack: str, switch: str, configured: str | None = None) -> bool:
    """lldpd answers; with `configured`, it has read its configuration too (it names itself so)."""
    shown = lldpcli(stack, switch, "show", "configuration")
    return shown.returncode == 0 and (configured is None or f"Override system name with: {configured}" in shown.stdout)


def _lldp_conf_of(stack: str, switch: str) -> str | None:
    """The configuration the switch's running lldpd started with (in the /run of its own mount
    namespace, which /proc/<pid>/root shows), or None."""
    pid = _lldpd_pid(stack, switch)
    if pid is None:
        return None
    try:
        return Path(f"/proc/{pid}/root/run/lldpd.railyard.conf").read_text()
    except OSError:
        return None


def _lldp_start(stack: str, switch: str) -> None:
    """lldpd in the switch's namespace, in a mount namespace of its own whose /run is a tmpfs: its
    pid file, control socket and privilege-separation directory are fixed paths under /run that
    the host's own lldpd and every other switch's use too. Its configuration is written there as
    well: lldpd reads it through lldpcli, which cannot enter a lab directory kept private (0700)."""
    ns = names.switch_ns(stack, switch)
    q = shlex.quote
    script = (f"mount -t tmpfs -o mode=0755 {q(names.switch_mount_marker(stack, switch))} /run && "
              f"printf %s {q(lldp_conf(switch))} >/run/lldpd.railyard.conf && "
              f"exec {q(str(LLDPD))} -O /run/lldpd.railyard.conf")
    # A slave of the host's mounts: what the host mounts later shows here too. (A netns the host
    # deletes goes from here either way: the kernel detaches a mount whose mount point is
    # unlinked in every namespace; tests/lab/test_lab_routers.py holds FRR's private copy to it.)
    run = subprocess.run(["nsenter", f"--net={net.netns_path(ns)}", "unshare", "--mount", "--propagation", "slave",
                          "sh", "-c", script], capture_output=True, text=True,
                         env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", names.ENV_MARKER: names.switch_marker(stack, switch)})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _lldp_serving(stack, switch, configured=switch):
        time.sleep(0.05)
    if run.returncode != 0 or not _lldp_serving(stack, switch, configured=switch):
        _lldp_stop(stack, switch)  # nothing half-started is taken for a configured lldpd later
        raise LabError(f"switch {switch}", f"lldpd did not start (exit {run.returncode}): "
                                           f"{(run.stderr or run.stdout).strip()[-500:] or 'it does not answer lldpcli'}")


def _lldp_stop(stack: str, switch: str) -> None:
    ns = names.switch_ns(stack, switch)
    proc.kill_all([p.pid for p in _daemons(ns) if _is_lldpd(p)], what=f"switch {switch} lldpd")


def lldp_ports(stack: str, switch: str, timeout: float = 10.0) -> dict[str, str]:
    """Give each of the switch's host-facing ports the port id of the planned port it stands for:
    the lab names those ports after their node (names.node_port) and writes the plan's name
    (`swp1s0`) in their alias, which lldpd sends as a locally assigned port id, as SONiC sends its
    ports' aliases. Waits until lldpd knows every such port (it learns a new one from the kernel a
    moment later). Returns {port: port id}; a switch without lldpd is left alone."""
    from railyard.model import lldp

    pid = _lldpd_pid(stack, switch)  # one walk of /proc, not one per lldpcli below
    if pid is None:
        return {}
    ns = names.switch_ns(stack, switch)
    wanted = {name: info["ifalias"] for name, info in net.links(ns, with_addresses=False).items()
              if not _PORT.fullmatch(name) and _PORT.fullmatch(info.get("ifalias") or "")}
    deadline = time.monotonic() + timeout
    said = ""
    while True:
        shown = lldpcli(stack, switch, "-f", "json", "show", "interfaces", pid=pid)
        known = lldp.parse(shown.stdout) if shown.returncode == 0 else {}
        sent = {port: (known.get(port) or [{}])[0].get("port") for port in wanted}
        if all(sent[port] == alias for port, alias in wanted.items()):
            return wanted
        if time.monotonic() > deadline:
            raise LabError(f"switch {switch}", "lldpd does not send the planned port id of "
                           + ", ".join(f"{p} ({a})" for p, a in sorted(wanted.items()) if sent[p] != a)
                           + (f": {said}" if said else ""))
        todo = {port: alias for port, alias in wanted.items() if port in known and sent[port] != alias}
        if todo:
            told = lldpcli(stack, switch, pid=pid, commands="".join(
                f"configure ports {port} lldp portidsubtype local {alias}\n" for port, alias in sorted(todo.items())))
            said = told.stderr.strip()[-300:] if told.returncode != 0 else said
        time.sleep(0.05)


def lldp_table(stack: str, switch: str, timeout: float = 10.0) -> dict[str, list] | str:
    """The neighbours the switch's lldpd heard, by its ports as the plan names them (a host-facing
    port by the planned name in its alias, as lldp_ports sends it), as `railyard verify` reads a
    real switch's table; or why it could not be read (within `timeout`)."""
    from railyard.model import lldp

    try:
        shown = lldpcli(stack, switch, "-f", "json", "show", "neighbors", timeout=timeout)
        if shown.returncode != 0:
            return f"lldpcli exited {shown.returncode}: {lldp.last_said(shown.stderr)}"
        heard = lldp.parse(shown.stdout)
        links = net.links(names.switch_ns(stack, switch), with_addresses=False)
    except subprocess.TimeoutExpired:
        return f"lldpcli gave no answer in {timeout:g} s"
    except ValueError as exc:
        return f"lldpcli: {exc}"
    except (LabError, OSError) as exc:  # the switch's namespace gone while it was read
        return str(exc)
    out: dict[str, list] = {}
    for port, neighbours in heard.items():
        alias = (links.get(port) or {}).get("ifalias") or ""
        out.setdefault(port if _PORT.fullmatch(port) or not _PORT.fullmatch(alias) else alias, []).extend(neighbours)
    return out


def _daemons(ns: str) -> list[proc.Proc]:
    """Every process in the switch's namespace: FRR's and lldpd's."""
    ino = net.netns_inode(ns)
    return proc.in_namespaces({ino}) if ino is not None else []


def _frr(ns: str) -> list[proc.Proc]:
    return [p for p in _daemons(ns) if not _is_lldpd(p)]


REQUIRED = ("watchfrr", "zebra", "bgpd", "staticd")
STARTED = ".railyard-started"  # in the run directory: the digest of the configuration FRR started with


def _running(ns: str) -> set[str]:
    return {p.argv[0].rsplit("/", 1)[-1] for p in _frr(ns) if p.argv}


def _digest(d: Path) -> str:
    return hashlib.sha256(b"".join((d / "etc" / f).read_bytes() for f in ("frr.conf", "daemons"))).hexdigest()


def _start(stack: str, switch: str, d: Path) -> None:
    ns = names.switch_ns(stack, switch)
    q = shlex.quote
    fs = q(names.stack_prefix(stack) + "frr")
    # /etc/frr and /var/run/frr exist once frr is installed (/run is cleared at boot: made again).
    script = (f"mkdir -p /etc/frr /var/run/frr && mount -t tmpfs -o mode=0755 {fs} /etc/frr && "
              f"mkdir /etc/frr/{q(switch)} && mount --bind {q(str(d / 'etc'))} /etc/frr/{q(switch)} && "
              f"mount -t tmpfs -o mode=0755 {fs} /var/run/frr && mkdir /var/run/frr/{q(switch)} && "
              f"mount --bind {q(str(d / 'run'))} /var/run/frr/{q(switch)} && "
              f"exec {q(str(FRR_LIB / 'frrinit.sh'))} start {q(switch)}")
    run = subprocess.run(["nsenter", f"--net={net.netns_path(ns)}", "unshare", "--mount", "--propagation", "private",
                          "sh", "-c", script], capture_output=True, text=True,
                         env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", names.ENV_MARKER: names.switch_marker(stack, switch)})
    missing = set(REQUIRED) - _running(ns)
    if run.returncode != 0 or missing:
        _stop(stack, switch)  # nothing half-started is taken for a running switch later
        raise LabError(f"switch {switch}", f"FRR did not start ({', '.join(sorted(missing)) or 'exit ' + str(run.returncode)}"
                                           f"): {(run.stderr or run.stdout).strip()[-500:]}")
    (d / "run" / STARTED).write_text(_digest(d))


def _stop(stack: str, switch: str) -> None:
    ns = names.switch_ns(stack, switch)
    proc.kill_all([p.pid for p in _frr(ns)], what=f"switch {switch} FRR")
    # zebra leaves the addresses it set; the next configuration sets its own.
    links = net.links(ns, with_addresses=False)
    batch = net.Batch(ns)
    for port in sorted(links):
        if _PORT.fullmatch(port) or port == HOST_SIDE:
            batch.add(f"addresses of {port}", "address", "flush", "dev", port)
    batch.add("addresses of lo", "address", "flush", "dev", "lo", "scope", "global")
    batch.run()


def ensure(stack: str, switches: Sequence[dict[str, Any]], mtu: int | None = None, root: Path | None = None) -> dict:
    """Converge the stack's switches on `switches`: [{name, frr_conf, leaf, sessions: [{interface,
    peer, peer_interface}]}] (routing.Router as data). Returns read()."""
    require_root()
    if not (FRR_LIB / "frrinit.sh").exists():
        raise LabError("FRR", f"{FRR_LIB / 'frrinit.sh'} is missing: install Debian's frr (bash scripts/host-deps.sh)")
    if not LLDPD.exists():
        raise LabError("lldpd", f"{LLDPD} is missing: install Debian's lldpd (bash scripts/host-deps.sh)")
    uid, gid = _frr_user()
    wanted = {s["name"]: s for s in switches}
    owner = names.owner(stack, root)
    for name in sorted(set(_existing(stack)) - set(wanted)):
        delete(stack, name, root)
    ports: dict[str, set[str]] = {name: set() for name in wanted}
    for s in switches:
        ns = names.switch_ns(stack, s["name"])
        net.claim_netns(ns, owner)
        net.sysctls(ns, {**LAB_NETNS_SYSCTLS, "net/ipv4/ip_forward": 1, "net/ipv4/conf/all/rp_filter": 0,
                         "net/ipv4/conf/default/rp_filter": 0})
        net.ip("link", "set", "lo", "up", netns=ns, obj=f"switch {s['name']} lo")
        if s.get("leaf"):
            net.bridge_ensure(HOST_SIDE, ns)
            net.sysctls(ns, {f"net/ipv4/conf/{HOST_SIDE}/proxy_arp": 1})
            net.ip("link", "set", HOST_SIDE, "up", netns=ns, obj=f"switch {s['name']} {HOST_SIDE}")
        for x in s["sessions"]:
            if x["peer"] not in wanted:
                raise LabError(f"switch {s['name']}", f"its port {x['interface']} goes to {x['peer']}, which is not listed")
            ports[s["name"]].add(names.check_ifname(x["interface"]))
    _wire(stack, switches, ports, mtu)
    for s in switches:
        name = s["name"]
        d = switch_dir(stack, name, root)
        for sub in ("etc", "run"):
            (d / sub).mkdir(parents=True, exist_ok=True)
            os.chown(d / sub, uid, gid)
        _write(d / "etc" / "frr.conf", s["frr_conf"], uid, gid)
        _write(d / "etc" / "daemons", DAEMONS, uid, gid)
        _write(d / "etc" / "vtysh.conf", "service integrated-vtysh-config\n", uid, gid)
        started = d / "run" / STARTED
        current = started.read_text() if started.exists() else None
        ns = names.switch_ns(stack, name)
        if current == _digest(d) and set(REQUIRED) <= _running(ns):
            continue
        _stop(stack, name)
        for stale in (d / "run").iterdir():
            if stale.name != "frr.log":
                stale.unlink()
        _start(stack, name, d)
    for s in switches:
        # One started with another configuration (LLDP_TX_S changed) is started again.
        if not _lldp_serving(stack, s["name"], configured=s["name"]) or lldp_conf(s["name"]) != _lldp_conf_of(stack, s["name"]):
            _lldp_stop(stack, s["name"])
            _lldp_start(stack, s["name"])
        lldp_ports(stack, s["name"])
    return read(stack, root)


def _wire(stack: str, switches: Sequence[dict], ports: dict[str, set[str]], mtu: int | None) -> None:
    """Every planned link a veth between its two ports; ports no link wants removed."""
    current = {s["name"]: net.links(names.switch_ns(stack, s["name"]), with_addresses=False) for s in switches}
    for s in switches:
        ns = names.switch_ns(stack, s["name"])
        batch = net.Batch(ns)
        for port in sorted(current[s["name"]]):
            if _PORT.fullmatch(port) and port not in ports[s["name"]]:
                batch.add(f"link {port}", "link", "del", port)
        batch.run()
    current = {s["name"]: net.links(names.switch_ns(stack, s["name"]), with_addresses=False) for s in switches}
    pending: list[tuple[str, str, str]] = []
    for s in switches:
        ns = names.switch_ns(stack, s["name"])
        batch = net.Batch(ns)
        for x in s["sessions"]:
            a, b = (s["name"], x["interface"]), (x["peer"], x["peer_interface"])
            if a > b:
                continue  # the other end makes it
            pns = names.switch_ns(stack, x["peer"])
            here, there = current[a[0]].get(x["interface"]), current[b[0]].get(x["peer_interface"])
            # Each end names the port it is cabled to: a re-planned pairing is re-cabled.
            cabled = (here is not None and there is not None and here.get("ifalias") == _peer(*b)
                      and there.get("ifalias") == _peer(*a))
            if not cabled:
                if here is not None:
                    net.link_delete(x["interface"], ns)
                if there is not None:
                    net.link_delete(x["peer_interface"], pns)
                batch.add(f"link {x['interface']}", "link", "add", x["interface"],
                          "address", names.mac(stack, ns, x["interface"]), "type", "veth", "peer", "name",
                          x["peer_interface"], "address", names.mac(stack, pns, x["peer_interface"]), "netns", pns)
                batch.add(f"link {x['interface']} alias", "link", "set", x["interface"], "alias", _peer(*b))
                pending.append((pns, x["peer_interface"], _peer(*a)))
        batch.run()
        ends: dict[str, net.Batch] = {}
        for pns, port, alias in pending:
            ends.setdefault(pns, net.Batch(pns)).add(f"link {port} alias", "link", "set", port, "alias", alias)
        for end in ends.values():
            end.run()
        pending.clear()
    for s in switches:
        ns = names.switch_ns(stack, s["name"])
        links = net.links(ns, with_addresses=False)
        batch = net.Batch(ns)
        for port in sorted(ports[s["name"]]):
            if mtu is not None and links.get(port, {}).get("mtu") != mtu:
                batch.add(f"link {port} mtu", "link", "set", port, "mtu", str(mtu))
            batch.add(f"link {port}", "link", "set", port, "up")
        batch.run()


def _peer(switch: str, port: str) -> str:
    """What a port's alias says it is cabled to."""
    return f"{switch}/{port}"


def _existing(stack: str) -> list[str]:
    out = []
    for ns in net.netns_list(names.stack_prefix(stack)):
        parsed = names.parse_ns(stack, ns)
        if parsed and parsed[0] == "switch":
            out.append(parsed[1])
    return sorted(out)


def read(stack: str, root: Path | None = None) -> dict:
    inodes = {name: net.netns_inode(names.switch_ns(stack, name)) for name in _existing(stack)}
    # One walk of /proc for every switch, not one each.
    daemons: dict[int | None, set[str]] = {}
    for p in proc.in_namespaces({i for i in inodes.values() if i is not None}):
        if p.argv and not _is_lldpd(p):
            daemons.setdefault(p.netns, set()).add(p.argv[0].rsplit("/", 1)[-1])
    switches = {}
    for name, ino in inodes.items():
        links = net.links(names.switch_ns(stack, name), with_addresses=False)
        switches[name] = {"ports": sorted(p for p in links if _PORT.fullmatch(p)),
                          "frr": sorted(daemons.get(ino, ()))}
    return {"id": names.switches_id(stack), "stack": stack, "switches": switches}


def status(stack: str, switch: str, root: Path | None = None) -> dict:
    """FRR's own view of the switch: {"bgp": `show bgp summary json`, "routes": `show ip route json`}."""
    run_dir = switch_dir(stack, switch, root) / "run"
    out = {}
    for key, command in (("bgp", "show bgp ipv4 unicast summary json"), ("routes", "show ip route json")):
        r = subprocess.run(["vtysh", "--vty_socket", str(run_dir), "-c", command], capture_output=True, text=True)
        if r.returncode != 0:
            raise LabError(f"switch {switch}", f"vtysh {command!r}: {(r.stderr or r.stdout).strip()[-300:]}")
        out[key] = json.loads(r.stdout or "{}")
    return out


def wait_established(stack: str, switches: Sequence[str], timeout: float = 60.0, root: Path | None = None) -> dict:
    """{switch: {peer: state}} once every session of every switch is Established, or at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        states = {}
        for name in switches:
            try:
                peers = status(stack, name, root)["bgp"].get("peers", {})
            except LabError:
                peers = {}
            states[name] = {peer: p.get("state") for peer, p in peers.items()}
        if all(states[n] and all(v == "Established" for v in states[n].values()) for n in switches) \
                or time.monotonic() > deadline:
            return states
        time.sleep(1)


def delete(stack: str, switch: str, root: Path | None = None) -> bool:
    require_root()
    ns = names.switch_ns(stack, switch)
    ino = net.netns_inode(ns)
    if ino is not None:
        proc.kill_all([p.pid for p in proc.in_namespaces({ino})], what=f"switch {switch}")
    existed = net.netns_delete(ns)
    d = switch_dir(stack, switch, root)
    if d.exists():
        shutil.rmtree(d)
    return existed


def delete_all(stack: str, root: Path | None = None) -> dict:
    removed = [name for name in _existing(stack) if delete(stack, name, root)]
    d = switches_dir(stack, root)
    if d.exists():
        shutil.rmtree(d)
    with contextlib.suppress(OSError):  # the stack's lab dir, when nothing else of it is left
        paths.lab_dir(stack, root).rmdir()
    return {"id": names.switches_id(stack), "deleted": removed}
