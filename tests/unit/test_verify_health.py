"""The health part of `railyard verify` (railyard.verify.health) on real tool output: the script a
node runs splits into its tools' sections, a node's findings name it, and a tool that is missing is
a note that says so, never a pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

from railyard import verify
from railyard.model import health_check
from railyard.stack import load

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "railyard" / "data" / "fixtures" / "gpu"


def test_the_node_script_names_each_missing_tool_and_its_sections_split_back():
    # Run here, with a PATH holding neither nvidia-smi nor dcgmi: what a node without them prints.
    out = subprocess.run(["/bin/sh", "-c", health_check.HEALTH_SCRIPT, "health", "1"], capture_output=True, text=True,
                         env={"PATH": "/nonexistent"}, check=True).stdout
    assert list(health_check.split_sections(out)) == ["nvidia-smi-missing", "dcgmi-missing"]


def test_findings_name_their_node_and_missing_tools_are_not_a_pass():
    _, plan = load(ROOT / "stacks" / "Pulumi.lab.yaml")  # two dgx-h100
    readings = {
        # An A100 node's real nvidia-smi output, and an H100's real Xid lines, where H100s are planned.
        "gpu-0": {"nvidia-smi": (GPU / "nvidia-smi-q-x-a100-sxm4-mig-healthy.xml").read_text(),
                  "nvlink": (GPU / "nvidia-smi-nvlink-status-h100-gpu0.txt").read_text(),
                  "kernel-log": (GPU / "xid-13-109-dmesg.txt").read_text(), "dcgmi-missing": ""},
        "gpu-1": {"nvidia-smi-missing": "", "dcgmi-missing": ""},
    }
    found, notes, ran = verify.health(plan, readings)
    assert ran
    assert [(f.kind, f.node, f.where) for f in found] == [
        ("gpu-count", "gpu-0", "gpu-0"), ("gpu-model", "gpu-0", "00000000:01:00.0"),
        ("xid", "gpu-0", "0000:cb:00"), ("xid", "gpu-0", "0000:cb:00")]
    assert all(f.message.startswith("gpu-0: ") for f in found)
    assert notes == ["health not run: dcgmi missing: gpu-0, gpu-1", "health not run: nvidia-smi missing: gpu-1"]
    _, notes, ran = verify.health(plan, {"gpu-0": {"nvidia-smi-missing": "", "dcgmi-missing": ""}})
    assert not ran and notes[0] == "health not run: nvidia-smi missing: gpu-0"
