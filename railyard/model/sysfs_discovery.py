"""GPUs, RDMA NICs and the PCIe tree between them, read from a sysfs tree: the one reader.

The same file runs in `railyard` (Topology.from_sysfs, `railyard topology import DIR`) and on hosts
as Ansible module_utils (the gpu_nic_affinity role), so the affinity a host computes and the one the
CLI shows come from one piece of code. Stdlib only; imports pcie.py the way both places can.

How the tree is read, as NCCL and nvidia-smi read it: every PCI function's directory under
`<sysfs>/devices` sits below the directories of the bridges above it, so the path from
`pciDDDD:BB` (the host bridge, i.e. the root complex) down to the function is its PCIe ancestry.
A PCIe switch shows up as an upstream port with downstream ports below it; pcie.py counts a switch
as one bridge ("the same switch" is what PIX means), so the ports of one switch collapse into one
node named by its upstream port. Which bridge is which comes from the PCIe capability's port type
when the config space is readable (as root on a host), else from the structure PCIe guarantees:
a bridge on a root bus is a root port, a bridge below a root port or a downstream port is an
upstream port, a bridge below an upstream port is a downstream port.

GPUs are the functions of a display class (0x0300xx, 0x0302xx), or, where the class is not given,
those bound to the nvidia driver; they are numbered GPU0.. in bus order, as nvidia-smi numbers
them. NICs are the functions with an RDMA device (`infiniband/<name>`), named by it. SR-IOV virtual
functions (those with a `physfn` link) are left out: enabling VFs must not change the topology.

host_facts() adds the rest of a host's hardware to what discover() finds (NIC link layer, state,
speed and MTU; NUMA nodes, CPUs, memory, hugepages, NVMe drives, the kernel command line) as one
JSON-ready dict: what the hosts driver reads on each server (railyard.model.bundle) and
hardware_check.py compares with the pool's SKU.
"""

from __future__ import annotations

import os
import re
from typing import Iterable
from dataclasses import dataclass, field

try:
    from railyard.model import pcie
except ImportError:  # shipped to a host as Ansible module_utils
    from ansible.module_utils import railyard_pcie as pcie  # type: ignore[no-redef]

BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
HOST_BRIDGE_DIR = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")
GPU_CLASSES = ("0x0300", "0x0302")
GPU_DRIVERS = ("nvidia",)
# PCIe capability port types (PCIe base spec, Device/Port Type field).
_ROOT_PORT, _UPSTREAM, _DOWNSTREAM = 4, 5, 6


class DiscoveryError(ValueError):
    """A sysfs tree that cannot be read (missing, or not a sysfs layout)."""


@dataclass
class PciFunction:
    bdf: str
    host_bridge: str  # pci0000:15
    ancestors: tuple[str, ...]  # bdfs of the bridges above, root port first
    klass: str | None
    vendor: str | None
    device: str | None
    numa: int | None
    local_cpulist: str | None
    driver: str | None
    rdma: tuple[str, ...] = ()
    netdevs: tuple[str, ...] = ()
    msi_irqs: tuple[int, ...] = ()
    sriov_totalvfs: int | None = None
    sriov_numvfs: int | None = None
    is_vf: bool = False
    port_type: int | None = None
    link_speed: str | None = None
    """current_link_speed as the kernel writes it (`32.0 GT/s PCIe`); None where not shown."""
    link_width: int | None = None
    max_link_speed: str | None = None
    max_link_width: int | None = None

    @property
    def is_bridge(self) -> bool:
        return (self.klass or "").lower().startswith("0x0604")

    @property
    def is_gpu(self) -> bool:
        klass = (self.klass or "").lower()
        if klass:
            return klass.startswith(GPU_CLASSES)
        return self.driver in GPU_DRIVERS


@dataclass
class Gpu:
    name: str
    index: int
    bdf: str
    numa: int | None
    local_cpulist: str | None


@dataclass
class Nic:
    name: str  # the RDMA device (mlx5_0)
    index: int
    bdf: str
    numa: int | None
    local_cpulist: str | None
    netdev: str | None
    msi_irqs: tuple[int, ...]
    sriov_totalvfs: int | None
    sriov_numvfs: int | None
    vendor: str | None
    device: str | None
    klass: str | None


