"""The coreweave driver under Pulumi mocks: what a user would check in CoreWeave's console and in
the cluster. Its provider plugin cannot be built here, so mocks (and mypy, tests/unit/test_typecheck.py)
are how its resources are checked; the NodePool manifests themselves meet a real API server in
tests/lab/test_lab_kubernetes.py."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path

import pulumi
import pytest
import yaml

from railyard.drivers.coreweave import nodepool
from railyard.model.plan import make_plan
from railyard.stack import parse_config

ROOT = Path(__file__).resolve().parents[4]
STACK_FILE = ROOT / "stacks" / "Pulumi.us-east-bm.yaml"
TOKEN = "CW-SECRET-mock-token-0123456789"


PROVIDER_OF: dict[str, str] = {}
"""Each resource's provider reference, as the engine would be given it."""


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        PROVIDER_OF[args.name] = args.provider or ""
        outs = dict(args.inputs)
        if args.typ == "coreweave:index/cksCluster:CksCluster":
            outs["apiServerEndpoint"] = "abc123.k8s.us-east-04a.coreweave.com"
        return f"{args.name}-id", outs

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def region_config() -> dict:
    return copy.deepcopy(yaml.safe_load(STACK_FILE.read_text())["config"])


def build(config: dict, stack: str = "us-east-bm"):
    """The program's wiring for `config` under mocks: (resources by name: (type, inputs), cluster, plan)."""
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack=stack, preview=False)
    pulumi.runtime.set_all_config({"coreweave:token": TOKEN}, secret_keys=["coreweave:token"])
    from components.cluster import Cluster, ClusterArgs
    from railyard.drivers.base import load_driver

    spec = parse_config(config, stack)
    plan = make_plan(spec)
    cluster = Cluster(spec.stack, ClusterArgs(spec=spec, plan=plan), load_driver(spec, plan))
    asyncio.get_event_loop().run_until_complete(pulumi.runtime.stack.wait_for_rpcs())
    monitor = pulumi.runtime.settings.get_monitor()
    resources = {u.rsplit("::", 1)[1]: (u.split("::")[2].rsplit("$", 1)[-1], monitor.resources[u].state)
                 for u in monitor.resources}
    return resources, cluster, plan


def resolve(output):
    fut = asyncio.get_event_loop().create_future()
    output.apply(lambda v: fut.set_result(v) if not fut.done() else None)
    return asyncio.get_event_loop().run_until_complete(fut)


def of_type(resources, typ: str) -> dict[str, dict]:
    return {name: state for name, (t, state) in resources.items() if t == typ}


TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def region():
    """us-east-bm with its commented example taint on the pool."""
    config = region_config()
    config["railyard:coreweave"]["pools"]["h100"]["taints"] = [TAINT]
    return build(config)


def test_one_nodepool_per_pool_with_the_catalogs_instance_type_and_the_pools_count(region):
    resources, _, plan = region
    pools = of_type(resources, "kubernetes:compute.coreweave.com/v1alpha1:NodePool")
    assert len(pools) == 1
    (state,) = pools.values()
    assert state["metadata"]["name"] == "us-east-bm-h100"
    spec = state["spec"]
    assert spec["instanceType"] == "gd-8xh100ib-i128"
    assert spec["targetNodes"] == 448 == len(plan.nodes)
    assert spec["autoscaling"] is False and "minNodes" not in spec and "maxNodes" not in spec


