"""The hosts driver's rules for a stack file: its `railyard:hosts` keys, and what they must say
before any host is touched.

Pulumi-free: the spec parser (through railyard.stack) and the CLI read it. `parse(section, spec)`
returns the HostsConfig (config.py) and every problem at once, each naming its config path (and,
for a host read from an inventory file, the file and line). Nothing here opens a network
connection: a DNS name is checked for its form, a host key for its encoding.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from railyard.drivers import RuleHooks
from railyard.drivers.hosts import inventory as inventory_file
from railyard.drivers.hosts.config import (
    DEFAULT_LLDP_COMMAND, DEFAULT_PORT, DEFAULT_REBOOT_COMMAND, DEFAULT_REBOOT_TIMEOUT_SECONDS, DEFAULT_USER, HOST_KEY_MODES,
    MAX_REBOOT_TIMEOUT_SECONDS,
    Bmc, Budget, Host, HostsConfig, JumpHost, PoolHosts, Reboot, Switch, Switches,
)
from railyard.model.errors import Problem
from railyard.model.fabric import cabled_by_lldp
from railyard.model.spec import LOGIN_NAME, SectionReader, did_you_mean as _did_you_mean, \
    is_secret as _is_secret, show as _show
# The address and key forms every SSH caller shares (re-exported: this module's readers import them here).
from railyard.ssh_client import KEY_TYPES, address_kind, canonical, host_pattern, key_problem, known_host_matches, \
    proxy_jump  # noqa: F401

if TYPE_CHECKING:
    from railyard.model.spec import Spec


P = "railyard:hosts"

KEYS: dict[str, tuple[str, ...]] = {
    "": ("user", "port", "jumpHost", "sshKey", "hostKeys", "knownHosts", "reboot", "pools", "switches"),
    "switches": ("hosts", "user", "port", "jumpHost", "lldpCommand"),
    "switches.hosts.<switch>": ("address", "hostKey"),
    "reboot": ("command", "timeoutSeconds", "maxUnavailable"),
    "pools.<pool>": ("inventory", "group", "hosts", "maxUnavailable"),
    "pools.<pool>.hosts[]": ("address", "user", "port", "jumpHost", "hostKey", "nodeName", "bmc"),
    "pools.<pool>.hosts[].bmc": ("endpoint", "username", "password", "verify", "systemId"),
}

_PERCENT = re.compile(r"^([0-9]+)%$")


@dataclass(frozen=True)
class KnownHost:
    """One line of railyard:hosts.knownHosts: the host names it pins, and its key."""

    patterns: tuple[str, ...]
    key: str
    where: str

    def matches(self, address: str, port: int) -> bool:
        return known_host_matches(self.patterns, address, port)


class _Reader(SectionReader):
    """The section's readers: each returns None (and records why) when a value cannot be used."""

    def __init__(self) -> None:
        super().__init__(f"only {P}.sshKey and a host's bmc.password may be secrets here")

    def address(self, value: Any, path: str, allowed: str = "an IPv4 or IPv6 address, or a DNS name") -> str | None:
        if not isinstance(value, str) or address_kind(value.strip()) is None:
            hint = ""
            if isinstance(value, str) and re.fullmatch(r"[0-9.]+", value.strip()):
                hint = "each of an IPv4 address's four numbers is 0-255"
            elif isinstance(value, str) and ("@" in value or re.search(r":[0-9]+$", value.strip())):
                hint = "give the user in user: and the port in port:"
            self.problem(path, _show(value), allowed, hint)
            return None
        return value.strip()

    def jump_host(self, value: Any, path: str) -> JumpHost | None:
        allowed = "[user@]address[:port], e.g. admin@bastion.example.net or admin@[2001:db8::1]:2222"
        if value is None:
            return None
        if _is_secret(value) or not isinstance(value, str) or not value.strip():
            self.problem(path, _show(value), allowed)
            return None
        text = value.strip()
        user, _, rest = text.rpartition("@")
        port = DEFAULT_PORT
        m = re.fullmatch(r"\[([^\]]+)\](?::([0-9]+))?", rest)
        if m:
            rest, port_text = m.group(1), m.group(2)
        elif rest.count(":") == 1:
            rest, port_text = rest.split(":")
        else:
            port_text = None
        if port_text is not None:
            port = int(port_text) if port_text.isdigit() else 0
        if (user and not LOGIN_NAME.match(user)) or address_kind(rest) is None or not 1 <= port <= 65535:
            self.problem(path, _show(value), allowed)
            return None
        return JumpHost(canonical(rest), user or None, port)

    def endpoint(self, m: Mapping, path: str) -> str | None:
        """A BMC's Redfish endpoint: `https://address[:port]`, without a path."""
        allowed = "https://address[:port], e.g. https://192.0.2.11 or https://[2001:db8::11]:8443"
        raw = m.get("endpoint")
        if raw is None:
            self.missing(path, allowed)
            return None
        value = self.string(m, "endpoint", path, allowed)
        if value is None:
            return None
        try:
            url = urllib.parse.urlsplit(value)
            port = url.port
        except ValueError:
            self.problem(path, _show(value), allowed, "the port is 1-65535")
            return None
        if url.username is not None or url.password is not None:
            # Never echo it: the password may be in it.
            self.problem(path, "a URL with a user or password in it (not shown)", allowed,
                         "give the user as bmc.username and the password as the secret bmc.password; if the "
                         "URL held the password, change it: it was written in the clear")
            return None
        if url.scheme != "https":
            hint = ("the password goes with every request: Redfish is served over HTTPS"
                    if url.scheme == "http" else "")
            self.problem(path, _show(value), allowed, hint)
            return None
        if url.hostname is None or address_kind(url.hostname) is None or port == 0:
            self.problem(path, _show(value), allowed)
            return None
        if url.path not in ("", "/") or url.query or url.fragment:
            self.problem(path, _show(value), allowed, "no path: the Redfish service root, /redfish/v1, is "
                         "found by itself")
            return None
        host = f"[{canonical(url.hostname)}]" if ":" in url.hostname else canonical(url.hostname)
        return f"https://{host}" + (f":{port}" if port is not None and port != 443 else "")

    def bmc(self, value: Any, path: str, at: tuple[str | int, ...], root: Path | None) -> Bmc | None:
        """A listed host's BMC (None when it has none, or when it cannot be used)."""
        if value is None:
            return None
        m = self.mapping(value, path, KEYS["pools.<pool>.hosts[].bmc"])
        if m is None:
            return None
        endpoint = self.endpoint(m, f"{path}.endpoint")
        uallowed = "the BMC's user name: no ':' and no control characters"
        username = None
        if m.get("username") is None:
            self.missing(f"{path}.username", uallowed)
        else:
            username = self.string(m, "username", f"{path}.username", uallowed)
            if username is not None and (":" in username or not username.isprintable()):
                # Basic auth sends `user:password`: a ':' in the user would split it elsewhere.
                self.problem(f"{path}.username", _show(username), uallowed)
                username = None
        where = ".".join(str(k) for k in at[:2]) + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in at[2:])
        password = self.secret(m.get("password"), f"{path}.password", "a Pulumi secret (the BMC's password)",
                               f"pulumi config set --secret --path 'hosts.{where}' (it then asks for the value)",
                               "change the BMC's password: it was written in the clear")
        verify = self.verify(m, f"{path}.verify", root)
        system_id = self.plain(m, "systemId", f"{path}.systemId", "a ComputerSystem id")
        if system_id is not None:
            if isinstance(system_id, int) and not isinstance(system_id, bool):
                system_id = str(system_id)
            if not isinstance(system_id, str) or not system_id.strip() or "/" in system_id:
                self.problem(f"{path}.systemId", _show(system_id),
                             "the id of a ComputerSystem under /redfish/v1/Systems, without '/'",
                             "the last part of its @odata.id, e.g. 1 for /redfish/v1/Systems/1")
                system_id = None
            else:
                system_id = system_id.strip()
        if endpoint is None or username is None or password is None or verify is None:
            return None
        return Bmc(endpoint=endpoint, username=username, password=password, password_at=at, verify=verify,
                   system_id=system_id)

    def verify(self, m: Mapping, path: str, root: Path | None) -> bool | str | None:
        """bmc.verify: true (the system's CAs), false (unchecked) or a CA file (its absolute path)."""
        allowed = "true (the system's CAs), false (not checked), or the path of a CA file (PEM)"
        value = self.plain(m, "verify", path, allowed)
        if value is None:
            return True
        if isinstance(value, bool):
            return value
        if not isinstance(value, str) or not value.strip():
            hint = "write it without quotes" if isinstance(value, str) and value.lower() in ("true", "false") else ""
            self.problem(path, _show(value), allowed, hint)
            return None
        if value.strip().lower() in ("true", "false", "yes", "no"):
            self.problem(path, _show(value), allowed, "write true or false without quotes")
            return None
        written = value.strip()
        file = _project_path(written, root)
        try:
            ssl.create_default_context(cafile=str(file))
        except FileNotFoundError:
            self.problem(path, f"no such file {written!r} (looked at {file})", allowed,
                         "a relative path starts at the project root, where Pulumi.yaml is")
            return None
        except (ssl.SSLError, OSError, ValueError) as exc:
            self.problem(path, f"{written}: no CA certificate could be read from it "
                         f"({getattr(exc, 'strerror', None) or exc})", allowed)
            return None
        return str(file)

    def budget(self, m: Mapping, key: str, path: str) -> Budget | None:
        allowed = "an integer >= 1 (hosts), or a percentage of the pool '1%'..'100%'"
        value = self.plain(m, key, path, allowed)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            if value >= 1:
                return Budget(hosts=value)
        elif isinstance(value, str):
            pm = _PERCENT.fullmatch(value.strip())
            if pm and 1 <= int(pm.group(1)) <= 100:
                return Budget(hosts=None, percent=int(pm.group(1)))
        zero = value in (0, "0", "0%") and not isinstance(value, bool)
        hint = ("a budget of 0 would reboot no host and never finish; 1 reboots one host at a time" if zero
                else "write the number without quotes" if isinstance(value, str) and value.strip().isdigit() else "")
        self.problem(path, _show(value), allowed, hint)
        return None

    def known_hosts(self, m: Mapping) -> list[KnownHost]:
        path = f"{P}.knownHosts"
        allowed = "known_hosts lines `<host>[,<host>...] <type> <base64>` (a list, or one line each in a block)"
        value = self.plain(m, "knownHosts", path, allowed)
        if value is None:
            return []
        if isinstance(value, str):
            lines = [(f"{path} line {i}", ln) for i, ln in enumerate(value.splitlines(), 1)]
        elif isinstance(value, list):
            lines = [(f"{path}[{i}]", ln) for i, ln in enumerate(value)]
        else:
            self.problem(path, _show(value), allowed)
            return []
        out = []
        for where, line in lines:
            if not isinstance(line, str):
                self.problem(where, _show(line), allowed)
                continue
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            parts = text.split()
            if parts[0].startswith("@"):
                self.problem(where, _show(text), allowed, f"{parts[0]} lines are not read here; pin each host's key")
                continue
            why = key_problem(" ".join(parts[1:])) if len(parts) >= 3 else "not `<host> <type> <base64>`"
            patterns = tuple(parts[0].split(","))
            if why is None and any(c in parts[0] for c in "*?!"):
                why = "a pattern (*, ?, !) pins no particular host"
            if why is None:
                for pattern in patterns:
                    bare = re.fullmatch(r"\[([^\]]+)\]:[0-9]+", pattern)
                    if not pattern.startswith("|1|") and address_kind(bare.group(1) if bare else pattern) is None:
                        why = f"{pattern!r} is not a host address"
            if why is not None:
                self.problem(where, _show(text), allowed, why)
                continue
            out.append(KnownHost(patterns, f"{parts[1]} {parts[2]}", where))
        return out


