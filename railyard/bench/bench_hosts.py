"""Hosts section: the hosts driver's preview of a 448-host stack whose hosts do not answer, beside
the no-op baseline of as many resources; and an idempotent tuning run over 8 and 32 lab nodes
standing in for servers, with the controller's and the nodes' CPU-seconds per host, and what that
projects for 448 hosts.

The unreachable hosts sit on a lab management network with nothing attached (a fabric of its
own, so every probe stays inside the lab: no host answers, no packet leaves). The tuning run is the
site playbook through railyard.tuning.runner, as HostTuning runs it, against lab nodes reached over
SSH on their own /sys and /proc, the second run of two (the first converges them).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import resource
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from railyard import paths
from railyard.bench import bench_engine, proctree, stack_project
from railyard.bench.harness import Context, Sample, Section
from railyard.bench.stack_project import StackProject

PREVIEW_HOSTS = 448
QUICK_PREVIEW_HOSTS = 32
SIZES = (8, 32)
QUICK_SIZES = (8,)
TARGET_PREVIEW_S = 60.0
# A /20 each (the planner cuts a network into eight pool blocks; 448 hosts need 512); clear of
# every other stack's management and storage networks (198.18.0.0/16: the default stacks, the lab
# bench, the lab tests) and of this stack's rails (COMPUTE).
POOL = ipaddress.ip_network("198.19.192.0/18")
COMPUTE = "198.19.0.0/17"
PLACEHOLDER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB"


def hosts_config(addresses: list[str], keys: list[str], mgmt: str, storage: str) -> dict:
    return {
        "railyard:region": "bench-hosts",
        "railyard:layout": "bare-metal",
        "railyard:driver": "hosts",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": len(addresses)}],
        "railyard:fabric": {
            "compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": COMPUTE},
            "storage": {"cidr": storage},
            "management": {"cidr": mgmt},
        },
        "railyard:ephemeral": {"ttl": "2h"},
        # The lab's kernel has no md: each node's cache is one of its drives (raid0 is refused there).
        "railyard:storage": {"localCache": {"raid": "none"}},
        "railyard:hosts": {"sshKey": "agent", "hostKeys": "pinned",
                           "pools": {"gpu": {"hosts": [{"address": a, "hostKey": k} for a, k in zip(addresses, keys)]}}},
    }


def _keypair(directory: Path) -> str:
    key = directory / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key.read_text()


def unreachable_preview(ctx: Context, hosts: int):
    from railyard.drivers.lab import fabric, gc

    stack = f"bench-hosts{hosts}"
    gc.destroy_all(stack)
    mgmt, storage = stack_project.free_networks(str(POOL), 2, 20)
    net = ipaddress.ip_network(mgmt)
    addresses = [str(net.network_address + 10 + i) for i in range(hosts)]
    base = Path(tempfile.mkdtemp(prefix=f"hosts-{hosts}-", dir=ctx.workdir))
    try:
        # The management network's bridge, and this machine's route into it; no node on it.
        fabric.create_fabric(stack, rails=0, mgmt_cidr=mgmt, host_address=str(net.network_address + 1))
        project = StackProject(base, stack, hosts_config(addresses, [PLACEHOLDER_KEY] * hosts, mgmt, storage))
        project.pulumi("stack", "init", "--secrets-provider", "passphrase")
        subprocess.run(project.argv("config", "set", "--secret", "--path", "railyard:hosts.sshKey"), cwd=project.dir,
                       env=project.env, input=_keypair(base), text=True, check=True, capture_output=True)
        run, result = bench_engine.preview(project, f"hosts{hosts}")
        warned = [d for d in result.get("diagnostics", []) if d.get("severity") == "warning"]
        count = bench_engine.resource_count(result)
        baseline = bench_engine.BaselineProject(base / "baseline", count)
        base_run, _ = bench_engine.preview(baseline, f"baseline-hosts{hosts}")
    finally:
        gc.destroy_all(stack)
        shutil.rmtree(base, ignore_errors=True)
    label = f"{hosts} unreachable hosts"
    yield Sample(f"preview, {label}: wall", run.wall_s, "s", target=TARGET_PREVIEW_S if hosts == PREVIEW_HOSTS else None,
                 note="fresh stack; every host probed for its command line within the pool's deadline")
    yield Sample(f"preview, {label}: baseline wall", base_run.wall_s, "s",
                 note=f"{count} no-op dynamic resources, the same engine")
    yield Sample(f"preview, {label}: ratio to baseline", run.wall_s / base_run.wall_s, "x")
    yield Sample(f"preview, {label}: peak RSS (process tree)", run.peak_rss_mib, "MiB")
    yield Sample(f"preview, {label}: warnings", len(warned), "",
                 note="unreachable and not-checked hosts, a few lines per pool, not one per host")


def _node_cpu_s(stack: str, node_name: str) -> float:
    """CPU-seconds of every process of the node, each with what it reaped: at any moment the
    total of everything that ever ran there (sshd, its sessions, the modules Ansible runs)."""
    from railyard.drivers.lab import names, net, proc

    total = 0
    inode = net.netns_inode(names.node_ns(stack, node_name))
    if inode is None:  # no namespace: no process ran there
        return 0.0
    for p in proc.in_namespaces({inode}):
        try:
            fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended between the listing and the read; its parent has its time
        total += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return total / os.sysconf("SC_CLK_TCK")


@dataclass
class LabServers:
    """Lab nodes standing in for a hosts stack's dgx-h100 servers: the stack's spec and plan, the
    SSH key, and each node's address and pinned host key."""

    stack: str
    spec: Any
    plan: Any
    key: str
    addresses: list[str]
    host_keys: list[str]


