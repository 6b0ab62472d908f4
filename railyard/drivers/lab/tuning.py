"""Role variables lab nodes need: where their hardware tree presents sysfs and procfs."""

from __future__ import annotations

from typing import Any

from railyard.drivers.lab.node import HW_TREE

# Roles reading kernel state; in the lab they read the node's hardware tree instead of the
# host's /sys and /proc (which nodes see read-only).
TUNING_ROLES = ("hugepages", "iommu", "sriov", "gpu_nic_affinity", "verify")


def tuning_vars() -> dict[str, Any]:
    # Lab nodes run this machine's /usr: naming the interpreter spares a discovery run per host.
    out: dict[str, Any] = {"ansible_python_interpreter": "/usr/bin/python3"}
    for role in TUNING_ROLES:
        out[f"{role}_sysfs_root"] = f"{HW_TREE}/sys"
        out[f"{role}_procfs_root"] = f"{HW_TREE}/proc"
    return out
