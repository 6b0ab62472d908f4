"""The rolling reboot's order and stopping rules, with SSH stood in by a fleet of fake hosts (the
real thing: tests/lab/test_hosts_up.py): which hosts reboot, how many at once, what stops it."""

from __future__ import annotations

import pytest

from railyard.drivers.hosts import resources
from railyard.remote import rollout
from railyard.remote.ssh import SshError, Target, Unreachable

WANT = ("hugepagesz=1G", "hugepages=0:4,1:4")


class Fleet:
    """Hosts that boot with their bootloader's command line when rebooted, unless they are dead."""

    def __init__(self, cmdlines: dict[str, str], dead=(), wrong=()):
        self.cmdline = dict(cmdlines)
        self.boots = {n: 0 for n in cmdlines}
        self.down: set[str] = set()
        self.dead, self.wrong = set(dead), set(wrong)
        self.log: list[tuple[str, str]] = []
        self.most_down = 0

    def run(self, target: Target, command, *, private_key, timeout=30, input=None):
        n = target.name
        if command == rollout.STATE_COMMAND:
            if n in self.down:
                if n in self.dead:
                    raise Unreachable(f"{n}: cannot reach it")
                self.down.discard(n)  # it finished booting
                self.boots[n] += 1
                self.cmdline[n] = "ro" if n in self.wrong else "ro " + " ".join(WANT)
                self.log.append(("up", n))
            return type("R", (), {"rc": 0, "stdout": f"boot-{n}-{self.boots[n]}\n{self.cmdline[n]}\n",
                                  "stderr": ""})()
        self.down.add(n)
        self.most_down = max(self.most_down, len(self.down))
        self.log.append(("reboot", n))
        raise SshError(f"{n}: connection closed")


def targets(names):
    return [(Target(name=n, address=f"192.0.2.{10 + i}"), WANT) for i, n in enumerate(names)]


@pytest.fixture
def fleet(monkeypatch):
    def make(**kw):
        f = Fleet(**kw)
        monkeypatch.setattr(rollout, "run", f.run)
        monkeypatch.setattr(rollout, "POLL_S", 0)
        return f
    return make


def test_only_hosts_lacking_an_argument_reboot_one_batch_at_a_time(fleet):
    names = [f"gpu-{i}" for i in range(5)]
    f = fleet(cmdlines={n: ("ro " + " ".join(WANT)) if n == "gpu-1" else "ro" for n in names})
    batches = []
    done = rollout.roll(targets(names), budget=2, command="systemctl reboot", timeout=5, private_key=None,
                        after_batch=batches.append)
    assert batches == [["gpu-0", "gpu-2"], ["gpu-3", "gpu-4"]]
    assert f.boots["gpu-1"] == 0 and f.most_down == 2
    assert [n for what, n in f.log if what == "reboot"] == ["gpu-0", "gpu-2", "gpu-3", "gpu-4"]
    assert [r["node"] for r in done.reboots] == ["gpu-0", "gpu-2", "gpu-3", "gpu-4"]
    assert all(rollout.missing(WANT, c) == [] for c in done.booted.values())


def test_a_host_that_does_not_come_back_stops_the_rollout_naming_those_left(fleet):
    names = ["gpu-0", "gpu-1", "gpu-2"]
    f = fleet(cmdlines={n: "ro" for n in names}, dead={"gpu-0"})
    with pytest.raises(rollout.RolloutError, match=r"gpu-0 did not come back within 0.2 s of `systemctl reboot`; "
                                                   r"the rollout stopped, and gpu-1, gpu-2 were not rebooted"):
        rollout.roll(targets(names), budget=1, command="systemctl reboot", timeout=0.2, private_key=None)
    assert [n for what, n in f.log if what == "reboot"] == ["gpu-0"]


def test_a_host_back_without_its_arguments_stops_the_rollout(fleet):
    f = fleet(cmdlines={"gpu-0": "ro", "gpu-1": "ro"}, wrong={"gpu-0"})
    with pytest.raises(rollout.RolloutError, match="gpu-0 came back without hugepagesz=1G hugepages=0:4,1:4"):
        rollout.roll(targets(["gpu-0", "gpu-1"]), budget=1, command="reboot", timeout=5, private_key=None)
    assert f.boots["gpu-1"] == 0


