#!/usr/bin/python3 -I
"""A lab node's stand-ins for NVIDIA's GPU tools (standard library only; the node runs this file as
/run/railyard/bin/nvidia-smi, all_reduce_perf and dcgmi, first on its PATH, and it answers as the
name it was run by). A lab node has no GPU and no NVIDIA driver; this answers the
queries Railyard's health check runs, from the node's hardware tree (/run/railyard/hw), in the
formats of real output kept as fixtures (railyard/data/fixtures/gpu):

    nvidia-smi -q -x            nvidia_smi_log as the v12 DTD's XML (the A100 fixture's element
                                names, order and indentation), one <gpu> per NVIDIA GPU function
                                on the tree's PCI bus, in bus order
    nvidia-smi nvlink --status  per GPU its links, as the B200 fixture (written to a file) prints them
                                (-s, and -i INDEX, as the real tool takes them)
    nvidia-smi -r -i <bus id>   the GPU reset (below), printing what the real tool prints
    all_reduce_perf -b -e -f -g nccl-tests' table for one process over the node's GPUs (below),
                                or, as one of a pair's two ranks under srun, measured for real
                                over the rail (_across_nodes)
    dcgmi diag -r 1|2|3 -j      DCGM's diagnostic report as JSON (below)

nvidia-smi prints a subset of the real tool's fields, never one the real tool lacks: the GPU's
names and PCI identity, its PCIe link (the tree's current and maximum speed and width), ECC mode
and counts, page retirement, clock-event reasons. No driver or CUDA version is printed (there is
none), and no temperatures, clocks, memory or processes. Values the tree cannot give are derived
and say so: the UUID (a name-based UUID of the node and bus address), the minor number (the GPU's
place in bus order, as the lab's device-file stand-ins are numbered), the product name and NVLink
speed (from railyard/data/catalog/gpu_tools.yaml, written into the tree's manifest as `nvidia_smi`).

all_reduce_perf measures nothing: there is no GPU to measure. Its table is the one real run kept
(the manifest's `all_reduce_perf`: each size's out-of-place and in-place times, from
all_reduce_perf-h100-2node-16gpu-nvls-healthy.txt) with every time scaled by one factor, so that
the bus bandwidth at the kept run's largest size (16 GiB) is what the node's NVLinks give: the links
up on its worst GPU times one link's speed. A healthy H100 node reads 478 GB/s there, 477.6 at
8 GiB (the kept curve's own rise); an NVLink down shows as a slower collective, as it would. Only sizes the kept run has are answered (8 B to 16 GiB, doubling);
the lines are the real tool's, less the ones NCCL itself prints (there is no NCCL).

dcgmi's report has the shape of DCGM 4's (NVIDIA/DCGM's own schema of it,
testing/python3/dcgm_diag_schema.json) and the layout of the excerpt kept
(dcgmi-diag-r3-v4-pass-8gpu-excerpt.json: tab indents, ` : `, keys in order), with the tests DCGM
runs at each level (nvvs's FillTestVectors: 1 software; 2 also pcie and memory; 3 also diagnostic,
memory_bandwidth, targeted_stress and targeted_power), one result per GPU on the bus. DCGM judges
a GPU by what changes while its tests run (DcgmRecorder reads the error fields' difference over
the test), so a fault already there when it starts passes, as it would on a real node; the one
fault that keeps happening is a GPU whose memory keeps failing (an `ecc` fault without
--transient), which fails the memory test with DCGM's own message for it and the exit status
dcgmi gives an error that calls for isolating the GPU. No info lines (they are measurements), no
metadata (there is no driver or DCGM version to give).

The GPU's own state, which on a real node only its driver holds, is files in the tree that
`railyard lab fault` writes and a reboot may clear (faults.py):

    nvidia/<bus id>/ecc_volatile_uncorrectable   uncorrectable ECC errors since the driver loaded
                                                 (a count a line, one line per fault, summed)
    nvidia/<bus id>/nvlinks_down                 the links that are down, one a line
    nvidia/<bus id>/ecc_persistent               the GPU's memory keeps failing: a GPU reset
                                                 (`-r -i <bus id>`) does not clear its count

A GPU taken off the bus (`railyard lab fault gpu-lost`) is missing here as on a real node.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from typing import Any

HW = "/run/railyard/hw"
# The GPUs' state in the tree (hwtree.NVIDIA_STATE; a node's program imports nothing of the lab).
STATE = "nvidia"
GPU_CLASSES = ("0x0300", "0x0302")
NVIDIA = "0x10de"
# PCIe generation by link speed, as nvidia-smi reports <current_link_gen>.
GENERATIONS = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}
CLOCK_EVENT_REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
                       "hw_power_brake_slowdown", "sync_boost", "sw_thermal_slowdown", "display_clocks_setting")
USAGE = ("nvidia-smi: this is a lab node's stand-in (railyard/drivers/lab/gpu_tools.py); it answers `-q -x`, "
         "`nvlink --status [-i INDEX]` and `-r -i GPU` only\n")
COLLECTIVE_USAGE = ("all_reduce_perf: this is a lab node's stand-in (railyard/drivers/lab/gpu_tools.py); it answers "
                    "-b/-e/-f/-g with sizes its kept run has (8 B to 16 GiB, doubling) only\n")
# nccl-tests' own header lines, as the kept run prints them (all_reduce_perf-h100-2node-16gpu-nvls-healthy.txt).
COLLECTIVE_HEADER = (
    "#\n"
    "#                                                              out-of-place                       in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")
SIZE_UNITS = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
DCGMI_USAGE = ("dcgmi: this is a lab node's stand-in (railyard/drivers/lab/gpu_tools.py); it answers "
               "`diag -r 1|2|3 -j` only\n")
# DCGM's tests by run level and category, in its order (nvvs NvidiaValidationSuite::FillTestVectors;
# categories from PluginStrings.h).
DCGM_TESTS = (("Deployment", "software", 1), ("Integration", "pcie", 2), ("Hardware", "memory", 2),
              ("Hardware", "diagnostic", 3), ("Stress", "memory_bandwidth", 3), ("Stress", "targeted_stress", 3),
              ("Stress", "targeted_power", 3))
# DCGM_FR_DBE_VIOLATION (dcgm_errors.h): its message and next step, its category (hardware memory)
# and its severity (isolate); dcgmi's exit status for it is DCGM_ST_NVVS_ISOLATE_ERROR (-51).
DBE_VIOLATION = {"error_category": 10, "error_id": 103, "error_severity": 2}
DBE_WARNING = "Detected {count} ecc_dbe_volatile_total for GPU {gpu} Run a field diagnostic on the GPU."
EXIT_ISOLATE = 256 - 51
# How long a rank of a run across nodes waits for its peer: Slurm starts the two within a second.
PEER_WAIT_S = 20


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def gpus(hw: str = HW) -> list[dict[str, Any]]:
    """The NVIDIA GPUs on the tree's PCI bus, in bus order, each with its state files read."""
    devices = os.path.join(hw, "sys", "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(devices))
    except OSError:
        return []
    out = []
    for bdf in names:
        d = os.path.join(devices, bdf)
        if _read(os.path.join(d, "vendor")) != NVIDIA or not (_read(os.path.join(d, "class")) or "").startswith(GPU_CLASSES):
            continue
        state = os.path.join(hw, STATE, bdf)
        down = _read(os.path.join(state, "nvlinks_down")) or ""
        out.append({
            "bdf": bdf,
            "device": _read(os.path.join(d, "device")) or "",
            "link": {k: _read(os.path.join(d, k)) for k in ("current_link_speed", "max_link_speed",
                                                           "current_link_width", "max_link_width")},
            "ecc": sum(int(x) for x in (_read(os.path.join(state, "ecc_volatile_uncorrectable")) or "").split()
                       if x.isdigit()),
            "nvlinks_down": {int(x) for x in down.split() if x.isdigit()},
            "ecc_persistent": sum(int(x) for x in (_read(os.path.join(state, "ecc_persistent")) or "").split()
                                  if x.isdigit()),
        })
    return out


def _manifest(hw: str, key: str = "nvidia_smi") -> dict[str, Any]:
    text = _read(os.path.join(hw, "railyard-hwtree.json"))
    return (json.loads(text).get(key) or {}) if text else {}


def _bus_id(bdf: str) -> str:
    """nvidia-smi's form: an 8-digit domain (0000:18:00.0 -> 00000000:18:00.0), upper case."""
    domain, rest = bdf.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def _uuid(bdf: str) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'railyard-lab://{socket.gethostname()}/{bdf}')}"


