"""What every caller of the system ssh client shares (tuning, the hosts and openstack drivers,
`railyard lab ssh`): a private key on disk only as a 0600 file created anew in the caller's private
directory, the known_hosts pattern of an address and port, the ProxyCommand of a jump host, and
the forms a stack gives them in (an address, a host or public key). Standard library only; no
caller reads ~/.ssh/config.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import re
import shlex
import struct
from pathlib import Path

DEFAULT_PORT = 22

# The inventory variable of a host's jump host, {address, user, port, host_keys}, where its driver
# reaches it through one; the tuning run makes its ProxyCommand from it.
JUMP_VAR = "railyard_jump_host"

# Host key types OpenSSH offers for a server (DSA is disabled in OpenSSH since 7.0).
KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa")

_DNS_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


def address_kind(text: str) -> str | None:
    """"ipv4", "ipv6" or "dns" for a valid host address, None otherwise (its form only: no lookup).

    No scope id (`fe80::1%eth0`): ssh expands `%` in host names, and a link-local address is not
    a server's management address anyway."""
    if "%" in text:
        return None
    try:
        return "ipv4" if ipaddress.ip_address(text).version == 4 else "ipv6"
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    labels = name.lower().split(".")
    if not name or len(name) > 253 or not all(_DNS_LABEL.match(label) for label in labels):
        return None
    if labels[-1].isdigit():
        return None  # 192.0.2.300 is a mistyped address, not a name
    return "dns"


def canonical(address: str) -> str:
    """The form two spellings of one address share (`2001:DB8::01` and `2001:db8::1`, `A.example.`)."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address.lower().rstrip(".")


def key_problem(line: str) -> str | None:
    """Why `line` is not a key `<type> <base64> [comment]` of a type OpenSSH offers, or None."""
    parts = line.split()
    if len(parts) < 2:
        return "not `<type> <base64>`"
    kind, blob = parts[0], parts[1]
    if kind not in KEY_TYPES and blob in KEY_TYPES:
        return f"{kind!r} in front is a host name; a host key is `<type> <base64>` alone"
    if kind not in KEY_TYPES:
        return f"key type {kind!r} is not a host key type"
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        return "the key is not base64"
    # The SSH wire form begins with its own type name: a key pasted under the wrong type fails here.
    if len(raw) < 4:
        return "the key is too short"
    (n,) = struct.unpack(">I", raw[:4])
    if raw[4:4 + n] != kind.encode():
        return f"the key's encoding does not begin with its type {kind!r}"
    return None


def write_key(directory: Path | str, key: str, name: str = "id") -> Path:
    """The key as `directory/name`, 0600, created by this call (never an existing file)."""
    path = Path(directory) / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key if key.endswith("\n") else key + "\n")
    return path


def host_pattern(address: str, port: int = DEFAULT_PORT) -> str:
    """How known_hosts names a host reached on `port`."""
    return address if int(port) == DEFAULT_PORT else f"[{address}]:{port}"


def options(known_hosts: Path | str, key_file: Path | str | None = None, *, strict: bool = True,
            connect_timeout: int | None = None) -> list[str]:
    """The client's options: no config file, only `known_hosts` (strict: a key must be there;
    else a new host's key is accepted and written there), and the key file alone when given
    (no agent, no default identities); without one, ssh-agent's keys."""
    out = ["-F", "/dev/null", "-o", "BatchMode=yes"]
    if connect_timeout is not None:
        out += ["-o", f"ConnectTimeout={connect_timeout}"]
    out += ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"StrictHostKeyChecking={'yes' if strict else 'accept-new'}", "-o", "LogLevel=ERROR",
            "-o", "HashKnownHosts=no"]
    if key_file is not None:
        out += ["-i", str(key_file), "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none"]
    return out


def known_hosts_lines(address: str, port: int, keys: list[str] | tuple[str, ...]) -> str:
    """known_hosts lines pinning `keys` (each `<type> <base64>`) for the host reached on `port`."""
    return "".join(f"{host_pattern(address, port)} {key}\n" for key in keys)


def proxy_command(options: list[str], jump_address: str, jump_user: str | None, jump_port: int,
                  target_address: str, target_port: int) -> str:
    """OpenSSH's ProxyCommand reaching the target through the jump host with `options` (the
    caller's known_hosts and key). The validated target is written out, not ssh's %h, so nothing
    of ssh's own expansion reaches the shell that runs it."""
    hop = ["ssh", *options, "-p", str(jump_port), "-W", f"[{target_address}]:{target_port}",
           f"{jump_user}@{jump_address}" if jump_user else jump_address]
    return shlex.join(hop)


def known_host_matches(patterns: tuple[str, ...] | list[str], address: str, port: int) -> bool:
    """Whether a known_hosts line's host patterns name the host reached at `address` on `port`:
    plain (`host`, `[host]:port`) or hashed (`|1|salt|hmac`, as HashKnownHosts writes them)."""
    name = canonical(address)
    written = host_pattern(name, port)
    for pattern in patterns:
        if pattern.startswith("|1|"):
            try:
                _, _, salt, digest = pattern.split("|")
                mac = hmac.new(base64.b64decode(salt), written.encode(), hashlib.sha1).digest()
            except (ValueError, binascii.Error):
                continue
            if hmac.compare_digest(base64.b64encode(mac).decode(), digest):
                return True
            continue
        m = re.fullmatch(r"\[([^\]]+)\]:([0-9]+)", pattern)
        host, at = (m.group(1), int(m.group(2))) if m else (pattern, DEFAULT_PORT)
        if at == port and canonical(host) == name:
            return True
    return False


def proxy_jump(args: str) -> tuple[str | None, str | None]:
    """(the ProxyJump an inventory's ssh arguments give, or None; what in them cannot be followed,
    or None): -J HOST, -JHOST, -o ProxyJump=HOST, -o 'ProxyJump HOST', quoted as a shell would."""
    try:
        words = shlex.split(args)
    except ValueError:
        return None, "unbalanced quotes"
    jump = None
    i = 0
    while i < len(words):
        w = words[i]
        option = None
        if w == "-o" and i + 1 < len(words):
            option, i = words[i + 1], i + 1
        elif w.startswith("-o") and len(w) > 2:
            option = w[2:]
        elif w == "-J" and i + 1 < len(words):
            jump, i = words[i + 1], i + 1
        elif w.startswith("-J") and len(w) > 2:
            jump = w[2:]
        if option is not None:
            key, _, value = option.replace("=", " ", 1).partition(" ")
            if key.lower() == "proxycommand":
                return None, "a ProxyCommand"
            if key.lower() == "proxyjump":
                jump = value.strip()
        i += 1
    if jump is not None and ("," in jump or not jump):
        return None, f"ProxyJump {jump!r} (one jump host only)"
    return jump, None
