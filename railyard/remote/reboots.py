"""A pool's rolling reboot as a Pulumi dynamic resource (railyard.remote.rollout does the work).

Its inputs are the pool's hosts (how SSH reaches each, and the kernel arguments its boot must
have), the reboot command, budget and timeout, and what re-tunes a host a boot reset (the tuning
run's hosts and secret variables). Its state is the command line each host was last seen booted
with, so a later diff knows, without reaching any host, whether one still lacks what it wants; a
second `up` reboots nothing. The hosts driver reboots its servers with it (adding BMC power
cycles); the lab driver its nodes.
"""

from __future__ import annotations

import sys
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from railyard.dynamic import TypedResource


def target(props: dict):
    """How SSH reaches a host: its pinned keys, else the key state recorded (trusted on first use)."""
    from railyard.remote.ssh import JumpHost, Target

    jump = props.get("jump")
    return Target(name=props["node"], address=props["address"], user=props["user"], port=int(props["port"]),
                  jump=JumpHost(jump["address"], jump.get("user"), int(jump["port"]), tuple(jump["host_keys"]))
                  if jump else None,
                  host_keys=tuple(props.get("host_keys") or ()) or
                  ((props["host_key"],) if props.get("host_key") else ()))


def _targets(props: dict) -> list:
    """A pool's hosts as the rollout reaches them, each with the arguments its boot must have."""
    return [(target(h), tuple(h.get("wanted") or ())) for h in props["hosts"]]


def _progress(line: str) -> None:
    # The engine shows what a provider writes on stderr in `up`'s output.
    print(line, file=sys.stderr, flush=True)


class RebootsProvider(ResourceProvider):
    """A pool's rolling reboot (rollout.roll)."""

    serialize_as_secret_always = False

    def power_cycles(self, props: dict) -> dict:
        """Per host with a BMC, what power-cycles it (rollout.roll's power_cycles); none here."""
        return {}

    def _roll(self, props: dict, olds: dict | None = None) -> dict:
        from railyard.remote import rollout
        from railyard.tuning import runner
        from railyard.dynamic import wire_numbers

        def verify(nodes: list[str]) -> None:
            # A boot resets what the playbook set at run time (VFs, counters); the playbook again
            # restores it and its verify role checks the host against the plan.
            if not props.get("tuning_hosts"):
                return
            hosts = {n: h for n, h in props["tuning_hosts"].items() if n in nodes}
            result = runner.run_isolated({"stack": props["stack"], "hosts": wire_numbers(hosts),
                                          "private_key": props.get("private_key"), "user": props["user"],
                                          "secret_vars": props.get("secret_vars") or {}})
            if not result["ok"]:
                raise rollout.RolloutError(f"after the reboot of {', '.join(nodes)}, tuning failed; the rollout "
                                           "stopped:\n  " + "\n  ".join(result["failures"])
                                           + f"\nartifacts: {result['run_dir']}")

        done = rollout.roll(_targets(props), budget=int(props["budget"]), command=props["command"],
                            timeout=float(props["timeout"]), private_key=props.get("private_key") or None,
                            after_batch=verify, known_boots=(olds or {}).get("boots"), progress=_progress,
                            power_cycles=self.power_cycles(props))
        return {"booted": done.booted, "boots": done.boots, "reboots": done.reboots}

    def create(self, props):
        return CreateResult(id_=f"{props['stack']}/{props['pool']}/reboots", outs={**props, **self._roll(props)})

    def diff(self, _id, olds, news):
        from railyard.model.boot_args import missing

        booted = olds.get("booted") or {}
        # A tuning run (tuning_run: its run) may have rewritten the bootloader's settings, and a
        # failed rollout leaves `booted` as it was before it: either way the hosts are asked again.
        keys = ("budget", "command", "timeout", "tuning_run")
        stale = any(h["node"] not in booted or missing(h.get("wanted") or (), booted[h["node"]])
                    for h in news["hosts"])
        moved = [(h["node"], h["address"], h["port"]) for h in news["hosts"]] != \
                [(h["node"], h["address"], h["port"]) for h in olds.get("hosts") or []]
        return DiffResult(changes=stale or moved or any(olds.get(k) != news.get(k) for k in keys),
                          replaces=[], delete_before_replace=False)

    def update(self, _id, olds, news):
        return UpdateResult(outs={**news, **self._roll(news, olds)})

    def read(self, id_, props):
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id, _props):
        return None  # a reboot is not undone; destroy's cleanup says what the next boot drops


class Reboots(TypedResource, module="railyard", name="Reboots"):
    """Outputs: `booted` ({node: the command line it runs with}), `boots` ({node: its boot id when
    last tuned}) and `reboots` (this run's [{node, down_at, up_at}], Unix times, with `bmc_reset`:
    what its BMC was asked, for a host its BMC power-cycled)."""

    booted: pulumi.Output[dict]
    reboots: pulumi.Output[list]

    def __init__(self, name: str, *, stack: str, pool: str, hosts: list[dict], budget: int, command: str,
                 timeout: int, private_key: Any, tuning_hosts: Any, secret_vars: Any, user: str,
                 tuning_run: Any = None, provider: RebootsProvider | None = None,
                 extra_secrets: dict[str, Any] | None = None, opts: pulumi.ResourceOptions | None = None):
        """hosts: [{node, address, user, port, jump, host_keys, host_key, wanted, ...}];
        extra_secrets: a driver's own secret inputs (a BMC's password), by name."""
        extra = {k: pulumi.Output.secret(v) if v is not None else None for k, v in (extra_secrets or {}).items()}
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
            additional_secret_outputs=["private_key", "secret_vars", *extra]))
        super().__init__(provider or RebootsProvider(), name, {
            "stack": stack, "pool": pool, "hosts": hosts, "budget": budget, "command": command,
            "timeout": timeout, "user": user, "tuning_run": tuning_run,
            "private_key": pulumi.Output.secret(private_key) if private_key is not None else None,
            "tuning_hosts": tuning_hosts,
            "secret_vars": pulumi.Output.secret(secret_vars) if secret_vars is not None else None,
            **extra,
            "booted": None, "boots": None, "reboots": None,
        }, opts)
