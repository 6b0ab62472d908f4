"""The one YAML loader of the model layer: safe, fast (libyaml when present), and strict about
duplicate keys, which plain YAML resolves silently by keeping the last one and hiding a mistake."""

from __future__ import annotations

from typing import Any

import yaml

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StrictLoader(_Base):  # type: ignore[misc, valid-type]
    """A safe loader that refuses a key given twice in one mapping."""


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key; construct_mapping reports it with its line
            break
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load(text: str) -> Any:
    """Parse one YAML document; raises yaml.YAMLError (MarkedYAMLError with a line where known)."""
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a safe loader