@dataclass
class Discovery:
    """What a sysfs tree holds: GPUs, NICs, the PCIe tree over them, NUMA CPU lists."""

    sysfs_root: str
    gpus: list[Gpu]
    nics: list[Nic]
    tree: "pcie.PcieTree"
    functions: dict[str, PciFunction]
    numa_cpulists: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def classes(self) -> dict[tuple[str, str], str]:
        """The PCIe class of every ordered pair of GPUs and NICs (pcie.py, the one definition)."""
        names = [g.name for g in self.gpus] + [n.name for n in self.nics]
        out = {}
        for a in names:
            for b in names:
                if a != b:
                    out[(a, b)] = pcie.distance_class(self.tree, a, b)
        return out

    def bridge_nodes(self) -> list["pcie.PcieNode"]:
        return [n for n in self.tree if n.kind != pcie.ENDPOINT]


def read_attr(path: str) -> str | None:
    """A sysfs or procfs attribute's text, stripped; None when it cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _port_type(dev_dir: str) -> int | None:
    """The PCIe port type from config space; None when it cannot be read (not root, no file)."""
    try:
        with open(os.path.join(dev_dir, "config"), "rb") as fh:
            cfg = fh.read(256)
    except OSError:
        return None
    if len(cfg) < 0x40 or not cfg[0x06] & 0x10:  # no capability list
        return None
    ptr, seen = cfg[0x34] & 0xFC, set()
    while ptr and ptr + 3 < len(cfg) and ptr not in seen:
        seen.add(ptr)
        if cfg[ptr] == 0x10:  # PCI Express capability
            return (cfg[ptr + 2] >> 4) & 0xF
        ptr = cfg[ptr + 1] & 0xFC
    return None


def acs_control(dev_dir: str) -> int | None:
    """The ACS Control register of a bridge (bit 0, Source Validation, means ACS is on), or None
    when the extended config space cannot be read (not root) or has no ACS capability."""
    try:
        with open(os.path.join(dev_dir, "config"), "rb") as fh:
            cfg = fh.read(4096)
    except OSError:
        return None
    ptr, seen = 0x100, set()
    while 0x100 <= ptr and ptr + 8 <= len(cfg) and ptr not in seen:
        seen.add(ptr)
        header = int.from_bytes(cfg[ptr:ptr + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == 0x000D:  # Access Control Services
            return int.from_bytes(cfg[ptr + 6:ptr + 8], "little")
        ptr = (header >> 20) & 0xFFC
    return None


def read_functions(sysfs_root: str) -> dict[str, PciFunction]:
    """Every PCI function under <sysfs_root>/bus/pci/devices, with its place in the hierarchy."""
    devices = os.path.join(sysfs_root, "bus", "pci", "devices")
    if not os.path.isdir(devices):
        raise DiscoveryError(f"{devices} is not a directory: not a sysfs tree")
    out: dict[str, PciFunction] = {}
    for bdf in _listdir(devices):
        real = os.path.realpath(os.path.join(devices, bdf))
        parts = real.split(os.sep)
        # The last pciDDDD:BB component is the root bus (a VMD domain nests one below another).
        roots = [i for i, p in enumerate(parts) if HOST_BRIDGE_DIR.match(p)]
        if not roots:
            continue
        chain = [p for p in parts[roots[-1] + 1:] if BDF.match(p)]
        if not chain or chain[-1] != bdf:
            continue
        d = real
        driver = os.path.basename(os.path.realpath(os.path.join(d, "driver"))) \
            if os.path.exists(os.path.join(d, "driver")) else None
        numa = _int(read_attr(os.path.join(d, "numa_node")))
        irqs = tuple(sorted(int(x) for x in _listdir(os.path.join(d, "msi_irqs")) if x.isdigit()))
        out[bdf] = PciFunction(
            bdf=bdf,
            host_bridge=parts[roots[-1]],
            ancestors=tuple(chain[:-1]),
            klass=read_attr(os.path.join(d, "class")),
            vendor=read_attr(os.path.join(d, "vendor")),
            device=read_attr(os.path.join(d, "device")),
            numa=None if numa is None or numa < 0 else numa,
            local_cpulist=read_attr(os.path.join(d, "local_cpulist")) or None,
            driver=driver,
            rdma=tuple(_listdir(os.path.join(d, "infiniband"))),
            netdevs=tuple(_listdir(os.path.join(d, "net"))),
            msi_irqs=irqs,
            sriov_totalvfs=_int(read_attr(os.path.join(d, "sriov_totalvfs"))),
            sriov_numvfs=_int(read_attr(os.path.join(d, "sriov_numvfs"))),
            is_vf=os.path.lexists(os.path.join(d, "physfn")),
            port_type=_port_type(d),
            link_speed=_link_speed(read_attr(os.path.join(d, "current_link_speed"))),
            link_width=_link_width(read_attr(os.path.join(d, "current_link_width"))),
            max_link_speed=_link_speed(read_attr(os.path.join(d, "max_link_speed"))),
            max_link_width=_link_width(read_attr(os.path.join(d, "max_link_width"))),
        )
    return out


def _link_speed(text: str | None) -> str | None:
    # The kernel writes "Unknown" for a link it cannot read (a function with no PCIe capability).
    return None if not text or text.lower().startswith("unknown") else text


def _link_width(text: str | None) -> int | None:
    width = _int(text)
    return width if width else None  # 0: no link trained, as unknown as a missing file


def link_gts(speed: str | None) -> float | None:
    """The transfer rate of a link speed as the kernel writes it: "32.0 GT/s PCIe" (and "8 GT/s"
    of kernels before 5.4) -> 32.0; None when unknown."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*GT/s", speed or "")
    return float(m.group(1)) if m else None


