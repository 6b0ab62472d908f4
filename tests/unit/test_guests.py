"""What the virtual layout renders per VM (railyard.guests): the libvirt domain, checked by libvirt's
own schemas (virt-xml-validate) and defined on virsh's daemonless test driver, and the NCCL
topology file, read back by Railyard's topology reader and set beside Azure's published ND H100 v5
file (railyard/data/fixtures/topologies/azure_ndv5_h100_topo.xml)."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter

import pytest

from railyard import guests
from railyard.model.topology import parse_topology_file, parse_topology_text
from railyard.paths import PROJECT_ROOT

from .model.test_guest_topology import BASE, dgx, plan_of

AZURE = PROJECT_ROOT / "railyard/data/fixtures/topologies/azure_ndv5_h100_topo.xml"


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: run scripts/host-deps.sh (libvirt-clients, libxml2-utils)")
    return path


def rendered(plan, pool: str = "gpu") -> tuple[str, object, object]:
    (guest,) = plan.guests(pool)
    sku = plan.catalog.nodes[plan.spec.pool(pool).sku]
    vm = plan.node(pool, 0).vms[0]
    return guests.domain_xml(vm.name, "gpu-0", guest, guests.host_addresses(sku, guest)), guest, sku


def vela():
    return plan_of({"sku": "vela-a100", "vmsPerHost": 1, "vm": {"gpus": 8, "vfs": 2, "vcpus": 80, "memoryGiB": 1200}},
                   **{"railyard:fabric": {**BASE["railyard:fabric"], "compute": {
                       "kind": "roce", "speed": "100gbe", "switch": "sn5600", "cidr": "198.19.0.0/16"}}})


@pytest.mark.parametrize("plan", [lambda: dgx(vcpus=200, memoryGiB=1600), vela], ids=["dgx-h100", "vela-a100"])
def test_every_domain_is_valid_to_libvirt_and_defines_without_a_daemon(plan, tmp_path):
    xml, guest, _ = rendered(plan())
    f = tmp_path / "domain.xml"
    f.write_text(xml)
    check = subprocess.run([tool("virt-xml-validate"), str(f), "domain"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    name = ET.fromstring(xml).findtext("name")
    # One virsh session: define, then read back what libvirt kept.
    out = subprocess.run([tool("virsh"), "-c", "test:///default", f"define {f} ; dumpxml {name}"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    kept = ET.fromstring(out.stdout[out.stdout.index("<domain"):])
    # libvirt kept every device at its planned port, and every expander on its planned cell.
    ports = sorted(int(a.get("bus"), 16) for a in kept.findall("devices/hostdev/address"))
    assert ports == sorted(d.port for d in guest.devices)
    cells = [int(c.findtext("target/node")) for c in kept.findall("devices/controller[@model='pcie-expander-bus']")]
    assert cells == [c.cell for c in guest.controllers if c.model == "pcie-expander-bus"]
    assert [c.get("cpus") for c in kept.findall("cpu/numa/cell")] == \
        [guests.cpuset(c.vcpus) for c in guest.cells]
    pins = kept.findall("cputune/vcpupin")
    assert len(pins) == (guest.vcpus if guest.emulator_cpus is not None else 0)


def test_the_dgx_domain_pins_each_vcpu_and_backs_each_cell_with_its_nodes_hugepages():
    xml, guest, _ = rendered(dgx(vcpus=200, memoryGiB=1600))
    dom = ET.fromstring(xml)
    pins = {int(p.get("vcpu")): int(p.get("cpuset")) for p in dom.findall("cputune/vcpupin")}
    assert pins == {v: c for cell in guest.cells for v, c in zip(cell.vcpus, cell.pins)}
    assert dom.find("cputune/emulatorpin").get("cpuset") == guests.cpuset(guest.emulator_cpus)
    assert [(m.get("cellid"), m.get("nodeset")) for m in dom.findall("numatune/memnode")] == [("0", "0"), ("1", "1")]
    assert [p.get("nodeset") for p in dom.findall("memoryBacking/hugepages/page")] == ["0", "1"]
    topo = dom.find("cpu/topology")
    assert (topo.get("sockets"), topo.get("cores"), topo.get("threads")) == ("2", "50", "2")


def test_a_vf_is_its_pfs_next_function_and_a_gpu_is_where_the_lab_shows_it():
    plan = dgx(vcpus=200, memoryGiB=1600)
    (guest,) = plan.guests("gpu")
    sku = plan.catalog.nodes["dgx-h100"]
    addrs = guests.host_addresses(sku, guest)
    # mlx5_0 is 0000:18:00.0 in the catalog: a single-port adapter's VFs start at function 1.
    assert addrs[guest.device("GPU0").pair] == "0000:18:00.1"
    assert len(set(addrs.values())) == 16


def test_the_guests_nccl_topology_keeps_the_hosts_gpu_nic_distance():
    plan = dgx(vcpus=200, memoryGiB=1600)
    (guest,) = plan.guests("gpu")
    sku = plan.catalog.nodes["dgx-h100"]
    topo = parse_topology_text(guests.nccl_topology_xml(sku, guest), "guest")
    by_address = {d.address: d for d in guest.devices}
    pairs = topo.pairing()
    assert len(pairs) == 8
    for gpu_addr, nic_addr in pairs.items():
        gpu, vf = by_address[gpu_addr], by_address[nic_addr]
        assert gpu.pair == vf.name
        # PXB in the guest, as between a dgx-h100 GPU and its NIC on the host
        assert topo.distance(gpu_addr, nic_addr) == sku.distance(gpu.name, vf.host) == "PXB"


def test_the_dgx_guest_has_the_shape_of_azures_nd_h100_v5_file():
    plan = dgx(vcpus=200, memoryGiB=1600)
    (guest,) = plan.guests("gpu")
    ours = ET.fromstring(guests.nccl_topology_xml(plan.catalog.nodes["dgx-h100"], guest))
    azure = ET.parse(AZURE).getroot()

    def shape(root):
        """Per NUMA node, each top bridge's (GPUs, NICs) anywhere below it."""
        out = {}
        for cpu in root.findall("cpu"):
            out[cpu.get("numaid")] = Counter(
                (len(b.findall(".//pci[@class='0x030200']")), len(b.findall(".//pci[@class='0x020700']")))
                for b in cpu.findall("pci"))
        return out

    assert shape(ours) == shape(azure) == {"0": Counter({(1, 1): 4}), "1": Counter({(1, 1): 4})}
    # Every link as Azure's: PCIe Gen5 x16 (the catalog's, from an HGX H100 NCCL dump), so NCCL does
    # not read the guest's emulated ports instead.
    links = {(p.get("link_speed"), p.get("link_width")) for p in ours.iter("pci")}
    assert links == {(p.get("link_speed"), p.get("link_width")) for p in azure.iter("pci")} == {("32.0 GT/s PCIe", "16")}
    # The same NUMA split of the GPUs: four on each node.
    theirs = parse_topology_file(AZURE)
    assert Counter(g.numa for g in theirs.gpus) == Counter(d.cell for d in guest.devices if d.kind == "gpu")


