#!/usr/bin/python
"""Where a host's device interrupts should run, read from sysfs and procfs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: railyard_irq_facts
short_description: Place the MSI vectors of a host's GPUs, RDMA NICs and VFs on chosen CPUs of their NUMA node
description:
  - Finds the devices and their MSI vectors with the discovery code C(railyard topology import)
    uses, and returns, for each vector, the C(smp_affinity_list) it should have (C(railyard_sysfs)
    settings) and whether it has it now.
  - On a hypervisor the CPUs are its housekeeping CPUs, so the vectors of passthrough devices
    stay off the CPUs pinned to VMs.
  - Changes nothing.
options:
  sysfs_root:
    description: Root of the sysfs tree.
    type: path
    default: /sys
  procfs_root:
    description: Root of the procfs tree (the IRQ affinity files).
    type: path
    default: /proc
  cpus:
    description: NUMA node id to the cpulist its devices' vectors go to.
    type: dict
    required: true
  every_device:
    description: GPUs and VFs too (a hypervisor's passthrough devices); false places the RDMA NICs only.
    type: bool
    default: true
author: Railyard
"""

EXAMPLES = r"""
- name: Where the hypervisor's device interrupts go
  railyard_irq_facts:
    sysfs_root: /sys
    cpus: {"0": "0-5,112-117", "1": "56-61,168-173"}
  register: irqs
"""

RETURN = r"""
settings:
  description: >-
    C(railyard_sysfs) settings, one per vector, of its smp_affinity_list; and the kernel's
    default_smp_affinity (every CPU of C(cpus)), which vectors made later start on.
  returned: always
  type: list
  elements: dict
skipped:
  description: Devices whose NUMA node has no CPUs in C(cpus) (or is unknown); their vectors are left alone.
  returned: always
  type: list
  elements: str
unpinned:
  description: Vectors whose affinity is not the one they should have now.
  returned: always
  type: list
  elements: str
devices:
  description: PCI addresses of the devices placed (the ones irqbalance must leave alone).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils import railyard_pcie as pcie
from ansible.module_utils import railyard_sysfs_discovery as discovery


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            procfs_root=dict(type="path", default="/proc"),
            cpus=dict(type="dict", required=True),
            every_device=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        cpus = {int(k): str(v) for k, v in p["cpus"].items()}
        for cpulist in cpus.values():
            discovery.parse_cpulist(cpulist)
    except ValueError as exc:
        module.fail_json(msg=f"railyard_irq_facts: cpus must map NUMA node ids to cpulists ({exc})")
    try:
        found = discovery.discover(p["sysfs_root"])
    except (discovery.DiscoveryError, pcie.PcieError) as exc:
        module.fail_json(msg=f"railyard_irq_facts: {exc}")
    settings, skipped, unpinned, devices = discovery.irq_placement(found, p["procfs_root"], cpus,
                                                                    every_device=p["every_device"])
    # Vectors made later (vfio's, when a VM turns MSI-X on; a driver's after a rebind) start on the
    # kernel's default affinity: every housekeeping CPU, never one pinned to a VM.
    default = os.path.join(p["procfs_root"], "irq", "default_smp_affinity")
    if os.path.exists(default) and cpus:
        keep = discovery.format_cpulist(sorted({c for cpulist in cpus.values() for c in discovery.parse_cpulist(cpulist)}))
        settings.append(dict(path=default, value=discovery.cpumask(keep), compare="cpumask",
                             label="default_smp_affinity"))
    module.exit_json(changed=False, settings=settings, skipped=skipped, unpinned=unpinned, devices=devices)


if __name__ == "__main__":
    main()