@dataclass(frozen=True)
class _Defaults:
    user: str
    port: int
    jump_host: JumpHost | None
    known: tuple[KnownHost, ...]
    budget: Budget

    def pinned_jump(self, jump: JumpHost | None) -> JumpHost | None:
        return _pin_jump(self.known, jump)


def _pin_jump(known: Sequence[KnownHost], jump: JumpHost | None) -> JumpHost | None:
    """The jump host with the keys knownHosts pins for it."""
    if jump is None:
        return None
    return replace(jump, host_keys=tuple(k.key for k in known if k.matches(jump.address, jump.port)))


@dataclass(frozen=True)
class _Entry:
    """A host as the cross-host rules see it: its pool, the config path a problem about it names
    (`...hosts[3]`, or `...inventory` for an inventory's host), and its place for a person."""

    host: Host
    pool: str
    path: str
    place: str
    key_refused: bool = False
    """Its hostKey was given and refused already: not reported again as missing."""
    jump_path: str = f"{P}.jumpHost"
    """Where its jump host was given (the section's default, its own jumpHost, or the inventory)."""

    def at(self, key: str) -> str:
        """The path of one of its keys (an inventory's host: the inventory key)."""
        return f"{self.path}.{key}" if self.host.name is None else self.path

    @property
    def shown(self) -> str:
        return _show(self.host.address) + (f" ({self.place})" if self.host.name is not None else "")


