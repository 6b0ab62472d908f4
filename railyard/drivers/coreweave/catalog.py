"""Which CoreWeave instance type each catalog SKU is: railyard/data/coreweave/instance-types.yaml,
each mapping with its own sources. Pulumi-free."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from railyard.model import yamlio
from railyard.model.catalog import DATA_DIR

INSTANCE_TYPES = DATA_DIR / "coreweave" / "instance-types.yaml"
NODEPOOL_CRD = DATA_DIR / "coreweave" / "nodepool-crd.yaml"
"""The NodePool CRD written from CoreWeave's docs, for the lab's API server (tests)."""


@dataclass(frozen=True)
class InstanceType:
    sku: str
    instance_type: str
    sources: tuple[str, ...]


@functools.cache
def instance_types(path: Path = INSTANCE_TYPES) -> dict[str, InstanceType]:
    doc = yamlio.load(path.read_text())
    out = {}
    for sku, entry in (doc.get("instanceTypes") or {}).items():
        sources = tuple(entry.get("sources") or ())
        if not sources:
            raise ValueError(f"{path}: {sku} has no sources; every mapping cites where it comes from")
        out[sku] = InstanceType(sku, entry["instanceType"], sources)
    return out
