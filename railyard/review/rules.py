"""The review's rules, as data and small functions: disruption classes, and which stacks a change
touches. docs/review.md states the same rules in prose; tests/unit/review/test_rules.py checks them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Iterable, Mapping

from railyard.review.preview import SECRET, Path, Step, decoded, diff_values, format_path, provider_class


class Disruption(IntEnum):
    """How much running work a change disturbs, least first; a stack shows its worst."""

    IN_PLACE = 0
    NEEDS_REBOOT = 1
    REPLACES_NODES = 2
    DESTROYS_DATA = 3

    @property
    def label(self) -> str:
        return LABELS[self]


LABELS = {
    Disruption.IN_PLACE: "in place",
    Disruption.NEEDS_REBOOT: "needs a reboot",
    Disruption.REPLACES_NODES: "replaces nodes",
    Disruption.DESTROYS_DATA: "destroys data",
}

# A resource holds data when its kind or name says so: storage tiers, caches, file systems, disks.
DATA_KINDS = {"StorageTiers"}
DATA_WORDS = re.compile(r"storage|cache|pfs|lustre|gpfs|object|bucket|volume|disk|nvme", re.I)
# Components whose delete or replace takes nodes (or what they stand on) away from running jobs.
NODE_KINDS = {"HgxNode", "NodePool", "VirtualMachine", "Fabric"}
# Settings applied at boot: the kernel command line (hugepage reservation, IOMMU mode, a
# hypervisor's CPU isolation, whose systemd mode reaches running services only at the next boot).
REBOOT_WORDS = re.compile(r"hugepage|iommu|kernel|cmdline|grub|isolcpus|cpu_?isolation|reboot", re.I)
# A new file system or RAID layout under data means reformatting it.
FORMAT_WORDS = re.compile(r"(^|[._-])(fs|fstype|filesystem|raid|format)($|[._-])", re.I)
NODE_IDENTITY = re.compile(r"(^|[._-])sku($|[._-])", re.I)
# Kubernetes objects whose every change makes an operator drain and reconfigure nodes: the SR-IOV
# Network Operator re-creates the VFs of the nodes a policy selects.
DRAINING_TYPES = re.compile(r":SriovNetworkNodePolicy$")
# Dynamic providers whose delete only drops the resource from state, what it made living on under
# another resource: the lab's node storage, merged into the node's own resource (issue 18).
STATE_ONLY_DELETES = {"NodeStorageProvider": "merged into its node's resource, which keeps the cache as it is"}


@dataclass(frozen=True)
class Verdict:
    disruption: Disruption
    why: str = ""


IN_PLACE = Verdict(Disruption.IN_PLACE)


# Inputs that make a resource hold data whatever its name: a lab node's local cache (issue 18 put
# it in the node's own resource).
DATA_INPUTS = ("cache",)


def holds_data(kind: str | None, step: Step) -> bool:
    return (kind in DATA_KINDS or bool(DATA_WORDS.search(step.urn.name)) or bool(DATA_WORDS.search(step.urn.type))
            or any(_data_input(inputs) for inputs in (step.old, step.new)))


def _data_input(inputs: dict | None) -> bool:
    if not isinstance(inputs, dict):
        return False
    spec = decoded(inputs.get("spec"))
    spec = spec if isinstance(spec, dict) else {}
    return any(inputs.get(key) or spec.get(key) for key in DATA_INPUTS)


def classify_step(kind: str | None, step: Step, paths: Iterable[Path | str]) -> Verdict:
    """The disruption of one step of a unit of kind `kind` (HgxNode, HostTuning...), from its op and
    the names of the properties that change."""
    op = step.kind
    if DRAINING_TYPES.search(step.urn.type) and op in ("create", "update", "replace", "delete"):
        return Verdict(Disruption.NEEDS_REBOOT,
                       f"{step.urn.name}: the SR-IOV operator drains and reconfigures the nodes it selects")
    if op == "delete" and (merged := STATE_ONLY_DELETES.get(provider_class((step.old or {}).get("__provider")) or "")):
        return Verdict(Disruption.IN_PLACE, f"{step.urn.name}: {merged}")
    if op in ("delete", "replace"):
        verb = "deletes" if op == "delete" else "replaces"
        if holds_data(kind, step):
            return Verdict(Disruption.DESTROYS_DATA, f"{verb} {step.urn.name}, which holds data")
        if kind in NODE_KINDS:
            return Verdict(Disruption.REPLACES_NODES, f"{verb} {step.urn.name}")
        return IN_PLACE
    if op != "update":
        return IN_PLACE
    return worst(classify_path(p, data=holds_data(kind, step), node=kind in NODE_KINDS) for p in paths)


def classify_path(path: Path | str, *, data: bool = False, node: bool = False) -> Verdict:
    """A changed setting's disruption from its name (a property path or a stack-file key)."""
    text = path if isinstance(path, str) else format_path(path)
    if FORMAT_WORDS.search(text) and (data or DATA_WORDS.search(text)):
        return Verdict(Disruption.DESTROYS_DATA, f"{text} reformats data")
    if NODE_IDENTITY.search(text) and (node or "nodePools" in text):
        return Verdict(Disruption.REPLACES_NODES, f"{text} changes what the nodes are")
    if REBOOT_WORDS.search(text):
        return Verdict(Disruption.NEEDS_REBOOT, f"{text} is applied at boot")
    return IN_PLACE


