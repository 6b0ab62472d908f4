"""Fixtures for the lab runtime's tests: real namespaces, links and sshd, in stacks of their own.

Each test process uses stacks named ``t-lab-<pid>...`` (never the user's ``lab``) and a management
network the host does not route yet, so the tests run beside a live `lab` stack and beside the
other workers of the same run. Another checkout's lab test run on the same machine is waited for
(tests/conftest.py). Everything a process creates is destroyed at its end, even after a failure.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from railyard.drivers.lab import fabric, gc, names, node

from .railyard_project import free_networks

NOT_ROOT = "lab tests need root: they create network namespaces, links, mounts and sshd processes"

# dgx-h100's compute NICs, in rail order
RAIL_NICS = ("ibp24s0", "ibp64s0", "ibp79s0", "ibp94s0", "ibp154s0", "ibp170s0", "ibp192s0", "ibp206s0")
MGMT_NIC = "eno3"
STORAGE_NIC = "enp170s0f1"


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.lab)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason=NOT_ROOT))


def free_mgmt_cidr() -> str:
    """A /24 of the lab tests' pool that no route on the host overlaps and no other test worker
    has just picked (the default lab stack uses 198.18.0.0/20)."""
    return free_networks(1)[0]


@dataclass
class Cluster:
    """A lab stack of the tests: fabric, optional spine and nodes, with the addresses used."""

    stack: str
    mgmt_cidr: str
    rails: int
    key: Path
    pubkey: str
    spine: bool = True
    nodes: dict[str, dict] = field(default_factory=dict)

    @property
    def mgmt(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(self.mgmt_cidr)

    @property
    def host_address(self) -> str:
        return str(self.mgmt.network_address + 1)

    def rail_subnet(self, rail: int) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(f"198.19.{200 + rail}.0/24")

    def gateway(self, rail: int) -> str:
        return str(self.rail_subnet(rail).network_address + 1)

    compute_cidr = "198.19.192.0/18"  # holds every rail_subnet

    def create_fabric(self) -> dict:
        state = fabric.create_fabric(self.stack, rails=self.rails, mgmt_cidr=self.mgmt_cidr,
                                     host_address=self.host_address)
        if self.spine:
            fabric.create_spine(self.stack, gateways=[f"{self.gateway(r)}/24" for r in range(self.rails)])
        return state

    def node_args(self, index: int) -> dict:
        host = 10 + index
        return {
            "mgmt": {"name": MGMT_NIC, "address": f"{self.mgmt.network_address + host}/{self.mgmt.prefixlen}"},
            "rails": [{"name": RAIL_NICS[r], "rail": r, "address": f"{self.rail_subnet(r).network_address + host}/24",
                       **({"gateway": self.gateway(r)} if self.spine else {})} for r in range(self.rails)],
            "storage": {"name": STORAGE_NIC, "address": f"198.18.{100}.{host}/24"},
            "compute_cidr": self.compute_cidr if self.spine else None,
            "authorized_keys": self.pubkey,
        }

    def create_node(self, name: str, index: int, **overrides) -> dict:
        args = {**self.node_args(index), **overrides}
        state = node.create_node(self.stack, name, **args)
        self.nodes[name] = {"index": index, "state": state}
        return state

    def rail_address(self, name: str, rail: int) -> str:
        return str(self.rail_subnet(rail).network_address + 10 + self.nodes[name]["index"])

    def ids(self) -> set[str]:
        out = {names.fabric_ns(self.stack)} | {names.node_ns(self.stack, n) for n in self.nodes}
        if self.spine:
            out.add(names.spine_ns(self.stack))
        return out

    def ssh(self, name: str, command: str, *, host_key: str | None = None, tmp: Path,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """The system ssh client from the host over the management network, checking the host key."""
        state = node.read_node(self.stack, name)
        addr = state["mgmt_address"]
        known = tmp / f"known_hosts-{name}"
        known.write_text(f"{addr} {host_key or state['host_key']}\n")
        return subprocess.run(
            ["ssh", "-F", "/dev/null", "-i", str(self.key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}", "-o", "ConnectTimeout=5",
             "-o", "LogLevel=ERROR", f"root@{addr}", command],
            text=True, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )


def keypair(directory: Path) -> tuple[Path, str]:
    key = directory / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "railyard-lab-test", "-f", str(key)],
                   check=True)
    return key, (directory / "id_ed25519.pub").read_text().strip()


@pytest.fixture(scope="session")
def stack_factory(tmp_path_factory):
    """Makes test stacks; destroys all of them at the end of the session."""
    made: list[Cluster] = []
    base = f"t-lab-{os.getpid()}"

    def make(suffix: str, *, rails: int = 8, spine: bool = True) -> Cluster:
        stack = f"{base}-{suffix}"
        assert stack != "lab"
        directory = tmp_path_factory.mktemp(f"key-{suffix}")
        key, pub = keypair(directory)
        cluster = Cluster(stack, free_mgmt_cidr(), rails, key, pub, spine=spine)
        made.append(cluster)
        return cluster

    yield make
    errors = []
    for cluster in made:
        try:
            gc.destroy_all(cluster.stack)
        except Exception as exc:  # keep destroying the others
            errors.append(f"{cluster.stack}: {exc}")
    assert not errors, errors


@pytest.fixture(scope="module")
def cluster(stack_factory):
    """The issue's default shape: 2 nodes, 8 rails, a spine."""
    c = stack_factory("main")
    c.create_fabric()
    for i in range(2):
        c.create_node(f"gpu-{i}", i)
    return c
