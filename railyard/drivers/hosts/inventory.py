"""Reading the hosts of an Ansible inventory file, without an Ansible runtime.

Ansible's own inventory plugins need Ansible; the two static formats people write by hand are
small enough to read here, with the line of every host so a problem can name it:

* YAML (`.yml`, `.yaml`, `.json`): groups at the top level (usually `all:`), each a mapping of
  `hosts` (host -> its variables, or nothing), `children` (group -> a group mapping) and `vars`.
* INI (any other name): `[group]` sections of `host [key=value ...]` lines, `[group:vars]`
  sections of `key=value` lines, `[group:children]` sections of group names; hosts before the
  first section are in `ungrouped`. `#` and `;` start comments.

Both expand Ansible's host ranges (`dgx-[01:32]`, `node-[a:f]`, `[0:30:10]`). A host's variables
are its groups' (`all` first, deeper groups after, siblings by ansible_group_priority then name,
as Ansible merges them) and then its own.
Dynamic inventories (scripts, plugins), `host_vars/` and `group_vars/` directories are not read.

`read(path, group) -> [InventoryHost]`: the group's hosts in order (its own first, then each child
group's in turn, depth first; each host once); raises InventoryError naming the line where known.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from railyard.model import yamlio

YAML_SUFFIXES = (".yml", ".yaml", ".json")
GROUP_KEYS = ("hosts", "children", "vars")

_RANGE = re.compile(r"\[([^\[\]:]*):([^\[\]:]+)(?::([^\[\]:]+))?\]")
_GROUP = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_HOST = re.compile(r"^[^\s\[\],=#;]+$")
_SECTION = re.compile(r"^\[([^\]\s:]+)(?::([A-Za-z]+))?\]\s*(?:[#;].*)?$")


class InventoryError(Exception):
    """An inventory file that cannot be read: what is wrong and, where known, its line."""

    def __init__(self, message: str, line: int | None = None):
        self.message = message
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message)


@dataclass(frozen=True)
class InventoryHost:
    name: str
    """inventory_hostname."""
    line: int | None
    """Where the file first names it."""
    vars: dict[str, Any] = field(default_factory=dict)
    """Its variables, its groups' merged under its own."""


@dataclass
class _Group:
    name: str
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)


class _Inventory:
    def __init__(self) -> None:
        self.groups: dict[str, _Group] = {"all": _Group("all")}
        self.host_vars: dict[str, dict[str, Any]] = {}
        self.host_line: dict[str, int | None] = {}

    def group(self, name: str, line: int | None) -> _Group:
        if not _GROUP.match(name):
            raise InventoryError(f"{name!r} is not a group name (letters, digits, '_', '-', '.')", line)
        if name not in self.groups:
            self.groups[name] = _Group(name)
        return self.groups[name]

    def add_host(self, group: str, name: str, hvars: dict[str, Any], line: int | None) -> None:
        g = self.groups[group]
        if name not in g.hosts:
            g.hosts.append(name)
        self.host_vars.setdefault(name, {}).update(hvars)
        self.host_line.setdefault(name, line)

    def add_child(self, parent: str, child: str) -> None:
        p, c = self.groups[parent], self.groups[child]
        if child not in p.children:
            p.children.append(child)
        if parent not in c.parents:
            c.parents.append(parent)

    def finish(self) -> None:
        """Every group without a parent is a child of `all`, as in Ansible."""
        for name, g in self.groups.items():
            if name != "all" and not g.parents:
                self.add_child("all", name)

    def _depths(self) -> dict[str, int]:
        depth = {"all": 0}

        def of(name: str, seen: tuple[str, ...]) -> int:
            if name in depth:
                return depth[name]
            if name in seen:
                raise InventoryError(f"group {name!r} is a child of itself ({' -> '.join(seen + (name,))})")
            parents = self.groups[name].parents or ["all"]
            depth[name] = 1 + max(of(p, seen + (name,)) for p in parents)
            return depth[name]

        for name in self.groups:
            of(name, ())
        return depth

    def _priority(self, name: str) -> int:
        """ansible_group_priority: among sibling groups at one depth, the higher merges later and
        wins (Ansible's default is 1)."""
        value = self.groups[name].vars.get("ansible_group_priority", 1)
        try:
            return int(value)
        except (TypeError, ValueError):
            raise InventoryError(f"group {name!r}: ansible_group_priority {value!r} is not an integer") from None

    def hosts_of(self, group: str) -> list[InventoryHost]:
        if group not in self.groups:
            known = ", ".join(sorted(self.groups))
            raise InventoryError(f"no group {group!r}; its groups: {known}")
        depth = self._depths()
        member_of: dict[str, set[str]] = {}
        for name, g in self.groups.items():
            for h in g.hosts:
                member_of.setdefault(h, set()).add(name)
        order: list[str] = []
        seen_groups: set[str] = set()

        def walk(name: str) -> None:
            if name in seen_groups:
                return
            seen_groups.add(name)
            g = self.groups[name]
            order.extend(h for h in g.hosts if h not in order)
            for child in g.children:
                walk(child)

        walk(group)
        out = []
        for h in order:
            # A host's groups and their ancestors, shallow first; deeper groups override, then the host.
            groups: set[str] = set()
            todo = list(member_of.get(h, ()))
            while todo:
                name = todo.pop()
                if name not in groups:
                    groups.add(name)
                    todo.extend(self.groups[name].parents or (["all"] if name != "all" else []))
            merged: dict[str, Any] = {}
            for name in sorted(groups, key=lambda n: (depth[n], self._priority(n), n)):
                merged.update(self.groups[name].vars)
            merged.update(self.host_vars.get(h, {}))
            out.append(InventoryHost(h, self.host_line.get(h), merged))
        return out


