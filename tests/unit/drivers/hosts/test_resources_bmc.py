"""HostMachine's power state, read from the host's BMC, with discovery and Redfish stood in (the
real thing: tests/lab/test_hosts_redfish.py)."""

from __future__ import annotations

import pytest

from railyard.drivers.hosts import redfish, resources

from .test_resources import PROPS

BMC = {"endpoint": "https://192.0.2.50", "username": "admin", "verify": True, "system_id": None}


@pytest.fixture
def bmc(monkeypatch):
    """The BMC every host has: its power state, or the error it answers with."""
    seen = {"state": "On", "error": None, "targets": []}

    class Client:
        def __init__(self, target):
            seen["targets"].append(target)

        def power_state(self):
            if seen["error"]:
                raise redfish.RedfishError(seen["error"])
            return seen["state"]

    monkeypatch.setattr(redfish, "Client", Client)
    monkeypatch.setattr(resources, "discover", lambda props: {"host_key": "k", "facts": {"gpus": [], "nics": []}})
    monkeypatch.setattr(resources, "discover_and_check", lambda props: resources.discover(props))
    return seen


def test_the_power_state_is_an_output_of_a_host_with_a_bmc(bmc):
    provider = resources.HostMachineProvider()
    outs = provider.create({**PROPS, "bmc": BMC, "bmc_password": "s3cret"}).outs
    assert outs["power_state"] == "On"
    target = bmc["targets"][-1]
    assert (target.host, target.endpoint, target.username, target.password) == \
        ("gpu-0", "https://192.0.2.50", "admin", "s3cret")
    assert provider.create(dict(PROPS)).outs.get("power_state") is None and len(bmc["targets"]) == 1


def test_a_bmc_that_cannot_be_read_fails_the_host_before_a_reboot_needs_it(bmc):
    bmc["error"] = "gpu-0: its BMC https://192.0.2.50: GET /redfish/v1/Systems: HTTP 401 Unauthorized"
    with pytest.raises(redfish.RedfishError, match="gpu-0: its BMC https://192.0.2.50: .* 401"):
        resources.HostMachineProvider().create({**PROPS, "bmc": BMC, "bmc_password": "wrong"})


def test_refresh_records_the_power_state_and_keeps_the_last_when_the_bmc_is_down(bmc):
    provider = resources.HostMachineProvider()
    olds = {**PROPS, "bmc": BMC, "bmc_password": "s3cret", "power_state": "On"}
    bmc["state"] = "Off"
    assert provider.read("id", olds).outs["power_state"] == "Off"
    bmc["error"] = "gpu-0: its BMC https://192.0.2.50: GET /redfish/v1/Systems: no answer within 10 s"
    assert provider.read("id", olds).outs["power_state"] == "On"


@pytest.mark.parametrize("change", [{"bmc": {**BMC, "endpoint": "https://192.0.2.51"}}, {"bmc_password": "new"},
                                    {"bmc": None, "bmc_password": None}])
def test_a_changed_bmc_is_read_again(change):
    olds = {**PROPS, "bmc": BMC, "bmc_password": "s3cret"}
    diff = resources.HostMachineProvider().diff("id", olds, {**olds, **change})
    assert diff.changes and not diff.replaces


def test_a_host_without_a_bmc_is_unchanged_by_the_new_inputs():
    # State written before BMCs existed has neither key; the program now sends both as None.
    assert not resources.HostMachineProvider().diff("id", PROPS, {**PROPS, "bmc": None, "bmc_password": None}).changes
