"""Pulumi dynamic resources of the hosts driver. The provider classes live in this importable
module so that state pickles them by reference (as the lab's do) and hold no secret.

HostMachine is one existing server: create and update reach it over SSH with its pinned host key
(or learn it on first use), discover its hardware with the model's own sysfs discovery, and check
it against the pool's SKU before anything else may touch it. A mismatch fails the resource with
every difference named, so nothing that depends on the host (its tuning) runs. Outputs: the host
key SSH accepted, to be pinned from then on, and the hardware facts, so a refresh shows drift.
Delete changes nothing on the host: discovery put nothing there.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

# What reaching and checking a host depends on: a change in any of them means a new discovery
# (a new key too, so that refresh and later runs use it).
INPUTS = ("address", "user", "port", "jump", "host_keys", "sku", "fabric", "speed_gbps", "private_key")


def _target(props: dict):
    from railyard.drivers.hosts.config import JumpHost
    from railyard.drivers.hosts.ssh import Target

    jump = props.get("jump")
    return Target(name=props["node"], address=props["address"], user=props["user"], port=int(props["port"]),
                  jump=JumpHost(jump["address"], jump.get("user"), int(jump["port"]), tuple(jump["host_keys"]))
                  if jump else None,
                  host_keys=tuple(props.get("host_keys") or ()) or
                  ((props["host_key"],) if props.get("host_key") else ()))


def discover(props: dict) -> dict:
    """The host's facts and the host key SSH accepted."""
    from railyard.drivers.hosts import remote

    facts, result = remote.host_facts(_target(props), private_key=props.get("private_key") or None)
    return {"host_key": result.host_key, "facts": facts}


def discover_and_check(props: dict) -> dict:
    """discover(), refusing a host whose hardware is not its SKU's, with every difference named."""
    from railyard.model import hardware_check
    from railyard.model.catalog import load_catalog

    found = discover(props)
    sku = load_catalog().nodes[props["sku"]]
    facts = found["facts"]
    blind = [part for part in ("gpus", "nics") if facts.get(part) is None]
    if blind:
        # A host whose PCI bus could not be read would otherwise pass with nothing compared.
        notes = "; ".join(facts.get("notes") or ()) or "no /sys/bus/pci"
        raise RuntimeError(f"{props['node']}: discovery saw no {' and no '.join(blind)} ({notes}); "
                           "nothing was changed on the host")
    problems = hardware_check.check(props["node"], facts, sku, fabric=props.get("fabric"),
                                    speed_gbps=props.get("speed_gbps"))
    if problems:
        raise RuntimeError("; ".join(str(p) for p in problems) + " (nothing was changed on the host)")
    return found


class HostMachineProvider(ResourceProvider):
    serialize_as_secret_always = False

    def create(self, props):
        outs = discover_and_check(props)
        return CreateResult(id_=f"{props['stack']}/{props['node']}", outs={**props, **outs})

    def diff(self, _id, olds, news):
        changed = [k for k in INPUTS if olds.get(k) != news.get(k)]
        # A host first reached on trust keeps the key it showed: no change because host_keys is empty.
        return DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def update(self, _id, olds, news):
        # Trust on first use pins what was learned: an unchanged host must show the same key again.
        props = {**news, "host_key": olds.get("host_key") if not news.get("host_keys") else None}
        return UpdateResult(outs={**news, **discover_and_check(props)})

    def read(self, id_, props):
        # A refresh records what the host has now, so the next preview shows the drift; it is
        # the next create or update that refuses a host no longer matching its SKU. A host down
        # for maintenance keeps what was last seen: one unreachable server must not fail the
        # refresh of every other.
        from railyard.drivers.hosts.ssh import SshError

        try:
            seen = discover(props)
        except SshError:
            return ReadResult(id_=id_, outs=dict(props))
        return ReadResult(id_=id_, outs={**props, **seen})

    def delete(self, _id, _props):
        return None


class HostMachine(Resource):
    """Outputs: `host_key` (what SSH accepted) and `facts` (the discovered hardware)."""

    host_key: pulumi.Output[str]
    facts: pulumi.Output[dict]

    def __init__(self, name: str, *, stack: str, node: str, address: str, user: str, port: int,
                 jump: dict | None, host_keys: list[str], sku: str, fabric: str | None, speed_gbps: int | None,
                 private_key: Any, opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["private_key"]))
        # Secret as an input too: an input is stored as given, and a plain key would sit in state.
        if private_key is not None:
            private_key = pulumi.Output.secret(private_key)
        super().__init__(HostMachineProvider(), name, {
            "stack": stack, "node": node, "address": address, "user": user, "port": port, "jump": jump,
            "host_keys": host_keys, "sku": sku, "fabric": fabric, "speed_gbps": speed_gbps,
            "private_key": private_key, "host_key": None, "facts": None,
        }, opts)