def test_a_failed_verification_stops_the_next_batch(fleet):
    f = fleet(cmdlines={"gpu-0": "ro", "gpu-1": "ro"})

    def verify(nodes):
        raise rollout.RolloutError(f"after the reboot of {', '.join(nodes)}, tuning failed")

    with pytest.raises(rollout.RolloutError, match="after the reboot of gpu-0"):
        rollout.roll(targets(["gpu-0", "gpu-1"]), budget=1, command="reboot", timeout=5, private_key=None,
                     after_batch=verify)
    assert f.boots["gpu-1"] == 0


HOSTS = [{"node": "gpu-0", "address": "192.0.2.10", "port": 22, "wanted": list(WANT)},
         {"node": "gpu-1", "address": "192.0.2.11", "port": 22, "wanted": list(WANT)}]
OLDS = {"hosts": HOSTS, "budget": 1, "command": "systemctl reboot", "timeout": 600, "tuning_run": "r1",
        "booted": {"gpu-0": "ro " + " ".join(WANT), "gpu-1": "ro " + " ".join(WANT)}}


def test_a_second_up_with_every_host_booted_as_wanted_changes_nothing():
    provider = resources.HostRebootsProvider()
    assert not provider.diff("id", OLDS, {k: v for k, v in OLDS.items() if k != "booted"}).changes


@pytest.mark.parametrize("change", [
    {"hosts": [HOSTS[0], {**HOSTS[1], "wanted": ["hugepages=0:8,1:8"]}]},  # a new reservation
    {"hosts": HOSTS + [{"node": "gpu-2", "address": "192.0.2.12", "port": 22, "wanted": list(WANT)}]},
    {"tuning_run": "r2"},  # tuning ran again: the bootloader may say something new
    {"budget": 2},
])
def test_what_makes_the_hosts_be_asked_again(change):
    news = {**{k: v for k, v in OLDS.items() if k != "booted"}, **change}
    assert resources.HostRebootsProvider().diff("id", OLDS, news).changes


def test_a_batch_peer_that_came_back_is_tuned_again_when_another_does_not(fleet):
    f = fleet(cmdlines={"gpu-0": "ro", "gpu-1": "ro", "gpu-2": "ro"}, dead={"gpu-1"})
    tuned = []
    with pytest.raises(rollout.RolloutError, match="gpu-1 did not come back"):
        rollout.roll(targets(["gpu-0", "gpu-1", "gpu-2"]), budget=2, command="reboot", timeout=0.2,
                     private_key=None, after_batch=tuned.append)
    assert tuned == [["gpu-0"]] and f.boots["gpu-2"] == 0


def test_a_refused_reboot_command_stops_at_once(fleet, monkeypatch):
    f = fleet(cmdlines={"gpu-0": "ro", "gpu-1": "ro"})

    def refuse(target, command, *, private_key, timeout=30, input=None):
        if command == rollout.STATE_COMMAND:
            return f.run(target, command, private_key=private_key)
        return type("R", (), {"rc": 1, "stdout": "", "stderr": "Failed to reboot: Access denied\n"})()

    monkeypatch.setattr(rollout, "run", refuse)
    with pytest.raises(rollout.RolloutError, match="gpu-0: `systemctl reboot` exited 1: Failed to reboot: Access denied"):
        rollout.roll(targets(["gpu-0", "gpu-1"]), budget=1, command="systemctl reboot", timeout=60, private_key=None)


def test_a_host_that_booted_since_the_last_rollout_is_tuned_again_without_a_reboot(fleet):
    # gpu-1 was rebooted by a rollout whose post-reboot playbook failed: state still has its
    # earlier boot id, and its kernel already has the arguments.
    f = fleet(cmdlines={n: "ro " + " ".join(WANT) for n in ("gpu-0", "gpu-1")})
    tuned = []
    done = rollout.roll(targets(["gpu-0", "gpu-1"]), budget=1, command="reboot", timeout=5, private_key=None,
                        after_batch=tuned.append, known_boots={"gpu-0": "boot-gpu-0-0", "gpu-1": "boot-gpu-1-earlier"})
    assert tuned == [["gpu-1"]] and f.boots == {"gpu-0": 0, "gpu-1": 0}
    assert done.boots == {"gpu-0": "boot-gpu-0-0", "gpu-1": "boot-gpu-1-0"}
    # Nothing known (the first rollout): nobody is tuned again.
    tuned.clear()
    rollout.roll(targets(["gpu-0", "gpu-1"]), budget=1, command="reboot", timeout=5, private_key=None,
                 after_batch=tuned.append)
    assert tuned == []
