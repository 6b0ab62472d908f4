"""A node's hardware as the kernel would show it: a sysfs and procfs tree built from a catalog SKU.

Lab nodes share the host's kernel, so the GPUs, NICs and PCIe switches of a DGX cannot be real
there. This module writes a directory laid out like the real /sys and /proc of a catalog node
(the lab binds it at /run/railyard/hw), so tuning code that takes a sysfs root and a procfs root
reads and writes exactly what it would on the machine:

    sys/devices/pci0000:BB/<root port>/<switch up>/<switch down>/.../<bdf>/   one dir per PCI function
        vendor device class numa_node local_cpulist driver@ msi_irqs/<n>
        {current,max}_link_{speed,width}   GPUs and NICs, at the catalog's PCIe link
        sriov_totalvfs sriov_numvfs (writable)
        net/<netdev>/{operstate,carrier,speed,mtu}
        infiniband/<mlx5_N>/fw_ver          only with a pinned version (build_hwtree's nic_firmware)
        infiniband/<mlx5_N>/ports/1/{link_layer,state,phys_state,rate}
    sys/bus/pci/devices/<bdf>@          -> the device dir, as on a real machine
    sys/class/net/<netdev>@, sys/class/infiniband/<mlx5_N>@
    sys/devices/system/node/node<N>/{cpulist,meminfo,hugepages/hugepages-<size>kB/*}
    sys/devices/system/cpu/{online,present}
    sys/kernel/mm/hugepages/hugepages-<size>kB/*
    sys/block/nvme<i>n1/size            the SKU's NVMe drives
    proc/cmdline  proc/meminfo  proc/cpuinfo  proc/irq/<n>/smp_affinity_list  proc/irq/default_smp_affinity
    railyard-hwtree.json                 what was derived rather than read from the catalog
    nvidia/<bdf>/*                       a GPU's state as its driver holds it (faults write it)
    dmesg                                the node's kernel messages, as dmesg prints them (faults write it)

Every value comes from the catalog. What the catalog does not know is either left out (as the
kernel leaves out sriov_* on a function without SR-IOV) or shown the way the kernel shows it
without the information (numa_node -1), and each such case says so where it is written. What no
catalog entry can give is derived, deterministically, and listed in the manifest:

- PCI addresses and netdev names the sources do not give: railyard.model.pci_layout derives them
  (other drivers need the same addresses and names, so they are computed there, not here).
- MSI-X vectors: the kernel allocates them at probe time (their count depends on the driver and
  the CPU count), so each NIC function gets MSI_VECTORS of them, numbered from FIRST_IRQ in bus
  order, and then each GPU as many, in bus order after the NICs': enough to exercise per-IRQ
  affinity (a hypervisor places its passthrough GPUs' vectors too), not a claim about a real machine.
- Link state: a lab node stands for a cabled, running server, so every NIC port is shown up
  (IB state ACTIVE, physical state LinkUp; its netdev up with carrier). Not a catalog fact: the
  manifest's links_up names the ports shown so.
- The lanes of a link's rate: the catalog gives the speed, the kernel's rate text also names the
  lanes (400 Gb/sec (4X NDR)); they are taken as four (LINK_WIDTH), the width of the catalog's
  QSFP/OSFP ports, and listed in the manifest's ib_rates. Readers use only the number.
- NVMe names: the catalog gives drive groups (role, count, size), not names or PCI places, so the
  drives are nvme<i>n1 in the catalog's group order (manifest: nvme), with no device link.

Left out, and why: /proc/sys/kernel/osrelease (a lab node runs the host's real kernel, which
procfs shows as it is); MemTotal per NUMA node (the catalog gives only the total); the IPoIB
MTU (the subnet manager's broadcast group sets it); NVMe models; CPU fields other than the
processor number and model name (flags, frequencies, topology ids are not in the catalog).

Pure Python, no root needed, and the same SKU always gives the same bytes.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

from railyard.model.catalog import FIXTURES_DIR, NicSpec, NodeSku, gpu_tools_of
from railyard.model.gpu_health import parse_all_reduce_perf
from railyard.model.health_check import expect_of
from railyard.model.pci_layout import Function, layout, netdev_name
from railyard.model.sysfs_discovery import cpumask, format_cpulist, natural_key as _natural

MSI_VECTORS = 4
FIRST_IRQ = 100
MANIFEST = "railyard-hwtree.json"
# The GPUs' own state, which on a real node only the NVIDIA driver holds (gpu_tools.py reads it,
# `railyard lab fault` writes it).
NVIDIA_STATE = "nvidia"
# The real all_reduce_perf run (healthy, NVLS, 16 H100s) whose curve the node's stand-in prints.
COLLECTIVE_RUN = "all_reduce_perf-h100-2node-16gpu-nvls-healthy.txt"
# The node's own kernel messages (its dmesg stand-in prints them; faults write an Xid there).
DMESG = "dmesg"
# What the kernel shows for any PCI-to-PCI bridge (root ports and switch ports alike): base class
# 0x06 (bridge), subclass 0x04 (PCI-to-PCI). A catalog "root_port" or "switch" is one by definition.
PCI_BRIDGE_CLASS = "0x060400"
# x86-64 hugepage sizes in kB. Every catalog node is an x86 server; an Arm node would list 64K/2M/512M.
HUGEPAGE_KB = (2048, 1048576)
# The kernel's words for a port shown up (include/rdma/ib_verbs.h: IB_PORT_ACTIVE = 4; the IBTA
# physical port state 5 is LinkUp), as /sys/class/infiniband/<dev>/ports/<n>/{state,phys_state} put them.
IB_STATE_UP = "4: ACTIVE"
IB_PHYS_UP = "5: LinkUp"
IB_LINK_LAYER = {"infiniband": "InfiniBand", "ethernet": "Ethernet"}
# Lanes of a port's link (see the module docstring), and the kernel's name of each lane rate in Gb/s
# (drivers/infiniband/core/sysfs.c, rate_show: SDR has no name there).
LINK_WIDTH = 4
IB_LANE_SPEEDS = {2.5: "", 5: " DDR", 10: " QDR", 14: " FDR", 25: " EDR", 50: " HDR", 100: " NDR", 200: " XDR"}
# What the kernel gives an Ethernet netdev (ether_setup: ETH_DATA_LEN) before anything sets another.
ETH_DEFAULT_MTU = 1500


def build_hwtree(sku: NodeSku, root: str | Path, *, replace: bool = False,
                 nic_firmware: str | None = None) -> dict[str, Any]:
    """Write the SKU's sysfs/procfs tree under `root`; returns the manifest (also written there).

    `root` must be empty or missing unless `replace` is true, in which case the tree's own parts
    (sys/, proc/, the manifest) are removed first: counters the tuning roles wrote are reset.
    nic_firmware: the version every RDMA device shows in fw_ver (the stack's pin: a lab node is
    the server as planned); None leaves fw_ver out, as unknown.
    """
    root = Path(root)
    if root.exists():
        parts = {p.name for p in root.iterdir()}
        if parts and not replace:
            raise FileExistsError(f"{root} is not empty (pass replace=True to rebuild the hardware tree)")
        for name in ("sys", "proc", NVIDIA_STATE):
            if (root / name).is_dir() and not (root / name).is_symlink():
                shutil.rmtree(root / name)
        (root / MANIFEST).unlink(missing_ok=True)
        (root / DMESG).unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    lay = layout(sku)
    w = _Writer(root)
    all_cpus = f"0-{sku.cpus.threads - 1}" if sku.cpus.threads else None
    irq = FIRST_IRQ
    netdevs: dict[str, str] = {}
    irqs: dict[str, list[int]] = {}
    links_up: list[str] = []
    rates: dict[str, str] = {}
    gpus: list[tuple[str, str]] = []  # (GPU, its device dir): vectors after every NIC's, bus order
    for f in sorted(lay.functions, key=lambda f: f.path):
        d = "sys/devices/" + "/".join(f.path)
        w.symlink(f"sys/bus/pci/devices/{f.bdf}", d)
        vendor, device, klass = _ids(sku, f)
        w.file(f"{d}/vendor", vendor)
        w.file(f"{d}/device", device)
        w.file(f"{d}/class", klass)
        # The kernel shows -1 when firmware gives no proximity domain for the device's root complex.
        w.file(f"{d}/numa_node", str(f.numa) if f.numa is not None else "-1")
        w.file(f"{d}/local_cpulist", _local_cpulist(sku, f.numa, all_cpus))
        if f.kind in ("gpu", "nic"):
            _pcie_link(w, d, sku.gpu(f.id).pcie_link if f.kind == "gpu" else sku.nic(f.id).pcie_link)
        if f.kind == "gpu":
            # The GPU's class may be unknown to the catalog; the bound driver is how a reader tells a
            # GPU then, and nvidia is what the kernel shows on a GPU node with its driver loaded.
            w.symlink(f"{d}/driver", "sys/bus/pci/drivers/nvidia")
            gpus.append((f.id, d))
        if f.kind != "nic":
            continue
        nic = sku.nic(f.id)
        if nic.rdma.startswith("mlx5_"):
            w.symlink(f"{d}/driver", "sys/bus/pci/drivers/mlx5_core")
        if nic.sriov_total_vfs is not None:
            # Without SR-IOV in firmware the kernel shows neither file; unknown is treated the same.
            w.file(f"{d}/sriov_totalvfs", str(nic.sriov_total_vfs))
            w.file(f"{d}/sriov_numvfs", "0", writable=True)
        w.dir(f"{d}/infiniband/{nic.rdma}")
        w.symlink(f"{d}/infiniband/{nic.rdma}/device", d)
        w.symlink(f"sys/class/infiniband/{nic.rdma}", f"{d}/infiniband/{nic.rdma}")
        rate = _ib_port(w, f"{d}/infiniband/{nic.rdma}/ports/1", nic)
        links_up.append(nic.rdma)
        if rate:
            rates[nic.rdma] = rate
        netdev = netdev_name(sku, nic.rdma, f.bdf)
        if netdev:
            netdevs[nic.rdma] = netdev
            w.dir(f"{d}/net/{netdev}")
            w.symlink(f"{d}/net/{netdev}/device", d)
            w.symlink(f"sys/class/net/{netdev}", f"{d}/net/{netdev}")
            _netdev_attrs(w, f"{d}/net/{netdev}", nic)
        irqs[nic.rdma] = _vectors(w, d, irq, all_cpus)
        irq += MSI_VECTORS
    for gpu, d in gpus:
        irqs[gpu] = _vectors(w, d, irq, all_cpus)
        irq += MSI_VECTORS
    if all_cpus:
        # What a new vector's affinity starts as: every CPU, until something sets another.
        w.file("proc/irq/default_smp_affinity", cpumask(all_cpus), writable=True)
    _memory(w, sku, all_cpus)
    _cpus(w, sku, all_cpus)
    nvme = _nvme(w, sku)
    # /proc/sys/kernel/osrelease is not written: a lab node runs the host's real kernel, and its
    # procfs shows that kernel's release as it is.
    manifest = {
        "sku": sku.id,
        "bus_ids": dict(sorted(lay.bus_ids.items())),
        "synthesized_bus_ids": sorted(f.id for f in lay.functions if f.synthesized and f.kind in ("gpu", "nic")),
        "omitted": dict(sorted(lay.omitted.items())),
        "netdevs": dict(sorted(netdevs.items())),
        "irqs": dict(sorted(irqs.items())),
        # Added keys (the ones above keep their meaning): what the tree shows that no catalog gives.
        "links_up": sorted(links_up, key=_natural),
        "ib_rates": dict(sorted(rates.items())),
        "nvme": nvme,
        "nic_firmware": nic_firmware,
        "nvidia_smi": _nvidia_smi(sku),
        "all_reduce_perf": {"rows": _collective_rows(), "source": f"fixtures/gpu/{COLLECTIVE_RUN}"} if sku.gpus else None,
    }
    w.file(MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
    if nic_firmware is not None:
        set_nic_firmware(root, nic_firmware)
    return manifest


@functools.cache
def _collective_rows() -> list[list[float]]:
    """The kept all_reduce_perf run's times by size, [size, out-of-place us, in-place us], whose
    curve the node's all_reduce_perf stand-in scales to the node's NVLinks (gpu_tools.py)."""
    run = parse_all_reduce_perf((FIXTURES_DIR / "gpu" / COLLECTIVE_RUN).read_text(encoding="utf-8"))
    return [[r.size, r.time_oop_us, r.time_ip_us] for r in run.rows]


def _nvidia_smi(sku: NodeSku) -> dict[str, Any] | None:
    """What the node's nvidia-smi stand-in (gpu_tools.py) prints that the tree does not hold: the
    GPU's name as the tool prints it and its NVLinks (count from the SKU, speed from real output);
    None for a SKU without GPUs."""
    if not sku.gpus:
        return None
    tools = gpu_tools_of(sku)
    return {"product_name": tools.get("product_name") or sku.gpus[0].model, "nvlink": tools.get("nvlink"),
            "nvlinks": expect_of(sku).nvlinks_per_gpu}


def set_link_speed(root: str | Path, sku: NodeSku, gbps: int) -> list[str]:
    """Show the SKU's compute NICs' ports trained at `gbps` where that is below the NIC's own speed
    (a 400 Gb/s ConnectX-7 on an HDR switch trains at 200): the port's rate and its netdev's speed,
    as the kernel shows them. Returns the devices changed."""
    changed = []
    w = _Writer(Path(root))
    for nic in sku.compute_nics:
        if nic.speed_gbps is None or gbps >= nic.speed_gbps:
            continue
        dev = Path(root) / "sys" / "class" / "infiniband" / nic.rdma
        if not dev.exists():
            continue
        port = Path(os.path.realpath(dev)) / "ports" / "1"
        rate = _ib_rate(gbps)
        for path, value in ((port / "rate", rate),
                            *((Path(os.path.realpath(d)) / "speed", str(gbps * 1000))
                              for d in (Path(os.path.realpath(dev)).parent.parent / "net").glob("*"))):
            if path.exists():
                os.chmod(path, 0o644)
            w.file(os.path.relpath(path, root), value)
        changed.append(nic.rdma)
    return changed


def set_nic_firmware(root: str | Path, version: str, devices: Iterable[str] | None = None) -> list[str]:
    """Show `version` as the firmware of the tree's RDMA devices (all, or `devices`), in fw_ver as
    the kernel shows it (read-only); returns the devices changed. A firmware update, as the lab
    can have one: what the node's own sysfs shows, nothing else."""
    ib = Path(root) / "sys" / "class" / "infiniband"
    names = sorted((p.name for p in ib.iterdir()), key=_natural) if ib.is_dir() else []
    wanted = set(devices) if devices is not None else set(names)
    unknown = wanted - set(names)
    if unknown:
        raise KeyError(f"no RDMA device {', '.join(sorted(unknown, key=_natural))} in {root}")
    w = _Writer(Path(root))
    for name in names:
        if name in wanted:
            path = Path(os.path.realpath(ib / name)) / "fw_ver"
            if path.exists():
                os.chmod(path, 0o644)
            w.file(os.path.relpath(path, root), version)
    return [n for n in names if n in wanted]