def natural_key(name: str) -> list:
    """Sort key putting mlx5_2 before mlx5_10, as people and the kernel's listings do."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


_natural = natural_key


def discover(sysfs_root: str) -> Discovery:
    """GPUs, RDMA NICs and the PCIe tree between them, from a sysfs tree (default layout: /sys)."""
    functions = read_functions(sysfs_root)
    notes: list[str] = []
    gpu_fns = sorted((f for f in functions.values() if f.is_gpu and not f.is_vf and not f.is_bridge),
                     key=lambda f: f.bdf)
    gpus = [Gpu(f"GPU{i}", i, f.bdf, f.numa, f.local_cpulist) for i, f in enumerate(gpu_fns)]
    nic_fns = []
    for f in functions.values():
        if f.is_vf or not f.rdma:
            continue
        for name in f.rdma:
            nic_fns.append((name, f))
    nic_fns.sort(key=lambda x: _natural(x[0]))
    nics = [Nic(name, i, f.bdf, f.numa, f.local_cpulist, f.netdevs[0] if f.netdevs else None, f.msi_irqs,
                f.sriov_totalvfs, f.sriov_numvfs, f.vendor, f.device, f.klass)
            for i, (name, f) in enumerate(nic_fns)]

    # Bridge kinds: config space when readable, else the alternation PCIe guarantees.
    kinds: dict[str, str] = {}

    def bridge_kind(bdf: str, parent_kind: str | None) -> str:
        f = functions.get(bdf)
        pt = f.port_type if f else None
        if pt == _ROOT_PORT:
            return "root_port"
        if pt == _UPSTREAM:
            return "up"
        if pt == _DOWNSTREAM:
            return "down"
        if parent_kind is None:
            return "root_port"
        return "down" if parent_kind == "up" else "up"

    nodes: dict[str, pcie.PcieNode] = {}
    numa_of_root: dict[str, int | None] = {}
    for f in functions.values():
        if f.numa is not None and numa_of_root.get(f.host_bridge) is None:
            numa_of_root[f.host_bridge] = f.numa

    def node_for(f: PciFunction, name: str) -> None:
        hb = f.host_bridge
        if hb not in nodes:
            nodes[hb] = pcie.PcieNode(hb, pcie.HOST_BRIDGE, None, numa_of_root.get(hb))
        parent_id, parent_kind = hb, None
        for bdf in f.ancestors:
            kind = kinds.get(bdf) or bridge_kind(bdf, parent_kind)
            kinds[bdf] = kind
            if kind == "root_port":
                if bdf not in nodes:
                    nodes[bdf] = pcie.PcieNode(bdf, pcie.ROOT_PORT, parent_id)
                parent_id = bdf
            elif kind == "up":
                if bdf not in nodes:
                    nodes[bdf] = pcie.PcieNode(bdf, pcie.SWITCH, parent_id)
                parent_id = bdf
            # A downstream port belongs to the switch of its upstream port: nothing to add.
            parent_kind = kind
        nodes[name] = pcie.PcieNode(name, pcie.ENDPOINT, parent_id)

    for g in gpus:
        node_for(functions[g.bdf], g.name)
    for n in nics:
        node_for(functions[n.bdf], n.name)
    tree = pcie.PcieTree(nodes.values())
    cpulists = {}
    node_dir = os.path.join(sysfs_root, "devices", "system", "node")
    for entry in _listdir(node_dir):
        m = re.fullmatch(r"node(\d+)", entry)
        if m:
            text = read_attr(os.path.join(node_dir, entry, "cpulist"))
            if text:
                cpulists[int(m.group(1))] = text
    if not gpus:
        notes.append(f"{sysfs_root}: no GPU (display-class or nvidia-bound PCI function)")
    if not nics:
        notes.append(f"{sysfs_root}: no RDMA NIC (PCI function with an infiniband/ entry)")
    return Discovery(sysfs_root, gpus, nics, tree, functions, cpulists, notes)


def irq_placement(found: Discovery, procfs_root: str, cpus_of_numa: dict | None = None,
                  every_device: bool = False) -> tuple[list[dict], list[str], list[str], list[str]]:
    """Where the MSI vectors of a host's devices should run: (settings, skipped, unpinned, devices).

    The RDMA NICs' vectors, and with every_device also the GPUs' and every VF's (a hypervisor's
    passthrough devices, whose vectors vfio keeps on the host). Each goes to the CPUs of its
    device's NUMA node: cpus_of_numa's (node -> cpulist; a hypervisor's housekeeping CPUs) where
    given, else the node's own CPU list.
    settings: railyard_sysfs settings of each vector's smp_affinity_list; skipped: devices whose
    node or CPUs are not known (left alone); unpinned: the vectors not where they should be now;
    devices: the PCI addresses of the devices placed (those irqbalance must leave alone)."""
    devices = [(n.name, n.bdf, n.numa, n.local_cpulist, n.msi_irqs) for n in found.nics]
    if every_device:
        fns = found.functions
        devices = ([(g.name, g.bdf, g.numa, g.local_cpulist, fns[g.bdf].msi_irqs) for g in found.gpus] + devices
                   + [(f"VF {f.bdf}", f.bdf, f.numa, f.local_cpulist, f.msi_irqs)
                      for f in sorted(fns.values(), key=lambda f: f.bdf) if f.is_vf])
    settings: list[dict] = []
    skipped: list[str] = []
    unpinned: list[str] = []
    placed: list[str] = []
    for name, bdf, numa, local, irqs in devices:
        if cpus_of_numa is not None:
            cpulist = cpus_of_numa.get(numa) if numa is not None else None
        else:
            cpulist = (found.numa_cpulists.get(numa) if numa is not None else None) or local
        if not cpulist or numa is None:
            skipped.append(name)
            continue
        placed.append(bdf)
        for irq in irqs:
            path = os.path.join(procfs_root, "irq", str(irq), "smp_affinity_list")
            if os.path.exists(path):
                label = f"{name} irq {irq} smp_affinity_list"
                settings.append(dict(path=path, value=cpulist, compare="cpulist", label=label))
                if set(parse_cpulist(read_attr(path) or "")) != set(parse_cpulist(cpulist)):
                    unpinned.append(label)
    return settings, skipped, unpinned, placed


def parse_cpulist(text: str) -> list[int]:
    """CPUs of a kernel cpulist (``0-55,112-167``)."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


def format_cpulist(ids: Iterable[int]) -> str:
    """CPUs as a kernel cpulist (0,1,2,5 -> ``0-2,5``), the syntax libvirt's cpusets share."""
    out: list[str] = []
    items = sorted(ids)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


def cpumask(text: str) -> str:
    """A cpulist as the kernel's hex mask with comma-separated 32-bit words (NCCL's affinity form)."""
    mask = 0
    for cpu in parse_cpulist(text):
        mask |= 1 << cpu
    words = []
    while True:
        words.append(f"{mask & 0xFFFFFFFF:08x}")
        mask >>= 32
        if not mask:
            break
    return ",".join(reversed(words))


# --------------------------------------------------------------------------------------------------
# Host facts: everything a host's hardware check and drift report need, read once, as JSON.
#
# The hosts driver runs this on each server (railyard.model.bundle carries it in one stdlib-only
# program for `python3 -I -S -`), prints it, and compares it with the pool's SKU on the controller
# (railyard.model.hardware_check). A file that cannot be read is an unknown (None), never an
# error: a kernel without the attribute, a reader who is not root, a lab tree that leaves it out.

FACTS_VERSION = 1
# sysfs hugepage counters, per size (/sys/kernel/mm/hugepages) and per NUMA node (fewer there).
HUGEPAGE_COUNTERS = ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
                     "nr_overcommit_hugepages")
