"""Running the model's own Python on a host over SSH, without copying a file there.

The host runs `python3 -I -S -` and reads one program on stdin (railyard.model.bundle: the
modules' sources, an importer serving them from memory, a call of the entry point whose JSON answer
is the last line of stdout). So discovery uses the very code the controller tests (one sysfs
discovery implementation), needs only the standard library on the host, and leaves nothing
behind.
"""

from __future__ import annotations

from typing import Any, Sequence

from railyard.remote.ssh import Result, SshError, Target, run
from railyard.model import bundle


def call(target: Target, modules: list[str], entry: str, args: Sequence[Any] = (), *, private_key: str | None,
         timeout: float = 120) -> tuple[Any, Result]:
    """Run `entry` on the host; (its answer, the SSH result). A failing program is an SshError
    naming the host and the program's last error line."""
    result = run(target, ["python3", "-I", "-S", "-"], private_key=private_key,
                 input=bundle.program(modules, entry, args), timeout=timeout)
    if result.rc != 0 or not result.stdout.strip():
        err = [line for line in result.stderr.splitlines() if line.strip()]
        raise SshError(f"{target.name}: {entry} failed on {target.address} (exit {result.rc}): "
                       f"{err[-1] if err else 'no output'}")
    try:
        return bundle.answer(result.stdout), result
    except ValueError:
        raise SshError(f"{target.name}: {entry} on {target.address} printed no JSON answer") from None


def host_facts(target: Target, *, private_key: str | None, timeout: float = 120,
               lldp: bool = False) -> tuple[dict, Result]:
    """The host's hardware facts (sysfs_discovery.host_facts), discovered over SSH; with lldp, its
    LLDP neighbours too (an Ethernet fabric's cabling)."""
    modules, entry = bundle.HOST_FACTS
    return call(target, list(modules), entry, bundle.host_facts_args(lldp=lldp), private_key=private_key,
                timeout=timeout)
