"""The lab's fault journal (railyard.drivers.lab.faults) changed by one writer at a time: a node's
power supervisor clears its transient faults as it boots while the CLI may be recording another."""

from __future__ import annotations

import json
import threading

from railyard import paths
from railyard.drivers.lab import faults


def test_a_boot_clearing_its_faults_waits_for_a_change_in_progress_and_loses_nothing(tmp_path):
    paths.lab_dir("s", tmp_path).mkdir(parents=True)
    transient = {"kind": "xid", "target": ["gpu-0", "0"], "undo": [], "said": "gpu-0: Xid 79", "transient": True}
    faults._save("s", [transient], tmp_path)
    cleared: list[list[str]] = []
    with faults._journal_locked("s", tmp_path):
        # Another writer's read-modify-write: it has read the journal and is about to add to it.
        entries = faults._journal("s", tmp_path)
        booting = threading.Thread(target=lambda: cleared.append(faults.clear_at_boot("s", "gpu-0", tmp_path)))
        booting.start()
        booting.join(0.5)  # time for the boot to run, were it not held off
        assert cleared == [] and booting.is_alive()
        other = {"kind": "firmware", "target": ["gpu-1", "mlx5_0", "28.39.1002"], "undo": [], "said": "gpu-1: flashed"}
        faults._save("s", entries + [other], tmp_path)
    booting.join(10)
    # The boot read the journal after the other write: the new fault is kept, the transient gone.
    assert cleared == [["gpu-0: Xid 79"]]
    assert json.loads(faults.journal_path("s", tmp_path).read_text()) == [other]
