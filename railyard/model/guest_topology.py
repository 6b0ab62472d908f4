"""What a VM of the virtual layout sees: its NUMA cells, its PCIe tree and where its GPUs and VFs
sit in it, and the host CPUs its vCPUs run on. Derived from the host's PCIe tree (the catalog's,
railyard.model.pcie) and the GPU-NIC pairing, so that NCCL inside the guest finds each GPU as
close to its NIC's VF as on the host (Vela's "realistic representation of all devices and
connections"; NVIDIA/nccl #1464, kubevirt #19103).

- **NUMA.** One guest cell per host NUMA node the VM's devices sit on, in host order.
- **PCIe.** One `pcie-expander-bus` per host root complex (host bridge) the VM uses, on its
  guest cell. Below it, each host PCIe switch the VM uses becomes `pcie-root-port ->
  pcie-switch-upstream-port -> pcie-switch-downstream-port` (one downstream port per device), so
  that a GPU and its paired VF share a virtual switch where they share one on the host. "A host
  switch" is the topmost switch on the device's path below its host bridge: on a dgx-h100 the NIC
  sits on `sw0` and the GPU on `sw0-gpu` below it, and both are under `sw0`. A device under no
  switch gets a root port of its own: the NUMA-level layout (`level: numa`), which is all a SKU
  whose catalog entry has no switches (vela-a100) can give.
- **CPUs.** A host keeps its housekeeping CPUs (the first cores of every NUMA node, as many as the
  hypervisor reserve of railyard.model.spec.types.host_reserve_threads, in whole cores) for
  itself, its services, interrupts and the VMs' emulator threads. The VM's vCPUs are split over
  its cells by the share of its GPUs on each, and each cell's are pinned to the next free cores of
  its host node, in whole cores (both threads of a core to two consecutive vCPUs), so no two VMs
  and no VM and the host share a core. Where the catalog does not know the SKU's CPU lists or
  the threads of a core, nothing is pinned (`pins` None) and the cells keep only their sizes.
- **Memory** is split over the cells as the host's hugepages are split over its nodes (by the GPUs
  each serves, largest remainder), in whole hugepages where the host backs guests with them.

Guest PCI addresses are the ones the guest's firmware gives: it numbers buses depth first from
each expander bus's `busNr`. The numbers between one expander's busNr and the next higher one's
are that expander's, and those below the lowest are pcie-root's (libvirt's docs). The plan gives
the expanders the top of the range in guest order upwards, so that bus order is device order: the
guest numbers its GPUs (nvidia-smi, CUDA's PCI order) and its VFs (mlx5_N, probe order) as the host
numbers them.

Pure: the same SKU, VM shape and pairing always give the same topology, for every host of a pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Protocol, Sequence

from railyard.model import addressing, pcie
from railyard.model.fabric import nic_name
from railyard.model.numa_split import cell_weights, split_pages
from railyard.model.sysfs_discovery import format_cpulist as _ranges

if TYPE_CHECKING:
    from railyard.model.catalog import NodeSku, NumaNode

EXPANDER = "pcie-expander-bus"
ROOT_PORT = "pcie-root-port"
UPSTREAM = "pcie-switch-upstream-port"
DOWNSTREAM = "pcie-switch-downstream-port"
# Expander buses plug into pcie-root from this slot up: libvirt gives its own devices (video,
# disks, the balloon) the low slots.
FIRST_EXPANDER_SLOT = 0x10
MAX_BUS = 0xFF
# Bus numbers below the lowest expander's busNr are pcie-root's, for the root ports libvirt adds
# for the guest's own disks and NICs: at least this many stay free.
ROOT_BUSES = 0x20
MAX_SLOTS = 32

LEVEL_SWITCH = "switch"
LEVEL_NUMA = "numa"


class GuestTopologyError(ValueError):
    """A VM that cannot be laid out on its host: the stack key to change, what it holds, what would
    do, and why (railyard.model.errors.Problem's fields)."""

    def __init__(self, key: str, found: str, allowed: str, why: str):
        super().__init__(f"{key}: {why}")
        self.key, self.found, self.allowed, self.why = key, found, allowed, why


@dataclass(frozen=True)
class GuestCell:
    id: int
    host_numa: int
    vcpus: tuple[int, ...]
    pins: tuple[int, ...] | None
    """The host CPU of each vCPU, in vcpus' order; None where the SKU's CPU lists are unknown."""
    memory_mib: int


@dataclass(frozen=True)
class GuestController:
    index: int
    """libvirt's index: the bus it provides in libvirt's addressing (0 is pcie-root)."""
    model: str
    parent: int
    slot: int
    bus: int
    """The guest bus number below it (an expander's busNr, a port's secondary bus)."""
    mirrors: str
    """The host bridge or switch it stands for."""
    cell: int | None = None
    """An expander bus's guest NUMA cell."""


@dataclass(frozen=True)
class GuestDevice:
    kind: str
    """`gpu` or `vf`."""
    name: str
    """The GPU's name (GPU0) or the VF's in the VM (vf0)."""
    host: str
    """The host device: the GPU, or the VF's PF (its RDMA name)."""
    port: int
    """The libvirt index of the port it plugs into."""
    address: str
    """Its address in the guest."""
    cell: int
    switch: int | None
    """The libvirt index of its virtual switch's upstream port; None in the NUMA-level layout."""
    pair: str | None = None
    """The device it pairs with: a GPU's VF, a VF's GPU."""
    vf_slot: int | None = None


@dataclass(frozen=True)
class GuestTopology:
    level: str
    cells: tuple[GuestCell, ...]
    controllers: tuple[GuestController, ...]
    devices: tuple[GuestDevice, ...]
    emulator_cpus: tuple[int, ...] | None
    """The housekeeping CPUs of the VM's host nodes, where the emulator threads run."""
    threads_per_core: int
    hugepage_kib: int | None

    @property
    def vcpus(self) -> int:
        return sum(len(c.vcpus) for c in self.cells)

    @property
    def memory_mib(self) -> int:
        return sum(c.memory_mib for c in self.cells)

    def device(self, name: str) -> GuestDevice:
        for d in self.devices:
            if d.name == name:
                return d
        raise KeyError(name)

    @property
    def hcas_in_gpu_order(self) -> list[str]:
        """The VFs, each after the GPU it pairs with, then any unpaired: NCCL_IB_HCA's order."""
        paired = [self.device(g.pair) for g in self.devices if g.kind == "gpu" and g.pair]
        rest = [d for d in self.devices if d.kind == "vf" and d not in paired]
        return [d.name for d in paired + rest]

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "cells": [{"id": c.id, "host_numa": c.host_numa, "vcpus": _ranges(c.vcpus),
                       "pins": _ranges(c.pins) if c.pins is not None else None, "memory_mib": c.memory_mib}
                      for c in self.cells],
            "controllers": [{"index": c.index, "model": c.model, "parent": c.parent, "slot": c.slot, "bus": c.bus,
                             "mirrors": c.mirrors, **({"cell": c.cell} if c.cell is not None else {})}
                            for c in self.controllers],
            "devices": [{"kind": d.kind, "name": d.name, "host": d.host, "address": d.address, "cell": d.cell,
                         "port": d.port, "switch": d.switch, "pair": d.pair}
                        for d in self.devices],
            "emulator_cpus": _ranges(self.emulator_cpus) if self.emulator_cpus is not None else None,
        }


