"""Names, addresses, partition keys and BGP numbers: each a pure function of (pool, index, rail).

Growing a pool must never rename or readdress what already exists, so nothing here depends on how
many nodes a pool has: a pool's position in `railyard:nodePools` (its ordinal) picks a fixed block
of every network, and a node's index picks its place inside that block. The scheme, and what
changes it (reordering pools, changing a CIDR, vmsPerHost or the VFs per VM), is in
docs/addressing.md; the sizing functions at the end tell validation how large each CIDR must be.

Addresses are handled as integers and formatted once: the plan of a 20,000-GPU cluster formats
tens of thousands of them, and `ipaddress` objects are far slower than int arithmetic.
"""

from __future__ import annotations

import functools
import ipaddress
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from railyard.model.errors import Problem

if TYPE_CHECKING:
    from railyard.model.catalog import Catalog
    from railyard.model.spec.types import Spec

# Every network is cut into this many equal pool blocks, pool p (in declared order) owning block
# p. Eight covers a GPU pool, a second GPU generation and service pools with room to spare; more
# pools than this is a validation error, not a silent reshuffle.
MAX_POOLS = 8

# At the start of every pool block: its first address (the network address of block 0) and one for
# a gateway or pool service; at its end: one address (the broadcast address of the last block).
# Reserving them in every block, not only in the first and last, keeps the layout of all blocks
# identical, so a node's offset in its block never depends on which block it is in.
BLOCK_HEAD = 2
BLOCK_TAIL = 1

# BGP: RFC 6996 private ranges. The span above asnBase is cut into MAX_POOLS + 1 equal blocks:
# block 0 for the tiers every pool shares (cores, two-tier spines), block p + 1 for pool p.
ASN_PRIVATE_RANGES = ((64_512, 65_534), (4_200_000_000, 4_294_967_294))

P2P_PREFIX = 31  # RFC 3021 point-to-point links between RoCE switches


# --------------------------------------------------------------------------------------------------
# Names


def node_name(pool: str, index: int) -> str:
    """The host `index` of `pool`: `gpu-0`, `gpu-1`, ..."""
    return f"{pool}-{index}"


def vm_name(pool: str, index: int, vm: int) -> str:
    """VM `vm` on host `index` of `pool` (virtual layout): `gpu-0-vm0`."""
    return f"{pool}-{index}-vm{vm}"


# --------------------------------------------------------------------------------------------------
# Integer address helpers


def format_ip(value: int) -> str:
    return f"{value >> 24}.{(value >> 16) & 255}.{(value >> 8) & 255}.{value & 255}"


def _net(cidr: Any) -> tuple[int, int]:
    """(first address as int, number of addresses) of a CIDR given as text or an IPv4Network."""
    return _parse(cidr if isinstance(cidr, ipaddress.IPv4Network) else str(cidr))


@functools.lru_cache(maxsize=256)
def _parse(cidr: ipaddress.IPv4Network | str) -> tuple[int, int]:
    net = cidr if isinstance(cidr, ipaddress.IPv4Network) else ipaddress.IPv4Network(cidr)
    return int(net.network_address), net.num_addresses


def _cidr(base: int, size: int) -> str:
    return f"{format_ip(base)}/{32 - (size.bit_length() - 1)}"


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def prefix_for(addresses: int) -> int:
    """The longest prefix length whose network holds `addresses` addresses."""
    return 32 - (next_pow2(max(1, addresses)).bit_length() - 1)


def _block(base: int, size: int, parts: int, which: int) -> tuple[int, int]:
    """Part `which` of `parts` equal parts of the range (parts a power of two)."""
    step = size // parts
    if not 0 <= which < parts or step == 0:
        raise ValueError(f"block {which} of {parts} does not exist in a range of {size} addresses")
    return base + which * step, step


def _in_block(base: int, size: int, offset: int, what: str) -> int:
    """The address at `offset` from the block start, refusing one that spills out of the block."""
    if offset > size - 1 - BLOCK_TAIL:
        raise ValueError(f"{what} does not fit its block of {size} addresses "
                         "(validation sizes CIDRs with railyard.model.addressing.address_needs)")
    return base + offset


# --------------------------------------------------------------------------------------------------
# Management and storage networks: one address per host and, in the virtual layout, one per VM.


