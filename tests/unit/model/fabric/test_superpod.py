"""The fabric planner against NVIDIA's published DGX SuperPOD tables: switch and cable counts per tier
for DGX B200 on Quantum-2 NDR (QM9700, 32 nodes a scalable unit) and DGX B300 on Quantum-X800 XDR
(Q3400, 72 nodes a unit). Every row is read from the copy of the table kept under
railyard/data/fixtures/superpod/, never typed here, and planned from the catalog's SKU and switch.
NVIDIA gives no transceiver counts, so none are compared."""

from __future__ import annotations

import re

import pytest

from railyard.model.catalog import load_catalog
from railyard.model.plan import make_plan
from railyard.paths import PROJECT_ROOT
from tests.unit.model.model_only import parse_config

CATALOG = load_catalog()
SUPERPOD = PROJECT_ROOT / "railyard/data/fixtures/superpod"


def b200_rows() -> list[dict[str, int]]:
    """The DGX B200 RA's table, one cell a line ending in ` |`; `–` where a tier is absent."""
    text = (SUPERPOD / "dgx_b200_superpod_larger_counts_excerpt.txt").read_text()
    cells = [c.strip() for c in re.findall(r"^(.*?) \|$", text, re.M)]
    numbers = [c for c in cells[cells.index("2"):] if re.fullmatch(r"\d+|–", c)]
    keys = ("su", "nodes", "gpus", "leaf", "spine", "core", "node_leaf", "leaf_spine", "spine_core")
    rows = [dict(zip(keys, numbers[i:i + 9])) for i in range(0, len(numbers), 9)]
    return [{k: 0 if v == "–" else int(v) for k, v in r.items()} for r in rows]


def b300_rows() -> list[dict[str, int]]:
    """Table 3 of the DGX B300 XDR RA, as a Markdown table of numeric rows."""
    text = (SUPERPOD / "dgx_b300_xdr_superpod_table3_excerpt.txt").read_text()
    keys = ("su", "nodes", "gpus", "leaf", "spine", "node_leaf", "leaf_spine")
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].isdigit():
            rows.append(dict(zip(keys, (int(c) for c in cells[:7]))))
    return rows


def plan(sku: str, switch: str, speed: str, nodes: int):
    cfg = {
        "railyard:region": "us-east", "railyard:layout": "bare-metal", "railyard:driver": "coreweave",
        "railyard:nodePools": [{"name": "dgx", "sku": sku, "count": nodes}],
        "railyard:fabric": {"compute": {"kind": "infiniband", "speed": speed, "switch": switch,
                                        "cidr": "10.64.0.0/12"},
                            "storage": {"cidr": "10.32.0.0/16"}, "management": {"cidr": "10.16.0.0/16"}},
    }
    return make_plan(parse_config(cfg, stack="t"), CATALOG)


def test_the_tables_read_are_the_tables_kept():
    assert [r["su"] for r in b200_rows()] == [2, 4, 8, 16, 32, 64]
    assert [r["su"] for r in b300_rows()] == [1, 2, 4, 8, 18]


@pytest.mark.parametrize("row", b200_rows(), ids=lambda r: f"{r['su']}su")
def test_dgx_b200_on_qm9700_matches_nvidias_superpod_table(row):
    s = plan("dgx-b200", "qm9700", "ndr", row["nodes"]).fabric.summary()
    assert s["su_nodes"] == 32 and s["scalable_units"] == row["su"]
    assert (s["switches"]["leaf"], s["switches"]["spine"], s["switches"]["core"]) == \
        (row["leaf"], row["spine"], row["core"])
    assert (s["links"]["node_leaf"], s["links"]["leaf_spine"], s["links"]["spine_core"]) == \
        (row["node_leaf"], row["leaf_spine"], row["spine_core"])
    assert s["tiers"] == (3 if row["core"] else 2)


@pytest.mark.parametrize("row", b300_rows(), ids=lambda r: f"{r['su']}su")
def test_b300_on_quantum_x800_xdr_matches_nvidias_superpod_table_3(row):
    s = plan("hgx-b300", "q3400", "xdr", row["nodes"]).fabric.summary()
    assert s["su_nodes"] == 72 and s["scalable_units"] == row["su"]
    # The 4-SU row's 18 spines too: 32 leaves of 72 uplinks, 4 links from each leaf to each spine.
    assert (s["switches"]["leaf"], s["switches"]["spine"], s["switches"]["core"]) == (row["leaf"], row["spine"], 0)
    assert (s["links"]["node_leaf"], s["links"]["leaf_spine"]) == (row["node_leaf"], row["leaf_spine"])
    # The Q3400's cages are unknown: its transceivers are not counted, its hosts' are.
    assert s["optics"]["switch"] is None and s["optics"]["host"] == row["node_leaf"]


@pytest.mark.parametrize("sku,switch,speed,per_su", [
    ("dgx-b200", "qm9700", "ndr", 32), ("hgx-b300", "q3400", "xdr", 72), ("hgx-h200", "qm9700", "ndr", 32),
    ("gb200-nvl72", "qm9700", "ndr", 18)])
@pytest.mark.parametrize("units", [1, 2, 4])
def test_every_new_sku_plans_at_1_2_and_4_scalable_units(sku, switch, speed, per_su, units):
    cfg_nodes = per_su * units
    if sku == "gb200-nvl72":
        # A rack a unit: 14 of a QM9700 leaf's 32 node ports kept free.
        cfg = {"railyard:region": "us-east", "railyard:layout": "bare-metal", "railyard:driver": "coreweave",
               "railyard:nodePools": [{"name": "gb", "sku": sku, "count": cfg_nodes}],
               "railyard:fabric": {"compute": {"kind": "infiniband", "speed": speed, "switch": switch,
                                               "reservedLeafPorts": 14, "cidr": "10.64.0.0/12"},
                                   "storage": {"cidr": "10.32.0.0/16"}, "management": {"cidr": "10.16.0.0/16"}}}
        p = make_plan(parse_config(cfg, stack="t"), CATALOG)
        assert len(p.nvlink_domains) == units
    else:
        p = plan(sku, switch, speed, cfg_nodes)
    s = p.fabric.summary()
    rails = len(CATALOG.nodes[sku].compute_nics)
    assert s["scalable_units"] == units and s["switches"]["leaf"] == units * rails
    assert s["links"]["node_leaf"] == cfg_nodes * rails
    assert len(p.nodes) == cfg_nodes and p.summary()["gpus"] == cfg_nodes * len(CATALOG.nodes[sku].gpus)
