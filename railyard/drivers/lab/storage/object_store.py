"""The object tier of a lab stack: an S3 store on the storage network.

``create_object_store`` runs a real S3-compatible server, SeaweedFS's ``weed server`` (master,
volume, filer and S3 gateway in one process; built by the toolchain into ``.railyard/bin/weed``),
in a namespace of its own, ``ry-T-storage``, on the stack's storage network: a veth ``s3`` on the
fabric's storage bridge holds the store's address, so nodes reach it over their storage NICs and
nothing outside the lab can (the host routes only management networks). weed also has its own mount
namespace with a private /tmp, because it puts unix sockets of its gRPC services at fixed /tmp
paths: on the host's /tmp they would be reachable from outside the lab and collide between stacks.
Its data, logs and S3 identity file live in ``<lab dir>/storage`` (0700; the identity file, which
holds the secret key, 0600). The access key is returned, the secret key never. create makes the
bucket and uploads a deterministic sample dataset (SHAKE-256 of the shard's name, so every lab has
the same bytes) with a manifest of SHA-256 sums, through boto3 run in the store's network namespace
(the host itself cannot reach the storage network).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from typing import Any
import subprocess
import sys
import time
from pathlib import Path

from railyard import paths
from railyard.drivers.lab import names, net, node, proc
from railyard.drivers.lab.errors import LabError, require_root
from railyard.drivers.lab import fabric
from railyard.drivers.lab.fabric import LAB_NETNS_SYSCTLS

S3_PORT = 8333
# weed's other services listen on the store's address too, in its own namespace only.
WEED_PORTS = {"master": 9333, "volume": 8080, "filer": 8888}
DEFAULT_DATASET: dict[str, Any] = {"prefix": "sample/", "shards": 4, "shard_bytes": 4 << 20}
DATASET_VERSION = "railyard-sample-v1"
START_TIMEOUT_S = 60.0


def object_store_dir(stack: str, root: Path | None = None) -> Path:
    return paths.lab_dir(stack, root) / "storage"


def weed_binary(root: Path | None = None) -> Path:
    return paths.bin_dir(root) / "weed"


# --- the sample dataset -------------------------------------------------------------------------

def shard_bytes(index: int, size: int) -> bytes:
    """Shard `index` of the sample dataset: the same bytes in every lab, from its name alone."""
    return hashlib.shake_256(f"{DATASET_VERSION}/{index}".encode()).digest(size)


def sample_manifest(prefix: str = DEFAULT_DATASET["prefix"], shards: int = DEFAULT_DATASET["shards"],
                    size: int = DEFAULT_DATASET["shard_bytes"]) -> dict:
    """The manifest create_object_store uploads as ``<prefix>manifest.json``."""
    return {
        "dataset": DATASET_VERSION,
        "shards": [{"key": f"{prefix}shard-{i:05d}.bin", "bytes": size,
                    "sha256": hashlib.sha256(shard_bytes(i, size)).hexdigest()} for i in range(shards)],
    }


def _dataset(dataset: dict | None) -> dict | None:
    if dataset is None:
        return None
    d = {**DEFAULT_DATASET, **dataset}
    if not isinstance(d["prefix"], str) or (d["prefix"] and not d["prefix"].endswith("/")):
        raise LabError("object store dataset", f"prefix must be empty or end with '/', got {d['prefix']!r}")
    for key, top in (("shards", 1000), ("shard_bytes", 256 << 20)):
        if not isinstance(d[key], int) or isinstance(d[key], bool) or not 0 < d[key] <= top:
            raise LabError("object store dataset", f"{key} must be 1..{top}, got {d[key]!r}")
    return {k: d[k] for k in DEFAULT_DATASET}


# --- the object store ---------------------------------------------------------------------------

def create_object_store(
    stack: str,
    *,
    address: str,
    access_key: str,
    secret_key: str,
    bucket: str,
    dataset: dict | None = DEFAULT_DATASET,
    port: int = S3_PORT,
    root: Path | None = None,
) -> dict:
    """Ensure the stack's S3 store runs at `address` with the bucket and the sample dataset.

    address:    the store's address with prefix on the storage network, e.g. ``198.18.100.250/24``
    access_key, secret_key: the one identity the store accepts (an admin of it); the secret is
                written only to the store's identity file and handed to boto3 on stdin
    bucket:     created if missing
    dataset:    {"prefix": "sample/", "shards": 4, "shard_bytes": 4 MiB}, uploaded unless every
                object is there with its size; None uploads nothing
    port:       the S3 port

    The fabric (with its storage bridge) must exist. Returns read_object_store's result.
    """
    require_root()
    sns, fab = names.storage_ns(stack), names.fabric_ns(stack)
    what = f"object store {sns}"
    iface = net.lab_interface(address, what)
    _check_key(access_key, "access_key", what)
    _check_key(secret_key, "secret_key", what)
    _check_bucket(bucket, what)
    ds = _dataset(dataset)
    if not isinstance(port, int) or not 1 <= port <= 65535 - 10000 or port in WEED_PORTS.values():
        raise LabError(what, f"port must be 1..55535 and not one of weed's own {sorted(WEED_PORTS.values())}")
    weed = weed_binary(root)
    if not os.access(weed, os.X_OK):
        raise LabError(what, f"{weed} is missing; the toolchain builds it (make toolchain, or "
                             "python -m railyard.engine.toolchain)")
    if not net.netns_exists(fab):
        raise LabError(what, f"the fabric namespace {fab} does not exist; create the fabric first")
    if names.STORAGE_BRIDGE not in net.links(fab, with_addresses=False):
        raise LabError(what, f"the fabric {fab} has no {names.STORAGE_BRIDGE} bridge")

    d = object_store_dir(stack, root)
    node.check_dir_location(d)
    for sub in (d, d / "data", d / ".bin"):
        sub.mkdir(parents=True, exist_ok=True)
        os.chmod(sub, 0o700)
    identity = {"identities": [{"name": "railyard", "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                                "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
    changed = node._write_if_changed(d / "s3.json", json.dumps(identity, indent=1, sort_keys=True) + "\n", 0o600)
    config = {"address": str(iface), "port": port, "bucket": bucket, "access_key": access_key, "dataset": ds}
    argv = _weed_argv(d, str(iface.ip), port)
    weed_real = os.path.realpath(weed)
    changed |= node._write_if_changed(d / "config.json", json.dumps({**config, "argv": argv, "weed": weed_real},
                                                                    indent=1, sort_keys=True) + "\n", 0o600)

    net.claim_netns(sns, names.owner(stack, root))
    net.sysctls(sns, LAB_NETNS_SYSCTLS)
    fabric.attach_service(stack, sns, names.OBJECT_STORE_PORT, names.STORAGE_BRIDGE, str(iface))

    pid = _weed_pid(stack, root)
    if pid is not None and changed:
        proc.kill_all([pid], what=f"{what} weed")  # its flags or identities changed: start over
        pid = None
    if pid is None:
        _kill_store_processes(stack)
        pid = _start_weed(stack, d, argv, os.path.dirname(weed_real))
    # The bucket and dataset are checked through S3 (a second of boto3) unless this very weed
    # process already seeded them for this configuration.
    seeded = json.dumps({"pid": pid, "config": config}, sort_keys=True)
    if _read(d / "seeded.json") != seeded:
        _seed(stack, d, str(iface.ip), port, access_key, secret_key, bucket, ds, pid)
        node._write_if_changed(d / "seeded.json", seeded, 0o600)
    state = read_object_store(stack, root)
    if state is None:
        raise LabError(what, "vanished while it was being created")
    return state


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _check_key(value: str, name: str, what: str) -> None:
    if not isinstance(value, str) or not 3 <= len(value) <= 128 or not value.isprintable() or " " in value:
        raise LabError(what, f"{name} must be 3-128 printable characters without spaces")


def _check_bucket(bucket: str, what: str) -> None:
    ok = isinstance(bucket, str) and 3 <= len(bucket) <= 63 and all(c.islower() or c.isdigit() or c in "-." for c in bucket)
    if not ok or bucket[0] in "-." or bucket[-1] in "-.":
        raise LabError(what, f"bucket {bucket!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")


# Where weed's mount namespace shows the store's directory (nothing else there needs /mnt), and
# the directory holding the weed binary (a build cache under /tmp would be hidden too).
STORE_MOUNT = "/mnt"
WEED_BIN_MOUNT = f"{STORE_MOUNT}/.bin"


def _weed_argv(d: Path, ip: str, port: int) -> list[str]:
    # Paths under STORE_MOUNT, where weed's own mount namespace shows the store's directory: its
    # private /tmp would hide a checkout that lives under /tmp (weed absolutizes relative paths).
    return [
        f"{WEED_BIN_MOUNT}/weed", "server",
        f"-dir={STORE_MOUNT}/data", f"-ip={ip}", f"-ip.bind={ip}",
        f"-master.port={WEED_PORTS['master']}", f"-volume.port={WEED_PORTS['volume']}",
        "-filer", f"-filer.port={WEED_PORTS['filer']}",
        "-s3", f"-s3.port={port}", f"-s3.config={STORE_MOUNT}/s3.json",
        # The lab has no way out and wants none tried; nor the catalog endpoints beside S3.
        "-master.telemetry=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        # Small volumes, no replicas: a lab store holds megabytes, on one server.
        "-master.volumeSizeLimitMB=64", "-volume.max=16", "-master.defaultReplication=000",
        "-volume.preStopSeconds=0", "-metricsPort=0",
    ]


def _weed_pid(stack: str, root: Path | None = None) -> int | None:
    """weed, if it runs in the store's current netns."""
    return proc.service_pid(object_store_dir(stack, root) / "weed.pid", net.netns_inode(names.storage_ns(stack)), "weed")


