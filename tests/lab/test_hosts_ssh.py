"""The hosts driver's SSH, against a real lab node standing in for a server someone already has:
reached only over SSH at its management address, its host key pinned or learned on first use, a
wrong key refused before anything runs, and the model's own code run there from memory."""

from __future__ import annotations

import pytest

from railyard.drivers.hosts import remote
from railyard.remote.ssh import HostKeyMismatch, SshError, Target, run
from railyard.drivers.lab import node

from .conftest import keypair


@pytest.fixture(scope="module")
def server(stack_factory):
    c = stack_factory("hosts", rails=2, spine=False)
    c.create_fabric()
    state = c.create_node("gpu-0", 0)
    return c, state


def _target(server, **kw) -> Target:
    _, state = server
    return Target(**{"name": "gpu-0", "address": state["mgmt_address"], "host_keys": (state["host_key"],), **kw})


def test_a_pinned_host_key_connects_and_runs_the_command(server):
    c, state = server
    result = run(_target(server), ["hostname"], private_key=c.key.read_text())
    assert (result.rc, result.stdout.strip(), result.host_key) == (0, "gpu-0", state["host_key"])


def test_a_host_key_not_the_pinned_one_is_refused_before_anything_runs(server, tmp_path):
    c, _ = server
    _, other = keypair(tmp_path)  # a well-formed key of another machine
    marker = "/tmp/railyard-should-not-exist"
    wrong = " ".join(other.split()[:2])
    with pytest.raises(HostKeyMismatch, match="gpu-0: the host key of .* is not the pinned one"):
        run(_target(server, host_keys=(wrong,)), ["touch", marker], private_key=c.key.read_text())
    assert node.run_in_node(c.stack, "gpu-0", ["test", "-e", marker]).returncode != 0


def test_trust_on_first_use_learns_the_hosts_own_key(server):
    c, state = server
    result = run(_target(server, host_keys=()), ["true"], private_key=c.key.read_text())
    assert result.host_key == state["host_key"]


def test_a_jump_host_is_reached_with_the_same_key_and_its_own_pinned_key(server):
    from railyard.drivers.hosts.config import JumpHost

    c, state = server
    # The node is its own jump host here: the hop and the target each check their pinned key.
    jump = JumpHost(state["mgmt_address"], user="root", host_keys=(state["host_key"],))
    result = run(_target(server, jump=jump), ["hostname"], private_key=c.key.read_text())
    assert (result.rc, result.stdout.strip()) == (0, "gpu-0")


def test_an_agent_key_without_an_agent_and_an_unreachable_host_are_named(server, monkeypatch):
    c, state = server
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with pytest.raises(SshError, match="gpu-0: .*SSH_AUTH_SOCK"):
        run(_target(server), ["true"], private_key=None)
    # An address of the management network that no node has.
    free = ".".join(state["mgmt_address"].split(".")[:3] + ["250"])
    with pytest.raises(SshError, match=f"gpu-0: (cannot reach root@{free}|{free} did not answer)"):
        run(_target(server, address=free), ["true"], private_key=c.key.read_text(), timeout=30)


def test_the_models_code_runs_on_the_host_from_memory_and_leaves_nothing(server):
    c, _ = server
    before = node.run_in_node(c.stack, "gpu-0", ["ls", "-A", "/tmp", "/root"], check=True).stdout
    answer, _ = remote.call(_target(server), ["railyard.model.pcie", "railyard.model.sysfs_discovery"],
                            "railyard.model.sysfs_discovery:parse_cpulist", ["0-3,8"],
                            private_key=c.key.read_text())
    assert answer == [0, 1, 2, 3, 8]
    assert node.run_in_node(c.stack, "gpu-0", ["ls", "-A", "/tmp", "/root"], check=True).stdout == before
    with pytest.raises(SshError, match="gpu-0: .*no_such_function failed on"):
        remote.call(_target(server), ["railyard.model.pcie"], "railyard.model.pcie:no_such_function",
                    private_key=c.key.read_text())


def test_discovery_over_ssh_reads_the_hosts_own_kernel(server):
    """What discovery reads over SSH is the host's: the same kernel the controller runs here."""
    from railyard.model import sysfs_discovery

    c, _ = server
    facts, _ = remote.host_facts(_target(server), private_key=c.key.read_text())
    here = sysfs_discovery.host_facts()  # the same kernel, read by the same code on the controller
    assert facts["kernel"]["release"] == here["kernel"]["release"]


def test_switches_lldp_tables_are_read_over_ssh_and_one_that_fails_is_named(server):
    """railyard:hosts.switches read for verify: the lab node stands in for a switch's management
    port, its lldpCommand printing a real spine's table (lldpd 1.0.16), one switch's command
    failing and one address answering nobody. Each is read or named; none holds up the others."""
    import json
    import shlex
    import types

    from railyard.drivers.hosts.config import HostsConfig, Reboot, Switch, Switches
    from railyard.drivers.hosts.tuning import read_switch_lldp
    from railyard.model.catalog import FIXTURES_DIR

    c, state = server
    table = json.dumps(json.loads((FIXTURES_DIR / "lldp/lldpctl-json-spine-two-leaf-ports.json").read_text()))
    free = ".".join(state["mgmt_address"].split(".")[:3] + ["250"])
    pinned = (state["host_key"],)

    def config(command: str, *hosts: Switch) -> types.SimpleNamespace:
        sw = Switches(hosts, user="root", command=command)
        return types.SimpleNamespace(driver_config=HostsConfig(ssh_key="agent", host_key_mode="pinned",
                                                               reboot=Reboot(), pools=(), switches=sw))

    got = read_switch_lldp(config(f"printf %s {shlex.quote(table)}", Switch("su0-spine0", state["mgmt_address"], pinned),
                                  Switch("su0-spine1", free, pinned)), None, c.key.read_text(), 20)
    assert {p: [(n["system"], n["port"]) for n in ns] for p, ns in got.tables["su0-spine0"].items()} == {
        "swp1": [("su0-leaf0", "swp33")], "swp2": [("su0-leaf0", "swp34")]}
    assert isinstance(got.tables["su0-spine1"], str) and free in got.tables["su0-spine1"]
    failed = read_switch_lldp(config("lldpctl-not-here -f json", Switch("su0-spine0", state["mgmt_address"], pinned)),
                              None, c.key.read_text(), 20)
    assert failed.tables["su0-spine0"].startswith("lldpctl-not-here -f json exited 127: ")