NODE_HUGEPAGE_COUNTERS = ("nr_hugepages", "free_hugepages", "surplus_hugepages")
# Whole NVMe namespaces as /sys/block lists them; nvme0c0n1 (a multipath controller path) is not one.
NVME_BLOCK = re.compile(r"^nvme\d+n\d+$")
_IB_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def host_facts(sysfs_root: str = "/sys", procfs_root: str = "/proc", dev_root: str = "/dev",
               lldp: bool = False) -> dict:
    """A host's hardware as a JSON-ready dict (lists, dicts with string keys, str/int/None).

    pci          {"functions": {bdf: {class, vendor, device, numa, driver, parent}}, "tree": [PcieNode
                 as {id, kind, parent, numa}]}, the tree over the GPUs and NICs as discover() builds it
    gpus         [{name, index, bdf, numa, local_cpulist, vendor, device, class, driver, pcie_link}]
    nics         [{name, index, bdf, numa, local_cpulist, netdev, vendor, device, class, driver,
                   port, link_layer, state, phys_state, rate, speed_gbps, operstate, carrier, mtu,
                   net_speed_mbps, sriov_totalvfs, sriov_numvfs, pcie_link, fw_ver}]
                 pcie_link: {speed, width, max_speed, max_width} of current_link_* and max_link_*
                 (speed as the kernel writes it, "32.0 GT/s PCIe"), or None; fw_ver: the RDMA
                 device's firmware (/sys/class/infiniband/<dev>/fw_ver)
    numa_nodes   [{id, cpulist, memory_kb, hugepages}]
    cpus         {count, model, online}       /proc/cpuinfo, /sys/devices/system/cpu/online
    memory_kb    MemTotal of /proc/meminfo
    hugepages    {"2048kB": {counter: int}}   /sys/kernel/mm/hugepages
    nvme         [{name, size_bytes, model, numa, bdf}]   /sys/block/nvme*n*
    kernel       {release, cmdline}
    nvidia_driver  /sys/module/nvidia/version: the loaded driver's version, or None
    dev          {nvidia: [...], infiniband: [...]}  device nodes under dev_root
    notes        what could not be read as a whole
    lldp         with lldp=True only: the host's LLDP neighbours, railyard.model.lldp.read() (the
                 running lldpd's, so only on the host itself, never for a tree read elsewhere)

    pci, gpus and nics are None when the tree has no PCI bus; numa_nodes, hugepages and nvme are
    None when their directory is missing ([] when it is there and empty). VFs are left out, as
    discover() leaves them out, so enabling SR-IOV does not show as new hardware.
    """
    notes: list[str] = []
    facts: dict = {"version": FACTS_VERSION}
    try:
        found: Discovery | None = discover(sysfs_root)
    except (DiscoveryError, pcie.PcieError) as exc:
        found = None
        notes.append(str(exc))
    if found is None:
        facts.update(pci=None, gpus=None, nics=None)
    else:
        notes.extend(found.notes)
        facts["pci"] = {
            "functions": {f.bdf: _function_facts(f) for f in sorted(found.functions.values(), key=lambda f: f.bdf)
                          if not f.is_vf},
            "tree": [{"id": n.id, "kind": n.kind, "parent": n.parent, "numa": n.numa} for n in found.tree],
        }
        facts["gpus"] = [_gpu_facts(g, found.functions[g.bdf]) for g in found.gpus]
        facts["nics"] = [_nic_facts(sysfs_root, n, found.functions[n.bdf]) for n in found.nics]
    facts["numa_nodes"] = _numa_facts(sysfs_root)
    facts["cpus"] = _cpu_facts(sysfs_root, procfs_root)
    facts["memory_kb"] = _meminfo(read_attr(os.path.join(procfs_root, "meminfo"))).get("MemTotal")
    facts["hugepages"] = _hugepages(os.path.join(sysfs_root, "kernel", "mm", "hugepages"), HUGEPAGE_COUNTERS)
    facts["nvme"] = _nvme_facts(sysfs_root)
    facts["kernel"] = {
        "release": read_attr(os.path.join(procfs_root, "sys", "kernel", "osrelease")),
        "cmdline": read_attr(os.path.join(procfs_root, "cmdline")),
    }
    # The loaded module's version, as `nvidia-smi` reports the driver version; None without it.
    facts["nvidia_driver"] = read_attr(os.path.join(sysfs_root, "module", "nvidia", "version")) or None
    facts["dev"] = _dev_facts(dev_root)
    facts["notes"] = notes
    if lldp:
        # Imported here: Ansible ships this file as a module_util without lldp.py beside it.
        from railyard.model import lldp as lldp_reader

        facts["lldp"] = lldp_reader.read()
    return facts


