"""SSH to servers Railyard did not make: the system ssh client, with the host key pinned or
trusted on first use, the key from the stack's secret or from ssh-agent, and an optional jump
host reached with the same checks.

Nothing here reads ~/.ssh/config or the user's known_hosts: every connection is described by its
Target alone (`-F /dev/null`), so what the stack says is what happens. A private key lives only for
one connection, in a 0600 file in a 0700 directory; a host key learned on first use is returned,
so the caller records it in state and later connections pin it.
"""

from __future__ import annotations

import os
import select
import shlex
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from railyard.ssh_client import DEFAULT_PORT, known_host_matches, known_hosts_lines, options, proxy_command, write_key

CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class JumpHost:
    """The host SSH goes through first (OpenSSH's ProxyJump), written `[user@]address[:port]`."""

    address: str
    user: str | None = None
    """None: ssh's default, the local user name."""
    port: int = DEFAULT_PORT
    host_keys: tuple[str, ...] = ()
    """Its pinned keys (`<type> <base64>`, from railyard:hosts.knownHosts); empty: trusted on
    first use (only where hostKeys is trust-on-first-use)."""

    def __str__(self) -> str:
        address = f"[{self.address}]" if ":" in self.address and self.port != DEFAULT_PORT else self.address
        return (f"{self.user}@" if self.user else "") + address + (
            f":{self.port}" if self.port != DEFAULT_PORT else "")


class SshError(Exception):
    """A connection or a command failed; the message names the host."""


class HostKeyMismatch(SshError):
    pass


class Unreachable(SshError):
    """No one answered: the connection was refused, timed out or had no route, or nothing came back
    within the timeout. A host that answered and refused (its key, the user) is not unreachable."""


# ssh's own words (its last line) for a connection that reached no sshd.
UNREACHABLE = ("Connection refused", "Connection timed out", "No route to host", "Network is unreachable",
               "Host is down", "Operation timed out")


@dataclass(frozen=True)
class Target:
    name: str
    """The planned node this host is (for messages)."""
    address: str
    user: str = "root"
    port: int = 22
    jump: JumpHost | None = None
    """Reached first, with the same key and its own pinned keys (or trusted on first use)."""
    host_keys: tuple[str, ...] = ()
    """`<type> <base64>` each, as a known_hosts line has them; empty: trust on first use."""


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str
    host_key: str
    """The host's key as state records it: the first pinned key, or the one learned now."""


def _learned(known: Path, address: str, port: int) -> str | None:
    for line in known.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and known_host_matches(fields[0].split(","), address, port):
            return f"{fields[1]} {fields[2]}"
    return None


def _argv(target: Target, d: str, private_key: str | None, command: list[str] | str) -> tuple[list[str], Path]:
    """ssh's argv for `command` on the host, with its known_hosts and key in the directory d."""
    for where in (target.address, target.jump.address if target.jump else ""):
        if "%" in where or where.startswith("-") or any(c.isspace() for c in where):
            raise SshError(f"{target.name}: {where!r} is not a host address ssh may be given")
    if private_key is None and not os.environ.get("SSH_AUTH_SOCK"):
        raise SshError(f"{target.name}: the stack's key is ssh-agent's, but SSH_AUTH_SOCK is not set")
    known = Path(d) / "known_hosts"
    known.write_text(known_hosts_lines(target.address, target.port, target.host_keys)
                     + (known_hosts_lines(target.jump.address, target.jump.port, target.jump.host_keys)
                        if target.jump is not None else ""))
    key_file = write_key(d, private_key) if private_key is not None else None
    argv = ["ssh", *options(known, key_file, strict=bool(target.host_keys), connect_timeout=CONNECT_TIMEOUT_S), "-p", str(target.port)]
    if target.jump is not None:
        jump = target.jump
        hop = proxy_command(options(known, key_file, strict=bool(jump.host_keys), connect_timeout=CONNECT_TIMEOUT_S), jump.address, jump.user,
                            jump.port, target.address, target.port)
        argv += ["-o", f"ProxyCommand={hop}"]
    remote = command if isinstance(command, str) else shlex.join(command)
    return [*argv, f"{target.user}@{target.address}", remote], known


