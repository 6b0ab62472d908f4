"""Topology import: every fixture, the formats, NUMA and role inference, catalog SKUs against their matrices."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railyard.model.catalog import FIXTURES_DIR, load_catalog
from railyard.model.topology import Topology, TopologyError, parse_topology_file, parse_topology_text

TOPOLOGIES = FIXTURES_DIR / "topologies"
CATALOG = load_catalog()

# file -> (complete, GPUs, NICs, compute NICs); None = refused
EXPECTED = {
    "h100_hgx_12nic_sequential_complete.tsv": (True, 8, 12, 8),
    "h100_12nic_vllm6746_excerpt.tsv": (False, 8, 12, 8),
    "h100_flux14_excerpt.txt": (False, 8, 12, 5),
    "a100_dgx_12nic_nccl1505_excerpt.txt": (False, 8, 12, 6),
    "a100_18nic_nccl2157_excerpt.txt": (False, 8, 18, 8),
    "h800_nv8_9nic_nccl933_excerpt.txt": (False, 8, 9, 7),
    "b300_9nic_ansi_bond_sglang26039.tsv": (True, 8, 9, 8),
    "b200_8nic_gke_a4_dranet_excerpt.txt": (False, 8, 8, 8),
    "b200_8gpu_0nic_vm_vastai_simllm238.tsv": (True, 8, 0, 0),
    "h200_8nic_vf_vm_vastai_simllm.tsv": (True, 8, 8, 8),
    "a100_4gpu_0nic_numa_reversed_perlmutter_simllm.tsv": (True, 4, 0, 0),
    "h200_8gpu_vm_lspci_tv_bridge_ids_vastai_simllm_excerpt.txt": None,
    "a100_pcie_8gpu_empty_cpu_affinity_daskcuda1381_excerpt.txt": (False, 8, 1, 1),
    "h200_9nic_bond_edited_header_weiziyang.txt": (True, 8, 9, 8),
    "rtx4090_8gpu_2nic_ibp_gooxi_blog.txt": (True, 8, 2, 2),
    "pcie_8gpu_1nic_mlx5_header_quda669.tsv": (True, 8, 1, 1),
    "pcie_8gpu_14nic_topo_mp_deepep60_excerpt.txt": (False, 8, 14, 4),
    "azure_ndv5_h100_topo.xml": (True, 8, 8, 8),
    "dgx_a100_nccl1505_dump_excerpt.xml": (False, 1, 3, 0),
    "hgx_h100_simai128_excerpt.xml": (False, 2, 1, 1),
    "tesla_p4_1gpu_numa_affinity_na_hami99.tsv": (True, 1, 0, 0),
    "rtx4090_8gpu_2nic_gpu_numa_id_na_gpuallocator17.tsv": (True, 8, 2, 2),
    "rtx5090_2gpu_gpu_numa_id_na_club3090_1140.tsv": (True, 2, 0, 0),
    "nv12_2gpu_8nic_empty_affinity_vllm19607_excerpt.txt": (False, 2, 8, 2),
    "lenovo_sd665n_v3_4xh100_lspci_t.txt": None,
    "lenovo_sd665n_v3_nic_numa.txt": None,
}


def _read(name: str) -> Topology:
    return parse_topology_file(TOPOLOGIES / name)


def test_every_topology_fixture_has_an_expectation():
    assert sorted(EXPECTED) == sorted(p.name for p in TOPOLOGIES.iterdir())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_is_read_or_refused_with_a_topology_error(name):
    want = EXPECTED[name]
    if want is None:
        with pytest.raises(TopologyError) as err:
            _read(name)
        assert name in str(err.value) and "\n" not in str(err.value), "refusal is one line naming the file"
        return
    topo = _read(name)
    got = (topo.complete, len(topo.gpus), len(topo.nics), len(topo.compute_nics))
    assert got == want, f"{name}: (complete, gpus, nics, compute nics)"


@pytest.mark.parametrize("name", sorted(n for n, w in EXPECTED.items() if w is not None))
def test_every_fixture_gives_json_with_the_documented_shape(name):
    data = json.loads(json.dumps(_read(name).to_json()))
    assert isinstance(data["complete"], bool), f"{name}: complete"
    for g in data["gpus"]:
        assert {"name", "numa", "nic"} <= set(g), f"{name}: gpus[] keys"
    for n in data["nics"]:
        assert {"name", "numa"} <= set(n), f"{name}: nics[] keys"


@pytest.mark.parametrize("name", sorted(n for n, w in EXPECTED.items() if w and not w[0]))
def test_an_excerpt_is_reported_incomplete_with_a_note_saying_why(name):
    topo = _read(name)
    assert not topo.complete and topo.notes, f"{name}: complete / notes"


# --- nvidia-smi topo -m ---------------------------------------------------------------------------


def test_a_complete_matrix_names_nics_by_their_legend_and_states_gpu_numa():
    topo = _read("h100_hgx_12nic_sequential_complete.tsv")
    assert [n.name for n in topo.nics] == [f"mlx5_{i}" for i in range(12)]
    assert [n.label for n in topo.nics] == [f"NIC{i}" for i in range(12)]
    assert [(g.numa, g.numa_inferred) for g in topo.gpus] == [(0, False)] * 4 + [(1, False)] * 4
    assert topo.gpus[0].cpu_affinity == "0-55,112-167"
    assert topo.distance("GPU0", "mlx5_0") == "PIX" and topo.distance("GPU0", "mlx5_1") == "PXB"
    assert topo.distance("GPU0", "GPU5") == "NV18"
    assert topo.distance("mlx5_4", "mlx5_5") == "PIX"
    assert topo.notes == ()


def test_two_b200s_sharing_a_switch_with_two_nics_take_one_each_on_their_own_numa_node():
    """GKE A4 (8x B200, dranet's page): each pair of GPUs is PIX to a pair of NICs; the two cells
    after the CPU affinity are one space apart there (`0 N/A`) and still read as NUMA and GPU NUMA."""
    topo = _read("b200_8nic_gke_a4_dranet_excerpt.txt")
    pairs = {g["name"]: (g["nic"], g["numa"]) for g in topo.to_json()["gpus"]}
    assert pairs == {f"GPU{i}": (f"mlx5_{i}", 0 if i < 4 else 1) for i in range(8)}
    assert {n["name"]: n["numa"] for n in topo.to_json()["nics"]} == {f"mlx5_{i}": 0 if i < 4 else 1 for i in range(8)}


def test_eight_b200s_with_no_nic_in_view_take_their_numa_nodes_from_the_matrix():
    """A rented 8x B200 VM's matrix, written to a file by nvidia-smi: all 56 pairs NV18, no NIC
    columns, NUMA 0 for GPU0..GPU3 and 1 for GPU4..GPU7 as printed (not inferred)."""
    topo = _read("b200_8gpu_0nic_vm_vastai_simllm238.tsv")
    assert topo.complete and topo.notes == () and topo.nics == ()
    assert [(g.numa, g.numa_inferred) for g in topo.gpus] == [(0, False)] * 4 + [(1, False)] * 4
    assert [g.cpu_affinity for g in topo.gpus] == ["0-47,96-143"] * 4 + ["48-95,144-191"] * 4
    assert {topo.distance(f"GPU{a}", f"GPU{b}") for a in range(8) for b in range(8) if a != b} == {"NV18"}
    assert topo.pairing() == {}


def test_gpus_on_numa_nodes_numbered_backwards_keep_the_nodes_printed():
    """Perlmutter: GPU0 on NUMA node 3 .. GPU3 on node 0, one GPU a node."""
    topo = _read("a100_4gpu_0nic_numa_reversed_perlmutter_simllm.tsv")
    assert [(g.numa, g.numa_inferred) for g in topo.gpus] == [(3, False), (2, False), (1, False), (0, False)]
    assert topo.gpus[0].cpu_affinity == "48-63,112-127" and topo.distance("GPU0", "GPU3") == "NV4"


def test_a_cloud_vms_gpus_pair_with_the_vf_beside_each_under_its_own_virtual_switch():
    """A rented 8x H200 VM (QEMU) whose every GPU shares an emulated switch with one ConnectX VF."""
    topo = _read("h200_8nic_vf_vm_vastai_simllm.tsv")
    assert topo.pairing() == {f"GPU{i}": f"mlx5_{i}" for i in range(8)}
    assert [n.label for n in topo.nics] == [f"NIC{i}" for i in range(8)]
    assert [(n.numa, n.numa_inferred) for n in topo.nics] == [(0, True)] * 4 + [(1, True)] * 4


def test_nic_numa_is_inferred_from_pcie_adjacency_to_gpus():
    topo = _read("h100_hgx_12nic_sequential_complete.tsv")
    numa = {n.name: (n.numa, n.numa_inferred) for n in topo.nics}
    assert numa["mlx5_0"] == (0, True) and numa["mlx5_4"] == (0, True) and numa["mlx5_11"] == (1, True)


def test_nic_numa_stays_unknown_when_only_sys_links_it_to_known_gpus():
    topo = _read("h100_12nic_vllm6746_excerpt.tsv")
    numa = {n.name: n.numa for n in topo.nics}
    assert numa["NIC0"] is None, "SYS to every NUMA 1 GPU does not say which other node"
    assert numa["NIC6"] == 1 and numa["NIC7"] == 1


def test_storage_adapters_on_their_own_host_bridge_are_not_compute_nics():
    topo = _read("h100_hgx_12nic_sequential_complete.tsv")
    assert sorted(n.name for n in topo.nics if not n.compute) == ["mlx5_10", "mlx5_11", "mlx5_4", "mlx5_5"]


def test_a_headerless_excerpt_takes_its_columns_from_the_x_diagonal():
    topo = _read("h100_12nic_vllm6746_excerpt.tsv")
    assert [g.name for g in topo.gpus] == [f"GPU{i}" for i in range(8)]
    assert [n.name for n in topo.nics] == [f"NIC{i}" for i in range(12)]
    assert topo.distance("GPU0", "NIC0") == "PXB", "GPU0's class comes from NIC0's row"
    assert [g.numa for g in topo.gpus[4:]] == [1] * 4


def test_every_compute_nic_of_the_dgx_a100_excerpt_serves_a_gpu():
    # Six compute NICs for eight GPUs; GPU4 is PXB to NIC6 and NIC7 alike, and NIC7 used to sit idle.
    topo = _read("a100_dgx_12nic_nccl1505_excerpt.txt")
    pairs = topo.pairing()
    assert set(pairs.values()) == {n.name for n in topo.compute_nics}
    assert {pairs["GPU0"], pairs["GPU1"]} <= {"NIC0", "NIC1"} and pairs["GPU4"] in ("NIC6", "NIC7")


def test_the_dgx_h100_excerpt_pairs_as_the_catalog_dgx_h100_does():
    # The excerpt uses DGX naming (NICk = mlx5_k); its pairing is the catalog's, derived independently.
    labels = CATALOG.nodes["dgx-h100"].reproduces.nic_labels
    got = {g: labels[n] for g, n in _read("h100_12nic_vllm6746_excerpt.tsv").pairing().items()}
    assert got == CATALOG.nodes["dgx-h100"].pairing()


def test_space_aligned_and_tab_separated_matrices_read_the_same():
    tsv = (TOPOLOGIES / "h100_hgx_12nic_sequential_complete.tsv").read_text()
    txt = "\n".join(re.sub(r"\t+", "    ", line).replace(" X ", "X") for line in tsv.splitlines())
    a, b = parse_topology_text(tsv, "tsv"), parse_topology_text(txt, "txt")
    assert dict(a.classes) == dict(b.classes)
    assert a.to_json()["gpus"] == b.to_json()["gpus"] and a.to_json()["nics"] == b.to_json()["nics"]


def test_an_older_matrix_with_rdma_names_as_labels_and_soc_reads():
    text = (
        "\tGPU0\tGPU1\tmlx5_0\tmlx5_1\tCPU Affinity\n"
        "GPU0\t X \tSOC\tPIX\tSOC\t0-7\n"
        "GPU1\tSOC\t X \tSOC\tPIX\t8-15\n"
        "mlx5_0\tPIX\tSOC\t X \tSOC\t\n"
        "mlx5_1\tSOC\tPIX\tSOC\t X \t\n"
    )
    topo = parse_topology_text(text)
    assert topo.complete
    assert [n.name for n in topo.nics] == ["mlx5_0", "mlx5_1"]
    assert topo.distance("GPU0", "GPU1") == "SYS", "SOC is the old name of SYS"
    assert topo.pairing() == {"GPU0": "mlx5_0", "GPU1": "mlx5_1"}
    assert topo.gpus[0].numa is None, "no NUMA Affinity column: unknown"


def test_a_row_cut_mid_cell_is_an_incomplete_topology_not_a_crash():
    lines = (TOPOLOGIES / "h100_hgx_12nic_sequential_complete.tsv").read_text().splitlines()
    lines[3] = lines[3][:40]
    topo = parse_topology_text("\n".join(lines))
    assert not topo.complete and any("GPU2" in n for n in topo.notes)


def test_rows_that_contradict_each_other_are_refused():
    text = "\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tSYS\t X \n"
    with pytest.raises(TopologyError, match="NIC0-GPU0 is SYS but GPU0-NIC0 is PIX"):
        parse_topology_text(text, "bad")


# --- the shapes people paste (issue 19) -------------------------------------------------------------
# Every "derived" text below is a real fixture with one copy-paste accident applied, named in the test.

B300 = "b300_9nic_ansi_bond_sglang26039.tsv"


def _text(name: str) -> str:
    return (TOPOLOGIES / name).read_text()


def _same_reading(a: Topology, b: Topology) -> None:
    assert dict(a.classes) == dict(b.classes), "classes"
    assert a.to_json()["gpus"] == b.to_json()["gpus"] and a.to_json()["nics"] == b.to_json()["nics"]


def test_the_current_format_names_nics_by_their_legend_whatever_the_name():
    topo = _read(B300)
    assert [n.name for n in topo.nics] == [f"mlx5_{i}" for i in range(10, 18)] + ["mlx5_bond_0"]
    assert [(g.numa, g.numa_inferred) for g in topo.gpus] == [(0, False)] * 4 + [(1, False)] * 4
    assert topo.pairing() == {f"GPU{i}": f"mlx5_{10 + i}" for i in range(8)}
    assert not {n.name: n.compute for n in topo.nics}["mlx5_bond_0"], "the bond is NODE/SYS to every GPU"
    assert topo.notes == ()


def test_infiniband_netdev_names_in_the_legend_are_kept_as_they_are():
    topo = _read("rtx4090_8gpu_2nic_ibp_gooxi_blog.txt")
    assert [n.name for n in topo.nics] == ["ibp177s0f0", "ibp177s0f1"]
    assert sorted(topo.pairing().values()) == ["ibp177s0f0"] * 4 + ["ibp177s0f1"] * 4


def test_ansi_underline_around_the_header_is_ignored_with_or_without_its_escape_byte():
    # B300 as pasted lost the ESC bytes ("[4mGPU0 ... ID[0m"); a capture from a terminal keeps them.
    pasted = _text(B300)
    with_escape = pasted.replace("[4m", "\x1b[4m").replace("[0m", "\x1b[0m")
    plain = pasted.replace("[4m", "").replace("[0m", "")
    _same_reading(parse_topology_text(pasted), parse_topology_text(plain))
    _same_reading(parse_topology_text(with_escape), parse_topology_text(plain))


def test_the_older_format_with_rdma_names_as_column_headers_and_no_legend_reads():
    topo = _read("pcie_8gpu_1nic_mlx5_header_quda669.tsv")
    assert [n.name for n in topo.nics] == ["mlx5_0"] and topo.distance("GPU4", "mlx5_0") == "PHB"
    assert set(topo.pairing().values()) == {"mlx5_0"}, "one compute NIC serves all eight GPUs"
    assert all(g.numa is None and not g.numa_inferred for g in topo.gpus), "no NUMA column: unknown"
    assert topo.gpus[4].cpu_affinity == "14-27"


def test_topo_mp_prints_pcie_classes_between_gpus_and_reads_like_topo_m():
    topo = _read("pcie_8gpu_14nic_topo_mp_deepep60_excerpt.txt")
    assert topo.distance("GPU0", "GPU1") == "NODE" and topo.distance("GPU0", "GPU4") == "SYS"
    assert [g.numa for g in topo.gpus[:4]] == [0] * 4
    assert {g: topo.pairing()[g] for g in ("GPU0", "GPU1", "GPU2", "GPU3")} == {
        "GPU0": "NIC0", "GPU1": "NIC1", "GPU2": "NIC2", "GPU3": "NIC7"}


def test_a_retyped_header_with_short_column_names_and_a_ruler_reads_by_its_names():
    topo = _read("h200_9nic_bond_edited_header_weiziyang.txt")
    assert [(g.numa, g.numa_inferred) for g in topo.gpus] == [(0, False)] * 4 + [(1, False)] * 4, \
        "'NUMA' is the NUMA Affinity column, 'GPU NUMA' (N/A) is not"
    assert topo.gpus[0].cpu_affinity == "0,2-47,96-143"
    assert topo.nics[8].name == "mlx5_bond_0" and topo.pairing()["GPU1"] == "mlx5_3"
    assert not any("skipped" in n for n in topo.notes), "the ruler line is not a stray line"


@pytest.mark.parametrize("damage", ["glued labels", "no leading tab", "wrapped"])
def test_a_damaged_header_row_reads_like_the_intact_one(damage):
    lines = _text(B300).splitlines()
    if damage == "glued labels":  # the space between two labels lost
        lines[0] = lines[0].replace("NIC7\tNIC8", "NIC7NIC8")
    elif damage == "no leading tab":
        lines[0] = lines[0].lstrip("\t")
    else:  # the header wrapped before its affinity columns
        lines[0:1] = lines[0].split("\tCPU Affinity")[0], "CPU Affinity" + lines[0].split("\tCPU Affinity")[1]
    _same_reading(parse_topology_text("\n".join(lines)), _read(B300))


def test_a_header_that_has_lost_a_label_is_rebuilt_from_the_rows_x_diagonal():
    lines = _text(B300).splitlines()
    lines[0] = lines[0].replace("NIC3\t", "")
    topo = parse_topology_text("\n".join(lines))
    _same_reading(topo, _read(B300))
    assert any("X diagonal" in n for n in topo.notes)


def test_a_damaged_header_that_the_rows_cannot_replace_is_refused():
    lines = _text(B300).splitlines()
    lines[0] = lines[0].replace("NIC3\t", "")
    text = "\n".join(ln for ln in lines if not ln.startswith("NIC3"))
    with pytest.raises(TopologyError, match="header row names 16 columns"):
        parse_topology_text(text, "bad")


def test_an_empty_cpu_affinity_cell_leaves_the_numa_column_in_place():
    # Slurm left GPU4-7 no CPUs: their CPU Affinity cell is empty and NUMA Affinity still says 1.
    topo = _read("a100_pcie_8gpu_empty_cpu_affinity_daskcuda1381_excerpt.txt")
    assert [(g.numa, g.numa_inferred) for g in topo.gpus] == [(0, False)] * 4 + [(1, False)] * 4
    assert [g.cpu_affinity for g in topo.gpus] == ["0-15,56-71"] * 4 + [None] * 4


@pytest.mark.parametrize("form", ["tabs", "terminal spaces"])
def test_an_empty_cpu_affinity_cell_reads_in_tab_and_in_terminal_copied_text(form):
    # Derived from B300: GPU4's CPU Affinity emptied as nvidia-smi prints it ("NODE\t\t1\t\tN/A").
    text = _text(B300).replace("NODE\t64-127,192-255\t1", "NODE\t\t1", 1)
    assert text != _text(B300)
    if form == "terminal spaces":
        text = "\n".join(line.expandtabs(8) for line in text.splitlines())
    gpu4 = parse_topology_text(text).gpus[4]
    assert (gpu4.numa, gpu4.numa_inferred, gpu4.cpu_affinity) == (1, False, None)


def test_a_matrix_copied_from_a_terminal_reads_like_the_tab_separated_one():
    expanded = "\n".join(line.expandtabs(8) for line in _text(B300).splitlines())
    _same_reading(parse_topology_text(expanded), _read(B300))


def test_a_hand_aligned_row_with_an_empty_cell_is_placed_by_the_header_columns():
    # Derived from the retyped-header fixture: GPU0's CPU list blanked, spaces kept.
    text = _text("h200_9nic_bond_edited_header_weiziyang.txt").replace("0,2-47,96-143", " " * 13, 1)
    gpu0 = parse_topology_text(text).gpus[0]
    assert (gpu0.numa, gpu0.cpu_affinity) == (0, None)


def test_an_empty_cell_that_the_spacing_cannot_place_is_refused_naming_the_row():
    # Derived from the Slurm fixture with its spacing squeezed: "NODE 1 N/A" could be CPU 1, NUMA N/A.
    text = "\n".join(re.sub(r" +", " ", line) for line in
                     _text("a100_pcie_8gpu_empty_cpu_affinity_daskcuda1381_excerpt.txt").splitlines())
    with pytest.raises(TopologyError, match=r"row GPU4 has 2 values \(1, N/A\).*does not show which cell is empty"):
        parse_topology_text(text, "squeezed")


def test_an_empty_numa_affinity_between_values_is_read_by_the_tabs_nvidia_smi_prints():
    # Derived from B300: GPU0-2's NUMA Affinity emptied as nvidia-smi prints an empty cell (its tab,
    # then NUMA Affinity's second tab), so "1" is the GPU NUMA ID, as in vllm #19607's real rows.
    text = _text(B300).replace("0-63,128-191\t0\t\tN/A", "0-63,128-191\t\t\t1", 3)
    gpu0 = parse_topology_text(text, "gap").gpus[0]
    assert (gpu0.numa, gpu0.numa_inferred, gpu0.cpu_affinity) == (None, False, "0-63,128-191")


def test_a_gap_between_affinity_values_that_nvidia_smi_never_prints_is_refused():
    # Derived from B300: one tab more than any print of nvidia-smi's, so "1" could be NUMA or GPU NUMA ID.
    text = _text(B300).replace("0-63,128-191\t0\t\tN/A", "0-63,128-191\t\t\t\t1", 3)
    with pytest.raises(TopologyError, match="row GPU0 has 2 values"):
        parse_topology_text(text, "gap")


def test_an_empty_or_na_numa_cell_is_unknown_and_not_inferred_from_its_neighbours():
    # Derived from B300: GPU0 NUMA Affinity N/A, GPU1's empty. Both are PXB to a NIC whose node is known.
    text = _text(B300).replace("0-63,128-191\t0\t", "0-63,128-191\tN/A\t", 1)
    lines = text.splitlines()
    lines[2] = lines[2].replace("0-63,128-191\t0\t\tN/A", "\t\t\t")
    topo = parse_topology_text("\n".join(lines))
    assert [(g.numa, g.numa_inferred) for g in topo.gpus[:3]] == [(None, False), (None, False), (0, False)]
    assert any("GPU0" in n and "NUMA unknown" in n for n in topo.notes)
    data = topo.to_json()["gpus"][0]
    assert (data["numa"], data["numa_inferred"]) == (None, False)


@pytest.mark.parametrize("row, glue", [
    (1, ("PXB\tNODE", "PXBNODE")),      # GPU0: the tab between two class cells lost
    (9, ("SYS\tSYS\tSYS", "SYS\tSYSSYS")),  # NIC0
    (10, (" X \tNODE", " X NODE")),     # NIC1: the tab after the diagonal lost
])
def test_cells_that_lost_the_tab_between_them_are_split_and_checked_across_the_diagonal(row, glue):
    lines = _text(B300).splitlines()
    assert glue[0] in lines[row]
    lines[row] = lines[row].replace(glue[0], glue[1], 1)
    topo = parse_topology_text("\n".join(lines))
    _same_reading(topo, _read(B300))
    label = lines[row].split("\t")[0]
    if "X" not in glue[1]:
        assert any(n.startswith(f"row {label}:") and "confirmed by the rows across" in n for n in topo.notes)


def test_a_row_that_lost_a_cell_is_refused_naming_the_row():
    lines = _text(B300).splitlines()
    lines[4] = lines[4].replace("\tNODE\tNODE\tNODE\tPXB", "\tNODE\tNODE\tPXB", 1)  # GPU3
    with pytest.raises(TopologyError, match=r"row GPU3 has 16 cells for 17 columns and goes on with '0-63,128-191'"):
        parse_topology_text("\n".join(lines), "lost")


def test_a_nic_row_that_lost_a_cell_is_refused_though_nothing_follows_its_cells():
    lines = _text(B300).splitlines()
    lines[12] = lines[12].replace("\tPXB", "", 1)  # NIC3, which nvidia-smi ends with four tabs
    with pytest.raises(TopologyError, match="row NIC3 has 16 cells for 17 columns and was printed to its end"):
        parse_topology_text("\n".join(lines), "lost")


def test_a_split_that_the_other_rows_contradict_is_refused_naming_both_rows():
    # Derived from B300: GPU0 loses its PXB cell and NIC0's tab, so the split shifts its NIC cells.
    lines = _text(B300).splitlines()
    lines[1] = lines[1].replace("\tPXB\tNODE\tNODE\tNODE", "\tNODENODE\tNODE\tNODE", 1)
    with pytest.raises(TopologyError, match=r"NIC0-GPU0 is PXB but GPU0-NIC0 is NODE \(row GPU0 was read from 'NODENODE'"):
        parse_topology_text("\n".join(lines), "shifted")


# --- NCCL XML -------------------------------------------------------------------------------------


def test_azure_xml_pairs_each_gpu_with_the_nic_on_its_virtual_switch():
    topo = _read("azure_ndv5_h100_topo.xml")
    assert topo.format == "nccl-xml" and topo.complete
    assert topo.gpus[0].name == "0001:00:00.0", "GPUs are named by PCI bus id in XML"
    assert topo.nics[0].name == "0101:00:00.0", "a NIC without <net> is named by its bus id"
    assert [g.numa for g in topo.gpus] == [0] * 4 + [1] * 4
    pairs = topo.pairing()
    assert pairs["0001:00:00.0"] == "0101:00:00.0" and pairs["000c:00:00.0"] == "0108:00:00.0"
    assert {topo.distance(g, n) for g, n in pairs.items()} == {"PIX"}
    assert topo.distance("0001:00:00.0", "0102:00:00.0") == "PHB"
    assert topo.distance("0001:00:00.0", "0105:00:00.0") == "SYS"


def test_an_xml_excerpt_keeps_what_it_shows_and_leaves_the_rest_unknown():
    topo = _read("dgx_a100_nccl1505_dump_excerpt.xml")
    assert [n.name for n in topo.nics] == ["mlx5_0", "mlx5_4", "mlx5_5"]
    assert topo.distance("mlx5_4", "mlx5_5") == "PIX", "two ports of one adapter"
    assert {n.name: n.numa for n in topo.nics}["mlx5_4"] == 0
    assert topo.distance("0000:07:00.0", "mlx5_0") is None, "their common bridge is outside the excerpt"


def test_an_xml_excerpt_gives_the_classes_inside_one_switch():
    topo = _read("hgx_h100_simai128_excerpt.xml")
    assert topo.distance("0000:d9:00.0", "mlx5_5") == "PIX"
    assert topo.distance("0000:b8:00.0", "mlx5_5") is None


# --- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("   \n\n", "empty"),
    ("00:00.0 Host bridge: Intel Corporation Device 09a2\n", "lspci"),
    ("hello world\n", "not an `nvidia-smi topo -m` matrix"),
    ("<html><body>hi</body></html>\n", "without NCCL topology elements"),
    ("<system version=\"1\"><cpu numaid=\"0\"/></system>\n", "without any GPU or NIC"),
    ("GPU0\tGPU1\tCPU Affinity\n", "header without any rows"),
])
def test_what_is_not_a_topology_is_refused_with_a_reason(text, message):
    with pytest.raises(TopologyError, match=re.escape(message)):
        parse_topology_text(text, "f")


def test_a_binary_file_is_refused(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(TopologyError, match="not a text file"):
        parse_topology_file(p)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(TopologyError, match="cannot read"):
        parse_topology_file(tmp_path / "nope.tsv")


FIXTURE_TEXTS = [(TOPOLOGIES / n).read_text() for n in sorted(EXPECTED)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FIXTURE_TEXTS), st.data())
def test_any_cut_or_damaged_fixture_is_read_or_refused_never_a_crash(text, data):
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    junk = data.draw(st.sampled_from(["", "\t", "X", "SYS", "<pci", "\n# [EXCERPT x\n", "GPU9", "-->"]))
    damaged = text[:start] + junk + text[end:]
    try:
        topo = parse_topology_text(damaged, "damaged")
    except TopologyError:
        return
    json.dumps(topo.to_json())


# --- catalog SKUs ---------------------------------------------------------------------------------

REPRODUCING = sorted(k for k, s in CATALOG.nodes.items() if s.reproduces)


def test_the_skus_with_a_real_matrix_are_checked_against_it():
    assert {"dgx-h100", "hgx-h100", "dgx-a100"} <= set(REPRODUCING)


@pytest.mark.parametrize("sku_id", REPRODUCING)
def test_walking_the_sku_pcie_tree_reproduces_every_class_of_its_nvidia_smi_matrix(sku_id):
    sku = CATALOG.nodes[sku_id]
    topo = parse_topology_file(FIXTURES_DIR / sku.reproduces.file)
    names = {n.name: sku.reproduces.nic_labels.get(n.label, n.name) for n in topo.nics}
    names.update({g.name: g.name for g in topo.gpus})
    checked = 0
    for (a, b), want in topo.classes.items():
        if want.startswith("NV"):
            assert sku.nvlink_class == want, f"{sku_id}: gpu_interconnect.nvlink_class vs {a}-{b}"
            continue
        got = sku.distance(names[a], names[b])
        if got is None:
            assert not topo.complete, f"{sku_id}: {names[a]} or {names[b]} has no place in the PCIe tree"
            continue
        assert got == want, f"{sku_id}: PCIe tree gives {names[a]}-{names[b]} = {got}, {sku.reproduces.file} says {want}"
        checked += 1
    assert checked >= 100, f"{sku_id}: only {checked} classes compared"


@pytest.mark.parametrize("sku_id", REPRODUCING)
def test_gpu_numa_of_the_sku_matches_its_matrix(sku_id):
    sku = CATALOG.nodes[sku_id]
    topo = parse_topology_file(FIXTURES_DIR / sku.reproduces.file)
    for g in topo.gpus:
        if g.numa is not None:
            assert sku.gpu(g.name).numa == g.numa, f"{sku_id}: {g.name}.numa"


def test_from_sku_gives_the_topology_of_the_complete_matrix():
    from_file = _read("h100_hgx_12nic_sequential_complete.tsv").to_json()
    from_sku = Topology.from_sku(CATALOG.nodes["hgx-h100"]).to_json()
    assert from_sku["complete"] is True
    key = lambda d: {k: v for k, v in d.items() if k in ("name", "numa", "nic", "nic_class", "compute", "gpus")}
    assert [key(g) for g in from_sku["gpus"]] == [key(g) for g in from_file["gpus"]]
    assert [key(n) for n in from_sku["nics"]] == [key(n) for n in from_file["nics"]]
    assert from_sku["distances"] == from_file["distances"]


def test_from_sku_takes_nic_roles_from_the_catalog():
    topo = Topology.from_sku(CATALOG.nodes["dgx-h100"])
    assert [n.name for n in topo.compute_nics] == [n.rdma for n in CATALOG.nodes["dgx-h100"].compute_nics]
    assert not any(n.compute_inferred for n in topo.nics)
    assert topo.pairing() == CATALOG.nodes["dgx-h100"].pairing()


def test_from_sku_with_an_unplaced_adapter_is_incomplete_and_says_which():
    topo = Topology.from_sku(CATALOG.nodes["dgx-a100"])
    assert not topo.complete and any("mlx5_10" in n for n in topo.notes)
    assert topo.pairing()["GPU0"] in ("mlx5_0", "mlx5_1")


@pytest.mark.parametrize("cell", ["X", "NV18"])
def test_a_gpu_nic_cell_that_is_not_a_pcie_class_is_refused(cell):
    text = f"\tGPU0\tNIC0\nGPU0\t X \t{cell}\nNIC0\t{cell}\t X \n"
    with pytest.raises(TopologyError, match="GPU0-NIC0 is"):
        parse_topology_text(text, "bad")


# --- N/A cells: containers, VMs and older drivers (issue 38) -----------------------------------------


def test_a_numa_affinity_of_na_is_unknown_and_the_cpu_affinity_beside_it_is_kept():
    # HAMi #99: a Tesla P4 whose driver prints N/A for both NUMA columns.
    topo = _read("tesla_p4_1gpu_numa_affinity_na_hami99.tsv")
    (gpu,) = topo.gpus
    assert (gpu.numa, gpu.numa_inferred, gpu.cpu_affinity) == (None, False, "0-7")
    assert "NUMA Affinity empty or N/A for GPU0: NUMA unknown" in topo.notes


@pytest.mark.parametrize("name, numa", [
    ("rtx4090_8gpu_2nic_gpu_numa_id_na_gpuallocator17.tsv", [0] * 4 + [1] * 4),
    ("rtx5090_2gpu_gpu_numa_id_na_club3090_1140.tsv", [0, 0]),
])
def test_a_gpu_numa_id_of_na_leaves_the_stated_numa_affinity_in_place(name, numa):
    topo = _read(name)
    assert [(g.numa, g.numa_inferred) for g in topo.gpus] == [(n, False) for n in numa]
    assert not any("NUMA unknown" in n for n in topo.notes)


def test_nic_numa_is_inferred_and_marked_so_beside_gpus_whose_numa_id_is_na():
    # go-gpuallocator #17: both NICs PHB to GPU6 (NUMA 1); nothing states their own node.
    topo = _read("rtx4090_8gpu_2nic_gpu_numa_id_na_gpuallocator17.tsv")
    assert [(n.name, n.numa, n.numa_inferred) for n in topo.nics] == [("NIC0", 1, True), ("NIC1", 1, True)]


def test_empty_affinities_before_a_gpu_numa_id_of_na_read_as_unknown_not_refused():
    # vllm #19607: the affinity cells a container leaves empty, then N/A, as a terminal printed it.
    topo = _read("nv12_2gpu_8nic_empty_affinity_vllm19607_excerpt.txt")
    assert [(g.numa, g.numa_inferred, g.cpu_affinity) for g in topo.gpus] == [(None, False, None)] * 2
    assert all(n.numa is None for n in topo.nics), "nothing on the node states a NUMA node to infer from"
    assert topo.pairing() == {"GPU0": "NIC6", "GPU1": "NIC7"}
    assert "NUMA Affinity empty or N/A for GPU0, GPU1: NUMA unknown" in topo.notes


def test_the_empty_affinity_rows_read_the_same_with_their_tabs_back():
    # The terminal's 8-column stops turned back into the tabs nvidia-smi printed.
    text = _text("nv12_2gpu_8nic_empty_affinity_vllm19607_excerpt.txt")
    tabbed = "\n".join(re.sub(r" {2,}", lambda m: "\t" * -(-len(m.group()) // 8), line) if line[:3] in ("GPU", "NIC")
                       else line for line in text.splitlines())
    assert "PXB\t\t\t\tN/A" in tabbed
    _same_reading(parse_topology_text(tabbed), _read("nv12_2gpu_8nic_empty_affinity_vllm19607_excerpt.txt"))


@pytest.mark.parametrize("form", ["tabs", "terminal spaces"])
def test_a_cpu_affinity_of_na_is_unknown_like_an_empty_one(form):
    # Derived from club-3090 #1140: CPU Affinity N/A (no real print of it was found; the issue
    # reports them), NUMA Affinity still 0.
    text = _text("rtx5090_2gpu_gpu_numa_id_na_club3090_1140.tsv").replace("\t0-63\t0\t", "\tN/A\t0\t", 1)
    if form == "terminal spaces":
        text = "\n".join(line.expandtabs(8) for line in text.splitlines())
    gpu0 = parse_topology_text(text).gpus[0]
    assert (gpu0.numa, gpu0.numa_inferred, gpu0.cpu_affinity) == (0, False, None)


def test_every_affinity_cell_of_na_leaves_the_gpu_unknown_and_is_not_refused():
    # Derived from club-3090 #1140: all three columns N/A, each followed by the tabs nvidia-smi prints.
    text = _text("rtx5090_2gpu_gpu_numa_id_na_club3090_1140.tsv").replace("\t0-63\t0\t\tN/A", "\tN/A\tN/A\t\tN/A")
    topo = parse_topology_text(text)
    assert [(g.numa, g.cpu_affinity) for g in topo.gpus] == [(None, None)] * 2
