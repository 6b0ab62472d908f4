"""GB200 NVL72 racks in the lab, end to end on the real Pulumi engine (stacks/Pulumi.lab-gb200.yaml,
with a second rack and Slurm added: a job of more than one rack's GPUs must fit the cluster's
quota, or Kueue refuses it for quota before topology): 36 compute trays as lab nodes presenting the
tray's PCIe layout, tuned for
their NVLink domain (NCCL's MNNVL settings, IMEX's node list), a real API server with the real Kueue
placing jobs by the `railyard.io/nvlink-domain` level, and Debian's Slurm 22.05, which predates
topology/block, taking the rack as its tree's leaf.

No NVLink switch tray exists here: the domain is what the plan, the labels, the files and the
schedulers say; that the GPUs then reach each other over NVLink is the hardware's part.
"""

from __future__ import annotations

import re
import time

import pytest
import yaml

from railyard import paths
from railyard.drivers.lab import gc
from railyard.engine import control_plane as binaries
from railyard.model.plan import make_plan
from railyard.stack import parse_config

from .railyard_project import STORAGE, free_networks
from .stack_project import StackProject
from .test_lab_kubernetes import api as api  # noqa: F401 (the fixture, on this module's project)
from .test_lab_kubernetes import placed, pods_of, submit, workload

ROOT = paths.PROJECT_ROOT
STACK = "tgb200"
DOMAIN = "railyard.io/nvlink-domain"


def stack_config(mgmt: str, storage: str) -> dict:
    config = yaml.safe_load((ROOT / "stacks/Pulumi.lab-gb200.yaml").read_text())["config"]
    config["railyard:fabric"]["management"]["cidr"] = mgmt
    config["railyard:fabric"]["storage"]["cidr"] = storage
    config["railyard:nodePools"][0]["count"] = 36  # two racks, one a scalable unit
    config["railyard:slurm"] = {}
    config["railyard:ephemeral"] = {"ttl": "1h"}
    # Acceptance's iperf3 over 36 trays x 4 rails is minutes of this machine's CPU, which starved the
    # bandwidth probes of the lab modules beside it in CI; what it checks is test_lab_acceptance's.
    config["railyard:acceptance"] = {"enabled": False}
    return config


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    binaries.ensure()
    gc.destroy_all(STACK)
    (mgmt,), storage = free_networks(1, prefix=20), STORAGE
    config = stack_config(mgmt, storage)
    p = StackProject(tmp_path_factory.mktemp("gb200"), STACK, config)
    p.plan = make_plan(parse_config(config, stack=STACK))
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    try:
        started = time.monotonic()
        p.pulumi("up", "--yes", "--skip-preview", timeout=1500)
        p.up_seconds = time.monotonic() - started
        yield p
    finally:
        p.pulumi("destroy", "--yes", "--skip-preview", check=False)
        gc.destroy_all(STACK)


def job(name: str, pods: int, gpus: int = 4) -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "research", "labels": {"kueue.x-k8s.io/queue-name": "gpu"}},
        "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                 "template": {"metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": DOMAIN}},
                              "spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "train", "image": "train:latest",
                                                       "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}},
    }


def test_every_tray_has_imex_list_of_its_rack_and_nccl_told_of_the_domain(project):
    racks = project.plan.nvlink_domains
    assert [(r.name, len(r.nodes)) for r in racks] == [("gb-rack0", 18), ("gb-rack1", 18)]
    for node in ("gb-0", "gb-17", "gb-18", "gb-35"):
        rack = project.plan.nvlink_domain(node)
        assert project.ssh(node, "cat /etc/nvidia-imex/nodes_config.cfg").stdout.splitlines() == list(rack.addresses)
        conf = dict(line.split("=", 1) for line in project.ssh(node, "cat /etc/nccl.conf").stdout.splitlines()
                    if line and not line.startswith("#"))
        # cuMem on (MNNVL needs it); NCCL_MNNVL_ENABLE left at NCCL's default, 2.
        assert conf["NCCL_CUMEM_ENABLE"] == "1" and "NCCL_MNNVL_ENABLE" not in conf
        # The tray's four single-port ConnectX-7, found in its presented PCIe tree.
        assert conf["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1,mlx5_4:1,mlx5_5:1"


def test_kueue_places_a_72_gpu_job_on_the_18_trays_of_one_rack(project, api):  # noqa: F811
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in api.get("/api/v1/nodes")["items"]}
    assert {n: labels[n][DOMAIN] for n in ("gb-0", "gb-17", "gb-18", "gb-35")} == \
        {"gb-0": "gb-rack0", "gb-17": "gb-rack0", "gb-18": "gb-rack1", "gb-35": "gb-rack1"}
    submit(api, job("rack72", 18))
    pods = placed(api, "rack72", 18, timeout=90)
    nodes = [n for n, _ in pods]
    assert len(set(nodes)) == 18, pods  # one pod a tray
    assert len({labels[n][DOMAIN] for n in nodes}) == 1, pods  # every tray of one rack
    # Out of the way: the next job's 76 GPUs and these 72 are more than the cluster's 144.
    status, _ = api.request("DELETE", "/apis/batch/v1/namespaces/research/jobs/rack72", {"propagationPolicy": "Foreground"})
    assert status == 200
    deadline = time.monotonic() + 60
    while pods_of(api, "rack72"):
        assert time.monotonic() < deadline, "rack72's pods were not deleted"
        time.sleep(0.5)


def test_a_job_of_more_than_one_racks_gpus_stays_pending_with_kueues_reason(project, api):  # noqa: F811
    submit(api, job("rack76", 19))  # 76 GPUs inside one NVLink domain of 72
    w = workload(api, "rack76")
    cond = {c["type"]: c for c in w["status"]["conditions"]}
    assert cond["QuotaReserved"]["status"] == "False"
    # The cluster's 144 GPUs are free, but no rack holds 19 trays.
    assert "allows to fit only" in cond["QuotaReserved"]["message"] and "out of 19 pod(s)" in \
        cond["QuotaReserved"]["message"], cond
    assert not pods_of(api, "rack76")


def test_slurm_22_05_takes_the_rack_as_its_trees_leaf(project):
    ctl = project.plan.slurm.controller.name
    assert project.ssh(ctl, "slurmctld -V").stdout.startswith("slurm-wlm 22.05")  # Debian's name
    config = project.ssh(ctl, "scontrol show config").stdout
    assert re.search(r"^TopologyPlugin\s*=\s*topology/tree$", config, re.M), config
    shown = {}
    for line in project.ssh(ctl, "scontrol show topology").stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        shown[fields["SwitchName"]] = fields
    assert set(shown) == {"gb-rack0", "gb-rack1", "gb-su0", "gb-su1", "spine"}
    assert (shown["gb-rack1"]["Level"], shown["gb-rack1"]["Nodes"]) == ("0", "gb-[18-35]")
    assert (shown["gb-su1"]["Level"], shown["gb-su1"]["Switches"]) == ("1", "gb-rack1")
    assert (shown["spine"]["Level"], shown["spine"]["Switches"]) == ("2", "gb-su[0-1]")
    gres = project.ssh(ctl, "sinfo --noheader --Node --format '%N %T %G'").stdout.split("\n")
    states = {line.split()[0]: line.split()[1:] for line in gres if line.strip()}
    assert len(states) == 36 and all(st == ["idle", "gpu:gb200:4"] for st in states.values()), states
