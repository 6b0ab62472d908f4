"""One Markdown comment for a change: per stack a summary line, then its changes by component.

Pure: it gets parsed previews (railyard.review.preview) and the stack files' own changes, and
returns text; `railyard review` does the engine and git work. The same input always gives the same
text, which the golden tests pin.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from railyard.messages import not_implemented_driver, split_drift_line
from railyard.review.preview import (MISSING, OP_ORDER, SECRET, UNKNOWN, Preview, Step, fan_out,
                                     format_path)
from railyard.review.rules import Disruption, Verdict, classify_line, classify_path, classify_step, worst

MARKER = "<!-- railyard-review -->"
SHOWN = 3  # names listed before "… and N more"
MAX_PROPERTIES = 12
MAX_LINES = 15
MAX_VALUE = 48
MAX_COMMENT = 60_000  # characters; GitHub takes at most 65,536 in a comment

# Component kinds in the order a reader meets them, with their headings.
KINDS = {
    "Cluster": "Cluster", "Fabric": "Fabric", "StorageTiers": "Storage tiers", "NodePool": "Node pools",
    "HgxNode": "Nodes", "VirtualMachine": "VMs", "HostTuning": "Host tuning", "KubernetesLayer": "Kubernetes",
    "Stack": "Stack",
}
PLURAL = {"HgxNode": "nodes", "VirtualMachine": "VMs"}
SECTIONS = (("Replaced or deleted", ("replace", "delete")), ("Updated", ("update", "drift")), ("Created", ("create",)))
DRIFT_KIND = "HostTuning"
_URN = re.compile(r"urn:pulumi:[^\s'\"`]+::([^\s'\"`]+)")
_PROTECTED = re.compile(r'resource "([^"]+)" cannot be (?:deleted|replaced)\s+because it is protected'
                        r'|unable to (?:delete|replace) resource "([^"]+)"\s+as it is currently marked for protection')


@dataclass
class StackReview:
    """What the comment says about one stack."""

    stack: str
    why: str
    preview: Preview | None = None
    skipped: str | None = None  # why there is no preview
    config: list[tuple[str, Any, Any]] = field(default_factory=list)  # rules.config_changes
    notes: list[str] = field(default_factory=list)  # what the stack's driver does not do, said after its line


@dataclass
class Unit:
    """One component instance (a node, the fabric, the tuning run...) and its resources' steps."""

    kind: str
    name: str
    steps: list[Step] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)

    @property
    def op(self) -> str:
        kinds = {s.kind for s in self.steps}
        return next((k for k in OP_ORDER if k in kinds), "drift" if self.drift else "update")

    @property
    def resources(self) -> list[Step]:
        return [s for s in self.steps if s.urn.component is None]

    def role(self, step: Step) -> str:
        return step.urn.name.removeprefix(self.name).lstrip("-") or step.urn.name

    def entries(self) -> list[tuple[str, str, Any, Any, list[str]]]:
        """(role, path, old, new, folded keys) per changed property, identical per-node changes folded."""
        out = []
        for step in self.resources:
            for path, old, new, keys in fan_out(step.changes(), step.old or {}, step.new or {}):
                out.append((self.role(step), format_path(path), old, new, keys))
        return out

    def verdict(self) -> Verdict:
        # Folded paths (hosts.*.vars...), so the reason reads the same whichever node came first.
        verdicts = [classify_step(self.kind, s, [format_path(p) for p, *_ in fan_out(s.changes(), s.old or {},
                                                                                      s.new or {})])
                    for s in self.resources]
        return worst([*verdicts, *(classify_line(line) for line in self.drift)])


def units_of(preview: Preview) -> list[Unit]:
    units: dict[tuple[str, str], Unit] = {}
    for step in preview.steps:
        if step.engine_owned:
            continue
        if step.urn.component:
            key = (step.urn.component, step.urn.name)
        elif step.parent is not None and step.parent.component:
            key = (step.parent.component, step.parent.name)
        else:
            key = ("Stack", step.urn.name)
        units.setdefault(key, Unit(*key)).steps.append(step)
    for d in preview.diagnostics:
        if d.severity == "info" and d.urn is not None and d.urn.component == DRIFT_KIND:
            lines = [ln.strip() for ln in d.message.splitlines() if ln.strip()]
            units.setdefault((DRIFT_KIND, d.urn.name), Unit(DRIFT_KIND, d.urn.name)).drift.extend(lines)
    return list(units.values())


