"""The drivers Railyard has, by `railyard:driver` name: what each machine substrate can do, and
where its code lives. The one list of driver names.

Pulumi-free, so that validation, `railyard plan|tune|review` and the CLI read it without the
Pulumi SDK; the Pulumi half of the contract is railyard/drivers/base.py. Every module is named
here explicitly, so a driver whose module is broken fails loudly instead of vanishing.

A driver never imports another driver.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, NamedTuple, TypeVar

if TYPE_CHECKING:
    from railyard.model.errors import Problem
    from railyard.model.plan import NodePlan, Plan
    from railyard.model.spec import Spec

Machines = Literal["node", "pool"]
Addresses = Literal["plan", "provider"]
TunedBy = Literal["railyard", "platform"]
Vms = Literal["on-hypervisors", "are-nodes", "none"]
Kubernetes = Literal["runs", "given", "platform", "none"]


@dataclass(frozen=True)
class Capabilities:
    """How a driver's machines come to be, which the components follow (components/cluster.py)."""

    machines: Machines
    """"node": one driver call per planned node (lab, hosts); "pool": one per node pool, the
    provider making the pool's nodes (CoreWeave's node pools, an OpenStack server group)."""
    addresses: Addresses
    """"plan": known before any provider runs, plain strings: the plan's management addresses
    (lab) or the stack file's (hosts); "provider": the provider assigns them and hands them back
    as Outputs (clouds)."""
    tuned_by: TunedBy
    """"railyard": HostTuning runs the site playbook over the nodes; "platform": the provider's
    images are tuned already (CoreWeave), so there is no HostTuning."""
    vms: Vms
    """In the virtual layout: "on-hypervisors": VMs on the nodes, after Railyard tuned them (the
    lab); "are-nodes": the provider's VMs are the machines Railyard gets (OpenStack); "none": the
    driver has bare metal only, and a virtual stack on it is refused (CoreWeave)."""
    kubernetes: Kubernetes = "none"
    """Where the cluster of a stack with railyard:kubernetes comes from (Driver.kubeconfig, a
    secret Output): "runs": the driver runs a control plane of its own (the lab); "given": the
    stack names one, railyard:kubernetes.kubeconfig (hosts); "platform": the provider's cluster,
    always there (CoreWeave); "none": a stack with railyard:kubernetes is refused."""
    playground: bool = False
    """Throwaway clusters: not protected unless railyard:protect says so (lifecycle.protected)."""
    keeps_machines: bool = False
    """The machines outlive the stack (servers someone already has): destroy runs the teardown
    playbook, removing what tuning put on them, instead of deleting machines."""
    unverifiable: str = ""
    """Why `railyard verify` cannot read this driver's machines; empty where it can."""
    rails_at_host_rate: float | None = None
    """Set where the rails cannot carry their planned rate (the lab's veths go as fast as this
    machine's CPUs move bytes): the collectives across node pairs (`verify --deep`) are then held
    against the median of the pairs run, with this tolerance, not against the rail's speed."""

    @property
    def railyard_tunes(self) -> bool:
        """Railyard tunes the machines (`railyard tune`, the site playbook); else the platform does."""
        return self.tuned_by == "railyard"

    def tunes_hosts(self, virtual: bool) -> bool:
        """Whether a stack runs host tuning: on machines Railyard tunes, but not where the
        provider's VMs are the machines (their hypervisors are the provider's)."""
        return self.railyard_tunes and not self.vms_are_machines(virtual)

    def tunes_provider_vms(self, virtual: bool) -> bool:
        """Whether guest tuning runs over the provider's VMs, which are the stack's machines."""
        return self.railyard_tunes and self.vms_are_machines(virtual)

    def vms_are_machines(self, virtual: bool) -> bool:
        """Whether the virtual layout's VMs are the provider's machines (one per pool call)."""
        return virtual and self.vms == "are-nodes"

    @property
    def runs_vms(self) -> bool:
        """Whether the driver runs the virtual layout's VMs on the nodes it made."""
        return self.vms == "on-hypervisors"

    def wants_cluster(self, kubernetes_layer: bool) -> bool:
        """Whether the stack has a Kubernetes cluster to reach: its layer's, or the platform's own."""
        return kubernetes_layer or self.kubernetes == "platform"

    @property
    def runs_control_plane(self) -> bool:
        """The driver runs the control plane itself, so the layer registers Nodes and renders networks."""
        return self.kubernetes == "runs"

    def __post_init__(self) -> None:
        # VMs on hypervisors are children of their hypervisor's HgxNode, which only per-node
        # drivers have; a per-pool platform that runs VMs hands them over as its machines.
        if self.vms == "on-hypervisors" and self.machines != "node":
            raise ValueError("VMs on hypervisors need machines per node; a pool driver's VMs are its machines "
                             "(vms='are-nodes')")