def _gen(speed: str | None) -> str:
    gen = GENERATIONS.get((speed or "").split(" ", 1)[0])
    return str(gen) if gen else "N/A"


def _width(width: str | None) -> str:
    return f"{width}x" if width else "N/A"


def query_xml(hw: str = HW, found: list[dict[str, Any]] | None = None) -> str:
    info = _manifest(hw)
    found = gpus(hw) if found is None else found
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
             "<nvidia_smi_log>", f"    <timestamp>{time.strftime('%a %b %e %H:%M:%S %Y')}</timestamp>",
             f"    <attached_gpus>{len(found)}</attached_gpus>"]
    for index, g in enumerate(found):
        bus = _bus_id(g["bdf"])
        domain, b, rest = bus.split(":")
        device_id = f"{g['device'][2:].upper()}{NVIDIA[2:].upper()}" if g["device"].startswith("0x") else "N/A"
        link = g["link"]
        lines += [
            f'    <gpu id="{bus}">',
            f"        <product_name>{info.get('product_name', 'N/A')}</product_name>",
            "        <product_brand>NVIDIA</product_brand>",
            f"        <uuid>{_uuid(g['bdf'])}</uuid>",
            f"        <minor_number>{index}</minor_number>",  # derived: bus order, as the lab's /run/railyard/nvidia<N>
            "        <pci>",
            f"            <pci_bus>{b}</pci_bus>",
            f"            <pci_device>{rest.split('.')[0]}</pci_device>",
            f"            <pci_domain>{domain[-4:]}</pci_domain>",
            f"            <pci_device_id>{device_id}</pci_device_id>",
            f"            <pci_bus_id>{bus}</pci_bus_id>",
            "            <pci_gpu_link_info>",
            "                <pcie_gen>",
            f"                    <max_link_gen>{_gen(link['max_link_speed'])}</max_link_gen>",
            f"                    <current_link_gen>{_gen(link['current_link_speed'])}</current_link_gen>",
            "                </pcie_gen>",
            "                <link_widths>",
            f"                    <max_link_width>{_width(link['max_link_width'])}</max_link_width>",
            f"                    <current_link_width>{_width(link['current_link_width'])}</current_link_width>",
            "                </link_widths>",
            "            </pci_gpu_link_info>",
            "        </pci>",
            "        <clocks_event_reasons>",
            *[f"            <clocks_event_reason_{r}>Not Active</clocks_event_reason_{r}>" for r in CLOCK_EVENT_REASONS],
            "        </clocks_event_reasons>",
            "        <ecc_mode>",
            "            <current_ecc>Enabled</current_ecc>",
            "            <pending_ecc>Enabled</pending_ecc>",
            "        </ecc_mode>",
            "        <ecc_errors>",
            "            <volatile>",
            "                <sram_correctable>0</sram_correctable>",
            f"                <sram_uncorrectable>{g['ecc']}</sram_uncorrectable>",
            "                <dram_correctable>0</dram_correctable>",
            "                <dram_uncorrectable>0</dram_uncorrectable>",
            "            </volatile>",
            "            <aggregate>",
            "                <sram_correctable>0</sram_correctable>",
            f"                <sram_uncorrectable>{g['ecc']}</sram_uncorrectable>",
            "                <dram_correctable>0</dram_correctable>",
            "                <dram_uncorrectable>0</dram_uncorrectable>",
            "            </aggregate>",
            "        </ecc_errors>",
            "        <retired_pages>",
            "            <pending_blacklist>N/A</pending_blacklist>",
            "            <pending_retirement>N/A</pending_retirement>",
            "        </retired_pages>",
            "    </gpu>",
        ]
    lines.append("</nvidia_smi_log>")
    return "\n".join(lines) + "\n"


