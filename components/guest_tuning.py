"""Guest tuning: the guest playbook over the VMs of the virtual layout, after they run.

A guest is a host with a different tree: the same roles (hugepages, gpu_nic_affinity, verify),
given the plan's guest targets (Plan.guest_tuning) and reading the guest's own hardware. The run's
artifacts hold each VM's libvirt domain (railyard.guests), rendered from the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from railyard import guests
from railyard.drivers.base import Access
from railyard.inventory import HostInputs, VmEntry
from railyard.model.plan import Plan
from railyard.model.spec import Spec
from railyard.tuning import runner
from railyard.tuning.resource import TuningRun
from railyard.tuning.vars import guest_vars


@dataclass
class GuestTuningArgs:
    spec: Spec
    plan: Plan
    vms: pulumi.Output[list[VmEntry]]
    """The VMs to tune: name, host (its hypervisor), management_ip, host_key."""
    access: Access
    extra_vars: dict[str, Any] | None = None
    """The driver's own role variables (Driver.tuning_vars): the same for guests as for hosts."""
    vm_vars: dict[str, dict[str, Any]] | None = None
    """Per VM, the driver's connection variables (Driver.node_vars: a jump host)."""
    domains: bool = True
    """Render each VM's libvirt domain into the run's artifacts: where Railyard defines the VMs
    (the lab); not where a cloud's compute service does (OpenStack's nova)."""


def domains(plan: Plan) -> dict[str, str]:
    """Each VM's libvirt domain, by its path in the run's artifacts (domains/<vm>.xml)."""
    out = {}
    for node in plan.nodes:
        sku = plan.catalog.nodes[node.sku]
        for vm in node.vms:
            topo, _ = plan.guest(vm.name)
            out[f"domains/{vm.name}.xml"] = guests.domain_xml(vm.name, node.name, topo,
                                                              guests.host_addresses(sku, topo))
    return out


class GuestTuning(pulumi.ComponentResource):
    """Outputs: `last_run` (the run directory under .railyard/runs/<stack>/) and `changed`."""

    TYPE = "railyard:index:GuestTuning"

    def __init__(self, name: str, args: GuestTuningArgs, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        spec, plan = args.spec, args.plan

        def hosts(vms: list[VmEntry]) -> HostInputs:
            return runner.host_inputs(
                runner.Host(v["name"], v["management_ip"], v["host_key"],
                            {**guest_vars(spec, plan, v["name"]), **(args.extra_vars or {}),
                             **(args.vm_vars or {}).get(v["name"], {})})
                for v in vms)

        self.run = TuningRun(f"{name}-run", stack=spec.stack, user=args.access.user, digest=runner.roles_digest(),
                             hosts=args.vms.apply(hosts), private_key=args.access.private_key,
                             playbook="guest.yml", artifacts=domains(plan) if args.domains else None,
                             opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on))
        self.register_outputs({"last_run": self.run.last_run, "changed": self.run.changed})
