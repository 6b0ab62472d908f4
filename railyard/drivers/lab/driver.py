"""The lab driver: the planned cluster as namespaces, veth rails and sshd on this machine.

Every address, prefix, gateway and netdev name comes from the plan; the driver only says where
each lands in the lab.
"""

from __future__ import annotations

from typing import Any

import pulumi

from railyard.drivers.base import Access, Driver, NodeHandle
from railyard.drivers.lab import resources
from railyard.drivers.lab.storage.cache import MAX_DRIVES
from railyard.drivers.lab.tuning import REBOOT_COMMAND, REBOOT_TIMEOUT_S
from railyard.model.plan import NodePlan, VmPlan
from railyard.model.plan_types import NicPlan

# Netdev names the catalog does not give (the DGX H100 sources name no management or storage
# netdev): lab stand-ins, the same on every node.
MGMT_NETDEV = "mgmt0"
STORAGE_NETDEV = "stor0"


class LabDriver(Driver):
    name = "lab"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._host_keys: dict[str, Any] = {}

    def ssh_hint(self) -> str:
        return f".venv/bin/railyard lab ssh --stack {self.spec.stack} NODE"

    def access(self, name: str, parent: pulumi.Resource) -> Access:
        key = resources.AccessKey(name, comment=f"railyard-{self.spec.stack}",
                                  opts=pulumi.ResourceOptions(parent=parent))
        # Secret here as well as in state (additional_secret_outputs): whatever the engine does,
        # every consumer of the key sees a secret.
        return Access(user="root", public_key=key.public_key, private_key=pulumi.Output.secret(key.private_key))

    def fabric(self, name: str, parent: pulumi.Resource) -> list[pulumi.Resource]:
        nets = self.plan.networks
        fab = resources.LabFabric(name, stack=self.spec.stack, rails=len(nets.compute.rails),
                                  mgmt_cidr=nets.management.cidr, host_address=nets.management.gateway,
                                  opts=pulumi.ResourceOptions(parent=parent))
        ready: list[pulumi.Resource] = [fab]
        if self._switches_route():
            # Every planned switch a router running FRR on its planned configuration; the nodes'
            # rails hang off their leaves.
            from railyard.drivers.lab.routers import log_file
            from railyard.switches import frr_config

            switches = [{"name": r.name, "leaf": r.tier == "leaf",
                         "frr_conf": frr_config(r, self.spec.stack, log_file(r.name)),
                         "sessions": [{"interface": x.interface, "peer": x.peer, "peer_interface": x.peer_interface}
                                      for x in r.sessions]} for r in self.plan.routers()]
            ready.append(resources.LabSwitches(f"{name}-switches", stack=self.spec.stack, switches=switches,
                                               mtu=nets.compute.mtu,
                                               opts=pulumi.ResourceOptions(parent=parent, depends_on=[fab])))
        elif nets.compute.routed:
            # A spine namespace routes between rails: same-rail traffic stays on its leaf,
            # cross-rail traffic crosses the spine, as on the real fabric.
            ready.append(resources.LabSpine(f"{name}-spine", stack=self.spec.stack,
                                            gateways=[f"{r.gateway}/{r.prefixlen}" for r in nets.compute.rails],
                                            mtu=nets.compute.mtu,
                                            opts=pulumi.ResourceOptions(parent=parent, depends_on=[fab])))
        return ready

    def storage(self, name: str, parent: pulumi.Resource, depends_on: list[pulumi.Resource]) -> dict[str, Any]:
        obj = self.spec.storage.object
        out: dict[str, Any] = {}
        if obj is not None:
            stor = self.plan.networks.storage
            store = resources.LabObjectStore(name, stack=self.spec.stack,
                                             address=f"{stor.services['object_store']}/{stor.prefixlen}",
                                             bucket=obj.bucket,
                                             opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on))
            self.object_store = store
            secret_key: pulumi.Output[str] = pulumi.Output.secret(store.secret_key)
            out.update(object_endpoint=store.endpoint, bucket=obj.bucket, dataset_prefix=store.dataset_prefix,
                       access_key=store.access_key, secret_key=secret_key)
        pfs = self.spec.storage.parallel_fs
        if pfs is not None:
            out["parallel_fs"] = {"kind": pfs.kind, "mount": pfs.mount,
                                  "lab": "a directory shared by every node, standing in for Lustre or GPFS"}
        return out

    def kubeconfig(self, name: str, parent: pulumi.Resource, depends_on: list[pulumi.Resource]) -> pulumi.Output[str]:
        """The lab's own control plane at the plan's `kubernetes` address on the management network."""
        # Imported here: only a stack with the Kubernetes layer needs it, and with its PKI and
        # cryptography's x509 it was 50 ms of every preview's imports.
        from railyard.drivers.lab import control_plane

        mgmt = self.plan.networks.management
        nets = self.plan.networks
        service_cidr, pod_cidr = control_plane.cluster_ranges([mgmt.cidr, nets.storage.cidr, nets.compute.cidr])
        self.control_plane = resources.LabControlPlane(
            name, stack=self.spec.stack, address=f"{mgmt.services['kubernetes']}/{mgmt.prefixlen}",
            service_cidr=service_cidr, pod_cidr=pod_cidr,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on))
        return self.control_plane.kubeconfig

    def boot_settings(self, name: str, parent: pulumi.Resource, tuning: Any, access: Access) -> list[pulumi.Resource]:
        """The hosts driver's rolling reboot (railyard.remote), one node at a time, for the one
        boot-time setting the lab cannot apply to a running node: a hypervisor's CPU isolation
        (kernel mode). The lab applies hugepages and the IOMMU mode at run time, so a pool without
        isolation (every node of `lab` and `lab-virtual`) gets no reboot and no resource. A node
        reboots into the command line its tuning's update-grub wrote, and the tuning runs again on
        it (a boot drops its VFs)."""
        from railyard.model.boot_args import isolation_args
        from railyard.remote.reboots import Reboots

        out: list[pulumi.Resource] = []
        for pool in self.spec.node_pools:
            nodes = self.plan.pool_nodes(pool.name)
            wanted = isolation_args(self.plan.tuning(nodes[0]).cpu_isolation) if nodes else ()
            if not wanted:
                continue
            hosts = [{"node": n.name, "address": n.management_ip, "user": access.user, "port": 22, "jump": None,
                      "host_keys": [], "host_key": self._host_keys[n.name], "wanted": list(wanted)} for n in nodes]
            out.append(Reboots(
                f"{name}-{pool.name}", stack=self.spec.stack, pool=pool.name, hosts=hosts, budget=1,
                command=REBOOT_COMMAND, timeout=REBOOT_TIMEOUT_S, private_key=access.private_key,
                tuning_hosts=tuning.host_inputs, secret_vars=tuning.secret_vars, user=access.user,
                tuning_run=tuning.run.last_run,
                opts=pulumi.ResourceOptions(parent=parent, depends_on=[tuning])))
        return out

    def _links(self, management_ip: str, storage_ip: str) -> dict[str, Any]:
        nets = self.plan.networks
        return {
            "mgmt": {"name": MGMT_NETDEV, "address": f"{management_ip}/{nets.management.prefixlen}"},
            "storage": {"name": STORAGE_NETDEV, "address": f"{storage_ip}/{nets.storage.prefixlen}"},
            "compute_cidr": nets.compute.cidr if nets.compute.routed else None,
        }

    def _switches_route(self) -> bool:
        """A RoCE fabric with tiers above its leaves: its switches are FRR routers (routers.py)."""
        return self.plan.fabric.kind == "roce" and self.plan.networks.compute.routed

    def _leaf_port(self, nic: NicPlan) -> dict[str, str]:
        """The leaf a routed RoCE rail is on, and the planned port there as the switch names it."""
        from railyard.model.fabric.routing import port_netdev

        return {"leaf": nic.leaf, "leaf_port": port_netdev(self.plan.fabric.switch, nic.leaf_port)}

    def _rail_gateway(self, rail: int) -> dict[str, str]:
        """Where the lab routes between rails: its spine namespace, at each rail's reserved router
        address, when the plan has spines; IPoIB rails too, which a real IB fabric never routes."""
        nets = self.plan.networks.compute
        return {"gateway": nets.rails[rail].gateway} if nets.routed else {}

    def _trained_gbps(self, sku_id: str) -> int | None:
        """The compute fabric's speed where the SKU's compute NICs are faster: their ports train at
        the switch's speed, and the node's sysfs shows that (None: they train at their own)."""
        from railyard.model.catalog import load_catalog

        fabric = self.spec.fabric.compute.speed_gbps
        speeds = {n.speed_gbps for n in load_catalog().nodes[sku_id].compute_nics if n.speed_gbps}
        return fabric if speeds and fabric < max(speeds) else None

    def node(self, name: str, node: NodePlan, access: Access, parent: pulumi.Resource,
             depends_on: list[pulumi.Resource]) -> NodeHandle:
        mtu = self.plan.networks.compute.mtu
        on_leaves = self._switches_route()
        rails = [{"name": nic.netdev, "rail": nic.rail, "address": f"{nic.ip}/{nic.prefixlen}", "mtu": mtu,
                  **self._rail_gateway(nic.rail), **(self._leaf_port(nic) if on_leaves else {})}
                 for nic in node.nics]
        cache = self.spec.storage.local_cache
        pfs = self.spec.storage.parallel_fs
        local = None
        if cache is not None:
            # One sparse image per data drive of the SKU (one loop device where the kernel has no md),
            # at least one where the SKU lists no data drive, at most a node's loop budget.
            local = {"mount": cache.mount, "fs": cache.fs, "raid": cache.raid,
                     "drives": min(self.plan.tuning(node).cache_drives or 1, MAX_DRIVES), "size_gib": 1.0}
        res = resources.LabNode(
            name, stack=self.spec.stack, node=node.name, sku=node.sku, rails=rails,
            **self._links(node.management_ip, node.storage_ip),
            authorized_key=access.public_key, cache=local, pfs_mount=pfs.mount if pfs is not None else None,
            nic_firmware=self.spec.verify.pins.nic_firmware, link_gbps=self._trained_gbps(node.sku),
            lldp=self.plan.fabric.cabling_by_lldp, opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
        )
        self._host_keys[node.name] = res.host_key
        ready: list[pulumi.Resource] = [res]
        return NodeHandle(ready=ready, management_ip=node.management_ip, host_key=res.host_key, name=node.name)

    def vm(self, name: str, vm: VmPlan, hypervisor: str, access: Access, parent: pulumi.Resource,
           depends_on: list[pulumi.Resource]) -> NodeHandle:
        vfs = [{"name": vf.name, "pf": vf.pf, "slot": vf.slot, "rail": vf.rail, "address": f"{vf.ip}/{vf.prefixlen}",
                "mtu": self.plan.networks.compute.mtu, **self._rail_gateway(vf.rail)} for vf in vm.vfs]
        # The VM presents its guest topology: its hardware tree is the planned guest's.
        topology, _ = self.plan.guest(vm.name)
        res = resources.LabVm(
            name, stack=self.spec.stack, vm=vm.name, hypervisor=hypervisor, vfs=vfs,
            **self._links(vm.management_ip, vm.storage_ip),
            authorized_key=access.public_key,
            guest={"sku": self.plan.node_named(hypervisor).sku, "topology": topology.to_json()},
            opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
        )
        return NodeHandle(ready=[res], management_ip=vm.management_ip, host_key=res.host_key, name=vm.name)