def nvlink_status(hw: str = HW, only: int | None = None, found: list[dict[str, Any]] | None = None) -> str:
    info = _manifest(hw)
    speed, count = info.get("nvlink"), int(info.get("nvlinks") or 0)
    if not speed or not count:
        return ""  # no real output of this GPU's links is kept: nothing rather than an invented speed
    out = []
    for index, g in enumerate(gpus(hw) if found is None else found):
        if only is not None and index != only:
            continue
        out.append(f"GPU {index}: {info.get('product_name', 'N/A')} (UUID: {_uuid(g['bdf'])})")
        # A tab and a space, as the tool writes to a file; copies taken from a terminal show 9 spaces.
        out += [f"\t Link {n}: {'<inactive>' if n in g['nvlinks_down'] else speed}" for n in range(count)]
    return "".join(line + "\n" for line in out)


def gpu_reset(args: list[str], hw: str = HW, found: list[dict[str, Any]] | None = None) -> int:
    """`-r -i <bus id>`: the GPU's volatile ECC count starts again, unless its memory keeps failing
    (a fault made without --transient leaves `ecc_persistent`). Prints what the real tool prints
    on success (NVIDIA/NVSentinel#1690: `GPU 00000000:1A:00.0 was successfully reset.`)."""
    wanted = args[args.index("-i") + 1] if "-i" in args and args.index("-i") + 1 < len(args) else None
    found = gpus(hw) if found is None else found
    chosen = [g for i, g in enumerate(found)
              if wanted is not None and wanted.upper() in (str(i), _bus_id(g["bdf"]), g["bdf"].upper())]
    if wanted is None or not chosen:
        sys.stdout.write("No devices were found\n")
        return 6
    for g in chosen:
        state = os.path.join(hw, STATE, g["bdf"])
        if not os.path.exists(os.path.join(state, "ecc_persistent")):
            try:
                os.unlink(os.path.join(state, "ecc_volatile_uncorrectable"))
            except OSError:
                pass
        sys.stdout.write(f"GPU {_bus_id(g['bdf'])} was successfully reset.\n")
    return 0


