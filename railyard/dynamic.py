"""The base of Railyard's Python dynamic resources: each has a type of its own.

A plain `pulumi.dynamic.Resource` is typed `pulumi-python:dynamic:Resource`, so a preview of a lab
or hosts stack was a column of identical types. Since pulumi#7633 a subclass names its type
(`module=`, `name=`); a subclass of TypedResource does, and carries an alias to the plain type so a
stack brought up before it had types is taken over without a replace or a delete (the lab's
test_no_behaviour_change brings one up with the old code).

The provider of each resource is pickled into state by reference to its class's module path; those
paths are pinned by tests/unit/test_dynamic_types.py, so a move keeps an importable alias.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
from pulumi.dynamic import Resource, ResourceProvider

from railyard.engine.state_types import UNTYPED_DYNAMIC


class TypedResource(Resource):
    """A dynamic resource with a type of its own; subclasses name it: `class X(TypedResource,
    module="lab", name="Node")` is `pulumi-python:dynamic/lab:Node`."""

    def __init__(self, provider: ResourceProvider, name: str, props: Any,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        if self._resource_type_name == "dynamic:Resource":
            raise TypeError(f"{type(self).__name__} names no type (module=, name= on the class)")
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=UNTYPED_DYNAMIC)]))
        super().__init__(provider, name, props, opts)


def wire_numbers(value: Any) -> Any:
    """Pulumi's wire format carries every number as a float; role variables want their integers
    back (a hugepage count written as "512.0" is not a count)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: wire_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [wire_numbers(v) for v in value]
    return value


def one_value(doc: Any) -> str:
    """A document as the one JSON string state holds of it (keys sorted, no spaces, so equal
    documents are equal strings). The engine keeps every property value of every resource as an
    object of its own, about 1.4 KB each, in inputs, outputs and every preview's events: a lab
    node's settings or a host's hardware facts (1,160 values for a dgx-h100) cost one as a string."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def from_one_value(value: Any) -> Any:
    """one_value's document again; a mapping or list (a state written before) as it is."""
    return json.loads(value) if isinstance(value, str) else value
