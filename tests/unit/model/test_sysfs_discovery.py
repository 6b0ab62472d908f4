"""Discovery from sysfs: the PCIe tree walked as on a host gives the catalog's classes and pairing."""

from __future__ import annotations

import ast
import json
import os
import shutil
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


# --------------------------------------------------------------------------------------------------
# host_facts: the whole host as JSON, and the standalone program that prints it on a host


def _hw_facts(root: Path) -> dict:
    return sysfs_discovery.host_facts(str(root / "sys"), str(root / "proc"), str(root / "dev"))


def _put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        os.chmod(path, 0o644)
    path.write_text(text + "\n")


def test_host_facts_read_the_kernels_own_formats(tmp_path):
    """What the lab tree leaves out or shows otherwise is written here as the kernel writes it on a host."""
    hwtree.build_hwtree(CATALOG.nodes["dgx-h100"], tmp_path)
    shutil.rmtree(tmp_path / "sys/block")  # the tree's drives have no model or place
    (tmp_path / "sys/class/infiniband/mlx5_3/ports/1/rate").unlink()
    port = "sys/class/infiniband/mlx5_0/ports/1"
    _put(tmp_path, f"{port}/state", "4: ACTIVE")
    _put(tmp_path, f"{port}/phys_state", "5: LinkUp")
    _put(tmp_path, f"{port}/rate", "400 Gb/sec (4X NDR)")
    _put(tmp_path, f"{port}/link_layer", "InfiniBand")
    for name, text in {"mtu": "4092", "operstate": "up", "carrier": "1", "speed": "400000"}.items():
        _put(tmp_path, f"sys/class/net/ibp24s0/{name}", text)
    _put(tmp_path, "sys/class/net/ibp64s0/speed", "-1")  # what a down link shows
    _put(tmp_path, "sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:       1056561788 kB\n"
                                                            "Node 1 HugePages_Total:     0")
    _put(tmp_path, "sys/block/nvme0n1/size", "7501476528")
    _put(tmp_path, "sys/block/nvme0n1/device/model", "SAMSUNG MZQL23T8HCLS-00A07")
    _put(tmp_path, "sys/block/nvme0n1/device/numa_node", "1")
    _put(tmp_path, "sys/block/nvme0n1/device/address", "0000:d4:00.0")
    _put(tmp_path, "sys/block/nvme0c0n1/size", "7501476528")  # a multipath path, not a drive
    _put(tmp_path, "sys/devices/system/cpu/online", "0-223")
    _put(tmp_path, "proc/cpuinfo", "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n\n"
                                   "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n")
    _put(tmp_path, "proc/sys/kernel/osrelease", "5.15.0-91-generic")
    _put(tmp_path, "proc/cmdline", "BOOT_IMAGE=/vmlinuz ro iommu=pt")
    (tmp_path / "dev/infiniband").mkdir(parents=True)
    (tmp_path / "dev/infiniband/uverbs0").touch()
    (tmp_path / "dev/nvidia0").touch()

    facts = _hw_facts(tmp_path)
    assert json.loads(json.dumps(facts)) == facts
    nic = {n["name"]: n for n in facts["nics"]}
    assert {k: nic["mlx5_0"][k] for k in ("state", "phys_state", "rate", "speed_gbps", "link_layer", "mtu",
                                           "operstate", "carrier", "net_speed_mbps", "port", "netdev", "bdf")} == {
        "state": "ACTIVE", "phys_state": "LinkUp", "rate": "400 Gb/sec (4X NDR)", "speed_gbps": 400,
        "link_layer": "infiniband", "mtu": 4092, "operstate": "up", "carrier": 1, "net_speed_mbps": 400000,
        "port": 1, "netdev": "ibp24s0", "bdf": "0000:18:00.0"}
    assert nic["mlx5_3"]["net_speed_mbps"] is None and nic["mlx5_3"]["speed_gbps"] is None
    assert nic["mlx5_4"]["state"] == "ACTIVE" and nic["mlx5_4"]["mtu"] is None, "the lab tree's IPoIB has no MTU"
    assert [g["name"] for g in facts["gpus"]] == [f"GPU{i}" for i in range(8)]
    assert all(g["device"] == "0x2330" and g["driver"] == "nvidia" for g in facts["gpus"])
    assert facts["numa_nodes"][1]["memory_kb"] == 1056561788 and facts["numa_nodes"][0]["memory_kb"] is None
    assert facts["numa_nodes"][0]["hugepages"]["2048kB"] == {"nr_hugepages": 0, "free_hugepages": 0,
                                                             "surplus_hugepages": 0}
    assert facts["hugepages"]["1048576kB"]["nr_overcommit_hugepages"] == 0
    assert facts["nvme"] == [{"name": "nvme0n1", "size_bytes": 7501476528 * 512,
                              "model": "SAMSUNG MZQL23T8HCLS-00A07", "numa": 1, "bdf": "0000:d4:00.0"}]
    assert facts["cpus"] == {"count": 2, "model": "Intel(R) Xeon(R) Platinum 8480C", "online": "0-223"}
    assert facts["memory_kb"] == 2048 * 2**20
    assert facts["kernel"] == {"release": "5.15.0-91-generic", "cmdline": "BOOT_IMAGE=/vmlinuz ro iommu=pt"}
    assert facts["dev"] == {"nvidia": ["nvidia0"], "infiniband": ["uverbs0"]}
    tree = {n["id"]: n for n in facts["pci"]["tree"]}
    assert tree["GPU0"]["kind"] == "endpoint" and tree["mlx5_0"]["parent"] in facts["pci"]["functions"]
    assert facts["pci"]["functions"]["0000:18:00.0"]["driver"] == "mlx5_core"


