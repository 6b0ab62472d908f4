"""The plan's records and the view of it that the layers made from it take.

The records: a host (NodePlan) with its compute NICs (NicPlan) and VMs (VmPlan, their VFs VfPlan),
and the networks (Networks: management and storage NetworkPlan, the compute rails). PlanView: what
acceptance, Slurm and Kubernetes (railyard.model.acceptance, .slurm, .kubernetes) read of a
railyard.model.plan.Plan. plan.py imports those layers to make them, so they cannot name Plan; they
take a PlanView, and mypy checks that Plan is one where it hands itself over. Both live here, below
plan.py and those layers; railyard.model.plan re-exports the records, where callers import them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from railyard.model.catalog import Catalog
    from railyard.model.fabric.planner import FabricPlan
    from railyard.model.host_tuning import TuningTargets
    from railyard.model.spec.types import Spec


@dataclass(frozen=True)
class NicPlan:
    """A compute NIC (PF) of a host: its rail, its address on the rail, the leaf port it plugs into."""

    name: str
    """The RDMA device name (mlx5_0): the catalog's, and the pairing's."""
    rail: int
    ip: str
    prefixlen: int
    leaf: str
    leaf_port: int
    netdev: str | None = None
    """Its network interface: the catalog's name, else the predictable name of its PCI address
    (model.pci_layout); None where the catalog cannot tell its link layer."""
    gateway: str | None = None
    """The rail's gateway on a RoCE fabric, where the leaves route between rails; None on
    InfiniBand, whose rails have no IP router."""


@dataclass(frozen=True)
class VfPlan:
    """An SR-IOV VF given to a VM: the PF (rail) it comes from, its slot on that PF, its address."""

    name: str
    rail: int
    pf: str
    slot: int
    ip: str
    prefixlen: int
    gateway: str | None = None
    """As NicPlan.gateway."""


@dataclass(frozen=True)
class Subnet:
    """A rail's subnet and its first host address, reserved in pool block 0 for the rail's router:
    the leaves of a RoCE rail answer there. An InfiniBand fabric has no IP router, so on real IB
    the address stays unused (the lab's spine namespace answers there, routing IPoIB rails)."""

    cidr: str
    prefixlen: int
    gateway: str


@dataclass(frozen=True)
class NetworkPlan:
    """The management or storage network: every host has an address on it (NodePlan)."""

    name: str
    cidr: str
    prefixlen: int
    pools: dict[str, str]
    """Pool name -> the block of this network the pool owns (addressing.py)."""
    gateway: str
    """Its first host address, reserved in pool block 0: the controller's side of the network
    (the lab's host end of the management bridge)."""
    services: dict[str, str]
    """Service -> its address; on the storage network, `object_store` where the stack has an
    object tier, on the management network `kubernetes` where it has railyard:kubernetes (the
    last host address: node addresses count up from the bottom of their blocks, so the top is
    never a node's)."""
    mtu: int
    """Every host interface on it (railyard.model.mtu)."""


@dataclass(frozen=True)
class ComputeNetworkPlan:
    cidr: str
    rails: tuple[Subnet, ...]
    routed: bool
    """Whether the fabric has a tier above its leaves, through which traffic between rails can
    pass; without one, each rail is a leaf of its own."""
    kind: str
    mtu: int
    """The rails' netdev MTU: IPoIB's on InfiniBand, Ethernet's on RoCE (railyard.model.mtu)."""


@dataclass(frozen=True)
class Networks:
    management: NetworkPlan
    storage: NetworkPlan
    compute: ComputeNetworkPlan

    def to_json(self) -> dict[str, Any]:
        """The `networks` of `railyard plan --json` and of the stack's outputs."""
        out: dict[str, Any] = {n.name: {"cidr": n.cidr, "pools": dict(n.pools), "mtu": n.mtu}
                               for n in (self.management, self.storage)}
        out["compute"] = {"cidr": self.compute.cidr, "rails": [r.cidr for r in self.compute.rails],
                          "mtu": self.compute.mtu}
        if self.compute.kind == "roce":
            out["compute"]["gateways"] = [r.gateway for r in self.compute.rails]
        return out


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
                      "leaf_port": n.leaf_port, "netdev": n.netdev, "gateway": n.gateway} for n in self.nics],
            "vms": [{"name": v.name, "index": v.index, "management_ip": v.management_ip, "storage_ip": v.storage_ip,
                     "gpus": list(v.gpus),
                     "vfs": [{"name": f.name, "rail": f.rail, "pf": f.pf, "slot": f.slot, "ip": f.ip,
                              "prefixlen": f.prefixlen, "gateway": f.gateway} for f in v.vfs]} for v in self.vms],
        }


@dataclass(frozen=True)
class NvlinkDomain:
    name: str
    pool: str
    index: int
    """Its ordinal in the pool."""
    sku: str
    nodes: tuple[str, ...]
    """The compute trays, in tray order."""
    addresses: tuple[str, ...]
    """Their management addresses, in the same order: what IMEX's nodes_config.cfg lists."""
    gpus: int
    switch_trays: int | None
    unit: str
    """The scalable unit it sits in."""

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "pool": self.pool, "sku": self.sku, "unit": self.unit, "gpus": self.gpus,
                "switchTrays": self.switch_trays, "nodes": list(self.nodes)}


class PlanView(Protocol):
    """The part of railyard.model.plan.Plan that the layers made from it read."""

    @property
    def spec(self) -> Spec: ...
    @property
    def catalog(self) -> Catalog: ...
    @property
    def fabric(self) -> FabricPlan: ...
    @property
    def nodes(self) -> tuple[NodePlan, ...]: ...
    @property
    def networks(self) -> Networks: ...
    def pool_nodes(self, pool_name: str) -> tuple[NodePlan, ...]: ...
    def pool_gpus(self, pool_name: str) -> int: ...
    def tenants(self) -> list[dict[str, Any]]: ...
    def tuning(self, node: NodePlan | str) -> TuningTargets: ...
    @property
    def nvlink_domains(self) -> tuple[NvlinkDomain, ...]: ...
    def nvlink_domain(self, node: NodePlan | str) -> NvlinkDomain | None: ...
