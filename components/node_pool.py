"""A pool of identical nodes: one HgxNode per planned node, or the driver's pool of machines."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.hgx_node import HgxNode, HgxNodeArgs
from railyard.drivers.base import Access, Driver, PoolPlan
from railyard.inventory import MachineEntry
from railyard.model.plan import NodePlan


@dataclass
class NodePoolArgs:
    name: str
    """The pool's name (a DNS label); nodes are `<pool>-<i>`."""
    sku: str
    nodes: list[NodePlan]
    """The pool's planned nodes, in index order."""
    access: Access
    virtual: bool = False
    """The stack's layout is virtual (its VMs may be the driver's machines)."""


class NodePool(pulumi.ComponentResource):
    """Outputs: `nodes`, a list of {name, pool, sku, management_ip, host_key}.

    `nodes` (the attribute) holds one entry per machine with `ready`, `management_ip` and
    `host_key`: an HgxNode per planned node where the driver makes machines per node, the driver's
    NodeHandle per PoolPlan.machines where it makes them per pool (Capabilities.machines).
    """

    TYPE = "railyard:index:NodePool"

    def __init__(self, name: str, args: NodePoolArgs, driver: Driver, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        self.plans = list(args.nodes)
        caps = driver.capabilities
        if caps.machines == "node":
            machines: tuple = tuple(args.nodes)
            # Children are named after the node, not the pool's position, so growing a pool adds
            # nodes without renaming (and so replacing) the ones that exist.
            self.nodes: list = [
                HgxNode(n.name, HgxNodeArgs(node=n, access=args.access), driver, depends_on,
                        pulumi.ResourceOptions(parent=self))
                for n in args.nodes
            ]
        else:
            pool = PoolPlan(args.name, args.sku, tuple(args.nodes),
                            vms_are_machines=caps.vms_are_machines(args.virtual))
            machines = pool.machines
            self.nodes = driver.pool(f"{name}-machines", pool, args.access, self, depends_on)
            got, planned = [h.name for h in self.nodes], [m.name for m in machines]
            if got != planned:
                raise ValueError(f"driver {driver.name} returned machines {got} for pool {args.name}, "
                                 f"which plans {planned}")
        names = [(m.name, getattr(m, "sku", "vm")) for m in machines]

        def entries(ips: list[str], keys: list[str]) -> list[MachineEntry]:
            return [{"name": name, "pool": args.name, "sku": sku, "management_ip": ip, "host_key": key}
                    for (name, sku), ip, key in zip(names, ips, keys)]

        self.inventory: pulumi.Output[list[MachineEntry]]
        if caps.addresses == "plan":
            # One Output for the pool, not two per node: the SDK tracks every Output until the
            # program ends, and per-node ones were a measurable part of a large preview
            # (docs/benchmarks.md). The plan's addresses are plain strings.
            ips = []
            for (name, _), n in zip(names, self.nodes):
                if not isinstance(n.management_ip, str):
                    raise TypeError(f"driver {driver.name} takes addresses from the plan but gave {name} "
                                    f"a {type(n.management_ip).__name__}")
                ips.append(n.management_ip)
            self.inventory = pulumi.Output.all(*[n.host_key for n in self.nodes]).apply(
                lambda keys: entries(ips, keys))
        else:
            count = len(self.nodes)
            self.inventory = pulumi.Output.all(*[n.host_key for n in self.nodes],
                                               *[n.management_ip for n in self.nodes]).apply(
                lambda v: entries(v[count:], v[:count]))
        self.register_outputs({"nodes": self.inventory})