def _vectors(w: "_Writer", d: str, first: int, all_cpus: str | None) -> list[int]:
    """MSI_VECTORS vectors of the function at `d`, numbered from `first`, and their affinity files."""
    out = list(range(first, first + MSI_VECTORS))
    for n in out:
        w.file(f"{d}/msi_irqs/{n}", "msix")
        # A new IRQ may run on any online CPU; unknown CPUs: the file is left out.
        w.file(f"proc/irq/{n}/smp_affinity_list", all_cpus, writable=True)
    return out


def _pcie_link(w: "_Writer", d: str, link: str | None) -> None:
    """The device's PCIe link as the kernel shows it, trained at the catalog's speed and width
    (current_link_* equal to max_link_*: a server as planned); unknown to the catalog: left out.
    Bridges get none: nothing here reads theirs."""
    if link is None:
        return
    speed, _, width = link.rpartition(" x")
    for which in ("current", "max"):
        w.file(f"{d}/{which}_link_speed", speed)
        w.file(f"{d}/{which}_link_width", width)


def _ids(sku: NodeSku, f: Function) -> tuple[str | None, str | None, str | None]:
    if f.kind == "gpu":
        g = sku.gpu(f.id)
        return g.pci_vendor, g.pci_device, g.pci_class
    if f.kind == "nic":
        n = sku.nic(f.id)
        return n.pci_vendor, n.pci_device, n.pci_class
    bridge_id = f.id.split("#")[0]
    b = next(b for b in sku.pcie if b.id == bridge_id)
    return b.pci_vendor, b.pci_device, b.pci_class or PCI_BRIDGE_CLASS