@contextlib.contextmanager
def lab_servers(ctx: Context, stack: str, hosts: int) -> Iterator[LabServers]:
    """`hosts` dgx-h100 lab nodes on a management network of their own, with their hardware trees
    and rails without addresses (a server's before its network files exist); all removed after."""
    from railyard.drivers.lab import fabric, gc, hwtree, node
    from railyard.model.catalog import load_catalog
    from railyard.stack import from_config

    gc.destroy_all(stack)
    mgmt, storage = stack_project.free_networks(str(POOL), 2, 20)
    net = ipaddress.ip_network(mgmt)
    base = Path(tempfile.mkdtemp(prefix=f"{stack}-", dir=ctx.workdir))
    try:
        key = _keypair(base)
        pub = (base / "id.pub").read_text().strip()
        addresses = [str(net.network_address + 10 + i) for i in range(hosts)]
        spec, plan = from_config(hosts_config(addresses, [PLACEHOLDER_KEY] * hosts, mgmt, storage), stack)
        fabric.create_fabric(stack, rails=8, mgmt_cidr=mgmt, host_address=str(net.network_address + 1))
        sku = load_catalog().nodes["dgx-h100"]
        host_keys = []
        for i, n in enumerate(plan.nodes):
            tree = base / "hw" / n.name
            hwtree.build_hwtree(sku, tree)
            state = node.create_node(
                stack, n.name, mgmt={"name": "eno3", "address": f"{addresses[i]}/{net.prefixlen}"},
                rails=[{"name": nic.netdev, "rail": nic.rail, "address": None} for nic in n.nics],
                authorized_keys=pub, hw_tree_source=str(tree))
            host_keys.append(state["host_key"])
        yield LabServers(stack, spec, plan, key, addresses, host_keys)
    finally:
        gc.destroy_all(stack)
        shutil.rmtree(base, ignore_errors=True)


def tuning_size(ctx: Context, hosts: int):
    from railyard import drivers
    from railyard.tuning import runner
    from railyard.tuning.vars import host_vars

    stack = f"bench-hostsrun{hosts}"
    shutil.rmtree(paths.runs_dir(stack), ignore_errors=True)
    with lab_servers(ctx, stack, hosts) as servers:
        spec, plan, key = servers.spec, servers.plan, servers.key
        # The variables HostTuning hands a hosts stack's roles: the plan's and the driver's per host.
        machines = [runner.Host(n.name, servers.addresses[i], servers.host_keys[i],
                                {**host_vars(spec, plan, n), **drivers.node_vars(spec, plan, n)})
                    for i, n in enumerate(plan.nodes)]
        first = runner.run(stack, machines, key)
        if not first.ok:
            raise RuntimeError(f"tuning {hosts} lab hosts failed: {'; '.join(map(str, first.failures[:5]))}")
        nodes_before = sum(_node_cpu_s(stack, m.name) for m in machines)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        again = runner.run(stack, machines, key)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        nodes_cpu = sum(_node_cpu_s(stack, m.name) for m in machines) - nodes_before
        if not again.ok or again.changed:
            raise RuntimeError(f"the second tuning run of {hosts} hosts was not idempotent: changed {again.changed}, "
                               f"{'; '.join(map(str, again.failures[:5]))}")
    controller = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    label = f"{hosts} lab hosts"
    yield Sample(f"idempotent tuning run, {label}: wall", wall, "s", note="site.yml over SSH, nothing changed")
    yield Sample(f"idempotent tuning run, {label}: controller CPU-s per host", controller / hosts, "s",
                 note="ansible-playbook and its workers, ssh clients")
    yield Sample(f"idempotent tuning run, {label}: node CPU-s per host", nodes_cpu / hosts, "s",
                 note="every process of each node, with what it reaped: sshd, its sessions, the modules")
    cores = os.cpu_count() or 1
    yield Sample(f"idempotent tuning run, projected for 448 hosts from {hosts}: controller CPU-s",
                 controller / hosts * 448, "s",
                 note="per-host controller CPU x 448; each server's own share runs on its own CPUs")
    yield Sample(f"idempotent tuning run, projected for 448 hosts from {hosts}: wall on {cores} controller cores",
                 controller / hosts * 448 / min(cores, 32), "s",
                 note="controller CPU / min(cores, forks=32): its lower bound when the controller is the limit")


def run(ctx: Context):
    yield from unreachable_preview(ctx, QUICK_PREVIEW_HOSTS if ctx.quick else PREVIEW_HOSTS)
    for hosts in QUICK_SIZES if ctx.quick else SIZES:
        yield from tuning_size(ctx, hosts)


SECTIONS = (Section("hosts", "hosts driver: preview of 448 unreachable hosts against the no-op baseline; "
                             "CPU per host of an idempotent tuning run on 8 and 32 lab hosts, projected to 448", run),)
