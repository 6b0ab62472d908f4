"""A pool of identical nodes: one HgxNode per planned node, or the driver's pool of machines."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.hgx_node import HgxNode, HgxNodeArgs
from railyard.drivers.base import Access, Driver, PoolPlan
from railyard.model.plan import NodePlan


@dataclass
class NodePoolArgs:
    name: str
    """The pool's name (a DNS label); nodes are `<pool>-<i>`."""
    sku: str
    nodes: list[NodePlan]
    """The pool's planned nodes, in index order."""
    access: Access


class NodePool(pulumi.ComponentResource):
    """Outputs: `nodes`, a list of {name, pool, sku, management_ip, host_key}.

    `nodes` (the attribute) holds one entry per planned node with `ready`, `management_ip` and
    `host_key`: an HgxNode where the driver makes machines per node, the driver's NodeHandle where
    it makes them per pool (Capabilities.machines).
    """

    TYPE = "railyard:index:NodePool"

    def __init__(self, name: str, args: NodePoolArgs, driver: Driver, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        self.plans = list(args.nodes)
        caps = driver.capabilities
        if caps.machines == "node":
            # Children are named after the node, not the pool's position, so growing a pool adds
            # nodes without renaming (and so replacing) the ones that exist.
            self.nodes: list = [
                HgxNode(n.name, HgxNodeArgs(node=n, access=args.access), driver, depends_on,
                        pulumi.ResourceOptions(parent=self))
                for n in args.nodes
            ]
        else:
            self.nodes = driver.pool(f"{name}-machines", PoolPlan(args.name, args.sku, tuple(args.nodes)),
                                     args.access, self, depends_on)
            if len(self.nodes) != len(args.nodes):
                raise ValueError(f"driver {driver.name} returned {len(self.nodes)} machines for pool {args.name}, "
                                 f"which plans {len(args.nodes)}")
        known = [{"name": plan.name, "pool": args.name, "sku": plan.sku} for plan in args.nodes]
        if caps.addresses == "plan":
            # One Output for the pool, not two per node: the SDK tracks every Output until the
            # program ends, and per-node ones were a measurable part of a large preview
            # (docs/benchmarks.md). The plan's addresses are plain strings.
            for entry, n in zip(known, self.nodes):
                entry["management_ip"] = n.management_ip
            self.inventory = pulumi.Output.all(*[n.host_key for n in self.nodes]).apply(
                lambda keys: [{**entry, "host_key": key} for entry, key in zip(known, keys)])
        else:
            count = len(self.nodes)
            self.inventory = pulumi.Output.all(*[n.host_key for n in self.nodes],
                                               *[n.management_ip for n in self.nodes]).apply(
                lambda v: [{**entry, "management_ip": ip, "host_key": key}
                           for entry, key, ip in zip(known, v[:count], v[count:])])
        self.register_outputs({"nodes": self.inventory})
