"""model.kubernetes: the Kubernetes layer derived from the plan (labels, capacity, Kueue objects,
secondary networks), checked against the plan's own fabric and tuning and, for the rendered
NetworkAttachmentDefinitions, against the SR-IOV operator's own code."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from railyard.engine import control_plane as binaries
from railyard.model.catalog import load_catalog
from railyard.model.errors import SpecError
from railyard.model.plan import make_plan
from railyard.stack import parse_config

CATALOG = load_catalog()


def config(count: int = 12, *, layout: str = "bare-metal", kind: str = "infiniband", pools=None,
           reserved: int = 28, vfs: int = 2, tenants=None, kubernetes=None, driver: str = "lab",
           speed: str | None = None) -> dict:
    compute = {"kind": kind, "speed": speed or ("ndr" if kind == "infiniband" else "400gbe"),
               "switch": "qm9700" if kind == "infiniband" else "sn5600", "cidr": "198.19.0.0/16",
               "reservedLeafPorts": reserved}
    cfg = {
        "railyard:region": "r", "railyard:layout": layout, "railyard:driver": driver,
        "railyard:nodePools": pools or [{"name": "gpu", "sku": "dgx-h100", "count": count}],
        "railyard:fabric": {"compute": compute, "storage": {"cidr": "198.18.32.0/19"},
                            "management": {"cidr": "198.18.0.0/19"}},
        "railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": 25}, "sriov": {"vfsPerPf": vfs}},
        "railyard:kubernetes": kubernetes if kubernetes is not None else {},
    }
    if tenants is not None:
        cfg["railyard:tenants"] = tenants
    return cfg


def plan_of(cfg: dict):
    return make_plan(parse_config(cfg, stack="t"), CATALOG)


def test_each_node_is_labelled_with_the_scalable_unit_of_its_leaves():
    plan = plan_of(config())
    k8s = plan.kubernetes
    by_name = {n.name: n for n in k8s.nodes}
    for node in plan.nodes:
        su = by_name[node.name].labels["railyard.io/su"]
        # every rail's leaf of the node belongs to the unit its label names
        assert {nic.leaf.rsplit("-leaf", 1)[0] for nic in node.nics} == {su}
    assert [by_name[f"gpu-{i}"].labels["railyard.io/su"] for i in (0, 3, 4, 8, 11)] == \
        ["gpu-su0", "gpu-su0", "gpu-su1", "gpu-su2", "gpu-su2"]
    assert by_name["gpu-0"].labels["kubernetes.io/hostname"] == "gpu-0"
    assert "railyard.io/spine-group" not in by_name["gpu-0"].labels  # two tiers: no spine groups
    assert k8s.summary()["topology"] == ["railyard.io/su", "kubernetes.io/hostname"]


def test_a_three_tier_fabric_adds_the_spine_group_the_cabling_wires_each_leaf_to():
    plan = plan_of(config(count=512, reserved=0))
    assert plan.fabric.tiers == 3
    k8s = plan.kubernetes
    groups = {n.name: n.labels["railyard.io/spine-group"] for n in k8s.nodes}
    leaf_group = {}
    for link in plan.fabric.links():
        if link.tier == "leaf_spine":
            leaf_group.setdefault(link.a_device, set()).add(link.b_device.split("-spine")[0])
    for node in plan.nodes[::37]:
        assert leaf_group[node.nics[0].leaf] == {groups[node.name]}, node.name
    assert k8s.summary()["topology"] == ["railyard.io/spine-group", "railyard.io/su", "kubernetes.io/hostname"]
    assert len(set(groups.values())) == plan.fabric.layout("gpu").groups


def test_capacity_is_what_the_sku_and_the_tuning_give():
    plan = plan_of(config())
    node = plan.kubernetes.nodes[0]
    tuning = plan.tuning(plan.nodes[0])
    pages = tuning.hugepages_total + sum(tuning.hugepages_per_numa.values())
    assert node.capacity["nvidia.com/gpu"] == "8"
    assert node.capacity["hugepages-1Gi"] == f"{pages}Gi" and pages == 512
    assert node.capacity["cpu"] == str(CATALOG.nodes["dgx-h100"].threads)
    assert {k: v for k, v in node.capacity.items() if "/rail" in k} == {f"nvidia.com/rail{r}": "2" for r in range(8)}
    # hugepages come out of allocatable memory
    gib = {"Ti": 1024, "Gi": 1}
    assert int(node.allocatable["memory"][:-2]) * gib[node.allocatable["memory"][-2:]] < \
        int(node.capacity["memory"][:-2]) * gib[node.capacity["memory"][-2:]] - pages
    assert node.capacity["memory"] == "2Ti"  # as the API server writes 2048Gi back
    # no VFs: a rail is its whole HCA, through the RDMA device plugin
    plain = plan_of(config(vfs=0)).kubernetes.nodes[0]
    assert {k: v for k, v in plain.capacity.items() if "/rail" in k} == {f"rdma/rail{r}": "1" for r in range(8)}


def test_in_the_virtual_layout_the_vms_are_the_nodes_and_no_gpu_is_counted_twice():
    cfg = config(count=2, layout="virtual", kind="roce", reserved=0, vfs=0, speed="100gbe",
                 pools=[{"name": "vela", "sku": "vela-a100", "count": 2, "vmsPerHost": 2,
                         "vm": {"gpus": 4, "vcpus": 32, "memoryGiB": 512, "vfs": 2}}])
    cfg["railyard:tuning"] = {"hugepages": {"size": "1G", "percentOfMemory": 80}}
    plan = plan_of(cfg)
    nodes = plan.kubernetes.nodes
    vms = [vm for host in plan.nodes for vm in host.vms]
    assert [n.name for n in nodes] == [vm.name for vm in vms]
    assert sum(n.gpus for n in nodes) == sum(len(CATALOG.nodes["vela-a100"].gpus) for _ in plan.nodes) == 16
    first = nodes[0]
    assert first.labels["railyard.io/host"] == plan.nodes[0].name and first.hypervisor == plan.nodes[0].name
    rails = {k: v for k, v in first.capacity.items() if "/rail" in k}
    assert sum(int(v) for v in rails.values()) == 2  # the VM's own VFs
    assert plan.kubernetes.summary()["topology"][-2:] == ["railyard.io/host", "kubernetes.io/hostname"]
    assert plan.kubernetes.sriov_policies == []  # the hypervisors' tuning makes the VFs
    # Acceptance checks the hypervisors: a VM leaves scheduling with its own, and only with it.
    reason = f"railyard: acceptance: {plan.nodes[0].name}: pfs: not mounted"
    cordons = {n.name: plan.kubernetes.cordon(n, {plan.nodes[0].name: reason}) for n in nodes}
    assert {name for name, (spec, _) in cordons.items() if spec} == {vm.name for vm in plan.nodes[0].vms}
    assert cordons[nodes[0].name] == ({"unschedulable": True}, {"railyard.io/cordon-reason": reason})


def test_kueue_gets_a_flavor_per_pool_a_queue_per_tenant_and_quotas_that_add_up():
    pools = [{"name": "gpu", "sku": "dgx-h100", "count": 4}, {"name": "big", "sku": "dgx-h100", "count": 2}]
    tenants = [{"name": "research", "gpuQuota": 40}, {"name": "vision", "pools": ["big"], "namespace": "cv"}]
    k8s = plan_of(config(pools=pools, tenants=tenants)).kubernetes
    kinds = [o["kind"] for o in k8s.kueue]
    assert kinds == ["Topology", "ResourceFlavor", "ResourceFlavor", "ClusterQueue", "ClusterQueue",
                     "LocalQueue", "LocalQueue"]
    flavors = [o for o in k8s.kueue if o["kind"] == "ResourceFlavor"]
    assert [(f["spec"]["nodeLabels"], f["spec"]["topologyName"]) for f in flavors] == \
        [({"railyard.io/pool": "gpu"}, "t"), ({"railyard.io/pool": "big"}, "t")]
    cqs = {o["metadata"]["name"]: o for o in k8s.kueue if o["kind"] == "ClusterQueue"}

    def gpus(cq):
        return {f["name"]: next(r["nominalQuota"] for r in f["resources"] if r["name"] == "nvidia.com/gpu")
                for f in cq["spec"]["resourceGroups"][0]["flavors"]}

    # 40 over gpu (32 GPUs) then big: filled in stack order; vision: all of big by default
    assert gpus(cqs["t-research"]) == {"t-gpu": "32", "t-big": "8"}
    assert gpus(cqs["t-vision"]) == {"t-big": "16"}
    assert cqs["t-vision"]["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "cv"}}
    assert {cq["spec"]["cohortName"] for cq in cqs.values()} == {"t"}
    research = cqs["t-research"]["spec"]["resourceGroups"][0]
    # the quota is a cap: nothing borrowed from the cohort
    assert {r["borrowingLimit"] for f in research["flavors"] for r in f["resources"] if r["name"] == "nvidia.com/gpu"} \
        == {"0"}
    # a job asking for hugepages or a rail's VFs is accounted, not refused as uncovered
    assert {"hugepages-1Gi", "nvidia.com/rail0", "nvidia.com/rail7"} <= set(research["coveredResources"])
    hp = {f["name"]: next(r["nominalQuota"] for r in f["resources"] if r["name"] == "hugepages-1Gi")
          for f in research["flavors"]}
    assert hp == {"t-gpu": "2Ti", "t-big": "1Ti"}  # 4 and 2 nodes x 512 GiB, in canonical form
    lqs = [(o["metadata"]["namespace"], o["spec"]["clusterQueue"]) for o in k8s.kueue if o["kind"] == "LocalQueue"]
    assert lqs == [("research", "t-research"), ("cv", "t-vision")]
    assert k8s.namespaces == ["research", "cv"]


def test_without_tenants_everyone_shares_one_queue_in_a_namespace_named_after_the_stack():
    k8s = plan_of(config(count=4)).kubernetes
    assert k8s.namespaces == ["t"]
    lq = [o for o in k8s.kueue if o["kind"] == "LocalQueue"]
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in lq] == [("t", "gpu")]
    assert [n["metadata"]["name"] for n in k8s.sriov_networks] == [f"t-rail{r}" for r in range(8)]


def test_sriov_policies_per_pool_and_rail_name_the_skus_pfs_and_networks_carry_the_tenant():
    plan = plan_of(config(count=4, tenants=[{"name": "research", "pkey": "0x8005"}]))
    k8s = plan.kubernetes
    assert len(k8s.sriov_policies) == 8
    p = k8s.sriov_policies[3]["spec"]
    assert p["nicSelector"]["pfNames"] == [plan.nodes[0].nics[3].netdev]
    assert (p["numVfs"], p["linkType"], p["isRdma"], p["resourceName"]) == (2, "ib", True, "rail3")
    assert p["nodeSelector"] == {"railyard.io/pool": "gpu"}
    net = k8s.sriov_networks[0]
    assert net["kind"] == "SriovIBNetwork" and net["spec"]["networkNamespace"] == "research"
    assert net["metadata"]["annotations"] == {"railyard.io/pkey": "0x8005"}
    roce = plan_of(config(count=4, kind="roce", reserved=0, tenants=[{"name": "research", "vlan": 300}])).kubernetes
    assert {n["kind"] for n in roce.sriov_networks} == {"SriovNetwork"}
    assert {n["spec"]["vlan"] for n in roce.sriov_networks} == {300}
    assert {p["spec"]["linkType"] for p in roce.sriov_policies} == {"eth"}


def test_the_layer_adds_one_object_per_node_and_everything_else_is_per_pool_rail_or_tenant():
    small, large = (plan_of(config(count=n)).kubernetes for n in (12, 24))
    assert len(large.nodes) - len(small.nodes) == 12

    def others(k):
        return len(k.kueue) + len(k.sriov_policies) + len(k.sriov_networks) + len(k.network_attachments)

    assert others(small) == others(large)


def test_label_and_resource_prefixes_follow_the_stack():
    k8s = plan_of(config(count=4, kubernetes={"labelPrefix": "topology.example.com",
                                              "resourcePrefix": "example.com"})).kubernetes
    assert "topology.example.com/su" in k8s.nodes[0].labels
    assert "example.com/rail0" in k8s.nodes[0].capacity
    assert k8s.network_attachments[0]["metadata"]["annotations"] == \
        {"k8s.v1.cni.cncf.io/resourceName": "example.com/rail0"}


@pytest.mark.parametrize("kubernetes, path", [
    ({"labelPrefix": "kubernetes.io"}, "railyard:kubernetes.labelPrefix"),
    ({"labelPrefix": "Bad_Prefix"}, "railyard:kubernetes.labelPrefix"),
    ({"resourcePrefix": "-x.com"}, "railyard:kubernetes.resourcePrefix"),
    ({"kubeconfig": "apiVersion: v1"}, "railyard:kubernetes.kubeconfig"),
    ({"kubeconfg": 1}, "railyard:kubernetes.kubeconfg"),
])
def test_bad_kubernetes_settings_name_the_key(kubernetes, path):
    with pytest.raises(SpecError) as exc:
        plan_of(config(count=2, kubernetes=kubernetes))
    assert path in [p.path for p in exc.value.problems]


@pytest.mark.parametrize("tenant, path", [
    ({"name": "default"}, "railyard:tenants[0].name"),
    ({"name": "ops", "namespace": "kube-system"}, "railyard:tenants[0].namespace"),
    ({"name": "ops", "namespace": "kueue-system"}, "railyard:tenants[0].namespace"),
])
def test_a_tenant_may_not_take_a_namespace_the_layer_would_delete_that_is_not_its_own(tenant, path):
    with pytest.raises(SpecError) as exc:
        plan_of(config(count=2, tenants=[tenant]))
    assert path in [p.path for p in exc.value.problems]


def test_a_pool_name_too_long_for_its_scalable_unit_label_is_refused():
    name = "p" * 60  # node names p...p-0 and p...p-1 fit 63 characters; the unit label p...p-su0 does not
    with pytest.raises(SpecError) as exc:
        plan_of(config(count=2, pools=[{"name": name, "sku": "dgx-h100", "count": 2}]))
    assert [p.path for p in exc.value.problems] == ["railyard:nodePools[0].name"]
    plan_of({**config(count=2, pools=[{"name": name, "sku": "dgx-h100", "count": 2}]), "railyard:kubernetes": None})


def test_stack_names_that_are_not_dns_labels_still_give_distinct_object_names():
    from railyard.model.kubernetes import object_prefix

    assert object_prefix("lab-k8s") == "lab-k8s"
    assert object_prefix("a_b") != object_prefix("a-b")
    long = "x" * 60
    assert object_prefix(long) != object_prefix(long + "y") and len(object_prefix(long)) <= 40


def _operator_render(objs: list[dict], resource_prefix: str) -> list[dict]:
    tool = binaries.sriov_render()
    out = subprocess.run([str(tool), str(binaries.sriov_module())], input=json.dumps(objs), capture_output=True,
                         text=True, check=True, env={**os.environ, "RESOURCE_PREFIX": resource_prefix})
    return json.loads(out.stdout)


@pytest.mark.parametrize("kind, tenants", [
    ("infiniband", [{"name": "research"}, {"name": "vision", "namespace": "cv"}]),
    ("roce", [{"name": "research", "vlan": 300}, {"name": "vision"}]),
])
def test_rendered_attachments_are_byte_for_byte_what_the_operator_renders(kind, tenants):
    k8s = plan_of(config(count=4, kind=kind, reserved=0, tenants=tenants)).kubernetes
    assert k8s.network_attachments == _operator_render(k8s.sriov_networks, k8s.resource_prefix)
