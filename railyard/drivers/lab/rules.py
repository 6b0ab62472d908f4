"""The lab driver's rules for a stack file, and what it needs of this machine before an up.

Pulumi-free: the spec parser (through railyard.stack) and the CLI read it. The lab reads no
`railyard:lab` keys; its rule is on the model's own networks.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from railyard.drivers import RuleHooks
from railyard.drivers.lab.names import LAB_RANGE
from railyard.model.errors import Problem

if TYPE_CHECKING:
    from railyard.model.spec import Spec


KEYS: dict[str, tuple[str, ...]] = {}


def parse(section: Any, spec: Spec) -> tuple[None, list[Problem]]:
    problems = []
    pfs = getattr(getattr(spec, "storage", None), "parallel_fs", None)
    for key in ("source", "options"):
        if pfs is not None and getattr(pfs, key):
            problems.append(Problem(f"railyard:storage.parallelFs.{key}", getattr(pfs, key), "absent for the lab driver",
                                    "the lab's parallel file system is a directory its nodes share; there is no "
                                    "server to mount"))
    for i, pool in enumerate(spec.node_pools):
        if pool.cpu_isolation == "systemd":
            problems.append(Problem(f"railyard:nodePools[{i}].cpuIsolation", "'systemd'", "'kernel' for the lab driver",
                                    "a lab node runs no service manager whose CPU affinity could be set; the "
                                    "kernel mode's command line takes effect at the node's reboot"))
    fabric = spec.fabric
    if fabric is None:
        return None, problems
    nets = {f"railyard:fabric.{name}.cidr": getattr(fabric, name).cidr for name in ("management", "storage", "compute")}
    nets["railyard:fabric.compute.loopbackCidr"] = fabric.compute.loopback_cidr
    for path, net in nets.items():
        if net is not None and not net.subnet_of(LAB_RANGE):
            problems.append(Problem(path, str(net), f"a network inside {LAB_RANGE} for the lab driver",
                                    "the lab builds its networks on this machine; 198.18.0.0/15 is routed "
                                    "nowhere real"))
    return None, problems


def preflight(spec: Spec) -> str | None:
    if os.geteuid() != 0:
        return (f"stack {spec.stack} uses the lab driver, which needs root (it creates network namespaces, "
                "links, mounts and sshd processes); nothing was changed. Run it as root.")
    from railyard import paths
    from railyard.drivers.lab.errors import LabError
    from railyard.drivers.lab.node import check_dir_location

    try:
        # Before the engine starts, not from its provider half-way through an up.
        check_dir_location(paths.lab_dir(spec.stack))
    except LabError as exc:
        return f"{exc}; nothing was changed"
    return None


def prepare(spec: Spec) -> str | None:
    """What the stack runs on this machine, built (minutes, once per pin) or found before the
    engine starts, never half-way through an up: the S3 server of an object tier the lab serves
    itself, and the control plane of a stack with railyard:kubernetes."""
    from railyard.engine.toolchain import ToolchainError, ensure_weed

    if spec.storage.object is not None:
        try:
            ensure_weed()
        except ToolchainError as exc:
            return f"{exc}; nothing was changed"
    if spec.kubernetes is None:
        return None
    from railyard.engine import control_plane

    try:
        control_plane.ensure()
        # The CRDs, kwok's stages and Kueue's webhooks come from the pinned modules: fetched now,
        # not by the control plane's create half-way through the up.
        control_plane.crd_files()
        control_plane.kwok_module()
    except ToolchainError as exc:
        return f"{exc}; nothing was changed"
    return None


# The contract's hooks this module provides (railyard.drivers.RuleHooks).
HOOKS = RuleHooks(keys=KEYS, parse=parse, preflight=preflight, prepare=prepare)
