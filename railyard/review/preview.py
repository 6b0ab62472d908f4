"""`pulumi preview --diff --json` output as data: steps, their property changes, diagnostics.

Only what the engine printed is used: the URN's type chain, each step's op, old and new inputs
(with the engine's own `[secret]` masks and unknown-value sentinel left as they are) and, where a
provider gave one, its detailedDiff. Python dynamic providers give none, so the changed properties
are found by comparing old and new inputs (JSON held in a string as what it holds).
"""

from __future__ import annotations

import base64
import json
import pickletools
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

# What the engine prints for a value not known until `up` (plugin.UnknownStringValue).
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
SECRET = "[secret]"
COMPONENT_PREFIX = "railyard:index:"
# The pickled provider of every Python dynamic resource: a secret, and never a user's change.
IGNORED_INPUTS = frozenset({"__provider"})

REPLACE_OPS = {"replace", "create-replacement", "delete-replaced", "discard-replaced"}
OP_ORDER = ("replace", "delete", "update", "create")


class _Missing:
    """A property absent on one side of a change."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
Path = tuple[Any, ...]  # str keys and int list indexes


@dataclass(frozen=True)
class Urn:
    stack: str
    project: str
    types: tuple[str, ...]  # the parents' types, then the resource's own
    name: str

    @property
    def type(self) -> str:
        return self.types[-1]

    @property
    def component(self) -> str | None:
        """The resource's own kind when it is a Railyard component (`HgxNode`), else None."""
        return self.type[len(COMPONENT_PREFIX):] if self.type.startswith(COMPONENT_PREFIX) else None


def parse_urn(urn: str) -> Urn:
    """urn:pulumi:STACK::PROJECT::TYPE$CHAIN::NAME (a name may itself hold `::`)."""
    head, project, chain, *name = urn.split("::")
    return Urn(head.removeprefix("urn:pulumi:"), project, tuple(chain.split("$")), "::".join(name))


@dataclass(frozen=True)
class Change:
    path: Path
    old: Any
    new: Any


@dataclass
class Step:
    op: str
    urn: Urn
    parent: Urn | None
    old: dict | None  # inputs before
    new: dict | None  # inputs after
    replace_reasons: tuple[str, ...] = ()
    detailed: dict | None = None
    protected: bool = False

    @property
    def kind(self) -> str:
        """create, update, replace or delete (the three replacement steps are one replace)."""
        return "replace" if self.op in REPLACE_OPS else self.op

    @property
    def engine_owned(self) -> bool:
        """The stack itself and providers: counted as Pulumi counts them, but no one's change."""
        return self.urn.type == "pulumi:pulumi:Stack" or self.urn.type.startswith("pulumi:providers:")

    def changes(self) -> list[Change]:
        if self.kind in ("create", "delete"):
            return []  # the whole resource comes or goes; its properties are not a change
        if self.detailed:
            paths = sorted({parse_path(p) for p in self.detailed}, key=path_sort_key)
            return [Change(p, get_path(self.old, p), get_path(self.new, p)) for p in paths
                    if not p or p[0] not in IGNORED_INPUTS]
        return diff_values(self.old or {}, self.new or {})


@dataclass(frozen=True)
class Diagnostic:
    urn: Urn | None
    severity: str  # info, warning, error, info#err
    message: str


@dataclass
class Preview:
    stack: str
    steps: list[Step] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    failure: str | None = None  # set when the engine printed no JSON at all

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def failed(self) -> bool:
        return self.failure is not None or bool(self.errors)

    def counts(self) -> dict[str, int]:
        """Resources per kind of change, a replacement counted once however many steps it took."""
        seen: dict[str, set[str]] = {k: set() for k in OP_ORDER}
        for s in self.steps:
            if s.kind in seen:
                seen[s.kind].add(str(s.urn))
        # A replaced resource's own create-replacement/delete-replaced steps are not extra creates.
        return {k: len(v) for k, v in seen.items()}


def load(data: dict, stack: str) -> Preview:
    steps = []
    for raw in data.get("steps") or ():
        if raw.get("op") in ("same", "read", "refresh") or raw.get("op") is None:
            continue
        urn = parse_urn(raw["urn"])
        old, new = raw.get("oldState") or {}, raw.get("newState") or {}
        parent = new.get("parent") or old.get("parent")
        steps.append(Step(
            op=raw["op"], urn=urn, parent=parse_urn(parent) if parent else None,
            old=old.get("inputs") if old else None, new=new.get("inputs") if new else None,
            replace_reasons=tuple(raw.get("replaceReasons") or ()), detailed=raw.get("detailedDiff") or None,
            protected=bool(old.get("protect") or new.get("protect")),
        ))
    diags = [Diagnostic(parse_urn(d["urn"]) if d.get("urn") else None, d.get("severity", "info"),
                        d.get("message", "")) for d in data.get("diagnostics") or ()]
    return Preview(stack, steps, diags)