def _function_facts(f: PciFunction) -> dict:
    return {"class": f.klass, "vendor": f.vendor, "device": f.device, "numa": f.numa, "driver": f.driver,
            "parent": f.ancestors[-1] if f.ancestors else f.host_bridge}


def _pcie_link(f: PciFunction) -> dict | None:
    """The function's PCIe link as trained and at most; None where the kernel shows neither."""
    if f.link_speed is None and f.link_width is None and f.max_link_speed is None and f.max_link_width is None:
        return None
    return {"speed": f.link_speed, "width": f.link_width, "max_speed": f.max_link_speed, "max_width": f.max_link_width}


def _gpu_facts(g: Gpu, f: PciFunction) -> dict:
    return {"name": g.name, "index": g.index, "bdf": g.bdf, "numa": g.numa, "local_cpulist": g.local_cpulist,
            "vendor": f.vendor, "device": f.device, "class": f.klass, "driver": f.driver, "pcie_link": _pcie_link(f)}


def _after_colon(text: str | None) -> str | None:
    """'4: ACTIVE' -> 'ACTIVE' (the IB port state files put the number first)."""
    if text is None:
        return None
    return (text.split(":", 1)[1] if ":" in text else text).strip() or None


def _number(x: float) -> int | float:
    return int(x) if x == int(x) else x