def _store_processes(stack: str) -> list[int]:
    return proc.service_processes(net.netns_inode(names.storage_ns(stack)), names.ENV_MARKER,
                                  names.storage_env_marker(stack))


def _kill_store_processes(stack: str) -> None:
    proc.kill_all(_store_processes(stack), what=f"object store {names.storage_ns(stack)}")


def _start_weed(stack: str, d: Path, argv: list[str], weed_dir: str) -> int:
    sns = names.storage_ns(stack)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(d), "LANG": "C.UTF-8",
           names.ENV_MARKER: names.storage_env_marker(stack)}
    (d / "weed.pid").unlink(missing_ok=True)
    # In weed's own mount namespace: the store's directory at STORE_MOUNT and weed's own directory
    # at WEED_BIN_MOUNT, then a private /tmp (for weed's fixed-path unix sockets), then weed itself
    # in place of the shell, so the pid the shell writes is weed's.
    script = (f'mount --bind "$DIR" {STORE_MOUNT} && mount --bind "$BIN" {WEED_BIN_MOUNT} && '
              f'mount -t tmpfs -o mode=1777,size=64m "$1" /tmp && '
              f'cd {STORE_MOUNT} && echo $$ > weed.pid && shift 2 && exec "$@" >>weed.log 2>&1')
    env["DIR"], env["BIN"] = str(d), weed_dir
    cmd = ["setsid", "--fork", "nsenter", f"--net={net.netns_path(sns)}", "--",
           "unshare", "--mount", "--propagation", "private", "--",
           "sh", "-c", script, "weed", f"{names.stack_prefix(stack)}storage", str(d / "weed.pid"), *argv]
    net.run(cmd, obj=f"object store {sns} weed", env=env)
    deadline = time.monotonic() + 10
    while True:
        pid = _weed_pid(stack)
        if pid is not None:
            return pid
        if time.monotonic() > deadline:
            raise LabError(f"object store {sns}", f"weed did not start: {_log_tail(d)}")
        time.sleep(0.01)


