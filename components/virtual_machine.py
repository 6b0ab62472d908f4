"""A VM of the virtual layout, on its hypervisor, given the VFs its hypervisor's tuning created."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from railyard.drivers.base import Access, Driver
from railyard.model.plan import VmPlan


@dataclass
class VirtualMachineArgs:
    vm: VmPlan
    """The VM's plan: name, addresses, GPUs and the VFs (PF, slot, rail, address) it gets."""
    hypervisor: str
    """The node it runs on."""
    access: Access


class VirtualMachine(pulumi.ComponentResource):
    """Outputs: `management_ip` and `host_key`."""

    TYPE = "railyard:index:VirtualMachine"

    def __init__(self, name: str, args: VirtualMachineArgs, driver: Driver, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        handle = driver.vm(f"{name}-guest", args.vm, args.hypervisor, args.access, self, depends_on)
        self.management_ip = pulumi.Output.from_input(handle.management_ip)
        self.host_key = handle.host_key
        self.register_outputs({"management_ip": self.management_ip, "host_key": self.host_key})
