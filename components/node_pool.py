"""A pool of identical nodes: one HgxNode per planned node of the pool."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.driver import Access, Driver
from components.hgx_node import HgxNode, HgxNodeArgs
from railyard.model.plan import NodePlan


@dataclass
class NodePoolArgs:
    name: str
    """The pool's name (a DNS label); nodes are `<pool>-<i>`."""
    nodes: list[NodePlan]
    """The pool's planned nodes, in index order."""
    access: Access


class NodePool(pulumi.ComponentResource):
    """Outputs: `nodes`, a list of {name, management_ip, host_key}."""

    TYPE = "railyard:index:NodePool"

    def __init__(self, name: str, args: NodePoolArgs, driver: Driver, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        self.plans = list(args.nodes)
        # Children are named after the node, not the pool's position, so growing a pool adds
        # nodes without renaming (and so replacing) the ones that exist.
        self.nodes = [
            HgxNode(n.name, HgxNodeArgs(node=n, access=args.access), driver, depends_on,
                    pulumi.ResourceOptions(parent=self))
            for n in args.nodes
        ]
        # One Output for the pool, not two per node: the SDK tracks every Output until the program
        # ends, and per-node ones were a measurable part of a large preview (docs/benchmarks.md).
        known = [{"name": plan.name, "pool": args.name, "sku": plan.sku, "management_ip": n.management_ip}
                 for n, plan in zip(self.nodes, args.nodes)]
        self.inventory = pulumi.Output.all(*[n.host_key for n in self.nodes]).apply(
            lambda keys: [{**entry, "host_key": key} for entry, key in zip(known, keys)])
        self.register_outputs({"nodes": self.inventory})
