"""host_hw under --tags: one role's tag alone still gets the hardware read it depends on (the read
is tagged always, as the argument-spec check that marks the role as run is)."""

from __future__ import annotations

import pytest

from tests.roles.conftest import make_host

pytestmark = pytest.mark.roles

READ = "Read the kernel command line, the CPU vendor, the NUMA nodes, NICs and PCIe bridges"


@pytest.mark.parametrize("tag", ["iommu", "hugepages"])
def test_one_kernel_role_tagged_alone_reads_the_hardware_once_and_converges(tmp_path, tag):
    host = make_host("dgx-h100", tmp_path / "h", "http://127.0.0.1:9")
    extra = {"host_boot_bootloader_command": ["true"]}
    run = host.run(tags=tag, extra=extra)
    assert run.rc == 0, run.failed_tasks() or run.stdout[-3000:]
    reads = [e for e in run.events if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == READ]
    assert len(reads) == 1, [e["event_data"].get("task") for e in run.events if e.get("event") == "runner_on_ok"]
    assert run.changed() > 0, "the role's drop-in was written"
    again = host.run(tags=tag, extra=extra)
    assert again.rc == 0 and again.changed() == 0, again.changed_tasks()