def test_nodepool_labels_are_the_layers_per_pool_labels_and_the_stacks_own_and_taints_pass_through(region):
    resources, _, _ = region
    (state,) = of_type(resources, "kubernetes:compute.coreweave.com/v1alpha1:NodePool").values()
    assert state["spec"]["nodeLabels"] == {
        "railyard.io/pool": "h100", "railyard.io/sku": "dgx-h100", "railyard.io/fabric": "infiniband",
        "railyard.io/fabric-speed": "ndr", "team": "llm-training"}
    # No per-node label: CoreWeave's own fabric labels say where a node is.
    assert not any(k.endswith(("/su", "/spine-group")) for k in state["spec"]["nodeLabels"])
    assert state["spec"]["nodeTaints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_autoscaling_bounds_reach_the_nodepool():
    config = region_config()
    config["railyard:coreweave"]["pools"]["h100"].update(autoscaling=True, minNodes=416, maxNodes=480)
    resources, _, _ = build(config)
    (state,) = of_type(resources, "kubernetes:compute.coreweave.com/v1alpha1:NodePool").values()
    assert (state["spec"]["autoscaling"], state["spec"]["minNodes"], state["spec"]["maxNodes"]) == (True, 416, 480)


def test_no_resource_per_node_and_no_host_tuning(region):
    resources, cluster, _ = region
    # 448 nodes, and a handful of resources: the VPC, the cluster, the bucket, the pool, Kueue's objects.
    assert len(resources) < 40, sorted(resources)
    assert not [n for n in resources if "tuning" in n or n.endswith("-host")]
    assert cluster.tuning is None and cluster.acceptance is None
    assert "platform tunes its own machines" in cluster.tuning_note


def test_the_vpc_addresses_nodes_from_the_management_network_and_holds_the_clusters_named_ranges(region):
    resources, _, plan = region
    (vpc,) = of_type(resources, "coreweave:index/networkingVpc:NetworkingVpc").values()
    assert vpc["zone"] == "US-EAST-04A" and vpc["name"] == "us-east-04-us-east-bm"
    # The nodes' addresses: the primary host prefix is the plan's management network.
    assert vpc["hostPrefixes"] == [{"name": "management", "type": "PRIMARY",
                                    "prefixes": [plan.networks.management.cidr]}]
    assert {p["name"]: p["value"] for p in vpc["vpcPrefixes"]} == {
        "pod-cidr": "10.0.0.0/13", "service-cidr": "10.8.0.0/16", "internal-lb-cidr": "10.9.0.0/16"}
    (cks,) = of_type(resources, "coreweave:index/cksCluster:CksCluster").values()
    assert (cks["zone"], cks["version"], cks["podCidrName"], cks["serviceCidrName"], cks["internalLbCidrNames"]) == \
        ("US-EAST-04A", "v1.32", "pod-cidr", "service-cidr", ["internal-lb-cidr"])
    assert cks["vpcId"] == "us-east-bm-fabric-net-vpc-id" and cks["public"] is False


def test_every_coreweave_resource_goes_through_the_stacks_provider_with_its_token(region):
    resources, _, _ = region
    providers = of_type(resources, "pulumi:providers:coreweave")
    assert list(providers) == ["us-east-bm-coreweave"]
    assert plaintext_and_secret_hits(providers["us-east-bm-coreweave"], TOKEN) == (0, 1)
    cw = [name for name, (t, _) in resources.items() if t.startswith("coreweave:index")]
    assert len(cw) == 4  # VPC, cluster, bucket, lifecycle
    for name in cw:
        assert "::us-east-bm-coreweave::" in PROVIDER_OF[name], name


def test_the_provider_keeps_the_stacks_other_coreweave_settings():
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack="us-east-bm", preview=False)
    pulumi.runtime.set_all_config({"coreweave:token": TOKEN, "coreweave:endpoint": "https://api.example.invalid/",
                                   "coreweave:httpTimeout": "30s"}, secret_keys=["coreweave:token"])
    from components.cluster import Cluster, ClusterArgs
    from railyard.drivers.base import load_driver

    spec = parse_config(region_config(), "us-east-bm")
    plan = make_plan(spec)
    Cluster(spec.stack, ClusterArgs(spec=spec, plan=plan), load_driver(spec, plan))
    asyncio.get_event_loop().run_until_complete(pulumi.runtime.stack.wait_for_rpcs())
    monitor = pulumi.runtime.settings.get_monitor()
    (state,) = [r.state for u, r in monitor.resources.items() if u.endswith("::us-east-bm-coreweave")]
    assert (state["endpoint"], state["httpTimeout"]) == ("https://api.example.invalid/", "30s")


