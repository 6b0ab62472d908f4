"""A host's hardware facts against its pool's catalog SKU, and drift between two discoveries.

The hosts driver reads each server with sysfs_discovery.host_facts (run there by
railyard.model.bundle) and, before anything is changed, compares the facts with the SKU the
pool names. Every difference is a Mismatch that names the host and says what differs, in the
words an operator would use:

    gpu-07: 7 GPUs found, dgx-h100 has 8; none under the switch of mlx5_6 (NUMA 1)
    gpu-03: mlx5_4 link down

GPUs are not compared by name: a host that lost GPU4 calls its fifth GPU GPU4, so names shift.
Each GPU is placed instead by the compute NICs nearest it in the PCIe tree (pcie.py, the one
definition of the classes): those under the same switch (PIX or PXB), else those under the same
host bridge (PHB), else none, and by its NUMA node. The catalog's PCIe bridges give the same for
the SKU, so a missing GPU is named by where it should have been.

A fact that is unknown (None: the host's kernel does not show it, or the SKU does not say) is no
mismatch; not_checked() lists such facts so a preview can say what the check could not see.
drift() compares two discoveries of one host, for a preview after the first.

Pure: stdlib and the model (catalog, pcie) only; nothing here reads a host.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Literal

from railyard.model import pcie
from railyard.model.catalog import NodeSku
from railyard.model.spec.types import Pins
from railyard.model.sysfs_discovery import link_gts, natural_key as _natural, parse_cpulist

# MemTotal is below the installed memory by what firmware reserves and the kernel keeps for itself
# (its image, the page structures: about 1.6% of memory alone, crash kernel): some 2% on large
# servers. More than this below (or above) the SKU's memory is a mismatch: on a 2 TiB node one
# missing 64 GiB DIMM is 3.1% plus that overhead.
MEMORY_TOLERANCE = 0.04
# Drives are sold in decimal TB; the namespace size a drive shows differs a little from its label.
NVME_SIZE_TOLERANCE = 0.05
# Memory changes smaller than this between two discoveries are not drift (kernel updates move it).
DRIFT_MEMORY_TOLERANCE = 0.01
# Compute fabric kinds (spec: fabric.compute.kind) and the link layer their NICs run.
FABRIC_LINK = {"infiniband": "infiniband", "roce": "ethernet"}
SWITCH, HOST_BRIDGE = "switch", "host bridge"
UNKNOWN_HERE = "unknown on the host"


# A mismatch's kind by the last part of its path (`what`), for the paths whose kind it alone gives;
# the others are given where they are found. Kinds are stable: `railyard verify --json` prints them.
KIND_BY_FIELD = {
    "pci_bus_id": "pci-address", "pci_id": "pci-id", "numa": "numa", "link_layer": "link-layer",
    "netdev": "netdev-name", "state": "nic-down", "speed": "nic-speed", "pcie_link": "pcie-degraded",
    "fw_ver": "firmware", "nvidia_driver": "driver-version", "release": "kernel-version",
    "numa_nodes": "numa", "cpulist": "numa", "count": "cpus", "model": "cpus", "memory": "memory",
}
KINDS = ("gpu-missing", "gpu-placement", "nic-missing", "unknown-device", "nvme", *dict.fromkeys(KIND_BY_FIELD.values()))


@dataclass(frozen=True)
class Mismatch:
    """One difference between a host and its SKU (or its stack's pins). `what` is a path (gpus,
    nics.mlx5_4.state); `kind` one of KINDS; planned and found, where one value says each."""

    host: str
    what: str
    message: str
    kind: str = ""
    planned: str | None = None
    found: str | None = None

    def __str__(self) -> str:
        return f"{self.host}: {self.message}"


def check(host: str, facts: dict, sku: NodeSku, *, fabric: str | None = None,
          speed_gbps: int | None = None, links_up: Iterable[str] | None = None,
          pins: Pins = Pins()) -> list[Mismatch]:
    """Every difference between the facts a host gave and the SKU, in a fixed order.

    fabric      the pool's compute fabric kind (infiniband | roce), when it has one: the link layer
                a VPI compute NIC must run; without it the SKU's NIC class decides
    speed_gbps  the compute fabric's speed, when the stack sets one below the NICs' own
    links_up    the NICs whose link must be up (default: the SKU's compute NICs); a storage port
                left uncabled is no mismatch unless named here
    pins        the firmware, driver and kernel versions the stack pins
    """
    return _Check(host, facts, sku, fabric, speed_gbps, links_up, pins).run().mismatches


def not_checked(host: str, facts: dict, sku: NodeSku, *, fabric: str | None = None,
                speed_gbps: int | None = None, links_up: Iterable[str] | None = None,
                pins: Pins = Pins()) -> list[str]:
    """What check() could not compare, one line per kind of fact: unknown on the host, or not in the SKU."""
    return _Check(host, facts, sku, fabric, speed_gbps, links_up, pins).run().unchecked_lines()


# --------------------------------------------------------------------------------------------------
# The check


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _and(names: Iterable[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _fmt(x: float) -> str:
    return f"{x:g}"


def _split_link(text: str) -> tuple[str | None, int | None]:
    """The catalog's "32.0 GT/s PCIe x16" as the kernel's two files give it: ("32.0 GT/s PCIe", 16)."""
    speed, _, width = text.rpartition(" x")
    return (speed or None), (int(width) if width.isdigit() else None)


def _show_link(speed: str | None, width: int | None) -> str:
    gts = link_gts(speed)
    return " ".join(p for p in ((f"{gts:g} GT/s" if gts is not None else None), (f"x{width}" if width else None)) if p)


def _tree(facts: dict) -> pcie.PcieTree | None:
    nodes = ((facts.get("pci") or {}).get("tree")) or []
    try:
        return pcie.PcieTree(pcie.PcieNode(n["id"], n["kind"], n.get("parent"), n.get("numa")) for n in nodes)
    except (pcie.PcieError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class _Place:
    """Where a GPU sits: under the switch (or host bridge) of some compute NICs, on a NUMA node."""

    near: str | None  # SWITCH | HOST_BRIDGE | None
    nics: tuple[str, ...]
    numa: int | None

    def where(self) -> str:
        numa = f"NUMA {self.numa}" if self.numa is not None else ""
        if self.near:
            return f"under the {self.near} of {_and(self.nics)}" + (f" ({numa})" if numa else "")
        return f"on {numa}" if numa else "elsewhere"


def _place(distance, nics: list[str], numa: int | None) -> _Place:
    classes = {n: c for n in nics if (c := distance(n)) is not None}
    if classes:
        best = min(classes.values(), key=pcie.CLASSES.index)
        near = {pcie.PIX: SWITCH, pcie.PXB: SWITCH, pcie.PHB: HOST_BRIDGE}.get(best)
        if near:
            return _Place(near, tuple(sorted((n for n, c in classes.items() if c == best), key=_natural)), numa)
    return _Place(None, (), numa)


class _Check:
    def __init__(self, host: str, facts: dict, sku: NodeSku, fabric: str | None, speed_gbps: int | None,
                 links_up: Iterable[str] | None, pins: Pins = Pins()):
        if fabric is not None and fabric not in FABRIC_LINK:
            raise ValueError(f"fabric {fabric!r} is not one of {', '.join(FABRIC_LINK)}")
        self.host, self.facts, self.sku = host, facts, sku
        self.fabric, self.speed_gbps = fabric, speed_gbps
        self.links_up = set(links_up) if links_up is not None else {n.rdma for n in sku.compute_nics}
        self.pins = pins
        self.mismatches: list[Mismatch] = []
        self.unchecked: dict[tuple[str, str], list[str]] = {}

    def bad(self, what: str, message: str, kind: str | None = None, planned: str | None = None,
            found: str | None = None) -> None:
        kind = kind or KIND_BY_FIELD.get(what.rsplit(".", 1)[-1]) or what.split(".", 1)[0]
        self.mismatches.append(Mismatch(self.host, what, message, kind, planned, found))

    def skip(self, topic: str, reason: str, subject: str | None = None) -> None:
        names = self.unchecked.setdefault((topic, reason), [])
        if subject is not None:
            names.append(subject)

    def unknown_here(self) -> str:
        return UNKNOWN_HERE

    def sku_silent(self) -> str:
        return f"{self.sku.id} does not say"

    def unchecked_lines(self) -> list[str]:
        out = []
        for (topic, reason), names in self.unchecked.items():
            out.append(f"{self.host}: {topic} not checked ({reason})" + (f": {', '.join(names)}" if names else ""))
        return out

    def run(self) -> "_Check":
        self.gpus()
        self.nics()
        self.pcie_links()
        self.numa()
        self.cpus()
        self.memory()
        self.nvme()
        self.versions()
        return self

    # GPUs ----------------------------------------------------------------------------------------

    def gpus(self) -> None:
        sku, found = self.sku, self.facts.get("gpus")
        if found is None:
            self.skip("GPUs", "no PCI facts")
            return
        found_nics = {n["name"] for n in self.facts.get("nics") or []}
        compute = [n.rdma for n in sku.compute_nics if n.rdma in found_nics]
        tree = _tree(self.facts)
        use_numa = all(g.get("numa") is not None for g in found) and all(g.numa is not None for g in sku.gpus)
        if not use_numa:
            self.skip("GPU NUMA nodes", self.unknown_here() if any(g.get("numa") is None for g in found)
                      else self.sku_silent())

        def sku_distance(gpu):
            return lambda nic: sku.distance(gpu, nic)

        def found_distance(gpu):
            def d(nic):
                if tree is None or gpu not in tree or nic not in tree:
                    return None
                return pcie.distance_class(tree, gpu, nic)
            return d

        want = [_place(sku_distance(g.name), compute, g.numa if use_numa else None) for g in sku.gpus]
        got = [_place(found_distance(g["name"]), compute, g.get("numa") if use_numa else None) for g in found]
        want_n, got_n = Counter(want), Counter(got)
        details = []
        for place in list(dict.fromkeys(want + got)):
            w, g = want_n[place], got_n[place]
            if w == g:
                continue
            if g < w:
                details.append(f"none {place.where()}" if g == 0 and w == 1
                               else f"none of {w} {place.where()}" if g == 0 else f"{g} of {w} {place.where()}")
            else:
                details.append(f"{g} {place.where()}, where {sku.id} has " + ("none" if w == 0 else str(w)))
        if details:
            head = (f"{_plural(len(found), 'GPU')} found, {sku.id} has {len(sku.gpus)}" if len(found) != len(sku.gpus)
                    else f"{_plural(len(found), 'GPU')} found as {sku.id} has, placed differently")
            self.bad("gpus", head + "; " + ", ".join(details),
                     "gpu-missing" if len(found) < len(sku.gpus) else "gpu-placement",
                     planned=f"{len(sku.gpus)} GPUs", found=f"{len(found)} GPUs")
        else:
            # Same places: GPUs of one place pair up in bus order (the order nvidia-smi numbers them).
            by_place: dict[_Place, list[dict]] = {}
            for place, g in zip(got, found):
                by_place.setdefault(place, []).append(g)
            for place, spec in zip(want, sku.gpus):
                at = by_place[place].pop(0)
                if spec.pci_bus_id and at.get("bdf") and spec.pci_bus_id.lower() != at["bdf"].lower():
                    self.bad(f"gpus.{spec.name}.pci_bus_id",
                             f"{spec.name} is at {at['bdf']}, {sku.id}'s at {spec.pci_bus_id}")
        model = (sku.gpus[0].pci_vendor, sku.gpus[0].pci_device) if sku.gpus else (None, None)
        self.ids("GPUs", [(g["name"], g) for g in found], {g["name"]: model for g in found})

    def ids(self, what: str, found: list[tuple[str, dict]], want: dict[str, tuple[str | None, str | None]]) -> None:
        """PCI vendor:device of each device against the SKU's (where it knows them), one message per id."""
        wrong: dict[tuple[str, str], list[str]] = {}
        for name, f in found:
            if name not in want:
                continue
            vendor, device = want[name]
            if any(w and g and w.lower() != g.lower() for w, g in ((vendor, f.get("vendor")), (device, f.get("device")))):
                key = (f"{f.get('vendor')}:{f.get('device')}", f"{vendor or '?'}:{device or '?'}")
                wrong.setdefault(key, []).append(name)
        for (got, expected), names in wrong.items():
            one = len(names) == 1
            verb = "is" if one else "are"
            self.bad(f"{what.lower()}.{names[0]}.pci_id" if one else f"{what.lower()}.pci_id",
                     f"{_and(names)} {verb} {got}, {self.sku.id}'s {verb} {expected}")

    # NICs ----------------------------------------------------------------------------------------

    def expected_link(self, nic) -> tuple[str | None, str]:
        if self.fabric and nic.role == "compute" and nic.link not in ("infiniband", "ethernet"):
            return FABRIC_LINK[self.fabric], f"the compute fabric ({self.fabric}) needs {FABRIC_LINK[self.fabric]}"
        return nic.link_layer, f"{self.sku.id}'s is {nic.link_layer}"

    def nics(self) -> None:
        sku, found = self.sku, self.facts.get("nics")
        if found is None:
            self.skip("NICs", "no PCI facts")
            return
        by_name = {n["name"]: n for n in found}
        for spec in sku.nics:
            name = spec.rdma
            f = by_name.get(name)
            if f is None:
                where = f", NUMA {spec.numa}" if spec.numa is not None else ""
                self.bad(f"nics.{name}", f"{name} not found, {sku.id} has it ({spec.role}{where})", "nic-missing")
                continue
            if spec.pci_bus_id and f.get("bdf") and spec.pci_bus_id.lower() != f["bdf"].lower():
                self.bad(f"nics.{name}.pci_bus_id", f"{name} is at {f['bdf']}, {sku.id}'s at {spec.pci_bus_id}")
            if spec.numa is not None and f.get("numa") is not None and spec.numa != f["numa"]:
                self.bad(f"nics.{name}.numa", f"{name} is on NUMA {f['numa']}, {sku.id}'s on NUMA {spec.numa}")
            self.link(spec, f)
        self.ids("NICs", [(n["name"], n) for n in found], {n.rdma: (n.pci_vendor, n.pci_device) for n in sku.nics})
        known = {n.rdma for n in sku.nics}
        for f in found:
            if f["name"] not in known:
                numa = f", NUMA {f['numa']}" if f.get("numa") is not None else ""
                self.bad(f"nics.{f['name']}", f"{f['name']} found ({f.get('bdf')}{numa}), {sku.id} has no such NIC",
                         "unknown-device")

    def link(self, spec, f: dict) -> None:
        name = spec.rdma
        want, says = self.expected_link(spec)
        layer = f.get("link_layer")
        if layer is None:
            self.skip("link layer", self.unknown_here(), name)
        elif want is None:
            self.skip("link layer", self.sku_silent(), name)
        elif layer != want:
            self.bad(f"nics.{name}.link_layer", f"{name} is {layer}, {says}")
        # The SKU's netdev name holds for the link mode its class implies (ib... or en...).
        class_link = spec.class_link or spec.link
        if spec.netdev and f.get("netdev") and f["netdev"] != spec.netdev and layer in (None, class_link):
            self.bad(f"nics.{name}.netdev", f"{name}'s netdev is {f['netdev']}, {self.sku.id}'s is {spec.netdev}")
        up = self.link_up(f)
        if name in self.links_up:
            if up is None:
                self.skip("link state", self.unknown_here(), name)
            elif up is not True:
                self.bad(f"nics.{name}.state", up)
        if up is not None and up is not True:
            return  # a link that is down has no speed worth comparing
        if self.speed_gbps and spec.role == "compute":
            want_speed, whose = self.speed_gbps, "the compute fabric"
        else:
            want_speed, whose = spec.speed_gbps, f"{self.sku.id}'s"
        got = f.get("speed_gbps")
        if got is None:
            self.skip("link speed", self.unknown_here(), name)
        elif want_speed is None:
            self.skip("link speed", self.sku_silent(), name)
        elif got != want_speed:
            self.bad(f"nics.{name}.speed", f"{name} runs at {_fmt(got)} Gb/s, {whose} at {want_speed}",
                     planned=f"{want_speed} Gb/s", found=f"{_fmt(got)} Gb/s")

    def link_up(self, f: dict) -> Literal[True] | str | None:
        """True when up, None when unknown, else the message saying how it is not."""
        name, state, phys = f["name"], f.get("state"), f.get("phys_state")
        # An interface configured up tells the link first (no carrier: no cable or no peer),
        # whatever the RDMA port file says; one not configured yet (a server before its rails are
        # set up) says nothing about the cable, so the port state decides.
        oper, carrier = f.get("operstate"), f.get("carrier")
        if f.get("admin_up") and (oper in ("down", "lowerlayerdown", "notpresent") or carrier == 0):
            return f"{name} link down ({f.get('netdev')} {oper or 'has no carrier'})"
        if state is None and (oper in ("down", "lowerlayerdown", "notpresent") or carrier == 0):
            return f"{name} link down ({f.get('netdev')} {oper or 'has no carrier'})"
        if state is not None:
            word = state.upper()
            if word == "ACTIVE":
                return True
            physical = f" (physical state {phys})" if phys and phys.lower() != "linkup" else ""
            if word == "DOWN":
                return f"{name} link down{physical}"
            hint = " (up, but no subnet manager has brought it to ACTIVE)" if word == "INIT" else physical
            return f"{name} link {word}, not ACTIVE{hint}"
        if oper == "up" or carrier == 1:
            return True
        return None

    # PCIe links and versions -----------------------------------------------------------------------

    def pcie_links(self) -> None:
        """Each GPU's and NIC's PCIe link as trained against what it should train at: the SKU's
        link where the catalog gives it, else the device's own maximum.

        A GPU's link speed is left alone: NVIDIA GPUs lower it when idle to save power (nvidia-smi
        shows "PCIe Generation Current" below "Max" on an idle healthy GPU), so only its width
        tells a bad slot or riser. A NIC trains at full speed whenever its link is up.
        """
        sku = self.sku
        gpu_link = sku.gpus[0].pcie_link if sku.gpus else None
        nic_links = {n.rdma: n.pcie_link for n in sku.nics}
        for kind, found, judge_speed in (("gpus", self.facts.get("gpus") or [], False),
                                         ("nics", self.facts.get("nics") or [], True)):
            for f in found:
                link = f.get("pcie_link")
                if not link:
                    self.skip("PCIe links", self.unknown_here(), f["name"])
                    continue
                planned = gpu_link if kind == "gpus" else nic_links.get(f["name"])
                want_speed, want_width = _split_link(planned) if planned else (link.get("max_speed"), link.get("max_width"))
                whose = f"{sku.id}'s" if planned else "its maximum"
                short = []
                if want_width and link.get("width") and link["width"] < want_width:
                    short.append("width")
                gts, want_gts = link_gts(link.get("speed")), link_gts(want_speed)
                if judge_speed and gts is not None and want_gts is not None and gts < want_gts:
                    short.append("speed")
                if not short:
                    continue
                got = _show_link(link.get("speed") if judge_speed else None, link.get("width"))
                want = _show_link(want_speed if judge_speed else None, want_width)
                self.bad(f"{kind}.{f['name']}.pcie_link",
                         f"{f['name']} ({f.get('bdf')}) PCIe link at {got}, {whose} {want}", planned=want, found=got)

    def versions(self) -> None:
        """Firmware, driver and kernel against the versions the stack pins."""
        pins = self.pins
        if pins.nic_firmware:
            for f in self.facts.get("nics") or []:
                got = f.get("fw_ver")
                if got is None:
                    self.skip("NIC firmware", self.unknown_here(), f["name"])
                elif got != pins.nic_firmware:
                    self.bad(f"nics.{f['name']}.fw_ver", f"{f['name']} runs firmware {got}, the stack pins "
                             f"{pins.nic_firmware}", planned=pins.nic_firmware, found=got)
        for what, pin, got, label in (
                ("nvidia_driver", pins.nvidia_driver, self.facts.get("nvidia_driver"), "NVIDIA driver"),
                ("kernel.release", pins.kernel, (self.facts.get("kernel") or {}).get("release"), "kernel")):
            if not pin:
                continue
            if got is None:
                self.skip(label, self.unknown_here())
            elif got != pin:
                self.bad(what, f"{label} {got}, the stack pins {pin}", planned=pin, found=got)

    # NUMA, CPUs, memory --------------------------------------------------------------------------

    def numa(self) -> None:
        sku, found = self.sku, self.facts.get("numa_nodes")
        if found is None:
            self.skip("NUMA nodes", self.unknown_here())
            return
        got_ids = [n["id"] for n in found]
        want_ids = [n.id for n in sku.numa_nodes]
        if len(found) != len(sku.numa_nodes):
            self.bad("numa_nodes", f"{_plural(len(found), 'NUMA node')} found, {sku.id} has {len(want_ids)}")
            return
        if sorted(got_ids) != sorted(want_ids):
            self.bad("numa_nodes", f"NUMA nodes {', '.join(map(str, got_ids))} found, "
                                   f"{sku.id}'s are {', '.join(map(str, want_ids))}")
            return
        by_id = {n["id"]: n for n in found}
        for spec in sku.numa_nodes:
            got = by_id[spec.id].get("cpulist")
            if got is None:
                self.skip("NUMA CPU lists", self.unknown_here(), f"NUMA {spec.id}")
            elif spec.cpulist is None:
                self.skip("NUMA CPU lists", self.sku_silent(), f"NUMA {spec.id}")
            elif set(parse_cpulist(got)) != set(spec.cpus() or ()):
                self.bad(f"numa_nodes.{spec.id}.cpulist",
                         f"NUMA {spec.id} has CPUs {got or 'none'}, {sku.id}'s has {spec.cpulist}")

    def cpus(self) -> None:
        sku, cpus = self.sku, self.facts.get("cpus") or {}
        count = cpus.get("count")
        if count is None and cpus.get("online"):
            count = len(parse_cpulist(cpus["online"]))
        want = sku.cpus.threads
        if count is None:
            self.skip("CPU count", self.unknown_here())
        elif want is None:
            self.skip("CPU count", self.sku_silent())
        elif count != want:
            hint = " (SMT off?)" if count * 2 == want else ""
            self.bad("cpus.count", f"{count} CPUs found, {sku.id} has {want}{hint}")
        model, want_model = cpus.get("model"), sku.cpus.model
        numbers = re.findall(r"[a-z]*\d{3,}[a-z0-9]*", (want_model or "").lower())
        if model is None:
            self.skip("CPU model", self.unknown_here())
        elif not numbers:
            self.skip("CPU model", f"{sku.id}'s names no model number")
        else:
            tokens = set(re.split(r"[^a-z0-9]+", model.lower()))
            if not set(numbers) <= tokens:
                self.bad("cpus.model", f"CPU is {model}, {sku.id}'s is {want_model}")

    def memory(self) -> None:
        sku, kb = self.sku, self.facts.get("memory_kb")
        if kb is None:
            self.skip("memory", self.unknown_here())
            return
        if sku.memory_gib is None:
            self.skip("memory", self.sku_silent())
            return
        gib = kb / 2**20
        if abs(gib - sku.memory_gib) > MEMORY_TOLERANCE * sku.memory_gib:
            side = "below" if gib < sku.memory_gib else "above"
            self.bad("memory", f"{gib:.0f} GiB of memory found, {sku.id} has {sku.memory_gib} "
                               f"(more than {MEMORY_TOLERANCE:.0%} {side}; firmware and the kernel keep about 2%)")

    # NVMe ----------------------------------------------------------------------------------------

    def nvme(self) -> None:
        sku, drives = self.sku, self.facts.get("nvme")
        if drives is None:
            self.skip("NVMe drives", self.unknown_here())
            return
        if sku.nvme is None:
            self.skip("NVMe drives", self.sku_silent())
            return
        # Groups of one size are counted together (an os and a data group of the same drive).
        groups: list[list] = []
        for g in sku.nvme:
            for merged in groups:
                if abs(merged[0] - g.size_tb) <= NVME_SIZE_TOLERANCE * merged[0]:
                    merged[1] += g.count
                    merged[2].append(g.role)
                    break
            else:
                groups.append([g.size_tb, g.count, [g.role]])
        counts = [0] * len(groups)
        other = []
        for d in drives:
            size = d.get("size_bytes")
            if size is None:
                self.skip("NVMe drive sizes", self.unknown_here(), d["name"])
                continue
            tb = size / 1e12
            for i, (want_tb, _, _) in enumerate(groups):
                if abs(tb - want_tb) <= NVME_SIZE_TOLERANCE * want_tb:
                    counts[i] += 1
                    break
            else:
                other.append(f"{d['name']} ({tb:.2f} TB)")
        for (size_tb, want, roles), got in zip(groups, counts):
            if got != want:
                role = " and ".join(dict.fromkeys(roles))
                self.bad(f"nvme.{'+'.join(dict.fromkeys(roles))}",
                         f"{got} NVMe {role} drive{'' if got == 1 else 's'} found, {sku.id} has {want} "
                         f"(of {_fmt(size_tb)} TB)")
        if other:
            self.bad("nvme.other", f"{_and(other)} found, {sku.id} has no NVMe drive of "
                                   + ("that size" if len(other) == 1 else "those sizes"))


# --------------------------------------------------------------------------------------------------
# Drift


def drift(old: dict, new: dict, *, host: str | None = None, settings: bool = False) -> list[str]:
    """What changed in a host's hardware between two discoveries, one short line per change.

    Hardware only by default: GPUs, NICs (address, NUMA, netdev, link layer, state, speed), PCI
    functions, NUMA nodes, CPUs, memory beyond DRIFT_MEMORY_TOLERANCE, NVMe drives. settings=True
    adds what tuning changes on purpose: the kernel (release, command line), hugepages, MTUs, VFs.
    Counters that move on their own (free hugepages) are never compared.
    """
    out: list[str] = []
    say = out.append

    # GPUs, by PCI address (stable on one host; names shift when one is gone).
    og, ng = old.get("gpus"), new.get("gpus")
    if (og is None) != (ng is None):
        say("GPUs " + ("unknown now" if ng is None else "known now"))
    elif og is not None and ng is not None:  # (both known: the test above)
        ob, nb = {g["bdf"]: g for g in og}, {g["bdf"]: g for g in ng}
        gone = [f"{b} ({ob[b]['name']}" + (f", NUMA {ob[b]['numa']}" if ob[b].get("numa") is not None else "") + ")"
                for b in ob if b not in nb]
        added = [f"{b}" + (f" (NUMA {nb[b]['numa']})" if nb[b].get("numa") is not None else "")
                 for b in nb if b not in ob]
        if gone or added:
            say(f"GPUs {len(og)} -> {len(ng)}" + (f"; gone {', '.join(gone)}" if gone else "")
                + (f"; new {', '.join(added)}" if added else ""))
        for b in ob:
            if b in nb:
                _changes(say, f"GPU at {b}", ob[b], nb[b], (("numa", "NUMA"), ("device", "device id")))

    # NICs, by RDMA name.
    on, nn = old.get("nics"), new.get("nics")
    if (on is None) != (nn is None):
        say("NICs " + ("unknown now" if nn is None else "known now"))
    elif on is not None and nn is not None:  # (both known: the test above)
        ob, nb = {n["name"]: n for n in on}, {n["name"]: n for n in nn}
        gone = [n for n in ob if n not in nb]
        added = [n for n in nb if n not in ob]
        if gone or added:
            say("NICs" + (f" gone: {', '.join(gone)}" if gone else "") + (";" if gone and added else "")
                + (f" new: {', '.join(added)}" if added else ""))
        fields = [("bdf", "address"), ("numa", "NUMA"), ("netdev", "netdev"), ("link_layer", "link layer"),
                  ("state", "link"), ("operstate", "netdev state"), ("speed_gbps", "speed")]
        if settings:
            fields += [("mtu", "MTU"), ("sriov_numvfs", "VFs")]
        for name in ob:
            if name in nb:
                _changes(say, name, ob[name], nb[name], fields)

    # Other PCI functions (VFs are not in the facts; GPUs and NICs are said above).
    of = (old.get("pci") or {}).get("functions")
    nf = (new.get("pci") or {}).get("functions")
    if of is not None and nf is not None:
        said = {d.get("bdf") for facts in (old, new) for kind in ("gpus", "nics") for d in facts.get(kind) or ()}
        gone = [b for b in of if b not in nf and b not in said]
        added = [b for b in nf if b not in of and b not in said]
        for word, items in (("gone", gone), ("new", added)):
            if items:
                shown = ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")
                say(f"PCI functions {word}: {shown}")

    # NUMA nodes, CPUs, memory.
    onodes, nnodes = old.get("numa_nodes"), new.get("numa_nodes")
    if onodes is not None and nnodes is not None:
        ob, nb = {n["id"]: n for n in onodes}, {n["id"]: n for n in nnodes}
        if sorted(ob) != sorted(nb):
            say(f"NUMA nodes {len(ob)} -> {len(nb)}")
        for i in ob:
            if i in nb:
                _changes(say, f"NUMA {i}", ob[i], nb[i], (("cpulist", "CPUs"),))
                _memory_change(say, f"NUMA {i} memory", ob[i].get("memory_kb"), nb[i].get("memory_kb"))
                if settings:
                    _hugepage_changes(say, f"NUMA {i} hugepages", ob[i].get("hugepages"), nb[i].get("hugepages"))
    ocpu, ncpu = old.get("cpus") or {}, new.get("cpus") or {}
    _changes(say, "CPU", ocpu, ncpu, (("count", "count"), ("model", "model")))
    _memory_change(say, "memory", old.get("memory_kb"), new.get("memory_kb"))

    # NVMe drives, by (size, model): names are given in probe order and may move between boots.
    od, nd = old.get("nvme"), new.get("nvme")
    if od is not None and nd is not None:
        key = lambda d: (d.get("size_bytes"), d.get("model"))  # noqa: E731
        oc, nc = Counter(map(key, od)), Counter(map(key, nd))
        if oc != nc:
            def show(c: Counter) -> str:
                return ", ".join(f"{n} x {_size(s)}" + (f" {m}" if m else "") for (s, m), n in sorted(
                    c.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or "")))
            fewer, more = oc - nc, nc - oc
            say(f"NVMe drives {len(od)} -> {len(nd)}" + (f"; gone {show(fewer)}" if fewer else "")
                + (f"; new {show(more)}" if more else ""))

    if settings:
        ok, nk = old.get("kernel") or {}, new.get("kernel") or {}
        _changes(say, "kernel", ok, nk, (("release", "release"),))
        old_cmdline, new_cmdline = ok.get("cmdline"), nk.get("cmdline")
        if old_cmdline is not None and new_cmdline is not None and old_cmdline.split() != new_cmdline.split():
            before, after = Counter(old_cmdline.split()), Counter(new_cmdline.split())
            parts = [f"+{t}" for t in (after - before)] + [f"-{t}" for t in (before - after)]
            say("kernel command line: " + (" ".join(parts) if parts else "same words, new order"))
        _hugepage_changes(say, "hugepages", old.get("hugepages"), new.get("hugepages"))
    prefix = f"{host}: " if host else ""
    return [prefix + line for line in out]


