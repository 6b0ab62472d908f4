"""Slurm from the plan (railyard.model.slurm): a leaf per scalable unit, the tiers above it from the
cabling, the SKU's counts, and the railyard:slurm keys' validation."""

from __future__ import annotations

import pytest

from railyard.model.catalog import load_catalog
from railyard.model.errors import SpecError
from railyard.model.plan import make_plan
from railyard.model.slurm import gpu_type, hostlist, sku_counts
from tests.unit.model.model_only import parse_config

CATALOG = load_catalog()


def config(count: int = 12, *, reserved: int = 28, slurm=None, layout: str = "bare-metal", pools=None,
           driver: str = "lab") -> dict:
    cfg = {
        "railyard:region": "us-east", "railyard:layout": layout, "railyard:driver": driver,
        "railyard:nodePools": pools or [{"name": "gpu", "sku": "dgx-h100", "count": count}],
        "railyard:fabric": {"compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700",
                                        "cidr": "198.19.0.0/16", "reservedLeafPorts": reserved},
                            "storage": {"cidr": "198.18.32.0/19"}, "management": {"cidr": "198.18.0.0/19"}},
        "railyard:slurm": {} if slurm is None else slurm,
    }
    return cfg


def plan_of(cfg: dict):
    return make_plan(parse_config(cfg, stack="t"), CATALOG)


def problems(cfg: dict) -> dict[str, str]:
    with pytest.raises(SpecError) as err:
        parse_config(cfg, stack="t")
    return {p.path: f"{p.found} | {p.allowed} | {p.hint}" for p in err.value.problems}


def test_a_slurm_leaf_is_a_scalable_unit_under_one_root_in_two_tiers():
    plan = plan_of(config())
    slurm = plan.slurm
    assert [(s.name, s.level, s.nodes, s.switches) for s in slurm.switches] == [
        ("gpu-su0", 0, ("gpu-0", "gpu-1", "gpu-2", "gpu-3"), ()),
        ("gpu-su1", 0, ("gpu-4", "gpu-5", "gpu-6", "gpu-7"), ()),
        ("gpu-su2", 0, ("gpu-8", "gpu-9", "gpu-10", "gpu-11"), ()),
        ("spine", 1, (), ("gpu-su0", "gpu-su1", "gpu-su2")),
    ]
    # The leaves of every rail of a node are those of its Slurm leaf, and of no other's nodes.
    for node in plan.nodes:
        unit = next(n.switch for n in slurm.nodes if n.name == node.name)
        assert {nic.leaf.rsplit("-leaf", 1)[0] for nic in node.nics} == {unit}
    assert slurm.controller.name == "gpu-0" and slurm.controller.address == plan.nodes[0].management_ip
    assert (slurm.cluster_name, slurm.partition, slurm.max_switch_wait) == ("us-east", "gpu", 300)


def test_three_tiers_put_each_unit_under_the_spine_group_its_leaves_are_cabled_to():
    plan = plan_of(config(count=512, reserved=0))
    assert plan.fabric.tiers == 3
    slurm = plan.slurm
    groups = [s for s in slurm.switches if s.level == 1]
    [root] = [s for s in slurm.switches if s.level == 2]
    assert root.name == "core" and set(root.switches) == {g.name for g in groups}
    assert len(groups) == plan.fabric.layout("gpu").groups
    leaf_group = {}
    for link in plan.fabric.links():
        if link.tier == "leaf_spine":
            leaf_group.setdefault(link.a_device.rsplit("-leaf", 1)[0], set()).add(link.b_device.split("-spine")[0])
    for g in groups:
        for unit in g.switches:
            assert leaf_group[unit] == {g.name}, unit


def test_one_scalable_unit_needs_no_root():
    assert [s.name for s in plan_of(config(count=4)).slurm.switches] == ["gpu-su0"]


def test_counts_come_from_the_sku_and_leave_the_os_its_memory():
    dgx = sku_counts(CATALOG.nodes["dgx-h100"])
    # 2 x 56 cores x 2 threads; 2048 GiB less the OS's 10 % (204.8 GiB).
    assert dgx == {"cpus": 224, "sockets": 2, "cores_per_socket": 56, "threads_per_core": 2,
                   "memory_mib": int((2048 - 204.8) * 1024)}
    # The catalog knows only the hardware threads of this one and not its memory: CPUs alone.
    hgx = sku_counts(CATALOG.nodes["hgx-h100"])
    assert hgx == {"cpus": 224, "sockets": None, "cores_per_socket": None, "threads_per_core": None, "memory_mib": None}
    assert gpu_type("NVIDIA H100 SXM 80GB") == "h100" and gpu_type("NVIDIA A100 SXM4 40GB") == "a100"
    assert gpu_type("GB200") == "gb200" and gpu_type(None) is None


