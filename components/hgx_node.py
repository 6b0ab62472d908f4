"""One HGX node (a bare-metal host or a virtual-layout hypervisor)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from railyard.drivers.base import Access, Driver
from railyard.model.plan import NodePlan


@dataclass
class HgxNodeArgs:
    node: NodePlan
    """The node's plan: name, pool, SKU, management, storage and rail addresses."""
    access: Access
    """The stack's SSH access, installed as the node's authorized key."""


class HgxNode(pulumi.ComponentResource):
    """Attributes: `management_ip` (the driver's address, a plain string) and `host_key` (what
    Ansible checks)."""

    TYPE = "railyard:index:HgxNode"

    def __init__(self, name: str, args: HgxNodeArgs, driver: Driver, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        handle = driver.node(f"{name}-host", args.node, args.access, self, depends_on)
        self.ready = handle.ready
        self.management_ip = handle.management_ip
        self.host_key = handle.host_key
        # No register_outputs: per node it cost an RPC, its log calls and a wrapping Output, about
        # a sixth of a 448-node preview's CPU beyond the baseline (docs/benchmarks.md). The node's
        # values reach state through the pool's and the stack's outputs; the component completes
        # when the program does.
