"""The lab driver: the planned cluster as namespaces, veth rails and sshd on this machine."""

from __future__ import annotations

import ipaddress
from typing import Any

import pulumi

from components.driver import Access, Driver, NodeHandle
from railyard.drivers.lab import hwtree, resources
from railyard.model.catalog import load_catalog
from railyard.model.plan import NodePlan, VmPlan

# Netdev names the catalog does not give (the DGX H100 sources name no management or storage
# netdev): lab stand-ins, the same on every node.
MGMT_NETDEV = "mgmt0"
STORAGE_NETDEV = "stor0"


def host_address(cidr: str) -> str:
    """The host's address on a stack's management network: its first host address."""
    return str(next(ipaddress.ip_network(cidr).hosts()))


class LabDriver(Driver):
    name = "lab"
    playground = True  # lab stacks are brought up and torn down at will: `make down` just works

    def access(self, name: str, parent: pulumi.Resource) -> Access:
        key = resources.AccessKey(name, comment=f"railyard-{self.spec.stack}",
                                  opts=pulumi.ResourceOptions(parent=parent))
        # Secret here as well as in state (additional_secret_outputs): whatever the engine does,
        # every consumer of the key sees a secret.
        return Access(user="root", public_key=key.public_key, private_key=pulumi.Output.secret(key.private_key))

    def _rail_gateways(self) -> list[str]:
        rails = self.plan.networks()["compute"]["rails"]
        return [f"{next(ipaddress.ip_network(r).hosts())}/{ipaddress.ip_network(r).prefixlen}" for r in rails]

    def fabric(self, name: str, parent: pulumi.Resource) -> list[pulumi.Resource]:
        networks = self.plan.networks()
        mgmt = networks["management"]["cidr"]
        fab = resources.LabFabric(name, stack=self.spec.stack, rails=len(networks["compute"]["rails"]),
                                  mgmt_cidr=mgmt, host_address=host_address(mgmt),
                                  opts=pulumi.ResourceOptions(parent=parent))
        ready: list[pulumi.Resource] = [fab]
        if self.plan.summary()["fabrics"]["compute"]["switches"]["spine"] > 0:
            # Where the plan has spines, a spine namespace routes between rails: same-rail traffic
            # stays on its leaf, cross-rail traffic crosses the spine, as on the real fabric.
            ready.append(resources.LabSpine(f"{name}-spine", stack=self.spec.stack, gateways=self._rail_gateways(),
                                            opts=pulumi.ResourceOptions(parent=parent, depends_on=[fab])))
        return ready

    def storage(self, name: str, parent: pulumi.Resource, depends_on: list[pulumi.Resource]) -> dict[str, Any]:
        obj = self.spec.storage.object
        out: dict[str, Any] = {}
        if obj is not None:
            cidr = ipaddress.ip_network(self.plan.networks()["storage"]["cidr"])
            # The store takes the storage network's last host address: node addresses count up
            # from the bottom of per-pool blocks, so the top is never a node's.
            address = f"{cidr.broadcast_address - 1}/{cidr.prefixlen}"
            store = resources.LabObjectStore(name, stack=self.spec.stack, address=address, bucket=obj.bucket,
                                             opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on))
            self.object_store = store
            out.update(object_endpoint=store.endpoint, bucket=obj.bucket, dataset_prefix=store.dataset_prefix,
                       access_key=store.access_key, secret_key=pulumi.Output.secret(store.secret_key))
        pfs = self.spec.storage.parallel_fs
        if pfs is not None:
            out["parallel_fs"] = {"kind": pfs.kind, "mount": pfs.mount,
                                  "lab": "a directory shared by every node, standing in for Lustre or GPFS"}
        return out

    def node(self, name: str, node: NodePlan, access: Access, parent: pulumi.Resource,
             depends_on: list[pulumi.Resource]) -> NodeHandle:
        sku = load_catalog().nodes[node.sku]
        networks = self.plan.networks()
        has_spine = len(depends_on) > 1
        gateways = self._rail_gateways()
        mgmt_prefix = ipaddress.ip_network(networks["management"]["cidr"]).prefixlen
        storage_prefix = ipaddress.ip_network(networks["storage"]["cidr"]).prefixlen
        rails = []
        for nic in node.nics:
            rail = {"name": hwtree.netdev_name(sku, nic.name), "rail": nic.rail, "address": f"{nic.ip}/{nic.prefixlen}"}
            if has_spine:
                rail["gateway"] = gateways[nic.rail].split("/")[0]
            rails.append(rail)
        res = resources.LabNode(
            name, stack=self.spec.stack, node=node.name, sku=node.sku,
            mgmt={"name": MGMT_NETDEV, "address": f"{node.management_ip}/{mgmt_prefix}"},
            rails=rails,
            storage={"name": STORAGE_NETDEV, "address": f"{node.storage_ip}/{storage_prefix}"},
            compute_cidr=networks["compute"]["cidr"] if has_spine else None,
            authorized_key=access.public_key,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
        )
        ready: list[pulumi.Resource] = [res]
        cache = self.spec.storage.local_cache
        pfs = self.spec.storage.parallel_fs
        if cache is not None:
            # One sparse image per data drive of the SKU (one loop device where the kernel has no md).
            data_drives = sum(d.count for d in (sku.nvme or ()) if d.role == "data") or 1
            ready.append(resources.LabNodeStorage(
                f"{name}-storage", stack=self.spec.stack, node=node.name, cache_mount=cache.mount, fs=cache.fs,
                raid=cache.raid, drives=min(data_drives, 16), size_gib=1.0,
                pfs_mount=pfs.mount if pfs is not None else None,
                opts=pulumi.ResourceOptions(parent=parent, depends_on=[res])))
        return NodeHandle(ready=ready, management_ip=node.management_ip, host_key=res.host_key)

    def vm(self, name: str, vm: VmPlan, hypervisor: str, access: Access, parent: pulumi.Resource,
           depends_on: list[pulumi.Resource]) -> NodeHandle:
        networks = self.plan.networks()
        has_spine = self.plan.summary()["fabrics"]["compute"]["switches"]["spine"] > 0
        gateways = self._rail_gateways()
        mgmt_prefix = ipaddress.ip_network(networks["management"]["cidr"]).prefixlen
        storage_prefix = ipaddress.ip_network(networks["storage"]["cidr"]).prefixlen
        vfs = []
        for vf in vm.vfs:
            entry = {"name": vf.name, "pf": vf.pf, "slot": vf.slot, "rail": vf.rail, "address": f"{vf.ip}/{vf.prefixlen}"}
            if has_spine:
                entry["gateway"] = gateways[vf.rail].split("/")[0]
            vfs.append(entry)
        res = resources.LabVm(
            name, stack=self.spec.stack, vm=vm.name, hypervisor=hypervisor,
            mgmt={"name": MGMT_NETDEV, "address": f"{vm.management_ip}/{mgmt_prefix}"}, vfs=vfs,
            storage={"name": STORAGE_NETDEV, "address": f"{vm.storage_ip}/{storage_prefix}"},
            compute_cidr=networks["compute"]["cidr"] if has_spine else None,
            authorized_key=access.public_key,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
        )
        return NodeHandle(ready=[res], management_ip=vm.management_ip, host_key=res.host_key)
