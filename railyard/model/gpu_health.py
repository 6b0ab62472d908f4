"""A node's GPUs judged from their tools' own output, against what the plan promises (issue 41).

Readers of the real formats (fixtures of real output, railyard/data/fixtures/gpu/SOURCES.md):

    nvidia-smi -q -x           parse_nvidia_smi: per GPU its PCI id, ECC counts, row remapping,
                               page retirement and active clock-event (throttle) reasons
    the kernel's log           parse_xids: `NVRM: Xid (PCI:<bus>): <code>, ...` lines, and
                               fallen_off_bus: the driver's "fallen off the bus" messages, which
                               may come with no Xid line at all
    nvidia-smi nvlink --status parse_nvlink_status: each link's speed, or inactive
    dcgmi diag -j              parse_dcgm_diag: each test's result per GPU (DCGM 3's and 4's schemas)
    all_reduce_perf            parse_all_reduce_perf: the nccl-tests table and its summary

and judges that turn them into findings with stable kinds (KINDS), each naming the GPU by its bus
address, what the plan (the SKU, the fabric) says and what was found. A tool that is missing is
`not run`, never a pass (health_check.judge says why).

nvidia-smi prints no Xid: the driver writes them to the kernel's log, which is where they are read.

Pure: the standard library only, so a host can run it from the model's own code (bundle.py).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Iterable, Mapping

KINDS = ("nvidia-smi-failed", "gpu-count", "gpu-model", "ecc-uncorrectable", "row-remap-pending", "row-remap-failed",
         "page-retirement-pending", "gpu-throttled", "xid", "gpu-fell-off-bus", "nvlink-down", "nvlink-slow",
         "dcgm-diag", "collective-failed", "collective-slow", "collective-wrong")

# Clock-event reasons that mean the hardware held the GPU back: a slowdown, a thermal or power
# brake. The others (idle, an applications-clocks or power-cap setting, sync boost, display
# clocks) are the GPU doing what it was told.
THROTTLE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")


@dataclass(frozen=True)
class HealthFinding:
    kind: str
    gpu: str | None
    """The GPU's PCI bus address as the tool printed it, or None for a node-wide finding."""
    message: str
    planned: str | None = None
    found: str | None = None


# --- nvidia-smi -q -x --------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuState:
    bus_id: str
    product_name: str | None
    pci_device_id: str | None
    """The PCI device and vendor ids as nvidia-smi prints them, device first: `20B210DE`."""
    ecc_volatile_uncorrectable: int | None
    ecc_aggregate_uncorrectable: int | None
    remap_pending: bool | None
    remap_failure: bool | None
    retirement_pending: bool | None
    throttled_by: tuple[str, ...]

    @property
    def vendor_device(self) -> tuple[str, str] | None:
        """("0x10de", "0x20b2") from `20B210DE`."""
        if not self.pci_device_id or len(self.pci_device_id) != 8:
            return None
        return f"0x{self.pci_device_id[4:].lower()}", f"0x{self.pci_device_id[:4].lower()}"


@dataclass(frozen=True)
class SmiLog:
    driver_version: str | None
    attached_gpus: int | None
    gpus: tuple[GpuState, ...]


def _text(node: ET.Element | None, path: str) -> str | None:
    found = node.find(path) if node is not None else None
    text = found.text.strip() if found is not None and found.text else None
    return None if text in (None, "N/A", "[N/A]", "[Not Supported]") else text


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _yes(text: str | None) -> bool | None:
    return None if text is None else text.strip().lower() == "yes"


def _uncorrectable(ecc: ET.Element | None, which: str) -> int | None:
    """Uncorrectable ECC errors of one counter set: SRAM and DRAM (drivers of the v12 DTD), or
    the double-bit total of older drivers."""
    if ecc is None:
        return None
    values = [_int(_text(ecc, f"{which}/{name}")) for name in ("sram_uncorrectable", "dram_uncorrectable")]
    known = [v for v in values if v is not None]
    if known:
        return sum(known)
    return _int(_text(ecc, f"{which}/double_bit/total"))