def parse(section: Any, spec: Spec, root: Path | None = None) -> tuple[HostsConfig | None, list[Problem]]:
    """The HostsConfig of a stack's `railyard:hosts` and its problems (config None when there are any).

    root: where a relative inventory path starts (default: the project root, where Pulumi.yaml is
    and Pulumi runs the program).
    """
    r = _Reader()
    s = section if isinstance(section, dict) else {}
    user = r.user(s, "user", f"{P}.user") or DEFAULT_USER
    port = r.integer(s, "port", f"{P}.port", minimum=1, maximum=65535) or DEFAULT_PORT
    jump = r.jump_host(s.get("jumpHost"), f"{P}.jumpHost")
    ssh_key = r.ssh_key(s, "hosts")
    modes = "one of " + ", ".join(HOST_KEY_MODES)
    # A mode that cannot be read is reported once; no host is then told it lacks a key.
    mode: str | None = "pinned" if s.get("hostKeys") is None else r.string(s, "hostKeys", f"{P}.hostKeys", modes)
    if mode is not None and mode not in HOST_KEY_MODES:
        hint = "write trust-on-first-use" if mode.lower() in ("tofu", "trust", "trust-on-first-connect") \
            else _did_you_mean(mode, HOST_KEY_MODES)
        r.problem(f"{P}.hostKeys", _show(mode), modes, hint)
        mode = None
    known = tuple(r.known_hosts(s))
    jump = _pin_jump(known, jump)

    rpath = f"{P}.reboot"
    rm = r.mapping(s.get("reboot"), rpath, KEYS["reboot"]) or {}
    command = r.string(rm, "command", f"{rpath}.command", "a command line") or DEFAULT_REBOOT_COMMAND
    if "\n" in command:
        r.problem(f"{rpath}.command", _show(command), "one command line", "chain commands with && on one line")
    timeout = r.integer(rm, "timeoutSeconds", f"{rpath}.timeoutSeconds", minimum=1,
                        maximum=MAX_REBOOT_TIMEOUT_SECONDS) \
        or DEFAULT_REBOOT_TIMEOUT_SECONDS
    budget = r.budget(rm, "maxUnavailable", f"{rpath}.maxUnavailable") or Budget()
    reboot = Reboot(command=command, timeout_seconds=timeout, max_unavailable=budget)

    defaults = _Defaults(user, port, jump, known, budget)
    pools, entries = _pools(r, s, spec, root, defaults)
    switches = _switches(r, s, spec, defaults, entries)
    _check_unique(r, entries)
    _check_unique_bmc(r, entries)
    _check_management(r, entries, spec)
    _check_object_store(r, spec)
    # A jump host is pinned whatever hostKeys says: nothing would record a key learned through
    # it, so trusting it on first use would trust it on every use.
    told: set[tuple[str, str]] = set()
    jumps = [(e.jump_path, e.host.jump_host, f" ({e.place})" if e.host.name is not None else "") for e in entries]
    if switches is not None:
        jumps.append((switches.jump_path, switches.jump_host, " (the switches')"))
    for jump_path, j, place in jumps:
        if j is not None and not j.host_keys and (jump_path, str(j)) not in told:
            told.add((jump_path, str(j)))
            r.problem(jump_path, f"no host key for the jump host {j.address}{place}",
                      f"a {P}.knownHosts line for {j.address}" + (f" port {j.port}" if j.port != 22 else ""),
                      "jump hosts are always pinned (trust on first use is for the hosts themselves)")
    if mode == "pinned":
        for e in entries:
            if not e.host.pinned and not e.key_refused:
                r.problem(e.at("hostKey"), f"no host key for {e.host.address}"
                          + (f" ({e.place})" if e.host.name is not None else ""),
                          f"a hostKey, or a {P}.knownHosts line for {e.host.address}",
                          f"{P}.hostKeys is pinned: take the key from the host's console or an ssh-keyscan "
                          "on a trusted network, or set hostKeys: trust-on-first-use")
    if r.problems or ssh_key is None or mode is None:  # (a mode of None was reported above)
        return None, r.problems
    return HostsConfig(ssh_key=ssh_key, host_key_mode=mode, reboot=reboot, pools=tuple(pools),
                       switches=switches), r.problems