# --- values ----------------------------------------------------------------------------------------

def value(v: Any) -> str:
    if v is MISSING:
        return "(none)"
    if v == UNKNOWN:
        return "(known after up)"
    if isinstance(v, str):
        if "PRIVATE KEY" in v:
            return SECRET  # whatever let it through, a key never reaches a comment
        if v == SECRET or v.startswith(SECRET):
            return v
        text = v if v else '""'
    else:
        text = json.dumps(v, sort_keys=True, separators=(",", ":")).replace(f'"{UNKNOWN}"', "(unknown)")
        if "PRIVATE KEY" in text:
            return SECRET
        if isinstance(v, (dict, list)) and len(text) > MAX_VALUE:
            # A whole record (a node's settings) says nothing in 48 characters; its size does.
            n = len(v)
            return f"{n} {'entries' if isinstance(v, dict) else 'items'}" if n != 1 else "1 entry"
    if len(text) > MAX_VALUE:
        text = text[:MAX_VALUE - 14] + "…" + text[-13:]
    return f"`{text.replace('`', chr(39))}`"


def names(items: list[str], noun: str = "") -> str:
    shown = ", ".join(f"`{n}`" for n in items[:SHOWN])
    rest = len(items) - SHOWN
    return shown + (f" … and {rest} more{(' ' + noun) if noun else ''}" if rest > 0 else "")


def short(message: str, brief: bool = False) -> str:
    """An engine message for a comment: URNs as resource names, no `error:` prefixes; `brief`
    for the summary line."""
    m = _PROTECTED.search(message)
    if m:
        # The engine's advice names URNs and program edits; ours fits a long-lived Railyard stack.
        name = (m.group(1) or m.group(2)).rsplit("::", 1)[-1]
        if brief:
            return f"{name} is protected (a long-lived stack)"
        return (f"{name} cannot be deleted or replaced because it is protected: this stack is long-lived, and "
                f"removing or replacing its resources needs a deliberate `pulumi state unprotect` first "
                f"(docs/lifecycle.md)")
    text = _URN.sub(lambda m: m.group(1), message.strip())
    text = re.sub(r"^(error|warning): ", "", text, flags=re.M)
    return " ".join(text.split())


# --- one stack -------------------------------------------------------------------------------------

def counts_line(preview: Preview, units: list[Unit]) -> str:
    c = preview.counts()
    parts = [f"{c['create']} to create", f"{c['update']} to update", f"{c['replace']} to replace",
             f"{c['delete']} to delete"]
    nodes = {op: sum(1 for u in units if u.kind == "HgxNode" and u.op == op) for op in ("create", "delete", "replace")}
    words = {"create": "added", "delete": "removed", "replace": "replaced"}
    node_parts = [f"{n} node{'s' if n != 1 else ''} {words[op]}" for op, n in nodes.items() if n]
    return ", ".join(parts) + (f" ({', '.join(node_parts)})" if node_parts else "")


def stack_verdict(review: StackReview, units: list[Unit]) -> Verdict:
    config = [classify_path(key) for key, _, _ in review.config]
    return worst([*(u.verdict() for u in units), *config])


def summary_line(review: StackReview) -> str:
    return _summary(review) + "".join(f" · {note}" for note in review.notes)


def _summary(review: StackReview) -> str:
    head = f"- **`{review.stack}`**"
    if review.preview is None:
        return f"{head}: not previewed: {review.skipped}"
    units = units_of(review.preview)
    worst_ = stack_verdict(review, units).disruption
    tail = f" · **{worst_.label}**" if worst_ > Disruption.IN_PLACE else " · in place"
    driver = not_implemented(review.preview)
    if driver:
        return f"{head}: not previewed: {driver}"
    if review.preview.failed:
        seen = f"; worst change seen: **{worst_.label}**" if worst_ > Disruption.IN_PLACE else ""
        return f"{head}: **preview failed**, `up` would fail too: {first_error(review.preview)}{seen}"
    if not units:
        return f"{head}: no changes"
    return f"{head}: {counts_line(review.preview, units)}{tail}"