def parse_nvidia_smi(text: str) -> SmiLog:
    """`nvidia-smi -q -x`; ValueError when it is not that tool's XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"not nvidia-smi's XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not nvidia-smi's XML: the root element is <{root.tag}>")
    gpus = []
    for g in root.findall("gpu"):
        reasons = g.find("clocks_event_reasons")
        if reasons is None:
            reasons = g.find("clocks_throttle_reasons")  # drivers before 530 name them so
        active = []
        for child in list(reasons) if reasons is not None else ():
            name = re.sub(r"^clocks_(?:event|throttle)_reason_", "", child.tag)
            if name in THROTTLE_REASONS and (child.text or "").strip() == "Active":
                active.append(name)
        ecc = g.find("ecc_errors")
        remap = g.find("remapped_rows")
        gpus.append(GpuState(
            bus_id=g.get("id") or _text(g, "pci/pci_bus_id") or "",
            product_name=_text(g, "product_name"),
            pci_device_id=_text(g, "pci/pci_device_id"),
            ecc_volatile_uncorrectable=_uncorrectable(ecc, "volatile"),
            ecc_aggregate_uncorrectable=_uncorrectable(ecc, "aggregate"),
            remap_pending=_yes(_text(remap, "remapped_row_pending")) if remap is not None else None,
            remap_failure=_yes(_text(remap, "remapped_row_failure")) if remap is not None else None,
            retirement_pending=_yes(_text(g, "retired_pages/pending_retirement")),
            throttled_by=tuple(active),
        ))
    return SmiLog(_text(root, "driver_version"), _int(_text(root, "attached_gpus")), tuple(gpus))


def judge_gpus(log: SmiLog, *, count: int, pci_id: tuple[str | None, str | None]) -> list[HealthFinding]:
    """The GPUs nvidia-smi sees against the SKU's: how many, their PCI ids (vendor, device), and
    each one's ECC, row remapping, page retirement and throttling."""
    out = []
    if len(log.gpus) != count:
        out.append(HealthFinding("gpu-count", None, f"nvidia-smi sees {len(log.gpus)} GPUs, the SKU has {count}",
                                 str(count), str(len(log.gpus))))
    vendor, device = pci_id
    for g in log.gpus:
        got = g.vendor_device
        if got and vendor and device and got != (vendor.lower(), device.lower()):
            out.append(HealthFinding("gpu-model", g.bus_id, f"{g.bus_id} is {g.product_name} ({got[0]}:{got[1]}), "
                                     f"the SKU's GPUs are {vendor}:{device}", f"{vendor}:{device}", f"{got[0]}:{got[1]}"))
        if g.ecc_volatile_uncorrectable:
            out.append(HealthFinding("ecc-uncorrectable", g.bus_id, f"{g.bus_id}: {g.ecc_volatile_uncorrectable} "
                                     "uncorrectable ECC error(s) since the driver loaded", "0",
                                     str(g.ecc_volatile_uncorrectable)))
        if g.remap_failure:
            out.append(HealthFinding("row-remap-failed", g.bus_id, f"{g.bus_id}: row remapping failed "
                                     "(the GPU has no spare rows left)", "No", "Yes"))
        elif g.remap_pending:
            out.append(HealthFinding("row-remap-pending", g.bus_id, f"{g.bus_id}: a remapped row is pending "
                                     "(a GPU reset applies it)", "No", "Yes"))
        if g.retirement_pending:
            out.append(HealthFinding("page-retirement-pending", g.bus_id, f"{g.bus_id}: a page retirement is "
                                     "pending (a GPU reset applies it)", "No", "Yes"))
        if g.throttled_by:
            out.append(HealthFinding("gpu-throttled", g.bus_id, f"{g.bus_id}: clocks held back by "
                                     f"{', '.join(g.throttled_by)}", "none", ", ".join(g.throttled_by)))
    return out


# --- the kernel's log ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Xid:
    bus: str
    """As the driver prints it: `0000:cb:00` (domain, bus, device)."""
    code: int
    detail: str


_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+), (.*)$")
# The driver says it two ways: at probe (a reload after the loss), over three lines and often with
# no Xid; and at the loss itself, one line after the Xid 79 (both in SOURCES.md's H100 logs).
_FALLEN = re.compile(r"NVRM: The NVIDIA GPU (\S+)\s.*?fallen off the bus"
                     r"|NVRM: GPU ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): GPU has fallen off the bus",
                     re.S)