def _pools(r: _Reader, s: Mapping, spec: Spec, root: Path | None,
           d: _Defaults) -> tuple[list[PoolHosts], list[_Entry]]:
    path = f"{P}.pools"
    node_pools = [p for p in getattr(spec, "node_pools", ()) if p.name is not None]
    names = [p.name for p in node_pools]
    allowed = "a mapping: node pool name -> {inventory: FILE} or {hosts: [...]}"
    value = s.get("pools")
    if value is None:
        r.problem(path, "nothing (the key is missing)", allowed,
                  f"give the hosts of every node pool ({', '.join(names) or 'railyard:nodePools'})")
        return [], []
    if _is_secret(value) or not isinstance(value, dict):
        r.problem(path, _show(value), allowed)
        return [], []
    for name in value:
        if name not in names:
            r.problem(f"{path}.{name}", "hosts for a pool railyard:nodePools does not have",
                      "one of " + ", ".join(names), _did_you_mean(name, names))
    pools: list[PoolHosts] = []
    entries: list[_Entry] = []
    for i, pool in enumerate(getattr(spec, "node_pools", ())):
        if pool.name is None:
            continue
        ppath = f"{path}.{pool.name}"
        if pool.name not in value:
            r.problem(ppath, "nothing (the key is missing)", f"the hosts of node pool {pool.name}: inventory or hosts",
                      f"each node of pool {pool.name} is an existing server: list its hosts, or name an "
                      "inventory file")
            continue
        pm = r.mapping(value[pool.name], ppath, KEYS["pools.<pool>"])
        if pm is None:
            continue
        budget = r.budget(pm, "maxUnavailable", f"{ppath}.maxUnavailable") or d.budget
        got = _pool_hosts(r, pm, ppath, pool.name, root, d)
        if got is None:
            continue
        mine, given, where, inv, group = got
        if pool.count is not None and given != pool.count:
            r.problem(where, f"{given} host{'s' if given != 1 else ''}"
                      + (f" in group {group} of {pm['inventory']}" if inv else ""),
                      f"{pool.count}: one per node of pool {pool.name} (railyard:nodePools[{i}].count)",
                      f"node {pool.name}-<i> is the pool's i-th host")
        pools.append(PoolHosts(pool.name, tuple(e.host for e in mine), budget, inv, group))
        entries.extend(mine)
    return pools, entries


