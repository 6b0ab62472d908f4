"""The Kubernetes layer end to end on the real Pulumi engine, a real API server and a real
topology-aware scheduler: a 12-node lab in 3 scalable units (reservedLeafPorts 28 leaves 4 nodes
per QM9700 leaf), its control plane with Kueue and kwok, and the layer applied through
pulumi-kubernetes. The jobs are Kueue's own proof that the labels and the topology work.

The control plane's binaries are built by the fixture (railyard.engine.control_plane.ensure), as
`railyard up` builds them; on a fresh machine that is the cold build docs/kubernetes.md times.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import re
import ssl
import subprocess
import time

import pytest
import yaml

from railyard import paths
from railyard.drivers.lab import control_plane, gc, names, net
from railyard.drivers.lab.control_plane.api import Client
from railyard.engine import control_plane as binaries
from railyard.model.plan import make_plan
from railyard.stack import parse_config

from .railyard_project import STORAGE, free_networks
from .stack_project import StackProject

ROOT = paths.PROJECT_ROOT
STACK = "tk8s"
SU = "railyard.io/su"


def stack_config(mgmt: str, storage: str) -> dict:
    return {
        "railyard:region": "lab",
        "railyard:layout": "bare-metal",
        "railyard:driver": "lab",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 12}],
        "railyard:fabric": {
            "compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "reservedLeafPorts": 28,
                        "cidr": "198.19.0.0/16"},
            "storage": {"cidr": storage},
            "management": {"cidr": mgmt},
        },
        # Quotas are caps: research holds su4 (32 GPUs) and pref5 (40) at once.
        "railyard:tenants": [{"name": "research", "pkey": "0x8001", "gpuQuota": 80},
                             {"name": "vision", "pkey": "0x8002", "gpuQuota": 16}],
        "railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": 25}, "sriov": {"vfsPerPf": 2}},
        "railyard:kubernetes": {},
        "railyard:ephemeral": {"ttl": "1h"},
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    binaries.ensure()
    gc.destroy_all(STACK)
    (mgmt,), storage = free_networks(1, prefix=20), STORAGE
    p = StackProject(tmp_path_factory.mktemp("k8s"), STACK, stack_config(mgmt, storage))
    p.config = stack_config(mgmt, storage)
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    started = time.monotonic()
    p.pulumi("up", "--yes", "--skip-preview")
    p.up_seconds = time.monotonic() - started
    yield p
    p.pulumi("destroy", "--yes", "--skip-preview", check=False)
    gc.destroy_all(STACK)


@pytest.fixture(scope="module")
def api(project, tmp_path_factory) -> Client:
    """A client of the stack's API server, with the admin credential the stack outputs."""
    kubeconfig = yaml.safe_load(project.outputs(secrets=True)["kubeconfig"])
    d = tmp_path_factory.mktemp("kubeconfig")
    cluster, user = kubeconfig["clusters"][0]["cluster"], kubeconfig["users"][0]["user"]
    for name, data in (("ca.crt", cluster["certificate-authority-data"]),
                       ("admin.crt", user["client-certificate-data"]), ("admin.key", user["client-key-data"])):
        (d / name).write_bytes(base64.b64decode(data))
    host, port = cluster["server"].removeprefix("https://").split(":")
    client = Client(host, int(port), d)
    client.pki = d
    return client


def job(name: str, pods: int, topology: str | None, queue: bool = True, namespace: str = "research") -> dict:
    annotations = {f"kueue.x-k8s.io/podset-{topology}-topology": SU} if topology else {}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"kueue.x-k8s.io/queue-name": "gpu"} if queue else {}},
        "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                 "template": {"metadata": {"annotations": annotations}, "spec": {
                     "restartPolicy": "Never",
                     "containers": [{"name": "train", "image": "train:latest",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}},
    }


def submit(api: Client, obj: dict) -> dict:
    status, body = api.request("POST", f"/apis/batch/v1/namespaces/{obj['metadata']['namespace']}/jobs", obj)
    assert status == 201, body
    return body


def pods_of(api: Client, name: str, namespace: str = "research") -> list[dict]:
    return api.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{name}")["items"]