def parse_xids(text: str) -> list[Xid]:
    """Every Xid line of a kernel log (dmesg, journalctl -k), in order."""
    out = []
    for line in text.splitlines():
        m = _XID.search(line)
        if m:
            out.append(Xid(m.group(1).lower(), int(m.group(2)), m.group(3).strip()))
    return out


def fallen_off_bus(text: str) -> list[str]:
    """The GPUs the driver says have fallen off the bus, by PCI address, each once, in the order
    first said (at the loss, after its Xid 79, or at a later probe, which may have no Xid line)."""
    # The probe's continuation lines carry their own `NVRM:` prefix; reading across them is why
    # the pattern spans lines, up to the first "fallen off the bus" after each GPU's address.
    return list(dict.fromkeys((m.group(1) or m.group(2)).lower() for m in _FALLEN.finditer(text)))


def judge_kernel_log(text: str, *, ignore: Iterable[int] = ()) -> list[HealthFinding]:
    """An Xid finding per GPU and code (counted), and one per GPU fallen off the bus."""
    counts: dict[tuple[str, int], list[Xid]] = {}
    skip = set(ignore)
    for x in parse_xids(text):
        if x.code not in skip:
            counts.setdefault((x.bus, x.code), []).append(x)
    out = [HealthFinding("xid", bus, f"{bus}: Xid {code}" + (f" x{len(xs)}" if len(xs) > 1 else "")
                         + f" ({xs[-1].detail})", "no Xid", f"Xid {code}")
           for (bus, code), xs in counts.items()]
    out += [HealthFinding("gpu-fell-off-bus", bdf, f"{bdf}: fallen off the bus", "on the bus", "fallen off")
            for bdf in fallen_off_bus(text)]
    return out


# --- what a GPU reset clears -------------------------------------------------------------------

# Findings a reset of the GPU alone clears (`nvidia-smi -r`): its volatile ECC counts start again,
# and a pending row remap or page retirement is applied. Anything else, or a finding of no one GPU,
# takes the node's reboot.
GPU_RESET_CLEARS = ("ecc-uncorrectable", "row-remap-pending", "page-retirement-pending")


def gpu_reset_targets(findings: Iterable[tuple[str, str | None]]) -> list[str] | None:
    """The GPUs (bus ids as nvidia-smi prints them) whose reset would clear every one of a node's
    findings (kind, GPU), or None where some finding needs more than a GPU reset."""
    gpus: list[str] = []
    for kind, gpu in findings:
        if kind not in GPU_RESET_CLEARS or not gpu:
            return None
        if gpu not in gpus:
            gpus.append(gpu)
    return gpus or None


# --- nvidia-smi nvlink --status ----------------------------------------------------------------

_NVLINK_GPU = re.compile(r"^GPU (\d+): (.*?) \(UUID: ([^)]+)\)")
_NVLINK_LINK = re.compile(r"^\s*Link (\d+): (.*)$")


