"""What a stack's `railyard:hosts` section means: frozen dataclasses, made by rules.parse.

Pulumi-free. The hosts' addresses here are their own, on the network they already are on; the
plan's management addresses are not theirs (docs/stack-reference.md, `railyard:hosts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from railyard.model.spec import SSH_AGENT, Secret
from railyard.remote.ssh import JumpHost  # noqa: F401 (a field type of the section's hosts)
from railyard.ssh_client import DEFAULT_PORT

HOST_KEY_MODES = ("pinned", "trust-on-first-use")
DEFAULT_USER = "root"
DEFAULT_REBOOT_COMMAND = "systemctl reboot"
DEFAULT_REBOOT_TIMEOUT_SECONDS = 600
# What prints a switch's LLDP table as lldpd's JSON: lldpd's own client, as on Cumulus Linux, whose
# ports carry the plan's names (swp12); a switch OS naming them otherwise is not matched (verify.md).
DEFAULT_LLDP_COMMAND = "lldpctl -f json"
# A day: a server that has not answered by then needs a person, and the wait holds every later
# host of its pool's rolling reboot.
MAX_REBOOT_TIMEOUT_SECONDS = 86_400



@dataclass(frozen=True)
class Bmc:
    """A host's baseboard management controller, reached over Redfish (`bmc` of a listed host):
    where its power state is read, and what power-cycles it when it does not come back from a
    reboot."""

    endpoint: str
    """`https://address[:port]`, no path: its Redfish service root is /redfish/v1."""
    username: str
    password: Secret
    """Ciphertext only, never opened here; the driver reads it as a secret (password_at)."""
    password_at: tuple[str | int, ...]
    """Where the password is inside railyard:hosts: ("pools", <pool>, "hosts", <i>, "bmc", "password")."""
    verify: bool | str = True
    """True: its certificate is checked against the system's CAs; a string: against that CA file
    (PEM, an absolute path); False: not checked."""
    system_id: str | None = None
    """Its ComputerSystem's id under /redfish/v1/Systems; None: the only one there."""

    def resource_input(self) -> dict:
        """What a resource is given of it: everything but the password, which goes as a secret."""
        return {"endpoint": self.endpoint, "username": self.username, "verify": self.verify,
                "system_id": self.system_id}


@dataclass(frozen=True)
class Host:
    """One existing server: how SSH reaches it, and the host keys it must present."""

    address: str
    """Its management address as listed (an IPv4 or IPv6 address, or a DNS name): where SSH and
    tuning reach it. Not the plan's management address."""
    user: str = DEFAULT_USER
    port: int = DEFAULT_PORT
    jump_host: JumpHost | None = None
    host_keys: tuple[str, ...] = ()
    """Pinned public keys, each `<type> <base64>` (a known_hosts key, without host names or
    comment). Empty: trusted on first use (only where hostKeys is trust-on-first-use)."""
    name: str | None = None
    """Its name in the Ansible inventory it came from (inventory_hostname); None when listed."""
    node_name: str | None = None
    """The name its kubelet registers (`nodeName`); None: its inventory name, else the plan's."""
    where: str = ""
    """Where it was given, for messages: a config path, or `<inventory file>:<line>`."""
    bmc: Bmc | None = None
    """Its BMC; None: no power control (a host that does not come back stops the rollout)."""

    @property
    def pinned(self) -> bool:
        return bool(self.host_keys)

    def kube_node_name(self, plan_name: str) -> str:
        """Its Node in the cluster the stack names: `nodeName`, else its inventory name, else the
        plan's node name (a server whose hostname is `<pool>-<i>`)."""
        return self.node_name or self.name or plan_name


@dataclass(frozen=True)
class Budget:
    """How many hosts of a pool may be down at once in a rolling reboot (`maxUnavailable`):
    a number of hosts, or a percentage of the pool."""

    hosts: int | None = 1
    percent: int | None = None

    def of(self, count: int) -> int:
        """Hosts at a time for a pool of `count`: a percentage rounds down, but never below 1,
        so a small pool still makes progress."""
        if self.percent is not None:
            return max(1, math.floor(count * self.percent / 100))
        return min(self.hosts or 1, max(count, 1))

    def __str__(self) -> str:
        return f"{self.percent}%" if self.percent is not None else str(self.hosts)


