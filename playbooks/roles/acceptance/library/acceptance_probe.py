#!/usr/bin/python
"""Acceptance probes from one node: its rails to their ring peers, and the storage tiers."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: acceptance_probe
short_description: Probe a node's rails and storage tiers, each probe bounded by a count and a timeout
description:
  - C(serve) starts one iperf3 server per rail address this node is the ring peer of, each under
    C(timeout I(server_lifetime)) so that none outlives a run cut short for long; C(stop) ends them. The role runs C(serve) on every node before
    any node runs C(probe).
  - C(probe), for each entry of I(probes), all rails at once, an unfragmented ping that fills the
    MTU (ping -M do), once more for a rail that got none through, and the routers the route
    crosses where I(probes[].routers) is given (traceroute); then the bandwidth, one rail after the other so that the rails of a node are
    measured alike, each for I(seconds), and once more for a rail more than I(tolerance) below the
    median of the node's rails (the better figure counts, since a slow rail is slow twice and a busy moment
    once); then it writes and reads back I(cache_mount) and I(pfs_mount), and reads the
    first I(storage_bytes) of the first object under I(object_prefix) from the object tier, each
    storage probe given up after I(io_timeout). Only the stack's own addresses are
    sent to.
  - Bandwidth is measured with ib_write_bw (perftest) over the rail's RDMA device where the kernel
    shows that device (C(/sys/class/infiniband/<device>)) and its verbs (C(/dev/infiniband/uverbs*)),
    and with iperf3 over the rail's address otherwise. The lab's nodes present their NICs in sysfs
    without verbs, so there only the iperf3 path runs.
  - Reports, never fails on what it measured (the caller judges it); fails only on bad arguments.
options:
  mode: {description: What to do., type: str, choices: [serve, probe, stop], required: true}
  serve: {description: "This node's rail addresses peers send to: rail, ip, port.", type: list, elements: dict, default: []}
  probes: {description: "The ring peers this node sends to: rail, peer, ip, source_ip, port, routers.", type: list, elements: dict, default: []}
  mtu: {description: The rails' MTU., type: int, default: 1500}
  seconds: {description: Seconds of each bandwidth probe., type: int, default: 1}
  max_gbps:
    description:
      - The most each iperf3 probe sends, in Gb/s (iperf3 --bitrate); 0 sends at the rail's full rate.
      - For rails whose bytes are the CPU time of the machine that runs the probes (veths), where a probe at the full
        rate would measure the CPU, not the rail.
    type: float
    default: 0
  timeout: {description: Seconds after which a bandwidth probe is given up., type: int, default: 8}
  tolerance: {description: "A rail this fraction below the median of the node's rails is measured again.", type: float, default: 0.25}
  ping_count: {description: Pings per rail., type: int, default: 3}
  ping_interval: {description: Seconds between pings., type: float, default: 0.2}
  ping_wait: {description: Seconds to wait for the last reply., type: int, default: 2}
  storage_bytes: {description: Bytes written and read back per file system., type: int, default: 1048576}
  cache_mount: {description: The local cache to write and read back; empty skips it., type: str, default: ""}
  pfs_mount: {description: The parallel file system to write and read back; empty skips it., type: str, default: ""}
  object_bucket: {description: The object tier's bucket; empty skips the read., type: str, default: ""}
  object_prefix: {description: Where the object read looks., type: str, default: ""}
  object_endpoint: {description: The S3 endpoint URL; empty is AWS's., type: str, default: ""}
  object_region: {description: The S3 region., type: str, default: us-east-1}
  object_access_key: {description: Access key (a secret)., type: str, default: ""}
  object_secret_key: {description: Secret key (a secret)., type: str, default: ""}
  node: {description: This node's name (the storage probe's file name)., type: str, default: ""}
  run_dir: {description: Where the iperf3 servers' pid files go., type: path, default: /run/railyard}
  sysfs_root: {description: Where the kernel's sysfs is (RDMA devices are looked up there)., type: path, default: /sys}
  dev_root: {description: Where the device files are (an RDMA device is real with its verbs device there)., type: path, default: /dev}
  server_lifetime: {description: Seconds after which a probe server ends whatever happened to the run., type: int, default: 300}
  io_timeout: {description: Seconds after which a storage probe is given up (a hung mount)., type: int, default: 30}
author: Railyard
"""