@dataclass(frozen=True)
class DriverEntry:
    name: str
    capabilities: Capabilities
    implementation: str | None
    """"module:Class" of its railyard.drivers.base.Driver; None: validated, `up` stops with a message."""
    rules: str | None = None
    """Pulumi-free module: KEYS and parse (model.spec.DriverRules), and preflight(spec, stack)."""
    tuning: str | None = None
    """Pulumi-free module whose tuning_vars() adds role variables for every node (the lab's sysfs
    and procfs), and whose node_vars(spec, plan, node) adds them per node (a host's user, port,
    jump host and rails)."""
    cli: str | None = None
    """Module whose register(subparsers) adds `railyard <name> ...`."""
    plugins: tuple[str, ...] = ()
    """The Python SDK packages whose provider plugins the driver's resources need beyond the
    engine's own (railyard.engine.plugins): checked before `up` and `preview` start the engine."""


@dataclass(frozen=True)
class RuleHooks:
    """What a driver's rules module (DriverEntry.rules) declares as its `HOOKS`: the Pulumi-free
    half of the contract. A hook it lacks is None; a misspelled one is a TypeError when the module
    loads, and a mistyped one a mypy error."""

    keys: Mapping[str, tuple[str, ...]]
    """The driver's own keys by section, under railyard:<driver> ("": its top level)."""
    parse: Callable[[Any, "Spec"], tuple[Any, list["Problem"]]]
    """Its section (None when absent) and the spec so far -> (its typed config, problems)."""
    preflight: Callable[["Spec"], str | None] | None = None
    """Why it cannot act on this machine (a sentence that says nothing was changed), or None."""
    prepare: Callable[["Spec"], str | None] | None = None
    """Before an `up`: what it builds or fetches here for the stack; why it could not, or None."""
    plan_problems: Callable[["Spec", Any], list["Problem"]] | None = None
    """Its config's problems that only the planned fabric shows (a switch the plan lacks), given
    the FabricPlan validation planned once."""


@dataclass(frozen=True)
class TuningHooks:
    """What a driver's tuning module (DriverEntry.tuning) declares as its `HOOKS`."""

    tuning_vars: Callable[[], dict[str, Any]] | None = None
    """Role variables for every node on top of the plan's (the lab's sysfs and procfs)."""
    acceptance_vars: Callable[[], dict[str, Any]] | None = None
    """Variables of the acceptance playbook its machines need."""
    node_vars: Callable[["Spec", "Plan", "NodePlan | str"], dict[str, Any]] | None = None
    """Role and connection variables of one machine, by its plan or name (a host's user, port,
    jump host; a VM's jump host, by its name, where VMs are the machines)."""
    read_subnet: Callable[["Spec", "Plan", Callable[[], SubnetReading]], SubnetReading] | None = None
    """The InfiniBand subnet as ibnetdiscover prints it, and where it was read (or None and why
    not), given the default reading (ibnetdiscover over SSH on the stack's nodes); without the
    hook, the default is used (the lab serves its simulated subnet instead)."""
    read_switch_lldp: Callable[["Spec", "Plan", "str | None", float], "SwitchLldp"] | None = None
    """An Ethernet fabric's switches' own LLDP tables (given the SSH private key and a timeout per
    switch), where the driver can read them: the lab asks its switches' lldpd, the hosts driver the
    switches its stack names; without the hook, none is read and the hosts' side alone decides."""
    reboot: Callable[["Spec", str], "Reboot"] | None = None
    """How one machine of a pool (by the pool's name) is rebooted when the repair loop resets it
    (railyard.repair); without the hook, the driver's machines are never reset."""
    power_cycle: Callable[["Spec", "Plan", str], Callable[[float], str] | None] | None = None
    """What power-cycles one machine (by its node name) through its BMC when the repair loop's
    reboot cannot reach it or it does not come back (rollout.reboot's power_cycle), or None for a
    machine without one; without the hook, none has."""