def placed(api: Client, name: str, pods: int, namespace: str = "research", timeout: float = 60) -> list[tuple[str, str]]:
    """(node, phase) of the Job's pods once all `pods` are bound and Running.

    A pod that ended Failed without ever being bound is left out. CI saw one once beside the
    Running replacement: a pod deleted while still pending is marked Failed by the pod GC and the
    Job makes another (kueue#757 shows the same picture, a pod stopped as Kueue admits the Job).
    The Job still runs the pods it asked for, which is what this counts."""
    deadline = time.monotonic() + timeout
    while True:
        items = pods_of(api, name, namespace)
        got = [(p["spec"].get("nodeName"), p["status"].get("phase")) for p in items]
        got = [(n, ph) for n, ph in got if n or ph != "Failed"]
        if len(got) == pods and all(n and ph == "Running" for n, ph in got):
            return got
        assert time.monotonic() < deadline, f"{name}: pods {got}"
        time.sleep(0.5)


def workload(api: Client, job_name: str, namespace: str = "research", timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        for w in api.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads")["items"]:
            owners = [o["name"] for o in w["metadata"].get("ownerReferences", [])]
            if job_name in owners and w.get("status", {}).get("conditions"):
                return w
        assert time.monotonic() < deadline, f"no workload for {job_name}"
        time.sleep(0.3)


def su_of(api: Client) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"][SU] for n in api.get("/api/v1/nodes")["items"]}


def test_every_node_is_registered_ready_with_its_place_and_capacity(project, api):
    nodes = {n["metadata"]["name"]: n for n in api.get("/api/v1/nodes")["items"]}
    assert sorted(nodes) == sorted(f"gpu-{i}" for i in range(12))
    assert {n: nodes[n]["metadata"]["labels"][SU] for n in ("gpu-0", "gpu-3", "gpu-4", "gpu-11")} == \
        {"gpu-0": "gpu-su0", "gpu-3": "gpu-su0", "gpu-4": "gpu-su1", "gpu-11": "gpu-su2"}
    node = nodes["gpu-5"]
    assert node["metadata"]["labels"]["railyard.io/sku"] == "dgx-h100"
    assert node["metadata"]["labels"]["railyard.io/fabric-speed"] == "ndr"
    cap = node["status"]["capacity"]
    # 8 GPUs; 25% of 2 TiB in 1 GiB pages; 2 VFs per rail on 8 rails
    assert cap["nvidia.com/gpu"] == "8" and cap["hugepages-1Gi"] == "512Gi"
    assert [cap[f"nvidia.com/rail{r}"] for r in range(8)] == ["2"] * 8
    for n in nodes.values():
        ready = {c["type"]: c["status"] for c in n["status"]["conditions"]}
        assert ready["Ready"] == "True", n["metadata"]["name"]


def test_the_kubeconfig_is_a_secret_and_the_api_wants_a_client_certificate(project, api):
    assert "client-key-data" not in project.checkpoint().read_text()  # in state only as ciphertext
    assert "[secret]" in project.pulumi("stack", "output", "kubeconfig").stdout
    assert api.ready()
    # TLS with the stack's CA, but no client certificate: the API server does not know who asks.
    context = ssl.create_default_context(cafile=str(api.pki / "ca.crt"))
    conn = http.client.HTTPSConnection(api.host, api.port, context=context, timeout=10)
    conn.request("GET", "/api/v1/nodes")
    assert conn.getresponse().status == 401
    conn.close()


def test_kueue_suspends_a_queued_job_and_leaves_an_unqueued_one_alone(project, api):
    queued = submit(api, job("queued", 1, None, namespace="vision"))
    plain = submit(api, job("plain", 1, None, queue=False))
    assert queued["spec"]["suspend"] is True  # Kueue's webhook, reached by URL, suspended it
    assert plain["spec"].get("suspend") in (None, False)
    assert placed(api, "plain", 1)
    assert placed(api, "queued", 1, namespace="vision")  # then admitted into vision's queue
    # Out of the way of the topology tests, which count whole scalable units.
    for ns, name in (("vision", "queued"), ("research", "plain")):
        status, _ = api.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}",
                                {"propagationPolicy": "Foreground"})
        assert status == 200
    deadline = time.monotonic() + 60
    while pods_of(api, "queued", "vision") or pods_of(api, "plain"):
        assert time.monotonic() < deadline, "the jobs' pods were not deleted"
        time.sleep(0.5)


