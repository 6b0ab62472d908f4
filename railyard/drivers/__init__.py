"""Drivers realise the components' resources on a substrate: `lab` (this machine) today, clouds later.

A driver never imports another driver.
"""

from __future__ import annotations

import importlib
from typing import Any

# driver -> its Pulumi-free module of role variables; a driver not named here has none (real hosts
# show their sysfs and procfs where tuning looks for them).
TUNING_MODULES = {"lab": "railyard.drivers.lab.tuning"}


def tuning_vars(driver: str) -> dict[str, Any]:
    """Role variables a driver's machines need on top of the plan's (the lab presents sysfs and
    procfs somewhere else).

    Pulumi-free so that `railyard tune` and the Pulumi program read the same values without the
    components package, which only the Pulumi program has on its path.
    """
    name = TUNING_MODULES.get(driver)
    return importlib.import_module(name).tuning_vars() if name else {}
