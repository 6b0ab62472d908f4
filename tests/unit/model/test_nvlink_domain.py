"""The NVLink domain as a level of the plan (railyard.model.nvlink_domain): a rack-scale SKU comes in
whole racks, each rack one domain, nested inside one scalable unit, and every placement layer
(Kueue, Slurm, NCCL, IMEX) sees it. The H100 and A100 plans do not change."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from railyard.model.catalog import load_catalog
from railyard.model.nvlink_domain import NCCL_MNNVL, imex_nodes_config
from railyard.model.slurm import hostlist
from railyard.model.topology import parse_topology_file
from railyard.paths import PROJECT_ROOT
from railyard.tuning.vars import host_vars
from tests.unit.model.test_slurm import plan_of, problems, render

CATALOG = load_catalog()
FIXTURES = PROJECT_ROOT / "railyard/data/fixtures"


def config(*pools: tuple[str, str, int], reserved: int = 14, layout: str = "bare-metal", kubernetes: bool = True,
           slurm: bool = True) -> dict:
    cfg = {
        "railyard:region": "us-east", "railyard:layout": layout, "railyard:driver": "lab",
        "railyard:nodePools": [{"name": n, "sku": s, "count": c} for n, s, c in pools or [("gb", "gb200-nvl72", 36)]],
        "railyard:fabric": {"compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700",
                                        "cidr": "198.19.0.0/16", "reservedLeafPorts": reserved},
                            "storage": {"cidr": "198.18.32.0/19"}, "management": {"cidr": "198.18.0.0/19"}},
        "railyard:tuning": {"hugepages": {"size": "1G", "count": 8}},
    }
    if kubernetes:
        cfg["railyard:kubernetes"] = {"labelPrefix": "railyard.io"}
    if slurm:
        cfg["railyard:slurm"] = {}
    return cfg


# --- the catalog ---------------------------------------------------------------------------------


def test_the_gb200_tray_is_one_eighteenth_of_an_nvl72_rack_and_cites_its_sources():
    sku = CATALOG.nodes["gb200-nvl72"]
    d = sku.nvlink_domain
    assert (d.name, d.gpus, d.compute_trays, d.switch_trays) == ("NVL72", 72, 18, 9)
    assert len(sku.gpus) * d.compute_trays == d.gpus
    assert [n.rdma for n in sku.compute_nics] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"]
    cited = {s.file for s in sku.sources}
    assert "gb200_nvl72/dgx_gb_rack_user_guide_hardware_excerpt.txt" in cited
    assert all((FIXTURES / f).is_file() for f in cited)
    # What no source gives stays unknown, and says so.
    assert sku.memory_gib is None and sku.nvme is None and sku.assumed("memory_gib")
    # The HGX and DGX entries are not rack-scale.
    assert all(CATALOG.nodes[s].nvlink_domain is None for s in ("dgx-h100", "dgx-a100", "hgx-h100", "dgx-b200"))


def test_a_domain_whose_gpus_are_not_its_trays_gpus_is_refused(tmp_path):
    import shutil

    from railyard.model.catalog import CatalogError

    root = tmp_path / "catalog"
    shutil.copytree(PROJECT_ROOT / "railyard/data/catalog", root)
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    entry = root / "nodes/gb200-nvl72.yaml"
    entry.write_text(entry.read_text().replace("gpus: 72, compute_trays: 18", "gpus: 64, compute_trays: 18"))
    with pytest.raises(CatalogError) as err:
        load_catalog(root)
    assert "nvlink_domain.gpus" in str(err.value) and "72 (18 compute trays x 4 GPUs)" in str(err.value)


EIGHT_DEVICE = ["gb200_8nic_topo_unattributed_excerpt.txt", "gb200_8nic_topo_rhel4nv_demo_excerpt.txt"]


@pytest.mark.parametrize("name", [*EIGHT_DEVICE, "gb200_topo_k8s_test_infra371_excerpt.txt",
                                  "gb200_topo_sglang11208_excerpt.txt"])
def test_topology_import_reads_every_real_gb200_matrix(name):
    topo = parse_topology_file(FIXTURES / "gb200_nvl72" / name)
    assert [g.name for g in topo.gpus] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    if name == "gb200_8nic_topo_rhel4nv_demo_excerpt.txt":
        # NUMA Affinity `0,2-17` with GPU NUMA ID N/A: nothing says the later nodes are GPU memory,
        # so the GPU's node is not guessed.
        assert [g.numa for g in topo.gpus] == [None] * 4
        assert "GPU0: NUMA Affinity '0,2-17' is not a single node: NUMA unknown" in topo.notes
    elif name != "gb200_topo_sglang11208_excerpt.txt":  # cut before its NUMA cells are whole
        # A Grace host lists the CPUs' node first, then GPU memory nodes: the CPUs' node is the GPU's.
        assert [g.numa for g in topo.gpus] == [0, 0, 1, 1]


@pytest.mark.parametrize("name", EIGHT_DEVICE)
def test_the_eight_device_gb200_matrix_pairs_the_single_port_nics_as_the_catalog_does(name):
    topo = parse_topology_file(FIXTURES / "gb200_nvl72" / name)
    # Every NIC is SYS to every GPU; the two-port adapters (PIX pairs) are not compute NICs.
    assert [n.name for n in topo.compute_nics] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"]
    assert dict(topo.pairing()) == CATALOG.nodes["gb200-nvl72"].pairing()
    assert any("multi-port adapters (mlx5_2, mlx5_3, mlx5_6, mlx5_7)" in n for n in topo.notes)


@pytest.mark.parametrize("name", EIGHT_DEVICE)
def test_the_catalog_tree_gives_every_class_of_the_real_gb200_matrix(name):
    sku = CATALOG.nodes["gb200-nvl72"]
    topo = parse_topology_file(FIXTURES / "gb200_nvl72" / name)
    for (a, b), cls in topo.classes.items():
        if a.startswith("GPU") and b.startswith("GPU"):
            continue  # NVLink, not PCIe
        assert sku.distance(a, b) == cls, (a, b)


# --- validation ----------------------------------------------------------------------------------


def test_a_tray_count_that_is_not_whole_racks_is_refused_naming_the_count():
    got = problems(config(("gb", "gb200-nvl72", 20)))
    assert got["railyard:nodePools[0].count"].startswith("20 | a multiple of 18 (whole NVL72 racks")


def test_an_nvlink_domain_split_across_pools_is_refused_as_such():
    got = problems(config(("a", "gb200-nvl72", 9), ("b", "gb200-nvl72", 9)))
    assert "cannot be split across pools (with b)" in got["railyard:nodePools[0].count"]
    assert "cannot be split across pools (with a)" in got["railyard:nodePools[1].count"]


def test_a_virtual_layout_on_a_rack_scale_sku_is_refused():
    cfg = config(("gb", "gb200-nvl72", 18), layout="virtual", kubernetes=False, slurm=False)
    cfg["railyard:nodePools"][0].update(vmsPerHost=1, vm={"gpus": 4, "vfs": 1})
    cfg["railyard:tuning"]["sriov"] = {"vfsPerPf": 1}
    got = problems(cfg)["railyard:nodePools[0].sku"]
    assert got.startswith("'gb200-nvl72' | a SKU that runs VMs in the virtual layout")
    assert got.endswith("set railyard:layout: bare-metal")


def test_a_rack_across_two_scalable_units_is_refused_naming_the_reserved_ports_that_fit():
    # A QM9700 leaf's 32 node ports: the second rack's trays 18-35 would be under units 0 and 1.
    got = problems(config(("gb", "gb200-nvl72", 36), reserved=0))
    assert got["railyard:fabric.compute.reservedLeafPorts"].startswith(
        "0 | 14, so that a unit is 1 whole racks (18 of a leaf's 32 node ports)")
    # One rack under 32 ports is whole already.
    assert plan_of(config(("gb", "gb200-nvl72", 18), reserved=0)).nvlink_domains[0].unit == "gb-su0"


# --- the plan ------------------------------------------------------------------------------------


def test_the_plan_gives_every_rack_its_trays_gpus_and_addresses_inside_one_unit():
    plan = plan_of(config(("gb", "gb200-nvl72", 36), ("h", "dgx-h100", 2)))
    racks = plan.nvlink_domains
    assert [(d.name, d.unit, d.gpus, d.switch_trays) for d in racks] == [
        ("gb-rack0", "gb-su0", 72, 9), ("gb-rack1", "gb-su1", 72, 9)]
    assert racks[1].nodes == tuple(f"gb-{i}" for i in range(18, 36))
    assert racks[1].addresses == tuple(plan.node_named(f"gb-{i}").management_ip for i in range(18, 36))
    assert plan.nvlink_domain("gb-20") is racks[1] and plan.nvlink_domain("h-0") is None
    assert imex_nodes_config(racks[0]).splitlines() == list(racks[0].addresses)
    pool = plan.summary()["pools"][0]
    assert pool["nvlink_domains"] == {"name": "NVL72", "count": 2, "compute_trays": 18, "gpus": 72, "switch_trays": 9}
    assert "nvlink_domains" not in plan.summary()["pools"][1]


def test_a_tray_is_tuned_for_its_domain_and_an_hgx_node_is_not():
    plan = plan_of(config(("gb", "gb200-nvl72", 18), ("h", "dgx-h100", 2)))
    tray = host_vars(plan.spec, plan, "gb-3")
    assert tray["nvlink_domain_name"] == "gb-rack0"
    assert tray["nvlink_domain_imex_nodes"] == [plan.node_named(f"gb-{i}").management_ip for i in range(18)]
    assert tray["gpu_nic_affinity_nccl_extra"] == NCCL_MNNVL == {"NCCL_CUMEM_ENABLE": "1"}
    hgx = host_vars(plan.spec, plan, "h-0")
    assert not any(k.startswith("nvlink_domain") for k in hgx) and "gpu_nic_affinity_nccl_extra" not in hgx


def test_kueue_gets_the_domain_as_a_level_below_the_unit_and_every_node_its_label():
    plan = plan_of(config(("gb", "gb200-nvl72", 18), ("h", "dgx-h100", 2)))
    k8s = plan.kubernetes
    assert k8s.summary()["topology"] == ["railyard.io/su", "railyard.io/nvlink-domain", "kubernetes.io/hostname"]
    labels = {n.name: n.labels for n in k8s.nodes}
    assert labels["gb-17"]["railyard.io/nvlink-domain"] == "gb-rack0"
    # An HGX node is an NVLink domain of its own GPUs.
    assert labels["h-1"]["railyard.io/nvlink-domain"] == "h-1"


def test_a_stack_without_racks_keeps_its_kueue_levels_and_labels():
    plan = plan_of(config(("h", "dgx-h100", 4)))
    assert plan.nvlink_domains == ()
    assert plan.kubernetes.summary()["topology"] == ["railyard.io/su", "kubernetes.io/hostname"]
    assert not any("railyard.io/nvlink-domain" in n.labels for n in plan.kubernetes.nodes)
    assert "blocks" not in plan.slurm.to_json()


# --- Slurm ---------------------------------------------------------------------------------------


def test_slurm_tree_has_the_racks_as_leaves_under_their_scalable_unit():
    plan = plan_of(config(("gb", "gb200-nvl72", 36), ("h", "dgx-h100", 2)))
    tree = {s["name"]: s for s in plan.slurm.to_json()["switches"]}
    assert tree["gb-rack1"] == {"name": "gb-rack1", "level": 0, "nodes": "gb-[18-35]"}
    assert tree["gb-su1"] == {"name": "gb-su1", "level": 1, "switches": "gb-rack1"}
    assert tree["h-su0"] == {"name": "h-su0", "level": 0, "nodes": "h-[0-1]"}
    assert tree["spine"]["switches"] == "gb-su[0-1],h-su0" and tree["spine"]["level"] == 2


def _check_block_file(text: str) -> dict[str, list[str]]:
    """topology.conf(5)'s topology/block rules: BlockName/Nodes lines and one BlockSizes line whose
    first size no block is smaller than and whose sizes each double (a power of two) the one before."""
    blocks, sizes = {}, None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"BlockName=(\S+) Nodes=(\S+)", line)
        if m:
            blocks[m.group(1)] = m.group(2)
            continue
        m = re.fullmatch(r"BlockSizes=(\d+(?:,\d+)*)", line)
        assert m and sizes is None, f"not topology/block syntax: {line!r}"
        sizes = [int(x) for x in m.group(1).split(",")]
    assert blocks and sizes
    for a, b in zip(sizes, sizes[1:]):
        ratio = b // a
        assert b % a == 0 and ratio > 1 and ratio & (ratio - 1) == 0, sizes
    return {"blocks": list(blocks.values()), "sizes": sizes}


def _expand(nodes: str) -> int:
    m = re.fullmatch(r"(.*)\[(\d+)-(\d+)\]", nodes)
    return int(m.group(3)) - int(m.group(2)) + 1 if m else 1


def test_the_documentation_example_passes_the_block_file_check():
    # The check below is the manual's rules; its own example must pass it, or the check is wrong.
    doc = (FIXTURES / "nvlink_domain/slurm_topology_conf_5_block_excerpt.txt").read_text()
    example = doc[doc.index("BlockName=block1"):doc.index(".fi")]
    got = _check_block_file(example)
    assert got["sizes"] == [30, 120] and all(_expand(b) >= got["sizes"][0] for b in got["blocks"])


def test_slurm_topology_block_has_one_block_per_rack_in_the_documented_format():
    plan = plan_of(config(("gb", "gb200-nvl72", 72)))  # 4 racks, 1 per scalable unit of 18 trays
    conf = render("topology.conf.j2", plan, __slurm_topology_plugin="topology/block")
    got = _check_block_file(conf)
    assert got["blocks"] == [hostlist(f"gb-{i}" for i in range(r * 18, r * 18 + 18)) for r in range(4)]
    assert got["sizes"] == [18] and all(_expand(b) >= 18 for b in got["blocks"])
    assert "TopologyPlugin=topology/block" in render("slurm.conf.j2", plan, __slurm_topology_plugin="topology/block")


def test_block_sizes_double_while_they_pair_racks_of_one_unit():
    def sizes(count: int, reserved: int):
        cfg = config(("gb", "gb200-nvl72", count), reserved=reserved)
        cfg["railyard:fabric"]["compute"].update(kind="roce", speed="400gbe", switch="sn5600")
        return plan_of(cfg).slurm.block_sizes

    # SN5600 at 400GbE: 64 node ports a leaf. 28 kept free: units of 2 racks, 18 then 36.
    assert sizes(108, 28) == (18, 36)
    # 10 kept free: units of 3 racks; Slurm pairs blocks in order, and a pair would join rack 2 of
    # one unit with rack 3 of the next, so the base alone.
    assert sizes(108, 10) == (18,)


def test_a_mixed_stack_whose_other_blocks_are_smaller_than_a_rack_keeps_to_the_tree():
    # topology.conf(5): every block at least the base size; 2 HGX nodes would be a block of 2.
    plan = plan_of(config(("gb", "gb200-nvl72", 36), ("h", "dgx-h100", 2)))
    assert plan.slurm.blocks == () and "blocks" not in plan.slurm.to_json()
    assert any(s.name == "gb-rack0" for s in plan.slurm.switches)  # the racks still lead the tree
    # 18 HGX nodes under one unit are a block as big as a rack: listed after the racks.
    big = plan_of(config(("gb", "gb200-nvl72", 36), ("h", "dgx-h100", 18)))
    assert [b.name for b in big.slurm.blocks] == ["gb-rack0", "gb-rack1", "h-su0"]


def test_a_rack_label_longer_than_kubernetes_allows_is_refused_with_the_pool_name():
    got = problems(config(("g" * 58, "gb200-nvl72", 18)))
    assert "(its scalable unit, spine group or rack) would exceed 63 characters" in got["railyard:nodePools[0].name"]


def test_the_reserved_ports_suggested_keep_the_users_own_where_a_whole_rack_unit_fits():
    cfg = config(("gb", "gb200-nvl72", 72), reserved=2)
    cfg["railyard:fabric"]["compute"].update(kind="roce", speed="400gbe", switch="sn5600")
    # 62 node ports: 3 racks (54) fit under the user's 2, so 10, not the 64 - 54 of no reservation.
    assert problems(cfg)["railyard:fabric.compute.reservedLeafPorts"].startswith("2 | 10, so that a unit is 3 whole racks")


def test_the_role_picks_topology_block_only_from_slurm_23_11():
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    expr = yaml.safe_load((PROJECT_ROOT / "playbooks/roles/slurm/vars/main.yml").read_text())["__slurm_topology_plugin"]

    def plugin(version_output):
        found = {"__slurm_ctld_version": {"stdout": version_output} if version_output is not None else {"skipped": True}}
        return Templar(loader=DataLoader(), variables=found).template(trust_as_template(expr))

    # Debian 12's Slurm, the lab's; topology/block came with 23.11.
    assert plugin("slurm-wlm 22.05.8") == plugin("slurm 22.05.8") == "topology/tree"
    assert plugin("slurm 23.11.4") == plugin("slurm 24.05.2") == "topology/block"
    assert plugin("") == plugin(None) == "topology/tree"  # not read (no domains, or check mode)


def test_the_example_gb200_stack_plans_its_racks_with_coreweaves_domain_label():
    from railyard.stack import load

    spec, plan = load(PROJECT_ROOT / "stacks/Pulumi.us-east-gb200.yaml")
    assert len(plan.nvlink_domains) == 8 and {len(d.nodes) for d in plan.nvlink_domains} == {18}
    assert plan.kubernetes.summary()["topology"][-2:] == ["ds.coreweave.com/nvlink.domain", "kubernetes.io/hostname"]


def test_the_nvlink_domain_role_writes_one_address_a_line_and_nothing_else():
    tasks = (PROJECT_ROOT / "playbooks/roles/nvlink_domain/tasks/main.yml").read_text()
    # The IMEX guide's format: the node list file holds addresses only (no managed-by header).
    assert "map('regex_replace', '$', '\\n') | join('')" in tasks
    assert yaml.safe_load((PROJECT_ROOT / "playbooks/roles/nvlink_domain/defaults/main.yml").read_text())[
        "nvlink_domain_imex_nodes_config"] == "/etc/nvidia-imex/nodes_config.cfg"
    assert Path(FIXTURES / "gb200_nvl72/crusoe_imex_setup_nodes_config_excerpt.txt").read_text().count(
        "/etc/nvidia-imex/nodes_config.cfg") == 1


@pytest.mark.parametrize("speed, switch", [("xdr", "q3400"), ("hdr", "qm8700"), ("ndr", "qm9700")])
def test_an_infiniband_speed_without_a_switch_gets_the_switch_that_runs_it(speed, switch):
    cfg = config(("b", "hgx-b300", 72), reserved=0, kubernetes=False, slurm=False)
    del cfg["railyard:fabric"]["compute"]["switch"]
    cfg["railyard:fabric"]["compute"]["speed"] = speed
    if speed == "hdr":
        cfg["railyard:nodePools"][0]["sku"] = "dgx-a100"
    plan = plan_of(cfg)
    assert plan.spec.fabric.compute.switch == switch and plan.fabric.speed == speed
