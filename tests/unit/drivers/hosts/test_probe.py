"""What preview says of a pool's hosts (railyard.drivers.hosts.probe): which will reboot, which
cannot be reached; the hosts are reached the way the rollout reaches them."""

from __future__ import annotations

from railyard.drivers.hosts import probe
from railyard.remote.rollout import Boot
from railyard.remote.ssh import SshError

HOST = {"address": "192.0.2.10", "user": "root", "port": 22, "jump": None, "host_keys": ["ssh-ed25519 AAAA"],
        "wanted": ["hugepages=0:8", "intel_iommu=on"]}


def test_preview_names_the_hosts_that_would_reboot_and_those_it_cannot_reach(monkeypatch):
    seen = {}

    def boot_state(target, private_key, timeout):
        seen[target.name] = (target.address, target.host_keys)
        if target.name == "gpu-2":
            raise SshError("gpu-2: cannot reach root@192.0.2.12: Connection refused")
        cmdline = "intel_iommu=on" if target.name == "gpu-0" else "hugepages=0:8 intel_iommu=on"
        return Boot("b", cmdline)

    monkeypatch.setattr(probe, "boot_state", boot_state)
    hosts = [{**HOST, "node": f"gpu-{i}", "address": f"192.0.2.1{i}"} for i in range(3)]
    found = probe.check(hosts, "KEY")
    assert found == {"reboot": {"gpu-0": ["hugepages=0:8"]}, "unreachable": {"gpu-2": "cannot reach root@192.0.2.12: Connection refused"},
                     "unchecked": []}
    # Each host reached at its own address with its pinned key, as the rollout reaches it.
    assert seen["gpu-1"] == ("192.0.2.11", ("ssh-ed25519 AAAA",))
