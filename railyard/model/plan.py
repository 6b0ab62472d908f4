"""The whole plan of a stack: nodes and their addresses, the compute fabric, storage tiers, pairing.

`make_plan(spec)` is cheap: it sizes everything arithmetically. `Plan.summary()` is the JSON of
`railyard plan --json`; `Plan.nodes` (every host and VM with its addresses and leaf port) and
`Plan.fabric.links()` enumerate, and are what components and the cabling CSV consume.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterator

from railyard.model import addressing as addr
from railyard.model.errors import SpecError
from railyard.model.fabric import FabricPlan, compute_nics, nic_name, plan_fabric
from railyard.model.storage import StoragePlan, plan_storage
from railyard.model.topology import Topology


@dataclass(frozen=True)
class NicPlan:
    """A compute NIC (PF) of a host: its rail, its address on the rail, the leaf port it plugs into."""

    name: str
    rail: int
    ip: str
    prefixlen: int
    leaf: str
    leaf_port: int


@dataclass(frozen=True)
class VfPlan:
    """An SR-IOV VF given to a VM: the PF (rail) it comes from, its slot on that PF, its address."""

    name: str
    rail: int
    pf: str
    slot: int
    ip: str
    prefixlen: int


@dataclass(frozen=True)
class VmPlan:
    name: str
    index: int
    management_ip: str
    storage_ip: str
    gpus: tuple[str, ...]
    vfs: tuple[VfPlan, ...]


@dataclass(frozen=True)
class NodePlan:
    name: str
    pool: str
    index: int
    sku: str
    management_ip: str
    storage_ip: str
    nics: tuple[NicPlan, ...]
    vms: tuple[VmPlan, ...] = ()

    def to_json(self) -> dict[str, Any]:
        # By hand: dataclasses.asdict deep-copies every field and is the slow part of --detail.
        return {
            "name": self.name, "pool": self.pool, "index": self.index, "sku": self.sku,
            "management_ip": self.management_ip, "storage_ip": self.storage_ip,
            "nics": [{"name": n.name, "rail": n.rail, "ip": n.ip, "prefixlen": n.prefixlen, "leaf": n.leaf,
                      "leaf_port": n.leaf_port} for n in self.nics],
            "vms": [{"name": v.name, "index": v.index, "management_ip": v.management_ip, "storage_ip": v.storage_ip,
                     "gpus": list(v.gpus),
                     "vfs": [{"name": f.name, "rail": f.rail, "pf": f.pf, "slot": f.slot, "ip": f.ip,
                              "prefixlen": f.prefixlen} for f in v.vfs]} for v in self.vms],
        }


class Plan:
    """Everything Railyard will build for a spec, derived once from the spec and the catalog."""

    def __init__(self, spec: Any, catalog: Any, fabric: FabricPlan, storage: StoragePlan):
        self.spec = spec
        self.catalog = catalog
        self.fabric = fabric
        self.storage = storage
        self._rails = fabric.rails
        self._ordinal = {p.name: i for i, p in enumerate(spec.node_pools)}
        self._pairings: dict[str, dict[str, str]] = {}

    # --- nodes ---------------------------------------------------------------------------------

    @functools.cached_property
    def nodes(self) -> tuple[NodePlan, ...]:
        """Every host, pool by pool, index by index (built on first use: large clusters are large)."""
        return tuple(self.iter_nodes())

    def iter_nodes(self) -> Iterator[NodePlan]:
        for pool in self.spec.node_pools:
            for index in range(pool.count):
                yield self.node(pool.name, index)

    def node(self, pool_name: str, index: int) -> NodePlan:
        """Host `index` of a pool; a pure function of (pool, index), whatever the pool's count."""
        spec, pool = self.spec, self.spec.pool(pool_name)
        ordinal = self._ordinal[pool_name]
        sku = self.catalog.nodes[pool.sku]
        nics = compute_nics(sku)
        virtual = spec.virtual and pool.vms_per_host > 0
        vms_per_host = pool.vms_per_host if virtual else 0
        vfs = pool.vm.vfs if (virtual and pool.vm is not None) else 0
        stride = addr.rail_stride(vms_per_host, vfs, len(nics))
        mgmt, stor, comp = spec.fabric.management.cidr, spec.fabric.storage.cidr, spec.fabric.compute.cidr
        kind = spec.fabric.compute.kind
        rail_prefix = addr.rail_prefixlen(comp, self._rails, kind)
        nic_plans = []
        for rail, nic in enumerate(nics):
            leaf, port = self.fabric.leaf_port(pool_name, index, rail)
            nic_plans.append(NicPlan(nic_name(nic), rail,
                                     addr.nic_ip(comp, kind, self._rails, ordinal, index, rail, stride),
                                     rail_prefix, leaf, port))
        vms = []
        gpus = [g.name for g in getattr(sku, "gpus", ())]
        per_vm = pool.vm.gpus if (virtual and pool.vm is not None and pool.vm.gpus) else 0
        for j in range(vms_per_host):
            vf_plans = []
            for k in range(vfs):
                rail, slot = addr.vf_placement(j, k, vfs, len(nics))
                vf_plans.append(VfPlan(f"vf{k}", rail, nic_plans[rail].name, slot,
                                       addr.vf_ip(comp, kind, self._rails, ordinal, index, rail, slot, stride),
                                       rail_prefix))
            vms.append(VmPlan(addr.vm_name(pool_name, index, j), j,
                              addr.guest_ip(mgmt, ordinal, index, j, vms_per_host),
                              addr.guest_ip(stor, ordinal, index, j, vms_per_host),
                              tuple(gpus[j * per_vm:(j + 1) * per_vm]), tuple(vf_plans)))
        return NodePlan(addr.node_name(pool_name, index), pool_name, index, pool.sku,
                        addr.host_ip(mgmt, ordinal, index, vms_per_host),
                        addr.host_ip(stor, ordinal, index, vms_per_host), tuple(nic_plans), tuple(vms))

    # --- pairing, networks, tenants --------------------------------------------------------------

    def pairing(self, sku_id: str) -> dict[str, str]:
        """GPU -> NIC of a SKU, by the one pairing rule (topology.py, which calls pairing.py)."""
        if sku_id not in self._pairings:
            self._pairings[sku_id] = _pairing(self.catalog, sku_id)
        return self._pairings[sku_id]

    def networks(self) -> dict[str, Any]:
        f = self.spec.fabric
        kind = f.compute.kind
        out = {}
        for name in ("management", "storage"):
            cidr = getattr(f, name).cidr
            out[name] = {"cidr": str(cidr),
                         "pools": {p.name: addr.pool_block(cidr, i) for i, p in enumerate(self.spec.node_pools)}}
        out["compute"] = {"cidr": str(f.compute.cidr),
                          "rails": [addr.rail_subnet(f.compute.cidr, r, self._rails, kind) for r in range(self._rails)]}
        if kind == "roce":
            out["compute"]["gateways"] = [addr.rail_gateway(f.compute.cidr, r, self._rails, kind)
                                          for r in range(self._rails)]
        return out

    def tenants(self) -> list[dict[str, Any]]:
        return [{"name": t.name, "pkey": f"0x{addr.partition_key(i, t.pkey):04x}"}
                for i, t in enumerate(self.spec.tenants)]

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
                     "gpus_per_node": n_gpus, "rails": len(compute_nics(sku)),
                     "pairing": self.pairing(pool.sku)}
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
            "networks": self.networks(),
            "tenants": self.tenants(),
            "storage": self.storage.summary(),
        }

    def detail(self) -> dict[str, Any]:
        """The summary plus every node, switch and link (large)."""
        out = self.summary()
        out["detail"] = {"nodes": [n.to_json() for n in self.iter_nodes()], **self.fabric.detail()}
        return out


def _pairing(catalog: Any, sku_id: str) -> dict[str, str]:
    return dict(Topology.from_sku(catalog.nodes[sku_id]).pairing())


def make_plan(spec: Any, catalog: Any = None) -> Plan:
    """The plan of a validated spec; raises SpecError when the fabric or a network cannot hold it."""
    if catalog is None:
        from railyard.model.catalog import load_catalog

        catalog = load_catalog()
    fabric = plan_fabric(spec, catalog)
    problems = addr.address_problems(spec, catalog)
    if problems:
        raise SpecError(problems)
    return Plan(spec, catalog, fabric, plan_storage(spec, catalog))
