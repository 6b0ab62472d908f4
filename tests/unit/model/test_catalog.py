"""The hardware catalog: every data file against the schema, cross-references, and facts against sources."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
import yaml

from railyard.model import pcie
from railyard.model.catalog import CATALOG_DIR, FIXTURES_DIR, CatalogError, load_catalog

CATALOG = load_catalog()
FILES = sorted(str(p.relative_to(CATALOG_DIR)) for p in CATALOG_DIR.glob("*/*.yaml"))
NODES = sorted(CATALOG.nodes)


def _entry(rel: str):
    section, name = rel.split("/")
    table = {"nodes": CATALOG.nodes, "vms": CATALOG.vm_shapes, "switches": CATALOG.switches}[section]
    return table[name.removesuffix(".yaml")]


def _fixture_rows(name: str) -> list[dict[str, str]]:
    with open(FIXTURES_DIR / "tables" / name, newline="") as f:
        return list(csv.DictReader(f))


# --- every file ---------------------------------------------------------------------------------


def test_catalog_holds_the_entries_the_issue_asks_for():
    assert set(CATALOG.nodes) >= {"dgx-h100", "hgx-h100", "dgx-a100", "vela-a100"}
    assert set(CATALOG.vm_shapes) >= {"gx3d-h100", "nd-h100-v5"}
    assert set(CATALOG.switches) >= {"qm9700", "qm8700", "sn5600"}


@pytest.mark.parametrize("rel", FILES)
def test_every_catalog_file_loads_into_an_entry_named_after_the_file(rel):
    entry = _entry(rel)
    assert entry.file == rel, f"{rel}: loaded from {entry.file}"
    assert entry.id == Path(rel).stem, f"{rel}: id {entry.id!r} differs from the file name"


@pytest.mark.parametrize("rel", FILES)
def test_every_entry_cites_sources_that_exist_under_data_fixtures(rel):
    entry = _entry(rel)
    assert entry.sources, f"{rel}: sources is empty"
    for s in entry.sources:
        assert (FIXTURES_DIR / s.file).is_file(), f"{rel}: sources file {s.file} is not in railyard/data/fixtures"
        assert s.where and s.gives, f"{rel}: source {s.file} must say where (row/table) and what it gives"


@pytest.mark.parametrize("rel", FILES)
def test_unknown_is_the_only_placeholder_for_a_missing_fact(rel):
    # A fact the sources do not give is `unknown`, never TBD/?/null left in the file.
    def walk(value, path):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from walk(v, f"{path}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                yield from walk(v, f"{path}[{i}]")
        else:
            yield path, value

    data = yaml.safe_load((CATALOG_DIR / rel).read_text())
    for path, value in walk(data, ""):
        assert value is not None, f"{rel}: {path} is empty; write `unknown` or the value"
        if isinstance(value, str):
            assert value.strip().lower() not in {"tbd", "?", "n/a", "todo", "none"}, f"{rel}: {path} = {value!r}"


# --- node cross-references ----------------------------------------------------------------------


@pytest.mark.parametrize("sku_id", NODES)
def test_every_device_hangs_off_a_bridge_of_its_entry(sku_id):
    sku = CATALOG.nodes[sku_id]
    bridges = {b.id for b in sku.pcie}
    for d in (*sku.gpus, *sku.nics):
        if d.parent is not None:
            assert d.parent in bridges, f"{sku_id}: {d.name}.parent {d.parent!r} is not a bridge of the entry"
    for b in sku.pcie:
        if b.kind == pcie.HOST_BRIDGE:
            assert b.parent is None, f"{sku_id}: host bridge {b.id} has a parent"
        else:
            assert b.parent in bridges, f"{sku_id}: bridge {b.id}.parent {b.parent!r} is not a bridge of the entry"


@pytest.mark.parametrize("sku_id", NODES)
def test_gpus_and_compute_nics_have_a_place_in_the_pcie_tree(sku_id):
    sku = CATALOG.nodes[sku_id]
    for d in (*sku.gpus, *sku.compute_nics):
        assert d.name in sku.pcie_tree, f"{sku_id}: {d.name}.parent is unknown; pairing needs its place"


@pytest.mark.parametrize("sku_id", NODES)
def test_every_numa_id_a_device_or_host_bridge_names_exists(sku_id):
    sku = CATALOG.nodes[sku_id]
    ids = {n.id for n in sku.numa_nodes}
    for d in (*sku.gpus, *sku.nics):
        assert d.numa is None or d.numa in ids, f"{sku_id}: {d.name}.numa {d.numa} is not in numa_nodes"
    for b in sku.pcie:
        assert b.numa is None or b.numa in ids, f"{sku_id}: host bridge {b.id}.numa {b.numa} is not in numa_nodes"


@pytest.mark.parametrize("sku_id", NODES)
def test_a_device_numa_node_is_the_numa_node_of_its_host_bridge(sku_id):
    sku = CATALOG.nodes[sku_id]
    for d in (*sku.gpus, *sku.nics):
        if d.name in sku.pcie_tree and d.numa is not None:
            assert sku.pcie_tree.numa(d.name) == d.numa, f"{sku_id}: {d.name}.numa disagrees with its host bridge"


@pytest.mark.parametrize("sku_id", NODES)
def test_numa_cpulists_are_disjoint_and_cover_every_thread(sku_id):
    sku = CATALOG.nodes[sku_id]
    lists = [n.cpus() for n in sku.numa_nodes]
    if any(c is None for c in lists) or sku.cpus.threads is None:
        pytest.skip(f"{sku_id}: CPU lists or thread count unknown")
    cpus = [c for cl in lists for c in cl]
    assert sorted(cpus) == list(range(sku.cpus.threads)), f"{sku_id}: numa_nodes[].cpulist vs cpus.threads"


@pytest.mark.parametrize("sku_id", NODES)
def test_gpus_are_named_by_nvidia_smi_index(sku_id):
    sku = CATALOG.nodes[sku_id]
    assert [g.name for g in sku.gpus] == [f"GPU{i}" for i in range(len(sku.gpus))], f"{sku_id}: gpus[].name"


@pytest.mark.parametrize("sku_id", NODES)
def test_every_sysfs_fact_of_a_nic_is_a_value_or_explicitly_unknown(sku_id):
    # A later issue writes a fake sysfs from these fields; None means `unknown` in the file.
    sku = CATALOG.nodes[sku_id]
    for n in sku.nics:
        for f in ("pci_vendor", "pci_device", "pci_class", "sriov_total_vfs", "numa", "pci_bus_id", "netdev"):
            assert hasattr(n, f), f"{sku_id}: {n.rdma} lacks {f}"
        if n.numa is not None:
            assert sku.local_cpulist(n.rdma) == sku.numa_node(n.numa).cpulist, f"{sku_id}: {n.rdma}.local_cpulist"


COMPUTE_NICS = {"dgx-h100": 8, "hgx-h100": 8, "dgx-a100": 8, "vela-a100": 2}


@pytest.mark.parametrize("sku_id", sorted(COMPUTE_NICS))
def test_compute_nic_count_is_what_the_sources_say(sku_id):
    assert len(CATALOG.nodes[sku_id].compute_nics) == COMPUTE_NICS[sku_id], f"{sku_id}: nics with role compute"


# --- facts against the fixture tables ------------------------------------------------------------


def test_dgx_h100_compute_nics_carry_the_names_of_table_6():
    sku = CATALOG.nodes["dgx-h100"]
    for row in _fixture_rows("dgx_h100_osfp_port_map.csv"):
        nic = sku.nic(row["default_rdma_dev"])
        assert nic.role == "compute", f"dgx-h100: {nic.rdma}.role"
        assert nic.netdev == row["default_netdev"], f"dgx-h100: {nic.rdma}.netdev"
        assert nic.osfp == row["osfp_port"], f"dgx-h100: {nic.rdma}.osfp"
        assert nic.connectx == row["connectx_device"], f"dgx-h100: {nic.rdma}.connectx"
        assert nic.numa == int(row["network_module_cpu"]), f"dgx-h100: {nic.rdma}.numa vs network_module_cpu"
        gpu = sku.gpu(f"GPU{row['gpu']}")
        assert gpu.numa == nic.numa, f"dgx-h100: {gpu.name}.numa vs its NIC's CPU"


def test_dgx_h100_nic_bus_ids_are_derived_from_their_netdev_names():
    # ibp<bus>s<slot>: the bus number is decimal in the name and hex in the PCI address.
    sku = CATALOG.nodes["dgx-h100"]
    for nic in sku.compute_nics:
        bus = int(nic.netdev.removeprefix("ibp").split("s")[0])
        assert nic.pci_bus_id == f"0000:{bus:02x}:00.0", f"dgx-h100: {nic.rdma}.pci_bus_id vs netdev {nic.netdev}"
    assert sku.assumed("nics.mlx5_0.pci_bus_id"), "dgx-h100: derived bus ids must be listed under assumptions"


def test_dgx_h100_matches_its_node_specs_row():
    sku = CATALOG.nodes["dgx-h100"]
    assert len(sku.gpus) == 8 and all(g.memory_gib == 80 for g in sku.gpus), "dgx-h100: gpus"
    assert len(sku.numa_nodes) == 2, "dgx-h100: numa_nodes"
    assert sku.memory_gib == 2048, "dgx-h100: memory_gib (2 TB)"
    assert sku.cpus.sockets == 2 and sku.cpus.cores == 112, "dgx-h100: cpus"
    storage = [n for n in sku.nics if n.role == "storage"]
    assert len(storage) == 4 and {n.ports for n in storage} == {2}, "dgx-h100: 2 dual-port storage NICs"
    assert sku.disk_tb("data") == pytest.approx(8 * 3.84), "dgx-h100: nvme data"
    assert all(n.speed_gbps == 400 for n in sku.compute_nics), "dgx-h100: compute nics speed_gbps"


def test_facts_the_sources_do_not_give_are_unknown_not_invented():
    hgx = CATALOG.nodes["hgx-h100"]
    assert hgx.memory_gib is None, "hgx-h100: memory_gib is not in its source"
    assert hgx.nvme is None, "hgx-h100: nvme is not in its source"
    assert all(n.speed_gbps is None for n in hgx.nics), "hgx-h100: nics speed_gbps is not in its source"
    dgx = CATALOG.nodes["dgx-h100"]
    assert all(g.pci_bus_id is None for g in dgx.gpus), "dgx-h100: GPU bus ids are not in its sources"


def test_vela_nics_are_a_labelled_assumption_of_two_100gbe():
    vela = CATALOG.nodes["vela-a100"]
    assert [(n.speed_gbps, n.link) for n in vela.compute_nics] == [(100, "ethernet")] * 2, "vela-a100: nics"
    for field in ("nics.mlx5_0.speed_gbps", "nics.mlx5_1", "pcie"):
        assert vela.assumed(field), f"vela-a100: {field} must be listed under assumptions"
    readme = (CATALOG_DIR / "README.md").read_text()
    assert "vela-a100" in readme and "2 x 100GbE" in readme, "catalog README must state the Vela NIC assumption"


@pytest.mark.parametrize("switch_id", sorted(s.id for s in CATALOG.switches.values()
                                             if any(src.file == "tables/switches.csv" for src in s.sources)))
def test_switch_matches_its_switches_csv_row(switch_id):
    sw = CATALOG.switches[switch_id]
    row = next(r for r in _fixture_rows("switches.csv") if r["switch"].split()[-1].lower() == switch_id)
    assert sw.ports == int(row["ports"]), f"{switch_id}: ports"
    assert str(sw.port_speed_gbps) in row["port_speed"].replace(" GbE", "").replace(" Gb/s", ""), f"{switch_id}: port_speed_gbps"
    assert sw.cages * sw.ports_per_cage == sw.ports, f"{switch_id}: cages x ports_per_cage"
    assert row["cages"].startswith(str(sw.cages)), f"{switch_id}: cages"


def test_the_xdr_switch_has_the_ports_of_nvidias_superpod_table_and_no_invented_cages():
    q = CATALOG.switches["q3400"]
    assert (q.kind, q.ports_at("xdr"), q.port_speed_gbps) == ("infiniband", 144, 800)
    assert q.cages is None and q.ports_per_cage is None  # no NVIDIA cage table was found
    assert any(s.file == "superpod/dgx_b300_xdr_superpod_table3_excerpt.txt" for s in q.sources)


def test_switch_radix_and_kind():
    assert (CATALOG.switches["qm9700"].kind, CATALOG.switches["qm9700"].ports_at("ndr")) == ("infiniband", 64)
    assert (CATALOG.switches["qm8700"].kind, CATALOG.switches["qm8700"].ports_at("hdr")) == ("infiniband", 40)
    sn = CATALOG.switches["sn5600"]
    assert sn.kind == "ethernet" and sn.ports_at("400gbe") == 128 and sn.ports_at("200gbe") == 256


def test_vm_shapes_match_their_node_specs_rows():
    ibm, azure = CATALOG.vm_shapes["gx3d-h100"], CATALOG.vm_shapes["nd-h100-v5"]
    assert (ibm.vcpus, ibm.memory_gib, ibm.gpus, ibm.compute_nics, ibm.fabric) == (160, 1792, 8, 8, "roce")
    assert ibm.compute_nic_attach == "sriov-vf" and ibm.nic_counts_supported == (8, 16, 32)
    assert (azure.vcpus, azure.memory_gib, azure.gpus, azure.compute_nics, azure.fabric) == (96, 1900, 8, 8, "infiniband")
    assert azure.numa_nodes == 2 and azure.topology == "topologies/azure_ndv5_h100_topo.xml"


# --- friendly errors -----------------------------------------------------------------------------


@pytest.fixture
def scratch(tmp_path):
    """A writable copy of the catalog and its fixtures."""
    shutil.copytree(CATALOG_DIR, tmp_path / "catalog")
    shutil.copytree(FIXTURES_DIR, tmp_path / "fixtures")
    return tmp_path / "catalog"


def _edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert old in text, f"test setup: {old!r} not in {rel}"
    path.write_text(text.replace(old, new, 1))


def _problems(root: Path) -> list[str]:
    with pytest.raises(CatalogError) as err:
        load_catalog(root)
    return [str(p) for p in err.value.problems]


def test_a_wrong_type_is_reported_with_file_and_field(scratch):
    _edit(scratch, "nodes/dgx-h100.yaml", "{index: 3, name: GPU3, numa: 0,", "{index: 3, name: GPU3, numa: zero,")
    (line,) = _problems(scratch)
    assert line.startswith("nodes/dgx-h100.yaml: gpus[3].numa: found 'zero'"), line


def test_a_missing_field_is_reported(scratch):
    _edit(scratch, "switches/qm9700.yaml", "port_speed_gbps: 400\n", "")
    assert any(p.startswith("switches/qm9700.yaml: port_speed_gbps: found nothing") for p in _problems(scratch))


def test_a_misspelt_field_gets_a_suggestion(scratch):
    _edit(scratch, "nodes/hgx-h100.yaml", "memory_gib: unknown", "memory_gb: unknown")
    problems = _problems(scratch)
    assert any("hgx-h100.yaml: memory_gb: found an unknown field" in p and "did you mean memory_gib" in p for p in problems)


def test_a_device_whose_parent_bridge_does_not_exist_is_refused(scratch):
    _edit(scratch, "nodes/dgx-h100.yaml", "parent: sw0, osfp", "parent: sw99, osfp")
    assert any(p.startswith("nodes/dgx-h100.yaml: nics[0].parent: found 'sw99'") for p in _problems(scratch))


def test_a_compute_nic_without_a_place_in_the_pcie_tree_is_refused(scratch):
    _edit(scratch, "nodes/dgx-h100.yaml", "parent: sw0, osfp", "parent: unknown, osfp")
    assert any(p.startswith("nodes/dgx-h100.yaml: nics[0].parent: found unknown") for p in _problems(scratch))


def test_a_device_numa_that_disagrees_with_its_host_bridge_is_refused(scratch):
    _edit(scratch, "nodes/dgx-h100.yaml", "{index: 0, name: GPU0, numa: 0,", "{index: 0, name: GPU0, numa: 1,")
    assert any(p.startswith("nodes/dgx-h100.yaml: gpus[0].numa: found 1") for p in _problems(scratch))


def test_a_numa_id_that_is_not_declared_is_refused(scratch):
    _edit(scratch, "nodes/hgx-h100.yaml", "{id: hb5, numa: 1}", "{id: hb5, numa: 4}")
    assert any("hgx-h100.yaml: pcie.host_bridges.hb5.numa: found 4" in p for p in _problems(scratch))


def test_a_source_file_that_is_not_in_the_fixtures_is_refused(scratch):
    _edit(scratch, "switches/sn5600.yaml", "file: tables/switches.csv", "file: ../shared/fixtures/tables/switches.csv")
    assert any(p.startswith("switches/sn5600.yaml: sources[0].file") for p in _problems(scratch))


def test_invalid_yaml_reports_the_line(scratch):
    (scratch / "switches" / "qm9700.yaml").write_text("id: qm9700\nports: [64\n")
    (line,) = _problems(scratch)
    assert line.startswith("switches/qm9700.yaml: found invalid YAML at line"), line


def test_a_key_given_twice_is_refused(scratch):
    _edit(scratch, "switches/qm8700.yaml", "ports: 40\n", "ports: 40\nports: 41\n")
    (line,) = _problems(scratch)
    assert "switches/qm8700.yaml" in line and "duplicate key" in line, line


def test_an_id_that_differs_from_the_file_name_is_refused(scratch):
    _edit(scratch, "vms/gx3d-h100.yaml", "id: gx3d-h100", "id: gx3d")
    assert any(p.startswith("vms/gx3d-h100.yaml: id: found 'gx3d'") for p in _problems(scratch))


def test_every_problem_is_reported_at_once(scratch):
    _edit(scratch, "switches/qm9700.yaml", "ports: 64", "ports: -1")
    _edit(scratch, "vms/nd-h100-v5.yaml", "vcpus: 96", "vcpus: many")
    problems = _problems(scratch)
    assert any(p.startswith("switches/qm9700.yaml: ports") for p in problems), problems
    assert any(p.startswith("vms/nd-h100-v5.yaml: vcpus") for p in problems), problems


def test_load_catalog_is_cached():
    assert load_catalog() is load_catalog()


def test_a_switchs_lanes_that_a_breakout_does_not_split_evenly_are_refused(scratch):
    # The SN5600's 64 cages carry 64, 128 or 256 ports: 6 lanes do not split into 4 ports, 0 is no count.
    _edit(scratch, "switches/sn5600.yaml", "lanes: 8}", "lanes: 6}")
    assert any(p.startswith("switches/sn5600.yaml: cages.lanes: found 6") and "100gbe, 200gbe" in p
               for p in _problems(scratch))
    _edit(scratch, "switches/sn5600.yaml", "lanes: 6}", "lanes: 0}")
    assert any(p.startswith("switches/sn5600.yaml: cages.lanes: found 0") for p in _problems(scratch))
