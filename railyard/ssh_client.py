"""What every caller of the system ssh client shares (tuning, the hosts driver, `railyard lab
ssh`): a private key on disk only as a 0600 file created anew in the caller's private directory,
the known_hosts pattern of an address and port, and the ProxyCommand of a jump host. Standard
library only; no caller reads ~/.ssh/config.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

DEFAULT_PORT = 22


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
