"""Kubernetes section: what the layer adds to the preview of a 448-node stack (wall, memory,
resources per node), beside the same stack without it; and `up` of the layer on a 32-node lab
(the control plane and every object), with the API server's resident memory after it.

The preview stacks are fresh (nothing is created), on the lab driver like the engine section's.
The lab stack goes up without the layer first; the measured `up` is the one that adds
railyard:kubernetes, so its wall is the control plane's start plus the layer's objects.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import time
from pathlib import Path

from railyard.bench import bench_engine, stack_project
from railyard.bench.harness import Context, Sample, Section
from railyard.bench.stack_project import StackProject

PREVIEW_NODES = 448
QUICK_PREVIEW_NODES = 32
UP_NODES = 32
QUICK_UP_NODES = 4
# Clear of the default stacks, the lab tests and the other sections (see bench_hosts.POOL).
POOL = "198.19.192.0/18"
COMPUTE = "198.19.0.0/17"


def layer_config(nodes: int, mgmt: str, storage: str, kubernetes: bool) -> dict:
    cfg = bench_engine.preview_config(nodes)
    cfg["railyard:fabric"] = {"compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": COMPUTE},
                              "storage": {"cidr": storage}, "management": {"cidr": mgmt}}
    cfg["railyard:tenants"] = [{"name": "research"}, {"name": "vision"}]
    cfg["railyard:tuning"] = {"sriov": {"vfsPerPf": 2}}
    if kubernetes:
        cfg["railyard:kubernetes"] = {}
    return cfg


def layer_resources(result: dict) -> int:
    return sum(1 for s in result["steps"] if "railyard:index:KubernetesLayer" in s.get("urn", "").split("::")[2])


def node_objects(result: dict) -> int:
    return sum(1 for s in result["steps"] if s.get("urn", "").split("::")[2].endswith("kubernetes:core/v1:Node"))


def preview_with_and_without(ctx: Context, nodes: int):
    mgmt, storage = stack_project.free_networks(POOL, 2, 20)
    runs = {}
    for with_layer in (False, True):
        base = Path(tempfile.mkdtemp(prefix=f"k8s-preview-{nodes}-", dir=ctx.workdir))
        try:
            stack = f"bench-k8s{nodes}{'l' if with_layer else ''}"
            project = StackProject(base, stack, layer_config(nodes, mgmt, storage, with_layer))
            project.pulumi("stack", "init", "--secrets-provider", "passphrase")
            runs[with_layer] = bench_engine.preview(project, stack)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    (plain, plain_result), (layer, layer_result) = runs[False], runs[True]
    added = bench_engine.resource_count(layer_result) - bench_engine.resource_count(plain_result)
    label = f"preview, {nodes} nodes"
    yield Sample(f"{label} with the layer: wall", layer.wall_s, "s")
    yield Sample(f"{label} without it: wall", plain.wall_s, "s")
    yield Sample(f"{label}: ratio with/without", layer.wall_s / plain.wall_s, "x")
    yield Sample(f"{label} with the layer: peak RSS (process tree)", layer.peak_rss_mib, "MiB",
                 note=f"without: {plain.peak_rss_mib:.0f} MiB")
    yield Sample(f"{label}: resources the layer adds", added, "",
                 note=f"{layer_resources(layer_result)} under KubernetesLayer, plus the control plane and kubeconfig")
    yield Sample(f"{label}: layer resources per node", node_objects(layer_result) / nodes, "",
                 note="its Node; every other object is per pool, rail or tenant")
    yield Sample(f"{label}: layer resources not per node", layer_resources(layer_result) - node_objects(layer_result),
                 "", note="provider, namespaces, Kueue topology/flavors/queues, SR-IOV policies, networks, attachments")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def lab_up(ctx: Context, nodes: int):
    from railyard.drivers.lab import control_plane, gc
    from railyard.engine import control_plane as binaries

    binaries.ensure()
    stack = f"bench-k8sup{nodes}"
    gc.destroy_all(stack)
    mgmt, storage = stack_project.free_networks(POOL, 2, 20)
    base = Path(tempfile.mkdtemp(prefix=f"k8s-up-{nodes}-", dir=ctx.workdir))
    try:
        config = layer_config(nodes, mgmt, storage, False)
        config["railyard:storage"] = {}  # the layer's cost, not the object store's
        project = StackProject(base, stack, config)
        project.pulumi("stack", "init", "--secrets-provider", "passphrase")
        project.pulumi("up", "--yes", "--skip-preview")
        with_layer = copy.deepcopy(config)
        with_layer["railyard:kubernetes"] = {}
        project.write(with_layer)
        start = time.monotonic()
        project.pulumi("up", "--yes", "--skip-preview")
        wall = time.monotonic() - start
        state = control_plane.read_control_plane(stack)
        assert state is not None, "up has just started the control plane"
        rss = {comp: _rss_mib(pid) for comp, pid in state["running"].items() if pid}
        start = time.monotonic()
        project.write(config)
        project.pulumi("up", "--yes", "--skip-preview")
        removed = time.monotonic() - start
        project.pulumi("destroy", "--yes", "--skip-preview")
    finally:
        gc.destroy_all(stack)
        shutil.rmtree(base, ignore_errors=True)
    label = f"up of the layer, {nodes}-node lab"
    yield Sample(f"{label}: wall", wall, "s", note="control plane start, CRDs, Kueue, kwok, then every object")
    yield Sample(f"{label}: kube-apiserver RSS after it", rss.get("kube-apiserver", 0.0), "MiB")
    yield Sample(f"{label}: control plane RSS, all six", sum(rss.values()), "MiB",
                 note=", ".join(f"{k} {v:.0f}" for k, v in rss.items()))
    yield Sample(f"{label}: removing it again (up without railyard:kubernetes)", removed, "s")


def run(ctx: Context):
    yield from preview_with_and_without(ctx, QUICK_PREVIEW_NODES if ctx.quick else PREVIEW_NODES)
    yield from lab_up(ctx, QUICK_UP_NODES if ctx.quick else UP_NODES)


SECTIONS = (Section("kubernetes", "the Kubernetes layer: preview of 448 nodes with and without it; up of the layer "
                                  "on a 32-node lab and the API server's RSS", run),)
