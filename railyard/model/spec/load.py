"""Reading a stack file and parsing its `config:` mapping into a Spec.

`read_stack_file(path) -> (config, stack)`, `parse(config, stack, drivers, catalog) -> (Spec,
FabricPlan | None)`. The parser reads each section with a few primitives (mapping, integer,
choice, ...) that record a problem and return None when a value cannot be used, so every problem
is found in one pass; the cross-field rules (rules.py) run after the sections, and the planners'
checks last, once the keys they read are valid.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence, TypeVar, cast, overload

import yaml

from railyard.model import addressing, mount_points, mtu, yamlio
from railyard.model.errors import Problem, SpecError
from railyard.model.fabric import FabricPlan
from railyard.model.gpu_health import COLLECTIVE_TOLERANCE
from railyard.model.guest_topology import default_vcpus, pinning, vm_devices
from railyard.model.spec.reader import ConfigReader
from railyard.model.spec.rules import CrossFieldRules, _feeds_plan, _PoolFacts
from railyard.model.spec.show import _ABSENT, _did_you_mean, _is_secret, _kind, _one_of, _show
from railyard.model.spec.types import (
    ACCEPTANCE_ON_FAILURE, ON_DRIFT, AFFINITY_POLICIES, CPU_ISOLATION, DEFAULT_ASN_BASE, DEFAULT_CIDRS, DEFAULT_LABEL_PREFIX, DEFAULT_RESOURCE_PREFIX, DEFAULT_SPEED, DEFAULT_SWITCH, DEFAULT_SWITCH_BY_SPEED, FABRIC_KINDS,
    HUGEPAGE_SIZES, IOMMU_MODES, KEYS, KVM_MAX_VCPUS, LAYOUTS, LOCAL_FILESYSTEMS, MAX_POOL_NODES, NAMESPACE, PARALLEL_FS_KINDS, PARALLEL_FS_SOURCES,
    RAID_LEVELS, SLURM_HEALTH_CHECK_INTERVAL, SLURM_HEALTH_CHECK_STATES, SLURM_MAX_SWITCH_WAIT, SLURM_MPI, SRIOV_MAX_VFS, SPEEDS_BY_KIND, TOPOLOGIES, TTL_UNITS, _TTL, AcceptanceSpec, Affinity, HEALTH_DRAIN_TIMEOUT_S, HEALTH_RETUNE_TIMEOUT_S, HealthSpec, Pins, VerifySpec, ComputeFabric, DriverRules,
    Ephemeral, Fabric, Hugepages, KubernetesSpec, LocalCache, Network, NodePool, ObjectTier, ParallelFs, Secret, SlurmSpec, Spec,
    Sriov, StorageSpec, Tenant, TuningSpec, VmSpec, host_reserve_threads, os_reserve_gib, parse_ttl,
)

if TYPE_CHECKING:
    from railyard.model.catalog import Catalog, NodeSku, SwitchModel, VmShape

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_GUID = re.compile(r"^0x[0-9a-fA-F]{1,16}$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# Namespaces a tenant may not take: the layer deletes its tenants' namespaces at destroy.
RESERVED_NAMESPACES = ("default", "kueue-system", "sriov-network-operator")
_SECRETS_HINT = "only railyard:storage.object.credentials and railyard:kubernetes.kubeconfig may be secrets"
_PKEY = re.compile(r"^0[xX][0-9a-fA-F]{1,4}$")

# Reading the catalog (railyard/model/catalog.py). A fact the catalog marks unknown (None) skips the
# rule that needs it: the rule cannot be decided, and the entry's `assumptions` say what is missing.

_SWITCH_KIND = {"infiniband": "infiniband", "ethernet": "roce"}  # any Ethernet switch carries RoCE
_KIND_LABEL = {"infiniband": "an InfiniBand", "roce": "an Ethernet"}


_T = TypeVar("_T")


def _partial(value: _T | None) -> _T:
    """A value a reader returned, for a model field that is never None in a Spec parse() returns.

    A reader returns None only once it has recorded a problem (or for a key that has no default),
    and parse() raises SpecError whenever a problem was recorded, so a model object holding that
    None is only ever seen by the checks that run on the partial model, which test for None
    themselves. The value is passed through unchanged.
    """
    return cast(_T, value)


def stack_name_of(path: str | Path) -> str:
    """`stacks/Pulumi.us-east-bm.yaml` -> `us-east-bm` (any other file name: its stem)."""
    name = Path(path).name
    for suffix in (".yaml", ".yml"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.startswith("Pulumi.") and len(name) > len("Pulumi."):
        name = name[len("Pulumi."):]
    return name


def read_stack_file(path: str | Path) -> tuple[Mapping[str, Any], str]:
    """A Pulumi stack file's `config:` mapping and its stack name; raises SpecError (never OSError)."""
    p = Path(path)
    shown = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([Problem(shown, "no such file", "a Pulumi stack file",
                                 "stack files live at stacks/Pulumi.<stack>.yaml")]) from None
    except IsADirectoryError:
        raise SpecError([Problem(shown, "a directory", "a Pulumi stack file",
                                 "name the file itself, e.g. stacks/Pulumi.lab.yaml")]) from None
    except UnicodeDecodeError:
        raise SpecError([Problem(shown, "bytes that are not UTF-8", "a UTF-8 YAML file")]) from None
    except OSError as exc:
        raise SpecError([Problem(shown, f"a file that cannot be read ({exc.strerror or exc})",
                                 "a readable Pulumi stack file")]) from None
    try:
        document = yamlio.load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        what = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        if exc.context_mark is not None and mark is not None and exc.context_mark.line != mark.line:
            what += f"; the construct began at line {exc.context_mark.line + 1}"
        raise SpecError([Problem(where, f"invalid YAML ({what})", "a YAML mapping",
                                 "fix the YAML at that line")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem(shown, f"invalid YAML ({exc})", "a YAML mapping")]) from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise SpecError([Problem(shown, f"a YAML {_kind(document)}",
                                 "a mapping with a `config:` key", "see stacks/Pulumi.lab.yaml")])
    config = document.get("config")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise SpecError([Problem(f"{shown}:config", _show(config), "a mapping of config keys")])
    return config, stack_name_of(p)


def parse(config: Mapping[str, Any], stack: str, drivers: Mapping[str, DriverRules | None],
          catalog: Catalog | None = None) -> tuple[Spec, FabricPlan | None]:
    """The Spec of a stack's `config:` mapping and the compute fabric validation planned for it
    (None for a spec without pools), so nobody plans it again; raises SpecError with every problem.

    drivers: every driver name `railyard:driver` may take, with its rules (None: it has none).
    """
    if catalog is None:
        from railyard.model.catalog import load_catalog

        catalog = load_catalog()
    parser = _Parser(catalog, drivers)
    spec = parser.parse(config, stack)
    return spec, parser.fabric_plan


# --------------------------------------------------------------------------------------------------
# The parser


