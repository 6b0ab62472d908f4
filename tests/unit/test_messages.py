"""The messages one layer writes and the review reads back (railyard.messages): what the writer
produces, the reader understands."""

from __future__ import annotations

from railyard.drivers.base import DriverNotImplemented
from railyard.messages import not_implemented_driver, split_drift_line
from railyard.review.render import render_drift
from railyard.tuning.runner import Change


def test_the_runners_drift_lines_are_grouped_by_the_review_per_change_with_their_nodes():
    lines = [str(Change("gpu-10", "vm.nr_hugepages", "0", "1024")),
             str(Change("gpu-2", "vm.nr_hugepages", "0", "1024")),
             str(Change("gpu-2", "kernel cmdline", "-", "iommu=pt"))]
    assert split_drift_line(lines[0]) == ("gpu-10", "vm.nr_hugepages 0 → 1024")
    assert render_drift(lines) == ["    - `vm.nr_hugepages 0 → 1024` on `gpu-2`, `gpu-10`",
                                   "    - `kernel cmdline - → iommu=pt` on `gpu-2`"]
    assert split_drift_line("a line of another form") == ("", "a line of another form")


def test_the_driver_bases_stop_is_recognised_by_the_review():
    message = f"error: Program failed with an unhandled exception: {DriverNotImplemented('gcp')}"
    assert not_implemented_driver(message) == "gcp"
    assert not_implemented_driver("error: something else") is None