def expand(pattern: str, line: int | None = None) -> list[str]:
    """Ansible's host ranges: `dgx-[01:03]` -> dgx-01, dgx-02, dgx-03; `[a:c]`; `[0:20:10]`."""
    m = _RANGE.search(pattern)
    if m is None:
        return [pattern]
    head, tail = pattern[:m.start()], pattern[m.end():]
    begin, end, step_text = m.group(1) or "0", m.group(2), m.group(3)
    try:
        step = int(step_text) if step_text else 1
    except ValueError:
        raise InventoryError(f"{pattern!r}: the step of a host range is a number", line) from None
    if step < 1:
        raise InventoryError(f"{pattern!r}: the step of a host range is at least 1", line)
    if begin.isdigit() and end.isdigit():
        width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
        if width and len(end) != width:
            raise InventoryError(f"{pattern!r}: a zero-padded host range gives both ends the same width", line)
        values = [str(i).zfill(width) for i in range(int(begin), int(end) + 1, step)]
    elif len(begin) == 1 and len(end) == 1 and begin.isalpha() and end.isalpha():
        values = [chr(c) for c in range(ord(begin), ord(end) + 1, step)]
    else:
        raise InventoryError(f"{pattern!r}: a host range is [start:end] of numbers or of single letters", line)
    if not values:
        raise InventoryError(f"{pattern!r}: the host range is empty (start after end)", line)
    return [h for v in values for h in expand(head + v + tail, line)]


def read(path: Path, group: str = "all") -> list[InventoryHost]:
    """The hosts of `group` in the inventory file at path; raises InventoryError (OSError too)."""
    text = path.read_text(encoding="utf-8")
    inv = _yaml(text) if path.suffix.lower() in YAML_SUFFIXES else _ini(text)
    inv.finish()
    return inv.hosts_of(group)


# --- YAML ---------------------------------------------------------------------------------------


class _InventoryLoader(yamlio.StrictLoader):  # type: ignore[misc, valid-type]
    """The project's strict YAML, where a value tagged for Ansible (`!vault`, `!unsafe`) is kept
    as an opaque text: Railyard reads only connection settings, and one encrypted variable must not
    make the whole inventory unreadable."""


_InventoryLoader.add_multi_constructor("!", lambda loader, tag, node: f"<{tag} value, not read by Railyard>")


def _yaml(text: str) -> _Inventory:
    loader = _InventoryLoader(text)
    try:
        root = loader.get_single_node()
        inv = _Inventory()
        if root is None:
            return inv
        if not isinstance(root, yaml.MappingNode):
            raise InventoryError("the file is not a mapping of groups (e.g. `all:`)", _line(root))
        for key, value in _items(root):
            _yaml_group(loader, inv, key, value, parent=None)
        return inv
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise InventoryError(f"invalid YAML ({what})", mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise InventoryError(f"invalid YAML ({exc})") from None
    finally:
        loader.dispose()


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _items(node: yaml.MappingNode) -> list[tuple[yaml.ScalarNode, yaml.Node]]:
    seen: dict[str, int] = {}
    out = []
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode) or not key.value:
            raise InventoryError("a key that is not a name", _line(key))
        if key.value in seen:
            raise InventoryError(f"{key.value!r} given twice in one mapping (first at line {seen[key.value]})",
                                 _line(key))
        seen[key.value] = _line(key)
        out.append((key, value))
    return out


