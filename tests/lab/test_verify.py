"""`railyard verify` on a running lab (issue 40): a two-node dgx-h100 stack on an HDR fabric, up on
the real engine, is read over SSH (each node's sysfs through the model's own discovery) and its
subnet through ibsim and the real ibnetdiscover. Each fault `railyard lab fault` makes is found and
named, nothing else is reported, and `--clear` gives back a stack verify finds as planned.

HDR, not the default NDR: ibsim 0.10 trains links at most at HDR, so on HDR the subnet is judged on
speed as well as cabling and width. The stack pins the ConnectX-7 firmware a real host showed
(railyard/data/fixtures/topologies/lenovo_sd665n_v3_nic_numa.txt: 28.37.1014).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from railyard import paths
from railyard.drivers.lab import names
from railyard.drivers.lab.faults import _peer
from railyard.model.fabric.routing import port_netdev
from railyard.model.fabric.subnet import End, cable_of

from .railyard_project import STORAGE, free_networks
from .stack_project import StackProject, lab_stack, recorded_facts

STACK = "tverify"
FIRMWARE = "28.37.1014"


def config(mgmt: str) -> dict:
    return {
        "railyard:region": "lab",
        "railyard:layout": "bare-metal",
        "railyard:driver": "lab",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 2}],
        "railyard:fabric": {
            "compute": {"kind": "infiniband", "speed": "hdr", "switch": "qm8700", "cidr": "198.19.0.0/16"},
            "storage": {"cidr": STORAGE},
            "management": {"cidr": mgmt},
        },
        "railyard:acceptance": {"enabled": False},
        "railyard:verify": {"pins": {"nicFirmware": FIRMWARE}},
        "railyard:ephemeral": {"ttl": "2h"},
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    (mgmt,) = free_networks(1, prefix=24)
    with lab_stack(tmp_path_factory, STACK, config(mgmt)) as p:
        p.mgmt = mgmt
        yield p


def verify(p: StackProject, *extra: str) -> tuple[int, list[dict]]:
    proc = p.railyard("verify", "--stack", STACK, "--json", *extra)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)


def fault(p: StackProject, *args: str) -> str:
    proc = p.railyard("lab", "fault", "--stack", STACK, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_stack_as_planned_verifies_clean_with_its_pinned_firmware(project):
    proc = project.railyard("verify", "--stack", STACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 node(s) of stack tverify verified" in proc.stdout and "as planned" in proc.stdout
    # The lab's nodes have an nvidia-smi and a dcgmi (stand-ins over their hardware trees): the
    # health part ran both, and nothing is left unrun.
    assert "(hardware, fabric, health): as planned" in proc.stdout and "health not run" not in proc.stdout
    # Nodes without the GPU tools (no NVIDIA driver or DCGM installed): not run, and never a pass.
    stand_ins = [paths.lab_dir(STACK, project.dir) / "nodes" / n / "bin" / tool
                 for n in ("gpu-0", "gpu-1") for tool in ("nvidia-smi", "dcgmi")]
    for tool in stand_ins:
        tool.rename(tool.with_name(tool.name + ".off"))
    try:
        without = project.railyard("verify", "--stack", STACK)
        only_health = project.railyard("verify", "--stack", STACK, "--only", "health")
    finally:
        for tool in stand_ins:
            tool.with_name(tool.name + ".off").rename(tool)
    assert without.returncode == 0 and "(hardware, fabric; not read: health): as planned" in without.stdout
    assert "health not run: nvidia-smi missing: gpu-0, gpu-1" in without.stdout
    assert "health not run: dcgmi missing: gpu-0, gpu-1" in without.stdout
    assert only_health.returncode == 2 and "nvidia-smi missing" in only_health.stderr
    assert "subnet: " in proc.stdout and "from the lab's subnet (ibsim)" in proc.stdout
    # The firmware is the pin's because the node's sysfs shows it so.
    assert project.ssh("gpu-0", "cat /sys/class/infiniband/mlx5_0/fw_ver").stdout.strip() == FIRMWARE


# Each fault, what verify must then find (kind, node, where) and nothing else.
FAULTS = [
    (("cable-swap", "gpu-1", "mlx5_0", "mlx5_3"),
     [("cable-swapped", "gpu-1", "gpu-1 mlx5_0 port 1 and gpu-1 mlx5_3 port 1")]),
    # Two nodes' cables of one rail exchanged at their leaf: one swap, naming both.
    (("cable-swap", "gpu-0", "mlx5_5", "gpu-1:mlx5_5"),
     [("cable-swapped", "gpu-0", "gpu-0 mlx5_5 port 1 and gpu-1 mlx5_5 port 1")]),
    (("link-down", "gpu-0", "ibp79s0"),  # mlx5_4's rail, by its netdev
     [("nic-down", "gpu-0", "nics.mlx5_4.state"), ("link-missing", "gpu-0", None)]),
    (("link-width", "gpu-0", "mlx5_5", "2"), [("link-width", "gpu-0", None)]),
    # The GPU gone from the node's PCI bus, and so from what its nvidia-smi sees.
    (("gpu-lost", "gpu-1", "GPU6"), [("gpu-missing", "gpu-1", "gpus"), ("gpu-count", "gpu-1", None)]),
    (("pcie-degraded", "gpu-0", "mlx5_9", "8"), [("pcie-degraded", "gpu-0", "nics.mlx5_9.pcie_link")]),
    (("firmware", "gpu-1", "mlx5_11", "28.39.1002"), [("firmware", "gpu-1", "nics.mlx5_11.fw_ver")]),
    # What only the GPU's driver knows, through the node's nvidia-smi.
    (("ecc", "gpu-0", "GPU2", "3"), [("ecc-uncorrectable", "gpu-0", None)]),
    (("nvlink-down", "gpu-1", "GPU0", "5"), [("nvlink-down", "gpu-1", "GPU 0")]),
    (("xid", "gpu-0", "GPU4", "13"), [("xid", "gpu-0", None)]),
]


@pytest.mark.parametrize("args,expected", FAULTS, ids=[f[0][0] for f in FAULTS])
def test_each_fault_is_found_named_and_alone_then_cleared(project, args, expected):
    fault(project, *args)
    try:
        rc, found = verify(project)
        got = [(f["kind"], f["node"], f["where"] if expected_where is not None else None)
               for f, (_, _, expected_where) in zip(found, expected)]
        assert rc == 1 and len(found) == len(expected) and sorted(got, key=str) == sorted(expected, key=str), found
        assert all(f["message"] for f in found)
    finally:
        cleared = fault(project, "--clear")
    assert cleared.startswith("cleared: ")
    assert verify(project) == (0, [])


def test_a_switchs_pulled_uplink_is_gone_from_the_subnet_and_named_by_its_two_switches(project):
    """No node is on a leaf-to-spine cable: the finding names no node, only the two switch ports."""
    up = next(lk for lk in project.plan.fabric.links() if lk.tier == "leaf_spine")
    a, b = cable_of(End(up.a_device, up.a_port), End(up.b_device, up.b_port))
    said = fault(project, "link-down", up.a_device, str(up.a_port))
    try:
        assert said.strip() == f"{up.a_device}: the cable on {port_netdev(project.plan.fabric.switch, up.a_port)} pulled"
        rc, found = verify(project, "--only", "fabric")
        assert rc == 1 and [(f["kind"], f["node"], f["where"]) for f in found] == [("link-missing", None, f"{a} <-> {b}")]
        assert fault(project, "--clear", up.a_device).startswith("cleared: ")
    finally:
        fault(project, "--clear")
    assert verify(project, "--only", "fabric") == (0, [])


def test_several_faults_at_once_and_a_clear_of_one_node_keeps_the_others(project):
    fault(project, "cable-swap", "gpu-0", "mlx5_0", "mlx5_3")
    fault(project, "firmware", "gpu-1", "mlx5_6", "28.39.1002")
    fault(project, "link-width", "gpu-1", "mlx5_10", "1")
    try:
        _, found = verify(project)
        assert sorted((f["kind"], f["node"]) for f in found) == [
            ("cable-swapped", "gpu-0"), ("firmware", "gpu-1"), ("link-width", "gpu-1")]
        fault(project, "--clear", "gpu-1")
        _, found = verify(project)
        assert [(f["kind"], f["node"]) for f in found] == [("cable-swapped", "gpu-0")]
        assert fault(project).strip() == "gpu-0: the cables of mlx5_0 and mlx5_3 exchanged"
    finally:
        fault(project, "--clear")
    assert verify(project) == (0, [])


def test_the_deep_check_runs_all_reduce_perf_over_each_nodes_nvlinks_and_finds_a_slow_one(project):
    """--deep runs DCGM's level 3 and all_reduce_perf within each node (the lab's stand-ins, over the
    node's GPUs and NVLinks as its hardware tree gives them) and holds the collective to the SKU's
    NVLinks: 18 x 26.562 GB/s for an H100, 15% tolerance by default. Three of GPU 0's 18 links down
    leave 398 GB/s: a slow collective, beside the links nvidia-smi shows down; the quick check
    reads only the links. A GPU whose memory keeps failing fails DCGM's memory test, which only
    --deep runs."""
    proc = project.railyard("verify", "--stack", STACK, "--deep")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "health not run" not in proc.stdout and "DCGM level 3, all_reduce_perf" in proc.stderr + proc.stdout
    for link in ("0", "7", "11"):
        fault(project, "nvlink-down", "gpu-1", "GPU0", link)
    try:
        rc, deep = verify(project, "--deep")
        assert rc == 1 and sorted((f["kind"], f["node"]) for f in deep) == [
            ("collective-slow", "gpu-1"), ("nvlink-down", "gpu-1")], deep
        slow = next(f for f in deep if f["kind"] == "collective-slow")
        assert (slow["planned"], slow["found"]) == ("478 GB/s", "397.98 GB/s") and "(gpu-1)" in slow["message"]
        assert [f["kind"] for f in verify(project)[1]] == ["nvlink-down"]
    finally:
        fault(project, "--clear")
    fault(project, "ecc", "gpu-0", "GPU2", "3")
    try:
        rc, deep = verify(project, "--deep")
        assert rc == 1 and sorted((f["kind"], f["node"], f["where"]) for f in deep) == sorted([
            ("ecc-uncorrectable", "gpu-0", next(f["where"] for f in deep if f["kind"] == "ecc-uncorrectable")),
            ("dcgm-diag", "gpu-0", "GPU 2")]), deep
        assert "Detected 3 ecc_dbe_volatile_total for GPU 2" in next(f["message"] for f in deep if f["kind"] == "dcgm-diag")
        assert [f["kind"] for f in verify(project)[1]] == ["ecc-uncorrectable"]
    finally:
        fault(project, "--clear")


def test_an_unreachable_node_is_a_finding_and_the_others_are_still_read(project):
    """gpu-1's management cable pulled (the fabric's end of its veth down): SSH cannot reach it
    within its connect timeout, and gpu-0's fault is still reported."""
    fault(project, "pcie-degraded", "gpu-0", "GPU2", "4")
    mgmt = project.machines()[1]["management_ip"]
    own = subprocess.run(["ip", "-n", names.node_ns(STACK, "gpu-1"), "-o", "-4", "addr"], capture_output=True,
                         text=True, check=True).stdout
    netdev = next(line.split()[1] for line in own.splitlines() if f" {mgmt}/" in line)
    ns, peer = _peer(STACK, "gpu-1", netdev)
    subprocess.run(["ip", "-n", ns, "link", "set", "dev", peer, "down"], check=True)
    try:
        started = time.monotonic()
        rc, found = verify(project, "--only", "hardware", "--timeout", "20")
        took = time.monotonic() - started
    finally:
        subprocess.run(["ip", "-n", ns, "link", "set", "dev", peer, "up"], check=True)
        fault(project, "--clear")
    assert rc == 1 and sorted((f["kind"], f["node"]) for f in found) == [
        ("pcie-degraded", "gpu-0"), ("unreachable", "gpu-1")], found
    unreachable = next(f for f in found if f["kind"] == "unreachable")
    assert unreachable["where"] == mgmt and unreachable["found"]
    assert took < 60, f"an unreachable node held verify for {took:.0f} s"


