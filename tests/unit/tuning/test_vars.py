"""host_vars: the role variables of one node, from the spec and the plan."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from railyard.model.plan import make_plan
from railyard.stack import load_stack_file
from railyard.tuning.vars import host_vars

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "playbooks/roles"
STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


def _options(role: str) -> set[str]:
    spec = yaml.safe_load((ROLES / role / "meta/argument_specs.yml").read_text())
    return set(spec["argument_specs"]["main"]["options"])


@pytest.mark.parametrize("stack", STACKS)
def test_every_role_variable_host_vars_sets_is_an_option_of_that_role(stack):
    spec = load_stack_file(ROOT / f"stacks/Pulumi.{stack}.yaml")
    plan = make_plan(spec)
    v = host_vars(spec, plan, plan.nodes[0])
    roles = sorted((p.name for p in ROLES.iterdir()), key=len, reverse=True)
    for key in v:
        if key.startswith("railyard_"):
            continue
        role = next((r for r in roles if key.startswith(r + "_")), None)
        assert role, f"{key}: no role of that prefix"
        assert key in _options(role), f"{key} is not an option of role {role} (meta/argument_specs.yml)"


@pytest.mark.parametrize("stack", STACKS)
def test_hugepages_per_node_add_up_to_the_specs_share_of_memory(stack):
    spec = load_stack_file(ROOT / f"stacks/Pulumi.{stack}.yaml")
    plan = make_plan(spec)
    node = plan.nodes[0]
    v = host_vars(spec, plan, node)
    sku = plan.catalog.nodes[node.sku]
    if sku.memory_gib is None:
        return
    want = spec.tuning.hugepages.pages_for(sku.memory_gib)
    assert sum(v["hugepages_per_node"].values()) + v["hugepages_total"] == want


def test_lab_dgx_h100_vars():
    spec = load_stack_file(ROOT / "stacks/Pulumi.lab.yaml")
    plan = make_plan(spec)
    v = host_vars(spec, plan, "gpu-1")
    assert v["railyard_node"] == "gpu-1"
    assert v["hugepages_per_node"] == {"0": 512, "1": 512}, "50% of 2048 GiB in 1 GiB pages, 4 GPUs per node"
    assert v["sriov_pfs"] == [] and v["gpu_nic_affinity_vms"] == []
    assert v["verify_expected_pairing"]["GPU5"] == "mlx5_9"
    assert v["gpu_nic_affinity_nccl_cross_nic"] == 0
    with pytest.raises(KeyError, match="no host"):
        host_vars(spec, plan, "gpu-9")


def test_lab_virtual_vars_give_the_vm_its_vfs_with_the_pf_macs():
    spec = load_stack_file(ROOT / "stacks/Pulumi.lab-virtual.yaml")
    plan = make_plan(spec)
    v = host_vars(spec, plan, plan.nodes[0], object_endpoint="http://198.18.0.2:8333", dataset_prefix="train/")
    assert [pf["numvfs"] for pf in v["sriov_pfs"]] == [4, 4]
    vm = v["gpu_nic_affinity_vms"][0]
    macs = {(pf["name"], vf["index"]): vf["mac"] for pf in v["sriov_pfs"] for vf in pf["vfs"]}
    for vf in vm["vfs"]:
        assert macs[(vf["pf"], vf["index"])] == vf["mac"]
    assert v["dataset_cache_endpoint"] == "http://198.18.0.2:8333" and v["dataset_cache_prefix"] == "train/"
    assert v["iommu_mode"] == "passthrough" and v["iommu_cpu_vendor"] == "intel"


@pytest.mark.parametrize("stack", STACKS)
def test_lldp_runs_on_an_ethernet_fabrics_rails_and_nowhere_else(stack):
    """The lldp role gets each host's compute NICs on a RoCE fabric, so verify can read its cabling;
    an InfiniBand stack's tuning inputs carry no LLDP variable at all."""
    from railyard.drivers.lab.tuning import LLDP_VARS, node_vars

    spec = load_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    plan = make_plan(spec)
    for node in plan.nodes:
        v = host_vars(spec, plan, node)
        lab = node_vars(spec, plan, node)
        if spec.fabric.compute.kind == "infiniband":
            assert not any(k.startswith("lldp_") for k in {**v, **lab}), stack
        else:
            assert v["lldp_interfaces"] == [n.netdev for n in node.nics] and all(v["lldp_interfaces"])
            assert {k: lab[k] for k in LLDP_VARS} == LLDP_VARS