# --------------------------------------------------------------------------------------------------
# CPUs


def cores(cpulist: Iterable[int], threads_per_core: int) -> list[tuple[int, ...]]:
    """A NUMA node's CPUs as cores: Linux lists a node's first threads, then their siblings in the
    same order (0-55,112-167), so core j is the j-th CPU of each of threads_per_core equal runs."""
    cpus = sorted(cpulist)
    per = len(cpus) // threads_per_core
    if per * threads_per_core != len(cpus):
        raise ValueError(f"{len(cpus)} CPUs are not whole cores of {threads_per_core} threads")
    return [tuple(cpus[t * per + j] for t in range(threads_per_core)) for j in range(per)]


def pinning(sku: NodeSku) -> int | None:
    """Threads per core where vCPUs can be pinned on the SKU (the catalog gives every NUMA node's
    CPU list and the threads of a core); None where they cannot, and nothing is pinned."""
    tpc = sku.threads_per_core
    lists = [n.cpus() for n in sku.numa_nodes]
    if not tpc or not lists or any(c is None or len(c) % tpc for c in lists):
        return None
    return tpc


def housekeeping(sku: NodeSku, reserve_threads: int) -> dict[int, tuple[int, ...]] | None:
    """Host NUMA node -> the CPUs the host keeps (its first cores), or None where nothing is pinned
    (pinning). reserve_threads: the hypervisor's reserve, spread evenly over the nodes and rounded
    up to whole cores."""
    tpc = pinning(sku)
    if tpc is None:
        return None
    keep = math.ceil(reserve_threads / (len(sku.numa_nodes) * tpc))
    return {n.id: tuple(sorted(c for core in cores(_cpus(n), tpc)[:keep] for c in core)) for n in sku.numa_nodes}


