"""The rolling reboot that applies boot-time settings (the kernel command line) to a pool's hosts
(the hosts driver's servers, the lab driver's nodes).

A host reboots only when its running kernel lacks an argument its tuning asks for
(model.boot_args). Hosts reboot `budget` at a time, in pool order: each batch gets the reboot
command, then every host of it must come back (a new boot id, answering SSH) within the timeout
with the arguments on its command line, and pass `after_batch` (the site playbook again, which
restores what a boot resets and verifies), before the next batch starts. The first host that
does not come back, or comes back wrong, stops the rollout: no further host is rebooted, and
the error names it and the hosts left as they were.

A host with a BMC (`power_cycles`) that does not come back within the timeout is first
power-cycled through it, once, and gets the timeout again from then: a hung shutdown or a kernel
that froze on the way down is what a BMC's reset is for, and a host that still does not come
back stops the rollout as above.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from railyard.remote.ssh import HostKeyMismatch, SshError, Target, Unreachable, run
from railyard.model.boot_args import missing

POLL_S = 1.0
STATE_COMMAND = "cat /proc/sys/kernel/random/boot_id /proc/cmdline"


class RolloutError(Exception):
    pass


class PowerCycleError(Exception):
    """A host's BMC could not power-cycle it (what the driver's power cycle raises)."""


@dataclass(frozen=True)
class Boot:
    boot_id: str
    cmdline: str


@dataclass
class Rollout:
    """What a rollout did: the boots seen last per host, and each reboot's down and up times."""

    booted: dict[str, str] = field(default_factory=dict)
    boots: dict[str, str] = field(default_factory=dict)
    """Each host's boot id once its run-time settings were last put back (state keeps it)."""
    reboots: list[dict] = field(default_factory=list)


def boot_state(target: Target, private_key: str | None, timeout: float = 30) -> Boot:
    result = run(target, STATE_COMMAND, private_key=private_key, timeout=timeout)
    lines = result.stdout.splitlines()
    if result.rc != 0 or not lines:
        raise SshError(f"{target.name}: cannot read its boot id and command line: {result.stderr.strip()}")
    return Boot(lines[0].strip(), " ".join(lines[1:]).strip())


def _wait_back(target: Target, old: str, private_key: str | None, deadline: float) -> Boot:
    while True:
        try:
            now = boot_state(target, private_key, timeout=max(1.0, min(15.0, deadline - time.monotonic())))
            if now.boot_id != old:
                return now
        except HostKeyMismatch:
            raise
        except SshError:
            pass  # still down
        if time.monotonic() >= deadline:
            raise TimeoutError
        time.sleep(POLL_S)


def _power_cycled(target: Target, old: str, cycle: Callable[[float], str], *, late: str, halted: str,
                  timeout: float, private_key: str | None, progress: Callable[[str], None]) -> tuple[Boot, str]:
    """The boot of a host that did not come back (`late` says so) once its BMC power-cycled it,
    and what the BMC was asked; RolloutError when the BMC cannot, or it does not come back
    within the timeout of the power cycle either."""
    progress(f"{late}; power-cycling it through its BMC")
    deadline = time.monotonic() + timeout
    try:
        reset = cycle(deadline)
    except PowerCycleError as exc:
        raise RolloutError(f"{late}, and its BMC could not power-cycle it: {exc}; {halted}") from None
    try:
        now = _wait_back(target, old, private_key, deadline)
    except TimeoutError:
        raise RolloutError(f"{late}, nor within {timeout:g} s of being power-cycled through its BMC ({reset}); "
                           f"{halted}") from None
    progress(f"{target.name}: back after its BMC reset it ({reset})")
    return now, reset


def _press(target: Target, command: str, private_key: str | None, halted: str) -> None:
    """Run the reboot command; RolloutError where the host refused it."""
    try:
        result = run(target, command, private_key=private_key, timeout=30)
    except HostKeyMismatch:
        raise
    except SshError:
        return  # the connection went down with the host
    if result.rc not in (0, 255) and result.rc > 0:
        # Refused (not root, no such command): the host is not going down.
        said = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "no output"
        raise RolloutError(f"{target.name}: `{command}` exited {result.rc}: {said}; {halted}")


