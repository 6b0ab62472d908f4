"""Pulumi dynamic resources of the hosts driver. The provider classes live in this importable
module so that state pickles them by reference (as the lab's do) and hold no secret.

HostMachine is one existing server: create and update reach it over SSH with its pinned host key
(or learn it on first use), discover its hardware with the model's own sysfs discovery, and check
it against the pool's SKU before anything else may touch it. A mismatch fails the resource with
every difference named, so nothing that depends on the host (its tuning) runs. Outputs: the host
key SSH accepted, to be pinned from then on, and the hardware facts, so a refresh shows drift;
for a host with a BMC, its power state as Redfish reports it. Delete changes nothing on the host:
discovery put nothing there.

A BMC's password, like the SSH key, is an input marked secret and an output marked secret.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from railyard.remote.reboots import Reboots, RebootsProvider, target
from railyard.dynamic import TypedResource, from_one_value, one_value

# What reaching and checking a host depends on: a change in any of them means a new discovery
# (a new key too, so that refresh and later runs use it).
INPUTS = ("address", "user", "port", "jump", "host_keys", "sku", "fabric", "speed_gbps", "private_key",
          "bmc", "bmc_password")


def _redfish(node: str, bmc: dict, password: str | None):
    from railyard.drivers.hosts import redfish

    return redfish.Client(redfish.Target.from_props(node, bmc, password or ""))


def power_state(props: dict) -> str | None:
    """The host's PowerState as its BMC reports it; None for a host without a BMC."""
    if not props.get("bmc"):
        return None
    return _redfish(props["node"], props["bmc"], props.get("bmc_password")).power_state()


def discover(props: dict) -> dict:
    """The host's facts and the host key SSH accepted (the facts as a mapping; `outputs` makes
    them the one string state holds)."""
    from railyard.drivers.hosts import remote
    from railyard.model.fabric import cabled_by_lldp

    # An Ethernet fabric's hosts say who their rails are cabled to (LLDP), so a refresh records it.
    facts, result = remote.host_facts(target(props), private_key=props.get("private_key") or None,
                                      lldp=cabled_by_lldp(props.get("fabric")))
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


def outputs(found: dict) -> dict:
    """discover()'s result as state records it: the facts as one string (railyard.dynamic.one_value),
    not their thousand values, the LLDP reading without its age (lldp.for_state)."""
    from railyard.model import lldp

    return {**found, "facts": one_value(lldp.for_state(found["facts"]))}


def drifted(olds: dict) -> bool:
    """Whether the facts last recorded (by a refresh) no longer match the host's SKU."""
    from railyard.model import hardware_check
    from railyard.model.catalog import load_catalog

    facts, sku_id = from_one_value(olds.get("facts")), olds.get("sku")
    sku = load_catalog().nodes.get(sku_id) if sku_id is not None else None
    if not facts or sku is None:
        return False
    return bool(hardware_check.check(olds.get("node", ""), facts, sku, fabric=olds.get("fabric"),
                                     speed_gbps=olds.get("speed_gbps")))


class HostMachineProvider(ResourceProvider):
    serialize_as_secret_always = False

    def create(self, props):
        # A BMC that cannot be read fails the host now, rather than when a reboot needs it.
        outs = {**outputs(discover_and_check(props)), "power_state": power_state(props)}
        return CreateResult(id_=f"{props['stack']}/{props['node']}", outs={**props, **outs})

    def diff(self, _id, olds, news):
        changed = [k for k in INPUTS if olds.get(k) != news.get(k)]
        # A host first reached on trust keeps the key it showed: no change because host_keys is empty.
        # Hardware a refresh saw drift from the SKU (a GPU lost, a rail down) is a change too, so
        # the next `up` discovers the host again and refuses it before its tuning runs.
        return DiffResult(changes=bool(changed) or drifted(olds), replaces=[], delete_before_replace=False)

    def update(self, _id, olds, news):
        # Trust on first use pins what was learned: an unchanged host must show the same key again.
        props = {**news, "host_key": olds.get("host_key") if not news.get("host_keys") else None}
        return UpdateResult(outs={**news, **outputs(discover_and_check(props)), "power_state": power_state(news)})

    def read(self, id_, props):
        # A refresh records what the host has now, so the next preview shows the drift; it is
        # the next create or update that refuses a host no longer matching its SKU. A host down
        # for maintenance keeps what was last seen: one unreachable server must not fail the
        # refresh of every other. Its BMC, reached another way, may still say it is off.
        from railyard.drivers.hosts.redfish import RedfishError
        from railyard.remote.ssh import SshError

        outs = dict(props)
        try:
            outs.update(outputs(discover(props)))
        except SshError:
            pass
        if props.get("bmc"):
            try:
                outs["power_state"] = power_state(props)
            except RedfishError:
                pass
        return ReadResult(id_=id_, outs=outs)

    def delete(self, _id, _props):
        return None


class HostMachine(TypedResource, module="hosts", name="Host"):
    """Outputs: `host_key` (what SSH accepted), `facts` (the discovered hardware, one JSON string) and
    `power_state` (its ComputerSystem's PowerState, read from its BMC; None without one)."""

    host_key: pulumi.Output[str]
    facts: pulumi.Output[str]
    power_state: pulumi.Output[str | None]

    def __init__(self, name: str, *, stack: str, node: str, address: str, user: str, port: int,
                 jump: dict | None, host_keys: list[str], sku: str, fabric: str | None, speed_gbps: int | None,
                 private_key: Any, bmc: dict | None = None, bmc_password: Any = None,
                 opts: pulumi.ResourceOptions | None = None):
        """bmc: the host's BMC (config.Bmc.resource_input()), or None; bmc_password: its password."""
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
            additional_secret_outputs=["private_key", "bmc_password"]))
        # Secret as an input too: an input is stored as given, and a plain key would sit in state.
        if private_key is not None:
            private_key = pulumi.Output.secret(private_key)
        if bmc_password is not None:
            bmc_password = pulumi.Output.secret(bmc_password)
        super().__init__(HostMachineProvider(), name, {
            "stack": stack, "node": node, "address": address, "user": user, "port": port, "jump": jump,
            "host_keys": host_keys, "sku": sku, "fabric": fabric, "speed_gbps": speed_gbps,
            "private_key": private_key, "bmc": bmc, "bmc_password": bmc_password,
            "host_key": None, "facts": None, "power_state": None,
        }, opts)


def _power_cycles(props: dict) -> dict:
    """What power-cycles each host of the pool that has a BMC (rollout.roll's power_cycles)."""
    passwords = props.get("bmc_passwords") or {}
    return {h["node"]: _redfish(h["node"], h["bmc"], passwords.get(h["node"])).power_cycle
            for h in props["hosts"] if h.get("bmc")}


class HostRebootsProvider(RebootsProvider):
    """A pool's rolling reboot (railyard.remote.reboots), a host with a BMC power-cycled through it
    when it does not come back."""

    def power_cycles(self, props: dict) -> dict:
        return _power_cycles(props)


class HostReboots(Reboots, module="hosts", name="Reboots"):
    """A pool's rolling reboot (railyard.remote.reboots.Reboots), with BMCs: hosts' `bmc` (as
    HostMachine's, or None) and bmc_passwords ({node: its BMC's password} for those with one)."""

    def __init__(self, name: str, *, bmc_passwords: Any = None, **kwargs: Any):
        super().__init__(name, provider=HostRebootsProvider(), extra_secrets={"bmc_passwords": bmc_passwords or None},
                         **kwargs)
