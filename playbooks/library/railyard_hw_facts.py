#!/usr/bin/python
"""What the tuning roles need to know about a host's hardware, read from sysfs and procfs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: railyard_hw_facts
short_description: Read GPUs, RDMA NICs, NUMA nodes, hugepage counters and the kernel command line
description:
  - Reads a sysfs tree and a procfs tree (a host's C(/sys) and C(/proc), or a lab node's hardware
    tree) with the same discovery code C(railyard topology import) uses.
  - Changes nothing.
options:
  sysfs_root:
    description: Root of the sysfs tree.
    type: path
    default: /sys
  procfs_root:
    description: Root of the procfs tree.
    type: path
    default: /proc
  acs:
    description: Also read the ACS state of every PCI bridge (needs a readable config space, i.e. root).
    type: bool
    default: false
author: Railyard
"""

EXAMPLES = r"""
- name: Read the hardware
  railyard_hw_facts:
    sysfs_root: /run/railyard/hw/sys
    procfs_root: /run/railyard/hw/proc
  register: hw
"""

RETURN = r"""
gpus:
  description: GPUs in bus order (GPU0 first), with address, NUMA node and local CPU list.
  returned: always
  type: list
  elements: dict
nics:
  description: >-
    RDMA NICs with address, netdev, NUMA node, local CPU list, MSI IRQs, SR-IOV counts and the path
    of their sriov_numvfs attribute.
  returned: always
  type: list
  elements: dict
numa_nodes:
  description: Per NUMA node (key is the node id as a string) its cpulist and hugepage counters by size in kB.
  returned: always
  type: dict
global_hugepages:
  description: The system-wide hugepage counters by size in kB, with the path of each nr_hugepages.
  returned: always
  type: dict
cmdline:
  description: The running kernel's command line.
  returned: always
  type: str
cpu_vendor:
  description: The first CPU's C(vendor_id) in cpuinfo (C(GenuineIntel), C(AuthenticAMD)); null when cpuinfo is unreadable.
  returned: always
  type: str
bridges_acs:
  description: PCI bridges by address with C(on), C(off) or C(unknown) ACS source validation.
  returned: when acs is true
  type: dict
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils import railyard_sysfs_discovery as discovery


def _read(path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _cpu_vendor(path):
    # The first stanza names it; a large host's cpuinfo is hundreds of kB, so the read stops there.
    try:
        with open(path) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id":
                    return value.strip()
    except OSError:
        return None
    return None


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _hugepages(base):
    out = {}
    if not os.path.isdir(base):
        return out
    for entry in sorted(os.listdir(base)):
        m = re.fullmatch(r"hugepages-(\d+)kB", entry)
        if not m:
            continue
        d = os.path.join(base, entry)
        out[m.group(1)] = {
            "nr": _int(_read(os.path.join(d, "nr_hugepages"))),
            "free": _int(_read(os.path.join(d, "free_hugepages"))),
            "nr_path": os.path.join(d, "nr_hugepages"),
        }
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            procfs_root=dict(type="path", default="/proc"),
            acs=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    sysfs, procfs = module.params["sysfs_root"], module.params["procfs_root"]
    try:
        found = discovery.discover(sysfs)
    except discovery.DiscoveryError as exc:
        module.fail_json(msg=str(exc))
    devices = os.path.join(sysfs, "bus", "pci", "devices")
    gpus = [dict(name=g.name, bdf=g.bdf, numa=g.numa, local_cpulist=g.local_cpulist) for g in found.gpus]
    nics = []
    for n in found.nics:
        nics.append(dict(
            name=n.name, bdf=n.bdf, netdev=n.netdev, numa=n.numa, local_cpulist=n.local_cpulist,
            msi_irqs=list(n.msi_irqs), sriov_totalvfs=n.sriov_totalvfs, sriov_numvfs=n.sriov_numvfs,
            sriov_numvfs_path=os.path.join(devices, n.bdf, "sriov_numvfs"),
        ))
    numa = {}
    node_dir = os.path.join(sysfs, "devices", "system", "node")
    for entry in sorted(os.listdir(node_dir)) if os.path.isdir(node_dir) else []:
        m = re.fullmatch(r"node(\d+)", entry)
        if m:
            numa[m.group(1)] = {
                "cpulist": _read(os.path.join(node_dir, entry, "cpulist")),
                "hugepages": _hugepages(os.path.join(node_dir, entry, "hugepages")),
            }
    result = dict(
        changed=False, gpus=gpus, nics=nics, numa_nodes=numa,
        global_hugepages=_hugepages(os.path.join(sysfs, "kernel", "mm", "hugepages")),
        cmdline=_read(os.path.join(procfs, "cmdline")) or "",
        cpu_vendor=_cpu_vendor(os.path.join(procfs, "cpuinfo")),
        notes=found.notes,
    )
    if module.params["acs"]:
        acs = {}
        for bdf, f in sorted(found.functions.items()):
            if f.is_bridge:
                ctrl = discovery.acs_control(os.path.join(devices, bdf))
                acs[bdf] = "unknown" if ctrl is None else ("on" if ctrl & 1 else "off")
        result["bridges_acs"] = acs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