def test_a_tenants_gpu_quota_is_a_cap(project, api):
    submit(api, job("over", 3, None, namespace="vision"))  # 24 GPUs; vision may hold 16
    w = workload(api, "over", namespace="vision")
    cond = {c["type"]: c for c in w["status"]["conditions"]}
    assert cond["QuotaReserved"]["status"] == "False"
    assert "insufficient quota" in cond["QuotaReserved"]["message"], cond
    assert not pods_of(api, "over", "vision")
    status, _ = api.request("DELETE", "/apis/batch/v1/namespaces/vision/jobs/over", {"propagationPolicy": "Foreground"})
    assert status == 200


def test_four_pods_that_require_one_su_land_in_one_su(project, api):
    submit(api, job("su4", 4, "required"))
    pods = placed(api, "su4", 4)
    units = {su_of(api)[n] for n, _ in pods}
    assert len(units) == 1, pods
    project.su4_unit = units.pop()


def test_five_pods_that_require_one_su_stay_pending_with_kueues_reason(project, api):
    submit(api, job("su5", 5, "required"))
    w = workload(api, "su5")
    cond = {c["type"]: c for c in w["status"]["conditions"]}
    assert cond["QuotaReserved"]["status"] == "False"
    assert "allows to fit only 4 out of 5 pod(s)" in cond["QuotaReserved"]["message"], cond
    assert not api.get("/api/v1/namespaces/research/pods?labelSelector=job-name%3Dsu5")["items"]


def test_five_pods_that_prefer_one_su_span_exactly_two(project, api):
    submit(api, job("pref5", 5, "preferred"))
    pods = placed(api, "pref5", 5)
    units = {su_of(api)[n] for n, _ in pods}
    assert len(units) == 2, pods
    assert project.su4_unit not in units  # su4 holds its unit's every GPU


def test_second_up_changes_nothing_and_a_quota_change_is_one_update_in_place(project):
    assert project.pulumi("preview", "--diff", "--expect-no-changes").returncode == 0
    config = copy.deepcopy(project.config)
    config["railyard:tenants"][1]["gpuQuota"] = 8
    project.write(config)
    try:
        steps = json.loads(project.pulumi("preview", "--json").stdout)["steps"]
    finally:
        project.write(project.config)
    changed = {(s["op"], s["urn"].rsplit("::", 1)[1]) for s in steps
               if s["op"] != "same" and "$kubernetes:" in s["urn"]}
    assert changed == {("update", "tk8s-kubernetes-clusterqueue-tk8s-vision")}


