"""Acceptance: the checks `up` runs after the nodes are tuned (and rebooted into their boot
settings), before the cluster is called ready (railyard.model.acceptance, docs/acceptance.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from railyard.drivers.base import Access
from railyard.inventory import HostInputs
from railyard.model.plan import Plan
from railyard.tuning import runner
from railyard.tuning.resource import ACCEPTANCE_OUTPUTS, AcceptanceRun


@dataclass
class AcceptanceArgs:
    plan: Plan
    host_inputs: pulumi.Output[HostInputs]
    """The tuned nodes as the tuning run has them: name -> {address, host_key, vars}."""
    secret_vars: pulumi.Output
    """The tuning run's secret variables (the object store's credentials, for the object read)."""
    access: Access
    tuned: pulumi.Output
    """The tuning run's last run: a new one runs acceptance again."""
    extra_vars: dict[str, Any] | None = None
    """The driver's own role variables for acceptance (Driver.acceptance_vars)."""
    kubernetes: bool = False
    """The stack has the Kubernetes layer, which cordons the nodes this takes out (`cordoned`)."""


class Acceptance(pulumi.ComponentResource):
    """Outputs: `passed`, `findings` (node, rail, check, message), `cordoned` (the nodes taken out
    of scheduling under onFailure: cordon, and why) and `drained` (those of them drained in Slurm),
    `flagged` rail
    pairs, `median_gbps`, `seconds`, and `report` (the Markdown report beside the run's artifacts)."""

    TYPE = "railyard:index:Acceptance"

    def __init__(self, name: str, args: AcceptanceArgs, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        plan, checks = args.plan, args.plan.acceptance
        assert checks is not None, "the cluster makes Acceptance only where the plan has its checks"

        extra = dict(args.extra_vars or {})
        # The stack's tolerance, else the driver's (the lab's rails are veths on shared CPUs), else the default.
        tolerance = checks.tolerance if plan.spec.acceptance.bandwidth_tolerance is not None else \
            float(extra.get("acceptance_tolerance", checks.tolerance))

        def hosts(inputs: HostInputs) -> HostInputs:
            return {n: {**h, "vars": {**h["vars"], **extra, **checks.node_vars(n), "acceptance_tolerance": tolerance}}
                    for n, h in inputs.items()}

        self.run = AcceptanceRun(
            f"{name}-run", stack=plan.spec.stack, user=args.access.user, digest=runner.roles_digest(),
            hosts=args.host_inputs.apply(hosts), private_key=args.access.private_key, secret_vars=args.secret_vars,
            mtu=checks.mtu, tolerance=tolerance, on_failure=checks.on_failure,
            controller=plan.slurm.controller.name if plan.slurm is not None else None, after=args.tuned,
            kubernetes=args.kubernetes,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on))
        self.summary = pulumi.Output.all(*(getattr(self.run, k) for k in ACCEPTANCE_OUTPUTS)).apply(
            lambda v: dict(zip(ACCEPTANCE_OUTPUTS, v)))
        self.register_outputs({"summary": self.summary})