@dataclass(frozen=True)
class Reboot:
    """How boot-time settings (kernel command line, IOMMU, hugepages at boot) take effect."""

    command: str = DEFAULT_REBOOT_COMMAND
    timeout_seconds: int = DEFAULT_REBOOT_TIMEOUT_SECONDS
    """How long a host may take to come back and answer SSH before the reboot counts as failed."""
    max_unavailable: Budget = Budget()
    """The default budget of every pool (a pool may set its own)."""


@dataclass(frozen=True)
class PoolHosts:
    """The hosts of one node pool, in node order: node `<pool>-<i>` is hosts[i]."""

    pool: str
    hosts: tuple[Host, ...]
    max_unavailable: Budget = Budget()
    inventory: Path | None = None
    """The Ansible inventory file they were read from (resolved), or None when listed."""
    group: str | None = None
    """The inventory group they are, or None when listed."""

    @property
    def reboot_budget(self) -> int:
        """Hosts of this pool rebooted at once."""
        return self.max_unavailable.of(len(self.hosts))


@dataclass(frozen=True)
class Switch:
    """One switch of the plan whose LLDP table `railyard verify` reads over SSH."""

    name: str
    """Its plan name (`railyard plan` lists them)."""
    address: str
    host_keys: tuple[str, ...]
    """Its pinned keys: a switch is always pinned (verify records nothing it could learn)."""


@dataclass(frozen=True)
class Switches:
    """railyard:hosts.switches: how `railyard verify` reads an Ethernet fabric's switches' own LLDP
    tables, beside the hosts' side."""

    hosts: tuple[Switch, ...]
    user: str = DEFAULT_USER
    port: int = DEFAULT_PORT
    jump_host: JumpHost | None = None
    command: str = DEFAULT_LLDP_COMMAND
    """Run on each switch; prints its LLDP neighbours as `lldpctl -f json` does."""
    jump_path: str = "railyard:hosts.jumpHost"
    """Where its jump host was given (its own jumpHost, or the section's), for messages."""


@dataclass(frozen=True)
class HostsConfig:
    """The `railyard:hosts` section: Spec.driver_config of a hosts stack."""

    ssh_key: Secret | Literal["agent"]
    """The private key as a Pulumi secret (ciphertext only; never opened here), or "agent": the
    key is the one ssh-agent holds (SSH_AUTH_SOCK) where Railyard runs."""
    host_key_mode: str
    """"pinned": every host has a pinned key; "trust-on-first-use": a host without one is trusted
    at its first connection and its key recorded in the stack's state."""
    reboot: Reboot
    pools: tuple[PoolHosts, ...]
    switches: Switches | None = None
    """The switches whose LLDP tables verify reads; None: the hosts' side alone decides."""

    @property
    def uses_agent(self) -> bool:
        return self.ssh_key == SSH_AGENT

    def pool(self, name: str) -> PoolHosts:
        for p in self.pools:
            if p.pool == name:
                return p
        raise KeyError(f"no hosts for pool {name!r}; pools: {', '.join(p.pool for p in self.pools)}")

    def hosts_of(self, pool: str) -> tuple[Host, ...]:
        """The pool's hosts in node order."""
        return self.pool(pool).hosts

    def host(self, pool: str, index: int) -> Host:
        """The host of node `<pool>-<index>`."""
        hosts = self.hosts_of(pool)
        if not 0 <= index < len(hosts):
            raise KeyError(f"pool {pool!r} has {len(hosts)} hosts; no node {pool}-{index}")
        return hosts[index]

    @property
    def hosts(self) -> tuple[Host, ...]:
        """Every host, pool by pool."""
        return tuple(h for p in self.pools for h in p.hosts)
