"""The cluster's networks: the compute fabric (rails, leaves, spines), storage and management."""

from __future__ import annotations

from dataclasses import dataclass
import pulumi

from railyard.drivers.base import Driver
from railyard.model.fabric import FabricPlan
from railyard.model.plan import Networks


@dataclass
class FabricArgs:
    fabric: FabricPlan
    """The planned compute fabric (switches, links, cables, bisection)."""
    networks: Networks
    """Management, storage and compute CIDRs with their per-rail subnets."""


class Fabric(pulumi.ComponentResource):
    """Outputs: `summary` (the compute fabric's, as `railyard plan` shows it) and `networks`."""

    TYPE = "railyard:index:Fabric"

    def __init__(self, name: str, args: FabricArgs, driver: Driver, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        self.ready = driver.fabric(f"{name}-net", self)
        self.summary = args.fabric.summary()
        self.networks = args.networks.to_json()
        self.register_outputs({"summary": self.summary, "networks": self.networks})