def _refused(target: Target, stderr: str) -> SshError:
    """What ssh's own failure (its status 255) says: another host key, no way in, or no answer."""
    err = stderr.strip()
    if "host key verification failed" in err.lower() or "REMOTE HOST IDENTIFICATION HAS CHANGED" in err:
        kinds = ", ".join(k.split(" ")[0] for k in target.host_keys) or "learned on first use"
        return HostKeyMismatch(f"{target.name}: the host key of {target.address} is not the pinned one "
                               f"({kinds}); nothing was done there")
    last = err.splitlines()[-1] if err else "ssh exited 255"
    kind = Unreachable if any(words in last for words in UNREACHABLE) else SshError
    return kind(f"{target.name}: cannot reach {target.user}@{target.address}: {last}")


def run(target: Target, command: list[str] | str, *, private_key: str | None, input: str | None = None,
        timeout: float = 120) -> Result:
    """Run `command` on the host. private_key None: ssh-agent (SSH_AUTH_SOCK) holds the key.

    Raises HostKeyMismatch when the host's key is not the pinned one, SshError when the host
    cannot be reached or authenticated; a command that exits non-zero is a Result, not an error.
    """
    with tempfile.TemporaryDirectory(prefix="railyard-ssh-") as d:
        argv, known = _argv(target, d, private_key, command)
        try:
            proc = subprocess.run(argv, input=input, text=True, capture_output=True, timeout=timeout,
                                  stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise Unreachable(f"{target.name}: {target.address} did not answer within {timeout:g} s") from None
        if proc.returncode == 255:
            raise _refused(target, proc.stderr)
        host_key = _learned(known, target.address, target.port)
        if host_key is None:
            raise SshError(f"{target.name}: ssh learned no host key for {target.address}")
        return Result(proc.returncode, proc.stdout, proc.stderr, host_key)


@dataclass
class Session:
    """A command left running on a host (session()): the first line it printed, and whether it is
    gone since (ssh exited, or its heartbeat could not be written)."""

    line: str
    proc: subprocess.Popen
    broken: threading.Event

    def lost(self) -> bool:
        return self.broken.is_set() or self.proc.poll() is not None


@contextmanager
def session(target: Target, command: list[str] | str, *, private_key: str | None,
            timeout: float = 30, heartbeat: float | None = None) -> Iterator[Session]:
    """Start `command` on the host and keep it running while the block runs, giving the block
    the first line it prints. The command is to read its stdin to its end: that end comes when
    the block leaves, or when this process dies and ssh's connection with it, so what the command
    holds (a lock) is never left held. heartbeat: seconds between the empty lines written to its
    stdin meanwhile, for a command that lets go when they stop (the network gone). Raises as run()
    does, and Unreachable where no line comes within `timeout` seconds."""
    with tempfile.TemporaryDirectory(prefix="railyard-ssh-") as d:
        argv, _ = _argv(target, d, private_key, command)
        if heartbeat is not None:
            # The host asked too: ssh ends where it stops answering, so lost() sees a network gone.
            argv[1:1] = ["-o", f"ServerAliveInterval={max(1, round(heartbeat))}", "-o", "ServerAliveCountMax=3"]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stdin, stop, broken = proc.stdin, threading.Event(), threading.Event()

        def beat() -> None:
            while heartbeat is not None and not stop.wait(heartbeat):
                try:
                    stdin.write(b"\n")
                    stdin.flush()
                except (BrokenPipeError, ValueError, OSError):
                    broken.set()
                    return

        beater = threading.Thread(target=beat, name=f"ssh-beat-{target.name}", daemon=True)
        try:
            line, deadline = b"", time.monotonic() + timeout
            while not line.endswith(b"\n"):
                ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
                chunk = os.read(proc.stdout.fileno(), 1) if ready else None
                if chunk is None:
                    raise Unreachable(f"{target.name}: {target.address} did not answer within {timeout:g} s")
                if not chunk:
                    break
                line += chunk
            if not line and _waited(proc, 5) == 255:
                raise _refused(target, proc.stderr.read().decode(errors="replace"))
            beater.start()
            yield Session(line.decode(errors="replace").strip(), proc, broken)
        finally:
            stop.set()
            if beater.is_alive():
                beater.join(timeout=5)
            if beater.is_alive():
                proc.kill()  # ssh stopped reading: the write the beat is blocked in fails now
                beater.join()
            try:
                proc.stdin.close()
            except OSError:
                pass
            if _waited(proc, 10) is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()


def _waited(proc: subprocess.Popen, timeout: float) -> int | None:
    """Its exit status, or None where it is still running after `timeout` seconds."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
