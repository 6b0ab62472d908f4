"""Host tuning: the site playbook over every node, after the nodes exist, from the plan's values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from railyard.drivers.base import Access
from railyard.inventory import HostInputs, MachineEntry
from railyard.model.plan import Plan
from railyard.model.spec import Spec
from railyard.tuning import runner
from railyard.tuning.resource import TuningRun


@dataclass
class HostTuningArgs:
    spec: Spec
    plan: Plan
    inventory: pulumi.Output[list[MachineEntry]]
    """The nodes to tune: name, management_ip, host_key (from the node pools)."""
    access: Access
    extra_vars: dict[str, Any] | None = None
    """The driver's own role variables (Driver.tuning_vars)."""
    node_vars: dict[str, dict[str, Any]] | None = None
    """Per node, how the driver's machine is reached (Driver.node_vars: user, port)."""
    teardown: bool = False
    """The machines outlive the stack (Capabilities.keeps_machines): destroy removes the tuning."""
    storage: Any = None
    """The storage tiers' outputs: the dataset prefix to stage and the object store's identity."""
    skip: pulumi.Output[list[str]] | None = None
    """Nodes left out of the run (the drift check's, railyard:verify.onDrift: skip-node)."""


class HostTuning(pulumi.ComponentResource):
    """Outputs: `last_run` (the run directory under .railyard/runs/<stack>/) and `changed`."""

    TYPE = "railyard:index:HostTuning"

    def __init__(self, name: str, args: HostTuningArgs, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        spec, plan = args.spec, args.plan
        self.run_stack = spec.stack

        def hosts(values: list) -> HostInputs:
            inventory, storage, skip = values
            inventory = [m for m in inventory if m["name"] not in (skip or ())]
            return runner.host_inputs(runner.hosts_from(
                spec, plan, inventory, object_endpoint=storage.get("object_endpoint"),
                dataset_prefix=storage.get("dataset_prefix") or "", extra_vars=args.extra_vars,
                node_vars=args.node_vars))

        # Public and secret storage values travel apart: an Output holding any secret is secret as
        # a whole, and per-node tuning inputs must stay readable in previews and reviews.
        storage = args.storage or {}
        public = pulumi.Output.all(storage.get("object_endpoint"), storage.get("dataset_prefix")).apply(
            lambda v: {"object_endpoint": v[0], "dataset_prefix": v[1]})
        host_inputs = pulumi.Output.all(args.inventory, public, args.skip if args.skip is not None else []).apply(hosts)
        secret_vars: pulumi.Output[dict[str, Any]] = pulumi.Output.secret(pulumi.Output.all(storage.get("access_key"), storage.get("secret_key")).apply(
            lambda v: runner.object_store_vars({"access_key": v[0], "secret_key": v[1]})))
        # What a driver's later steps re-run the playbook with (a rolling reboot's verification).
        self.host_inputs, self.secret_vars = host_inputs, secret_vars
        self.run = TuningRun(f"{name}-run", stack=spec.stack, user=args.access.user, digest=runner.roles_digest(),
                             hosts=host_inputs, private_key=args.access.private_key, secret_vars=secret_vars,
                             teardown=args.teardown,
                             opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on))
        if spec.tuning.preview_drift and pulumi.runtime.is_dry_run():
            pulumi.Output.all(host_inputs, args.access.private_key, secret_vars).apply(self._report_drift)
        self.register_outputs({"last_run": self.run.last_run, "changed": self.run.changed})

    def _report_drift(self, values: list) -> None:
        """Preview with previewDrift: the playbook in check-and-diff mode, each host-level change an
        info diagnostic on this resource (`NODE: SETTING OLD → NEW`)."""
        host_inputs, key, secret_vars = values
        if not host_inputs or not key:
            return  # nodes not created yet: nothing on them can drift
        hosts = runner.hosts_of(host_inputs)
        try:
            result = runner.run(self.run_stack, hosts, key, check=True, secret_vars=secret_vars)
        except Exception as exc:  # drift is advisory; preview must not fail on an unreachable node
            pulumi.log.warn(f"host drift check failed: {exc}", resource=self)
            return
        # Grouped by node (stable sort keeps each node's changes in playbook order).
        for change in sorted(result.changes, key=lambda c: c.host):
            pulumi.log.info(str(change), resource=self)
        for failure in result.failures:
            pulumi.log.warn(f"drift check: {failure}", resource=self)