def _host_key(r: _Reader, m: Mapping, path: str) -> tuple[str | None, bool]:
    """(a hostKey given as `<type> <base64>`, whether one was given and refused)."""
    own = r.plain(m, "hostKey", path, "a host key `<type> <base64>`")
    if own is None:
        return None, m.get("hostKey") is not None  # a secret, refused by plain()
    why = key_problem(own) if isinstance(own, str) else "not a string"
    if why is not None:
        r.problem(path, _show(own), f"a host key `<type> <base64>` (<type>: {', '.join(KEY_TYPES)})",
                  why + "; give a key line of ssh-keyscan's output without its host name")
        return None, True
    return " ".join(own.split()[:2]), False


def _switches(r: _Reader, s: Mapping, spec: Spec, d: _Defaults, hosts: Sequence[_Entry]) -> Switches | None:
    """railyard:hosts.switches, or None where it is absent or cannot be used (and said why)."""
    path = f"{P}.switches"
    if s.get("switches") is None:
        return None
    m = r.mapping(s.get("switches"), path, KEYS["switches"])
    if m is None:
        return None
    fabric = getattr(spec, "fabric", None)
    if fabric is not None and not cabled_by_lldp(fabric.compute.kind):
        r.problem(path, "switches to read LLDP tables from", "nothing on an InfiniBand fabric",
                  "the subnet's cabling is read with ibnetdiscover; name switches by GUID with "
                  "railyard:verify.switchGuids")
        return None
    user = r.user(m, "user", f"{path}.user") or d.user
    port = r.integer(m, "port", f"{path}.port", minimum=1, maximum=65535) or d.port
    own_jump = m.get("jumpHost") is not None
    jump = d.pinned_jump(r.jump_host(m.get("jumpHost"), f"{path}.jumpHost")) if own_jump else d.jump_host
    command = r.string(m, "lldpCommand", f"{path}.lldpCommand", "a command line") or DEFAULT_LLDP_COMMAND
    if "\n" in command:
        r.problem(f"{path}.lldpCommand", _show(command), "one command line",
                  "a command printing the switch's LLDP table as `lldpctl -f json` does")
    allowed = "a mapping: planned switch name -> {address, hostKey}"
    hm = r.plain(m, "hosts", f"{path}.hosts", allowed)
    if not isinstance(hm, dict) or not hm:
        if hm is None:
            r.missing(f"{path}.hosts", allowed)
        else:
            r.problem(f"{path}.hosts", _show(hm), allowed)
        return None
    taken = {h.host.address.lower(): h.place for h in hosts}
    out = []
    for name, value in hm.items():
        spath = f"{path}.hosts.{name}"  # names are held to the plan by plan_problems, once it is planned
        sm = r.mapping(value, spath, KEYS["switches.hosts.<switch>"])
        if sm is None:
            continue
        if sm.get("address") is None:
            r.missing(f"{spath}.address", "an IPv4 or IPv6 address, or a DNS name")
            continue
        address = r.address(r.plain(sm, "address", f"{spath}.address", "an address"), f"{spath}.address")
        key, refused = _host_key(r, sm, f"{spath}.hostKey")
        if address is None:
            continue
        address = canonical(address)
        if address.lower() in taken:
            r.problem(f"{spath}.address", _show(address), "the switch's own management address",
                      f"{taken[address.lower()]} has it too")
            continue
        taken[address.lower()] = spath
        pins = _pins(d, address, port, key)
        if not pins and not refused:
            r.problem(f"{spath}.hostKey", f"no host key for {address}",
                      f"a hostKey, or a {P}.knownHosts line for {address}",
                      "a switch is always pinned: verify only reads it, so nothing would record a key it learned")
            continue
        out.append(Switch(str(name), address, pins))
    return Switches(tuple(out), user=user, port=port, jump_host=jump, command=command,
                    jump_path=f"{path}.jumpHost" if own_jump else f"{P}.jumpHost")