def _admin_up(ndir: str | None) -> bool | None:
    """IFF_UP of the interface's flags: configured up (the admin state), apart from its link."""
    flags = read_attr(os.path.join(ndir, "flags")) if ndir else None
    try:
        return bool(int(flags, 16) & 0x1) if flags else None
    except ValueError:
        return None


def _nic_facts(sysfs_root: str, n: Nic, f: PciFunction) -> dict:
    ports_dir = os.path.join(sysfs_root, "class", "infiniband", n.name, "ports")
    ports = sorted((p for p in _listdir(ports_dir) if p.isdigit()), key=int)
    port = "1" if "1" in ports else (ports[0] if ports else None)
    pdir = os.path.join(ports_dir, port) if port else None
    link_layer = state = phys = rate = None
    if pdir:
        link_layer = read_attr(os.path.join(pdir, "link_layer"))
        state = _after_colon(read_attr(os.path.join(pdir, "state")))
        phys = _after_colon(read_attr(os.path.join(pdir, "phys_state")))
        rate = read_attr(os.path.join(pdir, "rate")) or None
    ndir = os.path.join(sysfs_root, "class", "net", n.netdev) if n.netdev else None
    net_speed = _int(read_attr(os.path.join(ndir, "speed"))) if ndir else None
    if net_speed is not None and net_speed <= 0:
        net_speed = None  # the kernel shows -1 (or an error) when the link is down or the speed unknown
    speed = None
    m = _IB_RATE.match(rate or "")
    if m:
        speed = _number(float(m.group(1)))
    elif net_speed is not None:
        speed = _number(net_speed / 1000)
    return {
        "name": n.name, "index": n.index, "bdf": n.bdf, "numa": n.numa, "local_cpulist": n.local_cpulist,
        "netdev": n.netdev, "vendor": n.vendor, "device": n.device, "class": n.klass, "driver": f.driver,
        "port": int(port) if port else None,
        "link_layer": link_layer.lower() if link_layer else None,
        "state": state, "phys_state": phys, "rate": rate, "speed_gbps": speed,
        "operstate": read_attr(os.path.join(ndir, "operstate")) if ndir else None,
        "admin_up": _admin_up(ndir),
        "carrier": _int(read_attr(os.path.join(ndir, "carrier"))) if ndir else None,
        "mtu": _int(read_attr(os.path.join(ndir, "mtu"))) if ndir else None,
        "net_speed_mbps": net_speed,
        "sriov_totalvfs": n.sriov_totalvfs, "sriov_numvfs": n.sriov_numvfs,
        "pcie_link": _pcie_link(f),
        "fw_ver": read_attr(os.path.join(sysfs_root, "class", "infiniband", n.name, "fw_ver")) or None,
    }


