"""The compute fabric: a rail-optimized fat tree of InfiniBand or RoCE switches.

The design rules (issue 3, item 5; the reasoning and worked examples are in docs/fabric.md):

* Rail i joins compute NIC i of every node (NICs in catalog order, which is GPU order).
* A scalable unit (SU) holds radix/2 - reservedLeafPorts nodes of one pool and has one leaf per
  rail. Every leaf has ceil((radix/2) / oversubscription) uplinks, whether or not its SU is full,
  so filling an SU never recables the tiers above it.
* Two tiers while the leaves fit the spine radix: every leaf reaches every spine with the same
  number k of links, k the largest divisor of the uplinks that the spine ports allow.
* Three tiers beyond: spine groups of g whole SUs (g = the SUs whose leaves fit the downward half
  of a spine; 4 for 8 rails on 64 ports, the 128-node pod of SuperPOD designs), one link from every
  leaf of the group to each of its U spines; spine j of every group forms core plane j, and each
  spine spreads its uplinks (as many as its downlinks: the tiers above the leaf are non-blocking)
  evenly over the C cores of its plane.

The summary is arithmetic on a handful of numbers per pool, never an enumeration, so a plan of
65,536 GPUs costs what a plan of 16 does; `switches()` and `links()` enumerate for the detail view
and the cabling CSV. Names and ports are pure functions of (pool, unit, rail, index): see
`leaf_name` and friends, and docs/addressing.md for what growth may and may not change.

The package, one way: planner.py (FabricPlan: its sizing, structure and summary; plan_fabric)
imports geometry.py (a switch at a speed, FabricError), names.py (tiers and switch names),
cabling.py (the enumeration FabricPlan inherits: switches, links, detail, the cabling CSV; of the
package it imports names.py only) and roce.py (/31 links, ASNs, QoS); none of them imports
planner.py. routing.py reads a RoCE FabricPlan as its switches' BGP routers (sessions,
loopbacks, ECMP, a leaf's host prefixes); planner.py does not import it. subnet.py reads a FabricPlan as a subnet manager sees it (the plan in ibnetdiscover's
format, a discovered subnet read back, OpenSM's partitions and roots), and verify.py holds a
discovered subnet against it (swapped, moved, missing and extra cables, width and speed);
planner.py imports neither. This module only re-exports, so callers import `railyard.model.fabric.<name>`. The
fabric imports addressing.py and mtu.py, never the reverse.
"""

from railyard.model.fabric.cabling import CSV_COLUMNS, Link, Switch
from railyard.model.fabric.geometry import FabricError, SwitchGeometry, switch_geometry
from railyard.model.fabric.names import (
    LINK_TIERS, SWITCH_TIERS, core_name, group_name, group_spine_name, leaf_name, spine_name, unit_name,
)
from railyard.model.fabric.planner import (
    FabricPlan, FabricPool, PoolLayout, cabled_by_lldp, fabric_pools, min_bisection_links, nic_name, plan_fabric,
)

__all__ = [
    "CSV_COLUMNS", "LINK_TIERS", "SWITCH_TIERS",
    "FabricError", "FabricPlan", "FabricPool", "Link", "PoolLayout", "Switch", "SwitchGeometry",
    "cabled_by_lldp", "core_name", "fabric_pools", "group_name", "group_spine_name", "leaf_name", "min_bisection_links", "unit_name",
    "nic_name", "plan_fabric", "spine_name", "switch_geometry",
]
