"""Planner section: `railyard plan` summary and detail at 256, 3,584, 20,000 and 65,536 GPUs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from railyard.bench.harness import Context, Sample, Section

# GPUs -> DGX H100 nodes (8 GPUs each) on an NDR rail-optimized fabric of QM9700s.
SIZES = (256, 3_584, 20_000, 65_536)
TARGET_SUMMARY_20K_S = 1.0


def stack_file(workdir: Path, gpus: int) -> Path:
    path = workdir / f"Pulumi.plan{gpus}.yaml"
    config = {
        "railyard:region": "bench",
        "railyard:layout": "bare-metal",
        "railyard:driver": "coreweave",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": gpus // 8}],
        "railyard:fabric": {
            "compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": "10.64.0.0/11"},
            "storage": {"cidr": "10.32.0.0/13"},
            "management": {"cidr": "10.16.0.0/13"},
        },
        # The driver's own section, which `railyard plan` validates; its ranges apart from the plan's.
        "railyard:coreweave": {"zone": "US-EAST-04A", "cluster": {
            "version": "v1.32", "podCidr": {"name": "pods", "cidr": "172.16.0.0/16"},
            "serviceCidr": {"name": "services", "cidr": "172.17.0.0/16"},
            "internalLbCidrs": [{"name": "lbs", "cidr": "172.18.0.0/16"}]}},
    }
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return path


def measure(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "railyard.bench.measure", *args], capture_output=True, text=True,
                         check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["rc"] != 0:
        raise RuntimeError(f"railyard {' '.join(args)} exited {result['rc']}: {out.stderr[-2000:]}")
    return result


def run(ctx: Context):
    for gpus in (SIZES[:2] if ctx.quick else SIZES):
        path = stack_file(ctx.workdir, gpus)
        summary = measure("plan", "--json", str(path))
        target = TARGET_SUMMARY_20K_S if gpus == 20_000 else None
        yield Sample(f"plan summary, {gpus:,} GPUs: wall", summary["wall_s"], "s", target=target)
        yield Sample(f"plan summary, {gpus:,} GPUs: peak RSS", summary["peak_rss_mib"], "MiB")
        detail = measure("plan", "--json", "--detail", str(path))
        yield Sample(f"plan --detail, {gpus:,} GPUs: wall", detail["wall_s"], "s")
        yield Sample(f"plan --detail, {gpus:,} GPUs: peak RSS", detail["peak_rss_mib"], "MiB")


SECTIONS = (Section("planner", "railyard plan (summary and --detail) from 256 to 65,536 GPUs", run),)