def test_the_object_tier_is_a_bucket_with_its_lifecycle_and_policy():
    config = region_config()
    policy = {"Version": "2012-10-17", "Statement": [{"Sid": "readers", "Effect": "Allow",
                                                        "Principal": {"CW": ["arn:aws:iam::org:user/reader"]},
                                                        "Action": ["s3:GetObject"],
                                                        "Resource": ["arn:aws:s3:::datasets/*"]}]}
    config["railyard:coreweave"]["objectStorage"]["policy"] = policy
    resources, _, _ = build(config)
    (bucket,) = of_type(resources, "coreweave:index/objectStorageBucket:ObjectStorageBucket").values()
    assert bucket["name"] == "datasets" and bucket["zone"] == "US-EAST-04A"
    assert bucket["tags"] == {"railyard-region": "us-east-04", "railyard-stack": "us-east-bm"}
    (pol,) = of_type(resources, "coreweave:index/objectStorageBucketPolicy:ObjectStorageBucketPolicy").values()
    assert pol["bucket"] == "datasets" and json.loads(pol["policy"]) == policy
    (life,) = of_type(resources, "coreweave:index/objectStorageBucketLifecycleConfiguration:"
                                 "ObjectStorageBucketLifecycleConfiguration").values()
    assert life["rules"] == [{"id": "abort-stale-uploads", "status": "Enabled",
                              "abortIncompleteMultipartUpload": {"daysAfterInitiation": 7}}]


def test_without_a_policy_or_lifecycle_there_is_only_the_bucket():
    config = region_config()
    del config["railyard:coreweave"]["objectStorage"]
    resources, _, _ = build(config)
    assert len(of_type(resources, "coreweave:index/objectStorageBucket:ObjectStorageBucket")) == 1
    assert not [t for t, _ in resources.values() if "objectStorageBucketPolicy" in t or "Lifecycle" in t]


def test_kueue_comes_from_coreweaves_chart_and_its_topology_is_coreweaves_labels(region):
    resources, _, _ = region
    (release,) = of_type(resources, "kubernetes:helm.sh/v3:Release").values()
    assert (release["chart"], release["version"], release["namespace"]) == ("cks-kueue", "0.1.0", "kueue-system")
    assert release["repositoryOpts"]["repo"] == "https://charts.core-services.ingress.coreweave.com"
    (topology,) = of_type(resources, "kubernetes:kueue.x-k8s.io/v1beta2:Topology").values()
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        "backend.coreweave.cloud/fabric", "ib.coreweave.cloud/superpod", "backend.coreweave.cloud/leafgroup",
        "kubernetes.io/hostname"]
    # No Node is patched: the platform's nodes come and go.
    assert not of_type(resources, "kubernetes:core/v1:NodePatch")


def test_roce_topology_has_no_superpod_level():
    from railyard.drivers.coreweave.config import topology_levels

    assert "ib.coreweave.cloud/superpod" not in topology_levels("roce")
    assert topology_levels("infiniband")[1] == "ib.coreweave.cloud/superpod"


SECRET_SIG = "4dabf18193072939515e22adb298388d"  # how Pulumi marks a secret value on the wire


def plaintext_and_secret_hits(value, needle: str) -> tuple[int, int]:
    """(times `needle` is in a plain value, times it is inside a secret) anywhere in `value`."""
    if isinstance(value, dict):
        if SECRET_SIG in value:
            return 0, int(needle in json.dumps(value.get("value")))
        hits = [plaintext_and_secret_hits(v, needle) for v in value.values()]
    elif isinstance(value, list):
        hits = [plaintext_and_secret_hits(v, needle) for v in value]
    else:
        return int(isinstance(value, str) and needle in value), 0
    return sum(h[0] for h in hits), sum(h[1] for h in hits)


def test_the_api_token_stays_secret(region):
    resources, cluster, _ = region
    assert asyncio.get_event_loop().run_until_complete(cluster.kubeconfig.is_secret())
    plain = {name: plaintext_and_secret_hits(state, TOKEN) for name, (_, state) in resources.items()}
    assert not [name for name, (p, _) in plain.items() if p], "the token in plain text"
    # It reaches CoreWeave's provider and both Kubernetes providers (the NodePools' and the
    # layer's), as a secret.
    assert sorted(name for name, (_, s) in plain.items() if s) == ["us-east-bm-cks-provider", "us-east-bm-coreweave",
                                                                  "us-east-bm-kubernetes-provider"]


