"""The one error type of the model: every problem with a stack, reported together.

Modelled on cluster-toolkit's validate.go: a validator does not stop at the first mistake; it
collects each one with the config path it belongs to, what it found there, what would have been
accepted, and a hint, so a user fixes a whole stack file in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a stack.

    path:    where it is, e.g. ``railyard:fabric.compute.speed`` or ``railyard:nodePools[0].count``
             (for a file that is not valid YAML: ``<file>:<line>:<column>``)
    found:   what is there, already rendered for a person; secrets are never rendered
    allowed: what would be accepted there
    hint:    how to fix it (may be empty)
    """

    path: str
    found: str
    allowed: str
    hint: str = ""

    def __str__(self) -> str:
        line = f"{self.path}: found {self.found}; allowed: {self.allowed}"
        if self.hint:
            line += f"; hint: {self.hint}"
        # One problem, one line: a value with a newline in it must not break the list apart.
        return " ".join(line.splitlines())


class SpecError(Exception):
    """A stack that cannot be used, with every problem found in it."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems: tuple[Problem, ...] = tuple(problems)
        if not self.problems:
            raise ValueError("SpecError needs at least one problem")
        super().__init__(self.problems)

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)

    def report(self, where: str) -> str:
        """Every problem under one heading, as every command prints them: `WHERE: N problems`,
        then one indented line each."""
        n = len(self.problems)
        return "\n".join([f"{where}: {n} problem{'s' if n != 1 else ''}", *(f"  {p}" for p in self.problems)])

    def paths(self) -> list[str]:
        """The config paths of all problems, in the order they were found."""
        return [p.path for p in self.problems]
