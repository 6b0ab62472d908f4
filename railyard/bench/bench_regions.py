"""Regions section: the region stacks' programs under Pulumi's mock engine, beside the lab driver at
the same size.

The CoreWeave and OpenStack provider plugins cannot be built here, so the real engine cannot run
these stacks; the mock engine runs the same program (components and driver) and records every
registration, which is the program's own cost. Each run is a fresh interpreter
(`python -m railyard.bench.bench_regions STACK_FILE`), so nothing is imported or cached from an
earlier one. Resources per node say how a driver scales: CoreWeave's NodePools are one resource
per pool, OpenStack's machines are a server and its ports per VM, the lab's a namespace per node.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path


from railyard import paths
from railyard.model.spec import read_stack_file
from railyard.bench.bench_engine import preview_config
from railyard.bench.harness import Context, Sample, Section

REGIONS = ("us-east-bm", "us-south-vela")


class _Mocks:
    """pulumi.runtime.Mocks whose resources echo their inputs (a CKS cluster also gets an endpoint)."""

    def new_resource(self, args):
        outs = dict(args.inputs)
        if args.typ.endswith("cksCluster:CksCluster"):
            outs["apiServerEndpoint"] = "bench.k8s.example"
        return f"{args.name}-id", outs

    def call(self, args):
        return {}


def register(config: dict, stack: str) -> dict:
    """Build the program's Cluster for `config` under mocks; the registration's wall time and counts."""
    import pulumi
    from pulumi.runtime.mocks import MockMonitor

    from railyard.model.plan import make_plan
    from railyard.stack import parse_config

    started = time.perf_counter()
    pulumi.runtime.set_mocks(type("M", (_Mocks, pulumi.runtime.Mocks), {})(), project="railyard", stack=stack,
                             preview=True)
    # Tokens and keys the drivers read from the stack's secrets; any value does under mocks.
    pulumi.runtime.set_all_config({"coreweave:token": "bench"}, secret_keys=["coreweave:token"])
    sys.path.insert(0, str(paths.PROJECT_ROOT))
    from components.cluster import Cluster, ClusterArgs
    from railyard.drivers.base import load_driver

    spec = parse_config(config, stack)
    plan = make_plan(spec)
    Cluster(spec.stack, ClusterArgs(spec=spec, plan=plan), load_driver(spec, plan))
    asyncio.get_event_loop().run_until_complete(pulumi.runtime.stack.wait_for_rpcs())
    wall = time.perf_counter() - started
    monitor = pulumi.runtime.settings.get_monitor()
    assert isinstance(monitor, MockMonitor), "set_mocks() above installed it"
    types = Counter(u.split("::")[2].rsplit("$", 1)[-1] for u in monitor.resources)
    machines = sum(len(n.vms) if spec.virtual and n.vms else 1 for n in plan.nodes)
    return {"wall_s": wall, "resources": sum(types.values()), "machines": machines, "types": dict(types)}


def measure(config: dict, stack: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "railyard.bench.bench_regions", stack], input=json.dumps(config),
                          capture_output=True, text=True, check=False, cwd=paths.PROJECT_ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"mock registration of {stack} failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def region_config(stack: str) -> dict:
    path = paths.stack_file(stack, paths.PROJECT_ROOT)
    return dict(read_stack_file(path)[0])


def run(ctx: Context):
    for stack in REGIONS:
        ours = measure(region_config(stack), stack)
        machines = ours["machines"]
        lab = measure(preview_config(machines), f"lab{machines}")
        label = f"{stack} under the mock engine ({machines:,} machines)"
        yield Sample(f"{label}: registration wall", ours["wall_s"], "s")
        yield Sample(f"{label}: resources", ours["resources"], "")
        yield Sample(f"{label}: resources per machine", ours["resources"] / machines, "",
                     note=", ".join(f"{t.rsplit(':', 1)[-1]} {n}" for t, n in sorted(ours["types"].items(),
                                                                                   key=lambda x: -x[1])[:6]))
        yield Sample(f"lab driver, {machines:,} bare-metal nodes, mock engine: registration wall", lab["wall_s"], "s")
        yield Sample(f"lab driver, {machines:,} bare-metal nodes, mock engine: resources per node",
                     lab["resources"] / machines, "")


SECTIONS = (Section("regions", "the region stacks (coreweave, openstack) under the mock engine, beside the lab", run),)


if __name__ == "__main__":
    print(json.dumps(register(json.load(sys.stdin), sys.argv[1])))