def plan_problems(spec: Spec, fabric: Any) -> list[Problem]:
    """railyard:hosts.switches names only switches of the planned fabric."""
    config: HostsConfig = spec.driver_config
    planned = [sw.name for sw in fabric.switches()]
    out = []
    for sw in config.switches.hosts if config.switches is not None else ():
        if sw.name not in planned:
            out.append(Problem(f"{P}.switches.hosts.{sw.name}", _show(sw.name), "a switch of the plan",
                               _did_you_mean(sw.name, planned) or "`railyard plan` lists them"))
    return out


def _pool_hosts(r: _Reader, pm: Mapping, ppath: str, pool: str, root: Path | None,
                d: _Defaults) -> tuple[list[_Entry], int, str, Path | None, str | None] | None:
    """The pool's hosts (those that could be read), how many it gives, where, its file and group."""
    has_inv, has_hosts = pm.get("inventory") is not None, pm.get("hosts") is not None
    if has_inv == has_hosts:
        r.problem(ppath, "both inventory and hosts" if has_inv else "neither inventory nor hosts",
                  "one of inventory (an Ansible inventory file) or hosts (a list)",
                  "a pool's hosts come from one place")
        return None
    if has_hosts:
        if pm.get("group") is not None:
            r.problem(f"{ppath}.group", _show(pm.get("group")), "nothing: group names a group of an inventory file",
                      "remove it, or give the hosts as inventory: FILE")
        listed = pm["hosts"]
        return _listed(r, pm, ppath, pool, d, root), len(listed) if isinstance(listed, list) else 0, f"{ppath}.hosts", \
            None, None
    return _from_inventory(r, pm, ppath, pool, root, d)


def _pins(d: _Defaults, address: str, port: int, own: str | None) -> tuple[str, ...]:
    keys = [own] if own else []
    for k in d.known:
        if k.matches(address, port) and k.key not in keys:
            keys.append(k.key)
    return tuple(keys)