def test_a_class_the_catalog_does_not_know_is_left_for_nccl_to_read():
    plan = vela()
    (guest,) = plan.guests("gpu")
    root = ET.fromstring(guests.nccl_topology_xml(plan.catalog.nodes["vela-a100"], guest))
    # NUMA-level: every device right under its cell, no bridge; vela-a100's GPU class is unknown.
    for cpu in root.findall("cpu"):
        assert all(len(p) == 0 for p in cpu.findall("pci"))
    gpu_addrs = {d.address for d in guest.devices if d.kind == "gpu"}
    assert all(p.get("class") is None for p in root.iter("pci") if p.get("busid") in gpu_addrs)


def test_the_hosts_and_the_guests_nccl_topology_files_have_one_form():
    """The role writes the host's file from sysfs and Railyard a guest's from its plan, through one
    template: the same elements render to the same bytes under Ansible's settings and Railyard's."""
    import jinja2

    from railyard import paths, templates

    host = [{"numaid": 0, "affinity": "0000ffff", "children": [
        {"busid": "0000:15:00.0", "klass": "0x060400", "vendor": "0x10b5", "device": "0xc010", "children": [
            {"busid": "0000:18:00.0", "klass": "0x030200", "vendor": "0x10de", "device": "0x2330",
             "gpu": {"dev": 0}, "children": []},
            {"busid": "0000:19:00.0", "klass": "0x020700", "vendor": "0x15b3", "device": "0x1021",
             "net": {"name": "mlx5_0", "port": 1}, "children": []}]}]}]
    role = paths.PROJECT_ROOT / "playbooks/roles/gpu_nic_affinity/templates"
    ansible_like = jinja2.Environment(loader=jinja2.FileSystemLoader(str(role)), trim_blocks=True,
                                      undefined=jinja2.StrictUndefined)
    header, written = ansible_like.get_template("nccl-topo.xml.j2").render(
        __gpu_nic_affinity={"nccl_cpus": host}).split("\n", 1)
    assert header.startswith("<!-- Managed by Railyard (role gpu_nic_affinity)")
    assert written == templates.render(templates.ROLE_NCCL_TOPOLOGY, cpus=host).rstrip("\n")
    root = ET.fromstring(written)
    assert [(p.get("busid"), p.get("class")) for p in root.iter("pci")] == [
        ("0000:15:00.0", "0x060400"), ("0000:18:00.0", "0x030200"), ("0000:19:00.0", "0x020700")]
    assert root.find(".//gpu").get("dev") == "0" and root.find(".//net").get("name") == "mlx5_0"
