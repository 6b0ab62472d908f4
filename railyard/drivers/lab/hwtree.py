"""A node's hardware as the kernel would show it: a sysfs and procfs tree built from a catalog SKU.

Lab nodes share the host's kernel, so the GPUs, NICs and PCIe switches of a DGX cannot be real
there. This module writes a directory laid out like the real /sys and /proc of a catalog node
(the lab binds it at /run/railyard/hw), so tuning code that takes a sysfs root and a procfs root
reads and writes exactly what it would on the machine:

    sys/devices/pci0000:BB/<root port>/<switch up>/<switch down>/.../<bdf>/   one dir per PCI function
        vendor device class numa_node local_cpulist driver@ msi_irqs/<n>
        sriov_totalvfs sriov_numvfs (writable)  net/<netdev>/  infiniband/<mlx5_N>/
    sys/bus/pci/devices/<bdf>@          -> the device dir, as on a real machine
    sys/class/net/<netdev>@, sys/class/infiniband/<mlx5_N>@
    sys/devices/system/node/node<N>/{cpulist,meminfo,hugepages/hugepages-<size>kB/*}
    sys/kernel/mm/hugepages/hugepages-<size>kB/*
    proc/cmdline  proc/meminfo  proc/irq/<n>/smp_affinity_list
    railyard-hwtree.json                 what was derived rather than read from the catalog

Every value comes from the catalog. What the catalog does not know is either left out (as the
kernel leaves out sriov_* on a function without SR-IOV) or shown the way the kernel shows it
without the information (numa_node -1), and each such case says so where it is written. What no
catalog entry can give is derived, deterministically, and listed in the manifest:

- PCI addresses and netdev names the sources do not give: railyard.model.pci_layout derives them
  (other drivers need the same addresses and names, so they are computed there, not here).
- MSI-X vectors: the kernel allocates them at probe time (their count depends on the driver and
  the CPU count), so each NIC function gets MSI_VECTORS of them, numbered from FIRST_IRQ in bus
  order: enough to exercise per-IRQ affinity, not a claim about a real machine.

Pure Python, no root needed, and the same SKU always gives the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

from railyard.model.catalog import NodeSku
from railyard.model.pci_layout import Function, layout, netdev_name

MSI_VECTORS = 4
FIRST_IRQ = 100
MANIFEST = "railyard-hwtree.json"
# What the kernel shows for any PCI-to-PCI bridge (root ports and switch ports alike): base class
# 0x06 (bridge), subclass 0x04 (PCI-to-PCI). A catalog "root_port" or "switch" is one by definition.
PCI_BRIDGE_CLASS = "0x060400"
# x86-64 hugepage sizes in kB. Every catalog node is an x86 server; an Arm node would list 64K/2M/512M.
HUGEPAGE_KB = (2048, 1048576)


def build_hwtree(sku: NodeSku, root: str | Path, *, replace: bool = False) -> dict[str, Any]:
    """Write the SKU's sysfs/procfs tree under `root`; returns the manifest (also written there).

    `root` must be empty or missing unless `replace` is true, in which case the tree's own parts
    (sys/, proc/, the manifest) are removed first: counters the tuning roles wrote are reset.
    """
    root = Path(root)
    if root.exists():
        parts = {p.name for p in root.iterdir()}
        if parts and not replace:
            raise FileExistsError(f"{root} is not empty (pass replace=True to rebuild the hardware tree)")
        for name in ("sys", "proc"):
            if (root / name).is_dir() and not (root / name).is_symlink():
                shutil.rmtree(root / name)
        (root / MANIFEST).unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    lay = layout(sku)
    w = _Writer(root)
    all_cpus = f"0-{sku.cpus.threads - 1}" if sku.cpus.threads else None
    irq = FIRST_IRQ
    netdevs: dict[str, str] = {}
    irqs: dict[str, list[int]] = {}
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
        if f.kind == "gpu":
            # The GPU's class may be unknown to the catalog; the bound driver is how a reader tells a
            # GPU then, and nvidia is what the kernel shows on a GPU node with its driver loaded.
            w.symlink(f"{d}/driver", "sys/bus/pci/drivers/nvidia")
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
        name = netdev_name(sku, nic.rdma, f.bdf)
        if name:
            netdevs[nic.rdma] = name
            w.dir(f"{d}/net/{name}")
            w.symlink(f"{d}/net/{name}/device", d)
            w.symlink(f"sys/class/net/{name}", f"{d}/net/{name}")
        irqs[nic.rdma] = list(range(irq, irq + MSI_VECTORS))
        for n in irqs[nic.rdma]:
            w.file(f"{d}/msi_irqs/{n}", "msix")
            # A new IRQ may run on any online CPU; unknown CPUs: the file is left out.
            w.file(f"proc/irq/{n}/smp_affinity_list", all_cpus, writable=True)
        irq += MSI_VECTORS
    _memory(w, sku, all_cpus)
    manifest = {
        "sku": sku.id,
        "bus_ids": dict(sorted(lay.bus_ids.items())),
        "synthesized_bus_ids": sorted(f.id for f in lay.functions if f.synthesized and f.kind in ("gpu", "nic")),
        "omitted": dict(sorted(lay.omitted.items())),
        "netdevs": dict(sorted(netdevs.items())),
        "irqs": dict(sorted(irqs.items())),
    }
    w.file(MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


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


def _local_cpulist(sku: NodeSku, numa: int | None, all_cpus: str | None) -> str | None:
    if numa is None:
        return all_cpus  # the kernel's answer for a device of no known node: every CPU
    return sku.numa_node(numa).cpulist


def _memory(w: "_Writer", sku: NodeSku, all_cpus: str | None) -> None:
    numa_ids = sorted(n.id for n in sku.numa_nodes)
    if numa_ids:
        w.file("sys/devices/system/node/online", _ranges(numa_ids))
        w.file("sys/devices/system/node/possible", _ranges(numa_ids))
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


def _ranges(ids: Iterable[int]) -> str:
    out: list[str] = []
    ids = sorted(ids)
    start = prev = ids[0]
    for i in ids[1:] + [None]:  # type: ignore[operator]
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(out)


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