def _size(text: str) -> int:
    """A size as nccl-tests parses one: a number, optionally K, M or G (powers of 1024)."""
    unit = SIZE_UNITS.get(text[-1:].upper(), 1)
    return int(text[:-1] if unit > 1 else text) * unit


def _time(usec: float) -> str:
    """A time as the kept run's nccl-tests prints one: fewer decimals as it grows."""
    return f"{usec:7.0f}" if usec >= 10000 else f"{usec:7.1f}" if usec >= 100 else f"{usec:7.2f}"


def all_reduce_perf(argv: list[str], hw: str = HW, found: list[dict[str, Any]] | None = None,
                    env: dict[str, str] | None = None) -> int:
    opts = {"-b": "32M", "-e": "32M", "-f": "1", "-g": "1", "-w": "5", "-n": "20"}
    args = [a for a in argv if a]
    # Only -b/-e/-f/-g/-w/-n, each with its value: any other option, or one without its value, is
    # refused rather than run with a default the caller did not ask for.
    if len(args) % 2 or any(flag not in opts for flag in args[::2]):
        sys.stderr.write(COLLECTIVE_USAGE)
        return 2
    opts.update(zip(args[::2], args[1::2]))
    try:
        low, high, factor, ngpus = _size(opts["-b"]), _size(opts["-e"]), int(opts["-f"]), int(opts["-g"])
        warmup, iters = int(opts["-w"]), int(opts["-n"])
    except ValueError:
        sys.stderr.write(COLLECTIVE_USAGE)
        return 2
    sizes = [low]
    while factor > 1 and sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    header = (f"# nThread 1 nGpus {ngpus} minBytes {low} maxBytes {high} step: {factor}(factor) warmup iters: "
              f"{warmup} iters: {iters} agg iters: 1 validation: 1 graph: 0\n")
    env = dict(os.environ) if env is None else env
    # An MPI build's rank comes from the PMI its launcher speaks (srun --mpi=pmi2 or pmix); without
    # one, each process is a run of its own, as a real one is.
    if env.get("PMI_RANK") or env.get("PMIX_RANK"):
        return _across_nodes(env, hw, sizes, ngpus, warmup, iters, header, found)
    info = _manifest(hw)
    kept = {int(size): (oop, ip) for size, oop, ip in _manifest(hw, "all_reduce_perf").get("rows", ())}
    if not kept or any(size not in kept for size in sizes) or ngpus < 1:
        sys.stderr.write(COLLECTIVE_USAGE)
        return 2
    found = gpus(hw) if found is None else found
    out = [header, "#\n", "# Using devices\n"]
    if ngpus > len(found):
        sys.stdout.write("".join(out))
        sys.stderr.write(f"Invalid number of GPUs: {ngpus} requested but only {len(found)} were found.\n"
                         "Please check the number of processes and GPUs per process.\n")
        return 1
    speed, links = info.get("nvlink"), int(info.get("nvlinks") or 0)
    up = min(links - len(g["nvlinks_down"] & set(range(links))) for g in found[:ngpus]) if links else 0
    if not speed or up <= 0:
        sys.stdout.write("".join(out))
        sys.stderr.write("all_reduce_perf: this is a lab node's stand-in (railyard/drivers/lab/gpu_tools.py): "
                         + ("no real output of this GPU's NVLinks is kept" if not speed else "a GPU has no NVLink up")
                         + ", and a run over PCIe is not modelled\n")
        return 1
    factor_bw = 2 * (ngpus - 1) / ngpus
    # Times scaled so the kept run's largest size reaches this node's bus bandwidth.
    largest = max(kept)
    scale = largest / (kept[largest][0] * 1e3) * factor_bw / (up * float(speed.split()[0])) if ngpus > 1 else 1.0
    host, pid = socket.gethostname(), os.getpid()
    for rank, g in enumerate(found[:ngpus]):
        out.append(_rank_line(rank, pid, host, g["bdf"], info.get("product_name", "N/A"), device=rank))
    out.append(COLLECTIVE_HEADER)
    busbws = []
    for size in sizes:
        row = f"{size:12d}  {size // 4:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}"
        for t in kept[size]:
            usec = t * scale
            algbw = size / (usec * 1e3)
            busbws.append(algbw * factor_bw)
            row += f"  {_time(usec)}  {algbw:6.2f}  {algbw * factor_bw:6.2f}  {0:5g}"
        out.append(row + "\n")
    out += ["# Out of bounds values : 0 OK\n", f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):g}\n", "#\n"]
    sys.stdout.write("".join(out))
    return 0


