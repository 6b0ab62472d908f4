"""What preview says about a pool's hosts before `up` reaches them: which will reboot, and which
cannot be reached (warnings, never errors: preview changes nothing, and `up` refuses them).

Every host is asked for its running command line over SSH, many at once, within one deadline for
the whole pool, so a preview of hundreds of unreachable hosts ends in bounded time.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, wait

import pulumi

from railyard.remote.rollout import boot_state
from railyard.model.boot_args import missing

WORKERS = 32
DEADLINE_S = 20.0
CONNECT_S = 5.0
NAMED = 8  # hosts named per line; the rest are counted


def _names(nodes: list[str]) -> str:
    return ", ".join(nodes[:NAMED]) + (f" and {len(nodes) - NAMED} more" if len(nodes) > NAMED else "")


def check(hosts: list[dict], private_key: str | None, deadline_s: float = DEADLINE_S) -> dict:
    """{"reboot": {node: [missing args]}, "unreachable": {node: reason}, "unchecked": [nodes]}."""
    from railyard.remote.reboots import target

    def one(h: dict) -> tuple[str, str, object]:
        t = target(h)  # its pinned keys, else the one state recorded
        try:
            boot = boot_state(t, private_key, timeout=CONNECT_S + 5)
        except Exception as exc:  # preview reports; it never fails on a host
            return h["node"], "unreachable", str(exc).split(": ", 1)[-1]
        return h["node"], "reboot", missing(h.get("wanted") or (), boot.cmdline)

    out: dict = {"reboot": {}, "unreachable": {}, "unchecked": []}
    pool = ThreadPoolExecutor(max_workers=min(WORKERS, max(1, len(hosts))))
    futures = {pool.submit(one, h): h["node"] for h in hosts}
    done, late = wait(futures, timeout=deadline_s)
    pool.shutdown(wait=False, cancel_futures=True)
    # Only what finished in time; a late answer lands in no one's report.
    for f in done:
        node, kind, value = f.result()
        if kind == "unreachable":
            out["unreachable"][node] = value
        elif value:
            out["reboot"][node] = value
    out["unchecked"] = sorted(futures[f] for f in late)
    return out


def report(pool: str, hosts: list[dict], private_key, budget: int, resource: pulumi.Resource) -> None:
    """Preview's diagnostics for the pool, once its hosts' keys (from state) and the SSH key are known."""

    # A host trusted on first use is checked with the key state recorded; before its first `up`
    # that key is unknown, and preview cannot check it (nor should it learn a key).
    unpinned = [h["node"] for h in hosts if not h.get("host_keys")]

    def say(values: list) -> None:
        key, *learned = values
        keys = dict(zip(unpinned, learned))
        started = time.monotonic()
        found = check([{**h, "host_key": keys.get(h["node"])} for h in hosts], key or None)
        took = time.monotonic() - started
        if found["reboot"]:
            pulumi.log.info(f"pool {pool}: up reboots {_names(sorted(found['reboot']))}, {budget} at a time "
                            f"(running without {' '.join(next(iter(found['reboot'].values())))})", resource)
        else:
            checked = len(hosts) - len(found["unreachable"]) - len(found["unchecked"])
            pulumi.log.info(f"pool {pool}: no host needs a reboot ({checked} checked)", resource)
        if found["unreachable"]:
            first = sorted(found["unreachable"])
            pulumi.log.warn(f"pool {pool}: {len(first)} host(s) unreachable, which up refuses: {_names(first)} "
                            f"({found['unreachable'][first[0]]})", resource)
        if found["unchecked"]:
            pulumi.log.warn(f"pool {pool}: {_names(found['unchecked'])} not checked within {took:.0f} s", resource)

    pulumi.Output.all(private_key, *[h["host_key"] for h in hosts if not h.get("host_keys")]).apply(say)
