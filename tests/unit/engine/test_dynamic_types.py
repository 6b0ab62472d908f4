"""What a stack's state holds of Railyard's dynamic resources stays loadable (issue 39, items 5, 8).

Pulumi pickles a dynamic resource's provider into state with dill, the class by reference: its
module path and name. A stack brought up today is previewed, updated and destroyed by tomorrow's
code only while that path still imports. So the paths are pinned here: moving a provider means
keeping an alias at the pinned path (and adding the new one), never just moving it.

Each resource's type is pinned too: a rename needs an alias (TypedResource carries the one from
the untyped `pulumi-python:dynamic:Resource` every stack before issue 39 holds).
"""

from __future__ import annotations

import base64
import importlib
import pickletools
import pkgutil

import pytest
from pulumi.dynamic import ResourceProvider
from pulumi.dynamic.dynamic import serialize_provider

import railyard
from railyard.dynamic import TypedResource
from railyard.engine.state_types import UNTYPED_DYNAMIC, is_dynamic

# module path -> provider classes, as existing stacks' state names them.
PINNED_PROVIDERS: dict[str, tuple[str, ...]] = {
    "railyard.drivers.lab.resources": (
        "AccessKeyProvider", "ControlPlaneProvider", "FabricProvider", "NodeProvider", "ObjectStoreProvider",
        "SpineProvider", "SwitchesProvider", "VmProvider",
        # Only in stacks brought up before the node's storage merged into its node (issue 18):
        # their destroy and their next up still load it.
        "NodeStorageProvider",
    ),
    "railyard.drivers.hosts.resources": ("HostMachineProvider", "HostRebootsProvider"),
    "railyard.drivers.openstack.resources": ("HostKeyProvider",),
    "railyard.lifecycle.resource": ("ExpiryProvider",),
    "railyard.remote.reboots": ("RebootsProvider",),
    "railyard.tuning.resource": ("AcceptanceProvider", "TuningProvider"),
}

# resource class -> its type in state (and in `pulumi preview`).
PINNED_TYPES: dict[str, str] = {
    "railyard.drivers.lab.resources.AccessKey": "pulumi-python:dynamic/lab:AccessKey",
    "railyard.drivers.lab.resources.LabControlPlane": "pulumi-python:dynamic/lab:ControlPlane",
    "railyard.drivers.lab.resources.LabFabric": "pulumi-python:dynamic/lab:Fabric",
    "railyard.drivers.lab.resources.LabNode": "pulumi-python:dynamic/lab:Node",
    "railyard.drivers.lab.resources.LabObjectStore": "pulumi-python:dynamic/lab:ObjectStore",
    "railyard.drivers.lab.resources.LabSpine": "pulumi-python:dynamic/lab:Spine",
    "railyard.drivers.lab.resources.LabSwitches": "pulumi-python:dynamic/lab:Switches",
    "railyard.drivers.lab.resources.LabVm": "pulumi-python:dynamic/lab:Vm",
    "railyard.drivers.hosts.resources.HostMachine": "pulumi-python:dynamic/hosts:Host",
    "railyard.drivers.hosts.resources.HostReboots": "pulumi-python:dynamic/hosts:Reboots",
    "railyard.drivers.openstack.resources.HostKey": "pulumi-python:dynamic/openstack:HostKey",
    "railyard.remote.reboots.Reboots": "pulumi-python:dynamic/railyard:Reboots",
    "railyard.tuning.resource.AcceptanceRun": "pulumi-python:dynamic/railyard:AcceptanceRun",
    "railyard.tuning.resource.TuningRun": "pulumi-python:dynamic/railyard:TuningRun",
}


def _runtime_modules() -> None:
    """Import every module of the runtime package (not the benchmarks, whose throwaway stacks
    hold only their own no-op provider; not the scripts that run on their own)."""
    for m in pkgutil.walk_packages(railyard.__path__, "railyard."):
        if m.name.startswith("railyard.bench") or m.name.endswith(("__main__", "node_init")):
            continue
        importlib.import_module(m.name)


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _subclasses(sub)
    return found


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _global(pickled: str) -> tuple[str, str]:
    """The (module, name) a pickled provider's class is loaded from."""
    strings: list[str] = []
    for op, arg, _ in pickletools.genops(base64.b64decode(pickled)):
        if isinstance(arg, str) and "UNICODE" in op.name:
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            return strings[-2], strings[-1]
    raise AssertionError("the provider was pickled by value, not by reference to its class")


@pytest.mark.parametrize("module,name", [(m, n) for m, names in PINNED_PROVIDERS.items() for n in names])
def test_every_pinned_provider_path_still_imports(module, name):
    assert issubclass(getattr(importlib.import_module(module), name), ResourceProvider)


def test_every_provider_of_the_runtime_is_pinned():
    _runtime_modules()
    pinned = {f"{m}.{n}" for m, names in PINNED_PROVIDERS.items() for n in names}
    found = {_name(c) for c in _subclasses(ResourceProvider)
             if c.__module__.startswith("railyard.") and not c.__module__.startswith("railyard.bench")
             and not c.__name__.startswith("_")}
    assert found - pinned == set(), "a new provider: pin its path in PINNED_PROVIDERS"
    assert pinned - found == set(), "a pinned provider is gone: existing stacks cannot load it"


def test_every_dynamic_resource_has_its_pinned_type_of_its_own():
    _runtime_modules()
    typed = {_name(c): f"pulumi-python:{c._resource_type_name}" for c in _subclasses(TypedResource)}
    assert typed == PINNED_TYPES
    assert len(set(typed.values())) == len(typed)
    assert all(is_dynamic(t) and t != UNTYPED_DYNAMIC for t in typed.values())


def test_state_pickles_each_provider_by_its_pinned_path():
    """What Pulumi writes into `__provider` names the class where PINNED_PROVIDERS says."""
    _runtime_modules()
    pinned = {(m, n) for m, names in PINNED_PROVIDERS.items() for n in names}
    for module, name in sorted(pinned):
        provider = getattr(importlib.import_module(module), name)()
        assert _global(serialize_provider(provider)) == (module, name)


def test_a_dynamic_resource_that_names_no_type_is_refused():
    class Unnamed(TypedResource):
        pass

    with pytest.raises(TypeError, match="Unnamed names no type"):
        Unnamed(ResourceProvider(), "x", {})


def test_the_lab_garbage_collector_knows_old_and_new_types_as_dynamic():
    assert is_dynamic(UNTYPED_DYNAMIC) and is_dynamic("pulumi-python:dynamic/lab:Node")
    assert not is_dynamic("kubernetes:core/v1:Node") and not is_dynamic("pulumi-python:dynamicx")
