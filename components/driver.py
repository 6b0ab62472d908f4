"""The driver interface: how a planned cluster becomes real objects, per `railyard:driver`.

Components call these methods and never know a driver's internals; a driver is found by name
in DRIVERS, so adding one is a new module and a line here.
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass
from typing import Any

import pulumi

from railyard import drivers
from railyard.model.plan import NodePlan, Plan, VmPlan
from railyard.model.spec import Spec

# driver name -> "module:Class". Cloud drivers are validated but not implemented yet.
DRIVERS = {"lab": "railyard.drivers.lab.driver:LabDriver"}


class DriverNotImplemented(Exception):
    def __init__(self, name: str):
        super().__init__(
            f"railyard:driver {name!r} is validated but not implemented yet: `up` stops here and "
            f"nothing was created. Drivers that run today: {', '.join(sorted(DRIVERS))}."
        )


@dataclass
class Access:
    """How Ansible and people reach nodes: the user and the stack's key pair (private = secret)."""

    user: str
    public_key: pulumi.Output[str]
    private_key: pulumi.Output[str]


@dataclass
class NodeHandle:
    ready: list[pulumi.Resource]
    """What must exist before the node is tuned (the machine, its storage)."""
    management_ip: str
    host_key: pulumi.Output[str]


class Driver(abc.ABC):
    name: str
    # A playground's clusters are throwaway by default: not protected unless railyard:protect says
    # so (railyard.lifecycle.protected). Drivers of real machines leave this False.
    playground: bool = False

    def __init__(self, spec: Spec, plan: Plan):
        self.spec = spec
        self.plan = plan

    @abc.abstractmethod
    def access(self, name: str, parent: pulumi.Resource) -> Access: ...

    @abc.abstractmethod
    def fabric(self, name: str, parent: pulumi.Resource) -> list[pulumi.Resource]:
        """The compute, storage and management networks; returns what nodes must wait for."""

    @abc.abstractmethod
    def storage(self, name: str, parent: pulumi.Resource, depends_on: list[pulumi.Resource]) -> dict[str, Any]:
        """The storage tiers; returns their outputs (endpoints, mounts)."""

    @abc.abstractmethod
    def node(self, name: str, node: NodePlan, access: Access, parent: pulumi.Resource,
             depends_on: list[pulumi.Resource]) -> NodeHandle: ...


    def tuning_vars(self) -> dict[str, Any]:
        """Role variables the driver's machines need on top of the plan's (railyard.drivers.tuning_vars)."""
        return drivers.tuning_vars(self.spec.driver)

    @abc.abstractmethod
    def vm(self, name: str, vm: VmPlan, hypervisor: str, access: Access, parent: pulumi.Resource,
           depends_on: list[pulumi.Resource]) -> NodeHandle:
        """A VM of the virtual layout on `hypervisor`, after its tuning made the VFs."""


def load_driver(spec: Spec, plan: Plan) -> Driver:
    target = DRIVERS.get(spec.driver)
    if target is None:
        raise DriverNotImplemented(spec.driver)
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)(spec, plan)
