"""Per-machine connection variables of an openstack stack (Pulumi-free, so `railyard tune` and the
Pulumi program hand the roles the same ones): the jump host Ansible reaches the VMs through.

The VMs are the machines; their hypervisors are the operator's, and Railyard never reaches them,
so a hypervisor of the plan gets nothing here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from railyard.drivers import TuningHooks
from railyard.drivers.openstack.config import OpenStackConfig
from railyard.model.plan import NodePlan
from railyard.ssh_client import JUMP_VAR

if TYPE_CHECKING:
    from railyard.model.spec import Spec
    from railyard.model.plan import Plan, VmPlan


def jump(config: OpenStackConfig) -> dict | None:
    """The jump host as the tuning run takes it (railyard.tuning.runner makes its ProxyCommand)."""
    j = config.jump_host
    return {"address": j.address, "user": j.user, "port": j.port, "host_keys": list(j.host_keys)} if j else None


def node_vars(spec: Spec, plan: Plan, node: NodePlan | VmPlan | str) -> dict[str, Any]:
    """`node`: a VM of the plan (its VmPlan or its name); a hypervisor (NodePlan, or a host's name)
    gets nothing."""
    config: OpenStackConfig | None = spec.driver_config
    if config is None or isinstance(node, NodePlan):
        return {}
    if isinstance(node, str):
        try:
            plan.vm_named(node)
        except KeyError:
            plan.node_named(node)  # a hypervisor of the plan; anything else is a KeyError naming the hosts
            return {}
    hop = jump(config)
    return {JUMP_VAR: hop} if hop else {}


# The contract's hooks this module provides (railyard.drivers.TuningHooks).
HOOKS = TuningHooks(node_vars=node_vars)
