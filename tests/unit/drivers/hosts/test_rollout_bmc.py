"""The rollout's one power cycle: a host with a BMC that does not come back from its reboot is
power-cycled through the BMC once and given the timeout again; SSH is stood in by the fake fleet
of test_rollout.py and the BMC by a callable (the real ones: tests/lab/test_hosts_redfish.py)."""

from __future__ import annotations

import time

import pytest

from railyard.drivers.hosts import resources
from railyard.remote import rollout
from railyard.drivers.hosts.redfish import RedfishError
from railyard.remote.ssh import SshError

from .test_rollout import OLDS, fleet, targets  # noqa: F401 (fleet: the fixture)


class Bmcs:
    """Each host's power cycle: records the call and the time it was given, and brings the host
    back unless it is `stuck`."""

    def __init__(self, f, stuck=(), broken=()):
        self.f, self.stuck, self.broken = f, set(stuck), set(broken)
        self.calls: list[tuple[str, float]] = []

    def cycle(self, name: str):
        def power_cycle(deadline: float) -> str:
            self.calls.append((name, deadline - time.monotonic()))
            if name in self.broken:
                raise RedfishError(f"{name}: its BMC https://192.0.2.1: POST /redfish/v1/Systems/1/Actions/"
                                   "ComputerSystem.Reset: HTTP 500 Internal Server Error")
            if name not in self.stuck:
                self.f.dead.discard(name)
            return "ForceRestart"
        return power_cycle

    def of(self, *names):
        return {n: self.cycle(n) for n in names}


def test_a_host_that_did_not_come_back_is_power_cycled_once_and_the_rollout_goes_on(fleet):
    f = fleet(cmdlines={"gpu-0": "ro", "gpu-1": "ro"}, dead={"gpu-0"})
    bmcs, said, tuned = Bmcs(f), [], []
    done = rollout.roll(targets(["gpu-0", "gpu-1"]), budget=1, command="systemctl poweroff", timeout=0.3,
                        private_key=None, after_batch=tuned.append, progress=said.append,
                        power_cycles=bmcs.of("gpu-0", "gpu-1"))
    assert [n for n, _ in bmcs.calls] == ["gpu-0"]  # gpu-1 came back by itself
    assert 0.2 < bmcs.calls[0][1] <= 0.3  # the power cycle starts a new timeout
    assert tuned == [["gpu-0"], ["gpu-1"]] and f.boots == {"gpu-0": 1, "gpu-1": 1}
    assert said.count("gpu-0: back after its BMC reset it (ForceRestart)") == 1, said
    assert "gpu-0 did not come back within 0.3 s of `systemctl poweroff`; power-cycling it through its BMC" in said
    assert [r.get("bmc_reset") for r in done.reboots] == ["ForceRestart", None]


def test_a_host_the_power_cycle_does_not_bring_back_stops_the_rollout_naming_it(fleet):
    f = fleet(cmdlines={n: "ro" for n in ("gpu-0", "gpu-1", "gpu-2")}, dead={"gpu-1"})
    bmcs = Bmcs(f, stuck={"gpu-1"})
    with pytest.raises(rollout.RolloutError) as err:
        rollout.roll(targets(["gpu-0", "gpu-1", "gpu-2"]), budget=1, command="systemctl reboot", timeout=0.2,
                     private_key=None, power_cycles=bmcs.of("gpu-0", "gpu-1", "gpu-2"))
    assert str(err.value) == ("gpu-1 did not come back within 0.2 s of `systemctl reboot`, nor within 0.2 s of being "
                              "power-cycled through its BMC (ForceRestart); the rollout stopped, and gpu-2 were not "
                              "rebooted")
    assert [n for n, _ in bmcs.calls] == ["gpu-1"]  # once, and only the host that did not come back
    assert [n for what, n in f.log if what == "reboot"] == ["gpu-0", "gpu-1"]


def test_a_bmc_that_cannot_power_cycle_stops_the_rollout_with_its_error(fleet):
    f = fleet(cmdlines={"gpu-0": "ro", "gpu-1": "ro"}, dead={"gpu-0"})
    with pytest.raises(rollout.RolloutError, match=r"^gpu-0 did not come back within 0.2 s of `reboot`, and its BMC "
                                                   r"could not power-cycle it: gpu-0: its BMC https://192.0.2.1: POST "
                                                   r".*HTTP 500 Internal Server Error; the rollout stopped, and gpu-1 "
                                                   r"were not rebooted$"):
        rollout.roll(targets(["gpu-0", "gpu-1"]), budget=1, command="reboot", timeout=0.2, private_key=None,
                     power_cycles=Bmcs(f, broken={"gpu-0"}).of("gpu-0"))
    assert f.boots["gpu-1"] == 0


