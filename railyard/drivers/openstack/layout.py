"""What the openstack driver makes of the plan, Pulumi-free: resource names, each VM shape's
flavor (nova's extra specs, from the plan's guest topology), whether nova can pin it, and the
cloud-config that gives a server its host key. rules.py checks the same flavors driver.py makes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import yaml

from railyard.drivers.openstack.config import OpenStackConfig
from railyard.model.guest_topology import GuestTopology
from railyard.model.spec.types import host_reserve_threads

if TYPE_CHECKING:
    from railyard.model.catalog import NodeSku
    from railyard.model.spec import Spec


def prefix(spec: Spec) -> str:
    """What every name the driver gives starts with: `<region>-<stack>`, or the stack's name alone
    where it starts with its region already (us-south-vela), so one cloud holds many stacks."""
    if spec.stack == spec.region or spec.stack.startswith(f"{spec.region}-"):
        return spec.stack
    return f"{spec.region}-{spec.stack}"


def tags(spec: Spec) -> list[str]:
    """Neutron's and nova's tags of every resource that takes them (no ',' or '/' in either)."""
    return [f"railyard-region={spec.region}", f"railyard-stack={spec.stack}"]


def labels(spec: Spec) -> dict[str, str]:
    """The same as metadata, for resources that take key/value pairs."""
    return {"railyard-region": spec.region, "railyard-stack": spec.stack}


def page_size(hugepage_kib: int | None) -> str:
    """hw:mem_page_size in nova's form: `1GB`, `2MB`; `small` where the guest is not backed by
    hugepages (the stack reserves none on the hypervisors)."""
    if hugepage_kib is None:
        return "small"
    if hugepage_kib % (1 << 20) == 0:
        return f"{hugepage_kib >> 20}GB"
    if hugepage_kib % (1 << 10) == 0:
        return f"{hugepage_kib >> 10}MB"
    return str(hugepage_kib)  # nova reads a bare number as KiB


@dataclass(frozen=True)
class Flavor:
    """A nova flavor: the VM's size and the extra specs that pin it like the plan's guest."""

    vcpus: int
    ram_mib: int
    disk_gib: int
    extra_specs: tuple[tuple[str, str], ...]
    page_kib: int | None = None
    """The hugepage size behind hw:mem_page_size (None: small pages), for the fit check."""

    @property
    def specs(self) -> dict[str, str]:
        return dict(self.extra_specs)

    @property
    def numa_nodes(self) -> int:
        return int(self.specs["hw:numa_nodes"])


def flavor(topology: GuestTopology, *, gpu_alias: str, cpu_thread_policy: str, pci_numa_affinity_policy: str,
           root_disk_gib: int) -> Flavor:
    """The flavor of a VM whose guest topology the plan made (Plan.guest, Plan.guests): one guest
    NUMA node per host NUMA node its GPUs and VFs sit on, its GPUs through the PCI alias (its VFs
    are SR-IOV ports, not the alias's)."""
    gpus = sum(1 for d in topology.devices if d.kind == "gpu")
    specs = {
        "hw:cpu_policy": "dedicated",
        "hw:cpu_thread_policy": cpu_thread_policy,
        "hw:numa_nodes": str(len(topology.cells)),
        "hw:mem_page_size": page_size(topology.hugepage_kib),
        "pci_passthrough:alias": f"{gpu_alias}:{gpus}",
        "hw:pci_numa_affinity_policy": pci_numa_affinity_policy,
    }
    return Flavor(topology.vcpus, topology.memory_mib, root_disk_gib, tuple(specs.items()), topology.hugepage_kib)


def config_flavor(config: OpenStackConfig, topology: GuestTopology) -> Flavor:
    return flavor(topology, gpu_alias=config.gpu_alias, cpu_thread_policy=config.cpu_thread_policy,
                  pci_numa_affinity_policy=config.pci_numa_affinity_policy, root_disk_gib=config.root_disk_gib)


@dataclass(frozen=True)
class PoolFlavor:
    name: str
    """The nova flavor's name: `<prefix>-<pool>`, with `-vm<j>` where a pool's VMs differ."""
    flavor: Flavor
    vms: tuple[int, ...]
    """The VM indexes on a host (VmPlan.index) that take it."""


def pool_flavors(spec: Spec, config: OpenStackConfig, guests: tuple[GuestTopology, ...], pool: str) -> list[PoolFlavor]:
    """One flavor per distinct VM shape of the pool (VM j is the same on every host)."""
    shapes: dict[Flavor, list[int]] = {}
    for j, topology in enumerate(guests):
        shapes.setdefault(config_flavor(config, topology), []).append(j)
    base = f"{prefix(spec)}-{pool}"
    if len(shapes) == 1:
        ((f, vms),) = shapes.items()
        return [PoolFlavor(base, f, tuple(vms))]
    return [PoolFlavor(f"{base}-vm{vms[0]}", f, tuple(vms)) for f, vms in shapes.items()]


# --------------------------------------------------------------------------------------------------
# Whether nova can pin a flavor


@dataclass(frozen=True)
class FitProblem:
    key: str
    """The key of railyard:nodePools[i].vm to change (vcpus, memoryGiB), or the driver's
    cpuThreadPolicy."""
    found: str
    allowed: str
    why: str


def _cell_limit(sku: NodeSku, thread_policy: str) -> tuple[int, str, int, int] | None:
    """(vCPUs nova can pin for one guest NUMA node on one host NUMA node of the SKU, what they
    count, the node's threads, the threads the hypervisor keeps there); None where the catalog does
    not say (vela-a100's threads are unknown)."""
    threads, nodes = sku.threads, len(sku.numa_nodes)
    tpc = sku.threads_per_core
    if not threads or not nodes or (thread_policy == "isolate" and not tpc):
        return None
    lists = [n.cpus() for n in sku.numa_nodes]
    per = min(len(c) for c in lists if c is not None) if all(c is not None for c in lists) else threads // nodes
    # The hypervisor's reserve, spread over the nodes in whole cores, as the plan keeps it
    # (guest_topology.housekeeping): nova's cpu_dedicated_set leaves those out.
    keep = math.ceil(host_reserve_threads(threads) / (nodes * (tpc or 1))) * (tpc or 1)
    free = max(0, per - keep)
    if thread_policy == "isolate":
        assert tpc, "isolate without threads per core returned None above"
        return free // tpc, "cores", per, keep
    return free, "threads", per, keep


def fit_problem(sku: NodeSku, flavor: Flavor, thread_policy: str) -> FitProblem | None:
    """Why nova cannot boot `flavor` on a host of `sku`, or None. With hw:cpu_policy=dedicated and
    hw:numa_nodes=N, nova splits the vCPUs and the memory evenly over N guest NUMA nodes (an
    uneven split is refused), and pins each on one host NUMA node: its share must fit there, in
    threads, or in whole cores under hw:cpu_thread_policy=isolate (a vCPU's sibling stays idle)."""
    n = flavor.numa_nodes
    spread = f"nova splits a dedicated flavor evenly over hw:numa_nodes={n} (the host NUMA nodes of the VM's GPUs " \
             "and VFs) and refuses an uneven split"
    if flavor.vcpus % n:
        return FitProblem("vcpus", str(flavor.vcpus), f"a multiple of {n}", spread)
    page_kib = flavor.page_kib
    cell_mib = flavor.ram_mib // n
    if flavor.ram_mib % n or (page_kib and (cell_mib * 1024) % page_kib):
        page_mib = (page_kib or 1024) // 1024
        unit = f"{n * page_mib} MiB ({n} guest NUMA nodes of whole {page_mib} MiB pages)" if page_kib else f"{n} MiB"
        return FitProblem("memoryGiB", f"{flavor.ram_mib // 1024}", f"a multiple of {unit}",
                          spread + (", each guest NUMA node's memory in whole hugepages" if page_kib else ""))
    if thread_policy == "require" and sku.threads_per_core == 1:
        return FitProblem("cpuThreadPolicy", "'require'", f"prefer or isolate on {sku.id}",
                          f"{sku.id} has one thread per core: require places vCPUs on thread siblings, which it lacks")
    limit = _cell_limit(sku, thread_policy)
    if limit is None:
        return None
    most, unit, per, keep = limit
    share = flavor.vcpus // n
    if share > most:
        why = (f"nova pins {share} vCPUs on each of {n} host NUMA node{'s' if n > 1 else ''}; a {sku.id} NUMA node "
               f"has {per} threads, the hypervisor keeps {keep}, so {most} {unit} are left")
        if thread_policy == "isolate":
            why += " (hw:cpu_thread_policy=isolate gives every vCPU a whole core)"
        return FitProblem("vcpus", str(flavor.vcpus), f"at most {most * n} ({most} per guest NUMA node)", why)
    return None


# --------------------------------------------------------------------------------------------------
# A server's first boot


def cloud_config(host_public_key: str, host_private_key: str) -> str:
    """The user_data that makes the server present the host key Railyard pinned for it (cloud-init's
    ssh_keys), instead of keys it would generate at first boot and nobody could check."""
    kind = host_public_key.split()[0].removeprefix("ssh-").split("-")[0]  # ssh-ed25519 -> ed25519
    doc = {"ssh_deletekeys": True, "ssh_genkeytypes": [],
           "ssh_keys": {f"{kind}_private": host_private_key, f"{kind}_public": host_public_key}}
    return "#cloud-config\n" + yaml.dump(doc, Dumper=_Literal, sort_keys=False)


class _Literal(yaml.SafeDumper):
    """A PEM key as the block it is (`|`), not a quoted string of escaped lines."""


_Literal.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))