def parse_nvlink_status(text: str) -> dict[int, dict[int, float | None]]:
    """GPU index -> link -> its speed in GB/s, None where the link is not up (`<inactive>`)."""
    out: dict[int, dict[int, float | None]] = {}
    gpu = None
    for line in text.splitlines():
        m = _NVLINK_GPU.match(line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = {}
            continue
        m = _NVLINK_LINK.match(line)
        if m and gpu is not None:
            speed = re.match(r"^([\d.]+) GB/s", m.group(2).strip())
            out[gpu][int(m.group(1))] = float(speed.group(1)) if speed else None
    return out


def judge_nvlink(links: Mapping[int, Mapping[int, float | None]], *, per_gpu: int,
                 link_gbps: float | None) -> list[HealthFinding]:
    """Each GPU's links against the SKU's count per GPU (NV18: 18), up and, where the SKU's
    NVLink generation gives it, at its speed."""
    out = []
    for gpu, by_link in sorted(links.items()):
        up = {n: s for n, s in by_link.items() if s is not None}
        if len(up) < per_gpu:
            down = sorted(set(range(per_gpu)) - set(up))
            out.append(HealthFinding("nvlink-down", f"GPU {gpu}", f"GPU {gpu}: {len(up)} of {per_gpu} NVLinks up"
                                     + (f" (down: {', '.join(map(str, down))})" if down else ""),
                                     str(per_gpu), str(len(up))))
        slow = sorted(n for n, s in up.items() if link_gbps is not None and s < link_gbps)
        if slow:
            out.append(HealthFinding("nvlink-slow", f"GPU {gpu}", f"GPU {gpu}: link(s) {', '.join(map(str, slow))} "
                                     f"below {link_gbps:g} GB/s", f"{link_gbps:g} GB/s",
                                     ", ".join(f"{up[n]:g} GB/s" for n in slow)))
    return out


# --- dcgmi diag -j -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DiagResult:
    test: str
    entity: str | None
    """`GPU 3`, as DCGM 4's entity group and id or DCGM 3's gpu_ids name it; None for a test of the
    whole node (DCGM 3's deployment tests)."""
    status: str
    info: tuple[str, ...] = ()


def parse_dcgm_diag(text: str) -> list[DiagResult]:
    """Every test result in `dcgmi diag -j` output: tests with `name` and `results`, each result
    with a `status`, its info and then its warnings' text. DCGM 4 names a result's entity
    (`entity_group`, `entity_id`) and lists its info; DCGM 3 gives `gpu_ids` (none for a test of the
    whole node) and its info as one string. The test objects are read wherever they stand, so a
    document cut short still gives the tests it holds whole."""
    decoder = json.JSONDecoder()
    out = []
    for m in re.finditer(r'\{\s*"name"\s*:', text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("results"), list):
            continue
        for r in obj["results"]:
            if isinstance(r, dict) and "status" in r:
                info = r.get("info") or ()
                warned = [w.get("warning") for w in r.get("warnings") or () if isinstance(w, dict)]
                out.append(DiagResult(str(obj["name"]), _diag_entity(r), str(r["status"]),
                                      tuple(str(i) for i in [*([info] if isinstance(info, str) else info), *warned]
                                            if i)))
    return out


def _diag_entity(result: dict) -> str | None:
    if "entity_group" in result or "entity_id" in result:
        return f"{result.get('entity_group', '?')} {result.get('entity_id', '?')}"
    gpus = result.get("gpu_ids", result.get("gpu_id"))
    if isinstance(gpus, list):
        gpus = ",".join(str(g) for g in gpus)
    return f"GPU {gpus}" if gpus not in (None, "") else None


DCGM_PASS, DCGM_SKIP = "Pass", "Skip"


def judge_dcgm(results: Iterable[DiagResult]) -> list[HealthFinding]:
    """A finding per test and entity that failed or warned. A skipped test is no finding (DCGM's
    own verdict passes it: level 3's EUD test is skipped wherever its optional package is not
    installed) and no pass either: dcgm_skipped says it as not run."""
    return [HealthFinding("dcgm-diag", r.entity, (f"{r.entity}: " if r.entity else "") + f"DCGM {r.test} {r.status}"
                          + (f" ({r.info[-1]})" if r.info else ""), DCGM_PASS, r.status)
            for r in results if r.status not in (DCGM_PASS, DCGM_SKIP)]


def dcgm_skipped(results: Iterable[DiagResult]) -> list[str]:
    """Each test DCGM skipped, with the GPUs it skipped it on, in the order of the report."""
    skipped: dict[str, list[str]] = {}
    for r in results:
        if r.status == DCGM_SKIP:
            skipped.setdefault(r.test, []).extend([r.entity] if r.entity else [])
    return [f"DCGM {test} skipped" + (f" ({_entity_ranges(on)})" if on else "") for test, on in skipped.items()]


def _entity_ranges(entities: list[str]) -> str:
    """`GPU 0, GPU 1, GPU 2, GPU 5` as `GPU 0-2, 5`: a skip on all eight GPUs is one short line.
    An entity is `<group> <id>`, as _diag_entity names it."""
    groups: dict[str, list[str]] = {}
    for e in entities:
        group, _, ident = e.rpartition(" ")
        groups.setdefault(group, []).append(ident)
    parts = []
    for group, idents in groups.items():
        spans: list[list[int]] = []
        rest = []
        for ident in idents:
            if not ident.isdigit():
                rest.append(ident)
            elif spans and int(ident) == spans[-1][1] + 1:
                spans[-1][1] = int(ident)
            else:
                spans.append([int(ident), int(ident)])
        words = [f"{a}-{b}" if b > a else f"{a}" for a, b in spans] + rest
        parts.append(f"{group} {', '.join(words)}")
    return "; ".join(parts)


# --- nccl-tests all_reduce_perf ------------------------------------------------------------------

# How far below the plan's bus bandwidth a run may fall (railyard:health.collectiveTolerance): the
# slowest real run kept (all_reduce_perf-h100-8node-64gpu-slow.txt, 320 GB/s where 400 are planned,
# on a cluster its users then tuned to 391) is a finding at 15%, the healthy ones are not.
COLLECTIVE_TOLERANCE = 0.15


@dataclass(frozen=True)
class CollectiveRow:
    size: int
    busbw_oop: float
    busbw_ip: float
    wrong: int
    time_oop_us: float = 0.0
    time_ip_us: float = 0.0


@dataclass(frozen=True)
class CollectiveRun:
    ranks: int
    rows: tuple[CollectiveRow, ...]
    avg_busbw: float | None
    hosts: tuple[str, ...] = field(default=())

    @property
    def peak_busbw(self) -> float | None:
        """The bus bandwidth at the largest message size (the figure a run is judged on: small
        sizes measure latency)."""
        if not self.rows:
            return None
        last = max(self.rows, key=lambda r: r.size)
        return max(last.busbw_oop, last.busbw_ip)


_RANK = re.compile(r"^#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+\w+\s+-?\d+\s+"
                  r"([\d.]+)\s+[\d.]+\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+[\d.]+\s+([\d.]+)\s+(\S+)\s*$")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)")