def _meminfo(text: str | None) -> dict[str, int]:
    """`Key: value kB` lines (of /proc/meminfo, or a node's meminfo with its `Node N ` prefix)."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = re.sub(r"^Node \d+ ", "", key.strip())
        number = _int(value.split()[0]) if value.split() else None
        if number is not None:
            out[key] = number
    return out


def _hugepages(path: str, counters: tuple[str, ...]) -> dict | None:
    if not os.path.isdir(path):
        return None
    out = {}
    for entry in _listdir(path):
        m = re.fullmatch(r"hugepages-(\d+kB)", entry)
        if m:
            out[m.group(1)] = {c: _int(read_attr(os.path.join(path, entry, c))) for c in counters}
    return out


def _numa_facts(sysfs_root: str) -> list | None:
    node_dir = os.path.join(sysfs_root, "devices", "system", "node")
    if not os.path.isdir(node_dir):
        return None
    out = []
    for entry in _listdir(node_dir):
        m = re.fullmatch(r"node(\d+)", entry)
        if not m:
            continue
        d = os.path.join(node_dir, entry)
        out.append({
            "id": int(m.group(1)),
            "cpulist": read_attr(os.path.join(d, "cpulist")),
            "memory_kb": _meminfo(read_attr(os.path.join(d, "meminfo"))).get("MemTotal"),
            "hugepages": _hugepages(os.path.join(d, "hugepages"), NODE_HUGEPAGE_COUNTERS),
        })
    return sorted(out, key=lambda n: n["id"])


def _cpu_facts(sysfs_root: str, procfs_root: str) -> dict:
    text = read_attr(os.path.join(procfs_root, "cpuinfo"))
    count = model = None
    if text is not None:
        count = 0
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "processor":
                count += 1
            elif key == "model name" and model is None:
                model = value.strip() or None
    return {"count": count, "model": model,
            "online": read_attr(os.path.join(sysfs_root, "devices", "system", "cpu", "online"))}


def _nvme_facts(sysfs_root: str) -> list | None:
    block = os.path.join(sysfs_root, "block")
    if not os.path.isdir(block):
        return None
    out = []
    for name in sorted((b for b in _listdir(block) if NVME_BLOCK.match(b)), key=_natural):
        d = os.path.join(block, name)
        sectors = _int(read_attr(os.path.join(d, "size")))  # always 512-byte units
        ctrl = os.path.join(d, "device")  # the controller (nvme0), or the subsystem under multipath
        numa = _int(read_attr(os.path.join(ctrl, "numa_node")))
        if numa is None:
            numa = _int(read_attr(os.path.join(ctrl, "device", "numa_node")))
        bdf = read_attr(os.path.join(ctrl, "address"))  # the PCI address for the pcie transport
        if not bdf or not BDF.match(bdf):
            pci = os.path.basename(os.path.realpath(os.path.join(ctrl, "device")))
            bdf = pci if BDF.match(pci) else None
        out.append({"name": name, "size_bytes": None if sectors is None else sectors * 512,
                    "model": read_attr(os.path.join(ctrl, "model")) or None,
                    "numa": None if numa is None or numa < 0 else numa, "bdf": bdf})
    return out


def _dev_facts(dev_root: str) -> dict | None:
    if not os.path.isdir(dev_root):
        return None
    ib = os.path.join(dev_root, "infiniband")
    return {"nvidia": [n for n in _listdir(dev_root) if n.startswith("nvidia")],
            "infiniband": _listdir(ib) if os.path.isdir(ib) else []}
