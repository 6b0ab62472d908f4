"""The lab tests' project copy: railyard.bench.stack_project, shared with the benchmarks so both
run the engine the same way."""

from railyard.bench.stack_project import PulumiFailed, StackProject

__all__ = ["PulumiFailed", "StackProject"]