def test_a_new_instance_type_replaces_the_pool_and_the_autoscaler_owns_an_autoscaled_target():
    spec = parse_config(region_config(), "us-east-bm")
    fixed = nodepool.manifest(make_plan(spec), spec.driver_config, "h100")
    assert nodepool.resource_options(fixed) == {"replace_on_changes": ["spec.instanceType"],
                                               "delete_before_replace": True}
    config = region_config()
    config["railyard:coreweave"]["pools"]["h100"].update(autoscaling=True, minNodes=416, maxNodes=480)
    spec = parse_config(config, "us-east-bm")
    scaled = nodepool.manifest(make_plan(spec), spec.driver_config, "h100")
    assert nodepool.resource_options(scaled)["ignore_changes"] == ["spec.targetNodes"]


def test_kueue_tolerates_the_pools_taints_so_queued_jobs_can_land_there(region):
    resources, _, _ = region
    (flavor,) = of_type(resources, "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor").values()
    assert flavor["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                              "effect": "NoSchedule"}]


def test_a_region_stack_is_protected_unless_it_says_otherwise():
    from railyard.drivers.base import load_driver
    from railyard.lifecycle import protected

    spec = parse_config(region_config(), "us-east-bm")
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack="us-east-bm", preview=False)
    pulumi.runtime.set_all_config({"coreweave:token": TOKEN}, secret_keys=["coreweave:token"])
    driver = load_driver(spec, make_plan(spec))
    assert protected(spec.protect, ephemeral=False, playground=driver.playground) is True


def test_without_any_token_the_program_stops_before_registering_anything(monkeypatch):
    from railyard.drivers.base import load_driver

    monkeypatch.delenv("COREWEAVE_API_TOKEN", raising=False)
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack="us-east-bm", preview=False)
    pulumi.runtime.set_all_config({})
    spec = parse_config(region_config(), "us-east-bm")
    with pytest.raises(pulumi.RunError, match="no CoreWeave API token"):
        load_driver(spec, make_plan(spec))
    assert not pulumi.runtime.settings.get_monitor().resources


def test_the_registered_resources_carry_the_replacement_options():
    """What the engine is told, not what a helper returns: the NodePool is replaced (deleted first)
    on a new instanceType and leaves an autoscaled targetNodes alone; CoreWeave's named resources
    are deleted before their replacement."""
    from pulumi.runtime.mocks import MockMonitor

    class Monitor(MockMonitor):
        def __init__(self, mocks):
            super().__init__(mocks)
            self.requests = {}

        def RegisterResource(self, request):
            response = super().RegisterResource(request)
            self.requests[response.urn.rsplit("::", 1)[1]] = request
            return response

    config = region_config()
    config["railyard:coreweave"]["pools"]["h100"].update(autoscaling=True, minNodes=416, maxNodes=480)
    mocks = Mocks()
    monitor = Monitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="railyard", stack="us-east-bm", preview=False, monitor=monitor)
    pulumi.runtime.set_all_config({"coreweave:token": TOKEN}, secret_keys=["coreweave:token"])
    from components.cluster import Cluster, ClusterArgs
    from railyard.drivers.base import load_driver

    spec = parse_config(config, "us-east-bm")
    plan = make_plan(spec)
    Cluster(spec.stack, ClusterArgs(spec=spec, plan=plan), load_driver(spec, plan))
    asyncio.get_event_loop().run_until_complete(pulumi.runtime.stack.wait_for_rpcs())
    pool = monitor.requests["us-east-bm-h100-machines"]
    assert list(pool.replaceOnChanges) == ["spec.instanceType"] and pool.deleteBeforeReplace
    assert list(pool.ignoreChanges) == ["spec.targetNodes"]
    named = [r for r in monitor.requests.values() if r.type.startswith("coreweave:index")]
    assert len(named) == 4 and all(r.deleteBeforeReplace for r in named)