class Reboot(NamedTuple):
    """How a driver reboots a machine of a pool: the command run on it over SSH, the seconds it
    may take to come back answering SSH, and how many of the pool may be out at once."""

    command: str
    timeout_s: float
    max_unavailable: int


class SubnetReading(NamedTuple):
    """What a driver's read_subnet gives: ibnetdiscover's output (None: not read), where it was
    read (or why not), and whether its link speeds are the cables' own (False on a simulator
    slower than the plan)."""

    text: str | None
    where: str
    speeds_judged: bool = True


class SwitchLldp(NamedTuple):
    """What a driver's read_switch_lldp gives: each switch asked, {its port as the plan names it
    (routing.port_netdev): the neighbours its lldpd heard there (lldp.parse)}, or why it could not
    be read; and where they were read, or why no switch was asked."""

    tables: Mapping[str, Mapping[str, list] | str]
    where: str


@dataclass(frozen=True)
class CliHooks:
    """What a driver's command module (DriverEntry.cli) declares as its `HOOKS`."""

    register: Callable[[Any], None]
    """Adds `railyard <driver> ...` to the CLI's subparsers."""
    after_up: Callable[["Spec"], None] | None = None
    """Its word after a successful `railyard up` (the lab lists its nodes)."""


H = TypeVar("H", RuleHooks, TuningHooks, CliHooks)


def hooks(module_name: str, kind: type[H]) -> H:
    """The HOOKS a driver module declares, checked to be of the kind its registry field names."""
    declared = getattr(importlib.import_module(module_name), "HOOKS", None)
    if not isinstance(declared, kind):
        raise TypeError(f"{module_name} declares no HOOKS = {kind.__name__}(...)")
    return declared


DRIVERS: dict[str, DriverEntry] = {
    "lab": DriverEntry(
        "lab", Capabilities(machines="node", addresses="plan", tuned_by="railyard", vms="on-hypervisors",
                            playground=True,
                            kubernetes="runs",
                            # Its acceptance holds a rail to its node's other rails with it too (lab/tuning.py).
                            rails_at_host_rate=0.9),
        implementation="railyard.drivers.lab.driver:LabDriver", rules="railyard.drivers.lab.rules",
        tuning="railyard.drivers.lab.tuning", cli="railyard.drivers.lab.cli"),
    # Existing servers over SSH (railyard:hosts): discovered, checked against their SKU, tuned and
    # rebooted in a rolling reboot per pool.
    "hosts": DriverEntry(
        "hosts", Capabilities(machines="node", addresses="plan", tuned_by="railyard", vms="on-hypervisors",
                              keeps_machines=True, kubernetes="given"),
        implementation="railyard.drivers.hosts.driver:HostsDriver", rules="railyard.drivers.hosts.rules",
        tuning="railyard.drivers.hosts.tuning"),
    # CoreWeave's CKS through the official SDK: a VPC, a cluster, the object tier, and NodePool
    # custom resources applied to the cluster; CoreWeave tunes its own nodes.
    "coreweave": DriverEntry(
        "coreweave", Capabilities(machines="pool", addresses="provider", tuned_by="platform", vms="none",
                                  kubernetes="platform",
                                  unverifiable="CoreWeave's nodes are reached through its Kubernetes API, not over "
                                  "SSH, so Railyard cannot read their sysfs or their subnet; CoreWeave verifies its "
                                  "own nodes and takes failed ones out of service"),
        implementation="railyard.drivers.coreweave.driver:CoreWeaveDriver", rules="railyard.drivers.coreweave.rules",
        plugins=("pulumi_coreweave", "pulumi_kubernetes")),
    "openstack": DriverEntry(
        "openstack", Capabilities(machines="pool", addresses="provider", tuned_by="railyard", vms="are-nodes",
                                  unverifiable="the stack's machines are OpenStack VMs: the PCIe tree they show is "
                                  "the hypervisor's presentation and their fabric the cloud's, and Railyard plans "
                                  "neither the hosts under them nor their cabling, so there is nothing physical to "
                                  "hold them to"),
        implementation="railyard.drivers.openstack.driver:OpenStackDriver", rules="railyard.drivers.openstack.rules",
        tuning="railyard.drivers.openstack.tuning", plugins=("pulumi_openstack",)),
}


def verifiable(name: str | None) -> bool:
    """Whether `railyard verify` reads the driver's machines, so its stacks carry node states."""
    e = DRIVERS.get(name) if name else None
    return e is not None and not e.capabilities.unverifiable


