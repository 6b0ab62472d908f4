"""The whole cluster: networks, storage tiers, node pools and host tuning, from one plan."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.driver import Driver
from components.fabric import Fabric, FabricArgs
from components.host_tuning import HostTuning, HostTuningArgs
from components.node_pool import NodePool, NodePoolArgs
from components.storage import StorageTiers, StorageTiersArgs
from railyard.model.plan import Plan
from railyard.model.spec import Spec


@dataclass
class ClusterArgs:
    spec: Spec
    """The validated stack configuration."""
    plan: Plan
    """The plan made from it: fabric, addresses, storage sizing, pairing."""


class Cluster(pulumi.ComponentResource):
    """Outputs: `inventory` (every node with its address and host key), `fabric` (the planner's
    summary), `access` (user and the private key, a secret) and `storage`."""

    TYPE = "railyard:index:Cluster"

    def __init__(self, name: str, args: ClusterArgs, driver: Driver, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        summary = args.plan.summary()
        self.access = driver.access(f"{name}-access", self)
        self.fabric = Fabric(f"{name}-fabric", FabricArgs(summary["fabrics"]["compute"], args.plan.networks()),
                             driver, child)
        self.storage = StorageTiers(f"{name}-storage", StorageTiersArgs(summary.get("storage", {})), driver,
                                    self.fabric.ready, child)
        self.pools = []
        for pool in args.spec.node_pools:
            nodes = [n for n in args.plan.nodes if n.pool == pool.name]
            self.pools.append(NodePool(f"{name}-{pool.name}", NodePoolArgs(pool.name, nodes, self.access), driver,
                                       self.fabric.ready, child))
        self.inventory = pulumi.Output.all(*[p.inventory for p in self.pools]).apply(
            lambda pools: [n for nodes in pools for n in nodes])
        self.tuning = HostTuning(
            f"{name}-tuning",
            HostTuningArgs(spec=args.spec, plan=args.plan, inventory=self.inventory, access=self.access,
                           object_endpoint=self.storage.endpoints.get("object_endpoint")),
            depends_on=[*self.pools, *self.fabric.ready], opts=child)
        self.register_outputs({
            "inventory": self.inventory,
            "fabric": self.fabric.summary,
            "storage": self.storage.endpoints,
            "tuning": {"last_run": self.tuning.run.last_run, "changed": self.tuning.run.changed},
            "access": {"user": self.access.user, "private_key": self.access.private_key},
        })