def host_stride(vms_per_host: int = 0) -> int:
    """Addresses a host takes in the management and storage networks: itself and its VMs."""
    return 1 + max(0, vms_per_host)


def pool_block(cidr: Any, ordinal: int) -> str:
    """The block of a network that pool `ordinal` (its place in railyard:nodePools) owns."""
    base, size = _net(cidr)
    return _cidr(*_block(base, size, MAX_POOLS, ordinal))


def _endpoint(cidr: Any, ordinal: int, index: int, stride: int, slot: int) -> int:
    base, size = _block(*_net(cidr), MAX_POOLS, ordinal)
    return _in_block(base, size, BLOCK_HEAD + index * stride + slot, f"host {index} of pool {ordinal}")


def host_ip(cidr: Any, ordinal: int, index: int, vms_per_host: int = 0) -> str:
    """Host `index` of pool `ordinal` in a management or storage network."""
    return format_ip(_endpoint(cidr, ordinal, index, host_stride(vms_per_host), 0))


def guest_ip(cidr: Any, ordinal: int, index: int, vm: int, vms_per_host: int) -> str:
    """VM `vm` of host `index`: the addresses right after its host's."""
    if not 0 <= vm < vms_per_host:
        raise ValueError(f"vm {vm} is not one of the {vms_per_host} VMs of a host")
    return format_ip(_endpoint(cidr, ordinal, index, host_stride(vms_per_host), 1 + vm))


management_ip = host_ip
storage_ip = host_ip
vm_management_ip = guest_ip
vm_storage_ip = guest_ip


# --------------------------------------------------------------------------------------------------
# Compute network: a subnet per rail, each cut into pool blocks. RoCE keeps the upper half of the
# compute CIDR for the /31 links between switches.


def rail_slots(rails: int) -> int:
    """How many equal rail subnets the rail region is cut into (a power of two >= rails)."""
    return next_pow2(rails)


