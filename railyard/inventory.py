"""The records a stack's machines travel as, from the driver's resources to the tuning run.

They are TypedDicts, not classes: each one is also a stack output (`inventory`) or a dynamic
resource's input (`hosts`), which Pulumi serializes as plain mappings, so a record is the
mapping itself and the type checker holds every reader and writer to its keys.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class VmEntry(TypedDict):
    """A VM of the cluster: its name, the hypervisor it runs on, and how it is reached."""

    name: str
    host: str
    management_ip: str
    host_key: str


class MachineEntry(TypedDict):
    """A machine of a node pool, as the driver made it (the stack's `inventory` output)."""

    name: str
    pool: str
    sku: str
    management_ip: str
    host_key: str
    vms: NotRequired[list[VmEntry]]


class HostInput(TypedDict):
    """A host of a tuning or acceptance run: how it is reached and its role variables."""

    address: str
    host_key: str
    vars: dict[str, Any]


HostInputs = dict[str, HostInput]
"""A run's hosts by name: the `hosts` input of the TuningRun and AcceptanceRun resources."""