def _empty(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")


def _yaml_group(loader: Any, inv: _Inventory, key: yaml.ScalarNode, node: yaml.Node, parent: str | None) -> None:
    name = key.value
    g = inv.group(name, _line(key))
    if parent is not None:
        inv.add_child(parent, name)
    if _empty(node):
        return
    if not isinstance(node, yaml.MappingNode):
        raise InventoryError(f"group {name!r} is not a mapping of {', '.join(GROUP_KEYS)}", _line(node))
    for k, v in _items(node):
        if k.value not in GROUP_KEYS:
            raise InventoryError(f"group {name!r} has a key {k.value!r}; a group has {', '.join(GROUP_KEYS)}",
                                 _line(k))
        if _empty(v):
            continue
        if not isinstance(v, yaml.MappingNode):
            what = {"hosts": "host -> its variables", "children": "group -> its hosts and children",
                    "vars": "variable -> value"}[k.value]
            raise InventoryError(f"{k.value} of group {name!r} is not a mapping ({what})", _line(v))
        if k.value == "vars":
            g.vars.update(loader.construct_object(v, deep=True))
        elif k.value == "children":
            for ck, cv in _items(v):
                _yaml_group(loader, inv, ck, cv, parent=name)
        else:
            for hk, hv in _items(v):
                hvars: dict[str, Any] = {}
                if not _empty(hv):
                    if not isinstance(hv, yaml.MappingNode):
                        raise InventoryError(f"host {hk.value!r}: its variables are not a mapping", _line(hv))
                    hvars = loader.construct_object(hv, deep=True)
                line = _line(hk)
                for host in expand(hk.value, line):
                    if not _HOST.match(host):
                        raise InventoryError(f"{host!r} is not a host name", line)
                    inv.add_host(name, host, hvars, line)


# --- INI ----------------------------------------------------------------------------------------


def _value(text: str) -> Any:
    """An INI value as Ansible's INI plugin reads it: a Python literal where it is one (a quoted
    string loses its quotes, a number is a number), else the text as written."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, (str, int, float, bool, list, dict)) or value is None else text


def _pairs(tokens: list[str], line: int) -> dict[str, Any]:
    out = {}
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise InventoryError(f"{token!r} is not key=value", line)
        out[key] = _value(value)
    return out


def _ini(text: str) -> _Inventory:
    inv = _Inventory()
    inv.group("ungrouped", None)
    group, kind = "ungrouped", "hosts"
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            m = _SECTION.match(line)
            if not m:
                raise InventoryError(f"{line!r} is not a section header: [group], [group:vars] or "
                                     "[group:children]", n)
            group, kind = m.group(1), (m.group(2) or "hosts")
            if kind not in ("hosts", "vars", "children"):
                raise InventoryError(f"[{group}:{kind}]: a section is [group], [group:vars] or [group:children]", n)
            inv.group(group, n)
            continue
        if kind == "vars":
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise InventoryError(f"{line!r} in [{group}:vars] is not key=value", n)
            inv.groups[group].vars[key.strip()] = _value(value.strip())
            continue
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as exc:
            raise InventoryError(f"{line!r}: {exc}", n) from None
        if not tokens:
            continue
        if kind == "children":
            if len(tokens) != 1:
                raise InventoryError(f"{line!r} in [{group}:children] is not one group name", n)
            inv.group(tokens[0], n)
            inv.add_child(group, tokens[0])
            continue
        name, hvars = tokens[0], _pairs(tokens[1:], n)
        if "=" in name:
            raise InventoryError(f"{line!r} does not start with a host name", n)
        # `host:port`, as Ansible's INI reads it (an IPv6 address has more than one colon; a
        # host range's colons are inside its brackets).
        if re.sub(r"\[[^\]]*\]", "", name).count(":") == 1:
            name, port = name.rsplit(":", 1)
            if not port.isdigit():
                raise InventoryError(f"{tokens[0]!r}: the port after ':' is not a number", n)
            hvars.setdefault("ansible_port", int(port))
        for host in expand(name, n):
            if not _HOST.match(host):
                raise InventoryError(f"{host!r} is not a host name", n)
            inv.add_host(group, host, hvars, n)
    return inv
