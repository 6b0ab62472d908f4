"""A VM's hardware as a catalog entry (railyard.model.guest_sku): laid out on the buses where the
guest topology puts each device and controller, pairing each GPU with the VF of its host-side pair,
and, presented as a hardware tree, discovered the same way a host's is."""

from __future__ import annotations

import re

import pytest

from railyard.drivers.lab import hwtree
from railyard.model.catalog import FIXTURES_DIR
from railyard.model.guest_sku import controller_id, guest_names, guest_sku
from railyard.model.guest_topology import EXPANDER, ROOT_PORT, UPSTREAM
from railyard.model.pci_layout import layout
from railyard.model.errors import SpecError
from railyard.model.topology import Topology, parse_topology_file
from railyard.tuning.vars import guest_vars

from ..test_guests import vela
from .test_guest_topology import dgx, plan_of


def _guest(plan):
    pool = plan.spec.node_pools[0]
    (topo,) = plan.guests(pool.name)
    host = plan.catalog.nodes[pool.sku]
    vm = plan.node(pool.name, 0).vms[0]
    return host, topo, vm


PLANS = {"dgx-h100": lambda: dgx(vcpus=200, memoryGiB=1600), "vela-a100": vela}


@pytest.mark.parametrize("which", PLANS)
def test_every_device_and_bridge_sits_where_the_guest_topology_puts_it(which):
    host, topo, vm = _guest(PLANS[which]())
    sku = guest_sku(host, topo.to_json(), vm.name)
    names = guest_names(host, topo.to_json(), vm.name)
    bus_ids = layout(sku).bus_ids
    assert {names[d.name]: bus_ids[names[d.name]] for d in topo.devices} == \
        {names[d.name]: d.address for d in topo.devices}
    by_index = {c.index: c for c in topo.controllers}
    for c in topo.controllers:
        bridge = next((b for b in sku.pcie if b.id == controller_id(c.model, c.index)), None)
        if c.model == EXPANDER:
            assert bridge.kind == "host_bridge" and bridge.numa == c.cell
        elif c.model in (ROOT_PORT, UPSTREAM):
            # On its parent's bus, at its slot: the firmware's numbering, which the layout reproduces.
            assert bus_ids[bridge.id] == f"0000:{by_index[c.parent].bus:02x}:{c.slot:02x}.0"
    # The guest numbers GPUs and VFs in bus order, as the host numbers them.
    assert [g.name for g in sku.gpus] == [f"GPU{i}" for i in range(len(vm.gpus))]
    assert [g.pci_bus_id for g in sku.gpus] == sorted(g.pci_bus_id for g in sku.gpus)
    assert [n.rdma for n in sku.nics] == [f"mlx5_{i}" for i in range(len(vm.vfs))]
    # Cells: the VM's vCPUs and memory, each cell on its own.
    assert sku.threads == topo.vcpus and sku.memory_gib == topo.memory_mib // 1024
    assert [n.cpus() for n in sku.numa_nodes] == [list(c.vcpus) for c in topo.cells]


def test_the_dgx_guest_pairs_each_gpu_with_the_vf_of_its_host_side_pair():
    plan = PLANS["dgx-h100"]()
    host, topo, vm = _guest(plan)
    sku = guest_sku(host, topo.to_json(), vm.name)
    names = guest_names(host, topo.to_json(), vm.name)
    host_pairing = plan.pairing(host.id)
    vf_of_pf = {v.pf: v.name for v in vm.vfs}
    want = {names[g]: names[vf_of_pf[host_pairing[g]]] for g in vm.gpus}
    assert sku.pairing() == want
    # One GPU and one VF per virtual switch: PIX between a GPU and its VF, as NCCL wants for GPUDirect RDMA.
    assert {sku.distance(g, n) for g, n in want.items()} == {"PIX"}


# A rented cloud VM of 8 H200 and 8 ConnectX VFs (QEMU; railyard/data/fixtures/SOURCES.md): its
# `nvidia-smi topo -m`, and its `lspci -tv` with the ids of its bridges.
CLOUD_VM = FIXTURES_DIR / "topologies" / "h200_8nic_vf_vm_vastai_simllm.tsv"
CLOUD_VM_PCI = FIXTURES_DIR / "topologies" / "h200_8gpu_vm_lspci_tv_bridge_ids_vastai_simllm_excerpt.txt"
# lspci -tv: an expander's root bus, its root port's and switch's buses, then the switch's first
# downstream port and the device on it; the next line, the second downstream port and its device.
_TV_FIRST = re.compile(r"-\[0000:([0-9a-f]{2})\]---00\.0-\[([0-9a-f]{2})-[0-9a-f]{2}\]----00\.0-\[[0-9a-f-]+\]--\+-00\.0-"
                       r"\[[0-9a-f]{2}\]----00\.0  (.+)$")