def test_the_roles_view_groups_nodes_by_counts_and_compresses_names():
    view = plan_of(config(pools=[{"name": "gpu", "sku": "dgx-h100", "count": 6},
                                 {"name": "oem", "sku": "hgx-h100", "count": 2}])).slurm.to_json()
    assert view["partition_nodes"] == "gpu-[0-5],oem-[0-1]"
    assert [(g["hosts"], g["gpus"], g["gpu_type"], g["cpus"], "sockets" in g, "memory_mib" in g)
            for g in view["node_groups"]] == [("gpu-[0-5]", 8, "h100", 224, True, True),
                                              ("oem-[0-1]", 8, "h100", 224, False, False)]
    assert view["gpu_types"] == ["h100"]
    assert {s["name"]: s.get("nodes") or s.get("switches") for s in view["switches"]} == {
        "gpu-su0": "gpu-[0-3]", "gpu-su1": "gpu-[4-5]", "oem-su0": "oem-[0-1]", "spine": "gpu-su[0-1],oem-su0"}


def test_hostlist_folds_rising_runs_only():
    assert hostlist(["gpu-0", "gpu-1", "gpu-2", "gpu-5", "gpu-7"]) == "gpu-[0-2,5,7]"
    assert hostlist(["a", "gpu-3", "gpu-1"]) == "a,gpu-3,gpu-1"
    assert hostlist(["x01", "x02", "x9"]) == "x0[1-2],x9"  # zero-padded numbers stay as written
    assert hostlist(["spine"]) == "spine"


def test_bad_keys_are_named_and_nothing_is_planned():
    found = problems(config(slurm={"controller": "gpu-12", "clusterName": "Us_East", "partition": "a b",
                                   "maxSwitchWait": -1, "nodes": 3}))
    assert set(found) == {"railyard:slurm.controller", "railyard:slurm.clusterName", "railyard:slurm.partition",
                          "railyard:slurm.maxSwitchWait", "railyard:slurm.nodes"}
    assert "gpu-0, gpu-1" in found["railyard:slurm.controller"]


def test_slurm_is_refused_on_a_virtual_layout_and_on_a_platform_tuned_driver():
    virtual = config(layout="virtual", pools=[{"name": "vela", "sku": "vela-a100", "count": 2}])
    assert "run in its VMs" in problems(virtual)["railyard:slurm"]
    cw = config(driver="coreweave")
    assert "tuned by the platform" in problems(cw)["railyard:slurm"]


def test_without_the_key_there_is_no_slurm_and_no_role_variables():
    from railyard.tuning.vars import host_vars

    cfg = config()
    del cfg["railyard:slurm"]
    plan = plan_of(cfg)
    assert plan.slurm is None
    assert not any(k.startswith("slurm_") for k in host_vars(plan.spec, plan, "gpu-0"))


def test_only_the_controller_carries_the_configuration():
    from railyard.tuning.vars import host_vars

    plan = plan_of(config(slurm={"controller": "gpu-5"}))
    ctl, other = host_vars(plan.spec, plan, "gpu-5"), host_vars(plan.spec, plan, "gpu-0")
    assert ctl["slurm_cluster"] == plan.slurm.to_json() and "slurm_cluster" not in other
    assert other["slurm_controller"] == "gpu-5" and other["slurm_controller_address"] == plan.node_named("gpu-5").management_ip
    assert (other["slurm_node_name"], other["slurm_gpus"]) == ("gpu-0", 8)


def render(template: str, plan, **more) -> str:
    """A role template as Ansible renders it (trim_blocks, undefined is an error)."""
    import jinja2
    import yaml

    from railyard.paths import PROJECT_ROOT

    role = PROJECT_ROOT / "playbooks/roles/slurm"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(role / "templates")), trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text())
    internal = {}
    for k, v in yaml.safe_load((role / "vars/main.yml").read_text()).items():
        if not isinstance(v, str):
            continue
        try:  # a variable made of the defaults alone (a path under a default directory) is rendered
            internal[k] = env.from_string(v).render(**defaults) if "{{" in v else v
        except (jinja2.UndefinedError, jinja2.TemplateRuntimeError):  # Ansible's own filters and tests
            pass
    return env.get_template(template).render(**{**defaults, **internal, "slurm_cluster": plan.slurm.to_json(),
                                                "slurm_controller": "gpu-0", "slurm_controller_address": "198.18.0.2",
                                                "__slurm_ctld_host": {"stdout": "dgx-a01"},
                                                "__slurm_topology_plugin": "topology/tree", **more})