def not_implemented(preview: Preview) -> str | None:
    """The program's own stop for a driver that is validated but not implemented (railyard/drivers/base.py)."""
    for e in errors_of(preview):
        driver = not_implemented_driver(e)
        if driver is not None:
            return (f"railyard:driver `{driver}` is not implemented yet, so the program stops before declaring "
                    "anything (nothing to compare)")
    return None


def first_error(preview: Preview) -> str:
    errors = errors_of(preview, brief=True)
    text = errors[0] if errors else "the engine stopped"
    return text if len(text) <= 160 else text[:157] + "…"


def errors_of(preview: Preview, brief: bool = False) -> list[str]:
    if preview.failure:
        return [short(preview.failure, brief)]
    out: list[str] = []
    for d in preview.errors:
        text = short(d.message, brief)
        if text and text not in out:
            out.append(text)
    # The engine's closing "preview failed" says nothing the real error has not said.
    meaningful = [e for e in out if e.rstrip(".") not in ("preview failed", "update failed")
                  and not e.startswith("an unhandled error occurred: program exited with non-zero exit code")]
    return meaningful or out


def render_units(units: list[Unit]) -> list[str]:
    out: list[str] = []
    for title, ops in SECTIONS:
        chosen = [u for u in units if u.op in ops]
        if not chosen:
            continue
        out.append(f"**{title}**")
        out.append("")
        order = list(KINDS) + sorted({u.kind for u in chosen} - set(KINDS))
        for kind in order:
            group = [u for u in chosen if u.kind == kind]
            if group:
                out.append(f"_{KINDS.get(kind, kind)}_")
                out.append("")
                out.extend(render_group(group))
                out.append("")
    return out


def _signature(unit: Unit, values: bool) -> tuple:
    entries = tuple((r, p, json.dumps(o, sort_keys=True, default=repr) if values else None,
                     json.dumps(n, sort_keys=True, default=repr) if values else None, tuple(k))
                    for r, p, o, n, k in unit.entries())
    roles = tuple(sorted(unit.role(s) for s in unit.resources)) if unit.op in ("create", "delete") else ()
    return unit.op, unit.verdict().disruption, entries if values else tuple(e[:2] for e in entries), roles, \
        tuple(unit.drift) if values else ()


def render_group(group: list[Unit]) -> list[str]:
    """Units of one kind: those whose changes are alike (the same properties) are listed once, with
    the others named after it, so 440 nodes with one change take two lines."""
    by_shape: dict[tuple, list[Unit]] = {}
    for u in sorted(group, key=lambda u: (OP_ORDER.index(u.op) if u.op in OP_ORDER else 9, _natural(u.name))):
        by_shape.setdefault(_signature(u, values=False), []).append(u)
    out: list[str] = []
    noun = PLURAL.get(group[0].kind, "")
    for members in by_shape.values():
        first = members[0]
        same_values = len({_signature(u, values=True) for u in members}) == 1
        verdict = first.verdict()
        label = verdict.disruption.label
        label = f"**{label}**" if verdict.disruption > Disruption.IN_PLACE else label
        why = f" ({verdict.why})" if verdict.why and verdict.disruption > Disruption.IN_PLACE else ""
        roles = sorted(first.role(s) for s in first.resources)
        what = f" ({', '.join(roles)})" if first.op in ("create", "delete") and roles and roles != [first.name] else ""
        if len(members) == 1:
            out.append(f"- **{first.op}** `{first.name}`{what}: {label}{why}")
        elif same_values:
            out.append(f"- **{first.op}** {names([u.name for u in members], noun)}{what}, the same change: "
                       f"{label}{why}")
        else:
            out.append(f"- **{first.op}** `{first.name}`{what}: {label}{why}")
        out.extend(render_entries(first))
        if len(members) > 1 and not same_values:
            rest = [u.name for u in members[1:]]
            out.append(f"  - … and {len(rest)} more {noun or 'like it'} changing the same properties, each with "
                       f"its own values: {names(rest)}")
    return out