def _cpus(node: NumaNode) -> list[int]:
    cpus = node.cpus()
    assert cpus is not None, "pinning() is None unless the catalog gives every NUMA node's CPU list"
    return cpus


# --------------------------------------------------------------------------------------------------
# A host's VMs and their devices


@dataclass(frozen=True)
class VfSlot:
    name: str
    """The VF's name in the VM (vf0)."""
    rail: int
    pf: str
    """Its PF's RDMA name (mlx5_0)."""
    slot: int


@dataclass(frozen=True)
class VmDevices:
    gpus: tuple[str, ...]
    vfs: tuple[VfSlot, ...]


class VfView(Protocol):
    """A VF as the layout reads it: a VfSlot, or the plan's VfPlan (railyard.model.plan imports
    this module, so it is not named here)."""

    @property
    def name(self) -> str: ...
    @property
    def pf(self) -> str: ...
    @property
    def slot(self) -> int: ...


class VmView(Protocol):
    """A VM's devices as the layout reads them: a VmDevices, or the plan's VmPlan."""

    @property
    def gpus(self) -> tuple[str, ...]: ...
    @property
    def vfs(self) -> Sequence[VfView]: ...


def vm_devices(sku: NodeSku, vms_per_host: int, gpus_per_vm: int, vfs_per_vm: int) -> tuple[VmDevices, ...]:
    """Which GPUs and VFs each VM of a host gets: the GPUs in order, gpus_per_vm each, and the
    VFs dealt over the rails (addressing.vf_placement)."""
    nics = sku.compute_nics
    gpus = [g.name for g in sku.gpus]
    out = []
    for j in range(vms_per_host):
        vfs = []
        for k in range(vfs_per_vm):
            rail, slot = addressing.vf_placement(j, k, vfs_per_vm, len(nics))
            vfs.append(VfSlot(f"vf{k}", rail, nic_name(nics[rail]), slot))
        out.append(VmDevices(tuple(gpus[j * gpus_per_vm:(j + 1) * gpus_per_vm]), tuple(vfs)))
    return tuple(out)