def provider_class(pickled: Any) -> str | None:
    """The class name of a dynamic provider from its `__provider` input (a base64 pickle of an
    instance, the class by reference), read without importing it; None when it is not readable
    (masked as a secret, unknown)."""
    if not isinstance(pickled, str) or pickled in (SECRET, UNKNOWN):
        return None
    try:
        ops = list(pickletools.genops(base64.b64decode(pickled, validate=True)))
    except (ValueError, TypeError):
        return None
    strings: list[str] = []
    for op, arg, _pos in ops:
        if isinstance(arg, str) and "UNICODE" in op.name:
            strings.append(arg)
        elif op.name == "STACK_GLOBAL" and strings:
            return strings[-1]
        elif op.name == "GLOBAL" and isinstance(arg, str):
            return arg.split()[-1]
    return None


def failed_run(stack: str, output: str) -> Preview:
    """A preview that printed no JSON (the engine stopped before the program ran)."""
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    return Preview(stack, failure="\n".join(lines[-6:]) or "pulumi preview failed without output")


# --- property paths and diffs ----------------------------------------------------------------------

_SEGMENT = re.compile(r'\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]|\.?([^.\[\]]+)')


def parse_path(text: str) -> Path:
    """A Pulumi property path (`a.b[0]["c.d"]`) as a tuple of keys and indexes."""
    out: list[Any] = []
    for quoted, index, plain in _SEGMENT.findall(text):
        out.append(int(index) if index else (quoted or plain))
    return tuple(out)


def format_path(path: Path) -> str:
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif re.fullmatch(r"[A-Za-z0-9_*:-]+|\{[^}]*\}", str(seg)):
            out += f".{seg}" if out else str(seg)
        else:
            out += f'["{seg}"]'
    return out


def path_sort_key(path: Path) -> tuple:
    return tuple((0, s, "") if isinstance(s, int) else (1, 0, str(s)) for s in path)


def get_path(value: Any, path: Path) -> Any:
    """The value at `path`, through JSON held in strings as diff_values reads it; MISSING if none."""
    for seg in path:
        value = decoded(value)
        if isinstance(value, dict) and seg in value:
            value = value[seg]
        elif isinstance(value, list) and isinstance(seg, int) and seg < len(value):
            value = value[seg]
        else:
            return MISSING
    return value


def decoded(value: Any) -> Any:
    """A string holding a JSON object or array as that object or array, anything else as it is.
    Pulumi's own diff display reads such strings the same way (a lab node's `spec` is one)."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        if isinstance(parsed, (dict, list)):
            return parsed
    return value


def diff_values(old: Any, new: Any, path: Path = ()) -> list[Change]:
    """Leaf-level differences between two input trees, in a stable order; JSON held in strings is
    compared as what it holds (`decoded`), so one changed setting is one change."""
    if old == new:
        return []
    old, new = decoded(old), decoded(new)
    if old == new:
        return []
    if new == UNKNOWN or old == UNKNOWN:
        return [Change(path, old, new)]
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[Change] = []
        for key in sorted(set(old) | set(new)):
            if not path and key in IGNORED_INPUTS:
                continue
            out.extend(diff_values(old.get(key, MISSING), new.get(key, MISSING), (*path, key)))
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i in range(max(len(old), len(new))):
            out.extend(diff_values(old[i] if i < len(old) else MISSING, new[i] if i < len(new) else MISSING,
                                   (*path, i)))
        return out
    return [Change(path, old, new)]


def fan_out(changes: Iterable[Change], old: Any, new: Any) -> list[tuple[Path, Any, Any, list[str]]]:
    """Changes with per-record keys folded: where a mapping's values are all mappings (one per
    node, `hosts.gpu-0...`), the key becomes `*` and identical changes under different keys are
    one entry listing the keys. Returns (pattern, old, new, keys), keys empty where nothing folded."""
    groups: dict[tuple, list[str]] = {}
    order: list[tuple] = []
    for ch in changes:
        pattern, key = _fold_point(ch.path, old, new)
        ident = (pattern, _hashable(ch.old), _hashable(ch.new)) if key is not None else (ch.path, _hashable(ch.old),
                                                                                        _hashable(ch.new))
        if ident not in groups:
            groups[ident] = []
            order.append((ident, ch))
        if key is not None:
            groups[ident].append(key)
    out = []
    for ident, ch in order:
        keys = groups[ident]
        if len(keys) > 1:
            out.append((ident[0], ch.old, ch.new, keys))
        else:
            out.append((ch.path, ch.old, ch.new, []))
    return out


def _fold_point(path: Path, old: Any, new: Any) -> tuple[Path, str | None]:
    for i in range(len(path)):
        parent_old, parent_new = get_path(old, path[:i]), get_path(new, path[:i])
        parent = parent_new if isinstance(parent_new, dict) else parent_old
        if isinstance(parent, dict) and isinstance(path[i], str) and len(parent) > 1 \
                and all(isinstance(v, dict) for v in parent.values()):
            return (*path[:i], "*", *path[i + 1:]), path[i]
    return path, None


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value