def _rank_line(rank: int, pid: int, host: str, bdf: str, product: str, device: int = 0) -> str:
    """nccl-tests' line for one rank: its process, its host and its CUDA device (the index among
    the devices the process sees) with that GPU's bus address."""
    domain, bus, rest = bdf.split(":")
    return (f"#  Rank {rank:2d} Group {0:2d} Pid {pid:6d} on {host:>10s} device {device:2d} "
            f"[{int(domain, 16):04x}:{int(bus, 16):02x}:{int(rest.split('.')[0], 16):02x}] {product}\n")


def _interface_address(name: str) -> str | None:
    """An interface's IPv4 address (SIOCGIFADDR), or None where it has none."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(raw[20:24])


def _exchange(sock: socket.socket, send: memoryview, recv: memoryview, size: int, start: bool) -> float:
    """One all-reduce of two ranks' worth of bytes: each sends `size` bytes while it receives the
    other's, from a one-byte start rank 0 sends; the seconds it took."""
    import threading

    if start:
        sock.sendall(b"g")
    elif sock.recv(1) != b"g":
        raise ConnectionError("the peer closed the connection")
    began = time.perf_counter()
    failed: list[OSError] = []

    def sender() -> None:
        try:
            sock.sendall(send[:size])
        except OSError as exc:
            failed.append(exc)

    thread = threading.Thread(target=sender)
    thread.start()
    got = 0
    try:
        while got < size:
            n = sock.recv_into(recv[got:size], size - got)
            if not n:
                raise ConnectionError("the peer closed the connection")
            got += n
    finally:
        thread.join()
    if failed:
        raise failed[0]
    return time.perf_counter() - began


