"""Host tuning targets: the arithmetic the roles apply, done once here from the spec and the plan.

The roles in playbooks/ only apply numbers; they never compute them. This module says how many
hugepages each NUMA node of a host reserves, how many VFs each compute PF gets and which VF goes to
which VM with which MAC. railyard/tuning/vars.py turns these into role variables.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping


def split_pages(total: int, weights: Mapping[int, float]) -> dict[int, int]:
    """Split `total` pages over NUMA nodes in proportion to `weights` (largest remainder).

    Every node gets the floor of its exact share, and the pages left over go one each to the nodes
    with the largest remainders (ties: the lower node id), so the parts add up to `total` and none
    is more than one page from its exact share. Nodes of weight 0 get nothing unless every weight
    is 0, when the pages are split evenly (a host with no GPUs still has memory on every node).
    """
    if total < 0:
        raise ValueError(f"cannot split {total} pages")
    if not weights:
        raise ValueError("no NUMA nodes to split hugepages over")
    if any(w < 0 for w in weights.values()):
        raise ValueError(f"negative weight in {dict(weights)}")
    nodes = sorted(weights)
    w = {n: weights[n] for n in nodes}
    if sum(w.values()) == 0:
        w = dict.fromkeys(nodes, 1)
    whole = sum(w.values())
    # Integer arithmetic where the weights allow it, so shares are exact.
    exact = {n: total * w[n] / whole for n in nodes}
    out = {n: int(total * w[n] // whole) for n in nodes}
    left = total - sum(out.values())
    for n in sorted(nodes, key=lambda n: (-(exact[n] - out[n]), n))[:left]:
        out[n] += 1
    return out


def vf_mac(stack: str, node: str, pf: str, vf: int) -> str:
    """A stable, locally administered unicast MAC for VF `vf` of PF `pf` on `node` of `stack`.

    A VF keeps its MAC across runs and re-creations, so a VM's network config and its neighbours'
    ARP entries stay valid; the stack is part of the name so two stacks never share one.
    """
    digest = bytearray(hashlib.sha256(f"railyard-vf/{stack}/{node}/{pf}/{vf}".encode()).digest()[:6])
    digest[0] = (digest[0] & 0xFC) | 0x02
    return ":".join(f"{b:02x}" for b in digest)


@dataclass(frozen=True)
class VfAssignment:
    pf: str  # the compute NIC (RDMA name) carrying the VF
    index: int  # VF number on that PF (the `vf N` of `ip link set <pf> vf N`)
    mac: str
    vm: str | None
    vm_vf: str | None  # the VF's name inside the VM (vf0, vf1...)
    ip: str | None
    prefixlen: int | None


def vf_assignments(stack: str, node_plan, vfs_per_pf: int, compute_nics: list[str]) -> list[VfAssignment]:
    """Every VF of a host: those the plan gives to VMs, then the spare ones (no VM), PF by PF."""
    given: dict[tuple[str, int], tuple] = {}
    for vm in node_plan.vms:
        for vf in vm.vfs:
            given[(vf.pf, vf.slot)] = (vm.name, vf.name, vf.ip, vf.prefixlen)
    out = []
    for pf in compute_nics:
        for i in range(vfs_per_pf):
            vm, name, ip, plen = given.get((pf, i), (None, None, None, None))
            out.append(VfAssignment(pf, i, vf_mac(stack, node_plan.name, pf, i), vm, name, ip, plen))
    missing = [f"{pf} slot {slot}" for (pf, slot) in given if slot >= vfs_per_pf or pf not in compute_nics]
    if missing:
        raise ValueError(f"{node_plan.name}: the plan gives VMs VFs that the host does not create: "
                         f"{', '.join(sorted(missing))} (vfsPerPf is {vfs_per_pf})")
    return out
