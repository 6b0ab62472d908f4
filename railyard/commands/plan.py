"""`railyard plan [--json] [--detail] [--cabling FILE.csv] [--diagram FILE.svg|.png]
[--opensm DIR [--subnet FILE]] [--frr DIR] STACKFILE`: what a stack needs.

Switches, links, cables and optics per tier, oversubscription and bisection bandwidth of the
compute fabric, the GPU->NIC pairing of each pool, the address plan and the storage tiers. The
summary is arithmetic (fast at any size); `--detail` and `--cabling` list every switch and link.
`--diagram` draws the fabric (railyard.model.fabric.diagram). `--opensm DIR` writes what an InfiniBand subnet manager is given (railyard.sweep.write_opensm_files)
and the planned subnet in ibnetdiscover's format; `--subnet` is the real subnet's ibnetdiscover
output, for the GUIDs that partitions of some pools and root switches are named by. `--frr DIR`
writes a RoCE fabric's switch configurations (railyard.switches): FRR's per switch, and the
switch-side lossless QoS.
A stack the model rejects exits 1 with its problems, never a traceback.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from railyard import drivers
from railyard.model.errors import SpecError
from railyard.model.nvlink_domain import domain_name
from railyard.model.sysfs_discovery import format_cpulist

if TYPE_CHECKING:
    from railyard.model.plan import Plan


def register(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="show the switches, cables, addresses and storage a stack needs",
        description="Plan a stack: compute fabric (switches, links, cables, optics, oversubscription, "
                    "bisection), GPU->NIC pairing, addresses and storage tiers. Nothing is built.",
    )
    p.add_argument("stackfile", metavar="STACKFILE", help="a stack file, e.g. stacks/Pulumi.lab.yaml")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--detail", action="store_true", help="also list every node, switch and link")
    p.add_argument("--cabling", metavar="FILE.csv", help="write the cabling plan (one row per cable) to FILE.csv")
    p.add_argument("--diagram", metavar="FILE",
                   help="draw the compute fabric to FILE (.svg or .png): tiers, folded switches, link counts")
    p.add_argument("--opensm", metavar="DIR",
                   help="write OpenSM's partitions.conf, root GUIDs and options, and the planned subnet, to DIR")
    p.add_argument("--frr", metavar="DIR",
                   help="write each RoCE switch's FRR configuration (DIR/<switch>/frr.conf) and the switch-side "
                        "lossless QoS (DIR/roce-qos.nvue) to DIR")
    p.add_argument("--subnet", metavar="FILE",
                   help="with --opensm: the subnet's ibnetdiscover output, for the GUIDs of its ports and switches")
    p.set_defaults(func=handle)


def handle(args) -> int:
    path = args.stackfile
    if args.subnet and not args.opensm:
        print("railyard plan: --subnet is the subnet for --opensm; give --opensm DIR too", file=sys.stderr)
        return 2
    try:
        from railyard.stack import load

        _, plan = load(path)
        if args.cabling:
            try:
                with open(args.cabling, "w", encoding="utf-8", newline="") as out:
                    rows = plan.fabric.write_cabling_csv(out)
            except OSError as exc:
                print(f"railyard plan: cannot write {args.cabling}: {exc.strerror or exc}", file=sys.stderr)
                return 1
            print(f"wrote {rows} cables to {args.cabling}", file=sys.stderr)
        if args.opensm and write_opensm(plan, args.opensm, args.subnet):
            return 1
        if args.diagram and write_diagram(plan, args.diagram):
            return 1
        if args.frr and write_frr(plan, args.frr):
            return 1
        if args.json:
            # The detail of a large cluster is hundreds of thousands of objects: compact JSON goes
            # through the C encoder, indented JSON would not.
            if args.detail:
                sys.stdout.write(json.dumps(plan.detail(), separators=(",", ":")))
            else:
                sys.stdout.write(json.dumps({**plan.summary(), "host_tuning": host_tuning(plan.spec.driver)}, indent=2))
            sys.stdout.write("\n")
        else:
            render(plan.summary(), sys.stdout)
            if args.detail:
                render_detail(plan, sys.stdout)
    except SpecError as exc:
        print(exc.report(f"railyard plan: {path}"), file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # `railyard plan --json | head` is not an error; cli.main handles it
    except Exception as exc:  # noqa: BLE001 - a bug in the model must still read as one line
        print(f"railyard plan: {path}: internal error ({type(exc).__name__}: {exc}); "
              "please report it with the stack file", file=sys.stderr)
        return 2
    return 0


def _refused(message: str) -> int:
    """One line on stderr, and the exit code of a plan that could not be written."""
    print(f"railyard plan: {message}", file=sys.stderr)
    return 1


def write_diagram(plan: Plan, path: str) -> int:
    """`--diagram`: 0 when drawn, 1 (with one line on stderr) when it cannot be."""
    from railyard.model.fabric import diagram

    try:
        data = diagram.render(plan.fabric, path)  # refuses another suffix before a file is opened
        with open(path, "wb") as out:
            out.write(data)
    except ValueError as exc:
        return _refused(f"--diagram: {exc}")
    except OSError as exc:
        return _refused(f"cannot write {path}: {exc.strerror or exc}")
    print(f"drew the fabric to {path} ({len(data):,} bytes)", file=sys.stderr)
    return 0


OPENSM_ETC = "/etc/opensm"  # where Debian's and MLNX_OFED's opensm read their files


def write_opensm(plan: Plan, out_dir: str, subnet_file: str | None) -> int:
    """`--opensm`: 0 when written, 1 (with one line on stderr) when it cannot be."""
    from pathlib import Path

    from railyard.model.fabric import subnet as sn
    from railyard.sweep import write_opensm_files

    if plan.fabric.kind != "infiniband":
        return _refused(f"--opensm is for InfiniBand fabrics; this one is {plan.fabric.kind}")
    subnet = None
    if subnet_file:
        try:
            with open(subnet_file, encoding="utf-8") as f:
                subnet = sn.parse_ibnetdiscover(f.read())
        except OSError as exc:
            return _refused(f"cannot read {subnet_file}: {exc.strerror or exc}")
        except ValueError as exc:
            return _refused(f"--subnet {subnet_file}: {exc}")
    try:
        out = Path(out_dir)
        write_opensm_files(plan.fabric, plan.spec.tenants, subnet, out, installed_in=OPENSM_ETC)
        (out / "topology.net").write_text(sn.topology_text(plan.fabric), encoding="utf-8")
    except OSError as exc:
        return _refused(f"cannot write {out_dir}: {exc.strerror or exc}")
    except ValueError as exc:
        return _refused(f"--opensm: {exc}")
    print(f"wrote OpenSM's files and the planned subnet to {out_dir}", file=sys.stderr)
    return 0


def write_frr(plan: Plan, out_dir: str) -> int:
    """`--frr`: 0 when written, 1 (with one line on stderr) when it cannot be."""
    from pathlib import Path

    from railyard.switches import QOS_FILE, write_switch_configs

    if plan.fabric.kind != "roce":
        return _refused(f"--frr is for RoCE fabrics, whose switches route with BGP; this one is {plan.fabric.kind}")
    try:
        count = write_switch_configs(plan, Path(out_dir))
    except OSError as exc:
        return _refused(f"cannot write {out_dir}: {exc.strerror or exc}")
    print(f"wrote the FRR configuration of {count} switches and {QOS_FILE} to {out_dir}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------------------
# The human view


def _n(x: Any) -> str:
    if x is None:
        return "unknown"
    if isinstance(x, float) and not x.is_integer():
        return f"{x:,.3f}".rstrip("0").rstrip(".")
    return f"{int(x):,}"


def _bandwidth(gbps: float) -> str:
    if gbps >= 1_000_000:
        return f"{gbps / 1_000_000:,.2f} Pb/s"
    if gbps >= 1000:
        return f"{gbps / 1000:,.1f} Tb/s"
    return f"{gbps:,.0f} Gb/s"


def host_tuning(driver: str) -> str:
    """Who tunes the machines, said in the plan rather than left to be noticed missing."""
    return drivers.platform_tuning(driver) or "by Railyard, over SSH with its playbooks"


def render(s: dict[str, Any], out: TextIO) -> None:
    w = out.write
    w(f"stack {s['stack']}: {s['layout']}, driver {s['driver']}, region {s['region']}\n")
    pools = ", ".join(f"{p['name']}: {p['count']} x {p['sku']}" for p in s["pools"])
    vms = f", {_n(s['vms'])} VMs" if s["vms"] else ""
    w(f"nodes {_n(s['nodes'])} ({pools}), GPUs {_n(s['gpus'])}{vms}\n")
    w(f"host tuning: {host_tuning(s['driver'])}\n\n")

    f = s["fabrics"]["compute"]
    w(f"compute fabric: {f['kind']} {f['speed']} on {f['switch']}, {f['topology']}, "
      f"{f['tiers']} tiers, {f['rails']} rails\n")
    w(f"  scalable units    {_n(f['scalable_units'])} of up to {f['su_nodes']} nodes; "
      f"{f['leaf_uplinks']} uplinks per leaf\n")
    rows = (("leaf", "node_leaf", "node-leaf"), ("spine", "leaf_spine", "leaf-spine"),
            ("core", "spine_core", "spine-core"))
    w(f"  {'tier':<8}{'switches':>10}   {'links (below)':<14}{'count':>9}\n")
    for tier, key, label in rows:
        w(f"  {tier:<8}{_n(f['switches'][tier]):>10}   {label:<14}{_n(f['links'][key]):>9}\n")
    w(f"  {'total':<8}{_n(f['switches']['total']):>10}   {'cables':<14}{_n(f['cables']):>9}\n")
    o = f["optics"]
    w(f"  optics            {'unknown' if o['switch'] is None else _n(o['switch'])} on switches ({o['switch_type']}), "
      f"{_n(o['host'])} on hosts ({o['host_type']})\n")
    w(f"  oversubscription  {_n(f['oversubscription'])}:1 (asked {_n(f['oversubscription_requested'])}:1)\n")
    w(f"  bisection         {_bandwidth(f['bisection_gbps'])} one direction\n")
    w(f"  worst case        {f['worst_case_hops']} switch hops\n")
    if "bgp" in f:
        b = f["bgp"]
        w(f"  bgp               {_n(b['asns'])} ASNs from {b['asn_base']}, {_n(b['sessions'])} sessions\n")
    if "p2p" in f:
        w(f"  p2p               {_n(f['p2p']['links'])} /31 links\n")
    if "loopbacks" in f:
        w(f"  loopbacks         {_n(f['loopbacks']['switches'])} from {f['loopbacks']['cidr']}\n")
    if "qos" in f:
        q = f["qos"]
        w(f"  lossless qos      RoCE priority {q['roce_priority']} (TC{q['roce_traffic_class']}), "
          f"PFC on {q['pfc_priority']}, CNP {q['cnp_priority']}, ECN {q['ecn_min_bytes']}-{q['ecn_max_bytes']} B, "
          f"trust {q['trust']}\n")

    racks = [p for p in s["pools"] if "nvlink_domains" in p]
    if racks:
        w("\nNVLink domains (one a rack)\n")
        for p in racks:
            d = p["nvlink_domains"]
            switch_trays = f", {d['switch_trays']} NVLink switch trays" if d["switch_trays"] else ""
            w(f"  {p['name']} ({p['sku']}): {_n(d['count'])} x {d['name']}: {d['compute_trays']} compute trays"
              f"{switch_trays}, {d['gpus']} GPUs each ({domain_name(p['name'], 0)} .. {domain_name(p['name'], d['count'] - 1)})\n")

    w("\npairing (GPU -> NIC)\n")
    for p in s["pools"]:
        pairs = " ".join(f"{g}->{n}" for g, n in p["pairing"].items())
        w(f"  {p['name']} ({p['sku']}): {pairs}\n")

    n = s["networks"]
    w("\nnetworks\n")
    for name in ("management", "storage"):
        blocks = ", ".join(f"{k} {v}" for k, v in n[name]["pools"].items())
        w(f"  {name:<11} {n[name]['cidr']}  mtu {n[name]['mtu']}  (pool blocks: {blocks})\n")
    rails = n["compute"]["rails"]
    shown = ", ".join(rails[:2]) + (f", ... {rails[-1]}" if len(rails) > 2 else "")
    w(f"  {'compute':<11} {n['compute']['cidr']}  mtu {n['compute']['mtu']}  ({len(rails)} rail subnets: {shown})\n")
    if s["tenants"]:
        w("  tenants     " + ", ".join(f"{t['name']} pkey {t['pkey']}" for t in s["tenants"]) + "\n")

    st = s["storage"]
    w("\nstorage\n")
    t = st["tiers"]
    if t["parallel_fs"]:
        p = t["parallel_fs"]
        w(f"  parallel fs  {p['kind']} at {p['mount']}, {_n(p['capacity_tib'])} TiB\n")
    if t["object"]:
        w(f"  object       bucket {t['object']['bucket']} ({t['object']['endpoint']})\n")
    c = t["local_cache"]
    w(f"  local cache  {c['mount']} ({c['raid']}, {c['fs']}), {_n(c['total_tb'])} TB in all\n")
    for p in st["pools"]:
        w(f"    {p['name']}: {_n(p['cache']['per_node_tb'])} TB/node, cache read "
          f"{_n(p['cache']['read_gb_s_per_gpu'])} GB/s per GPU, network read "
          f"{_n(p['network']['read_gb_s_per_gpu'])} GB/s per GPU\n")
    if "cache_vs_parallel_fs" in st:
        r = st["cache_vs_parallel_fs"]
        w(f"  cache / parallel fs: one node {_n(r['node_cache_fraction'])}, "
          f"cluster {_n(r['cluster_cache_fraction'])}\n")
    for a in st["assumptions"]:
        w(f"  assumed: {a}\n")


def render_detail(plan: Plan, out: TextIO) -> None:
    w = out.write
    w("\nswitches\n")
    w(f"  {'name':<28}{'tier':<7}{'rail':>5}{'unit':>6}{'ports used':>12}\n")
    for sw in plan.fabric.switches():
        rail = "" if sw.rail is None else sw.rail
        unit = "" if sw.unit is None else sw.unit
        w(f"  {sw.name:<28}{sw.tier:<7}{rail!s:>5}{unit!s:>6}{sw.ports_used:>7}/{sw.ports}\n")
    w("\nlinks\n")
    label = plan.fabric.switch.label
    for link in plan.fabric.links():
        a_port = link.a_port if link.tier == "node_leaf" else label(link.a_port)
        ips = f"  {link.a_ip} - {link.b_ip}" if link.a_ip else ""
        w(f"  {link.tier:<11}{link.a_device}:{a_port} -> {link.b_device}:{label(link.b_port)}{ips}\n")
    render_guests(plan, out)


def render_guests(plan: Plan, out: TextIO) -> None:
    """Each VM shape's guest topology and libvirt domain, from the pool's first host: every host
    of a pool gives its VMs the same, under their own names."""
    from railyard.guests import domain_xml, host_addresses

    for pool in plan.spec.node_pools:
        guests = plan.guests(pool.name)
        if not guests:
            continue
        host = plan.node(pool.name, 0)
        sku = plan.catalog.nodes[pool.sku]
        isolation = plan.tuning(host).cpu_isolation
        if isolation is not None:
            out.write(f"\nhypervisor {host.name} ({isolation.mode} CPU isolation): CPUs "
                      f"{format_cpulist(isolation.isolated)} for its VMs, {format_cpulist(isolation.housekeeping)} its own\n")
        for vm, guest in zip(host.vms, guests):
            out.write(f"\nguest {vm.name} on {host.name} ({guest.level}-level PCIe layout, "
                      f"{'pinned' if guest.emulator_cpus is not None else 'not pinned: the catalog has no CPU lists'})\n")
            for cell in guest.cells:
                pins = f" on host CPUs {format_cpulist(cell.pins)}" if cell.pins is not None else ""
                out.write(f"  cell {cell.id} (host NUMA {cell.host_numa}): vCPUs {format_cpulist(cell.vcpus)}{pins}, "
                          f"{cell.memory_mib} MiB\n")
            for d in guest.devices:
                pair = f" (pairs with {d.pair})" if d.pair else ""
                out.write(f"  {d.name:<6} {d.address}  host {d.host}{pair}\n")
            out.write(f"\nlibvirt domain of {vm.name}\n")
            out.write(domain_xml(vm.name, host.name, guest, host_addresses(sku, guest)))
