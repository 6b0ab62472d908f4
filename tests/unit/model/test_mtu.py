"""Each network's MTU: defaults from the fixture table (every row citing its source), the range a
stack may set, and the plan carrying them to the drivers."""

from __future__ import annotations

import csv
from importlib import resources

import pytest
import yaml

from railyard.model import mtu
from railyard.model.errors import SpecError
from railyard.stack import from_config

LAB = "stacks/Pulumi.lab.yaml"


def load_text(text: str, stack: str):
    return from_config(yaml.safe_load(text)["config"], stack)


def test_every_row_of_the_table_cites_a_source_and_quotes_it():
    text = (resources.files("railyard") / "data" / "fixtures" / "tables" / mtu.TABLE).read_text()
    rows = list(csv.DictReader(text.splitlines()))
    assert rows and all(r["source"].startswith("http") and r["quote"] for r in rows)


def test_defaults_per_network_and_fabric_kind():
    assert mtu.network_range("compute", "infiniband")[:3] == (4092, 1280, 4092)
    assert mtu.network_range("compute", "roce")[:3] == (9000, 1280, 9216)
    assert mtu.network_range("storage").default == 9000 and mtu.network_range("management").default == 1500
    # The IPoIB MTU is the link MTU less IPoIB's header; OpenSM names 4096 by code 5.
    assert mtu.ib_link_mtu() - mtu.ipoib_header() == 4092 and mtu.IB_MTU_CODES[mtu.ib_link_mtu()] == 5


def test_the_plan_carries_each_networks_mtu():
    _, plan = load_text(open(LAB).read(), "lab")
    nets = plan.networks
    assert (nets.compute.mtu, nets.storage.mtu, nets.management.mtu) == (4092, 9000, 1500)
    assert plan.summary()["networks"]["compute"]["mtu"] == 4092


def test_a_stack_may_lower_an_mtu_and_the_plan_follows():
    text = open(LAB).read().replace("cidr: 198.18.32.0/20", "cidr: 198.18.32.0/20\n      mtu: 1500")
    _, plan = load_text(text, "lab")
    assert plan.networks.storage.mtu == 1500


def test_an_mtu_above_what_the_network_carries_is_refused_with_why():
    text = open(LAB).read().replace("oversubscription: 1", "oversubscription: 1\n      mtu: 4096")
    with pytest.raises(SpecError) as exc:
        load_text(text, "lab")
    (problem,) = [p for p in exc.value.problems if p.path == "railyard:fabric.compute.mtu"]
    assert problem.allowed == "an integer >= 1280 and <= 4092"
    assert "4096-byte InfiniBand MTU less its 4-byte header" in problem.hint
