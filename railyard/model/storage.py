"""Storage tiers: capacity and read bandwidth of the object store, the parallel file system and the
node-local NVMe cache, per node and per GPU.

Only what the stack and the catalog say is computed; where a number the sizing needs is not in
either, the plan uses a labelled assumption (ASSUMPTIONS below) and lists it under `assumptions`
in its output, so no figure looks more certain than it is. Units: capacities in TB (10^12 bytes,
as drive vendors count) with TiB where the stack gave TiB; bandwidths in GB/s (bytes), the unit
storage is read in; network speeds in Gb/s are divided by 8.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from railyard.model.catalog import Catalog, NodeSku
    from railyard.model.spec.types import Spec

TIB_IN_TB = 1.099511627776

# Facts our sources do not give, each a labelled assumption (shown in every plan that uses it).
ASSUMPTIONS = {
    "nvme_read": ("nvme_read_gb_s", 6.5,
                  "sequential read of one data NVMe drive, 6.5 GB/s (a PCIe Gen4 x4 drive; the catalog "
                  "gives drive sizes, not speeds)"),
    "storage_nic": ("storage_nic_gbps", None,
                    "a storage NIC whose speed the catalog does not give runs at the compute fabric speed"),
}

# Usable share of the drives' raw capacity. Reads are served by every drive at every level (a
# mirror reads from either copy), so read bandwidth is drives x one drive's rate throughout.
RAID_USABLE = {
    "raid0": 1.0,
    "raid1": 0.5,
    "raid10": 0.5,
    "none": None,  # no array: the cache lives on one drive
}


@dataclass(frozen=True)
class PoolStorage:
    pool: str
    nodes: int
    gpus_per_node: int
    drives: int | None
    drive_tb: float | None
    cache_tb: float | None
    cache_read_gb_s: float | None
    network_read_gb_s: float | None  # what the storage NICs of one node can carry

    def per_gpu(self, value: float | None) -> float | None:
        return None if value is None or not self.gpus_per_node else value / self.gpus_per_node


@dataclass
class StoragePlan:
    object: dict[str, Any] | None
    parallel_fs: dict[str, Any] | None
    local_cache: dict[str, Any]
    pools: list[PoolStorage]
    assumptions: list[str] = field(default_factory=list)

    def pool(self, name: str) -> PoolStorage | None:
        return next((p for p in self.pools if p.pool == name), None)

    def summary(self) -> dict[str, Any]:
        pools = []
        for p in self.pools:
            pools.append({
                "name": p.pool,
                "nodes": p.nodes,
                "gpus_per_node": p.gpus_per_node,
                "cache": {"drives": p.drives, "drive_tb": p.drive_tb, "per_node_tb": _r(p.cache_tb),
                          "total_tb": _r(p.cache_tb * p.nodes) if p.cache_tb is not None else None,
                          "read_gb_s_per_node": _r(p.cache_read_gb_s),
                          "read_gb_s_per_gpu": _r(p.per_gpu(p.cache_read_gb_s))},
                "network": {"read_gb_s_per_node": _r(p.network_read_gb_s),
                            "read_gb_s_per_gpu": _r(p.per_gpu(p.network_read_gb_s))},
            })
        cache_total = sum(p.cache_tb * p.nodes for p in self.pools if p.cache_tb is not None)
        out: dict[str, Any] = {
            "tiers": {
                "object": self.object,
                "parallel_fs": self.parallel_fs,
                "local_cache": {**self.local_cache, "total_tb": _r(cache_total)},
            },
            "pools": pools,
            "assumptions": list(self.assumptions),
        }
        if self.parallel_fs is not None and self.parallel_fs.get("capacity_tb"):
            pfs = self.parallel_fs["capacity_tb"]
            smallest = min((p.cache_tb for p in self.pools if p.cache_tb is not None), default=None)
            # How much of the shared file system a node (or the whole cluster) can hold locally:
            # above 1, a node can cache the whole data set and repeat epochs never touch the PFS.
            out["cache_vs_parallel_fs"] = {
                "node_cache_fraction": _r(smallest / pfs) if smallest is not None else None,
                "cluster_cache_fraction": _r(cache_total / pfs),
            }
        return out


def _r(x: float | None, nd: int = 3) -> float | int | None:
    if x is None:
        return None
    r = round(x, nd)
    return int(r) if float(r).is_integer() else r


def _gpus(sku: NodeSku | None) -> int:
    g = getattr(sku, "gpus", None)
    return g if isinstance(g, int) else len(g or ())


def _data_drives(sku: NodeSku | None) -> tuple[int | None, float | None]:
    groups = getattr(sku, "nvme", None)
    if not groups:
        return None, None
    data = [g for g in groups if getattr(g, "role", None) == "data"]
    if not data:
        return 0, 0.0
    # Mixed drive sizes would make RAID sizing a per-drive question; the catalog has none today.
    return sum(g.count for g in data), min(g.size_tb for g in data)


def plan_storage(spec: Spec, catalog: Catalog | None = None) -> StoragePlan:
    """Capacity and read bandwidth of each storage tier for a validated spec."""
    if catalog is None:
        from railyard.model.catalog import load_catalog

        catalog = load_catalog()
    st = spec.storage
    cache = st.local_cache
    raid = getattr(cache, "raid", "raid0") or "raid0"
    used: set[str] = set()
    pools = []
    fabric_gbps = getattr(spec.fabric.compute, "speed_gbps", None)
    for pool in spec.node_pools:
        sku = catalog.nodes.get(pool.sku)
        drives, drive_tb = _data_drives(sku)
        cache_tb = read = None
        if drives is not None and drive_tb is not None:
            if drives == 0:
                cache_tb, read = 0.0, 0.0
            else:
                usable = RAID_USABLE.get(raid, 1.0)
                per_drive = ASSUMPTIONS["nvme_read"][1]
                assert per_drive is not None, "ASSUMPTIONS gives a drive's read rate"
                if usable is None:  # raid: none
                    cache_tb, read = drive_tb, per_drive
                else:
                    cache_tb, read = drives * drive_tb * usable, drives * per_drive
                used.add("nvme_read")
        net = 0.0
        unknown = False
        for nic in getattr(sku, "nics", ()) or ():
            if getattr(nic, "role", None) != "storage":
                continue
            speed = getattr(nic, "speed_gbps", None)
            if speed is None:
                unknown = True
                speed = fabric_gbps
            net += (speed or 0) / 8
        if unknown:
            used.add("storage_nic")
        pools.append(PoolStorage(pool.name, pool.count, _gpus(sku), drives, drive_tb, cache_tb, read,
                                 net if net else None))
    obj = None
    if st.object is not None:
        obj = {"bucket": st.object.bucket, "endpoint": st.object.endpoint or "the driver's object store",
               "capacity_tb": None, "capacity_note": "an object store grows on demand",
               "read_limit": "the storage NICs of each node (see pools[].network)"}
    pfs = None
    if st.parallel_fs is not None:
        tib = st.parallel_fs.capacity_tib
        pfs = {"kind": st.parallel_fs.kind, "mount": st.parallel_fs.mount, "capacity_tib": _r(tib),
               "capacity_tb": _r(tib * TIB_IN_TB),
               "read_limit": "the storage NICs of each node (see pools[].network); the file system's own "
                             "throughput is not in the stack"}
        if st.parallel_fs.source:
            pfs["source"] = st.parallel_fs.source
    local = {"mount": cache.mount, "raid": raid, "fs": getattr(cache, "fs", "xfs")}
    assumptions = [ASSUMPTIONS[k][2] for k in sorted(used)]
    return StoragePlan(obj, pfs, local, pools, assumptions)
