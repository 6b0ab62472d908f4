"""The cluster's networks: the compute fabric (rails, leaves, spines), storage and management."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from railyard.drivers.base import Driver


@dataclass
class FabricArgs:
    summary: dict[str, Any]
    """The planner's summary of the compute fabric (switches, links, cables, bisection)."""
    networks: dict[str, Any]
    """Management, storage and compute CIDRs with their per-rail subnets."""


class Fabric(pulumi.ComponentResource):
    """Outputs: `summary` and `networks`, straight from the plan."""

    TYPE = "railyard:index:Fabric"

    def __init__(self, name: str, args: FabricArgs, driver: Driver, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        self.ready = driver.fabric(f"{name}-net", self)
        self.summary = args.summary
        self.networks = args.networks
        self.register_outputs({"summary": self.summary, "networks": self.networks})