EXAMPLES = r"""
- name: Probe the rails and the storage tiers
  acceptance_probe:
    mode: probe
    mtu: 4092
    probes: [{rail: 0, peer: gpu-1, ip: 198.19.0.3, source_ip: 198.19.0.2, port: 5201, routers: null}]
    cache_mount: /mnt/cache
"""

RETURN = r"""
acceptance:
  description: What the probes measured (probe mode).
  returned: always
  type: dict
  contains:
    rails: {description: "Per probe: rail, peer, ip, ping_ok, ping_error, routers, routers_seen, gbps, tool, iperf_error.", type: list}
    storage: {description: "Per tier (object, cache, pfs): an error message, or empty when it passed.", type: dict}
    seconds: {description: How long the probes took., type: float}
"""

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule

ICMP_OVERHEAD = 28


def _run(argv, timeout):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {timeout} s"
    except FileNotFoundError:
        return None, "", f"{argv[0]} is not installed"


def _pidfile(params, port):
    return os.path.join(params["run_dir"], f"acceptance-server-{port}.pid")


def _ours(pid):
    """Whether the pid is still a probe server this module started (a pid file outlives its process,
    and the pid may be another's by now)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return argv[:1] == [b"timeout"] and any(a in (b"iperf3", b"ib_write_bw") for a in argv)


def _stop(params):
    for path in glob.glob(os.path.join(params["run_dir"], "acceptance-server-*.pid")):
        try:
            with open(path) as fh:
                pid = int(fh.read().strip())
            if _ours(pid):
                os.killpg(pid, signal.SIGTERM)  # the timeout wrapper and its server: one session
        except (OSError, ValueError):
            pass
        try:
            os.unlink(path)
        except OSError:
            pass


def _rdma(params, device):
    """Whether the rail's RDMA device is a real one: the kernel shows it and has its verbs device.
    (The lab presents its NICs in sysfs, without verbs.)"""
    return bool(device) and os.path.isdir(os.path.join(params["sysfs_root"], "class/infiniband", device)) \
        and bool(glob.glob(os.path.join(params["dev_root"], "infiniband/uverbs*")))


def _listening(ip, port, wait):
    deadline = time.monotonic() + wait
    while True:
        try:
            with socket.create_connection((ip, port), timeout=0.5):
                return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)


def _serve(module, params):
    """One server per rail address, each under `timeout` (a run cut short leaves none for long), in
    a session of its own; a server that does not listen fails the task, naming its rail."""
    _stop(params)  # what an interrupted run left
    os.makedirs(params["run_dir"], exist_ok=True)
    budget = str(params["server_lifetime"])
    started = []
    for s in params["serve"]:
        if _rdma(params, s.get("device")):
            if not shutil.which("ib_write_bw"):
                continue  # the peer's probe says perftest is missing
            # One test, then it exits; a second measurement of an RDMA rail gets no server.
            argv = ["ib_write_bw", "-d", s["device"], "-p", str(s["port"]), "-D", str(params["seconds"]),
                    "--report_gbits", "-F"]
        else:
            if not shutil.which("iperf3"):
                module.fail_json(msg="iperf3 is not installed: install it (Debian: iperf3), or perftest where the "
                                     "rails have RDMA devices")
            argv = ["iperf3", "--server", "--bind", s["ip"], "--port", str(s["port"])]
            started.append(s)
        proc = subprocess.Popen(["timeout", budget, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        with open(_pidfile(params, s["port"]), "w") as fh:
            fh.write(str(proc.pid))
    deaf = [s for s in started if not _listening(s["ip"], s["port"], 5)]
    if deaf:
        _stop(params)
        module.fail_json(msg="iperf3 does not listen on " + ", ".join(f"rail {s['rail']} ({s['ip']}:{s['port']})"
                                                                     for s in deaf))


def _ping(params, p):
    size = params["mtu"] - ICMP_OVERHEAD
    rc, out, err = _run(["ping", "-n", "-q", "-M", "do", "-s", str(size), "-c", str(params["ping_count"]),
                         "-i", str(params["ping_interval"]), "-W", str(params["ping_wait"]), "-I", p["source_ip"],
                         p["ip"]], params["ping_count"] * params["ping_interval"] + params["ping_wait"] + 3)
    if rc == 0:
        return True, ""
    said = (err or "").strip() or next((line for line in out.splitlines() if "loss" in line), "").strip()
    return False, said or f"ping exited {rc}"


def _routers(p):
    rc, out, err = _run(["traceroute", "-n", "-q", "1", "-w", "1", "-m", "8", "-s", p["source_ip"], p["ip"]], 20)
    if rc != 0:
        return (err or out).strip()[-200:] or f"traceroute exited {rc}"
    hops = [line.split() for line in out.splitlines()[1:] if line.strip()]
    # Every hop before the one that is the peer itself is a router.
    return sum(1 for h in hops if len(h) > 1 and h[1] != p["ip"])


def _bandwidth(params, p):
    if _rdma(params, p.get("device")):
        rc, out, err = _run(["ib_write_bw", "-d", p["device"], "-p", str(p["port"]), "-D", str(params["seconds"]),
                             "--report_gbits", "-F", p["ip"]], params["timeout"])
        # The result line: #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]
        rows = [line.split() for line in out.splitlines() if re.match(r"\s*\d+\s+\d+\s+[\d.]+\s+[\d.]+", line)]
        if rc == 0 and rows:
            return float(rows[-1][3]), ""
        return None, (err or f"ib_write_bw exited {rc}").strip()[-300:]
    cap = ["--bitrate", f"{params['max_gbps']:g}G"] if params["max_gbps"] else []
    rc, out, err = _run(["iperf3", "--client", p["ip"], "--bind", p["source_ip"], "--port", str(p["port"]),
                         "--time", str(params["seconds"]), "--json", "--connect-timeout", "2000", *cap],
                        params["timeout"])
    try:
        data = json.loads(out) if out else {}
    except ValueError:
        data = {}
    if rc == 0 and data.get("end", {}).get("sum_received"):
        return round(data["end"]["sum_received"]["bits_per_second"] / 1e9, 3), ""
    return None, (data.get("error") or err or f"iperf3 exited {rc}").strip()


def _reach(params, p):
    out = {"rail": p["rail"], "peer": p["peer"], "ip": p["ip"], "routers": p.get("routers"),
           "tool": "ib_write_bw" if _rdma(params, p.get("device")) else "iperf3"}
    out["ping_ok"], out["ping_error"] = _ping(params, p)
    seen = _routers(p) if p.get("routers") is not None and out["ping_ok"] else None
    out["routers_seen"], out["routers_error"] = (seen, "") if not isinstance(seen, str) else (None, seen)
    return out


def _reach_all(params, probes):
    """Every rail's ping at once; then the rails that got none through, once more (all at once,
    after waiting I(ping_wait)): a moment's loss (a host so busy that its packets wait, a switch
    still learning) is not a dead rail, which is lost twice. A rail lost twice says both attempts."""
    with ThreadPoolExecutor(max_workers=max(1, len(probes))) as pool:
        rails = list(pool.map(lambda p: _reach(params, p), probes))
    lost = [i for i, r in enumerate(rails) if not r["ping_ok"]]
    if not lost:
        return rails
    time.sleep(params["ping_wait"])
    with ThreadPoolExecutor(max_workers=len(lost)) as pool:
        again = dict(zip(lost, pool.map(lambda i: _reach(params, probes[i]), lost)))
    for i, r in again.items():
        rails[i] = r if r["ping_ok"] else {**rails[i], "ping_error": f"{rails[i]['ping_error']} (again: {r['ping_error']})"}
    return rails


def _measure(params, probes, rails):
    """Bandwidth of each reachable rail in turn, and again for those well below the others."""
    for p, r in zip(probes, rails):
        r["gbps"], r["iperf_error"] = _bandwidth(params, p) if r["ping_ok"] else (None, "no ping, no probe")
    figures = sorted(r["gbps"] for r in rails if r["gbps"] is not None)
    if len(figures) < 2:
        return
    median = figures[len(figures) // 2] if len(figures) % 2 else (figures[len(figures) // 2 - 1] + figures[len(figures) // 2]) / 2
    for p, r in zip(probes, rails):
        if r["gbps"] is not None and r["gbps"] < (1 - params["tolerance"]) * median:
            again, _ = _bandwidth(params, p)
            r["measured"] = [r["gbps"], again]
            r["gbps"] = max(r["gbps"], again or 0)


def _bounded(fn, seconds, what):
    """fn() in a thread given up after `seconds` (a hung mount blocks in the kernel: the thread is
    left behind, and the module's process ends anyway)."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", fn()), daemon=True)
    t.start()
    t.join(seconds)
    return box["r"] if "r" in box else f"{what}: no answer in {seconds} s"


def _file_roundtrip(mount, name, size):
    if not os.path.isdir(mount):
        return f"{mount} is not there"
    path = os.path.join(mount, f".railyard-acceptance-{name}")
    data = os.urandom(size)
    try:
        with open(path, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        with open(path, "rb") as fh:
            back = fh.read()
        return "" if back == data else f"{path} read back differs from what was written"
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _object(params):
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        return "boto3 is not installed on the node"
    try:
        s3 = boto3.client("s3", endpoint_url=params["object_endpoint"] or None, region_name=params["object_region"],
                          aws_access_key_id=params["object_access_key"] or None,
                          aws_secret_access_key=params["object_secret_key"] or None,
                          config=Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 1}))
        listed = s3.list_objects_v2(Bucket=params["object_bucket"], Prefix=params["object_prefix"], MaxKeys=1)
        objects = listed.get("Contents") or []
        if not objects:
            return f"no object under s3://{params['object_bucket']}/{params['object_prefix']}"
        want = min(objects[0]["Size"], params["storage_bytes"])  # at most that much of it, whatever its size
        body = s3.get_object(Bucket=params["object_bucket"], Key=objects[0]["Key"],
                             Range=f"bytes=0-{max(want - 1, 0)}")["Body"].read()
        if len(body) != want:
            return f"read {len(body)} of the first {want} bytes of {objects[0]['Key']}"
        return ""
    except Exception as exc:  # what the node would say: the endpoint, the credentials, the bucket
        said = re.sub(r"\s+", " ", str(exc))[:300]
        return f"s3://{params['object_bucket']}: {said}"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", choices=["serve", "probe", "stop"], required=True),
            serve=dict(type="list", elements="dict", default=[]), probes=dict(type="list", elements="dict", default=[]),
            mtu=dict(type="int", default=1500), seconds=dict(type="int", default=1), timeout=dict(type="int", default=8),
            max_gbps=dict(type="float", default=0),
            tolerance=dict(type="float", default=0.25),
            ping_count=dict(type="int", default=3), ping_interval=dict(type="float", default=0.2),
            ping_wait=dict(type="int", default=2), storage_bytes=dict(type="int", default=1 << 20),
            cache_mount=dict(type="str", default=""), pfs_mount=dict(type="str", default=""),
            object_bucket=dict(type="str", default=""), object_prefix=dict(type="str", default=""),
            object_endpoint=dict(type="str", default=""), object_region=dict(type="str", default="us-east-1"),
            object_access_key=dict(type="str", default="", no_log=True),
            object_secret_key=dict(type="str", default="", no_log=True),
            node=dict(type="str", default=""), run_dir=dict(type="path", default="/run/railyard"),
            sysfs_root=dict(type="path", default="/sys"), dev_root=dict(type="path", default="/dev"),
            server_lifetime=dict(type="int", default=300), io_timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["max_gbps"] < 0:
        module.fail_json(msg=f"max_gbps: {params['max_gbps']:g} is below 0; give the most a probe sends in Gb/s, "
                             "or 0 for the rail's full rate")
    if params["mode"] == "serve":
        _serve(module, params)
        module.exit_json(changed=False)
    if params["mode"] == "stop":
        _stop(params)
        module.exit_json(changed=False)
    started = time.monotonic()
    rails = _reach_all(params, params["probes"])
    _measure(params, params["probes"], rails)
    name = params["node"] or os.uname().nodename
    storage = {}
    limit = params["io_timeout"]
    if params["cache_mount"]:
        storage["cache"] = _bounded(lambda: _file_roundtrip(params["cache_mount"], name, params["storage_bytes"]),
                                    limit, params["cache_mount"])
    if params["pfs_mount"]:
        storage["pfs"] = _bounded(lambda: _file_roundtrip(params["pfs_mount"], name, params["storage_bytes"]),
                                  limit, params["pfs_mount"])
    if params["object_bucket"]:
        storage["object"] = _bounded(lambda: _object(params), limit, f"s3://{params['object_bucket']}")
    module.exit_json(changed=False, acceptance={"rails": rails, "storage": storage,
                                                "seconds": round(time.monotonic() - started, 2)})


if __name__ == "__main__":
    main()
