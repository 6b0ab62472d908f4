"""The driver contract: how a planned cluster becomes real machines, for every `railyard:driver`.

Components (components/) call these methods and read a driver's Capabilities (railyard.drivers,
the Pulumi-free registry); they never know a driver's internals, and no driver imports another or
the components. The shape covers the four substrates Railyard targets:

| driver    | machines | addresses | tuned by | VMs (virtual layout)  | Kubernetes   |
|-----------|----------|-----------|----------|-----------------------|--------------|
| lab       | per node | the plan  | Railyard | on tuned hypervisors  | runs its own |
| hosts     | per node | the stack file | Railyard | on tuned hypervisors | a kubeconfig given |
| coreweave | per pool | provider  | platform | none: bare metal only | a kubeconfig |
| openstack | per pool | provider  | Railyard | the VMs are the machines | none      |

Per node, a driver implements `node()`; per pool, `pool()`, which returns one NodeHandle per
planned node. Addresses "from the plan" are plain strings; a provider's come back as Outputs, and
NodeHandle.management_ip takes either. A driver whose platform tunes its nodes gets no
HostTuning. In the virtual layout, `vm()` makes a VM on a hypervisor after that hypervisor's
tuning (the VFs exist then); where the VMs are the machines, pool() makes them (PoolPlan.machines)
and they are what the inventory lists. A driver with a Kubernetes cluster returns its kubeconfig (a secret Output)
from `kubeconfig()`.
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from typing import Any

import pulumi

from railyard import drivers
from railyard.messages import driver_not_implemented
from railyard.model.plan import NodePlan, Plan, VmPlan
from railyard.model.spec import Spec


class DriverNotImplemented(Exception):
    def __init__(self, name: str):
        super().__init__(driver_not_implemented(name, (n for n, e in drivers.DRIVERS.items() if e.implementation)))


@dataclass
class Access:
    """How Ansible and people reach nodes: the user and the stack's key pair (private = secret)."""

    user: str
    public_key: pulumi.Output[str]
    private_key: pulumi.Output[str] | None
    """None: Ansible uses the ssh-agent where Railyard runs (the hosts driver's sshAgent)."""


@dataclass
class NodeHandle:
    ready: list[pulumi.Resource]
    """What must exist before the node is tuned (the machine, its storage)."""
    management_ip: pulumi.Input[str] | None
    """The plan's address (a str) or the provider's (an Output), per Capabilities.addresses; None
    where the platform assigns it and Railyard never connects to the machine (tuned_by "platform")."""
    host_key: pulumi.Output[str]
    name: str = ""
    """The planned node it stands for (pool drivers say which; per-node calls know it already)."""


@dataclass(frozen=True)
class PoolPlan:
    """One node pool as a per-pool driver receives it."""

    name: str
    sku: str
    nodes: tuple[NodePlan, ...] = field(default=())
    vms_are_machines: bool = False
    """The virtual layout on a driver whose VMs are its machines (Capabilities.vms == "are-nodes")."""

    @property
    def machines(self) -> tuple[NodePlan | VmPlan, ...]:
        """What the driver makes, one NodeHandle each, in this order: the planned nodes, or, where
        VMs are the machines, every node's VMs (the hypervisors are the provider's)."""
        if self.vms_are_machines:
            return tuple(vm for node in self.nodes for vm in node.vms)
        return self.nodes