def _ib_rate(speed_gbps: int | None) -> str | None:
    """The kernel's rate text of a port at the catalog's speed over LINK_WIDTH lanes, or None when
    the speed is unknown or no lane rate gives it."""
    if speed_gbps is None:
        return None
    lane = speed_gbps / LINK_WIDTH
    lane = int(lane) if lane == int(lane) else lane
    if lane not in IB_LANE_SPEEDS:
        return None
    return f"{speed_gbps} Gb/sec ({LINK_WIDTH}X{IB_LANE_SPEEDS[lane]})"


def _ib_port(w: "_Writer", port: str, nic: NicSpec) -> str | None:
    """Port 1 of the NIC's RDMA device (mlx5 gives each port of an adapter its own PCI function and
    RDMA device, so its port is always 1); returns the rate text written, if any."""
    layer = nic.link_layer
    # Unknown link mode (a VPI card of no known class): the kernel always shows one; left out here.
    w.file(f"{port}/link_layer", IB_LINK_LAYER[layer] if layer else None)
    w.file(f"{port}/state", IB_STATE_UP)  # the lab's: every port shown up (module docstring)
    w.file(f"{port}/phys_state", IB_PHYS_UP)
    rate = _ib_rate(nic.speed_gbps)  # the catalog's NIC model speed; unknown speed: left out
    w.file(f"{port}/rate", rate)
    return rate


