"""The whole plan of a stack: nodes and their addresses, the compute fabric, storage tiers, pairing,
the networks with their gateways and service addresses, and each node's tuning targets.

`railyard.stack.load(path)` makes it once per run, from the FabricPlan validation made;
`make_plan(spec)` is for a spec in hand. It is cheap: it sizes everything arithmetically.
`Plan.summary()` is the JSON of `railyard plan --json`; `Plan.nodes` (every host and VM with its
addresses, netdevs and leaf port), `Plan.networks`, `Plan.tuning(node)` and `Plan.fabric.links()`
are what drivers, components, host tuning and the cabling CSV read. Nobody downstream formats an
address, derives a prefix or a netdev name, or counts hugepages again.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Iterator

from railyard.model import addressing as addr
from railyard.model.acceptance import AcceptancePlan, plan_acceptance
from railyard.model.errors import SpecError
from railyard.model.fabric import FabricPlan, nic_name, plan_fabric, routing
from railyard.model.fabric.routing import Router
from railyard.model.guest_sku import guest_sku
from railyard.model.guest_topology import GuestTopology, plan_guests, vm_devices
from railyard.model.host_tuning import CpuIsolation, TuningTargets, guest_targets, tuning_targets
from railyard.model.kubernetes import KubernetesPlan, plan_kubernetes
from railyard.model.nvlink_domain import domain_index, domain_name, plan_domains
from railyard.model.pci_layout import netdev_name
from railyard.model.plan_types import (  # and re-exported: callers import the records from here
    ComputeNetworkPlan, NetworkPlan, Networks, NicPlan, NodePlan, NvlinkDomain, Subnet, VfPlan, VmPlan,
)
from railyard.model.slurm import SlurmPlan, plan_slurm
from railyard.model.spec.types import Spec, Tenant, host_reserve_threads
from railyard.model.storage import StoragePlan, plan_storage
from railyard.model.topology import Topology

if TYPE_CHECKING:
    from railyard.model.catalog import Catalog, NodeSku


class Plan:
    """Everything Railyard will build for a spec, derived once from the spec and the catalog."""

    def __init__(self, spec: Spec, catalog: Catalog, fabric: FabricPlan, storage: StoragePlan):
        self.spec = spec
        self.catalog = catalog
        self.fabric = fabric
        self.storage = storage
        self._rails = fabric.rails
        self._ordinal = {p.name: i for i, p in enumerate(spec.node_pools)}
        self._pairings: dict[str, dict[str, str]] = {}
        self._netdevs: dict[str, dict[str, str | None]] = {}
        self._tuning: dict[str, TuningTargets] = {}
        self._guests: dict[str, tuple[GuestTopology, ...]] = {}
        self._guest_skus: dict[str, tuple[GuestTopology, NodeSku]] = {}

    # --- nodes ---------------------------------------------------------------------------------

    @functools.cached_property
    def nodes(self) -> tuple[NodePlan, ...]:
        """Every host, pool by pool, index by index (built on first use: large clusters are large)."""
        return tuple(self.iter_nodes())

    @functools.cached_property
    def _by_name(self) -> dict[str, NodePlan]:
        return {n.name: n for n in self.nodes}

    def node_named(self, name: str) -> NodePlan:
        """The host called `name`; KeyError naming the hosts when there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            shown = ", ".join(list(self._by_name)[:8]) + (", ..." if len(self._by_name) > 8 else "")
            raise KeyError(f"no host {name!r} in the plan; hosts: {shown}") from None

    def pool_nodes(self, pool_name: str) -> tuple[NodePlan, ...]:
        return tuple(n for n in self.nodes if n.pool == pool_name)

    def iter_nodes(self) -> Iterator[NodePlan]:
        for pool in self.spec.node_pools:
            for index in range(pool.count):
                yield self.node(pool.name, index)

    def node(self, pool_name: str, index: int) -> NodePlan:
        """Host `index` of a pool; a pure function of (pool, index), whatever the pool's count."""
        spec, pool = self.spec, self.spec.pool(pool_name)
        ordinal = self._ordinal[pool_name]
        sku = self.catalog.nodes[pool.sku]
        nics = sku.compute_nics
        virtual = spec.virtual and pool.vms_per_host > 0
        vms_per_host = pool.vms_per_host if virtual else 0
        vfs = pool.vm.vfs if (virtual and pool.vm is not None) else 0
        stride = self.rail_stride(pool_name)
        mgmt, stor, comp = spec.fabric.management.cidr, spec.fabric.storage.cidr, spec.fabric.compute.cidr
        kind = spec.fabric.compute.kind
        rail_prefix = addr.rail_prefixlen(comp, self._rails, kind)
        netdevs = self._netdevs_of(sku)
        rails = self.networks.compute
        gateways = [r.gateway if kind == "roce" else None for r in rails.rails]
        nic_plans = []
        for rail, nic in enumerate(nics):
            leaf, port = self.fabric.leaf_port(pool_name, index, rail)
            nic_plans.append(NicPlan(nic_name(nic), rail,
                                     addr.nic_ip(comp, kind, self._rails, ordinal, index, rail, stride),
                                     rail_prefix, leaf, port, netdevs.get(nic.rdma), gateways[rail]))
        vms = []
        per_vm = pool.vm.gpus if (virtual and pool.vm is not None and pool.vm.gpus) else 0
        for j, devices in enumerate(vm_devices(sku, vms_per_host, per_vm, vfs)):
            vf_plans = [VfPlan(v.name, v.rail, v.pf, v.slot,
                               addr.vf_ip(comp, kind, self._rails, ordinal, index, v.rail, v.slot, stride),
                               rail_prefix, gateways[v.rail]) for v in devices.vfs]
            vms.append(VmPlan(addr.vm_name(pool_name, index, j), j,
                              addr.guest_ip(mgmt, ordinal, index, j, vms_per_host),
                              addr.guest_ip(stor, ordinal, index, j, vms_per_host),
                              devices.gpus, tuple(vf_plans)))
        return NodePlan(addr.node_name(pool_name, index), pool_name, index, pool.sku,
                        addr.host_ip(mgmt, ordinal, index, vms_per_host),
                        addr.host_ip(stor, ordinal, index, vms_per_host), tuple(nic_plans), tuple(vms))

    def rail_stride(self, pool_name: str) -> int:
        """Rail addresses a host of the pool takes on each rail: its PF's, then its VFs'."""
        pool = self.spec.pool(pool_name)
        virtual = self.spec.virtual and pool.vms_per_host > 0
        vfs = pool.vm.vfs if (virtual and pool.vm is not None) else 0
        return addr.rail_stride(pool.vms_per_host if virtual else 0, vfs, len(self.catalog.nodes[pool.sku].compute_nics))

    def routers(self) -> list[Router]:
        """A RoCE fabric's switches as BGP routers (railyard.model.fabric.routing); enumerates
        every link, so only what renders switch configurations asks for it."""
        compute = self.networks.compute
        return list(routing.routers(self.fabric, self.rail_stride, {r: s.gateway for r, s in enumerate(compute.rails)},
                                    compute.rails[0].prefixlen if compute.rails else 0))

    # --- pairing, networks, tenants --------------------------------------------------------------

    def pairing(self, sku_id: str) -> dict[str, str]:
        """GPU -> NIC of a SKU, by the one pairing rule (topology.py, which calls pairing.py)."""
        if sku_id not in self._pairings:
            self._pairings[sku_id] = _pairing(self.catalog, sku_id)
        return self._pairings[sku_id]

    def _netdevs_of(self, sku: NodeSku) -> dict[str, str | None]:
        if sku.id not in self._netdevs:
            self._netdevs[sku.id] = {n.rdma: netdev_name(sku, n.rdma) for n in sku.compute_nics}
        return self._netdevs[sku.id]

    def guests(self, pool_name: str) -> tuple[GuestTopology, ...]:
        """What each VM of a pool's hosts sees (railyard.model.guest_topology), by VM index: the
        same on every host of the pool. Empty outside the virtual layout."""
        if pool_name not in self._guests:
            spec, pool = self.spec, self.spec.pool(pool_name)
            out: tuple[GuestTopology, ...] = ()
            if spec.virtual and pool.vms_per_host and pool.vm is not None:
                sku = self.catalog.nodes[pool.sku]
                # Validation laid them out already (rules.check_vm): this cannot refuse.
                out = plan_guests(sku, self.node(pool_name, 0).vms, self.pairing(pool.sku),
                                  vcpus=pool.vm.vcpus, memory_gib=pool.vm.memory_gib,
                                  reserve_threads=host_reserve_threads(sku.threads) if sku.threads else 0,
                                  hugepage_kib=spec.tuning.hugepages.guest_page_kib,
                                  key=f"railyard:nodePools[{self._ordinal[pool_name]}].vm")
            self._guests[pool_name] = out
        return self._guests[pool_name]

    @functools.cached_property
    def _vm_hosts(self) -> dict[str, tuple[NodePlan, VmPlan]]:
        return {vm.name: (n, vm) for n in self.nodes for vm in n.vms}

    def vm_named(self, name: str) -> tuple[NodePlan, VmPlan]:
        """The VM called `name` and its host; KeyError naming the VMs when there is none."""
        try:
            return self._vm_hosts[name]
        except KeyError:
            shown = ", ".join(list(self._vm_hosts)[:8]) + (", ..." if len(self._vm_hosts) > 8 else "")
            raise KeyError(f"no VM {name!r} in the plan; VMs: {shown or 'none'}") from None

    def guest(self, vm: str) -> tuple[GuestTopology, NodeSku]:
        """What VM `vm` sees: its guest topology (the same for VM j of every host of a pool), and
        that as the hardware a guest SKU describes (railyard.model.guest_sku)."""
        host, plan = self.vm_named(vm)
        if vm not in self._guest_skus:
            topo = self.guests(host.pool)[plan.index]
            self._guest_skus[vm] = (topo, guest_sku(self.catalog.nodes[host.sku], topo.to_json(), vm))
        return self._guest_skus[vm]

    def guest_tuning(self, vm: str) -> TuningTargets:
        """What guest tuning sets inside VM `vm` (railyard.model.host_tuning.guest_targets)."""
        host, _ = self.vm_named(vm)
        _, sku = self.guest(vm)
        return guest_targets(self.spec, self.spec.pool(host.pool).vm, sku, sku.pairing())

    def _isolation(self, pool_name: str) -> CpuIsolation | None:
        """A pool's hypervisors' CPU isolation: isolated, exactly the CPUs pinned to its VMs."""
        mode = self.spec.pool(pool_name).cpu_isolation
        guests = self.guests(pool_name)
        if mode is None or not guests:
            return None
        isolated = sorted(p for g in guests for c in g.cells for p in (c.pins or ()))
        nodes = self.catalog.nodes[self.spec.pool(pool_name).sku].numa_nodes
        every = [c for n in nodes for c in n.cpus() or ()]
        keep = set(every) - set(isolated)
        return CpuIsolation(mode, tuple(isolated), tuple(sorted(keep)),
                            tuple((n.id, tuple(sorted(keep & set(n.cpus() or ())))) for n in nodes))

    def tuning(self, node: NodePlan | str) -> TuningTargets:
        """What host tuning sets on `node` (a NodePlan or a host name): computed once per node."""
        plan = self.node_named(node) if isinstance(node, str) else node
        if plan.name not in self._tuning:
            self._tuning[plan.name] = tuning_targets(self.spec, self.catalog.nodes[plan.sku], plan,
                                                     self.pairing(plan.sku), self._cache_drives(plan.pool),
                                                     self._isolation(plan.pool), self.nvlink_domain(plan))
        return self._tuning[plan.name]

    def _cache_drives(self, pool_name: str) -> int:
        pool = self.storage.pool(pool_name)
        return (pool.drives or 0) if pool is not None else 0

    @functools.cached_property
    def networks(self) -> Networks:
        f = self.spec.fabric
        kind = f.compute.kind
        nets = {}
        for name in ("management", "storage"):
            cidr = getattr(f, name).cidr
            services = {}
            if name == "storage" and self.spec.storage.object is not None:
                services["object_store"] = str(cidr.broadcast_address - 1)
            if name == "management" and self.spec.kubernetes is not None:
                # Where a control plane the driver runs answers (the lab's); unused elsewhere.
                services["kubernetes"] = str(cidr.broadcast_address - 1)
            nets[name] = NetworkPlan(name, str(cidr), cidr.prefixlen,
                                     {p.name: addr.pool_block(cidr, i) for i, p in enumerate(self.spec.node_pools)},
                                     str(cidr.network_address + 1), services, getattr(f, name).mtu)
        prefix = addr.rail_prefixlen(f.compute.cidr, self._rails, kind) if self._rails else 0
        rails = tuple(Subnet(addr.rail_subnet(f.compute.cidr, r, self._rails, kind), prefix,
                             addr.rail_gateway(f.compute.cidr, r, self._rails, kind)) for r in range(self._rails))
        assert f.compute.mtu is not None, "a validated spec's compute fabric has its MTU (railyard.model.mtu)"
        compute = ComputeNetworkPlan(str(f.compute.cidr), rails, self.fabric.spines > 0, kind, f.compute.mtu)
        return Networks(nets["management"], nets["storage"], compute)

    def tenants(self) -> list[dict[str, Any]]:
        """Each tenant with its partition (InfiniBand) or VLAN (RoCE, when it has one)."""
        out = []
        for i, t in enumerate(self.spec.tenants):
            entry: dict[str, Any] = {"name": t.name}
            if self.spec.fabric.compute.kind == "infiniband":
                entry["pkey"] = f"0x{addr.partition_key(i, t.pkey):04x}"
            elif t.vlan is not None:
                entry["vlan"] = t.vlan
            entry.update(namespace=t.namespace, pools=list(t.pools), gpu_quota=self.tenant_gpus(t))
            out.append(entry)
        return out

    def pool_gpus(self, pool_name: str) -> int:
        pool = self.spec.pool(pool_name)
        return pool.count * len(getattr(self.catalog.nodes[pool.sku], "gpus", ()))

    def tenant_gpus(self, tenant: Tenant) -> int:
        """The GPUs a tenant may hold at once: its quota, else every GPU of its pools."""
        if tenant.gpu_quota is not None:
            return tenant.gpu_quota
        return sum(self.pool_gpus(p) for p in tenant.pools)

    @functools.cached_property
    def nvlink_domains(self) -> tuple[NvlinkDomain, ...]:
        """Every rack of the stack's rack-scale pools (railyard.model.nvlink_domain); empty without."""
        return plan_domains(self)

    def nvlink_domain(self, node: NodePlan | str) -> NvlinkDomain | None:
        """The NVLink domain `node` is a compute tray of; None off rack-scale pools."""
        host = self.node_named(node) if isinstance(node, str) else node
        index = domain_index(self.catalog.nodes[host.sku], host.index)
        if index is None:
            return None
        return self._domains_by_name[domain_name(host.pool, index)]

    @functools.cached_property
    def _domains_by_name(self) -> dict[str, NvlinkDomain]:
        return {d.name: d for d in self.nvlink_domains}

    @functools.cached_property
    def acceptance(self) -> AcceptancePlan | None:
        """What `up` checks after tuning (railyard.model.acceptance.AcceptancePlan), None when off."""
        return plan_acceptance(self)

    @functools.cached_property
    def slurm(self) -> SlurmPlan | None:
        """Slurm's nodes and topology (railyard.model.slurm.SlurmPlan), None without railyard:slurm."""
        return plan_slurm(self)

    @functools.cached_property
    def kubernetes(self) -> KubernetesPlan | None:
        """The Kubernetes layer (railyard.model.kubernetes.KubernetesPlan), None without railyard:kubernetes."""
        return plan_kubernetes(self)

    # --- views ---------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The plan as JSON-ready data, computed without enumerating nodes, switches or links."""
        spec = self.spec
        pools, gpus = [], 0
        for pool in spec.node_pools:
            sku = self.catalog.nodes[pool.sku]
            n_gpus = len(getattr(sku, "gpus", ()))
            gpus += n_gpus * pool.count
            entry = {"name": pool.name, "sku": pool.sku, "count": pool.count, "gpus": n_gpus * pool.count,
                     "gpus_per_node": n_gpus, "rails": len(sku.compute_nics),
                     "pairing": self.pairing(pool.sku)}
            if sku.nvlink_domain is not None:
                d = sku.nvlink_domain
                entry["nvlink_domains"] = {"name": d.name, "count": pool.count // d.compute_trays,
                                           "compute_trays": d.compute_trays, "gpus": d.gpus,
                                           "switch_trays": d.switch_trays}
            if spec.virtual:
                entry["vms_per_host"] = pool.vms_per_host
                entry["vms"] = pool.count * pool.vms_per_host
                if pool.vm is not None:
                    entry["vm"] = {"gpus": pool.vm.gpus, "vfs": pool.vm.vfs, "vcpus": pool.vm.vcpus,
                                   "memory_gib": pool.vm.memory_gib, "shape": pool.vm.shape}
            pools.append(entry)
        return {
            "stack": spec.stack,
            "region": spec.region,
            "layout": spec.layout,
            "driver": spec.driver,
            "nodes": sum(p.count for p in spec.node_pools),
            "gpus": gpus,
            "vms": spec.vms if spec.virtual else 0,
            "pools": pools,
            "fabrics": {"compute": self.fabric.summary()},
            "networks": self.networks.to_json(),
            "tenants": self.tenants(),
            "storage": self.storage.summary(),
            **({"kubernetes": self.kubernetes.summary()} if self.kubernetes is not None else {}),
        }

    def detail(self) -> dict[str, Any]:
        """The summary plus every node, switch and link (large)."""
        out = self.summary()
        out["detail"] = {"nodes": [n.to_json() for n in self.iter_nodes()], **self.fabric.detail()}
        guests = {p.name: [g.to_json() for g in self.guests(p.name)] for p in self.spec.node_pools}
        if any(guests.values()):
            out["detail"]["guests"] = {k: v for k, v in guests.items() if v}
        return out


def _pairing(catalog: Catalog, sku_id: str) -> dict[str, str]:
    return dict(Topology.from_sku(catalog.nodes[sku_id]).pairing())


def make_plan(spec: Spec, catalog: Catalog | None = None, fabric: FabricPlan | None = None) -> Plan:
    """The plan of a validated spec; raises SpecError when the fabric or a network cannot hold it.

    fabric: the FabricPlan validation already made for this spec (railyard.stack.load passes it),
    so the fabric is planned once per run; without it, it is planned (and the networks sized) here.
    """
    if catalog is None:
        from railyard.model.catalog import load_catalog

        catalog = load_catalog()
    if fabric is None:
        fabric = plan_fabric(spec, catalog)
        problems = addr.address_problems(spec, catalog, fabric)
        if problems:
            raise SpecError(problems)
    return Plan(spec, catalog, fabric, plan_storage(spec, catalog))