def pinned_pod(api: Client, node: str) -> str:
    """A Pod that may run on `node` only, unqueued and asking for nothing: only a cordon keeps it off."""
    name = f"pinned-{node}"
    status, body = api.request("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                 "containers": [{"name": "c", "image": "pause:latest"}]}})
    assert status == 201, body
    return name


def scheduling(api: Client, pod: str, timeout: float = 60) -> tuple[str | None, str]:
    """(node, message) once the scheduler has bound the Pod or said why not."""
    deadline = time.monotonic() + timeout
    while True:
        p = api.get(f"/api/v1/namespaces/default/pods/{pod}")
        cond = next((c for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)
        if p["spec"].get("nodeName") or cond is not None:
            return p["spec"].get("nodeName"), (cond or {}).get("message", "")
        assert time.monotonic() < deadline, p["status"]
        time.sleep(0.5)


def rerun_acceptance(project) -> None:
    urn = next(r["urn"] for r in json.loads(project.pulumi("stack", "export").stdout)["deployment"]["resources"]
               if r["urn"].endswith("-acceptance-run"))
    project.pulumi("up", "--yes", "--skip-preview", "--replace", urn, timeout=900)


def test_cordon_takes_the_node_acceptance_failed_out_of_kubernetes_and_a_pass_brings_it_back(project, api):
    config = copy.deepcopy(project.config)
    config["railyard:acceptance"] = {"onFailure": "cordon"}
    node, rail = "gpu-6", 2
    dev = make_plan(parse_config(config, stack=STACK)).node_named(node).nics[rail].netdev
    link = ["ip", "netns", "exec", names.node_ns(STACK, node), "ip", "link", "set", dev]
    subprocess.run([*link, "down"], check=True)
    try:
        project.write(config)
        project.config = config
        project.pulumi("up", "--yes", "--skip-preview", timeout=900)  # onFailure changed: acceptance runs again
        out = project.outputs()["acceptance"]
        assert list(out["cordoned"]) == [node] and [(f["node"], f["rail"]) for f in out["findings"]] == [(node, rail)], out
        cordoned = api.get(f"/api/v1/nodes/{node}")
        assert cordoned["spec"].get("unschedulable") is True
        assert re.match(rf"railyard: acceptance: {node} rail{rail}: rail-mtu",
                        cordoned["metadata"]["annotations"]["railyard.io/cordon-reason"]), cordoned["metadata"]
        assert not any(n["spec"].get("unschedulable") for n in api.get("/api/v1/nodes")["items"]
                       if n["metadata"]["name"] != node)
        pod = pinned_pod(api, node)
        bound, why = scheduling(api, pod)
        assert bound is None and "unschedulable" in why, why
    finally:
        subprocess.run([*link, "up"], check=True)
    rerun_acceptance(project)
    assert project.outputs()["acceptance"]["passed"]
    back = api.get(f"/api/v1/nodes/{node}")
    assert not back["spec"].get("unschedulable") and "railyard.io/cordon-reason" not in back["metadata"]["annotations"]
    deadline = time.monotonic() + 60
    while api.get(f"/api/v1/namespaces/default/pods/{pod}")["spec"].get("nodeName") != node:
        assert time.monotonic() < deadline, "the pinned pod was not scheduled once the node was uncordoned"
        time.sleep(0.5)
    # A Node's spec now waits on acceptance's verdict, and a verdict that stands changes nothing.
    assert project.pulumi("preview", "--diff", "--expect-no-changes").returncode == 0


# --- CoreWeave's NodePools, judged by this API server ---------------------------------------------
# CoreWeave publishes no NodePool CRD; railyard/data/coreweave/nodepool-crd.yaml is written from its
# Node Pool reference and types every documented field. The coreweave driver's own resource code
# (apply_node_pool, the same replaceOnChanges) applies its own manifests here through the real
# engine and pulumi-kubernetes; only CoreWeave's provider, whose plugin cannot be built here, is absent.

NODEPOOLS = "/apis/compute.coreweave.com/v1alpha1/nodepools"
NODEPOOL_PROGRAM = """
import json, sys
sys.path.insert(0, {root!r})
import pulumi, pulumi_kubernetes as k8s
from railyard.drivers.coreweave.driver import apply_node_pool

cfg = pulumi.Config()
provider = k8s.Provider("lab-api", kubeconfig=cfg.require_secret("kubeconfig"), enable_server_side_apply=True)
for m in json.loads(cfg.require("manifests")):
    apply_node_pool(m["metadata"]["name"], m, provider)
"""


@pytest.fixture(scope="module")
def nodepools(project, api, tmp_path_factory):
    """The CRD installed, and a one-pool program of the us-east-bm stack's NodePool on this cluster."""
    from railyard.drivers.coreweave import catalog, nodepool
    from railyard.stack import load

    crd = yaml.safe_load(catalog.NODEPOOL_CRD.read_text())
    api.apply(crd)
    api.wait_established([crd["metadata"]["name"]], timeout=30)
    spec, plan = load(ROOT / "stacks" / "Pulumi.us-east-bm.yaml")
    manifest = nodepool.manifest(plan, spec.driver_config, "h100")
    d = tmp_path_factory.mktemp("nodepools")
    (d / "Pulumi.yaml").write_text(f"name: nodepools\nruntime:\n  name: python\n  options:\n"
                                   f"    virtualenv: {ROOT / '.venv'}\n    toolchain: pip\n")
    (d / "__main__.py").write_text(NODEPOOL_PROGRAM.format(root=str(ROOT)))
    state = d / "state"
    state.mkdir()
    env = {**project.env, "PULUMI_BACKEND_URL": f"file://{state}"}

    def pulumi_(*args, check=True):
        proc = subprocess.run([str(paths.bin_dir(ROOT) / "pulumi"), *args, "--stack", "np", "--non-interactive"],
                              cwd=d, env=env, text=True, capture_output=True, timeout=600, check=False)
        assert not check or proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
        return proc

    def configure(m):
        pulumi_("config", "set", "manifests", json.dumps([m]))

    subprocess.run([str(paths.bin_dir(ROOT) / "pulumi"), "stack", "init", "np", "--secrets-provider", "passphrase",
                    "--non-interactive"], cwd=d, env=env, check=True, capture_output=True)
    kubeconfig = project.outputs(secrets=True)["kubeconfig"]
    subprocess.run([str(paths.bin_dir(ROOT) / "pulumi"), "config", "set", "--secret", "kubeconfig", "--stack", "np",
                    "--non-interactive"], cwd=d, env=env, input=kubeconfig, text=True, check=True, capture_output=True)
    configure(manifest)
    # The pools and the CRD go in test_coreweave_nodepools_are_destroyed_with_the_program, before the
    # control plane itself (a module fixture's teardown would come after the module's destroy test).
    yield pulumi_, configure, manifest


def test_coreweave_nodepool_manifests_are_accepted_with_every_field_the_driver_sets(api, nodepools):
    pulumi_, _, manifest = nodepools
    pulumi_("up", "--yes", "--skip-preview")
    got = api.get(f"{NODEPOOLS}/{manifest['metadata']['name']}")
    assert got is not None, "the NodePool was not created"
    # Everything the driver sent survived the schema (an untyped field would have been pruned).
    assert {k: got["spec"][k] for k in manifest["spec"]} == manifest["spec"]
    assert got["spec"]["instanceType"] == "gd-8xh100ib-i128" and got["spec"]["targetNodes"] == 448
    assert got["spec"]["computeClass"] == "default"  # the documented default, filled in by the schema


def changes(pulumi_) -> list[tuple[str, str]]:
    """(resource, op) of every step a preview plans that is not `same`."""
    preview = json.loads(pulumi_("preview", "--json").stdout)
    return [(s["urn"].rsplit("::", 1)[1], s["op"]) for s in preview.get("steps", []) if s["op"] != "same"]


def test_a_new_target_is_an_update_in_place_and_a_new_instance_type_a_replacement(api, nodepools):
    pulumi_, configure, manifest = nodepools
    name = manifest["metadata"]["name"]
    uid = api.get(f"{NODEPOOLS}/{name}")["metadata"]["uid"]
    grown = copy.deepcopy(manifest)
    grown["spec"]["targetNodes"] = 480
    configure(grown)
    assert changes(pulumi_) == [(name, "update")]
    pulumi_("up", "--yes", "--skip-preview")
    got = api.get(f"{NODEPOOLS}/{name}")
    assert got["spec"]["targetNodes"] == 480 and got["metadata"]["uid"] == uid
    other = copy.deepcopy(grown)
    other["spec"]["instanceType"] = "gd-8xh200ib-i128"
    configure(other)
    ops = changes(pulumi_)
    assert {n for n, _ in ops} == {name} and "replace" in {op for _, op in ops}, ops
    pulumi_("up", "--yes", "--skip-preview")
    got = api.get(f"{NODEPOOLS}/{name}")
    assert got["spec"]["instanceType"] == "gd-8xh200ib-i128" and got["metadata"]["uid"] != uid


def test_the_api_server_refuses_an_unknown_field_and_a_missing_required_one(api, nodepools):
    _, _, manifest = nodepools
    bad = copy.deepcopy(manifest)
    bad["metadata"] = {"name": "bad-unknown"}
    bad["spec"]["gpusPerNode"] = 8
    # Strict field validation answers a field the schema does not have with 400 BadRequest.
    status, body = api.request("POST", f"{NODEPOOLS}?fieldValidation=Strict", bad)
    assert status == 400 and 'unknown field "spec.gpusPerNode"' in body["message"], body
    missing = copy.deepcopy(manifest)
    missing["metadata"] = {"name": "bad-missing"}
    del missing["spec"]["targetNodes"]
    status, body = api.request("POST", NODEPOOLS, missing)
    assert status == 422 and "spec.targetNodes: Required value" in body["message"], body
    wrong = copy.deepcopy(manifest)
    wrong["metadata"] = {"name": "bad-taint"}
    wrong["spec"]["nodeTaints"] = [{"key": "k", "effect": "Sometimes"}]
    status, body = api.request("POST", NODEPOOLS, wrong)
    assert status == 422 and "spec.nodeTaints[0].effect" in body["message"], body


def test_coreweave_nodepools_are_destroyed_with_the_program(api, nodepools):
    pulumi_, _, manifest = nodepools
    pulumi_("destroy", "--yes", "--skip-preview")
    assert api.get(f"{NODEPOOLS}/{manifest['metadata']['name']}") is None
    status, body = api.request(
        "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodepools.compute.coreweave.com")
    assert status == 200, body


def test_destroy_stops_the_control_plane_and_leaves_nothing(project):
    project.pulumi("destroy", "--yes", "--skip-preview")
    assert not net.netns_exists(names.control_plane_ns(STACK))
    assert not control_plane.control_plane_dir(STACK).exists()
    left = gc.inventory(STACK)
    assert {k: v for k, v in left.items() if v and k != "stack"} == {}, left