def _rail_region(cidr: Any, kind: str) -> tuple[int, int]:
    base, size = _net(cidr)
    return (base, size // 2) if kind == "roce" else (base, size)


def rail_subnet(cidr: Any, rail: int, rails: int, kind: str = "infiniband") -> str:
    """The subnet of `rail` in a fabric of `rails` rails (InfiniBand: IPoIB; RoCE: routed)."""
    if not 0 <= rail < rails:
        raise ValueError(f"rail {rail} is not one of {rails} rails")
    return _cidr(*_block(*_rail_region(cidr, kind), rail_slots(rails), rail))


def rail_prefixlen(cidr: Any, rails: int, kind: str = "infiniband") -> int:
    """The prefix length of every rail subnet."""
    return prefix_for(_rail_region(cidr, kind)[1] // rail_slots(rails))


def rail_gateway(cidr: Any, rail: int, rails: int, kind: str = "roce") -> str:
    """The address the leaves of a RoCE rail answer on (the second address of the rail subnet)."""
    base, _ = _block(*_rail_region(cidr, kind), rail_slots(rails), rail)
    return format_ip(base + 1)


def vf_slots_per_pf(vms_per_host: int, vfs_per_vm: int, pool_rails: int) -> int:
    """VFs one PF carries: the host's VFs dealt round-robin over its compute NICs."""
    if vms_per_host <= 0 or vfs_per_vm <= 0 or pool_rails <= 0:
        return 0
    return math.ceil(vms_per_host * vfs_per_vm / pool_rails)


def rail_stride(vms_per_host: int = 0, vfs_per_vm: int = 0, pool_rails: int = 1) -> int:
    """Addresses a host takes on each rail: its NIC (the PF) and the VFs that PF carries."""
    return 1 + vf_slots_per_pf(vms_per_host, vfs_per_vm, pool_rails)


def vf_placement(vm: int, vf: int, vfs_per_vm: int, pool_rails: int) -> tuple[int, int]:
    """(rail, slot on that rail's PF) of VF `vf` of VM `vm`.

    VFs are dealt round-robin over the PFs in (VM, VF) order, so VM j with as many VFs as it has
    GPUs lands on the rails of its own GPUs (rail i is the NIC of GPU i), and no PF carries more
    than ceil(VMs x VFs / NICs) VFs.
    """
    q = vm * vfs_per_vm + vf
    return q % pool_rails, q // pool_rails


def _rail_endpoint(cidr: Any, kind: str, rails: int, rail: int, ordinal: int, index: int,
                   stride: int, slot: int) -> int:
    rbase, rsize = _block(*_rail_region(cidr, kind), rail_slots(rails), rail)
    base, size = _block(rbase, rsize, MAX_POOLS, ordinal)
    return _in_block(base, size, BLOCK_HEAD + index * stride + slot,
                     f"host {index} of pool {ordinal} on rail {rail}")


def nic_ip(cidr: Any, kind: str, rails: int, ordinal: int, index: int, rail: int, stride: int = 1) -> str:
    """The compute NIC of host `index` on `rail` (stride from rail_stride for the virtual layout)."""
    return format_ip(_rail_endpoint(cidr, kind, rails, rail, ordinal, index, stride, 0))


def host_prefixes(cidr: Any, kind: str, rails: int, rail: int, ordinal: int, first: int, count: int,
                  stride: int) -> list[str]:
    """The fewest prefixes covering exactly the rail addresses (PFs and their VFs) of hosts
    first .. first + count - 1 of a pool on `rail`: what their leaf announces (routing.py)."""
    if count < 1:
        return []
    lo = _rail_endpoint(cidr, kind, rails, rail, ordinal, first, stride, 0)
    hi = _rail_endpoint(cidr, kind, rails, rail, ordinal, first + count - 1, stride, stride - 1)
    return [str(n) for n in ipaddress.summarize_address_range(ipaddress.IPv4Address(lo), ipaddress.IPv4Address(hi))]


def vf_ip(cidr: Any, kind: str, rails: int, ordinal: int, index: int, rail: int, slot: int,
          stride: int) -> str:
    """VF `slot` of the PF on `rail` of host `index`: the addresses right after the PF's."""
    if not 0 <= slot < stride - 1:
        raise ValueError(f"VF slot {slot} is not one of the {stride - 1} VF slots of a PF")
    return format_ip(_rail_endpoint(cidr, kind, rails, rail, ordinal, index, stride, 1 + slot))


# --------------------------------------------------------------------------------------------------
# RoCE: /31 links between switches. Each link is numbered by its lower end (a leaf uplink port or
# a spine uplink port), whose position is fixed, so growth never renumbers an existing link.


def _p2p_region(cidr: Any) -> tuple[int, int]:
    base, size = _net(cidr)
    return base + size // 2, size // 2


def p2p_block(cidr: Any, ordinal: int) -> str:
    """The block of /31 links owned by pool `ordinal` (RoCE)."""
    return _cidr(*_block(*_p2p_region(cidr), MAX_POOLS, ordinal))


def _p2p(cidr: Any, ordinal: int, half: int, link: int) -> tuple[str, str]:
    base, size = _block(*_p2p_region(cidr), MAX_POOLS, ordinal)
    base, size = _block(base, size, 2, half)
    if 2 * link + 2 > size:
        raise ValueError(f"link {link} of pool {ordinal} does not fit its /31 block of {size} addresses")
    a = base + 2 * link
    return format_ip(a), format_ip(a + 1)


def leaf_uplink_p2p(cidr: Any, ordinal: int, leaf: int, uplink: int, uplinks: int) -> tuple[str, str]:
    """(upper end, leaf end) of uplink `uplink` of the pool's leaf number `leaf` (su x rails + rail)."""
    return _p2p(cidr, ordinal, 0, leaf * uplinks + uplink)


def spine_uplink_p2p(cidr: Any, ordinal: int, spine: int, uplink: int, uplinks: int) -> tuple[str, str]:
    """(core end, spine end) of uplink `uplink` of the pool's spine number `spine` (group x spines + j)."""
    return _p2p(cidr, ordinal, 1, spine * uplinks + uplink)


# --------------------------------------------------------------------------------------------------
# RoCE: switch loopbacks (a /32 each, the BGP router id), from railyard:fabric.compute.loopbackCidr.
# It is cut into LOOPBACK_BLOCKS blocks: block 0 for the tiers no pool owns (the cores, or the
# spines of a two-tier fabric), block p + 1 for pool p, where leaf su x rails + rail counts up from
# the block's start and spine group x spines + j counts down from its end, as the ASNs do. The
# first and last address of every block stay unused, so no loopback is a network or broadcast
# address of anything. Growth adds loopbacks and never moves one.

LOOPBACK_BLOCKS = 16


def _loopback(cidr: Any, block: int, offset: int, what: str) -> str:
    base, size = _block(*_net(cidr), LOOPBACK_BLOCKS, block)
    if not 1 <= offset <= size - 2:
        raise ValueError(f"{what} does not fit its loopback block of {size} addresses")
    return format_ip(base + offset)


def shared_loopback(cidr: Any, index: int) -> str:
    """Loopback of a switch no pool owns: core `index` (core i of plane p: i x planes + p, so more
    cores per plane never renumber), or spine `index` of a two-tier fabric."""
    return _loopback(cidr, 0, 1 + index, f"shared switch {index}")


def leaf_loopback(cidr: Any, ordinal: int, leaf: int) -> str:
    """Loopback of the pool's leaf number `leaf` (su x rails + rail)."""
    return _loopback(cidr, ordinal + 1, 1 + leaf, f"leaf {leaf} of pool {ordinal}")


def pool_spine_loopback(cidr: Any, ordinal: int, spine: int) -> str:
    """Loopback of the pool's spine number `spine` (group x spines + j) of a three-tier fabric."""
    base, size = _block(*_net(cidr), LOOPBACK_BLOCKS, ordinal + 1)
    return _loopback(cidr, ordinal + 1, size - 2 - spine, f"spine {spine} of pool {ordinal}")


def loopback_need(shared: int, per_pool: int) -> int:
    """Smallest loopback network for `shared` switches no pool owns and at most `per_pool` in a pool."""
    return LOOPBACK_BLOCKS * next_pow2(max(shared, per_pool, 1) + 2)


# --------------------------------------------------------------------------------------------------
# RoCE: BGP ASNs (RFC 7938 style: every leaf its own ASN, the spines of a group one ASN, the cores
# one ASN), numbered upward from asnBase inside the private range asnBase falls in.


def asn_top(asn_base: int) -> int:
    """The last private ASN of the range asnBase is in."""
    for lo, hi in ASN_PRIVATE_RANGES:
        if lo <= asn_base <= hi:
            return hi
    raise ValueError(f"asnBase {asn_base} is not in a private ASN range (RFC 6996)")


def asn_pool_block(asn_base: int) -> int:
    """ASNs each pool owns: the span from asnBase to the end of its range, in MAX_POOLS + 1 blocks."""
    return (asn_top(asn_base) - asn_base + 1) // (MAX_POOLS + 1)


def core_asn(asn_base: int) -> int:
    return asn_base


def spine_asn(asn_base: int) -> int:
    """The ASN all spines of a two-tier fabric share."""
    return asn_base + 1


def leaf_asn(asn_base: int, ordinal: int, leaf: int) -> int:
    """The pool's leaf number `leaf` (su x rails + rail), counting up from its block start."""
    block = asn_pool_block(asn_base)
    if leaf >= block:
        raise ValueError(f"leaf {leaf} of pool {ordinal} is past its block of {block} ASNs")
    return asn_base + (ordinal + 1) * block + leaf


def spine_group_asn(asn_base: int, ordinal: int, group: int) -> int:
    """The ASN shared by the spines of the pool's spine group `group`, counting down from its block end."""
    block = asn_pool_block(asn_base)
    if group >= block:
        raise ValueError(f"spine group {group} of pool {ordinal} is past its block of {block} ASNs")
    return asn_base + (ordinal + 2) * block - 1 - group


# --------------------------------------------------------------------------------------------------
# InfiniBand partitions


def partition_key(position: int, explicit: int | None = None) -> int:
    """The pkey of the tenant at `position` in railyard:tenants: its own, else 0x8001, 0x8002, ...

    0x8000 is the full-membership bit; 0x7fff/0xffff is the default partition and never assigned.
    """
    if explicit is not None:
        return explicit
    if not 0 <= position < 0x7FFE:
        raise ValueError(f"no partition key for tenant {position}")
    return 0x8000 | (position + 1)


# --------------------------------------------------------------------------------------------------
# Sizing: how large each network must be. Validation calls these (spec/rules.py), the planner obeys them.


@dataclass(frozen=True)
class PoolAddressing:
    """What addressing needs to know about one pool."""

    name: str
    ordinal: int
    count: int
    vms_per_host: int = 0
    vfs_per_vm: int = 0
    rails: int = 0  # compute NICs per host

    @property
    def host_stride(self) -> int:
        return host_stride(self.vms_per_host)

    @property
    def rail_stride(self) -> int:
        return rail_stride(self.vms_per_host, self.vfs_per_vm, self.rails)


def block_need(count: int, stride: int) -> int:
    """Addresses a pool block needs for `count` hosts taking `stride` addresses each."""
    return BLOCK_HEAD + count * stride + BLOCK_TAIL


def host_network_need(pools: Sequence[PoolAddressing]) -> int:
    """Smallest management or storage network (addresses, a power of two) for these pools."""
    need = max((block_need(p.count, p.host_stride) for p in pools), default=BLOCK_HEAD + BLOCK_TAIL)
    return MAX_POOLS * next_pow2(need)


def compute_network_need(pools: Sequence[PoolAddressing], kind: str, rails: int,
                         p2p_links: Sequence[tuple[int, int]] = ()) -> int:
    """Smallest compute network for these pools.

    p2p_links (RoCE): per pool, (leaf uplinks, spine uplinks) that need a /31, from the fabric plan.
    """
    rail_block = max((block_need(p.count, p.rail_stride) for p in pools if p.rails),
                     default=BLOCK_HEAD + BLOCK_TAIL)
    rails_region = rail_slots(max(rails, 1)) * MAX_POOLS * next_pow2(rail_block)
    if kind != "roce":
        return rails_region
    p2p_block_size = 2 * next_pow2(2 * max((max(a, b) for a, b in p2p_links), default=1))
    return 2 * max(rails_region, MAX_POOLS * p2p_block_size)


@dataclass(frozen=True)
class AddressNeed:
    """One network's size against what the spec asks of it."""

    path: str          # config path of the CIDR, e.g. railyard:fabric.compute.cidr
    network: str       # management | storage | compute
    cidr: str | None   # what the stack gives (None: not set or invalid)
    needed: int        # addresses, a power of two
    detail: str        # why, for a person

    @property
    def prefixlen(self) -> int:
        """The longest prefix that is large enough."""
        return prefix_for(self.needed)

    @property
    def ok(self) -> bool:
        return self.cidr is not None and _net(self.cidr)[1] >= self.needed


class FabricSizes(Protocol):
    """What the sizing reads of the spec's FabricPlan (railyard.model.fabric, which imports this
    module, so it is not named here)."""

    def p2p_links_per_pool(self) -> list[tuple[int, int]]: ...
    def asns_needed_per_pool(self) -> int: ...
    def loopbacks_needed(self) -> tuple[int, int]: ...


def pools_for_addressing(spec: Spec, catalog: Catalog | None = None) -> list[PoolAddressing]:
    """The spec's pools as addressing sees them (unknown SKUs count zero rails)."""
    if catalog is None:
        from railyard.model.catalog import load_catalog

        catalog = load_catalog()
    virtual = getattr(spec, "layout", None) == "virtual"
    out = []
    for ordinal, pool in enumerate(spec.node_pools):
        sku = catalog.nodes.get(pool.sku) if pool.sku is not None else None
        rails = len(sku.compute_nics) if sku is not None else 0
        vms = (pool.vms_per_host or 0) if virtual else 0
        vfs = (pool.vm.vfs or 0) if (virtual and pool.vm is not None) else 0
        out.append(PoolAddressing(pool.name or f"#{ordinal}", ordinal, pool.count or 0, vms, vfs, rails))
    return out


def address_needs(spec: Spec, catalog: Catalog | None = None, fabric_plan: FabricSizes | None = None
                  ) -> list[AddressNeed]:
    """The size each of the spec's networks must have, with the reason (a RoCE fabric's switch
    loopbacks too, once its fabric is planned).

    fabric_plan: the spec's FabricPlan, planned once by the caller (None where it could not be
    planned: a RoCE fabric's /31 links are then left out of the compute network's size).
    """
    pools = pools_for_addressing(spec, catalog)
    fabric = spec.fabric
    out = []
    hosts = sum(p.count for p in pools)
    for name in ("management", "storage"):
        net = getattr(getattr(fabric, name, None), "cidr", None)
        worst = max(pools, key=lambda p: block_need(p.count, p.host_stride), default=None)
        detail = (f"{MAX_POOLS} pool blocks of at least {next_pow2(block_need(worst.count, worst.host_stride))} "
                  f"addresses (pool {worst.name}: {worst.count} hosts x {worst.host_stride} + "
                  f"{BLOCK_HEAD + BLOCK_TAIL} reserved)") if worst else "no pools"
        out.append(AddressNeed(f"railyard:fabric.{name}.cidr", name, str(net) if net else None,
                               host_network_need(pools), detail))
    compute = fabric.compute
    rails = max((p.rails for p in pools), default=0)
    kind = compute.kind or "infiniband"
    p2p: list[tuple[int, int]] = []
    if kind == "roce" and hosts and fabric_plan is not None:
        p2p = fabric_plan.p2p_links_per_pool()
    worst = max((p for p in pools if p.rails), key=lambda p: block_need(p.count, p.rail_stride), default=None)
    detail = (f"{rail_slots(max(rails, 1))} rail subnets of {MAX_POOLS} pool blocks of at least "
              f"{next_pow2(block_need(worst.count, worst.rail_stride))} addresses (pool {worst.name}: "
              f"{worst.count} hosts x {worst.rail_stride} + {BLOCK_HEAD + BLOCK_TAIL} reserved)"
              if worst else "no compute NICs")
    if kind == "roce":
        detail += "; the upper half holds the /31 switch links"
        if p2p:
            detail += f" ({max(max(a, b) for a, b in p2p)} links in the largest pool half-block)"
    out.append(AddressNeed("railyard:fabric.compute.cidr", "compute",
                           str(compute.cidr) if compute.cidr else None,
                           compute_network_need(pools, kind, rails, p2p), detail))
    if kind == "roce" and hosts and fabric_plan is not None:
        shared, per_pool = fabric_plan.loopbacks_needed()
        loopbacks = getattr(compute, "loopback_cidr", None)
        out.append(AddressNeed(
            "railyard:fabric.compute.loopbackCidr", "loopback", str(loopbacks) if loopbacks else None,
            loopback_need(shared, per_pool),
            f"{LOOPBACK_BLOCKS} blocks of at least {next_pow2(max(shared, per_pool, 1) + 2)} addresses: one per "
            f"switch, {shared} in the shared block (cores or two-tier spines), up to {per_pool} in a pool's "
            f"(its leaves and spines), + 2 reserved"))
    return out


def asn_need(spec: Spec, fabric_plan: FabricSizes | None) -> tuple[int, int] | None:
    """(ASNs the largest pool needs, ASNs each pool block holds) for a RoCE fabric, else None."""
    compute = spec.fabric.compute
    if compute.kind != "roce" or compute.asn_base is None or fabric_plan is None:
        return None
    return fabric_plan.asns_needed_per_pool(), asn_pool_block(compute.asn_base)


def address_problems(spec: Spec, catalog: Catalog | None = None, fabric_plan: FabricSizes | None = None
                     ) -> list[Problem]:
    """Every network too small for the spec, and too many pools, as Problems for SpecError.

    fabric_plan: as for address_needs; the caller plans the fabric once and hands it to both.
    """
    problems = []
    if len(spec.node_pools) > MAX_POOLS:
        problems.append(Problem("railyard:nodePools", f"{len(spec.node_pools)} pools", f"at most {MAX_POOLS}",
                                "every network is cut into one block per pool; merge pools of the same SKU"))
        return problems
    for need in address_needs(spec, catalog, fabric_plan):
        if need.cidr is not None and not need.ok:
            # Past a /8 no private range holds it, and past /0 the prefix itself reads as nonsense
            # ("a /-1"): what is wrong then is the count behind it, so the detail says which.
            allowed = (f"a /{need.prefixlen} or larger ({need.needed} addresses)" if need.prefixlen >= 8 else
                       f"{need.needed} addresses, more than the largest private IPv4 range holds (10.0.0.0/8: "
                       f"{1 << 24}); the counts behind it are too large")
            problems.append(Problem(need.path, need.cidr, allowed, need.detail))
    asns = asn_need(spec, fabric_plan)
    if asns is not None and asns[0] > asns[1]:
        problems.append(Problem("railyard:fabric.compute.asnBase", str(spec.fabric.compute.asn_base),
                                f"a base leaving {asns[0] * (MAX_POOLS + 1)} private ASNs above it",
                                f"a pool needs {asns[0]} ASNs (one per leaf, one per spine group) but its block "
                                f"holds {asns[1]}; use a 32-bit base such as 4200000000"))
    return problems