def _listed(r: _Reader, pm: Mapping, ppath: str, pool: str, d: _Defaults, root: Path | None) -> list[_Entry]:
    hpath = f"{ppath}.hosts"
    allowed = "a list of hosts {address, user, port, jumpHost, hostKey, nodeName, bmc}"
    value = r.plain(pm, "hosts", hpath, allowed)
    if not isinstance(value, list):
        if value is not None:
            r.problem(hpath, _show(value), allowed)
        return []
    out = []
    for i, item in enumerate(value):
        ipath = f"{hpath}[{i}]"
        m = r.mapping(item, ipath, KEYS["pools.<pool>.hosts[]"])
        if m is None:
            continue
        if not isinstance(item, dict):
            r.problem(ipath, _show(item), "a host {address, ...}")
            continue
        address = None
        if m.get("address") is None:
            r.missing(f"{ipath}.address", "an IPv4 or IPv6 address, or a DNS name")
        else:
            address = r.address(r.plain(m, "address", f"{ipath}.address", "an address"), f"{ipath}.address")
        user = r.user(m, "user", f"{ipath}.user") or d.user
        port = r.integer(m, "port", f"{ipath}.port", minimum=1, maximum=65535) or d.port
        own_jump = m.get("jumpHost") is not None
        jump = d.pinned_jump(r.jump_host(m.get("jumpHost"), f"{ipath}.jumpHost")) if own_jump else d.jump_host
        key, refused = _host_key(r, m, f"{ipath}.hostKey")
        node_name = r.plain(m, "nodeName", f"{ipath}.nodeName", "a Kubernetes node name")
        if node_name is not None and (not isinstance(node_name, str) or address_kind(node_name) != "dns"
                                      or node_name != node_name.lower()):
            r.problem(f"{ipath}.nodeName", _show(node_name), "a Kubernetes node name: a lowercase DNS name",
                      "the name its kubelet registers, usually its hostname")
            node_name = None
        bmc = r.bmc(m.get("bmc"), f"{ipath}.bmc", ("pools", pool, "hosts", i, "bmc", "password"), root)
        if address is None:
            continue
        host = Host(address=canonical(address), user=user, port=port, jump_host=jump,
                    host_keys=_pins(d, address, port, key), node_name=node_name, where=ipath, bmc=bmc)
        out.append(_Entry(host, pool, ipath, ipath, key_refused=refused,
                          jump_path=f"{ipath}.jumpHost" if own_jump else f"{P}.jumpHost"))
    return out


def _from_inventory(r: _Reader, pm: Mapping, ppath: str, pool: str, root: Path | None,
                    d: _Defaults) -> tuple[list[_Entry], int, str, Path | None, str | None] | None:
    ipath = f"{ppath}.inventory"
    written = r.string(pm, "inventory", ipath, "a path to an Ansible inventory file (YAML or INI)")
    group = r.string(pm, "group", f"{ppath}.group", "an inventory group name") or "all"
    if written is None:
        return None
    path = _project_path(written, root)
    allowed = "an Ansible inventory file (YAML: .yml, .yaml, .json; INI: any other name)"
    try:
        found = inventory_file.read(path, group)
    except FileNotFoundError:
        r.problem(ipath, f"no such file {written!r} (looked at {path})", allowed,
                  "a relative path starts at the project root, where Pulumi.yaml is")
        return None
    except IsADirectoryError:
        r.problem(ipath, f"a directory {written!r}", allowed, "name the inventory file itself")
        return None
    except UnicodeDecodeError:
        r.problem(ipath, f"{written}: bytes that are not UTF-8", allowed)
        return None
    except OSError as exc:
        r.problem(ipath, f"{written}: a file that cannot be read ({exc.strerror or exc})", allowed)
        return None
    except inventory_file.InventoryError as exc:
        at = f"{written}:{exc.line}" if exc.line else written
        r.problem(ipath, f"{at}: {exc.message}", allowed, "fix the inventory at that line" if exc.line else "")
        return None
    out = []
    for h in found:
        at = f"{written}:{h.line}" if h.line else written
        place = f"host {h.name} at {at}"
        v = h.vars
        raw = v.get("ansible_host", h.name)
        # Each variable read as its key of a listed host is, its problems told with the host.
        sub = _Reader()
        address = sub.address(str(raw), "ansible_host")
        user, port, jump = d.user, d.port, d.jump_host
        if v.get("ansible_user") is not None:
            user = sub.user({"ansible_user": str(v["ansible_user"])}, "ansible_user", "ansible_user") or user
        if v.get("ansible_port") is not None:
            port = sub.integer(v, "ansible_port", "ansible_port", minimum=1, maximum=65535) or port
        args = " ".join(str(v.get(k) or "") for k in ("ansible_ssh_common_args", "ansible_ssh_extra_args"))
        proxy, refused = proxy_jump(args)
        if refused:
            # Connecting straight to the host instead would bypass the bastion the inventory names.
            r.problem(ipath, f"{refused} in the ssh arguments of {place}", "a ProxyJump Railyard can follow "
                      "(-J host or -o ProxyJump=host)", "give the jump host as railyard:hosts.jumpHost instead")
            continue
        if proxy:
            jump = d.pinned_jump(sub.jump_host(proxy, "ProxyJump")) or jump
        for p in sub.problems:
            r.problem(ipath, f"{p.path} {p.found} of {place}", p.allowed, p.hint)
        if address is None:
            continue
        host = Host(address=canonical(address), user=user, port=port, jump_host=jump,
                    host_keys=_pins(d, address, port, None), name=h.name, where=at)
        out.append(_Entry(host, pool, ipath, place, jump_path=ipath if proxy else f"{P}.jumpHost"))
    return out, len(found), ipath, path, group