def _netdev_attrs(w: "_Writer", net: str, nic: NicSpec) -> None:
    """The netdev of a NIC function as its PCI device shows it (inside a lab node /sys/class/net
    stays the node's live interfaces; these are the tree's static view of the SKU's NIC)."""
    w.file(f"{net}/operstate", "up")  # the lab's: every port shown up (module docstring)
    w.file(f"{net}/carrier", "1")
    # Mb/s, as ethtool's speed (IPoIB reports its port's lane rate times width the same way);
    # the catalog's speed unknown: left out (readers take it as unknown, as they take the -1 a
    # kernel shows for a speed it does not know).
    w.file(f"{net}/speed", str(nic.speed_gbps * 1000) if nic.speed_gbps else None)
    if nic.link_layer == "ethernet":
        w.file(f"{net}/mtu", str(ETH_DEFAULT_MTU))
    # An IPoIB netdev's MTU follows the subnet's broadcast group (2044 on a 2K-MTU fabric, 4092
    # on a 4K one): a fact of the fabric, not of the node, so it is left out.


def _local_cpulist(sku: NodeSku, numa: int | None, all_cpus: str | None) -> str | None:
    if numa is None:
        return all_cpus  # the kernel's answer for a device of no known node: every CPU
    return sku.numa_node(numa).cpulist


