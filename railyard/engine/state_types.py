"""How a stack's state names Railyard's Python dynamic resources (railyard/dynamic.py gives them
their types). Pure: the lab's garbage collector reads state with it without importing Pulumi."""

from __future__ import annotations

# The one type every Python dynamic resource had before each named its own; stacks brought up
# before then still hold it until their next `up`.
UNTYPED_DYNAMIC = "pulumi-python:dynamic:Resource"


def is_dynamic(type_: str) -> bool:
    """Whether a state's resource type is a Python dynamic resource's, untyped or typed."""
    return type_ == UNTYPED_DYNAMIC or type_.startswith("pulumi-python:dynamic/")