def test_a_host_without_a_bmc_stops_the_rollout_as_before(fleet):
    f = fleet(cmdlines={"gpu-0": "ro", "gpu-1": "ro"}, dead={"gpu-0"})
    bmcs = Bmcs(f)
    with pytest.raises(rollout.RolloutError) as err:
        rollout.roll(targets(["gpu-0", "gpu-1"]), budget=1, command="reboot", timeout=0.2, private_key=None,
                     power_cycles=bmcs.of("gpu-1"))
    assert str(err.value) == "gpu-0 did not come back within 0.2 s of `reboot`; the rollout stopped, and gpu-1 " \
                             "were not rebooted"
    assert bmcs.calls == []


def test_a_batch_peer_back_after_its_power_cycle_is_tuned_again_when_another_does_not_return(fleet):
    f = fleet(cmdlines={"gpu-0": "ro", "gpu-1": "ro"}, dead={"gpu-0", "gpu-1"})
    bmcs, tuned = Bmcs(f, stuck={"gpu-1"}), []
    with pytest.raises(rollout.RolloutError, match="gpu-1 did not come back .* being power-cycled through its BMC"):
        rollout.roll(targets(["gpu-0", "gpu-1"]), budget=2, command="reboot", timeout=0.2, private_key=None,
                     after_batch=tuned.append, power_cycles=bmcs.of("gpu-0", "gpu-1"))
    assert tuned == [["gpu-0"]] and [n for n, _ in bmcs.calls] == ["gpu-0", "gpu-1"]


def fake_clients(monkeypatch) -> list:
    """Redfish clients that power-cycle at once; the targets they were made for, in order."""
    from railyard.drivers.hosts import redfish

    made: list = []

    class Client:
        def __init__(self, target):
            made.append(target)

        def power_cycle(self, deadline):
            return "ForceRestart"

    monkeypatch.setattr(redfish, "Client", Client)
    return made


def test_the_rollout_power_cycles_through_each_hosts_own_bmc(monkeypatch):
    made = fake_clients(monkeypatch)
    bmc = {"endpoint": "https://192.0.2.50", "username": "admin", "verify": True, "system_id": "1"}
    hosts = [{**OLDS["hosts"][0], "bmc": bmc}, {**OLDS["hosts"][1], "bmc": None}]
    cycles = resources._power_cycles({"hosts": hosts, "bmc_passwords": {"gpu-0": "s3cret"}})
    assert list(cycles) == ["gpu-0"] and cycles["gpu-0"](0) == "ForceRestart"
    assert (made[0].host, made[0].endpoint, made[0].password, made[0].system_id) == \
        ("gpu-0", "https://192.0.2.50", "s3cret", "1")


def test_a_changed_bmc_alone_reboots_nothing():
    news = {k: v for k, v in OLDS.items() if k != "booted"}
    news["hosts"] = [{**h, "bmc": {"endpoint": "https://192.0.2.50", "username": "admin", "verify": True,
                                   "system_id": None}} for h in news["hosts"]]
    news["bmc_passwords"] = {"gpu-0": "s3cret", "gpu-1": "s3cret"}
    assert not resources.HostRebootsProvider().diff("id", OLDS, news).changes


# --- the repair loop's reboot of one host (rollout.reboot) ----------------------------------------

def test_the_repair_loops_reboot_power_cycles_a_host_that_does_not_come_back(fleet):
    f = fleet(cmdlines={"gpu-0": "ro"}, dead={"gpu-0"})
    bmcs, said = Bmcs(f), []
    [(target, _)] = targets(["gpu-0"])
    done = rollout.reboot(target, command="systemctl reboot", timeout=0.2, private_key=None, progress=said.append,
                          power_cycle=bmcs.cycle("gpu-0"))
    assert done["bmc_reset"] == "ForceRestart" and [n for n, _ in bmcs.calls] == ["gpu-0"]
    assert "gpu-0 did not come back within 0.2 s of `systemctl reboot`; power-cycling it through its BMC" in said
    # Without a BMC it is the failure it always was.
    f = fleet(cmdlines={"gpu-0": "ro"}, dead={"gpu-0"})
    with pytest.raises(rollout.RolloutError, match="gpu-0 did not come back within 0.2 s"):
        rollout.reboot(target, command="systemctl reboot", timeout=0.2, private_key=None)