def _show(value) -> str:
    return "unknown" if value is None else str(value)


def _changes(say, subject: str, old: dict, new: dict, fields) -> None:
    for key, label in fields:
        a, b = old.get(key), new.get(key)
        if a != b:
            unit = " Gb/s" if key == "speed_gbps" else ""
            say(f"{subject} {label}: {_show(a)}{unit if a is not None else ''} -> {_show(b)}{unit if b is not None else ''}")


def _memory_change(say, subject: str, old_kb: int | None, new_kb: int | None) -> None:
    if old_kb is None or new_kb is None:
        if (old_kb is None) != (new_kb is None):
            say(f"{subject}: {_gib(old_kb)} -> {_gib(new_kb)}")
        return
    if abs(new_kb - old_kb) > DRIFT_MEMORY_TOLERANCE * old_kb:
        say(f"{subject}: {_gib(old_kb)} -> {_gib(new_kb)}")


def _gib(kb: int | None) -> str:
    return "unknown" if kb is None else f"{kb / 2**20:.0f} GiB"


def _size(size_bytes: int | None) -> str:
    return "unknown size" if size_bytes is None else f"{size_bytes / 1e12:.2f} TB"


def _hugepage_changes(say, subject: str, old: dict | None, new: dict | None) -> None:
    if old is None or new is None:
        return
    for size in sorted(set(old) | set(new), key=_natural):
        a = (old.get(size) or {}).get("nr_hugepages")
        b = (new.get(size) or {}).get("nr_hugepages")
        if a != b:
            say(f"{subject} {size}: {_show(a)} -> {_show(b)}")
