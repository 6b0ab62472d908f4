"""The guest topology of the virtual layout's VMs (railyard.model.guest_topology), on the catalog's
dgx-h100 tree and on what vela-a100 yields, and the refusals naming the key."""

from __future__ import annotations

import copy

import pytest

from railyard.model.errors import SpecError
from railyard.model.plan import make_plan
from railyard.model.sysfs_discovery import parse_cpulist
from railyard.stack import parse_config

BASE = {
    "railyard:region": "lab",
    "railyard:layout": "virtual",
    "railyard:driver": "lab",
    "railyard:fabric": {"compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": "198.19.0.0/16"},
                        "storage": {"cidr": "198.18.48.0/20"}, "management": {"cidr": "198.18.16.0/20"}},
    "railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": 80}, "sriov": {"vfsPerPf": 4}},
}


def plan_of(pool: dict, **extra):
    cfg = copy.deepcopy(BASE)
    cfg["railyard:nodePools"] = [{"name": "gpu", "count": 2, **pool}]
    cfg.update(extra)
    return make_plan(parse_config(cfg, stack="t"))


def dgx(vms: int = 1, **vm):
    return plan_of({"sku": "dgx-h100", "vmsPerHost": vms, "vm": {"gpus": 8 // vms, "vfs": 8 // vms, **vm}})


def test_a_dgx_vm_keeps_each_gpu_and_its_hosts_nic_vf_under_one_virtual_switch():
    plan = dgx(vcpus=200, memoryGiB=1600)
    sku, (guest,) = plan.catalog.nodes["dgx-h100"], plan.guests("gpu")
    pairing = plan.pairing("dgx-h100")
    assert guest.level == "switch"
    gpus = [d for d in guest.devices if d.kind == "gpu"]
    assert len(gpus) == 8
    for g in gpus:
        vf = guest.device(g.pair)
        assert vf.host == pairing[g.name]  # the VF comes from the GPU's own NIC on the host
        assert vf.switch == g.switch is not None and vf.cell == g.cell
        # ... and nothing else shares that switch
        assert [d.name for d in guest.devices if d.switch == g.switch] == [g.name, vf.name]
    # One expander per host root complex, on the guest cell of that complex's NUMA node.
    expanders = [c for c in guest.controllers if c.model == "pcie-expander-bus"]
    assert len(expanders) == 8
    for e in expanders:
        assert guest.cells[e.cell].host_numa == sku.pcie_tree.numa(e.mirrors)
    # root port -> upstream -> one downstream port per device, and each device on its own port
    ups = [c for c in guest.controllers if c.model == "pcie-switch-upstream-port"]
    by_index = {c.index: c for c in guest.controllers}
    assert all(by_index[u.parent].model == "pcie-root-port" for u in ups)
    assert sorted(d.port for d in guest.devices) == sorted(c.index for c in guest.controllers
                                                           if c.model == "pcie-switch-downstream-port")
    assert guest.hcas_in_gpu_order == [guest.device(f"GPU{i}").pair for i in range(8)]


def test_guest_addresses_are_the_buses_firmware_numbers_below_each_expander():
    (guest,) = dgx(vcpus=200, memoryGiB=1600).guests("gpu")
    # Each expander takes 5 buses, its own, the root port's, the switch's internal bus and one per
    # downstream port, the 8 of them the top 40 in GPU order; the GPU sits on the first downstream
    # port, the VF on the next. So the guest's bus order is GPU order, as the host's.
    assert [(guest.device(f"GPU{i}").address, guest.device(f"vf{i}").address) for i in range(8)] == [
        (f"0000:{0xdb + 5 * i:02x}:00.0", f"0000:{0xdc + 5 * i:02x}:00.0") for i in range(8)]
    expanders = [c for c in guest.controllers if c.model == "pcie-expander-bus"]
    assert [e.bus for e in expanders] == [0xd8 + 5 * i for i in range(8)]
    by_index = {c.index: c for c in guest.controllers}
    # Every bus below an expander lies inside its range (up to the next higher expander's busNr).
    for c in guest.controllers:
        top = c
        while top.model != "pcie-expander-bus":
            top = by_index[top.parent]
        ceiling = min([e.bus for e in expanders if e.bus > top.bus], default=0x100)
        assert top.bus <= c.bus < ceiling, c
    # No two controllers on one slot of one bus, and each port on the bus right after its parent's.
    assert len({(c.parent, c.slot) for c in guest.controllers}) == len(guest.controllers)
    for c in guest.controllers:
        if c.model == "pcie-root-port" and c.slot == 0 or c.model == "pcie-switch-upstream-port":
            assert c.bus == by_index[c.parent].bus + 1


def test_vcpus_are_pinned_on_the_gpus_numa_nodes_off_the_hosts_housekeeping_cores():
    plan = dgx(vcpus=200, memoryGiB=1600)
    sku, (guest,) = plan.catalog.nodes["dgx-h100"], plan.guests("gpu")
    assert [(c.host_numa, len(c.vcpus)) for c in guest.cells] == [(0, 100), (1, 100)]
    node_cpus = {n.id: set(parse_cpulist(n.cpulist)) for n in sku.numa_nodes}
    pinned = [cpu for c in guest.cells for cpu in c.pins]
    assert len(pinned) == len(set(pinned)) == 200
    for cell in guest.cells:
        assert set(cell.pins) <= node_cpus[cell.host_numa]
        # two consecutive vCPUs are the two threads of one core (n and n + 112 on this SKU)
        assert all(cell.pins[i + 1] == cell.pins[i] + 112 for i in range(0, len(cell.pins), 2))
    # The emulator runs on the host's housekeeping CPUs, which no vCPU uses.
    assert guest.emulator_cpus and not set(guest.emulator_cpus) & set(pinned)
    assert set(guest.emulator_cpus) == {0, 1, 2, 3, 4, 5, 112, 113, 114, 115, 116, 117,
                                        56, 57, 58, 59, 60, 61, 168, 169, 170, 171, 172, 173}
    assert guest.hugepage_kib == 1 << 20 and all(c.memory_mib % 1024 == 0 for c in guest.cells)
    assert guest.memory_mib == 1600 * 1024


def test_the_default_vcpus_pin_evenly_and_two_vms_share_no_cpu():
    (guest,) = dgx(memoryGiB=1600).guests("gpu")
    assert guest.vcpus == 200  # 224 threads less the reserve, in whole cores on both nodes
    guests = dgx(vms=2, memoryGiB=800).guests("gpu")
    assert [[c.host_numa for c in g.cells] for g in guests] == [[0], [1]]
    assert not set(guests[0].cells[0].pins) & set(guests[1].cells[0].pins)


def sibling_cores(pins) -> set[int]:
    """The dgx-h100 cores (0-111) of host CPUs: CPU n and n + 112 are one core."""
    return {p % 112 for p in pins}


@pytest.mark.parametrize("vms", [2, 4, 8])
def test_vms_and_the_host_never_share_a_core_and_the_default_fits_every_split(vms):
    plan = plan_of({"sku": "dgx-h100", "vmsPerHost": vms, "vm": {"memoryGiB": 100, "vfs": 8 // vms}})
    guests = plan.guests("gpu")
    seen = sibling_cores(guests[0].emulator_cpus)
    for g in guests:
        mine = sibling_cores(p for c in g.cells for p in c.pins)
        assert not mine & seen and len(mine) * 2 == g.vcpus
        seen |= mine
    assert plan.spec.pool("gpu").vm.vcpus == guests[0].vcpus


def test_odd_vcpus_and_a_cell_without_memory_are_refused_naming_the_key():
    with pytest.raises(SpecError) as err:
        dgx(vcpus=199, memoryGiB=1600)
    assert [(p.path, p.allowed) for p in err.value.problems] == [("railyard:nodePools[0].vm.vcpus", "a multiple of 2")]
    with pytest.raises(SpecError) as err:
        dgx(vcpus=200, memoryGiB=1)
    assert [p.path for p in err.value.problems] == ["railyard:nodePools[0].vm.memoryGiB"]


def test_vela_has_no_switches_so_its_vms_get_a_numa_level_layout_unpinned():
    plan = plan_of({"sku": "vela-a100", "vmsPerHost": 1, "vm": {"gpus": 8, "vfs": 2, "vcpus": 80, "memoryGiB": 1200}},
                   **{"railyard:fabric": {**BASE["railyard:fabric"], "compute": {
                       "kind": "roce", "speed": "100gbe", "switch": "sn5600", "cidr": "198.19.0.0/16"}}})
    (guest,) = plan.guests("gpu")
    assert guest.level == "numa" and all(d.switch is None for d in guest.devices)
    # The catalog has no CPU lists for vela-a100: nothing is pinned, the cells keep their sizes.
    assert guest.emulator_cpus is None and [(c.pins, len(c.vcpus)) for c in guest.cells] == [(None, 40), (None, 40)]
    sku = plan.catalog.nodes["vela-a100"]
    for d in guest.devices:
        assert guest.cells[d.cell].host_numa == sku.pcie_tree.numa(d.host)
    assert guest.hcas_in_gpu_order == ["vf0", "vf1"] and guest.device("vf1").pair == "GPU4"


def test_vcpus_that_cannot_be_pinned_beside_their_gpus_are_refused_naming_the_key():
    # Two VMs of 3 GPUs: the second has GPU3 on NUMA 0, whose free cores the first VM took.
    with pytest.raises(SpecError) as err:
        plan_of({"sku": "dgx-h100", "vmsPerHost": 2, "vm": {"gpus": 3, "vfs": 3, "vcpus": 100, "memoryGiB": 600}})
    (problem,) = err.value.problems
    assert problem.path == "railyard:nodePools[0].vm.vcpus" and problem.found == "100"
    assert "host NUMA node 0" in problem.hint


def test_validate_refuses_what_cannot_be_pinned(tmp_path):
    import subprocess
    import sys

    import yaml

    cfg = copy.deepcopy(BASE)
    cfg["railyard:nodePools"] = [{"name": "gpu", "count": 2, "sku": "dgx-h100", "vmsPerHost": 2,
                                  "vm": {"gpus": 3, "vfs": 3, "vcpus": 100, "memoryGiB": 600}}]
    f = tmp_path / "Pulumi.t.yaml"
    f.write_text(yaml.safe_dump({"config": cfg}))
    out = subprocess.run([sys.executable, "-m", "railyard.cli", "validate", str(f)], capture_output=True, text=True)
    assert out.returncode == 1 and "railyard:nodePools[0].vm.vcpus" in out.stdout + out.stderr


@pytest.mark.parametrize("layout, sku, why", [
    ("bare-metal", "dgx-h100", "runs no VMs"),
    ("virtual", "vela-a100", "nothing to isolate"),
])
def test_cpu_isolation_is_refused_where_no_vcpu_is_pinned(layout, sku, why):
    cfg = copy.deepcopy(BASE)
    cfg["railyard:layout"] = layout
    cfg["railyard:nodePools"] = [{"name": "gpu", "count": 2, "sku": sku, "cpuIsolation": "kernel",
                                  **({"vmsPerHost": 1, "vm": {"vcpus": 8, "memoryGiB": 100}} if layout == "virtual" else {})}]
    if sku == "vela-a100":
        cfg["railyard:fabric"]["compute"] = {"kind": "roce", "speed": "100gbe", "switch": "sn5600", "cidr": "198.19.0.0/16"}
    with pytest.raises(SpecError) as err:
        make_plan(parse_config(cfg, stack="t"))
    (problem,) = [p for p in err.value.problems if p.path.endswith("cpuIsolation")]
    assert problem.path == "railyard:nodePools[0].cpuIsolation" and why in problem.allowed + problem.hint


def test_a_hypervisor_isolates_exactly_the_cpus_pinned_to_its_vms():
    plan = plan_of({"sku": "dgx-h100", "vmsPerHost": 2, "cpuIsolation": "kernel", "vm": {"gpus": 4, "vfs": 4,
                                                                                         "memoryGiB": 700}})
    iso = plan.tuning(plan.node("gpu", 0)).cpu_isolation
    pinned = {p for g in plan.guests("gpu") for c in g.cells for p in c.pins}
    assert set(iso.isolated) == pinned and set(iso.housekeeping) == set(range(224)) - pinned
    assert set(plan.guests("gpu")[0].emulator_cpus) <= set(iso.housekeeping)


def test_the_lab_driver_refuses_the_systemd_mode_its_nodes_have_no_service_manager_for():
    cfg = copy.deepcopy(BASE)
    cfg["railyard:nodePools"] = [{"name": "gpu", "count": 2, "sku": "dgx-h100", "vmsPerHost": 1, "cpuIsolation": "systemd",
                                  "vm": {"memoryGiB": 1600}}]
    with pytest.raises(SpecError) as err:
        parse_config(cfg, stack="t")
    assert [(p.path, p.allowed) for p in err.value.problems] == [("railyard:nodePools[0].cpuIsolation",
                                                                  "'kernel' for the lab driver")]
    cfg["railyard:nodePools"][0]["cpuIsolation"] = "kernel"
    assert parse_config(cfg, stack="t").node_pools[0].cpu_isolation == "kernel"
