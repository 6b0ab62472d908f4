"""A RoCE fabric's switch configurations, rendered from the plan (templates/fabric/):

* `frr_config(router, stack)`: one switch's FRR configuration (frr.conf): its loopback, its /31
  links, a leaf's anycast gateway and the static routes to its hosts, and eBGP to every neighbour
  with ECMP (railyard.model.fabric.routing says what; this only writes it down);
* `qos_config(plan)`: the switch-side lossless QoS (PFC, ECN, trust, ETS) as NVIDIA Cumulus Linux
  NVUE commands, from the fixture's RoCE defaults (railyard.model.fabric.roce). The lab applies
  none of it: its switches have no ASIC;
* `write_switch_configs(plan, out)`: both, as `railyard plan --frr DIR` writes them.

The lab's routers (railyard.drivers.lab) run the very frr.conf this renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from railyard.model.fabric.roce import qos_defaults
from railyard.model.fabric.routing import HOST_SIDE, Router
from railyard.templates import render

if TYPE_CHECKING:
    from railyard.model.plan import Plan

# The FRR release the configurations are written for (Debian 12's, which the lab runs).
FRR_VERSION = "8.4.4"
QOS_FILE = "roce-qos.nvue"


def frr_config(router: Router, stack: str, log_file: str | None = None) -> str:
    return render("fabric/frr.conf.j2", router=router, stack=stack, host_side=HOST_SIDE, frr_version=FRR_VERSION,
                  log_file=log_file)


def qos_config(plan: Plan) -> str:
    return render("fabric/roce-qos.nvue.j2", q=qos_defaults(), stack=plan.spec.stack, switch=plan.fabric.switch.model,
                  switches=plan.fabric.leaves + plan.fabric.spines + plan.fabric.cores)


def write_switch_configs(plan: Plan, out: Path) -> int:
    """<out>/<switch>/frr.conf for every switch, and <out>/roce-qos.nvue; returns the switches
    written. ValueError for a fabric without BGP (InfiniBand)."""
    routers = plan.routers()
    out.mkdir(parents=True, exist_ok=True)
    for router in routers:
        d = out / router.name
        d.mkdir(exist_ok=True)
        (d / "frr.conf").write_text(frr_config(router, plan.spec.stack), encoding="utf-8")
    (out / QOS_FILE).write_text(qos_config(plan), encoding="utf-8")
    return len(routers)
