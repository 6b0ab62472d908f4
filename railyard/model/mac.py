"""Locally administered unicast MAC addresses: the one place that sets the two bits, and the one
hash that makes an address stable from a name.

Standard library only: the lab's SR-IOV agent imports it inside a node, where it runs isolated
from the virtualenv.
"""

from __future__ import annotations

import hashlib


def local_unicast(raw: bytes) -> str:
    """Six bytes as a MAC with the locally administered bit set and the multicast bit clear."""
    b = bytearray(raw[:6])
    if len(b) != 6:
        raise ValueError(f"a MAC needs 6 bytes, got {len(b)}")
    b[0] = (b[0] & 0xFC) | 0x02
    return ":".join(f"{x:02x}" for x in b)


def hashed_mac(*parts: str) -> str:
    """A MAC that is a pure function of `parts`: a re-created interface or VF keeps its address, so
    neighbours' ARP entries and a VM's network config stay valid."""
    return local_unicast(hashlib.sha256("/".join(parts).encode()).digest())
