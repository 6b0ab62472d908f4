"""PCIe distance classes between two devices of a bridge tree: the one implementation.

The classes are the ones `nvidia-smi topo -m` prints and NCCL reasons with:

    PIX   the path crosses at most one PCIe bridge (two devices on one switch, or two functions
          of one adapter behind one root port)
    PXB   several bridges, but no host bridge
    PHB   through a host bridge (the CPU's root complex)
    NODE  between host bridges of one NUMA node
    SYS   across NUMA nodes (the socket interconnect)

A tree is made of host bridges (the roots; each belongs to a NUMA node), bridges (root ports and
PCIe switches; a switch is one node, not its upstream and downstream ports, because "the same
switch" is what PIX means) and endpoints (GPUs, NIC functions, NVMe drives). Catalog SKUs build it
from data; a reader of /sys builds it from device paths.

Stdlib only and no imports from the rest of railyard: host-side code may ship this file as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

HOST_BRIDGE = "host_bridge"
ROOT_PORT = "root_port"
SWITCH = "switch"
ENDPOINT = "endpoint"
KINDS = (HOST_BRIDGE, ROOT_PORT, SWITCH, ENDPOINT)
# Root ports and switches both count as "a PCIe bridge" in the nvidia-smi legend.
BRIDGE_KINDS = frozenset({ROOT_PORT, SWITCH})

PIX, PXB, PHB, NODE, SYS = "PIX", "PXB", "PHB", "NODE", "SYS"
CLASSES = (PIX, PXB, PHB, NODE, SYS)


class PcieError(ValueError):
    """A tree that is not a tree, or a device that is not in it."""


@dataclass(frozen=True)
class PcieNode:
    """One node of a PCIe tree.

    id:     unique within the tree (a device name such as ``mlx5_0`` or a bus id)
    kind:   one of KINDS
    parent: id of the bridge or host bridge above it; None only for host bridges
    numa:   NUMA node; read from host bridges only (everything below inherits it)
    """

    id: str
    kind: str
    parent: str | None = None
    numa: int | None = None


class PcieTree:
    """A forest of host bridges with bridges and endpoints below them."""

    def __init__(self, nodes: Iterable[PcieNode]):
        self._nodes: dict[str, PcieNode] = {}
        for node in nodes:
            if node.id in self._nodes:
                raise PcieError(f"PCIe node {node.id!r} appears twice")
            if node.kind not in KINDS:
                raise PcieError(f"PCIe node {node.id!r}: kind {node.kind!r} is not one of {', '.join(KINDS)}")
            self._nodes[node.id] = node
        for node in self._nodes.values():
            if node.kind == HOST_BRIDGE:
                if node.parent is not None:
                    raise PcieError(f"host bridge {node.id!r} has a parent ({node.parent!r}); host bridges are roots")
                continue
            if node.parent is None:
                raise PcieError(f"PCIe node {node.id!r} ({node.kind}) has no parent; only host bridges are roots")
            parent = self._nodes.get(node.parent)
            if parent is None:
                raise PcieError(f"PCIe node {node.id!r}: parent {node.parent!r} is not in the tree")
            if parent.kind == ENDPOINT:
                raise PcieError(f"PCIe node {node.id!r}: parent {node.parent!r} is an endpoint, not a bridge")
        for node_id in self._nodes:
            self.ancestors(node_id)  # raises on a cycle

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def __iter__(self) -> Iterator[PcieNode]:
        return iter(self._nodes.values())

    def __len__(self) -> int:
        return len(self._nodes)

    def node(self, node_id: str) -> PcieNode:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise PcieError(f"{node_id!r} is not in the PCIe tree") from None

    def children(self, node_id: str) -> list[PcieNode]:
        self.node(node_id)
        return [n for n in self._nodes.values() if n.parent == node_id]

    def ancestors(self, node_id: str) -> list[str]:
        """Ids above node_id, nearest first, ending at its host bridge."""
        chain: list[str] = []
        seen = {node_id}
        current = self.node(node_id)
        while current.parent is not None:
            if current.parent in seen:
                raise PcieError(f"PCIe tree has a cycle through {current.parent!r}")
            seen.add(current.parent)
            chain.append(current.parent)
            current = self._nodes[current.parent]
        return chain

    def host_bridge(self, node_id: str) -> str:
        chain = self.ancestors(node_id)
        return chain[-1] if chain else node_id

    def numa(self, node_id: str) -> int | None:
        return self._nodes[self.host_bridge(node_id)].numa

    def distance_class(self, dev_a: str, dev_b: str) -> str:
        return distance_class(self, dev_a, dev_b)


def distance_class(tree: PcieTree, dev_a: str, dev_b: str) -> str:
    """The nvidia-smi class of the path between two distinct nodes of tree."""
    if dev_a == dev_b:
        raise PcieError(f"distance of {dev_a!r} to itself is not a PCIe class")
    path_a = [dev_a, *tree.ancestors(dev_a)]
    path_b = [dev_b, *tree.ancestors(dev_b)]
    on_b = set(path_b)
    common = next((n for n in path_a if n in on_b), None)
    if common is None:
        numa_a, numa_b = tree.numa(dev_a), tree.numa(dev_b)
        # An unknown NUMA node cannot prove locality, so it is reported as the far case.
        if numa_a is not None and numa_a == numa_b:
            return NODE
        return SYS
    if tree.node(common).kind == HOST_BRIDGE:
        return PHB
    crossed = path_a[1 : path_a.index(common) + 1] + path_b[1 : path_b.index(common)]
    bridges = sum(1 for n in crossed if tree.node(n).kind in BRIDGE_KINDS)
    return PIX if bridges <= 1 else PXB