def _log_tail(d: Path, lines: int = 15) -> str:
    try:
        return "\n".join((d / "weed.log").read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _seed(stack: str, d: Path, ip: str, port: int, access_key: str, secret_key: str, bucket: str,
          ds: dict | None, pid: int) -> dict:
    """Wait for S3, make the bucket, upload the dataset (what is missing of it): boto3 in the
    store's netns, the secret on stdin."""
    request = {"endpoint": f"http://{ip}:{port}", "access_key": access_key, "secret_key": secret_key,
               "bucket": bucket, "dataset": ds, "timeout": START_TIMEOUT_S}
    return s3_in_netns(names.storage_ns(stack), "seed", request, obj=f"object store {names.storage_ns(stack)}",
                       log=d)


def s3_in_netns(netns: str, op: str, request: dict, *, obj: str, log: Path | None = None,
                timeout: float = START_TIMEOUT_S + 60) -> dict:
    """Run an S3 operation (`op` of _client_main) with boto3 inside `netns`; the request,
    secret included, goes on stdin. Returns the operation's JSON result."""
    argv = ["nsenter", f"--net={net.netns_path(netns)}", "--",
            sys.executable, "-m", "railyard.drivers.lab.storage", op]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "PYTHONPATH": str(paths.PROJECT_ROOT), "AWS_EC2_METADATA_DISABLED": "true"}
    try:
        p = subprocess.run(argv, input=json.dumps(request), capture_output=True, text=True, timeout=timeout,
                           env=env, cwd="/")
    except subprocess.TimeoutExpired as exc:
        raise LabError(obj, f"S3 {op} did not finish within {timeout:g}s") from exc
    if p.returncode != 0:
        tail = f"; weed log:\n{_log_tail(log)}" if log else ""
        raise LabError(obj, f"S3 {op} failed: {(p.stderr or p.stdout).strip()[-2000:]}{tail}")
    return json.loads(p.stdout)