def _memory(w: "_Writer", sku: NodeSku, all_cpus: str | None) -> None:
    numa_ids = sorted(n.id for n in sku.numa_nodes)
    if numa_ids:
        w.file("sys/devices/system/node/online", format_cpulist(numa_ids))
        w.file("sys/devices/system/node/possible", format_cpulist(numa_ids))
    for n in sku.numa_nodes:
        base = f"sys/devices/system/node/node{n.id}"
        w.file(f"{base}/cpulist", n.cpulist)
        # Per-node memory is not in the catalog (only the total), so MemTotal/MemFree lines are left
        # out; the hugepage lines are the kernel's with nothing reserved yet.
        w.file(f"{base}/meminfo", "".join(
            f"Node {n.id} {key}: {0:>6}\n" for key in ("HugePages_Total", "HugePages_Free", "HugePages_Surp")))
        for kb in HUGEPAGE_KB:
            for counter in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
                w.file(f"{base}/hugepages/hugepages-{kb}kB/{counter}", "0", writable=counter == "nr_hugepages")
    for kb in HUGEPAGE_KB:
        for counter in ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
                        "nr_overcommit_hugepages"):
            w.file(f"sys/kernel/mm/hugepages/hugepages-{kb}kB/{counter}", "0",
                   writable=counter in ("nr_hugepages", "nr_overcommit_hugepages"))
    lines = []
    if sku.memory_gib is not None:
        # The catalog's installed memory; a real kernel shows somewhat less (firmware, kernel image).
        lines.append(f"MemTotal:       {sku.memory_gib * 1024 * 1024} kB")
    lines += ["HugePages_Total:       0", "HugePages_Free:        0", "HugePages_Rsvd:        0",
              "HugePages_Surp:        0", "Hugepagesize:       2048 kB", "Hugetlb:               0 kB"]
    w.file("proc/meminfo", "\n".join(lines))
    # How the node boots is not in the catalog: the command line starts empty, i.e. nothing tuned.
    w.file("proc/cmdline", "")