def _across_nodes(env: dict[str, str], hw: str, sizes: list[int], ngpus: int, warmup: int, iters: int,
                  header: str, found: list[dict[str, Any]] | None) -> int:
    """A run of two ranks, one on each node of a rail's pair (railyard.model.pair_collectives), each
    told its rank by the PMI srun started it with (PMI-2's PMI_RANK and PMI_SIZE, or PMIx's PMIX_RANK
    with Slurm's SLURM_NTASKS for the size, as fixtures/slurm/srun_*_env.txt show): rank 0
    listens at NCCL_COMM_ID, rank 1 reaches it from its NCCL_SOCKET_IFNAME's address, and
    the sizes' bytes cross the lab's rail for real, so the times are the rail's as this machine's
    veths carry it (a link down fails the run, a slowed link slows it). Rank 0 prints the table."""
    rank = int(env.get("PMI_RANK") or env.get("PMIX_RANK") or 0)
    ranks = int(env.get("PMI_SIZE") or env.get("SLURM_NTASKS") or 1)
    stand_in = "all_reduce_perf: this is a lab node's stand-in (railyard/drivers/lab/gpu_tools.py): "
    if ranks != 2 or ngpus != 1 or max(sizes) > SIZE_UNITS["G"] or iters < 1:
        sys.stderr.write(stand_in + "across nodes it answers two ranks of one GPU each, up to 1G, only\n")
        return 2
    root, _, port = (env.get("NCCL_COMM_ID") or "").rpartition(":")
    ifname = (env.get("NCCL_SOCKET_IFNAME") or "").lstrip("=").split(",")[0].lstrip("=")
    source = _interface_address(ifname) if ifname else None
    if not root or not port.isdigit() or source is None:
        sys.stderr.write(stand_in + "it needs NCCL_COMM_ID (rank 0's address:port) and NCCL_SOCKET_IFNAME (an "
                         f"interface with an IPv4 address; {ifname or 'none'} given)\n")
        return 2
    found = gpus(hw) if found is None else found
    visible = (env.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    if not visible.isdigit() or int(visible) >= len(found):
        sys.stderr.write(f"Invalid number of GPUs: 1 requested but only {0 if not visible.isdigit() else len(found)} "
                         "were found.\nPlease check the number of processes and GPUs per process.\n")
        return 1
    me = {"host": socket.gethostname(), "pid": os.getpid(), "bdf": found[int(visible)]["bdf"]}
    product = _manifest(hw).get("product_name", "N/A")
    if rank == 0:
        # nccl-tests prints its header before NCCL starts: a run that then fails has it.
        sys.stdout.write(header + "#\n# Using devices\n")
        sys.stdout.flush()
    try:
        if rank == 0:
            with socket.create_server((root, int(port))) as server:
                server.settimeout(PEER_WAIT_S)
                sock, _ = server.accept()
        else:
            sock = _connect((root, int(port)), source)
        with sock:
            sock.settimeout(PEER_WAIT_S)
            sock.sendall((json.dumps(me) + "\n").encode())
            try:
                peer = json.loads(_line(sock))
                peer = {"host": str(peer["host"]), "pid": int(peer["pid"]), "bdf": str(peer["bdf"])}
            except (ValueError, TypeError, KeyError):
                raise ConnectionError("the peer closed the connection before saying who it is") from None
            send, recv = memoryview(bytearray(max(sizes))), memoryview(bytearray(max(sizes)))
            # nccl-tests warms up once, at the largest size, before it times every size.
            for _ in range(warmup):
                _exchange(sock, send, recv, max(sizes), rank == 0)
            rows = []
            for size in sizes:
                times = []
                for _place in ("out-of-place", "in-place"):
                    took = [_exchange(sock, send, recv, size, rank == 0) for _ in range(iters)]
                    times.append(sum(took) / len(took) * 1e6)
                rows.append((size, times))
    except OSError as exc:
        sys.stderr.write(stand_in + f"rank {rank} on {me['host']} could not reach its peer at {root}:{port} "
                         f"from {source} ({ifname}): {exc}\n")
        return 1
    if rank != 0:
        return 0
    out = [_rank_line(0, me["pid"], me["host"], me["bdf"], product),
           _rank_line(1, peer["pid"], peer["host"], peer["bdf"], product), COLLECTIVE_HEADER]
    busbws = []
    for size, times in rows:
        row = f"{size:12d}  {size // 4:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}"
        for usec in times:
            algbw = size / (usec * 1e3)
            busbws.append(algbw)  # two ranks: 2(n-1)/n = 1
            row += f"  {_time(usec)}  {algbw:6.2f}  {algbw:6.2f}  {0:5g}"
        out.append(row + "\n")
    out += ["# Out of bounds values : 0 OK\n", f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):g}\n", "#\n"]
    sys.stdout.write("".join(out))
    return 0