def render_entries(unit: Unit) -> list[str]:
    entries = unit.entries()
    single = len({r for r, *_ in entries}) <= 1 and len(unit.resources) <= 1
    out = []
    for role, path, old, new, keys in entries[:MAX_PROPERTIES]:
        label = path if single or not role else f"{role}: {path}"
        on = f" on {names(sorted(keys, key=_natural), 'nodes' if 'host' in path or 'node' in path else '')}" \
            if keys else ""
        out.append(f"  - `{label}`: {value(old)} → {value(new)}{on}")
    if len(entries) > MAX_PROPERTIES:
        out.append(f"  - … and {len(entries) - MAX_PROPERTIES} more properties")
    if unit.drift:
        out.append("  - host drift found by the preview's check run (`NODE: SETTING OLD → NEW`):")
        out.extend(render_drift(unit.drift))
    return out


def render_drift(lines: list[str]) -> list[str]:
    grouped: dict[str, list[str]] = {}
    for line in lines:
        node, rest = split_drift_line(line)
        grouped.setdefault(rest, [])
        if node and node not in grouped[rest]:
            grouped[rest].append(node)
    out = []
    for rest, nodes in list(grouped.items())[:MAX_LINES]:
        where = f" on {names(sorted(nodes, key=_natural), 'nodes')}" if nodes else ""
        out.append(f"    - `{rest.replace('`', chr(39))}`{where}")
    if len(grouped) > MAX_LINES:
        out.append(f"    - … and {len(grouped) - MAX_LINES} more host-level changes")
    return out


def render_stack(review: StackReview) -> list[str]:
    out = [f"### `{review.stack}`", "", f"_Why it is reviewed: {review.why}._", ""]
    if review.config:
        out.append("**Stack file**")
        out.append("")
        for key, old, new in review.config:
            v = classify_path(key)
            tail = f": **{v.disruption.label}**" if v.disruption > Disruption.IN_PLACE else ""
            out.append(f"- `{key}`: {value(old)} → {value(new)}{tail}")
        out.append("")
    if review.preview is None:
        out += [f"Not previewed: {review.skipped}", ""]
        return out
    driver = not_implemented(review.preview)
    if driver:
        out += [f"Not previewed: {driver}. The program said:", "", *(f"> {e}" for e in errors_of(review.preview)), ""]
        return out
    if review.preview.failed:
        out.append("**Preview failed**; `up` would stop at the same place:")
        out.append("")
        out.extend(f"> {e}" for e in errors_of(review.preview))
        out.append("")
    units = units_of(review.preview)
    if not units and not review.preview.failed:
        out += ["No changes.", ""]
    out.extend(render_units(units))
    warnings = _unique(short(d.message) for d in review.preview.diagnostics if d.severity == "warning")
    if warnings:
        out.append("**Warnings**")
        out.append("")
        out.extend(f"- {w}" for w in warnings)
        out.append("")
    return out


def render(reviews: list[StackReview], *, base: str | None = None, left_out: list[str] | None = None) -> str:
    """The comment; `left_out` names touched stacks deliberately not reviewed (lab stacks in CI)."""
    out = [MARKER, "## Railyard preview", ""]
    if not reviews:
        out += ["This change touches no stack: no stack file changed, and no code the program runs."
                if not left_out else "This change touches no stack reviewed here.", ""]
    else:
        out += [summary_line(r) for r in reviews]
        out.append("")
    if left_out:
        out += [f"Left out (lab stacks live on a workstation, not in this backend): {names(left_out)}.", ""]
    basis = f" against `{base}`" if base else ""
    footer = (f"<sub>`railyard review`{basis}. Disruption, least first: in place, needs a reboot, replaces "
              "nodes, destroys data (docs/review.md). Secrets show as [secret].</sub>")
    size = len("\n".join(out)) + len(footer) + 200
    for i, r in enumerate(reviews):
        section = render_stack(r)
        length = len("\n".join(section)) + 1
        if size + length > MAX_COMMENT:
            # GitHub refuses longer comments; the summary lines above still cover every stack.
            rest = [x.stack for x in reviews[i:]]
            out += [f"… the details of {names(rest)} do not fit in one comment; `make review` prints them.", ""]
            break
        out.extend(section)
        size += length
    out.append(footer)
    return "\n".join(_squeeze(out)) + "\n"


def _unique(items: Iterable[str]) -> list[str]:
    out: list[str] = []
    for i in items:
        if i and i not in out:
            out.append(i)
    return out


def _squeeze(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if line == "" and out and out[-1] == "":
            continue
        out.append(line)
    return out


def _natural(name: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))
