"""The lab driver end to end on the real Pulumi engine: up, idempotent up, preview of an edit,
refresh after a namespace vanished, destroy leaving nothing (recovery after a killed up:
test_lab_recover.py).

The stack is the test's own (never the user's `lab`), in a copy of the project with a throwaway
file backend; its networks sit beside the default lab's so both can run at once.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from railyard import paths
from railyard.drivers.lab import gc, names, net, node

from .stack_project import StackProject

ROOT = paths.PROJECT_ROOT
STACK = "tlife"

STACK_CONFIG = {
    "railyard:region": "lab",
    "railyard:layout": "bare-metal",
    "railyard:driver": "lab",
    "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 2}],
    "railyard:fabric": {
        "compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": "198.19.0.0/16"},
        "storage": {"cidr": "198.18.96.0/20"},
        "management": {"cidr": "198.18.80.0/20"},
    },
    # Ephemeral, so its cluster is not protected and the last test's plain destroy may remove it.
    "railyard:ephemeral": {"ttl": "1h"},
}


def host_snapshot() -> dict:
    """What a lab must never change on the host."""
    def listing(p: str) -> list[str]:
        return sorted(os.listdir(p)) if os.path.isdir(p) else []

    vm = {f: Path("/proc/sys/vm", f).read_text() for f in listing("/proc/sys/vm")
          if os.access(f"/proc/sys/vm/{f}", os.R_OK) and f not in ("drop_caches", "stat_refresh", "compact_memory")}
    return {"hostname": Path("/proc/sys/kernel/hostname").read_text(), "boot": listing("/boot"), "vm": vm,
            "irq": listing("/proc/irq")}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    gc.destroy_all(STACK)  # leftovers of an aborted earlier run
    before = host_snapshot()
    p = StackProject(tmp_path_factory.mktemp("labstack"), STACK, STACK_CONFIG)
    p.config = copy.deepcopy(STACK_CONFIG)
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    p.before = before
    yield p
    p.pulumi("destroy", "--yes", "--skip-preview", check=False)
    gc.destroy_all(STACK)


def test_up_builds_reachable_nodes_on_real_rails(project):
    project.pulumi("up", "--yes", "--skip-preview")
    inv = project.outputs()["inventory"]
    assert [n["name"] for n in inv] == ["gpu-0", "gpu-1"]
    got = project.ssh("gpu-0", "hostname; ip -o -4 addr show ibp24s0", check=False)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[0] == "gpu-0"
    assert "198.19.0.2/19" in got.stdout


def test_same_rail_is_one_hop_and_cross_rail_crosses_the_spine(project):
    same = project.ssh("gpu-0", "traceroute -n -q1 -w1 -s 198.19.0.2 198.19.0.3")
    cross = project.ssh("gpu-0", "traceroute -n -q1 -w1 -s 198.19.0.2 198.19.32.3")
    hops = lambda out: [line.split()[1] for line in out.splitlines()[1:]]  # noqa: E731
    assert hops(same.stdout) == ["198.19.0.3"], same.stdout
    assert hops(cross.stdout) == ["198.19.0.1", "198.19.32.3"], cross.stdout


def test_rails_carry_the_planned_ipoib_mtu_end_to_end(project):
    # 4092: the IPoIB datagram MTU of a 4096-byte InfiniBand link (railyard.model.mtu). A ping of
    # 4092 bytes (4064 of payload, 28 of headers) that may not fragment crosses the leaf and the
    # spine; one byte more does not leave the node.
    links = project.ssh("gpu-0", "ip -o link show ibp24s0; ip -o link show ibp64s0").stdout.splitlines()
    assert [line.split(" mtu ")[1].split()[0] for line in links] == ["4092", "4092"]
    for target in ("198.19.0.3", "198.19.32.3"):
        ok = project.ssh("gpu-0", f"ping -c1 -W2 -M do -s 4064 -I 198.19.0.2 {target}", check=False)
        assert ok.returncode == 0, ok.stdout + ok.stderr
    big = project.ssh("gpu-0", "ping -c1 -W2 -M do -s 4065 -I 198.19.0.2 198.19.0.3", check=False)
    assert big.returncode != 0 and "mtu = 4092" in (big.stdout + big.stderr).lower().replace("mtu=", "mtu = ")


def test_second_up_changes_nothing(project):
    project.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes")


def test_preview_of_a_grown_pool_shows_exactly_the_new_node(project):
    project.config["railyard:nodePools"][0]["count"] = 3
    project.write(project.config)
    try:
        steps = json.loads(project.pulumi("preview", "--diff", "--json").stdout)["steps"]
        changed = {(s["op"], s["urn"].rsplit("::", 1)[1]) for s in steps if s["op"] != "same"}
        # The new node (its component, and its machine with its cache), and host tuning and
        # acceptance rerun because the node set changed; nothing of gpu-0 or gpu-1, no rail, no fabric.
        assert changed == {("create", "gpu-2"), ("create", "gpu-2-host"),
                           ("update", f"{STACK}-tuning-run"), ("update", f"{STACK}-acceptance-run")}, changed
    finally:
        project.config["railyard:nodePools"][0]["count"] = 2
        project.write(project.config)


def test_refresh_notices_a_vanished_node_and_up_recreates_it(project):
    node.delete_node(STACK, "gpu-1")
    assert not net.netns_exists(names.node_ns(STACK, "gpu-1"))
    project.pulumi("refresh", "--yes", "--skip-preview")
    state = json.loads(project.pulumi("stack", "export").stdout)["deployment"]["resources"]
    assert not any(r["urn"].endswith("::gpu-1-host") for r in state)
    project.pulumi("up", "--yes", "--skip-preview")
    assert project.ssh("gpu-1", "hostname").stdout.strip() == "gpu-1"


def test_destroy_leaves_nothing_and_the_host_untouched(project):
    project.pulumi("destroy", "--yes", "--skip-preview")
    left = gc.inventory(STACK)
    assert {k: v for k, v in left.items() if v and k != "stack"} == {}, left
    assert not paths.lab_dir(STACK).exists() or not any(paths.lab_dir(STACK).rglob("*")), \
        sorted(paths.lab_dir(STACK).rglob("*"))
    assert host_snapshot() == project.before