def _cpus(w: "_Writer", sku: NodeSku, all_cpus: str | None) -> None:
    """/proc/cpuinfo and the CPU masks of /sys/devices/system/cpu, for the catalog's thread count."""
    if all_cpus is None:
        return  # the catalog does not give the thread count: no CPU can be listed
    w.file("sys/devices/system/cpu/online", all_cpus)
    w.file("sys/devices/system/cpu/present", all_cpus)
    # One stanza per hardware thread, as the kernel writes them. The model name is the catalog's
    # (a real kernel shows the CPU's brand string, which the catalog does not record, e.g.
    # "Intel(R) Xeon(R) Platinum 8480C"; the check compares the model number); without one the
    # line is left out. Other fields (vendor, flags, frequencies, topology ids) are not in the catalog.
    model = f"model name\t: {sku.cpus.model}\n" if sku.cpus.model else ""
    text = "".join(f"processor\t: {i}\n{model}\n" for i in range(sku.cpus.threads or 0))
    w.file("proc/cpuinfo", text[:-1])  # the writer ends the file with the last stanza's blank line


def _nvme(w: "_Writer", sku: NodeSku) -> dict[str, str] | None:
    """/sys/block/nvme<i>n1 for each of the catalog's NVMe drives; returns name -> role (None when
    the catalog does not say which drives the node has: then there is no /sys/block at all)."""
    if sku.nvme is None:
        return None
    w.dir("sys/block")
    names: dict[str, str] = {}
    for group in sku.nvme:
        for _ in range(group.count):
            name = f"nvme{len(names)}n1"
            names[name] = group.role
            # The catalog's size (decimal TB) in 512-byte sectors, the unit of every block device's
            # size; a real drive of that label shows a little more (IDEMA LBA counts).
            w.file(f"sys/block/{name}/size", str(round(group.size_tb * 1e12 / 512)))
            # No device/ (the controller with model, numa_node, address): the catalog gives
            # neither the drive model nor where the drive sits on the PCI buses.
    return names


class _Writer:
    def __init__(self, root: Path):
        self.root = root

    def dir(self, rel: str) -> Path:
        p = self.root / rel
        p.mkdir(parents=True, exist_ok=True)
        return p

    def file(self, rel: str, value: str | None, writable: bool = False) -> None:
        if value is None:
            return
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(value + "\n" if value else "\n")
        os.chmod(p, 0o644 if writable else 0o444)

    def symlink(self, rel: str, target_rel: str) -> None:
        link = self.root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        target = self.root / target_rel
        target.mkdir(parents=True, exist_ok=True) if not target.exists() else None
        link.symlink_to(os.path.relpath(target, link.parent))