def test_host_facts_of_the_lab_tree_leave_unknown_what_it_does_not_write(trees):
    facts = _hw_facts(trees["dgx-h100"])
    assert all(n["mtu"] is None for n in facts["nics"]), "an IPoIB MTU is the fabric's"
    unknown = {n["name"] for n in facts["nics"] if n["link_layer"] is None}
    assert unknown == {n["name"] for n in facts["nics"] if n["rate"] is None} == {"mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"}
    assert all(d["model"] is None and d["numa"] is None and d["bdf"] is None for d in facts["nvme"])
    assert facts["cpus"] == {"count": 224, "model": "Intel Xeon Platinum 8480C", "online": "0-223"}
    assert facts["kernel"] == {"release": None, "cmdline": ""} and facts["dev"] is None


def test_host_facts_of_an_empty_tree_are_unknowns_not_errors(tmp_path):
    facts = _hw_facts(tmp_path)
    assert {k: v for k, v in facts.items() if k not in ("version", "notes", "cpus", "kernel")} == {
        "pci": None, "gpus": None, "nics": None, "numa_nodes": None, "memory_kb": None,
        "hugepages": None, "nvme": None, "dev": None, "nvidia_driver": None}
    assert facts["cpus"] == {"count": None, "model": None, "online": None}
    assert "not a sysfs tree" in facts["notes"][0]


def test_host_facts_leave_out_virtual_functions(trees, tmp_path):
    import shutil

    root = tmp_path / "h100"
    shutil.copytree(trees["dgx-h100"], root, symlinks=True)
    before = _hw_facts(root)
    pf = Path(os.path.realpath(root / "sys/bus/pci/devices/0000:18:00.0"))
    vf = pf.parent / "0000:18:00.2"
    (vf / "infiniband/mlx5_12").mkdir(parents=True)
    (vf / "class").write_text("0x020700\n")
    (vf / "physfn").symlink_to("../0000:18:00.0")
    (root / "sys/bus/pci/devices/0000:18:00.2").symlink_to(os.path.relpath(vf, root / "sys/bus/pci/devices"))
    assert _hw_facts(root) == before


def test_host_facts_of_this_machine_are_json_whatever_it_has():
    facts = sysfs_discovery.host_facts()
    assert json.loads(json.dumps(facts)) == facts


def test_the_host_program_runs_standalone_and_prints_host_facts(trees, tmp_path):
    """`python3 -I -S -` with the program on stdin: no railyard, no site-packages, no current
    directory on the path; what it prints is host_facts() of the same roots."""
    import subprocess

    from railyard.model import bundle

    root = trees["dgx-h100"]
    isolated = [sys.executable, "-I", "-S"]
    bare = subprocess.run(isolated + ["-c", "import railyard"], cwd=tmp_path, env={}, capture_output=True)
    assert bare.returncode != 0, "railyard must not be importable where the program is tested"
    program = bundle.host_facts_program(str(root / "sys"), str(root / "proc"), str(root / "dev"))
    run = subprocess.run(isolated + ["-"], input=program, cwd=tmp_path, env={},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == _hw_facts(root)
    assert list(tmp_path.iterdir()) == [], "the program writes nothing"


def test_the_host_program_of_an_ethernet_host_carries_its_lldp_neighbours(trees, tmp_path):
    """With lldp on, the same program asks the host's lldpctl (here one printing a real lldpd
    1.0.16 output) and adds what it heard, and the system name its lldpd sends (lldpcli's
    chassis); a host without lldpctl says so."""
    import subprocess

    from railyard.model import bundle
    from railyard.model.catalog import FIXTURES_DIR

    root = trees["dgx-h100"]
    program = bundle.host_facts_program(str(root / "sys"), str(root / "proc"), str(root / "dev"), lldp=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lldpctl").write_text(f"#!/bin/sh\nexec /bin/cat {FIXTURES_DIR / 'lldp/lldpctl-json-host-two-leaves.json'}\n")
    (bin_dir / "lldpctl").chmod(0o755)
    (bin_dir / "lldpcli").write_text("#!/bin/sh\n[ \"$*\" = '-f json show chassis' ] || exit 2\n"
                                     f"exec /bin/cat {FIXTURES_DIR / 'lldp/lldpcli-json-show-chassis-host.json'}\n")
    (bin_dir / "lldpcli").chmod(0o755)
    heard, missing = (subprocess.run([sys.executable, "-I", "-S", "-"], input=program, env=env, capture_output=True,
                                     text=True, timeout=60, cwd=tmp_path) for env in ({"PATH": str(bin_dir)}, {"PATH": "/nonexistent"}))
    facts = json.loads(heard.stdout.splitlines()[-1])
    assert {k: v for k, v in facts.items() if k != "lldp"} == _hw_facts(root)
    assert [n["system"] for n in facts["lldp"]["neighbours"]["ibp64s0"]] == ["su0-leaf1"]
    assert facts["lldp"]["system"] == "gpu-0"
    assert json.loads(missing.stdout.splitlines()[-1])["lldp"] == {"not_read": "lldpctl missing: lldpd is not installed"}


@pytest.mark.parametrize("module", ["sysfs_discovery", "pcie", "lldp"])
def test_the_host_program_is_python_3_7_and_stdlib_only(module):
    path = Path(__file__).resolve().parents[3] / "railyard/model" / f"{module}.py"
    tree = ast.parse(path.read_text(), feature_version=(3, 7))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            assert top in sys.stdlib_module_names or node.module in ("railyard.model", "ansible.module_utils"), \
                f"{module}.py imports {node.module}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                assert a.name.split(".")[0] in sys.stdlib_module_names, f"{module}.py imports {a.name}"