class _Parser(ConfigReader, CrossFieldRules):
    def __init__(self, catalog: Catalog, drivers: Mapping[str, DriverRules | None]):
        super().__init__(f"{_SECRETS_HINT}; set this one without --secret")
        self.catalog = catalog
        self.drivers = drivers
        self.fabric_plan: FabricPlan | None = None

    # --- readers of the spec's own forms (the generic ones are ConfigReader's) -----------------

    def keyed(self, value: Any, path: str, section: str,
              keys: Mapping[str, tuple[str, ...]] = KEYS) -> dict | None:
        """A mapping whose keys are all known for `section` of `keys` (the model's, or a driver's
        own table); absent or empty: {}."""
        return self.mapping(value, path, keys[section])

    def dns_name(self, m: Mapping, key: str, path: str) -> str | None:
        what = "a DNS label: lowercase letters, digits and '-', at most 63, starting and ending alphanumeric"
        value = self.string(m, key, path, required=True, what=what)
        if value is None:
            return None
        if len(value) > 63 or not _DNS_LABEL.match(value):
            hint = ""
            fixed = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63]
            if fixed and _DNS_LABEL.match(fixed) and fixed != value:
                hint = f"e.g. {fixed!r}"
            self.problem(path, _show(value), what, hint)
            return None
        return value

    def cidr(self, m: Mapping, key: str, path: str, default: str) -> ipaddress.IPv4Network | None:
        what = "an IPv4 network in CIDR form, e.g. 198.18.0.0/20"
        value = self.string(m, key, path, default=default, what=what)
        if value is None:
            return None
        try:
            net = ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            self.problem(path, _show(value), what)
            return None
        if net.version != 4:
            self.problem(path, _show(value), what, "IPv6 fabrics are not supported yet")
            return None
        if "/" not in value:
            self.problem(path, _show(value), what, "give the prefix length, e.g. /20")
            return None
        if str(net) != value.strip():
            self.problem(path, _show(value), what, f"host bits are set; the network is {net}")
            return None
        return net

    @overload
    def catalog_entry(self, table: Literal["nodes"], key: str, path: str, kind: str) -> NodeSku | None: ...
    @overload
    def catalog_entry(self, table: Literal["vm_shapes"], key: str, path: str, kind: str) -> VmShape | None: ...
    @overload
    def catalog_entry(self, table: Literal["switches"], key: str, path: str, kind: str) -> SwitchModel | None: ...

    def catalog_entry(self, table: str, key: str, path: str, kind: str) -> NodeSku | VmShape | SwitchModel | None:
        entries = getattr(self.catalog, table)
        if key not in entries:
            ids = sorted(entries)
            hint = _did_you_mean(key, ids) or f"add a {kind} to railyard/data/catalog/ first"
            self.problem(path, _show(key), f"a {kind} id in the catalog: {', '.join(ids)}", hint)
            return None
        return entries[key]

    # --- the config -----------------------------------------------------------------------------

    def _driver_section(self, name: str) -> bool:
        """Whether `railyard:<name>` is a driver's own section (a driver that reads keys)."""
        rules = self.drivers.get(name)
        return rules is not None and bool(rules.KEYS)

    def parse(self, config: Mapping[str, Any], stack: str) -> Spec:
        ours: dict[str, Any] = {}
        for key, value in config.items():
            if not isinstance(key, str):
                continue
            namespace, sep, name = key.partition(":")
            if not sep:
                if key in KEYS[""]:
                    self.problem(key, "a config key without a namespace", f"{NAMESPACE}:{key}",
                                 f"write it as {NAMESPACE}:{key}")
                continue
            if namespace != NAMESPACE:
                if difflib.SequenceMatcher(None, namespace.lower(), NAMESPACE).ratio() >= 0.8:
                    self.problem(key, f"the namespace {namespace!r}", f"the namespace {NAMESPACE!r}",
                                 f"did you mean {NAMESPACE}:{name}?")
                continue
            if name not in KEYS[""] and not self._driver_section(name):
                head, dot, rest = name.partition(".")
                if dot and head in KEYS[""]:
                    hint = f"nest it under {NAMESPACE}:{head} (pulumi config set --path '{head}.{rest}' ...)"
                else:
                    hint = _did_you_mean(name, KEYS[""], f"{NAMESPACE}:")
                self.problem(key, "an unknown key", _one_of(f"{NAMESPACE}:{k}" for k in KEYS[""]), hint)
                continue
            ours[name] = value

        p = f"{NAMESPACE}:"
        region = self.string(ours, "region", p + "region", required=True,
                             what="a region name: lowercase letters, digits and '-'")
        if region is not None and not _DNS_LABEL.match(region):
            self.problem(p + "region", _show(region), "a region name: lowercase letters, digits and '-'")
        layout = self.choice(ours, "layout", p + "layout", LAYOUTS, required=True)
        driver = self.choice(ours, "driver", p + "driver", tuple(self.drivers), required=True)
        for name in ours:
            if self._driver_section(name) and driver is not None and name != driver:
                self.problem(p + name, "settings of another driver", f"settings of driver {driver}, "
                             f"the stack's railyard:driver", f"remove {p}{name}, or set railyard:driver: {name}")

        pools, facts = self.node_pools(ours, layout)
        fabric = self.fabric(ours)
        kind = fabric.compute.kind if fabric else None
        tenants = self.tenants(ours, kind, pools)
        kubernetes = self.kubernetes(ours)
        slurm = self.slurm(ours, layout, pools, region)
        acceptance = self.acceptance(ours, slurm, kubernetes)
        verify = self.verify(ours)
        health = self.health(ours)
        storage = self.storage(ours)
        tuning = self.tuning(ours, layout, pools, facts)
        ephemeral = self.ephemeral(ours)
        protect = self.protect(ours, ephemeral)

        self.check_pools(pools, facts, layout, tuning, fabric)
        self.check_networks(fabric)

        spec = Spec(stack=stack, region=_partial(region), layout=_partial(layout), driver=_partial(driver),
                    node_pools=tuple(pools), fabric=_partial(fabric), tenants=tuple(tenants), storage=storage,
                    tuning=tuning, kubernetes=kubernetes, slurm=slurm, acceptance=acceptance, verify=verify, health=health,
                    ephemeral=ephemeral, protect=protect)
        rules = self.drivers.get(driver) if driver is not None else None
        if rules is not None and driver is not None:
            section = self.keyed(ours.get(driver), p + driver, "", rules.KEYS) if rules.KEYS else None
            if section is not None or not rules.KEYS:
                driver_config, problems = rules.parse(section or None, spec)
                # A key the model refused already (a plain-text kubeconfig) is not the driver's to
                # report again as missing.
                seen = {q.path for q in self.problems}
                self.problems.extend(p for p in problems if p.path not in seen)
                spec = dataclasses.replace(spec, driver_config=driver_config)
        if pools and fabric is not None and not any(_feeds_plan(p.path) for p in self.problems):
            self.check_plan(spec)
            if kubernetes is not None and self.fabric_plan is not None:
                self.check_topology_labels(pools, facts)
            if spec.verify.switch_guids and self.fabric_plan is not None:
                planned = {sw.name for sw in self.fabric_plan.switches()}
                for name, _ in spec.verify.switch_guids:
                    if name not in planned:
                        self.problem(f"{NAMESPACE}:verify.switchGuids.{name}", _show(name), "a switch of the plan",
                                     _did_you_mean(name, planned) or "`railyard plan` lists them")
            plan_problems = getattr(rules, "plan_problems", None)  # optional (DriverRules)
            if plan_problems is not None and self.fabric_plan is not None:
                self.problems.extend(plan_problems(spec, self.fabric_plan))
        if self.problems:
            raise SpecError(self.problems)
        return spec

    # --- node pools -----------------------------------------------------------------------------

    def node_pools(self, ours: Mapping, layout: str | None) -> tuple[list[NodePool], list[_PoolFacts]]:
        path = f"{NAMESPACE}:nodePools"
        value = self.raw(ours, "nodePools", path, required=True, what="a list of node pools")
        if value is _ABSENT or value is None:
            return [], []
        if not isinstance(value, list):
            self.problem(path, _show(value), "a list of node pools", "each item: {name, sku, count}")
            return [], []
        if not value:
            self.problem(path, "an empty list", "at least one node pool")
            return [], []
        pools: list[NodePool] = []
        facts: list[_PoolFacts] = []
        names: dict[str, str] = {}
        for i, item in enumerate(value):
            ipath = f"{path}[{i}]"
            m = self.keyed(item, ipath, "nodePools[]")
            if m is None:
                continue
            if not m:
                self.problem(ipath, _show(item), "a node pool {name, sku, count}")
                continue
            name = self.dns_name(m, "name", f"{ipath}.name")
            if name is not None:
                if name in names:
                    self.problem(f"{ipath}.name", _show(name), "a name no other node pool has",
                                 f"{names[name]} has it already")
                names.setdefault(name, f"{ipath}.name")
            sku_id = self.string(m, "sku", f"{ipath}.sku", required=True, what="a node SKU id from the catalog")
            sku = self.catalog_entry("nodes", sku_id, f"{ipath}.sku", "node SKU") if sku_id is not None else None
            count = self.integer(m, "count", f"{ipath}.count", required=True, maximum=MAX_POOL_NODES)
            fact = _PoolFacts(ipath, sku)
            vms_per_host: int | None = 0
            vm: VmSpec | None = None
            if layout == "virtual":
                vms_per_host, vm, fact.vm_keys = self.vm(m, ipath, sku)
            elif layout == "bare-metal":
                for key in ("vmsPerHost", "vm"):
                    if key in m:
                        self.problem(f"{ipath}.{key}", "a VM setting", "nothing: the layout is bare-metal",
                                     f"remove it, or set {NAMESPACE}:layout: virtual")
            isolation = self.choice(m, "cpuIsolation", f"{ipath}.cpuIsolation", CPU_ISOLATION, default=None)
            if isolation is not None and layout != "virtual":
                self.problem(f"{ipath}.cpuIsolation", _show(isolation), "nothing: the pool runs no VMs",
                             "CPU isolation keeps the hypervisor off its VMs' pinned CPUs; "
                             f"remove it, or set {NAMESPACE}:layout: virtual")
                isolation = None
            elif isolation is not None and sku is not None and pinning(sku) is None:
                self.problem(f"{ipath}.cpuIsolation", _show(isolation), f"nothing for {sku.id}",
                             f"the catalog does not give {sku.id}'s CPU lists and threads per core, so no vCPU is "
                             "pinned and there is nothing to isolate")
                isolation = None
            pools.append(NodePool(name=_partial(name), sku=_partial(sku_id), count=_partial(count),
                                  vms_per_host=_partial(vms_per_host), vm=vm,
                                  cpu_isolation=isolation))
            facts.append(fact)
        return pools, facts

    def vm(self, m: Mapping, ipath: str, sku: NodeSku | None) -> tuple[int | None, VmSpec | None, frozenset]:
        vms = self.integer(m, "vmsPerHost", f"{ipath}.vmsPerHost", default=1)
        if vms is not None and sku is not None and sku.gpus and vms > len(sku.gpus):
            # Every VM has a GPU of its host (vm.gpus >= 1), so no host runs more VMs than it has GPUs.
            self.problem(f"{ipath}.vmsPerHost", _show(vms), f"at most {len(sku.gpus)} (one GPU per VM)",
                         f"{sku.id} has {len(sku.gpus)} GPUs")
            vms = None
        vpath = f"{ipath}.vm"
        vm_m = self.keyed(m.get("vm"), vpath, "nodePools[].vm")
        if vm_m is None:
            return vms, None, frozenset()
        keys = frozenset(k for k in vm_m if vm_m[k] is not None)
        derive_vcpus = False
        vfs = self.integer(vm_m, "vfs", f"{vpath}.vfs", default=None, maximum=SRIOV_MAX_VFS)
        shape_id = self.string(vm_m, "shape", f"{vpath}.shape", what="a VM shape id from the catalog")
        vcpus: int | None
        memory: int | None
        gpus: int | None
        if "shape" in keys:
            for key in ("vcpus", "memoryGiB", "gpus"):
                if key in keys:
                    self.problem(f"{vpath}.{key}", f"{key} given with a shape", "either shape or vcpus/memoryGiB/gpus",
                                 f"the shape fixes {key}; remove one of them")
            if shape_id is None:
                return vms, None, keys
            shape = self.catalog_entry("vm_shapes", shape_id, f"{vpath}.shape", "VM shape")
            if shape is None:
                return vms, None, keys
            vcpus, memory, gpus = shape.vcpus, shape.memory_gib, shape.gpus
            if "vfs" not in keys:
                vfs = shape.vfs
        else:
            vcpus = self.integer(vm_m, "vcpus", f"{vpath}.vcpus", default=None, maximum=KVM_MAX_VCPUS)
            memory = self.integer(vm_m, "memoryGiB", f"{vpath}.memoryGiB", default=None)
            gpus = self.integer(vm_m, "gpus", f"{vpath}.gpus", default=None)
            # Defaults: the host split evenly between its VMs, after the hypervisor's reserve.
            if sku is not None and vms is not None:
                host_gpus, threads, host_mem = len(sku.gpus), sku.threads, sku.memory_gib
                if gpus is None and "gpus" not in keys:
                    gpus = host_gpus // vms
                derive_vcpus = vcpus is None and "vcpus" not in keys and threads is not None
                if memory is None and "memoryGiB" not in keys and host_mem is not None:
                    memory = max(1, int((host_mem - os_reserve_gib(host_mem)) // vms))
                # A default cannot be derived from a fact the catalog does not know: ask for it.
                for key, known, fact in (("vcpus", threads, "thread count"), ("memoryGiB", host_mem, "memory")):
                    if known is None and key not in keys:
                        self.problem(f"{vpath}.{key}", _show(_ABSENT), "a positive integer",
                                     f"the catalog does not know the {fact} of {sku.id}, "
                                     "so there is no default; set it")
        if vfs is None and "vfs" not in keys and sku is not None:
            # One VF on every rail: a VM reaches each rail of the rail-optimized fabric.
            vfs = max(1, len(sku.compute_nics))
        if derive_vcpus and gpus and vfs is not None and vms and vms > 0:
            # The most every VM can have pinned beside its devices (guest_topology), once the
            # hypervisor's reserve is kept.
            assert sku is not None and sku.threads is not None, "derive_vcpus is set where the catalog gives the threads"
            reserve = host_reserve_threads(sku.threads)
            vcpus = default_vcpus(sku, vm_devices(sku, vms, gpus, vfs), (sku.threads - reserve) // vms, reserve)
        hugepages = (self.hugepages(vm_m["hugepages"], f"{vpath}.hugepages", "nodePools[].vm.hugepages", "VM")
                     if "hugepages" in keys else None)
        return vms, VmSpec(vcpus=_partial(vcpus), memory_gib=_partial(memory), gpus=_partial(gpus), vfs=_partial(vfs),
                           shape=shape_id, hugepages=hugepages), keys

    # --- fabric ---------------------------------------------------------------------------------

    def fabric(self, ours: Mapping) -> Fabric | None:
        path = f"{NAMESPACE}:fabric"
        if "fabric" not in ours:
            self.problem(path + ".compute", _show(_ABSENT), "a mapping {kind, speed, switch, ...}",
                         "the compute fabric is required")
            return None
        fm = self.keyed(ours.get("fabric"), path, "fabric")
        if fm is None:
            return None
        cpath = path + ".compute"
        if fm.get("compute") is None:
            self.problem(cpath, _show(_ABSENT), "a mapping {kind, speed, switch, ...}",
                         "the compute fabric is required")
            cm = None
        else:
            cm = self.keyed(fm.get("compute"), cpath, "fabric.compute")
        compute = self.compute(cm, cpath) if cm is not None else None

        nets = {}
        for name in ("storage", "management"):
            sm = self.keyed(fm.get(name), f"{path}.{name}", f"fabric.{name}")
            cidr = self.cidr(sm, "cidr", f"{path}.{name}.cidr", DEFAULT_CIDRS[name]) if sm is not None else None
            nets[name] = Network(_partial(cidr), self.mtu(sm or {}, f"{path}.{name}.mtu", name))
        if compute is None:
            return Fabric(compute=ComputeFabric(kind=_partial(None), speed=_partial(None), switch=_partial(None),
                                                cidr=_partial(None)),
                          storage=nets["storage"], management=nets["management"])
        return Fabric(compute=compute, storage=nets["storage"], management=nets["management"])

    def mtu(self, m: Mapping, path: str, network: str, kind: str | None = None) -> int | None:
        """A network's MTU: the stack's, inside what the network carries, else the fixture's default."""
        r = mtu.network_range(network, kind)
        before = len(self.problems)
        value = self.integer(m, "mtu", path, default=r.default, minimum=r.lowest, maximum=r.highest)
        if len(self.problems) > before and not self.problems[-1].hint:
            self.problems[-1] = dataclasses.replace(self.problems[-1], hint=r.why)
        return value

    def compute(self, cm: Mapping, cpath: str) -> ComputeFabric:
        kind = self.choice(cm, "kind", cpath + ".kind", FABRIC_KINDS, required=True)
        all_speeds = tuple(s for speeds in SPEEDS_BY_KIND.values() for s in speeds)
        speed = self.choice(cm, "speed", cpath + ".speed", all_speeds,
                            default=DEFAULT_SPEED.get(kind) if kind else None)
        if kind and speed and speed not in SPEEDS_BY_KIND[kind]:
            other = next(k for k, v in SPEEDS_BY_KIND.items() if speed in v)
            self.problem(cpath + ".speed", _show(speed), f"for kind {kind}: {_one_of(SPEEDS_BY_KIND[kind])}",
                         f"{speed} is a speed of a {other} fabric; change the speed or set kind: {other}")
            speed = None
        default_switch = (DEFAULT_SWITCH_BY_SPEED.get(speed or "") or DEFAULT_SWITCH.get(kind)) if kind else None
        switch_id = self.string(cm, "switch", cpath + ".switch", default=default_switch,
                                what="a switch id from the catalog")
        switch = None
        if switch_id is not None:
            switch = self.catalog_entry("switches", switch_id, cpath + ".switch", "switch")
        topology = self.choice(cm, "topology", cpath + ".topology", TOPOLOGIES, default="rail-optimized")
        oversub = self.integer(cm, "oversubscription", cpath + ".oversubscription", default=1)
        reserved = self.integer(cm, "reservedLeafPorts", cpath + ".reservedLeafPorts", default=0, minimum=0)
        cidr = self.cidr(cm, "cidr", cpath + ".cidr", DEFAULT_CIDRS["compute"])
        asn_path = cpath + ".asnBase"
        asn = self.integer(cm, "asnBase", asn_path, default=None, minimum=1, maximum=4_294_967_294)
        if asn is not None and kind == "infiniband":
            self.problem(asn_path, _show(asn), "nothing: ASNs are for a roce fabric",
                         "InfiniBand has no BGP; remove asnBase")
            asn = None
        elif asn is not None and not any(lo <= asn <= hi for lo, hi in addressing.ASN_PRIVATE_RANGES):
            self.problem(asn_path, _show(asn), "a private ASN: 64512-65534 or 4200000000-4294967294",
                         "the planner numbers switches upward from this base (RFC 6996)")
            asn = None
        if kind == "roce" and asn is None and "asnBase" not in cm:
            asn = DEFAULT_ASN_BASE
        loopbacks = None
        if kind == "roce":
            loopbacks = self.cidr(cm, "loopbackCidr", cpath + ".loopbackCidr", DEFAULT_CIDRS["loopback"])
        elif "loopbackCidr" in cm:
            self.problem(cpath + ".loopbackCidr", _show(cm.get("loopbackCidr")), "nothing: loopbacks are for a roce fabric",
                         "InfiniBand switches are not routers; remove loopbackCidr")

        if switch is not None and kind is not None:
            skind = _SWITCH_KIND.get(switch.kind)
            if skind is not None and skind != kind:
                same = sorted(k for k, s in self.catalog.switches.items() if _SWITCH_KIND.get(s.kind) == kind)
                self.problem(cpath + ".switch", _show(switch_id),
                             f"{_KIND_LABEL[kind]} switch: {', '.join(same) or 'none in the catalog'}",
                             f"{switch_id} is {_KIND_LABEL[skind]} switch")
                switch = None
        if switch is not None and speed is not None and switch.speeds and speed not in switch.speeds:
            self.problem(cpath + ".speed", _show(speed), f"a speed of {switch_id}: {', '.join(sorted(switch.speeds))}",
                         f"{switch_id} has no ports at {speed} (native or breakout); pick another speed or switch")
        # Limits that depend on the switch's radix at this speed (reserved ports, tiers, nodes per
        # fabric) belong to the planner: check_plan() asks it once the whole spec is known.
        rails_mtu = self.mtu(cm, cpath + ".mtu", "compute", kind) if kind else None
        return ComputeFabric(kind=_partial(kind), speed=_partial(speed), switch=_partial(switch_id),
                             topology=_partial(topology), oversubscription=_partial(oversub),
                             reserved_leaf_ports=_partial(reserved), cidr=_partial(cidr), asn_base=asn,
                             mtu=rails_mtu, loopback_cidr=loopbacks)

    # --- tenants --------------------------------------------------------------------------------

    def tenants(self, ours: Mapping, kind: str | None, pools: list[NodePool]) -> list[Tenant]:
        path = f"{NAMESPACE}:tenants"
        what = "a list of tenants {name, pkey (InfiniBand) or vlan (RoCE), pools, namespace, gpuQuota}"
        value = self.raw(ours, "tenants", path, required=False, what=what)
        if value is _ABSENT or value is None:
            return []
        if not isinstance(value, list):
            self.problem(path, _show(value), what)
            return []
        out: list[Tenant] = []
        names: dict[str, str] = {}
        namespaces: dict[str, str] = {}
        partitions: dict[int, str] = {}
        vlans: dict[int, str] = {}
        for i, item in enumerate(value):
            ipath = f"{path}[{i}]"
            m = self.keyed(item, ipath, "tenants[]")
            if m is None:
                continue
            name = self.dns_name(m, "name", ipath + ".name")
            if name is not None:
                if name in names:
                    self.problem(ipath + ".name", _show(name), "a name no other tenant has", f"{names[name]} has it")
                names.setdefault(name, ipath + ".name")
            pkey = vlan = None
            if kind == "roce":
                if m.get("pkey") is not None:
                    self.problem(ipath + ".pkey", _show(m["pkey"]), "no pkey on a roce fabric",
                                 "pkeys partition InfiniBand; on RoCE give the tenant a vlan (1-4094) instead")
                vlan = self.integer(m, "vlan", ipath + ".vlan", default=None, minimum=1, maximum=4094)
                if vlan is not None:
                    if vlan in vlans:
                        self.problem(ipath + ".vlan", _show(vlan), "a VLAN no other tenant has", f"{vlans[vlan]} has it")
                    vlans.setdefault(vlan, ipath + ".vlan")
            else:
                if m.get("vlan") is not None:
                    self.problem(ipath + ".vlan", _show(m["vlan"]), "no vlan on an infiniband fabric",
                                 "InfiniBand separates tenants by partition: give it a pkey instead")
                pkey = addressing.partition_key(i) if m.get("pkey") is None else self.pkey(m, ipath + ".pkey")
                if pkey is not None:
                    base = pkey & 0x7FFF
                    if base in partitions:
                        self.problem(ipath + ".pkey", _show(m.get("pkey", f"0x{pkey:04x} (its default)")),
                                     "a partition no other tenant has",
                                     f"same partition 0x{base:04x} as {partitions[base]} "
                                     "(the 0x8000 bit only marks full membership)")
                    partitions.setdefault(base, ipath + ".pkey")
            tenant_pools = self.tenant_pools(m, ipath + ".pools", pools)
            namespace = name or ""
            npath = ipath + (".namespace" if m.get("namespace") is not None else ".name")
            if m.get("namespace") is not None:
                namespace = self.dns_name(m, "namespace", ipath + ".namespace") or ""
            if namespace in RESERVED_NAMESPACES or namespace.startswith("kube-"):
                # The layer owns its tenants' namespaces and deletes them at destroy.
                self.problem(npath, _show(namespace), "a namespace of the tenant's own",
                             f"{namespace} is Kubernetes' or an operator's; give the tenant a namespace: key")
                namespace = ""
            if namespace:
                if namespace in namespaces:
                    self.problem(ipath + ".namespace", _show(namespace), "a namespace no other tenant has",
                                 f"{namespaces[namespace]} has it")
                namespaces.setdefault(namespace, ipath + ".namespace")
            quota = self.integer(m, "gpuQuota", ipath + ".gpuQuota", default=None, minimum=0)
            if quota is not None and tenant_pools is not None:
                gpus = self.pool_gpus(pools, tenant_pools)
                if gpus is not None and quota > gpus:
                    self.problem(ipath + ".gpuQuota", _show(quota), f"at most {gpus}, the GPUs of its pools "
                                 f"({', '.join(tenant_pools)})", "a quota cannot exceed what the pools hold")
            out.append(Tenant(name=_partial(name), pkey=pkey, vlan=vlan, pools=tenant_pools or (),
                              namespace=namespace, gpu_quota=quota))
        return out

    def tenant_pools(self, m: Mapping, path: str, pools: list[NodePool]) -> tuple[str, ...] | None:
        known = [p.name for p in pools if p.name is not None]
        value = self.raw(m, "pools", path, required=False, what="a list of node pool names")
        if value is _ABSENT:
            return tuple(known)
        if value is None:
            return None  # raw() said why
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            self.problem(path, _show(value), "a non-empty list of node pool names", f"pools: {', '.join(known)}")
            return None
        bad = [v for v in value if v not in known]
        for v in bad:
            self.problem(path, _show(v), _one_of(known), _did_you_mean(v, known))
        if len(set(value)) != len(value):
            self.problem(path, _show(value), "each pool once")
        if bad or len(set(value)) != len(value):
            return None
        return tuple(p for p in known if p in value)

    def pool_gpus(self, pools: list[NodePool], names: tuple[str, ...]) -> int | None:
        """The GPUs of those pools (hosts x GPUs per host), None when a pool's SKU is not known."""
        total = 0
        for p in pools:
            if p.name not in names:
                continue
            sku = self.catalog.nodes.get(p.sku) if isinstance(p.sku, str) else None
            if sku is None or not isinstance(p.count, int):
                return None
            total += p.count * len(getattr(sku, "gpus", ()))
        return total

    # --- kubernetes -----------------------------------------------------------------------------

    def kubernetes(self, ours: Mapping) -> KubernetesSpec | None:
        path = f"{NAMESPACE}:kubernetes"
        if ours.get("kubernetes") is None:
            return None
        km = self.keyed(ours["kubernetes"], path, "kubernetes")
        if km is None:
            return None
        prefixes = {}
        for key, default in (("labelPrefix", DEFAULT_LABEL_PREFIX), ("resourcePrefix", DEFAULT_RESOURCE_PREFIX)):
            what = "a DNS subdomain of at most 253 characters, e.g. railyard.io (the part of a label key before '/')"
            value = self.string(km, key, f"{path}.{key}", default=default, what=what)
            if value is not None and (len(value) > 253 or not all(_DNS_LABEL.match(part) for part in value.split("."))):
                hint = "Kubernetes refuses it as a label prefix" if key == "labelPrefix" else \
                    "Kubernetes refuses it as an extended resource prefix"
                if value.startswith(("kubernetes.io", "k8s.io")) or value.endswith((".kubernetes.io", ".k8s.io")):
                    hint = "kubernetes.io and k8s.io are reserved for Kubernetes itself"
                self.problem(f"{path}.{key}", _show(value), what, hint)
                value = None
            elif value is not None and (
                    value in ("kubernetes.io", "k8s.io") or value.endswith((".kubernetes.io", ".k8s.io"))):
                self.problem(f"{path}.{key}", _show(value), "a prefix of your own",
                             "kubernetes.io and k8s.io are reserved for Kubernetes itself")
                value = None
            prefixes[key] = value
        kubeconfig = self.secret(ours["kubernetes"], "kubeconfig", f"{path}.kubeconfig",
                                 "pulumi config set --secret --path kubernetes.kubeconfig < kubeconfig")
        return KubernetesSpec(label_prefix=prefixes["labelPrefix"] or DEFAULT_LABEL_PREFIX,
                              resource_prefix=prefixes["resourcePrefix"] or DEFAULT_RESOURCE_PREFIX,
                              kubeconfig=kubeconfig)

    # --- slurm ----------------------------------------------------------------------------------

    def slurm(self, ours: Mapping, layout: str | None, pools: list[NodePool], region: str | None) -> SlurmSpec | None:
        path = f"{NAMESPACE}:slurm"
        if "slurm" not in ours:
            return None
        sm = self.keyed(ours.get("slurm"), path, "slurm")
        if sm is None:
            return None
        if layout == "virtual":
            # Jobs would run in the VMs, and Railyard configures no guest yet.
            self.problem(path, "Slurm on a virtual layout", "railyard:slurm on a bare-metal stack",
                         "a virtual layout's jobs run in its VMs, which Railyard does not configure yet")
            return None
        hosts = [addressing.node_name(p.name, i) for p in pools if p.name and p.count for i in range(p.count)]
        controller = self.string(sm, "controller", f"{path}.controller", default=hosts[0] if hosts else "",
                                 what="a host of the stack's node pools, e.g. gpu-0")
        if controller is not None and hosts and controller not in set(hosts):
            shown = ", ".join(hosts[:4]) + (", ..." if len(hosts) > 4 else "")
            self.problem(f"{path}.controller", _show(controller), f"a host of the stack's node pools: {shown}",
                         _did_you_mean(controller, hosts, ""))
            controller = None
        what = "a Slurm cluster name: lowercase letters, digits and '-', at most 40"
        cluster = self.string(sm, "clusterName", f"{path}.clusterName", default=region or "railyard", what=what)
        if cluster is not None and (len(cluster) > 40 or not _DNS_LABEL.match(cluster)):
            self.problem(f"{path}.clusterName", _show(cluster), what)
            cluster = None
        what = "a partition name: letters, digits, '-' and '_'"
        partition = self.string(sm, "partition", f"{path}.partition", default="gpu", what=what)
        if partition is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", partition):
            self.problem(f"{path}.partition", _show(partition), what)
            partition = None
        wait = self.integer(sm, "maxSwitchWait", f"{path}.maxSwitchWait", default=SLURM_MAX_SWITCH_WAIT, minimum=0)
        interval = self.integer(sm, "healthCheckInterval", f"{path}.healthCheckInterval",
                                default=SLURM_HEALTH_CHECK_INTERVAL, minimum=0, maximum=86400)
        what = f"Slurm's HealthCheckNodeState: one or more of {', '.join(SLURM_HEALTH_CHECK_STATES)}, comma-separated"
        states = self.string(sm, "healthCheckNodeState", f"{path}.healthCheckNodeState", default="ANY", what=what)
        if states is not None:
            words = [w.strip().upper() for w in states.split(",")]
            bad = [w for w in words if w not in SLURM_HEALTH_CHECK_STATES]
            if bad or not words or words == ["CYCLE"]:
                hint = "CYCLE goes with a state, e.g. ANY,CYCLE" if words == ["CYCLE"] else \
                    _did_you_mean(bad[0], SLURM_HEALTH_CHECK_STATES, "") if bad else ""
                self.problem(f"{path}.healthCheckNodeState", _show(states), what, hint)
                states = None
            else:
                states = ",".join(words)
        mpi = self.choice(sm, "mpi", f"{path}.mpi", SLURM_MPI, default=SlurmSpec.mpi)
        if controller is None or cluster is None or partition is None or wait is None or interval is None \
                or states is None or mpi is None:
            return None
        return SlurmSpec(controller=controller, cluster_name=cluster, partition=partition, max_switch_wait=wait,
                         health_check_interval=interval, health_check_node_state=states, mpi=mpi)

    # --- acceptance -----------------------------------------------------------------------------

    def acceptance(self, ours: Mapping, slurm: SlurmSpec | None, kubernetes: KubernetesSpec | None) -> AcceptanceSpec:
        path = f"{NAMESPACE}:acceptance"
        am = self.keyed(ours.get("acceptance"), path, "acceptance") or {}
        enabled = self.boolean(am, "enabled", f"{path}.enabled", default=True)
        on_failure = self.choice(am, "onFailure", f"{path}.onFailure", ACCEPTANCE_ON_FAILURE, default="fail")
        if on_failure == "cordon" and slurm is None and kubernetes is None and "slurm" not in ours:
            self.problem(f"{path}.onFailure", "'cordon'", "'fail' on a stack without a scheduler",
                         "cordon takes a node out of Slurm or Kubernetes: add railyard:slurm or railyard:kubernetes")
        tolerance = self.fraction(am, "bandwidthTolerance", f"{path}.bandwidthTolerance", default=None, example="0.25",
                                  hint="a rail this far below the median of its node's rails is flagged")
        return AcceptanceSpec(enabled=True if enabled is None else enabled, on_failure=on_failure or "fail",
                              bandwidth_tolerance=tolerance)

    # --- verify ---------------------------------------------------------------------------------

    def verify(self, ours: Mapping) -> VerifySpec:
        path = f"{NAMESPACE}:verify"
        vm = self.keyed(ours.get("verify"), path, "verify") or {}
        pm = self.keyed(vm.get("pins"), f"{path}.pins", "verify.pins") or {}
        # Versions look like numbers to YAML (550.54 is a float): only a string keeps them exact.
        what = "a version string, as the node shows it"

        def pin(key: str, example: str) -> str | None:
            raw = pm.get(key)
            if isinstance(raw, (int, float)) and not isinstance(raw, bool):
                self.problem(f"{path}.pins.{key}", _show(raw), what, f'quote it, e.g. "{example}"')
                return None
            return self.string(pm, key, f"{path}.pins.{key}", what)

        on_drift = self.choice(vm, "onDrift", f"{path}.onDrift", ON_DRIFT)
        return VerifySpec(pins=Pins(nic_firmware=pin("nicFirmware", "28.39.1002"),
                                    nvidia_driver=pin("nvidiaDriver", "550.54.15"),
                                    kernel=pin("kernel", "6.1.0-18-amd64")),
                          on_drift=on_drift, switch_guids=self.switch_guids(vm, f"{path}.switchGuids"))

    def health(self, ours: Mapping) -> HealthSpec:
        path = f"{NAMESPACE}:health"
        hm = self.keyed(ours.get("health"), path, "health") or {}
        budget = self.integer(hm, "maxUnavailable", f"{path}.maxUnavailable", default=None, minimum=1,
                              maximum=MAX_POOL_NODES)
        # A day: a drain that waits longer is a maintenance window, not a repair.
        drain = self.integer(hm, "drainTimeout", f"{path}.drainTimeout", default=HEALTH_DRAIN_TIMEOUT_S, minimum=0,
                             maximum=86400)
        retune = self.integer(hm, "retuneTimeout", f"{path}.retuneTimeout", default=HEALTH_RETUNE_TIMEOUT_S,
                              minimum=60, maximum=86400)
        repair = self.boolean(hm, "repair", f"{path}.repair", default=False)
        tolerance = self.fraction(hm, "collectiveTolerance", f"{path}.collectiveTolerance",
                                  default=COLLECTIVE_TOLERANCE, example="0.15",
                                  hint="all_reduce_perf this far below the plan's bus bandwidth is a finding")
        return HealthSpec(repair=bool(repair), max_unavailable=budget,
                          drain_timeout_s=drain if drain is not None else HEALTH_DRAIN_TIMEOUT_S,
                          retune_timeout_s=retune if retune is not None else HEALTH_RETUNE_TIMEOUT_S,
                          collective_tolerance=tolerance if tolerance is not None else COLLECTIVE_TOLERANCE)

    def switch_guids(self, vm: Mapping, path: str) -> tuple[tuple[str, int], ...]:
        """{planned switch name: "0x<node GUID>"}; names are checked against the plan in check_plan."""
        raw = vm.get("switchGuids")
        if raw is None:
            return ()
        what = "a mapping of planned switch names to node GUIDs, e.g. {su0-leaf0: \"0x0002c90300a1b2c3\"}"
        if not isinstance(raw, dict):
            self.problem(path, _show(raw), what)
            return ()
        out: list[tuple[str, int]] = []
        seen: dict[int, str] = {}
        for name, value in raw.items():
            p = f"{path}.{name}"
            text = value.strip() if isinstance(value, str) else None
            if text is None or not _GUID.match(text):
                self.problem(p, _show(value), 'a node GUID: 0x and up to 16 hex digits, quoted ("0x0002c90300a1b2c3")',
                             "as ibnetdiscover prints it after switchguid=")
                continue
            guid = int(text, 16)
            if guid in seen:
                self.problem(p, _show(value), "a GUID of one switch", f"{seen[guid]} has it too")
                continue
            seen[guid] = str(name)
            out.append((str(name), guid))
        return tuple(out)

    def secret(self, m: Mapping, key: str, path: str, how: str) -> Secret | None:
        """A value that must be a Pulumi secret (or absent); a plain value is refused unshown."""
        raw = m.get(key) if isinstance(m, dict) else None
        if _is_secret(raw):
            if not isinstance(raw["secure"], str) or not raw["secure"]:
                self.problem(path, "a secret with no ciphertext", "a Pulumi secret", f"set it again: {how}")
                return None
            return Secret(raw["secure"])
        if raw is None or raw == "":
            return None
        if isinstance(raw, str):
            # Never echo it: a plain value here is a credential written in the clear.
            self.problem(path, "a plain-text value (not shown)", "a Pulumi secret, or empty",
                         f"set it with {how}, and rotate the credential: it was written in the clear")
        else:
            self.problem(path, f"a {_kind(raw)}", "a Pulumi secret, or empty", how)
        return None

    def pkey(self, m: Mapping, path: str) -> int | None:
        what = 'a quoted hex pkey "0x0001".."0x7ffe", or "0x8001".."0xfffe" for full membership'
        value = self.raw(m, "pkey", path, required=False, what=what)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            self.problem(path, f"the number {value} (0x{value:x})", what,
                         f'quote it: pkey: "0x{value:04x}" if that is what you meant')
            return None
        if not isinstance(value, str) or not _PKEY.match(value.strip()):
            self.problem(path, _show(value), what)
            return None
        pkey = int(value.strip(), 16)
        base = pkey & 0x7FFF
        if base == 0:
            self.problem(path, _show(value), what, "partition 0 is invalid in InfiniBand")
            return None
        if base == 0x7FFF:
            self.problem(path, _show(value), what,
                         "0x7fff/0xffff is the default partition every port belongs to; a tenant needs its own")
            return None
        return pkey

    # --- storage --------------------------------------------------------------------------------

    def storage(self, ours: Mapping) -> StorageSpec:
        path = f"{NAMESPACE}:storage"
        sm = self.keyed(ours.get("storage"), path, "storage")
        if sm is None:
            return StorageSpec()
        obj = None
        if "object" in sm:
            opath = path + ".object"
            om = self.keyed(sm.get("object"), opath, "storage.object")
            if om is not None:
                obj = self.object_tier(om, opath)
        pfs = None
        if "parallelFs" in sm:
            ppath = path + ".parallelFs"
            pm = self.keyed(sm.get("parallelFs"), ppath, "storage.parallelFs")
            if pm is not None:
                kind = self.choice(pm, "kind", ppath + ".kind", PARALLEL_FS_KINDS, default="lustre")
                pfs = ParallelFs(kind=_partial(kind), mount=_partial(self.mount(pm, "mount", ppath + ".mount", "/mnt/pfs")),
                                 capacity_tib=_partial(self.number(pm, "capacityTiB", ppath + ".capacityTiB", default=100)),
                                 source=self.pfs_source(pm, ppath, kind), options=self.pfs_options(pm, ppath, kind))
        cpath = path + ".localCache"
        cm = self.keyed(sm.get("localCache"), cpath, "storage.localCache")
        cache = LocalCache()
        if cm:
            cache = LocalCache(mount=_partial(self.mount(cm, "mount", cpath + ".mount", "/mnt/cache")),
                               raid=_partial(self.choice(cm, "raid", cpath + ".raid", RAID_LEVELS, default="raid0")),
                               fs=_partial(self.choice(cm, "fs", cpath + ".fs", LOCAL_FILESYSTEMS, default="xfs")))
        if pfs is not None and pfs.mount and cache.mount:
            a, b = pfs.mount.rstrip("/") + "/", cache.mount.rstrip("/") + "/"
            if a.startswith(b) or b.startswith(a):
                self.problem(cpath + ".mount", _show(cache.mount), f"a mount point apart from {pfs.mount}",
                             f"{NAMESPACE}:storage.parallelFs.mount would be hidden by, or hide, the cache")
        return StorageSpec(object=obj, parallel_fs=pfs, local_cache=cache)

    def mount(self, m: Mapping, key: str, path: str, default: str) -> str | None:
        value = self.string(m, key, path, default=default, what=mount_points.ALLOWED)
        if value is None:
            return None
        why = mount_points.path_problem(value)
        if why is not None:
            self.problem(path, _show(value), mount_points.ALLOWED, why)
            return None
        return value

    def pfs_source(self, pm: Mapping, ppath: str, kind: str | None) -> str:
        if kind is None:
            return ""
        pattern, shape, example = PARALLEL_FS_SOURCES[kind]
        what = f"for {kind}, {shape}, e.g. {example}"
        value = self.string(pm, "source", ppath + ".source", default="", what=what)
        if value and not re.match(pattern, value):
            self.problem(ppath + ".source", _show(value), what)
        return value or ""

    def pfs_options(self, pm: Mapping, ppath: str, kind: str | None) -> str:
        what = "mount options separated by commas, e.g. flock,noatime"
        value = self.string(pm, "options", ppath + ".options", default="", what=what)
        if not value:
            return ""
        if kind == "gpfs":
            self.problem(ppath + ".options", _show(value), "absent for gpfs",
                         "a GPFS file system's mount options are the cluster's (mmchfs -o)")
        elif not re.match(r"^[^\s,#]+(,[^\s,#]+)*$", value):
            self.problem(ppath + ".options", _show(value), what)
        return value

    def object_tier(self, om: Mapping, opath: str) -> ObjectTier:
        what = "an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-'"
        bucket = self.string(om, "bucket", opath + ".bucket", default="datasets", what=what)
        if bucket is not None and (not _BUCKET.match(bucket) or ".." in bucket):
            self.problem(opath + ".bucket", _show(bucket), what)
        what = "an http(s) URL, or empty for the driver's own object store"
        endpoint = self.string(om, "endpoint", opath + ".endpoint", default="", what=what)
        if endpoint and not re.match(r"^https?://[^\s/]+(/\S*)?$", endpoint):
            self.problem(opath + ".endpoint", _show(endpoint), what)
        credentials = self.secret(om, "credentials", opath + ".credentials",
                                  "pulumi config set --secret --path storage.object.credentials")
        return ObjectTier(bucket=_partial(bucket), endpoint=_partial(endpoint), credentials=credentials)

    # --- tuning ---------------------------------------------------------------------------------

    def tuning(self, ours: Mapping, layout: str | None, pools: list[NodePool],
               facts: list[_PoolFacts]) -> TuningSpec:
        path = f"{NAMESPACE}:tuning"
        tm = self.keyed(ours.get("tuning"), path, "tuning")
        if tm is None:
            tm = {}
        hugepages = self.hugepages(tm.get("hugepages"), path + ".hugepages", "tuning.hugepages", "host") \
            or Hugepages()

        spath = path + ".sriov"
        sm = self.keyed(tm.get("sriov"), spath, "tuning.sriov") or {}
        vfs_per_pf = self.integer(sm, "vfsPerPf", spath + ".vfsPerPf", default=None, minimum=0)
        if vfs_per_pf is None and "vfsPerPf" not in sm:
            vfs_per_pf = self.default_vfs_per_pf(layout, pools, facts)

        apath = path + ".affinity"
        am = self.keyed(tm.get("affinity"), apath, "tuning.affinity") or {}
        affinity = Affinity(policy=_partial(self.choice(am, "policy", apath + ".policy", AFFINITY_POLICIES,
                                                        default="pcie-nearest")))
        iommu = self.choice(tm, "iommu", path + ".iommu", IOMMU_MODES, default="passthrough")
        if layout == "virtual" and iommu == "off":
            self.problem(path + ".iommu", _show("off"), "passthrough or on in the virtual layout",
                         "VFs and GPUs are passed to VMs through VFIO, which needs the IOMMU")
        drift = self.boolean(tm, "previewDrift", path + ".previewDrift", default=False)
        return TuningSpec(hugepages=hugepages, sriov=Sriov(_partial(vfs_per_pf)), affinity=affinity,
                          iommu=_partial(iommu), preview_drift=_partial(drift))

    def hugepages(self, value: Any, hpath: str, section: str, machine: str) -> Hugepages | None:
        """A hugepages mapping (tuning.hugepages for hosts, nodePools[].vm.hugepages for guests)."""
        hm = self.keyed(value, hpath, section)
        if hm is None:
            return None
        size = self.choice(hm, "size", hpath + ".size", tuple(HUGEPAGE_SIZES), default="1G")
        count = self.integer(hm, "count", hpath + ".count", default=None, minimum=0)
        percent = self.integer(hm, "percentOfMemory", hpath + ".percentOfMemory",
                               default=None if "count" in hm else 0, minimum=0, maximum=100)
        if "count" in hm and "percentOfMemory" in hm:
            self.problem(hpath + ".count", "both count and percentOfMemory", "one of count or percentOfMemory",
                         f"count is pages per {machine}; percentOfMemory a share of each {machine}'s memory")
        per_numa = self.boolean(hm, "perNuma", hpath + ".perNuma", default=True)
        return Hugepages(size=_partial(size), percent_of_memory=percent, count=count, per_numa=_partial(per_numa))

    def default_vfs_per_pf(self, layout: str | None, pools: list[NodePool], facts: list[_PoolFacts]) -> int:
        """Bare metal: SR-IOV off. Virtual: the fewest VFs per PF that give every VM its VFs."""
        if layout != "virtual":
            return 0
        need = 1
        for pool, fact in zip(pools, facts):
            if fact.sku is not None and pool.vm and pool.vm.vfs and pool.vms_per_host:
                need = max(need, addressing.vf_slots_per_pf(pool.vms_per_host, pool.vm.vfs,
                                                            len(fact.sku.compute_nics)))
        return need

    # --- ephemeral ------------------------------------------------------------------------------

    def ephemeral(self, ours: Mapping) -> Ephemeral | None:
        if "ephemeral" not in ours:
            return None
        path = f"{NAMESPACE}:ephemeral"
        em = self.keyed(ours.get("ephemeral"), path, "ephemeral")
        if em is None:
            return None
        what = "a duration: a positive whole number and m, h or d, e.g. 30m, 8h, 2d"
        ttl = self.string(em, "ttl", path + ".ttl", default="8h", what=what)
        if ttl is None:
            return None
        try:
            seconds = parse_ttl(ttl)
        except ValueError:
            hint = ""
            m = _TTL.match(ttl.strip())
            if m and m.group(2) not in TTL_UNITS:
                hint = f"unit {m.group(2)!r} is not one of m, h, d"
            self.problem(path + ".ttl", _show(ttl), what, hint)
            return None
        return Ephemeral(ttl=ttl.strip(), ttl_seconds=seconds)

    def protect(self, ours: Mapping, ephemeral: Ephemeral | None) -> bool | None:
        if "protect" not in ours:
            return None
        path = f"{NAMESPACE}:protect"
        raw = ours.get("protect")
        # Pulumi keeps a top-level scalar as a string (`pulumi config set railyard:protect true`,
        # and any rewrite of the stack file, stores "true"); its own get_bool reads those two.
        if raw in ("true", "false"):
            value = raw == "true"
        else:
            value = self.boolean(ours, "protect", path, default=False)
        if value and ephemeral is not None:
            # The reaper never unprotects, so such a stack would expire and never be reaped.
            self.problem(path, "true", "false or absent on an ephemeral stack",
                         f"{NAMESPACE}:ephemeral makes the stack expire and be reaped; a protected stack is never "
                         "reaped. Keep one of the two")
        return value
