"""What the virtual layout renders for each VM from its guest topology (railyard.model.guest_topology):
the libvirt domain XML a KVM host defines, and the NCCL topology file (NCCL_TOPO_FILE) the guest
reads. Both templates are under templates/guest/ (Jinja2, StrictUndefined).

A hostdev's source is the host device's address as the plan has it: the catalog's where it gives
one, else the layout railyard.model.pci_layout derives (the one a lab node shows); a VF's is its
PF's plus the SR-IOV First VF Offset of a ConnectX-class device (its VFs right after the
adapter's last PF function, each later port's after the VFs of the ports before it), stride 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from railyard import templates
from railyard.model import pcie
from railyard.model.guest_topology import GuestTopology
from railyard.model.pci_layout import layout
from railyard.model.sysfs_discovery import cpumask, format_cpulist as cpuset

if TYPE_CHECKING:
    from railyard.model.catalog import NodeSku


def host_addresses(sku: NodeSku, guest: GuestTopology) -> dict[str, str]:
    """Each of the guest's devices (by its name in the guest) -> its host PCI address."""
    bus_ids = layout(sku).bus_ids
    out = {}
    for d in guest.devices:
        if d.kind == "gpu":
            out[d.name] = bus_ids[d.host]
            continue
        nic = sku.nic(d.host)
        ports, fn = nic.ports or 1, (nic.port or 1) - 1
        if fn and nic.sriov_total_vfs is None:
            raise ValueError(f"{sku.id}: {nic.rdma}'s VFs follow those of the ports before it, whose count "
                             "(sriov_total_vfs) the catalog does not give")
        offset = ports - fn + fn * (nic.sriov_total_vfs or 0)
        out[d.name] = _plus(bus_ids[d.host], offset + (d.vf_slot or 0))
    return out


def _plus(bdf: str, n: int) -> str:
    """The address n routing IDs after bdf (bus << 8 | device << 3 | function)."""
    dom, bus, rest = bdf.split(":")
    dev, fn = rest.split(".")
    rid = (int(bus, 16) << 8 | int(dev, 16) << 3 | int(fn)) + n
    if rid > 0xFFFF:
        raise ValueError(f"{n} functions after {bdf} is beyond bus ff")
    return f"{dom}:{rid >> 8:02x}:{(rid >> 3) & 0x1F:02x}.{rid & 7}"


def domain_xml(name: str, hypervisor: str, guest: GuestTopology, sources: dict[str, str]) -> str:
    """The libvirt domain of VM `name`; sources: each device's host address (host_addresses)."""
    pinned = all(c.pins is not None for c in guest.cells) and guest.emulator_cpus is not None
    sizes = {len(c.vcpus) for c in guest.cells}
    per_cell = sizes.pop() if len(sizes) == 1 else 0
    # A socket per cell, where every cell holds whole cores alike; else libvirt's default shape.
    topology = ({"sockets": len(guest.cells), "cores": per_cell // guest.threads_per_core,
                 "threads": guest.threads_per_core}
                if per_cell and per_cell % guest.threads_per_core == 0 else None)
    split = {n: tuple(a.replace(".", ":").split(":")) for n, a in sources.items()}
    return templates.render(
        "guest/domain.xml.j2", vm_name=name, hypervisor=hypervisor, guest=guest, pinned=pinned,
        emulator_cpus=cpuset(guest.emulator_cpus or ()), host_nodes=cpuset(c.host_numa for c in guest.cells),
        topology=topology, sources=split, cpuset=cpuset, hex2=lambda n: f"0x{n:02x}", zip=zip)


@dataclass
class _Pci:
    busid: str
    klass: str | None
    link: tuple[str, str] | None = None
    """(link_speed, link_width) as NCCL writes them: ("32.0 GT/s PCIe", "16")."""
    children: list["_Pci"] = field(default_factory=list)

    def element(self) -> dict[str, Any]:
        """The node as the NCCL topology template reads it (the role's form for the host's tree)."""
        speed, width = self.link or ("", "")
        return {"busid": self.busid, "klass": self.klass or "", "link_speed": speed, "link_width": width,
                "children": [c.element() for c in self.children]}


def _link(text: str | None) -> tuple[str, str] | None:
    """The catalog's `32.0 GT/s PCIe x16` as NCCL's two attributes."""
    if not text:
        return None
    speed, width = text.rsplit(" x", 1)
    return speed, width


def nccl_topology_xml(sku: NodeSku, guest: GuestTopology) -> str:
    """The guest's NCCL topology: under each guest cell, the host switches above its devices (so a
    GPU and its VF are as far apart as on the host), and each device at its guest address."""
    tree = sku.pcie_tree
    bridges: dict[tuple[int, str], _Pci] = {}
    cpus = []
    for cell in guest.cells:
        top: list[_Pci] = []
        for d in (d for d in guest.devices if d.cell == cell.id):
            spec = sku.gpu(d.host) if d.kind == "gpu" else sku.nic(d.host)
            leaf = _Pci(d.address, spec.pci_class, _link(spec.pcie_link))
            # The host's switches on the device's path, topmost first.
            path = [a for a in reversed(tree.ancestors(d.host)) if tree.node(a).kind == pcie.SWITCH]
            siblings = top
            for sw in path:
                key = (cell.id, sw)
                if key not in bridges:
                    # Synthetic bridge ids, as in Azure's published files: NCCL reads a bridge's
                    # place from the nesting, and the guest has no such device to name.
                    bridges[key] = _Pci(f"ffff:{len(bridges) + 1:02x}:00.0", "0x060400")
                    siblings.append(bridges[key])
                bridges[key].link = bridges[key].link or leaf.link
                siblings = bridges[key].children
            siblings.append(leaf)
        cpus.append({"numaid": cell.id, "affinity": cpumask(cpuset(cell.vcpus)), "arch": "x86_64",
                     "children": [p.element() for p in top]})
    return templates.render(templates.ROLE_NCCL_TOPOLOGY, cpus=cpus)