def _project_path(written: str, root: Path | None) -> Path:
    """A file named in the stack: relative to the project root (default: where Pulumi.yaml is)."""
    if root is None:
        from railyard import paths

        root = paths.project_root()
    path = Path(written).expanduser()
    return path if path.is_absolute() else Path(root) / path


def _check_unique(r: _Reader, entries: list[_Entry]) -> None:
    """Each server once: an address given twice would tune (and reboot) one server as two nodes."""
    seen: dict[str, _Entry] = {}
    for e in entries:
        key = canonical(e.host.address)
        first = seen.setdefault(key, e)
        if first is e:
            continue
        if first.pool == e.pool:
            allowed = f"an address no other host of pool {e.pool} has"
        else:
            allowed = f"a host in one pool only: it is in pool {first.pool} already"
        r.problem(e.at("address"), e.shown, allowed, f"{first.place} has it")


def _check_unique_bmc(r: _Reader, entries: list[_Entry]) -> None:
    """Each BMC's system for one host: a power cycle of one host would cut another's power."""
    seen: dict[tuple[str, str | None], _Entry] = {}
    for e in entries:
        b = e.host.bmc
        if b is None:
            continue
        first = seen.setdefault((b.endpoint.lower(), b.system_id), e)
        if first is not e:
            r.problem(e.at("bmc"), f"{b.endpoint}" + (f" system {b.system_id}" if b.system_id else ""),
                      "a BMC system no other host has", f"{first.place} has it; a BMC with several systems: "
                      "give each host its bmc.systemId")


def _check_management(r: _Reader, entries: list[_Entry], spec: Spec) -> None:
    """The hosts stay where they are: the stack's management network must be the one they are on."""
    fabric = getattr(spec, "fabric", None)
    net = getattr(getattr(fabric, "management", None), "cidr", None)
    if net is None:
        return
    for e in entries:
        if address_kind(e.host.address) != "ipv4":
            continue  # a DNS name is not looked up here; the management network is IPv4
        ip = ipaddress.ip_address(e.host.address)
        if ip not in net:
            r.problem(e.at("address"), e.shown, f"an address inside railyard:fabric.management.cidr ({net})",
                      "the hosts keep their management addresses: set railyard:fabric.management.cidr to the "
                      "network they are on")
        elif net.num_addresses > 2 and ip in (net.network_address, net.broadcast_address):
            which = "network" if ip == net.network_address else "broadcast"
            r.problem(e.at("address"), e.shown, f"a host address of {net}", f"it is the {which} address of "
                      "railyard:fabric.management.cidr")


def _check_object_store(r: _Reader, spec: Spec) -> None:
    """An empty endpoint means the driver's own object store; existing servers come with none."""
    obj = getattr(getattr(spec, "storage", None), "object", None)
    if obj is not None and obj.endpoint == "":
        r.problem("railyard:storage.object.endpoint", "an empty value (the driver's own object store)",
                  "the http(s) URL of the site's S3 endpoint", "the hosts driver has no object store of its own; "
                  "give the endpoint, or remove railyard:storage.object")


# The contract's hooks this module provides (railyard.drivers.RuleHooks).
HOOKS = RuleHooks(keys=KEYS, parse=parse, plan_problems=plan_problems)