def parse_all_reduce_perf(text: str) -> CollectiveRun:
    """nccl-tests' table (out-of-place and in-place columns) and its average; ValueError when the
    text has no result row."""
    rows, hosts, avg, ranks = [], [], None, 0
    for line in text.splitlines():
        m = _RANK.match(line)
        if m:
            ranks += 1
            if m.group(1) not in hosts:
                hosts.append(m.group(1))
            continue
        m = _ROW.match(line)
        if m:
            wrong = sum(_int(w) or 0 for w in (m.group(5), m.group(8)) if w != "N/A")
            rows.append(CollectiveRow(int(m.group(1)), float(m.group(4)), float(m.group(7)), wrong,
                                      float(m.group(3)), float(m.group(6))))
            continue
        m = _AVG.match(line)
        if m:
            avg = float(m.group(1))
    if not rows:
        raise ValueError("no result row: not all_reduce_perf's output")
    return CollectiveRun(ranks, tuple(rows), avg, tuple(hosts))


def expected_busbw_pair(*, rails: int, nic_gbps: float) -> float:
    """The bus bandwidth a run across nodes should reach, in GB/s: the node's NIC speed times its
    rails (the issue's yardstick: 8 x 400 Gb/s = 400 GB/s)."""
    return rails * nic_gbps / 8


def expected_busbw_node(*, nvlinks: int, link_gbs: float) -> float:
    """The bus bandwidth a run within one node should reach, in GB/s: each GPU's NVLinks times
    the speed nvidia-smi gives a link (18 x 26.562 GB/s = 478 GB/s for an H100, where a healthy
    HGX H100 board's all_reduce_perf is reported at about 480 GB/s)."""
    return nvlinks * link_gbs


def judge_collective(run: CollectiveRun, *, expected_gbs: float, tolerance: float) -> list[HealthFinding]:
    """A run whose bus bandwidth at its largest size is more than `tolerance` (a fraction) below
    what the plan gives, and any result nccl-tests counted wrong."""
    out = []
    peak = run.peak_busbw
    floor = expected_gbs * (1 - tolerance)
    where = ", ".join(run.hosts) or None
    if peak is not None and peak < floor:
        out.append(HealthFinding("collective-slow", None,
                                 f"all_reduce_perf over {run.ranks} ranks ({where or 'hosts unnamed'}): "
                                 f"{peak:g} GB/s bus bandwidth at its largest size, below {floor:.0f} GB/s "
                                 f"({expected_gbs:.0f} GB/s planned, {tolerance:.0%} tolerance)",
                                 f"{expected_gbs:.0f} GB/s", f"{peak:g} GB/s"))
    wrong = sum(r.wrong for r in run.rows)
    if wrong:
        out.append(HealthFinding("collective-wrong", None, f"all_reduce_perf counted {wrong} wrong result(s)",
                                 "0", str(wrong)))
    return out