_TV_NEXT = re.compile(r"^ \|\s+\\-01\.0-\[[0-9a-f]{2}\]----00\.0  (.+)$")


def test_the_planned_guest_is_laid_out_as_a_real_cloud_vm_of_eight_gpus_and_their_vfs():
    """The layout Railyard plans for an 8-GPU VM (dgx-h100 host, one VF per GPU) against a real
    cloud's VM of that shape: the GPU-to-NIC classes its nvidia-smi prints, one expander, root port
    and switch per GPU with the GPU and its VF alone below it, and the ids of QEMU's root port and
    switch upstream port."""
    host, topo, vm = _guest(PLANS["dgx-h100"]())
    sku = guest_sku(host, topo.to_json(), vm.name)
    real = parse_topology_file(CLOUD_VM)
    gpus, nics = [g.name for g in real.gpus], [n.name for n in real.nics]
    assert [g.name for g in sku.gpus] == gpus and [n.rdma for n in sku.nics] == nics
    assert {(g, n): sku.distance(g, n) for g in gpus for n in nics} == \
        {(g, n): real.distance(g, n) for g in gpus for n in nics}
    assert sku.pairing() == real.pairing()

    # Each expander's shape, from each side: its root port's and switch's ids, and what sits below the switch.
    lines = CLOUD_VM_PCI.read_text().splitlines()
    ids = {bdf: tuple(v.split("=")[1] for v in rest)
           for bdf, *rest in (line.split() for line in lines if line.startswith("0000:"))}
    kind = {"NVIDIA Corporation Device 2335": "gpu", "Mellanox Technologies ConnectX Family mlx5Gen Virtual Function": "vf"}
    real_shapes = []
    for line, after in zip(lines, lines[1:]):
        first, second = _TV_FIRST.search(line), _TV_NEXT.match(after)
        if first and second:
            real_shapes.append((ids[f"0000:{first.group(1)}:00.0"], ids[f"0000:{first.group(2)}:00.0"],
                                (kind[first.group(3)], kind[second.group(1)])))
    pairs = [[g, n] for g, n in sku.pairing().items()]
    our_shapes = []
    for expander in (b for b in sku.pcie if b.kind == "host_bridge"):
        (root,) = [b for b in sku.pcie if b.parent == expander.id]
        (switch,) = [b for b in sku.pcie if b.parent == root.id]
        below = [("gpu", g.name) for g in sku.gpus if g.parent == switch.id] + \
                [("vf", n.rdma) for n in sku.nics if n.parent == switch.id]
        assert [name for _, name in below] in pairs, "a GPU and its own VF"
        our_shapes.append(((root.pci_vendor, root.pci_device), (switch.pci_vendor, switch.pci_device),
                           tuple(k for k, _ in below)))
    assert len(real_shapes) == 8 and our_shapes == real_shapes


def test_the_vela_guest_pairs_by_numa_node_as_its_catalog_entry_allows():
    plan = PLANS["vela-a100"]()
    host, topo, vm = _guest(plan)
    sku = guest_sku(host, topo.to_json(), vm.name)
    pairing = sku.pairing()
    assert len(pairing) == len(sku.gpus)
    assert all(sku.gpu(g).numa == sku.nic(n).numa for g, n in pairing.items())


@pytest.mark.parametrize("which", PLANS)
def test_the_guest_tree_is_discovered_as_the_plan_pairs_it(which, tmp_path):
    host, topo, vm = _guest(PLANS[which]())
    sku = guest_sku(host, topo.to_json(), vm.name)
    hwtree.build_hwtree(sku, tmp_path)
    found = Topology.from_sysfs(tmp_path / "sys", compute_nics=[n.rdma for n in sku.compute_nics])
    assert found.pairing() == sku.pairing()
    # The VM's own names for its VFs are their netdevs, as the lab's VMs name the links.
    assert {n.rdma: n.netdev for n in sku.nics} == {guest_names(host, topo.to_json(), vm.name)[v.name]: v.name
                                                    for v in vm.vfs}


