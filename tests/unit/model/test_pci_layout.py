"""A catalog SKU laid out on PCI buses: known addresses kept, GPU and NIC order kept, netdev names derived."""

from __future__ import annotations

import re

import pytest

from railyard.model import pci_layout
from railyard.model.catalog import load_catalog

CATALOG = load_catalog()
SKUS = sorted(CATALOG.nodes)


@pytest.mark.parametrize("sku", SKUS)
def test_known_pci_addresses_are_kept_exactly(sku):
    s = CATALOG.nodes[sku]
    lay = pci_layout.layout(s)
    known = {g.name: g.pci_bus_id for g in s.gpus if g.pci_bus_id}
    known |= {n.rdma: n.pci_bus_id for n in s.nics if n.pci_bus_id}
    known |= {b.id: b.pci_bus_id for b in s.pcie if b.pci_bus_id}
    for dev, bdf in known.items():
        assert lay.bus_ids[dev] == bdf, f"{sku}: {dev} is at {lay.bus_ids[dev]}, the catalog says {bdf}"


@pytest.mark.parametrize("sku", SKUS)
def test_gpus_and_nics_are_in_bus_order_as_nvidia_smi_and_mlx5_number_them(sku):
    s = CATALOG.nodes[sku]
    lay = pci_layout.layout(s)
    gpus = [lay.bus_ids[g.name] for g in sorted(s.gpus, key=lambda g: g.index) if g.name in lay.bus_ids]
    assert gpus == sorted(gpus), f"{sku}: GPU addresses out of index order: {gpus}"
    # mlx5_N by N; a bonded device (mlx5_bond_0, the kernel's LAG name) after them.
    nics = [lay.bus_ids[n.rdma] for n in sorted(s.nics, key=lambda n: (not n.rdma.split("_")[1].isdigit(),
                                                                      int(re.sub(r"\D", "", n.rdma) or 0)))
            if n.rdma in lay.bus_ids]
    assert nics == sorted(nics), f"{sku}: NIC addresses out of mlx5 order: {nics}"


@pytest.mark.parametrize("sku", SKUS)
def test_every_address_is_unique_and_below_its_parent_bridge(sku):
    lay = pci_layout.layout(CATALOG.nodes[sku])
    bdfs = [f.bdf for f in lay.functions]
    assert len(bdfs) == len(set(bdfs)), f"{sku}: repeated addresses"
    for f in lay.functions:
        if len(f.path) > 2:
            parent_bus = int(f.path[-2].split(":")[1], 16)
            assert int(f.bdf.split(":")[1], 16) > parent_bus, f"{sku}: {f.id} {f.bdf} not below {f.path[-2]}"


def test_netdev_names_follow_the_predictable_scheme_when_the_catalog_has_none():
    vela = CATALOG.nodes["vela-a100"]
    lay = pci_layout.layout(vela)
    name = pci_layout.netdev_name(vela, "mlx5_0")
    bus = int(lay.bus_ids["mlx5_0"].split(":")[1], 16)
    assert name == f"enp{bus}s0np0"
    assert pci_layout.netdev_name(CATALOG.nodes["dgx-h100"], "mlx5_0") == "ibp24s0"
    assert pci_layout.netdev_name(CATALOG.nodes["dgx-h100"], "mlx5_1") is None, "link mode unknown: no name"
