"""Drivers realise the components' resources on a substrate: `lab` (this machine) today, clouds later.

A driver never imports another driver.
"""

from __future__ import annotations

import importlib
from typing import Any


def tuning_vars(driver: str) -> dict[str, Any]:
    """Role variables a driver's machines need on top of the plan's (the lab presents sysfs and
    procfs somewhere else), from the driver's Pulumi-free `tuning` module; real hosts need none.

    Pulumi-free so that `railyard tune` and the Pulumi program read the same values without the
    components package, which only the Pulumi program has on its path.
    """
    name = f"{__name__}.{driver}.tuning"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # Only a driver without a tuning module means "none"; a broken import stays an error.
        if exc.name not in (name, f"{__name__}.{driver}"):
            raise
        return {}
    return module.tuning_vars()
