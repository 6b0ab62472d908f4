"""The whole cluster: networks, storage tiers, node pools and host tuning, from one plan.

What is made, and in which order, follows the driver's Capabilities (railyard/drivers/base.py):
HostTuning only where Railyard tunes the machines, VMs after their hypervisors' tuning only where
VMs sit on hypervisors, a kubeconfig output only where the driver has a Kubernetes cluster, and
the Kubernetes layer (components/kubernetes.py) on it where the stack has railyard:kubernetes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pulumi

from railyard import drivers
from railyard.drivers.base import Driver
from railyard.inventory import MachineEntry, VmEntry
from components.acceptance import Acceptance, AcceptanceArgs
from components.fabric import Fabric, FabricArgs
from components.guest_tuning import GuestTuning, GuestTuningArgs
from components.drift_check import DriftCheck, DriftCheckArgs
from components.host_tuning import HostTuning, HostTuningArgs
from components.kubernetes import KubernetesLayer, KubernetesLayerArgs
from components.node_pool import NodePool, NodePoolArgs
from components.storage import StorageTiers, StorageTiersArgs
from components.virtual_machine import VirtualMachine, VirtualMachineArgs
from railyard.model.plan import Plan
from railyard.model.spec import Spec


@dataclass
class ClusterArgs:
    spec: Spec
    """The validated stack configuration."""
    plan: Plan
    """The plan made from it: fabric, addresses, storage sizing, pairing."""
    protect: bool = False
    """Protect the cluster and everything under it (long-lived stacks), so a stray destroy fails."""
    outputs_only: bool = False
    """A run that only records the stack's outputs (railyard.engine.pulumi.record_outputs): no drift
    check reads the nodes."""


class Cluster(pulumi.ComponentResource):
    """Outputs: `inventory` (every node with its address and host key), `fabric` (the planner's
    summary), `access` (user and the private key, a secret) and `storage`."""

    TYPE = "railyard:index:Cluster"

    def __init__(self, name: str, args: ClusterArgs, driver: Driver, opts: pulumi.ResourceOptions | None = None):
        # Children inherit protect from their parent, so this reaches every driver resource
        # without the driver knowing; a node's delete or replace then needs a deliberate unprotect.
        if args.protect:
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(protect=True))
        super().__init__(self.TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        caps = driver.capabilities
        self.access = driver.access(f"{name}-access", self)
        self.fabric = Fabric(f"{name}-fabric", FabricArgs(args.plan.fabric, args.plan.networks),
                             driver, child)
        self.storage = StorageTiers(f"{name}-storage", StorageTiersArgs(args.plan.storage), driver,
                                    self.fabric.ready, child)
        self.pools = []
        for pool in args.spec.node_pools:
            self.pools.append(NodePool(f"{name}-{pool.name}",
                                       NodePoolArgs(pool.name, pool.sku, list(args.plan.pool_nodes(pool.name)),
                                                    self.access, virtual=args.spec.virtual),
                                       driver, self.fabric.ready, child))
        self.inventory = pulumi.Output.all(*[p.inventory for p in self.pools]).apply(
            lambda pools: [n for nodes in pools for n in nodes])
        machines = [r for p in self.pools for n in p.nodes for r in n.ready] + list(self.fabric.ready)
        self.tuning: HostTuning | None = None
        # Railyard tunes hosts it was given. Where the provider's VMs are the machines, their
        # hypervisors are the provider's: no host tuning (the VMs get guest tuning, below).
        node_vars = {n.name: v for n in args.plan.nodes if (v := driver.node_vars(n))}
        # Before tuning touches a node: the running cluster against its plan, where the stack asks.
        self.drift: DriftCheck | None = None
        if args.spec.verify.on_drift is not None and not args.outputs_only:
            if caps.unverifiable:
                raise ValueError(f"railyard:verify.onDrift: the {driver.name} driver's machines cannot be "
                                 f"verified: {caps.unverifiable}")
            self.drift = DriftCheck(f"{name}-drift", DriftCheckArgs(spec=args.spec, plan=args.plan,
                                                                    inventory=self.inventory, access=self.access,
                                                                    node_vars=node_vars), child)
        if caps.tunes_hosts(args.spec.virtual):
            self.tuning = HostTuning(
                f"{name}-tuning",
                HostTuningArgs(spec=args.spec, plan=args.plan, inventory=self.inventory, access=self.access,
                               storage=self.storage.endpoints, extra_vars=driver.tuning_vars(),
                               node_vars=node_vars or None, teardown=caps.keeps_machines,
                               skip=self.drift.skipped if self.drift is not None else None),
                # The machines themselves, not the pools: a pool's descendants include the VMs, which
                # come after tuning.
                depends_on=machines, opts=child)
        self.tuning_note = drivers.platform_tuning(driver.name)
        # Boot-time settings take effect where the driver reboots its machines (the hosts driver's
        # rolling reboot), after the tuning that wrote them.
        self.boot = driver.boot_settings(f"{name}-boot", self, self.tuning, self.access) if self.tuning else []
        # The virtual layout, ordered as on real hosts: hypervisor -> host tuning (and its reboots) -> VMs.
        self.vms: list[tuple[str, VirtualMachine]] = []
        after = ([self.tuning] + self.boot) if self.tuning is not None else machines
        # Before the cluster is called ready: acceptance, where Railyard reaches the tuned nodes.
        self.acceptance: Acceptance | None = None
        if self.tuning is not None and args.plan.acceptance is not None:
            self.acceptance = Acceptance(
                f"{name}-acceptance", AcceptanceArgs(plan=args.plan, host_inputs=self.tuning.host_inputs,
                                                     secret_vars=self.tuning.secret_vars, access=self.access,
                                                     tuned=self.tuning.run.last_run,
                                                     extra_vars=driver.acceptance_vars(),
                                                     # Only cordon reads it: no other stack's acceptance reruns for it.
                                                     kubernetes=args.plan.kubernetes is not None
                                                     and args.plan.acceptance.on_failure == "cordon"),
                depends_on=after, opts=child)
        for pool_component in (self.pools if caps.runs_vms else ()):
            for node_component, plan_node in zip(pool_component.nodes, pool_component.plans):
                for vm in plan_node.vms:
                    self.vms.append((plan_node.name, VirtualMachine(
                        vm.name, VirtualMachineArgs(vm=vm, hypervisor=plan_node.name, access=self.access), driver,
                        after, pulumi.ResourceOptions(parent=node_component))))
        self.guest_tuning: GuestTuning | None = None
        if self.vms:
            vm_entries = pulumi.Output.all(*[
                pulumi.Output.all(v.management_ip, v.host_key).apply(_vm_entry(host, v.pulumi_resource_name))
                for host, v in self.vms])
            self.inventory = pulumi.Output.all(self.inventory, vm_entries).apply(lambda v: _with_vms(*v))
            # Railyard tunes the guests on hypervisors it tuned: after the VMs, with the same roles.
            if self.tuning is not None:
                self.guest_tuning = GuestTuning(
                    f"{name}-guest-tuning",
                    GuestTuningArgs(spec=args.spec, plan=args.plan, vms=vm_entries, access=self.access,
                                    extra_vars=driver.tuning_vars()),
                    depends_on=[v for _, v in self.vms], opts=child)
        elif caps.tunes_provider_vms(args.spec.virtual):
            # The provider's VMs are the machines: their hypervisors are the operator's, but the
            # guests are Railyard's to tune, with the same roles, over the driver's path to them
            # (OpenStack: through the stack's jump host), once the pools' machines exist.
            vm_hosts = {vm.name: node.name for node in args.plan.nodes for vm in node.vms}
            self.guest_tuning = GuestTuning(
                f"{name}-guest-tuning",
                GuestTuningArgs(spec=args.spec, plan=args.plan,
                                vms=self.inventory.apply(lambda machines: _as_vms(machines, vm_hosts)),
                                access=self.access, extra_vars=driver.tuning_vars(),
                                vm_vars={vm: v for vm in vm_hosts if (v := driver.node_vars(vm))} or None,
                                domains=False),
                depends_on=machines, opts=child)
        # Secret whatever the driver handed back: a kubeconfig holds the cluster's credentials.
        layer = args.plan.kubernetes
        wants_cluster = caps.wants_cluster(layer is not None)
        kubeconfig = driver.kubeconfig(f"{name}-kubeconfig", self, list(self.fabric.ready)) if wants_cluster else None
        self.kubeconfig: pulumi.Output[str] | None = pulumi.Output.secret(kubeconfig) if kubeconfig is not None else None
        self.kubernetes: KubernetesLayer | None = None
        if layer is not None and self.kubeconfig is not None:
            # Nodes are registered or labelled once they are what the plan says: tuned, rebooted
            # into their boot settings, their VMs up.
            own = caps.runs_control_plane
            # Only under onFailure: cordon does a Node's spec wait on acceptance's verdict.
            checks = args.plan.acceptance  # (not None where self.acceptance is not)
            cordoned = self.acceptance.run.cordoned if self.acceptance is not None and checks is not None and \
                checks.on_failure == "cordon" else None
            self.kubernetes = KubernetesLayer(
                f"{name}-kubernetes", KubernetesLayerArgs(plan=layer, kubeconfig=self.kubeconfig, registers_nodes=own,
                                                          renders_networks=own,
                                                          node_names=driver.kubernetes_node_names(),
                                                          cordoned=cordoned, kueue_chart=driver.kueue_chart()),
                depends_on=[*after, *(v for _, v in self.vms), *([self.guest_tuning] if self.guest_tuning else []),
                            *([self.acceptance] if self.acceptance else [])],
                opts=child)
        outputs = {
            "inventory": self.inventory,
            "fabric": self.fabric.summary,
            "storage": self.storage.endpoints,
            "access": {"user": self.access.user, "private_key": self.access.private_key},
        }
        if self.tuning is not None:
            outputs["tuning"] = {"last_run": self.tuning.run.last_run, "changed": self.tuning.run.changed}
        elif self.tuning_note is not None:
            # Said, not skipped silently: a reviewer looking for the tuning run finds why there is none.
            outputs["tuning"] = {"runs": False, "why": self.tuning_note}
        if self.guest_tuning is not None:
            outputs["guest_tuning"] = {"last_run": self.guest_tuning.run.last_run,
                                       "changed": self.guest_tuning.run.changed}
        if self.acceptance is not None:
            outputs["acceptance"] = self.acceptance.summary
        if self.kubeconfig is not None:
            outputs["kubeconfig"] = self.kubeconfig
        if self.kubernetes is not None:
            outputs["kubernetes"] = self.kubernetes.summary
        self.register_outputs(outputs)


def _vm_entry(host: str, name: str) -> Callable[[list[Any]], VmEntry]:
    """A VM's inventory entry from its (management IP, host key)."""
    return lambda x: {"name": name, "host": host, "management_ip": x[0], "host_key": x[1]}


def _with_vms(machines: list[MachineEntry], vms: list[VmEntry]) -> list[MachineEntry]:
    """Each hypervisor's entry with the VMs it runs."""
    return [{**n, "vms": [m for m in vms if m["host"] == n["name"]]} for n in machines]


def _as_vms(machines: list[MachineEntry], vm_hosts: dict[str, str]) -> list[VmEntry]:
    """The provider's VMs (the pools' machines) as VMs of the plan's hosts."""
    return [{"name": m["name"], "host": vm_hosts[m["name"]], "management_ip": m["management_ip"],
             "host_key": m["host_key"]} for m in machines]
