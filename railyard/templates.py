"""The one Jinja2 renderer: templates/ under StrictUndefined, so a missing value is an error,
never an empty string in a rendered file. The roles' templates are on its path too, for a file
Railyard writes in a form a role also writes (ROLE_NCCL_TOPOLOGY)."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2
import yaml

from railyard.paths import PROJECT_ROOT


def _to_yaml(value: Any, indent: int = 0) -> str:
    text = yaml.safe_dump(value, sort_keys=True, default_flow_style=False, width=1000).rstrip("\n")
    pad = " " * indent
    return "\n".join(pad + line if line else line for line in text.splitlines())


# NCCL_TOPO_FILE's <system> from a list of <cpu> elements; the gpu_nic_affinity role writes the host's.
ROLE_NCCL_TOPOLOGY = "gpu_nic_affinity/templates/_nccl-topo-system.xml.j2"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(PROJECT_ROOT / "templates"), str(PROJECT_ROOT / "playbooks" / "roles")]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701 - YAML and config files, not HTML
    )
    env.filters["to_yaml"] = _to_yaml
    return env


def render(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)