def test_a_hung_host_that_answers_no_ssh_is_reset_through_its_bmc_alone(fleet):
    f = fleet(cmdlines={"gpu-0": "ro"}, dead={"gpu-0"})
    f.down.add("gpu-0")  # hung: SSH does not answer, so the reboot command cannot run
    bmcs, said = Bmcs(f), []
    [(target, _)] = targets(["gpu-0"])
    done = rollout.reboot(target, command="systemctl reboot", timeout=0.2, private_key=None, progress=said.append,
                          power_cycle=bmcs.cycle("gpu-0"))
    assert done["bmc_reset"] == "ForceRestart" and f.boots["gpu-0"] == 1
    assert not [n for what, n in f.log if what == "reboot"]  # no command was sent
    assert said[0] == "gpu-0 does not answer SSH (cannot reach it); power-cycling it through its BMC"
    # A BMC that cannot reset it either: the reset fails naming both.
    f = fleet(cmdlines={"gpu-0": "ro"}, dead={"gpu-0"})
    f.down.add("gpu-0")
    with pytest.raises(rollout.RolloutError, match="does not answer SSH .* and its BMC could not power-cycle it"):
        rollout.reboot(target, command="systemctl reboot", timeout=0.2, private_key=None,
                       power_cycle=Bmcs(f, broken={"gpu-0"}).cycle("gpu-0"))
    # Without a BMC nothing can reach it: SSH's own error, as before.
    with pytest.raises(SshError, match="cannot reach it"):
        rollout.reboot(target, command="systemctl reboot", timeout=0.2, private_key=None)


def test_a_host_that_answers_and_refuses_is_never_power_cycled(fleet, monkeypatch):
    """A wrong key, a missing agent: the host is up and healthy, and a power cut would only hurt it."""
    fleet(cmdlines={"gpu-0": "ro"})

    def refused(target, command, **kw):
        raise SshError(f"{target.name}: cannot reach root@192.0.2.10: root@192.0.2.10: Permission denied (publickey).")

    monkeypatch.setattr(rollout, "run", refused)
    bmcs = Bmcs(None)
    [(target, _)] = targets(["gpu-0"])
    with pytest.raises(SshError, match="Permission denied"):
        rollout.reboot(target, command="systemctl reboot", timeout=0.2, private_key=None,
                       power_cycle=bmcs.cycle("gpu-0"))
    assert bmcs.calls == []


def test_the_hosts_driver_power_cycles_through_the_hosts_own_bmc_opening_its_password_only_then(monkeypatch):
    from railyard.drivers import hosts  # noqa: F401 (registers the driver)
    from railyard.drivers import power_cycle
    from railyard.engine import pulumi
    from railyard.remote.rollout import PowerCycleError
    from railyard.stack import from_config

    from .test_rules import config, hosts_of

    cfg = config()
    hosts_of(cfg)[1]["bmc"] = {"endpoint": "https://192.0.2.101", "username": "admin",
                               "password": {"secure": "v1:CIPHER"}, "systemId": "1"}
    spec, plan = from_config(cfg, "hosts-bmc")
    import subprocess

    asked: list = []

    def run(args, **kw):
        asked.append(args)
        return subprocess.CompletedProcess(args, 0, '{"value": "s3cret", "secret": true}', "")

    monkeypatch.setattr(pulumi, "run", run)
    made = fake_clients(monkeypatch)
    first, second = (n.name for n in plan.nodes[:2])
    assert power_cycle(spec, plan, first) is None  # no BMC listed for it
    cycle = power_cycle(spec, plan, second)
    assert cycle is not None and asked == []  # nothing opened until a cycle is asked for
    assert cycle(0) == "ForceRestart"
    # That one value, not the whole section with every other host's password in it.
    assert asked == [["config", "get", "--path", 'railyard:hosts["pools"]["gpu"]["hosts"][1]["bmc"]["password"]',
                      "--stack", "hosts-bmc", "--json"]]
    assert (made[0].host, made[0].endpoint, made[0].username, made[0].password, made[0].system_id) == \
        (second, "https://192.0.2.101", "admin", "s3cret", "1")
    assert "s3cret" not in repr(made[0])

    def refused(args, **kw):
        return subprocess.CompletedProcess(args, 255, "", "error: incorrect passphrase\n")

    monkeypatch.setattr(pulumi, "run", refused)
    with pytest.raises(PowerCycleError, match="its BMC password could not be opened: pulumi config get exited 255: "
                                              "error: incorrect passphrase"):
        cycle(0)