def entry(name: str) -> DriverEntry:
    try:
        return DRIVERS[name]
    except KeyError:
        raise KeyError(f"no driver {name!r}; drivers: {', '.join(DRIVERS)}") from None


class _Rules:
    """A driver's DriverRules (model.spec): its own module's keys and rules, after the rules its
    Capabilities put on the model's keys, so a stack asks nothing of a driver it cannot do."""

    def __init__(self, entry: DriverEntry):
        self.entry = entry
        self.hooks = hooks(entry.rules, RuleHooks) if entry.rules else None
        self.KEYS = self.hooks.keys if self.hooks is not None else {}

    def parse(self, section: Any, spec: "Spec") -> tuple[Any, list]:
        from railyard.model.errors import Problem

        problems = []
        caps, name = self.entry.capabilities, self.entry.name
        if spec.layout == "virtual" and caps.vms == "none":
            problems.append(Problem("railyard:layout", "'virtual'", f"'bare-metal' for driver {name}",
                                    f"{name} has bare-metal machines only"))
        k8s = spec.kubernetes
        if k8s is not None and caps.kubernetes == "none":
            problems.append(Problem("railyard:kubernetes", "a Kubernetes layer", f"no railyard:kubernetes for driver {name}",
                                    f"driver {name} cannot provide a Kubernetes cluster yet"))
        elif k8s is not None and caps.kubernetes == "given" and k8s.kubeconfig is None:
            problems.append(Problem("railyard:kubernetes.kubeconfig", "nothing", "a Pulumi secret: the cluster's kubeconfig",
                                    f"driver {name} has no control plane of its own: pulumi config set --secret "
                                    "--path kubernetes.kubeconfig < kubeconfig"))
        elif k8s is not None and caps.kubernetes != "given" and k8s.kubeconfig is not None:
            where = "runs its own control plane" if caps.kubernetes == "runs" else "uses the provider's cluster"
            problems.append(Problem("railyard:kubernetes.kubeconfig", "a kubeconfig", f"nothing for driver {name}",
                                    f"driver {name} {where}; remove railyard:kubernetes.kubeconfig"))
        if spec.slurm is not None and caps.tuned_by != "railyard":
            problems.append(Problem("railyard:slurm", "Slurm configured by Railyard", f"no railyard:slurm for driver {name}",
                                    f"driver {name}'s machines come tuned by the platform, and Railyard configures "
                                    "Slurm only on machines it tunes"))
        if self.hooks is None:
            return None, problems
        config, more = self.hooks.parse(section, spec)
        return config, problems + list(more)

    def plan_problems(self, spec: Any, fabric: Any) -> list:
        hook = self.hooks.plan_problems if self.hooks is not None else None
        return list(hook(spec, fabric)) if hook is not None and spec.driver_config is not None else []


def rules() -> dict[str, Any]:
    """Every driver's DriverRules, for the spec parser."""
    return {name: _Rules(e) for name, e in DRIVERS.items()}


def _tuning(driver: str) -> TuningHooks:
    name = entry(driver).tuning
    return hooks(name, TuningHooks) if name else TuningHooks()


def tuning_vars(driver: str) -> dict[str, Any]:
    """Role variables a driver's machines need on top of the plan's (the lab presents sysfs and
    procfs somewhere else); real hosts show theirs where tuning looks, so most drivers add none.

    Pulumi-free so that `railyard tune` and the Pulumi program read the same values without the
    components package, which only the Pulumi program has on its path.
    """
    hook = _tuning(driver).tuning_vars
    return hook() if hook is not None else {}


def acceptance_vars(driver: str) -> dict[str, Any]:
    """Role variables of the acceptance playbook that a driver's machines need (the lab's nodes
    install nothing and have no RDMA devices); most drivers add none."""
    hook = _tuning(driver).acceptance_vars
    return hook() if hook is not None else {}


def node_vars(spec: "Spec", plan: "Plan", node: "NodePlan | str") -> dict[str, Any]:
    """Role and connection variables of one node that its driver adds (Pulumi-free, for `railyard
    tune` and the Pulumi program alike); most drivers add none."""
    hook = _tuning(spec.driver).node_vars
    return hook(spec, plan, node) if hook is not None else {}


