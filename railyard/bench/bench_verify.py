"""Verify section: `railyard verify`'s reading of every node (issue 40, section 7), on 32 and 64 lab
nodes standing in for dgx-h100 servers, and what that projects for the 448-node pod.

Each node is a lab node with its dgx-h100 hardware tree, reached over SSH; the reading is the one
`railyard verify` makes (railyard.verify.read_facts: the model's discovery run on each node, 32 at
a time) and the SKU check of every node's facts. The projection fits the two walls to a line
(a fixed cost plus a cost per node) and reads it at 448. Here the nodes share the controller's two
cores, so every node's share of the work is on the controller's CPUs too: a real controller only
runs the ssh clients and the check, so the projection is an upper bound.
"""

from __future__ import annotations

import os
import resource
import time

from railyard.bench.bench_hosts import lab_servers
from railyard.bench.harness import Context, Sample, Section

SIZES = (32, 64)
QUICK_SIZES = (8, 16)
POD = 448
TARGET_POD_S = 60.0


def read_size(ctx: Context, hosts: int) -> tuple[float, float]:
    """(wall, controller CPU-s) of verify's reading of `hosts` lab nodes, findings required empty."""
    from railyard import verify
    from railyard.remote.ssh import Target

    with lab_servers(ctx, f"bench-verify{hosts}", hosts) as servers:
        targets = {n.name: Target(n.name, servers.addresses[i], host_keys=(servers.host_keys[i],))
                   for i, n in enumerate(servers.plan.nodes)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.monotonic()
        facts = verify.read_facts(targets, servers.key)
        findings = verify.hardware(servers.spec, servers.plan, facts)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        own_after = resource.getrusage(resource.RUSAGE_SELF)
    if findings:
        raise RuntimeError(f"verify of {hosts} lab nodes as planned found: {'; '.join(map(str, findings[:5]))}")
    cpu = sum((a.ru_utime - b.ru_utime) + (a.ru_stime - b.ru_stime)
              for a, b in ((after, before), (own_after, own_before)))
    return wall, cpu


def run(ctx: Context):
    sizes = QUICK_SIZES if ctx.quick else SIZES
    walls = {}
    for hosts in sizes:
        wall, cpu = read_size(ctx, hosts)
        walls[hosts] = wall
        yield Sample(f"verify, {hosts} lab nodes: wall", wall, "s",
                     note=f"every node's facts over SSH, {min(32, hosts)} at a time, and its SKU check")
        yield Sample(f"verify, {hosts} lab nodes: controller CPU-s per node", cpu / hosts, "s",
                     note="ssh clients, the program's transfer, the check (the nodes' own share is not in it)")
    (a, wa), (b, wb) = sorted(walls.items())
    per_node = (wb - wa) / (b - a)
    fixed = max(0.0, wa - per_node * a)
    yield Sample(f"verify, projected for {POD} nodes from {a} and {b}: wall", fixed + per_node * POD, "s",
                 target=TARGET_POD_S,
                 note=f"the line through both walls ({per_node * 1000:.0f} ms per node) at {POD}; the lab's "
                      f"nodes share the controller's {os.cpu_count()} cores, so an upper bound")


SECTIONS = (Section("verify", "railyard verify: reading 32 and 64 lab nodes over SSH with their SKU check, "
                              f"projected to the {POD}-node pod (target {TARGET_POD_S:.0f} s)", run),)