def reboot(target: Target, *, command: str, timeout: float, private_key: str | None,
           progress: Callable[[str], None] = lambda _: None,
           power_cycle: Callable[[float], str] | None = None) -> dict:
    """Reboot one host now, whatever its command line (the repair loop's reset): the command, then
    a new boot id answering SSH within the timeout. Its down and up times (and `bmc_reset`, what
    its BMC was asked, where one reset it); RolloutError when it refuses or does not come back.

    power_cycle: the host's BMC's (as roll's power_cycles), for a host that does not come back
    within the timeout, or that does not answer SSH at all (ssh.Unreachable), so cannot run the
    command: a hung kernel is the usual reason to reset a node, and only its BMC reaches it then.
    A host that answers and refuses (its key, the user, no agent) is never power-cycled. With no
    boot id read before, the first answer after the cycle is taken for the new boot."""
    halted = "the reset failed"
    try:
        boot = boot_state(target, private_key)
    except Unreachable as exc:
        if power_cycle is None:
            raise
        down = time.time()
        # No boot id to tell the new boot from the old: the first answer after the cycle is it.
        _, reset = _power_cycled(target, "", power_cycle, late=f"{target.name} does not answer SSH "
                                 f"({str(exc).split(': ', 1)[-1]})", halted=halted, timeout=timeout,
                                 private_key=private_key, progress=progress)
        return {"node": target.name, "down_at": down, "up_at": time.time(), "bmc_reset": reset}
    progress(f"{target.name}: {command}")
    down = time.time()
    _press(target, command, private_key, halted)
    try:
        _wait_back(target, boot.boot_id, private_key, time.monotonic() + timeout)
    except TimeoutError:
        late = f"{target.name} did not come back within {timeout:g} s of `{command}`"
        if power_cycle is None:
            raise RolloutError(late) from None
        _, reset = _power_cycled(target, boot.boot_id, power_cycle, late=late, halted=halted, timeout=timeout,
                                 private_key=private_key, progress=progress)
        return {"node": target.name, "down_at": down, "up_at": time.time(), "bmc_reset": reset}
    return {"node": target.name, "down_at": down, "up_at": time.time()}


def roll(hosts: list[tuple[Target, tuple[str, ...]]], *, budget: int, command: str, timeout: float,
         private_key: str | None, after_batch: Callable[[list[str]], None] | None = None,
         progress: Callable[[str], None] = lambda _: None, known_boots: dict[str, str] | None = None,
         power_cycles: Mapping[str, Callable[[float], str]] | None = None) -> Rollout:
    """Reboot the hosts whose kernel lacks their wanted arguments, `budget` at a time.

    known_boots: the boot ids of the last rollout (state). A host that booted since without this
    rollout's knowing (a rollout that failed after its reboot, a power cut) gets `after_batch` too:
    its boot reset what the playbook set at run time.

    power_cycles: per host with a BMC, what power-cycles it (given the time.monotonic() deadline
    of its wait, it returns what it asked the BMC for, or raises PowerCycleError)."""
    out = Rollout()
    pending = []
    rebooted_elsewhere = []
    for target, wanted in hosts:
        boot = boot_state(target, private_key)
        out.booted[target.name] = boot.cmdline
        out.boots[target.name] = boot.boot_id
        if missing(wanted, boot.cmdline):
            pending.append((target, wanted, boot))
        elif known_boots and target.name in known_boots and known_boots[target.name] != boot.boot_id:
            rebooted_elsewhere.append(target.name)
    if rebooted_elsewhere and after_batch is not None:
        progress(f"{', '.join(rebooted_elsewhere)}: booted since the last rollout; tuning them again")
        after_batch(rebooted_elsewhere)
    names = [t.name for t, _, _ in pending]
    for start in range(0, len(pending), budget):
        batch = pending[start:start + budget]
        left = names[start + len(batch):]
        halted = "the rollout stopped" + (f", and {', '.join(left)} were not rebooted" if left else "")
        downs = {}
        for target, _, _ in batch:
            progress(f"{target.name}: {command}")
            downs[target.name] = time.time()
            _press(target, command, private_key, halted)
        back: list[str] = []
        try:
            for target, wanted, boot in batch:
                deadline = time.monotonic() + timeout
                reset = None
                try:
                    now = _wait_back(target, boot.boot_id, private_key, deadline)
                except TimeoutError:
                    late = f"{target.name} did not come back within {timeout:g} s of `{command}`"
                    cycle = (power_cycles or {}).get(target.name)
                    if cycle is None:
                        raise RolloutError(f"{late}; {halted}") from None
                    now, reset = _power_cycled(target, boot.boot_id, cycle, late=late, halted=halted,
                                               timeout=timeout, private_key=private_key, progress=progress)
                out.reboots.append({"node": target.name, "down_at": downs[target.name], "up_at": time.time(),
                                    **({"bmc_reset": reset} if reset else {})})
                out.booted[target.name] = now.cmdline
                out.boots[target.name] = now.boot_id
                lacks = missing(wanted, now.cmdline)
                if lacks:
                    raise RolloutError(
                        f"{target.name} came back without {' '.join(lacks)} on its kernel command line; {halted}")
                back.append(target.name)
                progress(f"{target.name}: back with the new command line")
        except RolloutError as stopped:
            # Hosts of the batch that came back get their run-time settings back even when another
            # one stops the rollout (a boot reset them).
            if after_batch is not None and back:
                try:
                    after_batch(back)
                except RolloutError as also:
                    raise RolloutError(f"{stopped}\n{also}") from None
            raise
        if after_batch is not None:
            after_batch(back)
    return out
