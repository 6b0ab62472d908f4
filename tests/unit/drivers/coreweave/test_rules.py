"""`railyard:coreweave` validation: bad input is refused before anything is created, each problem
naming its key; the provider plugin's absence stops `up` before the engine starts."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from railyard import drivers
from railyard.engine import plugins
from railyard.model.errors import SpecError
from railyard.stack import parse_config

ROOT = Path(__file__).resolve().parents[4]
STACK_FILE = ROOT / "stacks" / "Pulumi.us-east-bm.yaml"


def region_config() -> dict:
    return copy.deepcopy(yaml.safe_load(STACK_FILE.read_text())["config"])


def problems(config: dict) -> dict[str, str]:
    with pytest.raises(SpecError) as exc:
        parse_config(config, "us-east-bm")
    return {p.path: str(p) for p in exc.value.problems}


def test_the_region_stack_validates_with_the_catalogs_instance_type():
    spec = parse_config(region_config(), "us-east-bm")
    assert spec.driver_config.pool("h100").instance_type == "gd-8xh100ib-i128"
    assert spec.driver_config.cluster.pod_cidr.name == "pod-cidr"


def test_an_sku_without_an_instance_type_mapping_is_refused_naming_the_pool():
    config = region_config()
    config["railyard:nodePools"][0]["sku"] = "hgx-h100"
    found = problems(config)
    assert "railyard:nodePools[0].sku" in found
    assert "an SKU with a CoreWeave instance type: dgx-h100" in found["railyard:nodePools[0].sku"]


def test_every_mapping_cites_a_source():
    from railyard.drivers.coreweave import catalog

    for entry in catalog.instance_types().values():
        assert entry.sources and all(s.startswith("https://") for s in entry.sources), entry


def test_cluster_ranges_overlapping_the_plans_networks_or_each_other_are_refused():
    config = region_config()
    cluster = config["railyard:coreweave"]["cluster"]
    cluster["podCidr"]["cidr"] = "10.16.0.0/20"  # inside the management network
    cluster["internalLbCidrs"][0]["cidr"] = "10.8.128.0/24"  # inside the service range
    found = problems(config)
    assert "railyard:fabric.management.cidr" in found["railyard:coreweave.cluster.podCidr.cidr"]
    assert "railyard:coreweave.cluster.serviceCidr" in found["railyard:coreweave.cluster.internalLbCidrs[0].cidr"]


def test_a_prefix_name_used_twice_is_refused():
    config = region_config()
    config["railyard:coreweave"]["cluster"]["serviceCidr"]["name"] = "pod-cidr"
    assert "railyard:coreweave.cluster.serviceCidr.name" in problems(config)


def test_missing_section_zone_version_and_ranges_are_each_named():
    config = region_config()
    del config["railyard:coreweave"]
    assert "railyard:coreweave" in problems(config)
    config = region_config()
    cw = config["railyard:coreweave"]
    del cw["zone"], cw["cluster"]["version"], cw["cluster"]["serviceCidr"]
    found = problems(config)
    assert {"railyard:coreweave.zone", "railyard:coreweave.cluster.version",
            "railyard:coreweave.cluster.serviceCidr"} <= set(found)


def test_autoscaling_bounds_must_hold_the_pools_count_and_need_autoscaling():
    config = region_config()
    config["railyard:coreweave"]["pools"]["h100"].update(autoscaling=True, minNodes=100, maxNodes=200)
    assert "railyard:coreweave.pools.h100.minNodes" in problems(config)
    config = region_config()
    config["railyard:coreweave"]["pools"]["h100"]["maxNodes"] = 500
    assert "absent while railyard:coreweave.pools.h100.autoscaling is false" in \
        problems(config)["railyard:coreweave.pools.h100.maxNodes"]


def test_bad_labels_taints_and_unknown_pools_are_named():
    config = region_config()
    pools = config["railyard:coreweave"]["pools"]
    pools["h100"]["labels"] = {"railyard.io/pool": "x", "bad key!": "v", "ok": "has space"}
    pools["h100"]["taints"] = [{"key": "gpu", "effect": "NoScheduel"}]
    pools["h200"] = {}
    found = problems(config)
    assert "labelPrefix" in found["railyard:coreweave.pools.h100.labels.railyard.io/pool"]
    assert "railyard:coreweave.pools.h100.labels.bad key!" in found
    assert "railyard:coreweave.pools.h100.labels.ok" in found
    assert "NoSchedule" in found["railyard:coreweave.pools.h100.taints[0].effect"]
    assert "railyard:coreweave.pools.h200" in found


def test_a_plain_text_token_is_refused_unshown():
    config = region_config()
    config["railyard:coreweave"]["apiToken"] = "CW-SECRET-plaintext"
    found = problems(config)
    assert "CW-SECRET-plaintext" not in json.dumps(found)
    assert "a Pulumi secret" in found["railyard:coreweave.apiToken"]


def test_kueue_needs_repository_and_version_when_the_stack_has_a_kubernetes_layer():
    config = region_config()
    del config["railyard:coreweave"]["kueue"]
    assert "railyard:coreweave.kueue" in problems(config)
    config = region_config()
    config["railyard:coreweave"]["kueue"]["repository"] = "http://charts.example"
    assert "railyard:coreweave.kueue.repository" in problems(config)


def test_a_virtual_layout_on_coreweave_is_refused():
    config = region_config()
    config["railyard:layout"] = "virtual"
    assert "railyard:layout" in problems(config)


def test_the_existing_overlapping_cidr_check_fires_on_a_coreweave_stack():
    config = region_config()
    config["railyard:fabric"]["storage"]["cidr"] = "10.16.0.0/16"  # the management network's
    assert any(path.startswith("railyard:fabric.") for path in problems(config))


def test_a_missing_plugin_stops_before_the_engine_naming_it_and_the_install_command(tmp_path):
    why = plugins.missing_message("coreweave", ("pulumi_coreweave", "pulumi_kubernetes"), root=tmp_path)
    assert "coreweave v1.0.3" in why and "kubernetes v4.25.0" in why
    assert "pulumi plugin install resource coreweave v1.0.3" in why
    assert "was not run here" in why and "Nothing was changed" in why
    # Once the plugins are where the engine looks, nothing is said.
    for p in plugins.missing(("pulumi_coreweave", "pulumi_kubernetes"), root=tmp_path):
        d = tmp_path / ".railyard" / "pulumi-home" / "plugins" / p.directory
        d.mkdir(parents=True)
        (d / f"pulumi-resource-{p.name}").write_text("")
    assert plugins.missing_message("coreweave", ("pulumi_coreweave", "pulumi_kubernetes"), root=tmp_path) is None


def test_the_plugin_is_read_from_the_sdk_it_is_pinned_with():
    p = plugins.declared("pulumi_coreweave")
    assert (p.name, p.version, p.server) == ("coreweave", "1.0.3", None)
    assert p.install_command() == "pulumi plugin install resource coreweave v1.0.3"


def test_preflight_names_the_plugin_first_and_the_token_once_plugins_are_there(monkeypatch):
    spec = parse_config(region_config(), "us-east-bm")
    assert "coreweave v1.0.3" in drivers.preflight(spec)
    monkeypatch.setattr(drivers, "missing_plugins", lambda driver: None)
    monkeypatch.delenv("COREWEAVE_API_TOKEN", raising=False)
    assert "no CoreWeave API token" in drivers.preflight(spec)
    monkeypatch.setenv("COREWEAVE_API_TOKEN", "CW-SECRET-x")
    assert drivers.preflight(spec) is None


def test_the_cks_version_is_written_as_cks_writes_it_and_names_are_kept_short():
    config = region_config()
    config["railyard:coreweave"]["cluster"]["version"] = "1.33"
    assert parse_config(config, "us-east-bm").driver_config.cluster.version == "v1.33"
    config["railyard:coreweave"]["cluster"]["version"] = "v1.3x"
    assert "railyard:coreweave.cluster.version" in problems(config)
    config = region_config()
    config["railyard:coreweave"]["vpcName"] = "a-vpc-name-that-is-longer-than-thirty"
    assert "at most 30" in problems(config)["railyard:coreweave.vpcName"]


def test_a_missing_sdk_is_said_in_place_of_a_plugin(monkeypatch):
    monkeypatch.setitem(drivers.DRIVERS, "coreweave", __import__("dataclasses").replace(
        drivers.DRIVERS["coreweave"], plugins=("pulumi_no_such_sdk",)))
    assert "pulumi_no_such_sdk is not installed" in drivers.missing_plugins("coreweave")
