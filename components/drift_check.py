"""The drift check of a stack with railyard:verify.onDrift: before tuning touches a node, the
running cluster is held against its plan (railyard.verify, the same reading as `railyard verify`).

In preview, every finding is a warning on this component (`drift: <finding>`), which `pulumi
preview` and `railyard review` show, with what `up` would do about it. In `up`, a drifted node
either stops the run before tuning (`fail`: nothing is tuned, the nodes are named) or is left out
of tuning and acceptance while the others go on (`skip-node`). Drift is never taken as the new
desired state: it is reported at every preview and every `up` until the node is as planned again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from railyard import verify
from railyard.drivers.base import Access
from railyard.inventory import MachineEntry
from railyard.model.plan import Plan
from railyard.model.spec import Spec

NAMED = 8  # nodes named in one line; the rest are counted


def _names(nodes: list[str]) -> str:
    return ", ".join(nodes[:NAMED]) + (f" and {len(nodes) - NAMED} more" if len(nodes) > NAMED else "")


@dataclass
class DriftCheckArgs:
    spec: Spec
    plan: Plan
    inventory: pulumi.Output[list[MachineEntry]]
    access: Access
    node_vars: dict[str, dict[str, Any]]
    """Per node, how the driver's machine is reached (Driver.node_vars)."""


class DriftCheck(pulumi.ComponentResource):
    """Outputs: `skipped`, the nodes `up` leaves alone (onDrift skip-node; empty otherwise)."""

    TYPE = "railyard:index:DriftCheck"

    def __init__(self, name: str, args: DriftCheckArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        self.args = args
        self.skipped: pulumi.Output[list[str]] = pulumi.Output.all(args.inventory, args.access.private_key).apply(
            self._check)
        self.register_outputs({"skipped": self.skipped})

    def _check(self, values: list) -> list[str]:
        machines, key = values
        args = self.args
        planned = {n.name for n in args.plan.nodes}
        machines = [m for m in machines or [] if m["name"] in planned]
        if not machines:
            return []  # nothing made yet: nothing can have drifted
        hosts = verify.targets(args.spec, args.plan, machines, lambda n: args.node_vars.get(n, {}))
        # Drift from the plan: the hardware and the cabling. GPU health (an Xid, an ECC error) is
        # not drift; `railyard verify` reports it.
        report = verify.collect(args.spec, args.plan, hosts, key or None, parts=("hardware", "fabric"))
        for note in report.notes:
            pulumi.log.info(f"drift check: {note}", resource=self)
        for f in report.findings:
            pulumi.log.warn(f"drift: {f.message}", resource=self)
        if not report.findings:
            pulumi.log.info(f"drift check: {len(machines)} node(s) as planned", resource=self)
            return []
        nodes = report.drifted()
        fabric_only = len(report.findings) - sum(1 for f in report.findings if f.node)
        on_drift = args.spec.verify.on_drift
        if on_drift == "skip-node" and not fabric_only:
            pulumi.log.warn(f"up leaves {_names(nodes)} alone: not tuned, not in acceptance "
                            "(railyard:verify.onDrift: skip-node)", resource=self)
            return nodes
        why = (f"{fabric_only} finding(s) between switches, which no node's skip leaves out"
               if on_drift == "skip-node" else "railyard:verify.onDrift: fail")
        stop = (f"up stops before tuning: {len(report.findings)} finding(s)"
                + (f" on {_names(nodes)}" if nodes else "") + f" ({why}); `railyard verify --stack "
                f"{args.spec.stack}` lists them")
        if pulumi.runtime.is_dry_run():
            pulumi.log.warn(stop, resource=self)
            return nodes
        raise pulumi.RunError(stop)
