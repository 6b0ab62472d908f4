"""Model tests parse with the model's rules and every driver's capability rules, but without the
region drivers' own sections: `railyard:driver: coreweave` stands for "a driver that is not the
lab" there, and its `railyard:coreweave` keys are its own tests' business
(tests/unit/drivers/coreweave, tests/unit/drivers/openstack)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from railyard import drivers
from railyard.model import spec as spec_module

REGION_DRIVERS = ("coreweave", "openstack")


def rules() -> dict[str, Any]:
    table = drivers.rules()
    for name in REGION_DRIVERS:
        table[name] = drivers._Rules(dataclasses.replace(drivers.entry(name), rules=None))
    return table


def parse_config(config: Mapping[str, Any], stack: str = "dev", catalog: Any = None):
    return spec_module.parse(config, stack, rules(), catalog)[0]
