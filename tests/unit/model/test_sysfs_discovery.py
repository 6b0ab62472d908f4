"""Discovery from sysfs: the PCIe tree walked as on a host gives the catalog's classes and pairing."""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest

from railyard.drivers.lab import hwtree
from railyard.model import sysfs_discovery
from railyard.model.catalog import load_catalog
from railyard.model.topology import Topology, parse_topology_text

CATALOG = load_catalog()
SKUS = sorted(CATALOG.nodes)


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for sku in SKUS:
        root = tmp_path_factory.mktemp(sku)
        hwtree.build_hwtree(CATALOG.nodes[sku], root)
        out[sku] = root
    return out


def _comparable(topo: Topology, leave_out: set[str]) -> dict:
    return {
        "gpus": [(g.name, g.index, g.numa, g.numa_inferred) for g in topo.gpus],
        "nics": [(n.name, n.index, n.numa, n.numa_inferred, n.compute) for n in topo.nics if n.name not in leave_out],
        "classes": {k: v for k, v in topo.classes.items() if not set(k) & leave_out},
        "pairing": topo.pairing(),
    }


def test_dgx_h100_pairs_by_the_pcie_tree_read_from_sysfs(trees):
    topo = Topology.from_sysfs(trees["dgx-h100"] / "sys")
    assert topo.pairing() == {"GPU0": "mlx5_0", "GPU1": "mlx5_3", "GPU2": "mlx5_4", "GPU3": "mlx5_5",
                              "GPU4": "mlx5_6", "GPU5": "mlx5_9", "GPU6": "mlx5_10", "GPU7": "mlx5_11"}
    assert topo.distance("GPU0", "mlx5_0") == "PXB"
    assert topo.distance("mlx5_1", "mlx5_2") == "PIX", "two functions of one storage adapter"
    assert [n.name for n in topo.compute_nics] == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5",
                                                   "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


@pytest.mark.parametrize("sku", SKUS)
def test_from_sysfs_equals_from_sku_for_every_catalog_node(sku, trees):
    s = CATALOG.nodes[sku]
    manifest = json.loads((trees[sku] / hwtree.MANIFEST).read_text())
    left_out = set(manifest["omitted"])  # devices the catalog does not place have no sysfs home
    want = _comparable(Topology.from_sku(s), left_out)
    for compute in (None, [n.rdma for n in s.compute_nics]):
        got = Topology.from_sysfs(trees[sku] / "sys", compute_nics=compute, nvlink_class=s.nvlink_class)
        assert _comparable(got, set()) == want, f"{sku} (compute NICs {'given' if compute else 'inferred'})"
        for g in got.gpus:
            known = s.gpu(g.name).pci_bus_id
            assert known is None or g.pci_bus_id == known, f"{sku} {g.name}: {g.pci_bus_id} != {known}"


def test_virtual_functions_do_not_change_the_topology(trees, tmp_path):
    import shutil

    root = tmp_path / "h100"
    shutil.copytree(trees["dgx-h100"], root, symlinks=True)
    before = Topology.from_sysfs(root / "sys").to_json()
    pf = Path(os.path.realpath(root / "sys/bus/pci/devices/0000:18:00.0"))
    vf = pf.parent / "0000:18:00.2"  # a VF sits beside its PF, below the same downstream port
    (vf / "infiniband/mlx5_12").mkdir(parents=True)
    (vf / "class").write_text("0x020700\n")
    (vf / "physfn").symlink_to("../0000:18:00.0")
    (root / "sys/bus/pci/devices/0000:18:00.2").symlink_to(os.path.relpath(vf, root / "sys/bus/pci/devices"))
    after = Topology.from_sysfs(root / "sys").to_json()
    after["source"] = before["source"]
    assert after == before


def test_config_space_port_type_names_the_bridge_when_readable(tmp_path):
    cfg = bytearray(256)
    cfg[0x06] = 0x10  # capability list present
    cfg[0x34] = 0x40
    cfg[0x40:0x44] = bytes([0x10, 0x00, 0x60, 0x00])  # PCIe capability, port type 6 (downstream)
    (tmp_path / "config").write_bytes(bytes(cfg))
    assert sysfs_discovery._port_type(str(tmp_path)) == 6
    (tmp_path / "config").write_bytes(bytes(64))
    assert sysfs_discovery._port_type(str(tmp_path)) is None


def test_a_directory_that_is_not_sysfs_is_refused(tmp_path):
    with pytest.raises(sysfs_discovery.DiscoveryError, match="not a sysfs tree"):
        sysfs_discovery.discover(str(tmp_path))


def test_cpulist_and_mask_helpers():
    assert sysfs_discovery.parse_cpulist("0-2,5") == [0, 1, 2, 5]
    assert sysfs_discovery.cpumask("0-3") == "0000000f"
    assert sysfs_discovery.cpumask("32") == "00000001,00000000"


@pytest.mark.parametrize("module", ["sysfs_discovery", "topology", "pairing", "pcie"])
def test_host_side_modules_import_only_the_stdlib_and_each_other(module):
    """They ship to hosts as Ansible module_utils: anything else would not be there."""
    path = Path(__file__).resolve().parents[3] / "railyard/model" / f"{module}.py"
    tree = ast.parse(path.read_text())
    shipped = {"railyard", "ansible"}  # railyard.model.X, or its module_utils copy on a host
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top in shipped:
                assert name in ("railyard.model", "ansible.module_utils"), f"{module}.py imports {name}"
            else:
                assert top in sys.stdlib_module_names, f"{module}.py imports {name}, not stdlib"


def test_cli_topology_import_reads_a_sysfs_directory_and_agrees(trees, capsys):
    from railyard import cli

    rc = cli.main(["topology", "import", "--json", str(trees["dgx-h100"] / "sys")])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out == Topology.from_sysfs(trees["dgx-h100"] / "sys").to_json()
    assert out["format"] == "sysfs"


def test_acs_control_is_read_from_the_extended_config_space(tmp_path):
    cfg = bytearray(4096)
    cfg[0x100:0x104] = (0x000D | (1 << 16)).to_bytes(4, "little")  # ACS capability, version 1, last
    cfg[0x106:0x108] = (0x001D).to_bytes(2, "little")  # SrcValid, ReqRedir, CmplRedir, UpstreamFwd
    (tmp_path / "config").write_bytes(bytes(cfg))
    assert sysfs_discovery.acs_control(str(tmp_path)) & 1
    (tmp_path / "config").write_bytes(bytes(256))  # what a reader who is not root gets
    assert sysfs_discovery.acs_control(str(tmp_path)) is None
