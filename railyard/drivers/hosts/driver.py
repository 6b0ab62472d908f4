"""The hosts driver: servers that already exist, reached over SSH, never created or deleted.

Per node, a HostMachine (resources.py) reaches the pool's host, discovers its hardware and checks
it against the SKU before anything depends on it. Tuning is the site playbook, as for the lab,
over the hosts' own addresses with their user, port and pinned keys, on their real /sys and
/proc (no `*_sysfs_root`). Boot-time settings then take effect in a rolling reboot per pool
(HostReboots, rollout.py), inside the pool's maxUnavailable.
"""

from __future__ import annotations

from typing import Any

import pulumi

from railyard.drivers.base import Access, Driver, NodeHandle
from railyard.drivers.hosts import probe
from railyard.drivers.hosts.tuning import jump
from railyard.drivers.hosts.config import HostsConfig
from railyard.drivers.hosts.resources import HostMachine, HostReboots
from railyard.model.boot_args import kernel_args
from railyard.model.plan import NodePlan


def _secret(*at: str | int) -> pulumi.Output:
    """A secret of railyard:hosts (sshKey, a host's bmc.password). The whole section is read as a
    secret object: only those keys are secret in it, and none of them is ever a plain value
    anywhere in the program."""
    def pick(value: Any) -> Any:
        for key in at:
            value = value[key]
        return value

    return pulumi.Output.secret(pulumi.Config("railyard").require_secret_object("hosts").apply(pick))


class HostsDriver(Driver):
    name = "hosts"

    def __init__(self, spec, plan):
        super().__init__(spec, plan)
        self.config: HostsConfig = spec.driver_config
        self.machines: dict[str, HostMachine] = {}

    def host(self, node: NodePlan | str):
        if isinstance(node, str):
            node = self.plan.node_named(node)
        return self.config.host(node.pool, node.index)

    def access(self, name: str, parent: pulumi.Resource) -> Access:
        if self.config.uses_agent:
            key = None  # ssh-agent's, where Railyard runs
        else:
            key = _secret("sshKey")
        return Access(user=self.config.hosts[0].user if self.config.hosts else "root",
                      public_key=pulumi.Output.from_input(""), private_key=key)

    def fabric(self, name: str, parent: pulumi.Resource) -> list[pulumi.Resource]:
        return []  # the hosts' networks exist; tuning gives the rails their addresses

    def kubernetes_node_names(self) -> dict[str, str]:
        out = {}
        for node in self.plan.nodes:
            name = self.config.host(node.pool, node.index).kube_node_name(node.name)
            if name != node.name:
                out[node.name] = name
        return out

    def kubeconfig(self, name: str, parent: pulumi.Resource, depends_on: list[pulumi.Resource]) -> pulumi.Output[str]:
        """The cluster the hosts belong to: railyard:kubernetes.kubeconfig (validation requires it)."""
        return pulumi.Output.secret(
            pulumi.Config("railyard").require_secret_object("kubernetes").apply(lambda k: k["kubeconfig"]))

    def storage(self, name: str, parent: pulumi.Resource, depends_on: list[pulumi.Resource]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        obj = self.spec.storage.object
        if obj is not None:
            out.update(object_endpoint=obj.endpoint, bucket=obj.bucket, dataset_prefix="")
        pfs = self.spec.storage.parallel_fs
        if pfs is not None:
            out["parallel_fs"] = {"kind": pfs.kind, "mount": pfs.mount, "source": pfs.source}
        return out

    def node(self, name: str, node: NodePlan, access: Access, parent: pulumi.Resource,
             depends_on: list[pulumi.Resource]) -> NodeHandle:
        host = self.host(node)
        compute = self.spec.fabric.compute
        machine = HostMachine(
            name, stack=self.spec.stack, node=node.name, address=host.address, user=host.user, port=host.port,
            jump=jump(host), host_keys=list(host.host_keys), sku=node.sku, fabric=compute.kind,
            speed_gbps=compute.speed_gbps, private_key=access.private_key,
            bmc=host.bmc.resource_input() if host.bmc else None,
            bmc_password=_secret(*host.bmc.password_at) if host.bmc else None,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on))
        self.machines[node.name] = machine
        return NodeHandle(ready=[machine], management_ip=host.address, host_key=machine.host_key, name=node.name)

    def boot_settings(self, name: str, parent: pulumi.Resource, tuning: Any, access: Access) -> list[pulumi.Resource]:
        """One rolling reboot per pool, after tuning wrote the boot-time settings."""
        out: list[pulumi.Resource] = []
        reboot = self.config.reboot
        for pool in self.spec.node_pools:
            nodes = list(self.plan.pool_nodes(pool.name))
            hosts = []
            bmc_passwords = {}
            for n in nodes:
                h = self.host(n)
                hosts.append({"node": n.name, "address": h.address, "user": h.user, "port": h.port,
                              "jump": jump(h), "host_keys": list(h.host_keys),
                              "host_key": self.machines[n.name].host_key,
                              "wanted": list(kernel_args(self.spec, self.plan, n)),
                              "bmc": h.bmc.resource_input() if h.bmc else None})
                if h.bmc:
                    bmc_passwords[n.name] = _secret(*h.bmc.password_at)
            budget = self.config.pool(pool.name).reboot_budget
            if pulumi.runtime.is_dry_run():
                probe.report(pool.name, hosts, access.private_key, budget, parent)
            out.append(HostReboots(
                f"{name}-{pool.name}", stack=self.spec.stack, pool=pool.name, hosts=hosts, budget=budget,
                command=reboot.command, timeout=reboot.timeout_seconds, private_key=access.private_key,
                tuning_hosts=tuning.host_inputs if tuning is not None else None,
                secret_vars=tuning.secret_vars if tuning is not None else None, user=access.user,
                tuning_run=tuning.run.last_run if tuning is not None else None,
                bmc_passwords=bmc_passwords or None,
                opts=pulumi.ResourceOptions(parent=parent, depends_on=[tuning] if tuning is not None else [])))
        return out
