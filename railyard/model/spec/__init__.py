"""The typed stack config and its validation.

A stack is `stacks/Pulumi.<stack>.yaml`. Only the `railyard:*` keys of its `config:` are ours; every
other key (Pulumi's `encryptionsalt`, `secretsprovider`, other namespaces such as `kubernetes:`) is
passed over untouched. The config is parsed once into frozen dataclasses; every problem found on the
way is collected and raised together as one `SpecError` (see docs/stack-reference.md for every key,
its default and its rules).

The model knows no driver: each driver's own keys (`railyard:<driver>`) and rules come in as
DriverRules from the driver registry, which railyard.stack hands to the parser; `railyard.stack.load`
is the one entry point that does so and plans the result.

Public API here: `read_stack_file(path) -> (config, stack)`, `parse(config, stack, drivers) ->
(Spec, FabricPlan | None)`, and the types a Spec is made of.

The package, one way: types.py (constants, the dataclasses, DriverRules) and show.py (values as a
problem shows them; it imports neither) <- rules.py (the cross-field rules and the planners' checks)
<- load.py (reading a stack file, the parser's sections); section.py (SectionReader: the readers
the drivers' rules share for their own sections) imports only show.py of them. This module only
re-exports, so callers import `railyard.model.spec.<name>` and never a submodule.
"""

from railyard.model.spec.load import parse, read_stack_file, stack_name_of
from railyard.model.spec.rules import pool_guests
from railyard.model.spec.section import LOGIN_NAME, SSH_AGENT, SectionReader
from railyard.model.spec.show import did_you_mean, is_secret, one_of, show
from railyard.model.spec.types import (
    ACCEPTANCE_ON_FAILURE,
    AFFINITY_POLICIES,
    DEFAULT_ASN_BASE,
    DEFAULT_CIDRS,
    DEFAULT_SPEED,
    DEFAULT_SWITCH,
    DEFAULT_SWITCH_BY_SPEED,
    FABRIC_KINDS,
    HOST_RESERVE_MIN_THREADS,
    HOST_RESERVE_THREAD_FRACTION,
    HUGEPAGE_SIZES,
    IOMMU_MODES,
    KEYS,
    LAYOUTS,
    LOCAL_FILESYSTEMS,
    NAMESPACE,
    OS_RESERVE_FRACTION,
    OS_RESERVE_MIN_GIB,
    PARALLEL_FS_KINDS,
    RAID_LEVELS,
    SLURM_MAX_SWITCH_WAIT,
    SPEEDS_BY_KIND,
    TOPOLOGIES,
    TTL_UNITS,
    AcceptanceSpec,
    Affinity,
    ComputeFabric,
    DriverRules,
    Ephemeral,
    Fabric,
    Hugepages,
    KubernetesSpec,
    LocalCache,
    Network,
    NodePool,
    ObjectTier,
    ParallelFs,
    Secret,
    SlurmSpec,
    Spec,
    Sriov,
    StorageSpec,
    Tenant,
    TuningSpec,
    VmSpec,
    documented_keys,
    host_reserve_threads,
    os_reserve_gib,
    parse_ttl,
)

__all__ = [
    "ACCEPTANCE_ON_FAILURE", "AFFINITY_POLICIES", "DEFAULT_ASN_BASE", "DEFAULT_CIDRS", "DEFAULT_SPEED", "DEFAULT_SWITCH", "DEFAULT_SWITCH_BY_SPEED", "FABRIC_KINDS",
    "HOST_RESERVE_MIN_THREADS", "HOST_RESERVE_THREAD_FRACTION", "HUGEPAGE_SIZES", "IOMMU_MODES", "KEYS",
    "LAYOUTS", "LOCAL_FILESYSTEMS", "LOGIN_NAME", "NAMESPACE", "OS_RESERVE_FRACTION", "OS_RESERVE_MIN_GIB",
    "PARALLEL_FS_KINDS", "RAID_LEVELS", "SLURM_MAX_SWITCH_WAIT", "SPEEDS_BY_KIND", "TOPOLOGIES", "TTL_UNITS",
    "AcceptanceSpec", "Affinity", "ComputeFabric", "DriverRules", "Ephemeral", "Fabric", "Hugepages", "KubernetesSpec", "LocalCache", "Network",
    "NodePool", "ObjectTier", "ParallelFs", "SSH_AGENT", "Secret", "SectionReader", "SlurmSpec", "Spec", "Sriov", "StorageSpec",
    "Tenant", "TuningSpec", "VmSpec",
    "documented_keys", "host_reserve_threads", "os_reserve_gib", "parse", "parse_ttl", "pool_guests", "read_stack_file",
    "stack_name_of",
]
