"""A valid `railyard:openstack` section, for tests that need an openstack stack (this package's,
and the model's tests of the virtual layout on RoCE, which only openstack runs outside the lab)."""

from __future__ import annotations

from typing import Any

# Well-formed ed25519 keys of zero bytes and a counter: placeholders no real host has.
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABl railyard@test"
JUMP_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABk"


def section(rails: int, **overrides: Any) -> dict[str, Any]:
    """A section for a plan of `rails` rails: VLAN 100 + i on physnet-rail<i>."""
    out: dict[str, Any] = {
        "image": "ubuntu-22.04-nvidia",
        "publicKey": PUBLIC_KEY,
        "sshKey": "agent",
        "gpuAlias": "h100",
        "sshFrom": ["203.0.113.0/24"],
        "jumpHost": {"address": "203.0.113.10", "user": "admin", "hostKey": JUMP_KEY},
        "management": {"physicalNetwork": "physnet-mgmt", "vlan": 10},
        "rails": [{"physicalNetwork": f"physnet-rail{i}", "vlan": 100 + i} for i in range(rails)],
    }
    out.update(overrides)
    return out