class Driver(abc.ABC):
    name: str

    def __init__(self, spec: Spec, plan: Plan):
        self.spec = spec
        self.plan = plan

    @property
    def capabilities(self) -> drivers.Capabilities:
        return drivers.entry(self.name).capabilities

    @property
    def playground(self) -> bool:
        """A playground's clusters are throwaway: unprotected unless railyard:protect says so."""
        return self.capabilities.playground

    @abc.abstractmethod
    def access(self, name: str, parent: pulumi.Resource) -> Access: ...

    @abc.abstractmethod
    def fabric(self, name: str, parent: pulumi.Resource) -> list[pulumi.Resource]:
        """The compute, storage and management networks; returns what nodes must wait for."""

    @abc.abstractmethod
    def storage(self, name: str, parent: pulumi.Resource, depends_on: list[pulumi.Resource]) -> dict[str, Any]:
        """The storage tiers; returns their outputs (endpoints, mounts)."""

    def node(self, name: str, node: NodePlan, access: Access, parent: pulumi.Resource,
             depends_on: list[pulumi.Resource]) -> NodeHandle:
        """One planned node's machine (Capabilities.machines == "node")."""
        raise NotImplementedError(f"driver {self.name} makes machines per {self.capabilities.machines}, not per node")

    def pool(self, name: str, pool: PoolPlan, access: Access, parent: pulumi.Resource,
             depends_on: list[pulumi.Resource]) -> list[NodeHandle]:
        """A pool's machines, one handle per PoolPlan.machines, named after it, in its order
        (machines == "pool")."""
        raise NotImplementedError(f"driver {self.name} makes machines per {self.capabilities.machines}, not per pool")

    def vm(self, name: str, vm: VmPlan, hypervisor: str, access: Access, parent: pulumi.Resource,
           depends_on: list[pulumi.Resource]) -> NodeHandle:
        """A VM of the virtual layout on `hypervisor`, after its tuning made the VFs (vms == "on-hypervisors")."""
        raise NotImplementedError(f"driver {self.name} puts no VMs on hypervisors ({self.capabilities.vms})")

    def kubeconfig(self, name: str, parent: pulumi.Resource,
                   depends_on: list[pulumi.Resource]) -> pulumi.Output[str] | None:
        """The cluster's kubeconfig, a secret Output, for a stack with railyard:kubernetes (or
        always, where Capabilities.kubernetes is "platform"): a control plane the driver runs
        after `depends_on` (the networks), or the one it is given."""
        return None

    def kueue_chart(self) -> dict[str, str] | None:
        """Where the cluster has no Kueue of its own: the Helm chart the Kubernetes layer installs it
        from (repository, chart, version, namespace); None: Kueue runs there already (the lab's
        control plane, a given cluster)."""
        return None

    def kubernetes_node_names(self) -> dict[str, str]:
        """Plan node -> the name its Node has in the driver's cluster, where that is not the plan's
        (a kubelet registers under its server's hostname); empty: the plan's names."""
        return {}

    def ssh_hint(self) -> str | None:
        """How a person reaches a node, for the stack's `access` output (None: plain ssh to its address)."""
        return None

    def node_vars(self, node: NodePlan | str) -> dict[str, Any]:
        """Per node (or, where VMs are the machines, per VM by name), role or connection variables
        its machine needs (a host's user and port, a jump host): the registry's, so `railyard tune`
        hands the roles the same (railyard.drivers.node_vars)."""
        return drivers.node_vars(self.spec, self.plan, node)

    def boot_settings(self, name: str, parent: pulumi.Resource, tuning: Any, access: Access) -> list[pulumi.Resource]:
        """What makes the boot-time settings the tuning wrote take effect (rolling reboots,
        railyard.remote.reboots), after `tuning` (components.host_tuning.HostTuning); none by
        default. The hosts driver reboots for every kernel argument a host lacks; the lab for a
        hypervisor's CPU isolation alone (docs/lab.md)."""
        return []

    def acceptance_vars(self) -> dict[str, Any]:
        """Role variables of the acceptance playbook the driver's machines need (railyard.drivers.acceptance_vars)."""
        return drivers.acceptance_vars(self.name)

    def tuning_vars(self) -> dict[str, Any]:
        """Role variables the driver's machines need on top of the plan's (railyard.drivers.tuning_vars)."""
        return drivers.tuning_vars(self.name)


def load_driver(spec: Spec, plan: Plan) -> Driver:
    target = drivers.entry(spec.driver).implementation
    if target is None:
        raise DriverNotImplemented(spec.driver)
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)(spec, plan)
