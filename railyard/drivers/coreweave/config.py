"""What a stack's `railyard:coreweave` section means: frozen dataclasses, made by rules.parse.

Pulumi-free. The API token is ciphertext here (Secret); only the Pulumi program opens it, as a
secret Output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from railyard.model.spec import Secret

# CoreWeave's node labels, widest first, as the levels of Kueue's Topology. The backend.* labels
# are on every node of a backend fabric, InfiniBand or RoCE
# (https://docs.coreweave.com/products/networking/hpc-interconnect/infiniband-roce-labels);
# ib.coreweave.cloud/superpod only on InfiniBand nodes
# (https://docs.coreweave.com/docs/products/networking/hpc-interconnect/infiniband-labels).
FABRIC_LABEL = "backend.coreweave.cloud/fabric"
SUPERPOD_LABEL = "ib.coreweave.cloud/superpod"
LEAFGROUP_LABEL = "backend.coreweave.cloud/leafgroup"
# A GB200 or GB300 NVL72 node's rack, "a globally unique rack identifier", which SUNK makes a
# topology/block block (https://docs.coreweave.com/products/sunk/optimize_workloads/topology-scheduling).
NVLINK_DOMAIN_LABEL = "ds.coreweave.com/nvlink.domain"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# CoreWeave's Kueue chart (https://docs.coreweave.com/products/cks/clusters/coreweave-charts/kueue):
# its name and the namespace the docs install it in. The repository and version are the stack's.
KUEUE_CHART = "cks-kueue"
KUEUE_NAMESPACE = "kueue-system"

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
LIFECYCLE_STATUSES = ("Enabled", "Disabled")


def topology_levels(fabric_kind: str, racks: bool = False) -> tuple[str, ...]:
    """Kueue's Topology levels on CoreWeave: its own fabric labels, widest first; with rack-scale
    pools (racks), the NVLink domain below the leaf group."""
    superpod = (SUPERPOD_LABEL,) if fabric_kind == "infiniband" else ()
    domain = (NVLINK_DOMAIN_LABEL,) if racks else ()
    return (FABRIC_LABEL, *superpod, LEAFGROUP_LABEL, *domain, HOSTNAME_LABEL)


@dataclass(frozen=True)
class Prefix:
    """A named VPC prefix: CKS refers to its pod, service and load-balancer ranges by name."""

    name: str
    cidr: str


@dataclass(frozen=True)
class Cluster:
    name: str
    version: str
    """CKS's Kubernetes minor version, e.g. "1.32"."""
    pod_cidr: Prefix
    service_cidr: Prefix
    internal_lb_cidrs: tuple[Prefix, ...]
    public: bool = False


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str | None = None

    def toleration(self) -> dict[str, str]:
        out = {"key": self.key, "operator": "Equal" if self.value is not None else "Exists", "effect": self.effect}
        if self.value is not None:
            out["value"] = self.value
        return out

    def manifest(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value is not None:
            out["value"] = self.value
        return out


@dataclass(frozen=True)
class PoolConfig:
    """A node pool's CoreWeave settings (`railyard:coreweave.pools.<pool>`)."""

    instance_type: str
    """From the catalog (railyard/data/coreweave/instance-types.yaml), never the stack."""
    autoscaling: bool = False
    min_nodes: int | None = None
    max_nodes: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True)
class LifecycleRule:
    id: str
    status: str = "Enabled"
    prefix: str | None = None
    expiration_days: int | None = None
    abort_incomplete_multipart_upload_days: int | None = None


@dataclass(frozen=True)
class ObjectStorage:
    policy: dict[str, Any] | None = None
    """An S3 bucket policy document (Version, Statement), sent as JSON."""
    lifecycle: tuple[LifecycleRule, ...] = ()


@dataclass(frozen=True)
class KueueChart:
    repository: str
    version: str
    chart: str = KUEUE_CHART
    namespace: str = KUEUE_NAMESPACE


@dataclass(frozen=True)
class CoreWeaveConfig:
    zone: str
    api_token: Secret | None
    """railyard:coreweave.apiToken; None: the provider's own `coreweave:token` (a secret in the
    stack's config) or COREWEAVE_API_TOKEN, which the NodePools and the layer use too."""
    vpc_name: str
    cluster: Cluster
    pools: dict[str, PoolConfig]
    object_storage: ObjectStorage
    kueue: KueueChart | None
    platform_topology: tuple[str, ...]
    """Read by the Kubernetes layer (railyard.model.kubernetes): the node labels CoreWeave sets
    itself replace Railyard's per-node labels in Kueue's Topology, and no Node is patched."""

    def pool(self, name: str) -> PoolConfig:
        return self.pools[name]

    def pool_tolerations(self, name: str) -> list[dict[str, str]]:
        """Read by the Kubernetes layer: tolerations of the pool's taints, which Kueue adds to the
        pods it admits to the pool's flavor, so a job queued for a tainted pool can land there."""
        return [t.toleration() for t in self.pools[name].taints] if name in self.pools else []
