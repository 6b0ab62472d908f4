"""The one load of a stack file: the spec parsed with every driver's rules, then the whole plan.

`load(path) -> (Spec, Plan)` is what the Pulumi program, `railyard validate|plan|tune|review` and
the benchmarks call; each consumer then only reads the plan. The fabric is planned once, during
validation, and the plan takes that very FabricPlan.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from railyard import drivers
from railyard.model import spec as spec_module
from railyard.model.plan import Plan, make_plan
from railyard.model.spec import Spec

if TYPE_CHECKING:
    from railyard.model.catalog import Catalog


def load(path: str | Path, catalog: Catalog | None = None) -> tuple[Spec, Plan]:
    """The validated spec and the plan of a stack file; raises SpecError with every problem."""
    config, stack = spec_module.read_stack_file(path)
    return from_config(config, stack, catalog)


def from_config(config: Mapping[str, Any], stack: str = "dev", catalog: Catalog | None = None) -> tuple[Spec, Plan]:
    """As load, for a stack's `config:` mapping already in hand."""
    if catalog is None:
        from railyard.model.catalog import load_catalog

        catalog = load_catalog()
    spec, fabric = spec_module.parse(config, stack, drivers.rules(), catalog)
    return spec, make_plan(spec, catalog, fabric=fabric)


def parse_config(config: Mapping[str, Any], stack: str = "dev", catalog: Catalog | None = None) -> Spec:
    """Only the validated spec (what `railyard validate` and the spec's tests need)."""
    return spec_module.parse(config, stack, drivers.rules(), catalog)[0]


def load_stack_file(path: str | Path, catalog: Catalog | None = None) -> Spec:
    """Only the validated spec of a stack file."""
    config, stack = spec_module.read_stack_file(path)
    return parse_config(config, stack, catalog)


def applied_from(stack_file: str | Path) -> dict[str, str]:
    """What the program computes the stack's outputs from: the stack file's sha256. The stack
    exports the one its last run of the program saw (`appliedFrom`), so a run that records only
    outputs can tell whether they would describe settings never applied. Railyard's own code is
    not in it: the health workflow runs the default branch's newest commit, so nearly every commit
    would stop its records until the next `up`."""
    import hashlib

    return {"stackFile": hashlib.sha256(Path(stack_file).read_bytes()).hexdigest()}


def documented_keys() -> list[str]:
    """Every config key Railyard reads, the drivers' own included (docs/stack-reference.md lists them)."""
    return spec_module.documented_keys(drivers.rules())