def default_vcpus(sku: NodeSku, vms: Iterable[VmView], most: int, reserve_threads: int) -> int:
    """The most vCPUs, at most `most`, that every VM of a host can have pinned beside its devices
    (whole cores); `most` itself where nothing is pinned."""
    tpc = pinning(sku)
    if tpc is None:
        return max(1, most)
    vms = list(vms)
    keep = housekeeping(sku, reserve_threads)
    for vcpus in range(most // tpc * tpc, 0, -tpc):
        try:
            _pin_all(sku, vms, vcpus, keep, "")
            return vcpus
        except GuestTopologyError:
            continue
    return tpc


# --------------------------------------------------------------------------------------------------
# The plan of a host's VMs


def plan_guests(sku: NodeSku, vms: Iterable[VmView], pairing: dict[str, str], *, vcpus: int, memory_gib: int,
                reserve_threads: int, hugepage_kib: int | None, key: str) -> tuple[GuestTopology, ...]:
    """The guest topology of each of a host's VMs, in order; GuestTopologyError naming the key
    (under `key`, the pool's `vm`) of what cannot be laid out.

    vms: each VM's GPUs (names) and VFs (name, pf, slot), as vm_devices gives them; pairing: GPU ->
    compute NIC (the host's); vcpus/memory_gib: per VM."""
    vms = list(vms)
    tree = sku.pcie_tree
    keep = housekeeping(sku, reserve_threads)
    pins = _pin_all(sku, vms, vcpus, keep, key)
    out = []
    for vm, cpus in zip(vms, pins):
        order, pair_of = _order(vm, pairing)
        numas = _numas(sku, tree, vm, key)
        cell_of = {n: i for i, n in enumerate(numas)}
        controllers, placed = _tree(tree, order, cell_of, key)
        devices = tuple(
            GuestDevice(kind, name, host, placed[i][0], f"0000:{placed[i][1]:02x}:00.0", cell_of[_numa(tree, host)],
                        placed[i][2], pair_of.get(name), vf.slot if vf is not None else None)
            for i, (kind, name, host, vf) in enumerate(order))
        mem = _memory(sku, tree, vm, numas, memory_gib, hugepage_kib, key)
        cells, first = [], 0
        for i, (n, (size, pinned)) in enumerate(zip(numas, cpus)):
            cells.append(GuestCell(i, n, tuple(range(first, first + size)), pinned, mem[i]))
            first += size
        emulator = None if keep is None else tuple(sorted(c for n in numas for c in keep[n]))
        level = LEVEL_SWITCH if any(d.switch is not None for d in devices) else LEVEL_NUMA
        out.append(GuestTopology(level, tuple(cells), tuple(controllers), devices, emulator,
                                 pinning(sku) or 1, hugepage_kib))
    return tuple(out)


def _order(vm: VmView, pairing: dict[str, str]) -> tuple[list[tuple[str, str, str, VfView | None]], dict[str, str]]:
    """The VM's devices in guest order, (kind, name, host device, vf): each GPU, then the VF of its
    own NIC; then the VFs no GPU of the VM pairs with. And each paired device's pair."""
    vfs = list(vm.vfs)
    order: list[tuple[str, str, str, VfView | None]] = []
    taken: set[str] = set()
    pair_of: dict[str, str] = {}
    for g in vm.gpus:
        order.append(("gpu", g, g, None))
        vf = next((v for v in vfs if v.pf == pairing.get(g) and v.name not in taken), None)
        if vf is not None:
            taken.add(vf.name)
            pair_of[g], pair_of[vf.name] = vf.name, g
            order.append(("vf", vf.name, vf.pf, vf))
    order += [("vf", v.name, v.pf, v) for v in vfs if v.name not in taken]
    return order, pair_of


def _numas(sku: NodeSku, tree: pcie.PcieTree, vm: VmView, key: str) -> list[int]:
    """The host NUMA nodes of the VM's devices, in host order: its guest cells."""
    out = set()
    for dev in [*vm.gpus, *(v.pf for v in vm.vfs)]:
        if dev not in tree:
            raise GuestTopologyError(key, sku.id, "a SKU whose catalog entry places every device in its PCIe tree",
                                     f"{sku.id} does not place {dev} in its PCIe tree")
        numa = tree.numa(dev)
        if numa is None:
            raise GuestTopologyError(key, sku.id, "a SKU whose catalog entry gives every device's NUMA node",
                                     f"{sku.id} does not say which NUMA node {dev} is on")
        out.add(numa)
    return sorted(out)


def _numa(tree: pcie.PcieTree, dev: str) -> int:
    numa = tree.numa(dev)
    assert numa is not None, "_numas() refuses a VM with a device on no known NUMA node"
    return numa


def _weights(tree: pcie.PcieTree, vm: VmView, numas: list[int]) -> dict[int, int]:
    return cell_weights({i: sum(1 for g in vm.gpus if tree.numa(g) == n) for i, n in enumerate(numas)})


def _pin_all(sku: NodeSku, vms: list[VmView], vcpus: int, keep: dict[int, tuple[int, ...]] | None,
             key: str) -> list[list[tuple[int, tuple[int, ...] | None]]]:
    """Each VM's cells as (vCPUs, the host CPUs they are pinned to, or None): split by the cells'
    weights, in whole cores where pinned; each cell on the next free cores of its node, after the
    host's housekeeping cores and the host's VMs before it."""
    tree = sku.pcie_tree
    tpc = pinning(sku)
    free = None
    if tpc is not None and keep is not None:
        free = {n.id: [c for c in cores(_cpus(n), tpc) if c[0] not in keep[n.id]] for n in sku.numa_nodes}
        if vcpus % tpc:
            raise GuestTopologyError(f"{key}.vcpus", str(vcpus), f"a multiple of {tpc}",
                                     f"vCPUs are pinned in whole cores of {tpc} threads, so that no two VMs and no "
                                     "VM and the host share a core")
    unit = tpc if free is not None and tpc is not None else 1  # (free is only set with tpc)
    out = []
    for vm in vms:
        numas = _numas(sku, tree, vm, key)
        shares = split_pages(vcpus // unit, _weights(tree, vm, numas))
        if any(shares[i] == 0 for i in range(len(numas))):
            raise GuestTopologyError(f"{key}.vcpus", str(vcpus), f"at least {len(numas) * unit}",
                                     f"the VM's devices sit on {len(numas)} host NUMA nodes, each a guest cell "
                                     f"with {'a core' if unit > 1 else 'a vCPU'} of its own")
        cells = []
        for i, n in enumerate(numas):
            size = shares[i] * unit
            pinned = None
            if free is not None:
                want = shares[i]
                if len(free[n]) < want:
                    raise GuestTopologyError(
                        f"{key}.vcpus", str(vcpus),
                        "vCPUs that can be pinned inside the NUMA nodes holding the VM's devices",
                        f"{size} of them go on host NUMA node {n} (it holds {sum(1 for g in vm.gpus if tree.numa(g) == n)} "
                        f"of the VM's GPUs), which has {len(free[n]) * unit} CPUs left besides the hypervisor's own "
                        "and the host's other VMs'")
                taken, free[n] = free[n][:want], free[n][want:]
                # vCPU 2k and 2k+1 are the two threads of one core.
                pinned = tuple(c for core in taken for c in core)
            cells.append((size, pinned))
        out.append(cells)
    return out


def _memory(sku: NodeSku, tree: pcie.PcieTree, vm: VmView, numas: list[int], memory_gib: int, hugepage_kib: int | None,
            key: str) -> list[int]:
    """Each cell's memory in MiB, split as the host's hugepages are over its nodes (host_tuning:
    by the GPUs each serves, largest remainder), in whole pages where hugepages back it."""
    page_mib = max(1, (hugepage_kib or 1024) // 1024)
    pages = split_pages(memory_gib * 1024 // page_mib, _weights(tree, vm, numas))
    if any(pages[i] == 0 for i in range(len(numas))):
        raise GuestTopologyError(f"{key}.memoryGiB", str(memory_gib), f"at least {len(numas) * page_mib} MiB",
                                 f"the VM has {len(numas)} guest NUMA cells, each with memory of its own"
                                 + (f" in whole {page_mib} MiB hugepages" if hugepage_kib else ""))
    return [pages[i] * page_mib for i in range(len(numas))]


def _tree(tree: pcie.PcieTree, order: list[tuple[str, str, str, VfView | None]], cell_of: dict[int, int],
          key: str) -> tuple[list[GuestController], dict[int, tuple[int, int, int | None]]]:
    """The guest's controllers, and each device's (port index, guest bus, switch upstream index)."""
    groups: dict[str, dict[str, list[int]]] = {}  # host bridge -> switch (or a lone device) -> positions
    for i, (_, _, host, _) in enumerate(order):
        groups.setdefault(tree.host_bridge(host), {}).setdefault(_top_switch(tree, host) or f"{host}#{i}", []).append(i)
    bridges = sorted(groups, key=lambda hb: (tree.numa(hb), min(min(v) for v in groups[hb].values())))
    for hb in bridges:
        wide = [g for g, devs in groups[hb].items() if len(devs) > MAX_SLOTS]
        if len(groups[hb]) > MAX_SLOTS or wide:
            raise GuestTopologyError(key, f"{len(order)} devices", f"at most {MAX_SLOTS} ports per guest bus",
                                     f"the VM's devices under host {(wide or [hb])[0]} need more than {MAX_SLOTS} ports")

    def buses(hb: str) -> int:
        # The expander's bus, then each root port's, a switch's internal bus and a bus per downstream port.
        return 1 + sum(1 + (1 + len(devs) if _is_switch(tree, g) else 0) for g, devs in groups[hb].items())

    controllers: list[GuestController] = []
    placed: dict[int, tuple[int, int, int | None]] = {}
    # The expanders take the top of the bus numbers, in guest order upwards, so that bus order is
    # device order: the guest numbers its GPUs (nvidia-smi) and its VFs (mlx5_N) as the host does.
    low, index = MAX_BUS + 1 - sum(buses(hb) for hb in bridges), 1
    if low < ROOT_BUSES:
        raise GuestTopologyError(key, f"{len(order)} devices", f"a VM whose PCIe tree leaves pcie-root "
                                 f"{ROOT_BUSES} buses", "the VM's expander buses would need more than "
                                 f"{MAX_BUS + 1 - ROOT_BUSES} bus numbers")
    for n, hb in enumerate(bridges):
        if n:
            low += buses(bridges[n - 1])
        pxb = index
        numa = tree.numa(hb)
        assert numa is not None, "_numas() refuses a VM with a device on no known NUMA node"
        controllers.append(GuestController(pxb, EXPANDER, 0, FIRST_EXPANDER_SLOT + n, low, hb, cell_of[numa]))
        index, bus = index + 1, low
        for slot, (group, devs) in enumerate(groups[hb].items()):
            rp, bus = index, bus + 1
            switch = _is_switch(tree, group)
            mirrors = group if switch else (tree.node(order[devs[0]][2]).parent or hb)
            controllers.append(GuestController(rp, ROOT_PORT, pxb, slot, bus, mirrors))
            index += 1
            if not switch:
                placed[devs[0]] = (rp, bus, None)
                continue
            up, bus = index, bus + 1
            controllers.append(GuestController(up, UPSTREAM, rp, 0, bus, group))
            index += 1
            for ds_slot, pos in enumerate(devs):
                bus += 1
                controllers.append(GuestController(index, DOWNSTREAM, up, ds_slot, bus, group))
                placed[pos] = (index, bus, up)
                index += 1
    return controllers, placed


def _top_switch(tree: pcie.PcieTree, dev: str) -> str | None:
    """The topmost PCIe switch on dev's path below its host bridge."""
    switches = [a for a in tree.ancestors(dev) if tree.node(a).kind == pcie.SWITCH]
    return switches[-1] if switches else None


def _is_switch(tree: pcie.PcieTree, group: str) -> bool:
    return group in tree and tree.node(group).kind == pcie.SWITCH