def _line(sock: socket.socket) -> bytes:
    """One line from the peer, a byte at a time: a buffered reader would swallow what follows it."""
    got = bytearray()
    while not got.endswith(b"\n"):
        byte = sock.recv(1)
        if not byte:
            break
        got += byte
    return bytes(got)


def _connect(address: tuple[str, int], source: str) -> socket.socket:
    """A connection to rank 0 from `source`, tried until rank 0 listens or PEER_WAIT_S pass."""
    deadline = time.monotonic() + PEER_WAIT_S
    while True:
        try:
            return socket.create_connection(address, timeout=PEER_WAIT_S, source_address=(source, 0))
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _styled(value: Any, depth: int) -> str:
    """A JSON container as dcgmi writes one (jsoncpp's styled writer): a tab per level, `key : value`,
    a container's brackets on lines of their own."""
    tab, inner = "\t" * depth, "\t" * (depth + 1)

    def member(v: Any) -> str:
        return "\n" + _styled(v, depth + 1) if isinstance(v, (dict, list)) else " " + json.dumps(v)

    if isinstance(value, dict):
        body = ",\n".join(f"{inner}{json.dumps(k)} :{member(v)}" for k, v in sorted(value.items()))
        return f"{tab}{{\n{body}\n{tab}}}"
    body = ",\n".join(_styled(v, depth + 1) if isinstance(v, (dict, list)) else inner + json.dumps(v) for v in value)
    return f"{tab}[\n{body}\n{tab}]"


def dcgmi(argv: list[str], hw: str = HW, found: list[dict[str, Any]] | None = None) -> int:
    args = [a for a in argv if a]
    level = args[args.index("-r") + 1] if "-r" in args and args.index("-r") + 1 < len(args) else None
    if args[:1] != ["diag"] or "-j" not in args or level not in ("1", "2", "3"):
        sys.stderr.write(DCGMI_USAGE)
        return 2
    found = gpus(hw) if found is None else found
    categories: list[dict[str, Any]] = []
    isolate = False
    for category, test, at in DCGM_TESTS:
        if at > int(level):
            continue
        results = []
        for index, g in enumerate(found):
            result: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": index, "status": "Pass"}
            if test == "memory" and g["ecc_persistent"]:
                result["status"] = "Fail"
                result["warnings"] = [{**DBE_VIOLATION,
                                       "warning": DBE_WARNING.format(count=g["ecc_persistent"], gpu=index)}]
                isolate = True
            results.append(result)
        summary = "Fail" if any(r["status"] == "Fail" for r in results) else "Pass"
        entry = {"name": test, "results": results, "test_summary": {"status": summary}}
        if categories and categories[-1]["category"] == category:
            categories[-1]["tests"].append(entry)
        else:
            categories.append({"category": category, "tests": [entry]})
    document = {"DCGM Diagnostic": {"test_categories": categories},
                "entity_groups": [{"entities": [{"device_id": g["device"][2:].lower(), "entity_id": i}
                                                for i, g in enumerate(found)],
                                   "entity_group": "GPU", "entity_group_id": 1}]}
    sys.stdout.write(_styled(document, 0) + "\n")
    return EXIT_ISOLATE if isolate else 0


def main(argv: list[str], hw: str = HW, name: str = "nvidia-smi") -> int:
    if name == "all_reduce_perf":
        return all_reduce_perf(argv, hw)
    if name == "dcgmi":
        return dcgmi(argv, hw)
    found = gpus(hw)  # one reading of the tree a run
    if not found:
        sys.stdout.write("No devices were found\n")
        return 6
    args = [a for a in argv if a]
    if len(args) == 2 and set(args) & {"-q", "--query"} and set(args) & {"-x", "--xml-format"}:
        sys.stdout.write(query_xml(hw, found))
        return 0
    if args and args[0] in ("-r", "--gpu-reset"):
        return gpu_reset(args, hw, found)
    if args[:1] == ["nvlink"] and ("--status" in args or "-s" in args):
        only = None
        for flag in ("-i", "--id"):
            if flag in args and args.index(flag) + 1 < len(args) and args[args.index(flag) + 1].isdigit():
                only = int(args[args.index(flag) + 1])
        sys.stdout.write(nvlink_status(hw, only, found))
        return 0
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], name=os.path.basename(sys.argv[0])))
