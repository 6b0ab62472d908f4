"""`railyard topology import [--json] FILE|DIR`: read `nvidia-smi topo -m`, an NCCL topology XML or sysfs.

A directory is read as a sysfs tree (a host's /sys, or a lab node's /run/railyard/hw/sys) by the
same code the gpu_nic_affinity role runs on hosts, so both show the same pairing.

Prints the GPUs, the NICs, the NUMA node of each, the PCIe distance classes and the GPU -> NIC
pairing (the one rule in railyard.model.pairing). A file in another format (an `lspci` capture)
is refused with one line on stderr and exit 1; a user never sees a traceback.
"""

from __future__ import annotations

import json
import os
import sys

from railyard.model.sysfs_discovery import DiscoveryError
from railyard.model.topology import TopoGpu, TopoNic, Topology, TopologyError, parse_topology_file


def register(sub) -> None:
    p = sub.add_parser("topology", help="read a node's GPU/NIC topology",
                       description="Read a node's GPU/NIC topology and show its GPU -> NIC pairing.")
    tsub = p.add_subparsers(dest="topology_command", metavar="SUBCOMMAND")
    tsub.required = True
    imp = tsub.add_parser(
        "import", help="read `nvidia-smi topo -m` output or an NCCL topology XML",
        description="Read `nvidia-smi topo -m` output (.tsv or .txt), an NCCL topology XML "
                    "(NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE) or a sysfs directory (/sys) and print "
                    "the node topology.",
    )
    imp.add_argument("--json", action="store_true", help="print JSON instead of tables")
    imp.add_argument("file", metavar="FILE", help="the captured topology, or a sysfs directory")
    imp.set_defaults(func=handle_import)


def handle_import(args) -> int:
    try:
        topo = Topology.from_sysfs(args.file) if os.path.isdir(args.file) else parse_topology_file(args.file)
    except (TopologyError, DiscoveryError) as exc:
        print(f"railyard topology import: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug in the parser must still read as one line
        print(f"railyard topology import: {args.file}: internal error ({type(exc).__name__}: {exc}); "
              "please report it with the file", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(topo.to_json(), indent=2))
    else:
        print(render(topo))
    return 0


def render(topo: Topology) -> str:
    """The human view: a summary line, the pairing, the NICs, the GPU x NIC classes, notes."""
    pairs = topo.pairing()
    devices: tuple[TopoGpu | TopoNic, ...] = (*topo.gpus, *topo.nics)
    numas = sorted({d.numa for d in devices if d.numa is not None})
    state = "complete" if topo.complete else "INCOMPLETE (an excerpt: the pairing uses only what the file shows)"
    lines = [
        f"{topo.source}: {topo.format} topology, {state}",
        f"{len(topo.gpus)} GPUs, {len(topo.nics)} NICs ({len(topo.compute_nics)} compute), "
        f"NUMA nodes: {', '.join(map(str, numas)) or 'unknown'}",
        "",
    ]

    def numa(d: TopoGpu | TopoNic) -> str:
        # As the source printed it: a node the source left empty stays unknown, and one Railyard
        # deduced from PCIe adjacency says so.
        if d.numa is None:
            return "unknown"
        return f"{d.numa} (inferred)" if d.numa_inferred else str(d.numa)

    rows: list[tuple[str, ...]] = [("GPU", "NUMA", "NIC", "CLASS")]
    for g in topo.gpus:
        nic = pairs.get(g.name)
        rows.append((g.name, numa(g), nic or "-", (topo.distance(g.name, nic) or "?") if nic else "-"))
    lines += _table(rows) + [""]

    rows = [("NIC", "LABEL", "NUMA", "ROLE", "GPUS")]
    for n in topo.nics:
        role = "compute" if n.compute else "other"
        gpus = ",".join(g for g, nic in pairs.items() if nic == n.name) or "-"
        rows.append((n.name, n.label, numa(n), role, gpus))
    lines += _table(rows) + [""]

    if topo.gpus and topo.nics:
        rows = [("", *(n.name for n in topo.nics))]
        for g in topo.gpus:
            rows.append((g.name, *(topo.distance(g.name, n.name) or "?" for n in topo.nics)))
        lines += ["PCIe classes (? = not in the file):", *_table(rows)]
    if topo.notes:
        lines += ["", "Notes:", *(f"  - {note}" for note in topo.notes)]
    return "\n".join(lines)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
