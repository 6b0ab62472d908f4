"""A lab stack's storage tiers: an S3 object store, a local NVMe cache per node, a shared parallel FS.

One module per tier (this module only re-exports their API):

    object_store  SeaweedFS's S3 server in the stack's storage namespace, seeded with the sample
                  dataset; the S3 client operations run inside a namespace
                  (``python -m railyard.drivers.lab.storage OP``, see __main__.py)
    cache         per node: loop devices (md where the kernel has it), mkfs, a mount in the node
    parallel_fs   a shared directory under the lab dir, bound into each node
    mounts        mount points inside a node, shared by the cache and the parallel FS

Ids (for gc): the object store's is its netns name; the parallel-FS share's is names.pfs_id; a
node's cache and parallel-FS mount belong to the node (``<node id>/cache``, ``<node id>/pfs``).
"""

# What code outside the package uses: the lab's Pulumi providers (resources.py, whose pickled
# classes call storage.<name> at run time), gc, tests; and the API docs/lab.md lists for the module.
from railyard.drivers.lab.storage.cache import cache_exists, create_cache, delete_cache, md_available, read_cache
from railyard.drivers.lab.storage.object_store import (
    DEFAULT_DATASET,
    create_object_store,
    delete_object_store,
    object_store_dir,
    object_store_exists,
    read_object_store,
    s3_in_netns,
    sample_manifest,
    shard_bytes,
    weed_binary,
)
from railyard.drivers.lab.storage.parallel_fs import (
    create_pfs,
    create_pfs_mount,
    delete_pfs,
    delete_pfs_mount,
    pfs_dir,
    pfs_exists,
    pfs_mount_exists,
    read_pfs,
    read_pfs_mount,
)

__all__ = [
    "DEFAULT_DATASET", "cache_exists", "create_cache", "create_object_store", "create_pfs", "create_pfs_mount",
    "delete_cache", "delete_object_store", "delete_pfs", "delete_pfs_mount", "md_available", "object_store_dir",
    "object_store_exists", "pfs_dir", "pfs_exists", "pfs_mount_exists", "read_cache", "read_object_store",
    "read_pfs", "read_pfs_mount", "s3_in_netns", "sample_manifest", "shard_bytes", "weed_binary",
]
