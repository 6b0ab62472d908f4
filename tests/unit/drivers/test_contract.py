"""The driver contract: one registry of drivers, layers that import one way, drivers that own their
keys, and components that follow a driver's capabilities (under Pulumi mocks: wiring only)."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from pathlib import Path

import pulumi
import pytest

from railyard import drivers
from railyard.model.errors import SpecError
from railyard.model.spec import parse as parse_spec

ROOT = Path(__file__).resolve().parents[3]


def _imports(path: Path) -> set[str]:
    """Every module a source file imports, at any depth (lazy imports count)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _module_graph() -> dict[str, set[str]]:
    """railyard's and components' modules, each with the modules of theirs it imports (lazy
    imports count: a function's import is a dependency all the same)."""
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for folder in ("railyard", "components") for p in _sources(folder)}

    def ours(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    def deps(m: str, path: Path) -> set[str]:
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {ours(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import mod` depends on mod; on pkg itself only for names it defines.
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    found.add(full if full in files else ours(node.module))
        # Importing a submodule runs its packages' __init__ first: Python's order, not a circle.
        return {t for t in found if t is not None and t != m and not m.startswith(t + ".")}

    return {m: deps(m, p) for m, p in files.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    graph = _module_graph()
    assert "railyard.drivers.lab.net" in graph and "railyard.drivers.lab.names" in graph["railyard.drivers.lab.net"]
    assert _circles(graph) == []


def test_the_circle_check_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_runtime_reaches_the_benchmarks_only_through_their_command():
    """The benchmarks drive the CLI and the components from above; nothing of the runtime leans on
    them, and the command that runs them imports them only when it runs."""
    graph = _module_graph()
    users = {m for m, deps in graph.items() if not m.startswith("railyard.bench")
             and any(d.startswith("railyard.bench") for d in deps)}
    assert users == {"railyard.commands.bench"}


def test_drivers_lean_on_no_component_level_module():
    """What drivers share with tuning (the jump host's inventory variable, Pulumi's wire numbers)
    lives below both: a driver imports no tuning resource, no component and no command."""
    graph = _module_graph()
    for m, deps in graph.items():
        if m.startswith("railyard.drivers."):
            bad = {d for d in deps if d.startswith(("railyard.tuning.resource", "components", "railyard.commands",
                                                    "railyard.cli", "railyard.bench"))}
            assert not bad, f"{m} imports {sorted(bad)}"


def test_the_model_imports_no_driver_no_component_and_no_pulumi():
    for path in _sources("railyard/model"):
        # ansible.module_utils.railyard_*: the model's own modules as shipped to hosts (the fallback
        # import of the copies the tuning roles run), not Ansible.
        bad = {m for m in _imports(path) if (m.split(".")[0] in ("pulumi", "ansible", "components")
               and not m.startswith("ansible.module_utils"))
               or m.startswith(("railyard.drivers", "railyard.commands", "railyard.cli", "railyard.stack"))}
        bad -= {"ansible.module_utils"}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_components_know_the_contract_only():
    for path in _sources("components"):
        bad = {m for m in _imports(path) if m.startswith("railyard.drivers.")
               and not m.startswith("railyard.drivers.base")}
        assert not bad, f"{path.relative_to(ROOT)} imports driver internals {sorted(bad)}"


def test_no_driver_imports_another_driver_or_the_components():
    packages = [p.name for p in (ROOT / "railyard" / "drivers").iterdir() if (p / "__init__.py").exists()]
    assert "lab" in packages
    for name in packages:
        for path in _sources(f"railyard/drivers/{name}"):
            bad = {m for m in _imports(path) if m.split(".")[0] == "components"
                   or any(m.startswith(f"railyard.drivers.{other}") for other in packages if other != name)}
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_every_driver_section_is_read_with_the_models_one_reader():
    """A driver's own keys are read by the model's SectionReader (drivers may not import one
    another): their problems read alike, and a reader fixed once is fixed for all of them."""
    import importlib

    from railyard.model.spec import LOGIN_NAME, SectionReader

    shared = [m for m in vars(SectionReader) if not m.startswith("__")]
    read = []
    for name in drivers.DRIVERS:
        rules = drivers.rules()[name]
        if not rules.KEYS:
            continue
        module = importlib.import_module(drivers.DRIVERS[name].rules)
        classes = [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__]
        assert any(issubclass(c, SectionReader) for c in classes), name
        # A driver keeps its own forms (a segment, a BMC, its wording of a missing key), not copies.
        copies = [f"{c.__name__}.{m}" for c in classes for m in shared if m in vars(c) and m != "missing"]
        assert not copies, f"{module.__name__} copies {copies}"
        assert LOGIN_NAME.pattern not in Path(module.__file__).read_text(), module.__name__
        read.append(name)
    assert sorted(read) == ["coreweave", "hosts", "openstack"]


def test_every_module_the_registry_names_exists_and_fits_its_role():
    for name, entry in drivers.DRIVERS.items():
        if entry.rules:
            rules = drivers.rules()[name]
            assert isinstance(rules.KEYS, dict) and callable(rules.parse), name
        if entry.tuning:
            assert isinstance(drivers.tuning_vars(name), dict)
        if entry.cli:
            assert callable(__import__(entry.cli, fromlist=["register"]).register)
        if entry.implementation:
            module, cls = entry.implementation.split(":")
            driver = getattr(__import__(module, fromlist=[cls]), cls)
            assert driver.name == name


def test_every_hook_a_driver_module_defines_is_declared_in_its_hooks():
    """A hook is found through the module's HOOKS, never by name: a function named like a hook
    that HOOKS leaves out would never run, so it is a defect (a forgotten or misspelled entry)."""
    import dataclasses
    import importlib

    kinds = {"rules": drivers.RuleHooks, "tuning": drivers.TuningHooks, "cli": drivers.CliHooks}
    seen = 0
    for entry in drivers.DRIVERS.values():
        for field, kind in kinds.items():
            module_name = getattr(entry, field)
            if not module_name:
                continue
            declared = drivers.hooks(module_name, kind)
            module = importlib.import_module(module_name)
            for f in dataclasses.fields(kind):
                fn = getattr(module, f.name, None)
                if callable(fn) and getattr(fn, "__module__", None) == module_name:
                    assert getattr(declared, f.name) is fn, f"{module_name}.{f.name} is not in its HOOKS"
                    seen += 1
    assert seen >= 10


def test_a_misspelled_hook_is_refused_when_the_module_loads():
    with pytest.raises(TypeError, match="prefligth"):
        drivers.RuleHooks(keys={}, parse=lambda section, spec: (None, []), prefligth=lambda spec: None)  # type: ignore[call-arg]


def test_a_module_without_its_hooks_is_named():
    with pytest.raises(TypeError, match="railyard.drivers.base declares no HOOKS = TuningHooks"):
        drivers.hooks("railyard.drivers.base", drivers.TuningHooks)


def test_loading_a_stack_and_building_the_cli_import_no_pulumi():
    code = ("import sys; from railyard.stack import load; from railyard.cli import build_parser; "
            "load('stacks/Pulumi.lab.yaml'); load('stacks/Pulumi.us-south-vela.yaml'); build_parser(); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pulumi', 'ansible', 'ansible_runner')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


# --- drivers own their keys --------------------------------------------------------------------


class ZoneRules:
    """A driver that reads `railyard:metal: {zone: ...}` and refuses a zone it does not know."""

    KEYS = {"": ("zone",)}

    @staticmethod
    def parse(section, spec):
        zone = (section or {}).get("zone")
        if zone not in ("a", "b"):
            from railyard.model.errors import Problem

            return None, [Problem("railyard:metal.zone", repr(zone), "one of a, b")]
        return {"zone": zone}, []


def _config(driver: str, **extra) -> dict:
    fabric = {"compute": {"kind": "infiniband", "cidr": "198.19.0.0/16"}, "storage": {"cidr": "198.18.32.0/20"},
              "management": {"cidr": "198.18.0.0/20"}}
    return {"railyard:region": "r", "railyard:layout": "bare-metal", "railyard:driver": driver,
            "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 2}], "railyard:fabric": fabric,
            **extra}


def test_a_driver_section_is_read_by_its_driver_and_lands_in_the_spec():
    table = {"lab": drivers.rules()["lab"], "metal": ZoneRules}
    spec, fabric = parse_spec(_config("metal", **{"railyard:metal": {"zone": "b"}}), "t", table)
    assert spec.driver_config == {"zone": "b"} and fabric is not None
    with pytest.raises(SpecError) as bad:
        parse_spec(_config("metal", **{"railyard:metal": {"zone": "z"}}), "t", table)
    assert [p.path for p in bad.value.problems] == ["railyard:metal.zone"]
    # A key the driver does not read is refused with a hint, as the model's own keys are.
    with pytest.raises(SpecError) as bad:
        parse_spec(_config("metal", **{"railyard:metal": {"zone": "a", "zoen": "b"}}), "t", table)
    (problem,) = bad.value.problems
    assert problem.path == "railyard:metal.zoen" and "zone" in problem.hint


def test_another_drivers_section_and_an_unknown_driver_are_refused_by_name():
    table = {"lab": drivers.rules()["lab"], "metal": ZoneRules}
    with pytest.raises(SpecError) as bad:
        parse_spec(_config("lab", **{"railyard:metal": {"zone": "a"}}), "t", table)
    assert "railyard:metal" in [p.path for p in bad.value.problems]
    with pytest.raises(SpecError) as bad:
        parse_spec(_config("hosts"), "t", table)
    (problem,) = [p for p in bad.value.problems if p.path == "railyard:driver"]
    assert "lab" in problem.allowed and "metal" in problem.allowed


def test_a_bare_metal_driver_refuses_the_virtual_layout_by_name():
    with pytest.raises(SpecError) as bad:
        from railyard.stack import parse_config

        parse_config({**_config("coreweave"), "railyard:layout": "virtual"}, "t")
    (problem,) = [p for p in bad.value.problems if p.path == "railyard:layout"]
    assert "coreweave" in problem.allowed


def test_vms_on_hypervisors_need_a_per_node_driver():
    with pytest.raises(ValueError, match="machines per node"):
        drivers.Capabilities(machines="pool", addresses="provider", tuned_by="railyard", vms="on-hypervisors")


def test_the_lab_range_is_the_lab_drivers_rule_not_the_models():
    outside = {"railyard:fabric": {**_config("lab")["railyard:fabric"], "management": {"cidr": "10.0.0.0/20"}}}
    table = {"lab": drivers.rules()["lab"], "coreweave": None}
    with pytest.raises(SpecError) as bad:
        parse_spec(_config("lab", **outside), "t", table)
    assert [p.path for p in bad.value.problems] == ["railyard:fabric.management.cidr"]
    spec, _ = parse_spec(_config("coreweave", **outside), "t", table)  # no such rule for a cloud
    assert str(spec.fabric.management.cidr) == "10.0.0.0/20"


# --- components follow the capabilities --------------------------------------------------------

MACHINE = "test:index:Machine"
# What the provider hands back, deliberately not the plan's order or addresses.
IPS = {"a-0-m": "10.9.0.30", "a-1-m": "10.9.0.12", "a-2-m": "10.9.0.21", "b-0-m": "10.9.0.4", "b-1-m": "10.9.0.8",
       **{f"v-{i}-vm{j}-m": f"10.9.1.{10 * i + j}" for i in range(2) for j in range(2)}}


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        outs = dict(args.inputs)
        if args.typ == MACHINE:
            outs.update(host_key=f"ssh-ed25519 AAAA{args.name}", management_ip=IPS[args.name])
        return f"{args.name}-id", outs

    def call(self, args):
        return {}


def _cloud_driver(tuned_by: str):
    from railyard.drivers.base import Access, Driver, NodeHandle

    class PoolDriver(Driver):
        name = "metal"
        capabilities = drivers.Capabilities(machines="pool", addresses="provider", tuned_by=tuned_by,
                                            vms="are-nodes", kubernetes="platform")
        pools: list = []

        def access(self, name, parent):
            return Access("ubuntu", pulumi.Output.from_input("ssh-ed25519 AAAApub"),
                          pulumi.Output.secret("-----BEGIN OPENSSH PRIVATE KEY-----"))

        def fabric(self, name, parent):
            return []

        def storage(self, name, parent, depends_on):
            return {}

        def pool(self, name, pool, access, parent, depends_on):
            PoolDriver.pools.append((pool.name, len(pool.machines)))
            out = []
            for n in pool.machines:
                m = pulumi.CustomResource(MACHINE, f"{n.name}-m", {"host_key": None, "management_ip": None},
                                          pulumi.ResourceOptions(parent=parent))
                out.append(NodeHandle(ready=[m], management_ip=m.management_ip, host_key=m.host_key, name=n.name))
            return out

        def tuning_vars(self):
            return {}

        def acceptance_vars(self):
            return {}

        def kubeconfig(self, name, parent, depends_on):
            return pulumi.Output.from_input("apiVersion: v1\nkind: Config\n")

    return PoolDriver


def _resolve(output):
    fut = asyncio.get_event_loop().create_future()
    output.apply(lambda v: fut.set_result(v) if not fut.done() else None)
    return asyncio.get_event_loop().run_until_complete(fut)


@pytest.mark.parametrize("tuned_by", ["platform", "railyard"])
def test_a_pool_driver_gets_one_call_per_pool_and_tuning_only_where_railyard_tunes(tuned_by):
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack="metal", preview=False)
    from components.cluster import Cluster, ClusterArgs
    from railyard.stack import from_config

    cw = {"zone": "US-EAST-04A", "cluster": {
        "version": "v1.32", "podCidr": {"name": "pods", "cidr": "10.0.0.0/16"},
        "serviceCidr": {"name": "services", "cidr": "10.1.0.0/16"},
        "internalLbCidrs": [{"name": "lbs", "cidr": "10.2.0.0/16"}]}}
    spec, plan = from_config({**_config("coreweave"), "railyard:coreweave": cw, "railyard:nodePools": [
        {"name": "a", "sku": "dgx-h100", "count": 3}, {"name": "b", "sku": "dgx-h100", "count": 2}]}, "metal")
    driver_cls = _cloud_driver(tuned_by)
    cluster = Cluster("metal", ClusterArgs(spec=spec, plan=plan), driver_cls(spec, plan))
    inventory = _resolve(cluster.inventory)
    asyncio.get_event_loop().run_until_complete(pulumi.runtime.stack.wait_for_rpcs())
    types = [u.split("::")[2].rsplit("$", 1)[-1] for u in pulumi.runtime.settings.get_monitor().resources]
    assert driver_cls.pools == [("a", 3), ("b", 2)]
    # Addresses came back from the provider, per machine, in plan order.
    assert [(n["name"], n["management_ip"]) for n in inventory] == [
        ("a-0", "10.9.0.30"), ("a-1", "10.9.0.12"), ("a-2", "10.9.0.21"), ("b-0", "10.9.0.4"), ("b-1", "10.9.0.8")]
    assert ("railyard:index:HostTuning" in types) == (tuned_by == "railyard")
    if tuned_by == "railyard":
        # Tuning reaches each machine at the provider's address, with that machine's own variables.
        hosts = _resolve(cluster.tuning.run.hosts)
        assert {n: (h["address"], h["vars"]["railyard_node"]) for n, h in hosts.items()} == {
            n["name"]: (n["management_ip"], n["name"]) for n in inventory}
    assert "railyard:index:HgxNode" not in types
    assert asyncio.get_event_loop().run_until_complete(cluster.kubeconfig.is_secret())
    assert _resolve(cluster.kubeconfig).startswith("apiVersion: v1")


def test_where_vms_are_the_machines_a_pool_driver_makes_the_vms_and_nothing_tunes_hypervisors():
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack="vela", preview=False)
    from components.cluster import Cluster, ClusterArgs
    from railyard.stack import from_config
    from tests.unit.drivers.openstack.sections import section as openstack_section

    fabric = {**_config("openstack")["railyard:fabric"], "compute": {"kind": "roce", "cidr": "198.19.0.0/16"}}
    spec, plan = from_config({**_config("openstack"), "railyard:layout": "virtual", "railyard:fabric": fabric,
                              "railyard:nodePools": [{"name": "v", "sku": "dgx-h100", "count": 2, "vmsPerHost": 2}],
                              "railyard:openstack": openstack_section(rails=8)},
                             "vela")
    driver_cls = _cloud_driver("railyard")
    driver_cls.capabilities = drivers.Capabilities(machines="pool", addresses="provider", tuned_by="railyard",
                                                   vms="are-nodes")
    cluster = Cluster("vela", ClusterArgs(spec=spec, plan=plan), driver_cls(spec, plan))
    inventory = _resolve(cluster.inventory)
    asyncio.get_event_loop().run_until_complete(pulumi.runtime.stack.wait_for_rpcs())
    types = [u.split("::")[2].rsplit("$", 1)[-1] for u in pulumi.runtime.settings.get_monitor().resources]
    assert [n["name"] for n in inventory] == ["v-0-vm0", "v-0-vm1", "v-1-vm0", "v-1-vm1"]
    assert inventory[3]["management_ip"] == "10.9.1.11"
    assert "railyard:index:HostTuning" not in types and cluster.tuning is None


def _yaml_reads(tree: ast.AST) -> list[int]:
    """Lines that parse YAML with PyYAML's own loaders (`yaml.safe_load`, `yaml.load`, ...)."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "yaml"
            and node.func.attr in ("load", "safe_load", "full_load", "unsafe_load")]


def test_every_yaml_document_of_ours_is_read_by_the_strict_loader():
    """One grammar for stack files and data: railyard.model.yamlio refuses a key given twice, which
    PyYAML's loaders resolve by keeping the last one. Only yamlio itself calls them (an upstream
    project's multi-document manifests, read with safe_load_all, are not ours to be strict about)."""
    found = {}
    for base in ("railyard", "components"):
        for path in sorted((ROOT / base).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            lines = _yaml_reads(ast.parse(path.read_text(), rel))
            if lines and rel != "railyard/model/yamlio.py":
                found[rel] = lines
    assert found == {}


def test_the_yaml_read_check_sees_a_plain_load():
    assert _yaml_reads(ast.parse("import yaml\nyaml.safe_load('a: 1')\nyaml.safe_load_all('')\n")) == [2]


# The lab driver's layers (railyard/drivers/lab/__init__.py): a module imports its own layer's and
# the ones above it, never one below.
LAB_LAYERS = (
    ("plumbing", ("errors", "names", "net", "proc", "mountns")),
    ("programs", ("agent", "node_init", "hwtree", "gpu_tools", "control_plane.api", "control_plane.pki")),
    ("objects", ("fabric", "routers", "node", "sriov", "vm", "storage", "control_plane", "subnet", "faults")),
    ("driver", ("resources", "driver", "rules", "tuning", "cli", "gc")),
)


def _lab_layer(module: str) -> int:
    rest = module.removeprefix("railyard.drivers.lab.")
    for i, (_, members) in enumerate(LAB_LAYERS):
        if any(rest == m or rest.startswith(m + ".") for m in members):
            return i
    raise AssertionError(f"{module} is in no layer of LAB_LAYERS: place it there and in the package's docstring")


def test_the_lab_drivers_layers_import_downward_only():
    graph = _module_graph()
    lab = {m: {d for d in deps if d.startswith("railyard.drivers.lab.")}
           for m, deps in graph.items() if m.startswith("railyard.drivers.lab.")}
    assert len(lab) > 30
    upward = sorted((m, d) for m, deps in lab.items() for d in deps if _lab_layer(d) > _lab_layer(m))
    assert upward == []
    # The programs a node runs are loaded by path inside it: nothing of the lab comes with them.
    programs = {m: deps for m, deps in lab.items() if _lab_layer(m) == 1}
    assert programs and all(not deps for deps in programs.values()), programs
    # Only the driver's layer meets the engine.
    lab_root = ROOT / "railyard" / "drivers" / "lab"
    with_pulumi = {".".join(p.relative_to(lab_root).with_suffix("").parts) for p in lab_root.rglob("*.py")
                   if any(i == "pulumi" or i.startswith("pulumi.") for i in _imports(p))}
    assert with_pulumi and all(_lab_layer(f"railyard.drivers.lab.{m}") == 3 for m in with_pulumi), with_pulumi