def test_verify_refuses_what_it_cannot_read_instead_of_passing(project):
    proc = project.railyard("verify", "--stack", STACK, "--only", "lldp")
    assert proc.returncode == 2 and "--only 'lldp': give one or more of hardware, fabric" in proc.stderr
    proc = project.railyard("lab", "fault", "--stack", STACK, "gpu-lost", "gpu-0", "GPU9")
    assert proc.returncode == 1 and "gpu-0 has no device GPU9" in proc.stderr
    assert verify(project) == (0, [])  # the refused fault changed nothing


# --- drift in preview, review and up (railyard:verify.onDrift) ------------------------------------

def with_on_drift(project: StackProject, mode: str) -> None:
    project.write({**config(project.mgmt), "railyard:verify": {"pins": {"nicFirmware": FIRMWARE}, "onDrift": mode}})


def tuned_hosts(project: StackProject) -> list[str]:
    """The nodes the stack's tuning run last took, from its state."""
    state = json.loads(project.pulumi("stack", "export", "--show-secrets").stdout)
    run = next(r for r in state["deployment"]["resources"] if r["type"].endswith("TuningRun"))
    hosts = run["outputs"]["hosts"]
    if "plaintext" in hosts:  # a secret, as --show-secrets gives it
        hosts = json.loads(hosts["plaintext"])
    return sorted(hosts)