def classify_line(line: str) -> Verdict:
    """A host-level drift line (`gpu-0: hugepages-1G node0 0 → 700`)."""
    return Verdict(Disruption.NEEDS_REBOOT, "host drift in boot-time settings") if REBOOT_WORDS.search(line) \
        else IN_PLACE


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    best = IN_PLACE
    for v in verdicts:
        if v.disruption > best.disruption:
            best = v
    return best


# --- which stacks a change touches -----------------------------------------------------------------

# What the program runs, or what runs it: a change here can change any stack's preview.
PROGRAM = ("__main__.py", "Pulumi.yaml", "pyproject.toml", "components/", "railyard/", "playbooks/",
           "templates/", "tools/pulumi/")
# Parts of railyard/ the program never imports: the CLI around it.
CLI_ONLY = ("railyard/commands/", "railyard/review/", "railyard/bench/", "railyard/cli.py")
# A driver's own commands (`railyard lab ...`) live with the driver, still outside the program.
DRIVER_CLI = re.compile(r"^railyard/drivers/[^/]+/cli\.py$")
DRIVER_DIR = re.compile(r"^railyard/drivers/([^/]+)/")
STACK_FILE = re.compile(r"^stacks/Pulumi\.([^/]+)\.yaml$")


def touched_stacks(changed: Iterable[str], drivers: Mapping[str, str], runnable: set[str]) -> dict[str, str]:
    """Stack -> why it is touched, for files `changed` (paths relative to the project root).

    `drivers` maps every stack with a stack file to its `railyard:driver`; `runnable` holds the
    drivers that are implemented. A stack is touched when its own stack file changed, or when code
    the program runs changed and the stack's driver is runnable (a stack whose driver is not
    implemented previews nothing whatever the code does). Code under railyard/drivers/<d>/ touches
    only the stacks on driver d.
    """
    changed = sorted(set(changed))
    out: dict[str, str] = {}
    for path in changed:
        m = STACK_FILE.match(path)
        if m and m.group(1) in drivers:
            out[m.group(1)] = f"{path} changed"
    code: dict[str, list[str]] = {}
    for path in changed:
        if not path.startswith(PROGRAM) or path.startswith(CLI_ONLY) or DRIVER_CLI.match(path):
            continue
        m = DRIVER_DIR.match(path)
        for stack, driver in drivers.items():
            if driver in runnable and (m is None or m.group(1) == driver):
                code.setdefault(stack, []).append(path)
    for stack, paths in sorted(code.items()):
        if stack not in out:
            shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
            out[stack] = f"code it runs changed ({shown})"
    return dict(sorted(out.items()))


# --- the stack file's own changes ------------------------------------------------------------------

def config_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[tuple[str, Any, Any]]:
    """(key path, old, new) for every leaf of the stack files' `config` that differs. A secure
    value (`{secure: <ciphertext>}`) is compared by its ciphertext and shown only as [secret]."""
    old = _sealed((before or {}).get("config") or {})
    new = _sealed((after or {}).get("config") or {})
    out = []
    for ch in diff_values(old, new):
        a, b = _shown(ch.old), _shown(ch.new)
        if a == SECRET and b == SECRET:
            b = f"{SECRET} (changed)"
        out.append((format_path(ch.path), a, b))
    return out


def _sealed(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return ("secure", value["secure"])  # a leaf for diff_values, never printed
        return {k: _sealed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sealed(v) for v in value]
    return value


def _shown(value: Any) -> Any:
    if isinstance(value, tuple) and value[:1] == ("secure",):
        return SECRET
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value