def test_each_group_of_nodes_gets_its_own_counts_and_gpus_their_files():
    plan = plan_of(config(pools=[{"name": "gpu", "sku": "dgx-h100", "count": 2},
                                 {"name": "oem", "sku": "hgx-h100", "count": 2}]))
    conf = render("slurm.conf.j2", plan)
    lines = [line for line in conf.splitlines() if line.startswith("NodeName=")]
    assert lines == [
        "NodeName=gpu-[0-1] NodeAddr=198.18.0.2,198.18.0.3 CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 "
        f"RealMemory={int((2048 - 204.8) * 1024)} Gres=gpu:h100:8",
        f"NodeName=oem-[0-1] NodeAddr={plan.node_named('oem-0').management_ip},{plan.node_named('oem-1').management_ip} "
        "CPUs=224 Gres=gpu:h100:8",
    ]
    assert "SlurmctldHost=dgx-a01(198.18.0.2)" in conf and "GresTypes=gpu" in conf
    assert "PartitionName=gpu Nodes=gpu-[0-1],oem-[0-1] Default=YES" in conf
    gres = render("gres.conf.j2", plan)
    assert "NodeName=gpu-[0-1] Name=gpu Type=h100 File=/dev/nvidia[0-7]" in gres
    topo = render("topology.conf.j2", plan).splitlines()
    assert "SwitchName=spine Switches=gpu-su0,oem-su0" in topo


def test_slurmds_health_check_is_on_by_default_named_in_slurm_conf_and_each_node_gets_its_skus_expectation():
    from railyard.tuning.vars import host_vars

    plan = plan_of(config())
    conf = render("slurm.conf.j2", plan)
    assert "HealthCheckProgram=/var/lib/railyard/health-check/railyard-health-check" in conf
    assert "HealthCheckInterval=300" in conf and "HealthCheckNodeState=ANY" in conf
    assert host_vars(plan.spec, plan, "gpu-1")["slurm_health_check_expect"] == {
        "gpus": 8, "vendor": "0x10de", "device": "0x2330", "nvlinks_per_gpu": 18}

    off = plan_of(config(slurm={"healthCheckInterval": 0}))
    assert "HealthCheck" not in render("slurm.conf.j2", off)
    assert "slurm_health_check_expect" not in host_vars(off.spec, off, "gpu-1")  # the role removes the program
    cycled = plan_of(config(slurm={"healthCheckInterval": 600, "healthCheckNodeState": "idle, cycle"}))
    assert "HealthCheckInterval=600\nHealthCheckNodeState=IDLE,CYCLE\n" in render("slurm.conf.j2", cycled)


def test_bad_health_check_keys_are_named():
    found = problems(config(slurm={"healthCheckInterval": -5, "healthCheckNodeState": "IDEL"}))
    assert set(found) == {"railyard:slurm.healthCheckInterval", "railyard:slurm.healthCheckNodeState"}
    assert "did you mean IDLE?" in found["railyard:slurm.healthCheckNodeState"]
    assert "ANY,CYCLE" in problems(config(slurm={"healthCheckNodeState": "CYCLE"}))["railyard:slurm.healthCheckNodeState"]


def test_the_pmi_of_the_pair_runs_is_pmix_unless_the_stack_names_another_that_srun_offers():
    from railyard.model.catalog import FIXTURES_DIR
    from railyard.model.spec.types import SLURM_MPI

    # Every PMI the key takes is one real Slurm offers (`srun --mpi=list`, Debian 12's 22.05).
    offered = (FIXTURES_DIR / "slurm" / "srun_mpi_list.txt").read_text().split()
    assert set(SLURM_MPI) <= set(offered)
    assert plan_of(config()).spec.slurm.mpi == "pmix"
    assert plan_of(config(slurm={"mpi": "pmi2"})).spec.slurm.mpi == "pmi2"
    found = problems(config(slurm={"mpi": "pmi3"}))
    assert list(found) == ["railyard:slurm.mpi"] and "pmix" in found["railyard:slurm.mpi"]