def read_object_store(stack: str, root: Path | None = None) -> dict | None:
    """The store as it is now, or None when its netns is gone:

    {"id", "stack", "netns", "endpoint", "address", "port", "bucket", "access_key", "running",
     "pid", "data_dir", "dataset": {"prefix", "shards", "shard_bytes", "manifest"}|None}"""
    sns = names.storage_ns(stack)
    if not net.netns_exists(sns):
        return None
    d = object_store_dir(stack, root)
    try:
        config = json.loads((d / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    addrs = net.addresses(net.links(sns).get(names.OBJECT_STORE_PORT) or {})
    address = addrs[0] if addrs else None
    pid = _weed_pid(stack, root)
    ds = config.get("dataset")
    return {
        "id": sns,
        "stack": stack,
        "netns": sns,
        "endpoint": f"http://{address.split('/')[0]}:{config.get('port', S3_PORT)}" if address else None,
        "address": address,
        "port": config.get("port"),
        "bucket": config.get("bucket"),
        "access_key": config.get("access_key"),
        "running": pid is not None,
        "pid": pid,
        "data_dir": str(d / "data"),
        "dataset": {**ds, "manifest": f"{ds['prefix']}manifest.json"} if ds else None,
    }


def object_store_exists(stack: str) -> bool:
    return net.netns_exists(names.storage_ns(stack))


def delete_object_store(stack: str, root: Path | None = None) -> dict:
    """Stop weed, remove the store's namespace (its veth with it) and its directory, data included."""
    require_root()
    sns = names.storage_ns(stack)
    d = object_store_dir(stack, root)
    existed = net.netns_exists(sns) or d.exists()
    _kill_store_processes(stack)
    net.netns_delete(sns)
    fabric.detach_service(stack, names.OBJECT_STORE_PORT)
    proc.remove_tree(d)
    return {"id": sns, "deleted": existed}


# --- S3 client operations, run inside a namespace (python -m railyard.drivers.lab.storage OP) ---

def _client(req: dict):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=req["endpoint"], aws_access_key_id=req["access_key"],
                        aws_secret_access_key=req["secret_key"], region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2},
                                      connect_timeout=5, read_timeout=60))


def _wait_for(endpoint: str, timeout: float) -> None:
    host, port = endpoint.split("//", 1)[1].rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _op_seed(req: dict) -> dict:
    from botocore.exceptions import ClientError

    _wait_for(req["endpoint"], req["timeout"])
    s3 = _client(req)
    bucket = req["bucket"]
    deadline = time.monotonic() + req["timeout"]
    while True:  # the gateway answers before the filer and volumes are ready
        try:
            try:
                s3.head_bucket(Bucket=bucket)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
                    raise
                s3.create_bucket(Bucket=bucket)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    uploaded = []
    ds = req.get("dataset")
    if ds:
        manifest = sample_manifest(ds["prefix"], ds["shards"], ds["shard_bytes"])
        have = {o["Key"]: o["Size"] for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=ds["prefix"]) for o in page.get("Contents", [])}
        for i, shard in enumerate(manifest["shards"]):
            if have.get(shard["key"]) == shard["bytes"]:
                continue
            while True:
                try:
                    s3.put_object(Bucket=bucket, Key=shard["key"], Body=shard_bytes(i, shard["bytes"]),
                                  Metadata={"sha256": shard["sha256"]})
                    break
                except Exception:  # a fresh store may still be growing its first volumes
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            uploaded.append(shard["key"])
        body = json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n"
        key = f"{ds['prefix']}manifest.json"
        if have.get(key) != len(body) or uploaded:
            s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json")
            uploaded.append(key)
    return {"bucket": bucket, "uploaded": uploaded}


def _op_list(req: dict) -> dict:
    """Every object under a prefix with its size, and (verify) the SHA-256 of its bytes."""
    s3 = _client(req)
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=req["bucket"], Prefix=req.get("prefix", "")):
        for o in page.get("Contents", []):
            item = {"key": o["Key"], "bytes": o["Size"]}
            if req.get("verify"):
                item["sha256"] = hashlib.sha256(s3.get_object(Bucket=req["bucket"], Key=o["Key"])["Body"].read()).hexdigest()
            out.append(item)
    return {"objects": out}


def _op_put_get(req: dict) -> dict:
    """Put an object, read it back: what a client on a node does (for tests)."""
    s3 = _client(req)
    body = req["body"].encode()
    s3.put_object(Bucket=req["bucket"], Key=req["key"], Body=body)
    back = s3.get_object(Bucket=req["bucket"], Key=req["key"])["Body"].read()
    return {"key": req["key"], "equal": back == body, "bytes": len(back)}


_OPS = {"seed": _op_seed, "list": _op_list, "put-get": _op_put_get}


def _client_main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in _OPS:
        sys.stderr.write(f"usage: python -m railyard.drivers.lab.storage {{{','.join(_OPS)}}} < request.json\n")
        return 2
    req = json.load(sys.stdin)
    try:
        result = _OPS[argv[0]](req)
    except Exception as exc:  # noqa: BLE001 - reported to the caller, which raises LabError
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 1
    sys.stdout.write(json.dumps(result) + "\n")
    return 0