def warnings_of(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout + proc.stderr


def test_a_cable_swap_is_drift_in_preview_and_in_the_review_and_up_stops_before_tuning(project, tmp_path):
    with_on_drift(project, "fail")
    project.pulumi("up", "--yes", "--skip-preview")  # as planned: the check passes, nothing else changes
    fault(project, "cable-swap", "gpu-1", "mlx5_0", "mlx5_3")
    try:
        preview = warnings_of(project.pulumi("preview", "--refresh"))
        assert "drift: gpu-1 mlx5_0 port 1 and gpu-1 mlx5_3 port 1: " in preview, preview[-3000:]
        assert "up stops before tuning: 1 finding(s) on gpu-1 (railyard:verify.onDrift: fail)" in preview
        comment = tmp_path / "review.md"
        proc = project.railyard("review", "--stack", STACK, "--output", str(comment))
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "drift: gpu-1 mlx5_0 port 1 and gpu-1 mlx5_3 port 1" in comment.read_text()
        before = tuned_hosts(project)
        up = project.pulumi("up", "--yes", "--skip-preview", check=False)
        assert up.returncode != 0 and "up stops before tuning" in warnings_of(up), warnings_of(up)[-3000:]
        assert tuned_hosts(project) == before  # tuning did not run
        # verify records gpu-1 suspect in the stack's outputs too: the run that records them
        # leaves out the drift check, which would stop it here.
        proc = project.railyard("verify", "--stack", STACK, "--only", "hardware,fabric")
        assert proc.returncode == 1 and "not recorded" not in proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert project.outputs()["nodeHealth"]["nodes"]["gpu-1"]["state"] == "suspect"
    finally:
        fault(project, "--clear")
    assert project.railyard("verify", "--stack", STACK, "--only", "hardware,fabric").returncode == 0
    assert project.outputs()["nodeHealth"]["nodes"]["gpu-1"]["state"] == "ready"
    project.pulumi("up", "--yes", "--skip-preview")


def test_with_skip_node_a_drifted_node_is_left_out_of_tuning_and_comes_back_once_repaired(project):
    with_on_drift(project, "skip-node")
    fault(project, "gpu-lost", "gpu-0", "GPU1")
    try:
        up = project.pulumi("up", "--yes", "--skip-preview")
        assert "up leaves gpu-0 alone" in warnings_of(up), warnings_of(up)[-3000:]
        assert tuned_hosts(project) == ["gpu-1"]
        # A refresh records what verify reads of each node: gpu-0 as it is now, one GPU short.
        project.pulumi("refresh", "--yes", "--skip-preview")
        assert len(recorded_facts(project, "gpu-0")["gpus"]) == 7
        assert len(recorded_facts(project, "gpu-1")["gpus"]) == 8
    finally:
        fault(project, "--clear")
    project.pulumi("up", "--yes", "--skip-preview")
    assert tuned_hosts(project) == ["gpu-0", "gpu-1"]
    assert len(recorded_facts(project, "gpu-0")["gpus"]) == 7  # the last refresh's, until the next
    project.pulumi("refresh", "--yes", "--skip-preview")
    assert len(recorded_facts(project, "gpu-0")["gpus"]) == 8
