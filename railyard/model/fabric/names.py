"""What the fabric's tiers and switches are called. Names are pure functions of (pool, unit, rail,
index), so growth never renames a switch (docs/addressing.md says what growth may change).
"""

from __future__ import annotations

LINK_TIERS = ("node_leaf", "leaf_spine", "spine_core")
SWITCH_TIERS = ("leaf", "spine", "core")


def unit_name(pool: str, unit: int) -> str:
    """A scalable unit: the pool's nodes under one leaf per rail."""
    return f"{pool}-su{unit}"


def group_name(pool: str, group: int) -> str:
    """A spine group of a three-tier fabric."""
    return f"{pool}-sg{group}"


def leaf_name(pool: str, unit: int, rail: int) -> str:
    return f"{unit_name(pool, unit)}-leaf{rail}"


def spine_name(index: int) -> str:
    """A spine of a two-tier fabric (shared by every pool)."""
    return f"spine{index}"


def group_spine_name(pool: str, group: int, index: int) -> str:
    """Spine `index` of the pool's spine group `group` (three tiers)."""
    return f"{group_name(pool, group)}-spine{index}"


def core_name(plane: int, index: int) -> str:
    return f"plane{plane}-core{index}"
