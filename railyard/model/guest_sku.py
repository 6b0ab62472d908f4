"""A VM's hardware as a catalog entry: the guest topology (railyard.model.guest_topology) read as
a NodeSku, so that whatever reads a host's hardware reads a guest's the same way. A guest is a
host with a different tree: the lab presents it (railyard.drivers.lab.hwtree), the pairing rule
pairs its GPUs with its VFs, and the tuning roles find them where the guest's firmware puts them.

What the guest shows, and where each fact comes from:

- **CPUs and NUMA.** One NUMA node per guest cell, its CPUs the cell's vCPUs; the CPU model is the
  host's (libvirt's host-passthrough CPU mode); cores from the threads of a host core (vCPUs are
  pinned in whole cores, two consecutive vCPUs per core).
- **Memory.** The cells' memory, in GiB.
- **PCIe.** Each `pcie-expander-bus` is a host bridge of its own root bus (its `busNr`), on its
  cell; each `pcie-root-port` a root port at its planned slot on that bus; each virtual switch (an
  upstream port and one downstream port per device) a switch at its upstream port's address.
  Their PCI ids are those of QEMU's devices (QEMU_IDS), which libvirt's models name; a switch is
  one catalog entry, so its downstream ports show the upstream port's ids (QEMU's
  xio3130-downstream is 0x104c:0x8233).
- **GPUs** keep the host GPU's model and ids, at their guest addresses, numbered GPU0.. in guest
  bus order (as nvidia-smi numbers them in the guest).
- **VFs** are the guest's compute NICs, named mlx5_0.. in guest bus order (mlx5 names RDMA devices
  in probe order), their netdev the VM's name for the VF (vf0...). Model, link and speed are
  their PF's. The catalog has no VF device id, so a VF shows its PF's ids, as the lab hypervisor's
  tree shows its VFs (railyard.drivers.lab.agent); a real ConnectX VF has a device id of its own.

Works from the topology's JSON form (GuestTopology.to_json), so a driver that gets only that (a
Pulumi dynamic provider's inputs, which drop null values) builds the same entry as the plan.
"""

from __future__ import annotations

from typing import Any, Mapping

from railyard.model import pcie
from railyard.model.catalog import CpuSpec, GpuSpec, NicSpec, NodeSku, NumaNode, PcieBridge, Source
from railyard.model.guest_topology import DOWNSTREAM, EXPANDER, ROOT_PORT, UPSTREAM
from railyard.model.sysfs_discovery import parse_cpulist

# PCI ids of the devices behind libvirt's controller models (QEMU hw/pci-bridge: pxb-pcie and
# pcie-root-port are Red Hat's 0x1b36:0x000b and 0x000c, x3130-upstream is TI XIO3130 0x104c:0x8232).
QEMU_IDS = {EXPANDER: ("0x1b36", "0x000b"), ROOT_PORT: ("0x1b36", "0x000c"), UPSTREAM: ("0x104c", "0x8232")}


def controller_id(model: str, index: int) -> str:
    """A controller's bridge id in the guest SKU: expander1, root2, switch3 (libvirt's index)."""
    return f"{model.replace('pcie-', '').split('-')[0]}{index}"


def _bdf(bus: int, slot: int) -> str:
    return f"0000:{bus:02x}:{slot:02x}.0"


def guest_sku(host: NodeSku, topology: Mapping[str, Any], vm: str) -> NodeSku:
    """The hardware VM `vm` of a `host` SKU sees, from its guest topology's JSON form."""
    controllers = {c["index"]: c for c in topology["controllers"]}
    bridge_id = {i: controller_id(c["model"], i) for i, c in controllers.items()}
    bridges: list[PcieBridge] = []
    for i, c in sorted(controllers.items()):
        model = c["model"]
        vendor, device = QEMU_IDS.get(model, (None, None))
        if model == EXPANDER:
            bridges.append(PcieBridge(bridge_id[i], pcie.HOST_BRIDGE, None, c["cell"], None,
                                      "QEMU pxb-pcie", vendor, device))
        elif model == ROOT_PORT:
            bus = controllers[c["parent"]]["bus"]
            bridges.append(PcieBridge(bridge_id[i], pcie.ROOT_PORT, bridge_id[c["parent"]], None,
                                      _bdf(bus, c["slot"]), "QEMU pcie-root-port", vendor, device))
        elif model == UPSTREAM:
            bus = controllers[c["parent"]]["bus"]
            bridges.append(PcieBridge(bridge_id[i], pcie.SWITCH, bridge_id[c["parent"]], None,
                                      _bdf(bus, c["slot"]), "QEMU x3130-upstream", vendor, device))
        elif model != DOWNSTREAM:  # a switch's downstream ports are the switch's own (pci_layout)
            raise ValueError(f"{vm}: unknown controller model {model!r}")

    def parent(d: Mapping[str, Any]) -> str:
        # A device below a virtual switch hangs off the switch; elsewhere off its root port.
        return bridge_id[d["switch"]] if d.get("switch") is not None else bridge_id[d["port"]]

    in_order = sorted(topology["devices"], key=lambda d: d["address"])
    gpus: list[GpuSpec] = []
    nics: list[NicSpec] = []
    for d in in_order:
        if d["kind"] == "gpu":
            g = host.gpu(d["host"])
            gpus.append(GpuSpec(len(gpus), f"GPU{len(gpus)}", g.model, g.memory_gib, d["cell"], d["address"],
                                g.pci_vendor, g.pci_device, g.pci_class, parent(d), g.pcie_link))
        else:
            pf = host.nic(d["host"])
            nics.append(NicSpec(f"mlx5_{len(nics)}", d["name"], "compute", pf.nic_model, pf.model, pf.link, 1, 1,
                                pf.speed_gbps, d["cell"], d["address"], pf.pci_vendor, pf.pci_device, pf.pci_class,
                                None, parent(d), pcie_link=pf.pcie_link))
    cells = topology["cells"]
    threads = sum(len(parse_cpulist(c["vcpus"])) for c in cells)
    per_core = host.threads_per_core or 1
    cpus = CpuSpec(host.cpus.model, len(cells), threads // per_core if threads % per_core == 0 else None, threads,
                   host.cpus.base_ghz, host.cpus.boost_ghz)
    return NodeSku(
        id=f"{host.id}:{vm}", name=f"{host.name}, VM {vm}",
        sources=(Source(host.file, f"the guest topology of {vm}", "the guest's cells, controllers and devices"),),
        assumptions=(), cpus=cpus,
        numa_nodes=tuple(NumaNode(c["id"], c["vcpus"]) for c in cells),
        memory_gib=sum(c["memory_mib"] for c in cells) // 1024,
        nvlink_class=host.nvlink_class if gpus else None,
        gpu_interconnect=host.gpu_interconnect if gpus else None,
        gpus=tuple(gpus), nics=tuple(nics), nvme=None, pcie=tuple(bridges), reproduces=None, file=host.file)


def guest_names(host: NodeSku, topology: Mapping[str, Any], vm: str) -> dict[str, str]:
    """Each of the VM's devices' names in the guest (GPU0, mlx5_0) by its name in the plan (the
    host's GPU name, the VM's VF name)."""
    sku = guest_sku(host, topology, vm)
    by_address = {g.pci_bus_id: g.name for g in sku.gpus} | {n.pci_bus_id: n.rdma for n in sku.nics}
    return {d["name"]: by_address[d["address"]] for d in topology["devices"]}
