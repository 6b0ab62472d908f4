"""The Pulumi program: load the validated stack spec and its plan, build the Cluster, export.

The spec is read from the stack file itself (stacks/Pulumi.<stack>.yaml), the same file
`railyard validate` checks, so what was validated is what is built.
"""

import os
from pathlib import Path

import pulumi

from components.cluster import Cluster, ClusterArgs
from railyard.drivers.base import DriverNotImplemented, load_driver
from railyard import drivers, paths, repair
from railyard.engine.pulumi import OUTPUTS_ONLY_ENV
from railyard.lifecycle import protected
from railyard.lifecycle.resource import Expiry
from railyard.model.errors import SpecError
from railyard.model.node_health import as_output
from railyard.stack import applied_from, load

stack = pulumi.get_stack()
stack_file = paths.stack_file(stack, Path.cwd())
try:
    spec, plan = load(stack_file)
    if spec.acceptance.enabled and drivers.entry(spec.driver).capabilities.tuned_by != "railyard":
        pulumi.log.info(f"acceptance: not run by this driver ({spec.driver}'s machines come tuned by its platform)")
    driver = load_driver(spec, plan)
except (SpecError, DriverNotImplemented) as exc:
    # A RunError is shown without a Python traceback; nothing has been registered yet.
    raise pulumi.RunError(f"{stack_file.name}: {exc}") from None

# Long-lived stacks of real machines are protected; lab and ephemeral stacks are not, unless
# railyard:protect says so (docs/lifecycle.md).
protect = protected(spec.protect, ephemeral=spec.ephemeral is not None, playground=driver.playground)
cluster = Cluster(f"{spec.stack}", ClusterArgs(spec=spec, plan=plan, protect=protect,
                                               outputs_only=os.environ.get(OUTPUTS_ONLY_ENV) == "1"), driver)
if spec.ephemeral is not None:
    expiry = Expiry(f"{spec.stack}-expiry", stack=spec.stack, ttl=spec.ephemeral.ttl,
                    ttl_seconds=spec.ephemeral.ttl_seconds)
    pulumi.export("expiresAt", expiry.expires_at)

pulumi.export("region", spec.region)
pulumi.export("layout", spec.layout)
pulumi.export("inventory", cluster.inventory)
pulumi.export("fabric", cluster.fabric.summary)
pulumi.export("networks", cluster.fabric.networks)
pulumi.export("storage", cluster.storage.endpoints)
access = {"user": cluster.access.user, "privateKey": cluster.access.private_key}
ssh_hint = driver.ssh_hint()
if ssh_hint is not None:
    access["ssh"] = ssh_hint
pulumi.export("access", access)
if cluster.kubeconfig is not None:
    pulumi.export("kubeconfig", cluster.kubeconfig)  # secret: the Cluster made it so
if cluster.kubernetes is not None:
    pulumi.export("kubernetes", cluster.kubernetes.summary)
if cluster.acceptance is not None:
    pulumi.export("acceptance", cluster.acceptance.summary)
pulumi.export("appliedFrom", applied_from(stack_file))
if drivers.verifiable(spec.driver):
    # Each node's health state as `railyard verify` last recorded it (docs/verify.md); verify
    # records the outputs again whenever a state changes. A driver verify cannot read has none.
    try:
        recorded = repair.read_states(paths.node_states(spec.stack, Path.cwd()))
    except repair.RepairError as exc:
        raise pulumi.RunError(str(exc)) from None
    pulumi.export("nodeHealth", as_output(recorded, [n.name for n in plan.nodes]))
if cluster.guest_tuning is not None:
    # Where the guests' run left its artifacts, the VMs' libvirt domains among them.
    pulumi.export("guestTuning", {"lastRun": cluster.guest_tuning.run.last_run,
                                  "changed": cluster.guest_tuning.run.changed})