# --------------------------------------------------------------------------------------------------
# Guest tuning: what the guest playbook is given


def test_guest_hugepages_are_split_over_the_guests_cells_by_their_gpus():
    plan = dgx(vcpus=200, memoryGiB=1600, hugepages={"size": "1G", "count": 1000})
    vm = plan.node("gpu", 0).vms[0]
    targets = plan.guest_tuning(vm.name)
    # 4 GPUs on each cell: half each, in the guest's own cell numbers.
    assert targets.hugepages_per_numa == {0: 500, 1: 500} and targets.hugepage_size == "1G"
    vars_ = guest_vars(plan.spec, plan, vm.name)
    assert vars_["hugepages_per_node"] == {"0": 500, "1": 500}
    assert vars_["gpu_nic_affinity_compute_nics"] == [f"mlx5_{i}" for i in range(8)]
    assert vars_["verify_expected_pairing"] == {f"GPU{i}": f"mlx5_{i}" for i in range(8)}
    # The host's roles that are the hypervisor's have nothing in a guest's variables.
    assert not any(k.startswith(("sriov_", "iommu_", "cpu_isolation_", "dataset_cache_")) for k in vars_)


def test_a_vm_without_guest_hugepages_leaves_the_guests_own_alone():
    plan = dgx(vcpus=200, memoryGiB=1600)
    vm = plan.node("gpu", 0).vms[0].name
    targets = plan.guest_tuning(vm)
    assert targets.hugepages_per_numa == {} and targets.hugepages_total == 0
    # No hugepages variable at all: guest.yml skips the role rather than release the image's pages.
    assert not any(k.startswith("hugepages_") for k in guest_vars(plan.spec, plan, vm))


@pytest.mark.parametrize("hugepages, key", [({"size": "1G", "count": 1590}, "count"),
                                            ({"size": "2M", "percentOfMemory": 95}, "percentOfMemory")])
def test_guest_hugepages_larger_than_the_vm_can_hold_are_refused_naming_the_key(hugepages, key):
    with pytest.raises(SpecError) as err:
        dgx(vcpus=200, memoryGiB=1600, hugepages=hugepages)
    (problem,) = [p for p in err.value.problems if "hugepages" in p.path]
    assert problem.path == f"railyard:nodePools[0].vm.hugepages.{key}"
    assert "OS reserve" in problem.hint


def test_unknown_guest_hugepage_keys_are_refused():
    with pytest.raises(SpecError) as err:
        dgx(vcpus=200, memoryGiB=1600, hugepages={"sise": "1G"})
    assert any(p.path == "railyard:nodePools[0].vm.hugepages.sise" for p in err.value.problems)


def test_guest_hugepages_are_split_as_the_guests_memory_is_so_a_cell_of_vfs_alone_gets_its_share():
    # One GPU (cell 0) and VFs on both host nodes: the memory is split 1:1, and so are the pages.
    plan = plan_of({"sku": "dgx-h100", "vmsPerHost": 1,
                    "vm": {"gpus": 1, "vfs": 8, "vcpus": 8, "memoryGiB": 200, "hugepages": {"count": 170}}})
    vm = plan.node("gpu", 0).vms[0]
    topo, _ = plan.guest(vm.name)
    assert [c.memory_mib for c in topo.cells] == [102400, 102400]
    assert plan.guest_tuning(vm.name).hugepages_per_numa == {0: 85, 1: 85}


def test_the_guests_nccl_file_is_the_planned_one_with_the_hosts_distances():
    import xml.etree.ElementTree as ET

    plan = dgx(vcpus=200, memoryGiB=1600)
    vm = plan.node("gpu", 0).vms[0]
    topo, _ = plan.guest(vm.name)
    root = ET.fromstring(guest_vars(plan.spec, plan, vm.name)["gpu_nic_affinity_topo_xml"])
    parent = {c: p for p in root.iter("pci") for c in p.findall("pci")}
    at = {p.get("busid"): p for p in root.iter("pci")}
    for gpu in (d for d in topo.devices if d.kind == "gpu"):
        vf = topo.device(gpu.pair)
        # One top bridge each (the host's sw<i>), the GPU a bridge further down (sw<i>-gpu): PXB.
        assert parent[parent[at[gpu.address]]] is parent[at[vf.address]]