def read_subnet(spec: "Spec", plan: "Plan", default: Callable[[], SubnetReading]) -> SubnetReading:
    """The stack's InfiniBand subnet as ibnetdiscover prints it and where it was read, or (None,
    why not): the driver's own reading where it has one, else `default`."""
    hook = _tuning(spec.driver).read_subnet
    return hook(spec, plan, default) if hook is not None else default()


def read_switch_lldp(spec: "Spec", plan: "Plan", private_key: str | None, timeout: float) -> SwitchLldp:
    """The stack's switches' own LLDP tables as its driver reads them, or none and why."""
    hook = _tuning(spec.driver).read_switch_lldp
    if hook is None:
        return SwitchLldp({}, f"driver {spec.driver} reads no switch's LLDP table")
    return hook(spec, plan, private_key, timeout)


def reboot(spec: "Spec", pool: str) -> Reboot | None:
    """How the stack's driver reboots a machine of `pool`, or None where it cannot."""
    hook = _tuning(spec.driver).reboot
    return hook(spec, pool) if hook is not None else None


def power_cycle(spec: "Spec", plan: "Plan", node: str) -> Callable[[float], str] | None:
    """What power-cycles `node` through its BMC, or None where the driver knows of none."""
    hook = _tuning(spec.driver).power_cycle
    return hook(spec, plan, node) if hook is not None else None


def cli_modules() -> list[CliHooks]:
    """The drivers' own commands (`railyard lab ...`), in registry order."""
    return [hooks(e.cli, CliHooks) for e in DRIVERS.values() if e.cli]


def after_up(spec: "Spec") -> None:
    """The driver's word after a successful `railyard up` (the lab lists its nodes), if it has one."""
    name = entry(spec.driver).cli
    hook = hooks(name, CliHooks).after_up if name else None
    if hook is not None:
        hook(spec)


def prepare(spec: "Spec") -> str | None:
    """Before an `up`: what the driver builds or fetches on this machine for `spec` (the lab's
    control plane binaries, for a stack with railyard:kubernetes); why it could not, or None."""
    name = entry(spec.driver).rules
    hook = hooks(name, RuleHooks).prepare if name else None
    return hook(spec) if hook is not None else None


def platform_tuning(driver: str) -> str | None:
    """Why Railyard runs no host tuning on `driver`'s machines (its platform tunes them), said by
    the plan, the stack's outputs and the review alike; None where Railyard tunes them."""
    e = DRIVERS.get(driver)
    if e is None or e.capabilities.tuned_by != "platform":
        return None
    return (f"none by Railyard: driver {driver}'s platform tunes its own machines (drivers, fabric, hugepages)")


def missing_plugins(driver: str) -> str | None:
    """Why the engine cannot run a stack on `driver` here: a provider plugin it needs is absent
    (railyard.engine.plugins), with the command that installs it; None when all are in place."""
    e = DRIVERS.get(driver)
    if e is None or not e.plugins:
        return None
    from railyard.engine import plugins

    try:
        return plugins.missing_message(driver, e.plugins)
    except LookupError as exc:  # the SDK itself is not installed: say so, as for a missing plugin
        return str(exc)


def uses_kubernetes_provider(driver: str, kubernetes_layer: bool) -> bool:
    """Whether the program registers pulumi-kubernetes resources for a stack on `driver`: its
    Kubernetes layer, or a driver whose own resources are Kubernetes objects (CoreWeave's node
    pools). Said from the stack file's keys, so a review need not parse the whole spec."""
    e = DRIVERS.get(driver)
    return kubernetes_layer or (e is not None and "pulumi_kubernetes" in e.plugins)


def ensure_engine(driver: str, kubernetes_layer: bool) -> str | None:
    """Before any engine command on a stack: the engine parts it uses that are not built yet (the
    Kubernetes provider, minutes once per pin, with progress lines); why not, or None. `make test`
    and `make bench` build them all up front."""
    if not uses_kubernetes_provider(driver, kubernetes_layer):
        return None
    from railyard.engine import toolchain

    try:
        toolchain.ensure_kubernetes()
    except toolchain.ToolchainError as exc:
        return f"{exc}; nothing was changed"
    return None


def preflight(spec: "Spec") -> str | None:
    """Why the driver cannot act on this machine for `spec`, said before the engine starts (a
    sentence that says nothing was changed), or None."""
    why = missing_plugins(spec.driver)
    if why is not None:
        return why
    name = entry(spec.driver).rules
    check = hooks(name, RuleHooks).preflight if name else None
    return check(spec) if check is not None else None
