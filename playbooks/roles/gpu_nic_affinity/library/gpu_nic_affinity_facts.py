#!/usr/bin/python
"""Discover GPUs, NICs and the PCIe tree from sysfs and pair them by Railyard's one rule."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_nic_affinity_facts
short_description: Pair each GPU with its nearest compute NIC from the host's PCIe tree
description:
  - Walks the PCIe hierarchy under a sysfs root and computes the GPU to NIC pairing with the same
    code as C(railyard topology import) (Railyard's discovery and pairing modules, shipped as
    module_utils), so the host and the CLI agree.
  - Returns the topology in the schema of C(railyard topology import --json), the tree NCCL's
    topology file describes, and the IRQ affinity each NIC's MSI vectors should have.
  - Changes nothing.
options:
  sysfs_root:
    description: Root of the sysfs tree.
    type: path
    default: /sys
  procfs_root:
    description: Root of the procfs tree (for the IRQ affinity files).
    type: path
    default: /proc
  compute_nics:
    description: RDMA names of the compute NICs; empty infers them from PCIe adjacency to GPUs.
    type: list
    elements: str
    default: []
  nvlink_class:
    description: The class between two GPUs joined by NVLink (NV18), which sysfs does not show.
    type: str
    default: ""
  affinity_file:
    description:
      - An affinity map this role wrote before (C(/etc/railyard/affinity.json)); its GPU to NIC
        pairing is returned as C(affinity_file_pairing), so a check reads it in the same run.
    type: path
author: Railyard
"""

EXAMPLES = r"""
- name: Pair GPUs and NICs
  gpu_nic_affinity_facts:
    sysfs_root: /run/railyard/hw/sys
    compute_nics: [mlx5_0, mlx5_3]
  register: affinity
"""

RETURN = r"""
topology:
  description: The topology, as C(railyard topology import --json) prints it.
  returned: always
  type: dict
pairing:
  description: GPU name to compute NIC name.
  returned: always
  type: dict
compute_nics:
  description: Compute NIC names in NIC order.
  returned: always
  type: list
  elements: str
nccl_cpus:
  description: One entry per NUMA node with the PCI tree below it, ready for the NCCL topology file.
  returned: always
  type: list
  elements: dict
irq_settings:
  description: C(railyard_sysfs) settings pinning each NIC's MSI vectors to the CPUs of its NUMA node.
  returned: always
  type: list
  elements: dict
irq_skipped:
  description: NICs whose NUMA CPU list is unknown, so their IRQs are left alone.
  returned: always
  type: list
  elements: str
affinity_file_pairing:
  description: GPU name to NIC name as the affinity map records it (when affinity_file is given).
  returned: when affinity_file is given
  type: dict
irq_unpinned:
  description: The labels of irq_settings whose interrupts run outside their NIC's NUMA CPUs now.
  returned: always
  type: list
  elements: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils import railyard_pcie as pcie
from ansible.module_utils import railyard_sysfs_discovery as discovery
from ansible.module_utils import railyard_topology as topology


def _pci_tree(found, topo):
    """NUMA node -> nested PCI nodes (bridges, GPUs, NICs) as NCCL's <cpu>/<pci> elements."""
    tree = found.tree
    gpu_by_name = {g.name: g for g in found.gpus}
    nic_by_name = {n.name: n for n in found.nics}
    funcs = found.functions

    def pci(node_id):
        node = tree.node(node_id)
        children = [pci(c.id) for c in sorted(tree.children(node_id), key=lambda c: _bdf_of(c.id))]
        if node_id in gpu_by_name:
            f = funcs[gpu_by_name[node_id].bdf]
            return dict(busid=f.bdf, klass=f.klass or "", vendor=f.vendor or "", device=f.device or "",
                        gpu=dict(dev=gpu_by_name[node_id].index), children=[])
        if node_id in nic_by_name:
            f = funcs[nic_by_name[node_id].bdf]
            return dict(busid=f.bdf, klass=f.klass or "", vendor=f.vendor or "", device=f.device or "",
                        net=dict(name=node_id, port=1), children=[])
        f = funcs.get(node_id)
        return dict(busid=node_id, klass=(f.klass if f else None) or "0x060400", vendor=(f.vendor if f else "") or "",
                    device=(f.device if f else "") or "", children=children)

    def _bdf_of(node_id):
        if node_id in gpu_by_name:
            return gpu_by_name[node_id].bdf
        if node_id in nic_by_name:
            return nic_by_name[node_id].bdf
        return node_id

    cpus = {}
    for root in sorted((n for n in tree if n.kind == pcie.HOST_BRIDGE), key=lambda n: n.id):
        numa = root.numa if root.numa is not None else -1
        cpus.setdefault(numa, [])
        cpus[numa].extend(pci(c.id) for c in sorted(tree.children(root.id), key=lambda c: _bdf_of(c.id)))
    out = []
    for numa in sorted(cpus):
        cpulist = found.numa_cpulists.get(numa)
        out.append(dict(numaid=numa, affinity=discovery.cpumask(cpulist) if cpulist else "", children=cpus[numa]))
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            procfs_root=dict(type="path", default="/proc"),
            compute_nics=dict(type="list", elements="str", default=[]),
            nvlink_class=dict(type="str", default=""),
            affinity_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        found = discovery.discover(p["sysfs_root"])
        topo = topology.Topology.from_sysfs(p["sysfs_root"], compute_nics=p["compute_nics"] or None,
                                            nvlink_class=p["nvlink_class"] or None)
    except (discovery.DiscoveryError, topology.TopologyError, pcie.PcieError) as exc:
        module.fail_json(msg=f"gpu_nic_affinity_facts: {exc}")
    settings, skipped, unpinned, _ = discovery.irq_placement(found, p["procfs_root"])
    extra = {}
    if p["affinity_file"]:
        try:
            with open(p["affinity_file"]) as fh:
                recorded = json.load(fh)
            extra["affinity_file_pairing"] = {g["name"]: g["nic"] for g in recorded["gpus"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            module.fail_json(msg=f"gpu_nic_affinity_facts: {p['affinity_file']}: not an affinity map ({exc})")
    module.exit_json(
        changed=False,
        **extra,
        topology=topo.to_json(),
        pairing=topo.pairing(),
        compute_nics=[n.name for n in topo.compute_nics],
        nccl_cpus=_pci_tree(found, topo),
        irq_settings=settings,
        irq_skipped=skipped,
        irq_unpinned=unpinned,
    )


if __name__ == "__main__":
    main()
