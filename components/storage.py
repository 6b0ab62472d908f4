"""The storage tiers: object storage, a parallel file system, and each node's local NVMe cache."""

from __future__ import annotations

from dataclasses import dataclass
import pulumi

from railyard.drivers.base import Driver
from railyard.model.storage import StoragePlan


@dataclass
class StorageTiersArgs:
    plan: StoragePlan
    """The planned tiers (capacity and bandwidth per tier)."""


class StorageTiers(pulumi.ComponentResource):
    """Outputs: `plan` and `endpoints` (where each tier is reached)."""

    TYPE = "railyard:index:StorageTiers"

    def __init__(self, name: str, args: StorageTiersArgs, driver: Driver, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        self.endpoints = driver.storage(f"{name}-tiers", self, depends_on)
        self.plan = args.plan.summary()
        self.register_outputs({"plan": self.plan, "endpoints": self.endpoints})
