"""Storage tiers on real lab nodes: a SeaweedFS S3 store on the storage network with the sample
dataset, a local cache filesystem on a loop device inside each node, a shared parallel-FS directory;
and a destroy that leaves none of it behind."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from railyard.drivers.lab import gc, names, net, node, proc, storage
from railyard.drivers.lab.errors import LabError

STORE = "198.18.100.250/24"  # on the test stacks' storage network (conftest: 198.18.100.<10+i>/24)
ACCESS, SECRET = "railyard-test", "not-a-real-secret-0123456789"
BUCKET = "datasets"
TIMINGS: dict[str, float] = {}


def timed(what: str, fn, *args, **kwargs):
    started = time.monotonic()
    out = fn(*args, **kwargs)
    TIMINGS[what] = round(time.monotonic() - started, 3)
    return out


@pytest.fixture(scope="module")
def stored(stack_factory, tmp_path_factory):
    if not storage.weed_binary().exists():
        pytest.skip("weed is not built (the toolchain builds it into .railyard/bin)")
    # The binary from a build cache under /tmp (RAILYARD_CACHE there, as `make fresh-check` has it):
    # weed's own mount namespace has a private /tmp, which once hid it ("weed: not found").
    in_tmp = tmp_path_factory.mktemp("cache") / "seaweedfs-key" / "weed"
    assert str(in_tmp).startswith("/tmp/")
    in_tmp.parent.mkdir()
    shutil.copy2(storage.weed_binary(), in_tmp)
    with pytest.MonkeyPatch.context() as mp:
        # Where create_object_store looks it up (the package only re-exports it).
        mp.setattr(storage.object_store, "weed_binary", lambda root=None: in_tmp)
        yield from _stored(stack_factory)


def _stored(stack_factory):
    c = stack_factory("storage", rails=1, spine=False)
    c.create_fabric()
    for i in range(2):
        c.create_node(f"st-{i}", i)
    c.store = timed("object store create (first start)", storage.create_object_store, c.stack, address=STORE,
                    access_key=ACCESS, secret_key=SECRET, bucket=BUCKET)
    c.caches = {n: timed(f"cache create {n}", storage.create_cache, c.stack, n, mount="/mnt/cache", fs="xfs",
                         raid="raid0", drives=4) for n in ("st-0", "st-1")}
    c.pfs = {n: timed(f"pfs mount {n}", storage.create_pfs_mount, c.stack, n, mount="/mnt/pfs") for n in ("st-0", "st-1")}
    yield c
    print(f"\nstorage timings (s): {json.dumps(TIMINGS)}")


def s3_request(c, **extra) -> dict:
    return {"endpoint": c.store["endpoint"], "access_key": ACCESS, "secret_key": SECRET, "bucket": BUCKET, **extra}


def test_the_store_reports_its_endpoint_and_no_secret(stored):
    s = stored.store
    assert s["running"] and s["endpoint"] == "http://198.18.100.250:8333" and s["bucket"] == BUCKET
    assert s["access_key"] == ACCESS and SECRET not in json.dumps(s)
    assert s["id"] == names.storage_ns(stored.stack)
    identity = storage.object_store_dir(stored.stack) / "s3.json"
    assert identity.stat().st_mode & 0o077 == 0, "the identity file holds the secret: root only"


def test_s3_put_and_get_through_boto3_from_a_nodes_network(stored):
    # boto3 in the node's network namespace: the request leaves through the node's storage NIC.
    out = storage.s3_in_netns(names.node_ns(stored.stack, "st-0"), "put-get",
                              s3_request(stored, key="from-st-0/hello.txt", body="hello from st-0\n"), obj="test")
    assert out == {"key": "from-st-0/hello.txt", "equal": True, "bytes": 16}


def test_s3_put_and_get_from_inside_a_node_with_sigv4(stored, tmp_path):
    # Entirely inside the node (its mount namespace too): curl signs the requests itself.
    endpoint = stored.store["endpoint"]
    script = (f'printf "payload-1\\n" > /tmp/obj && '
              f'curl -fsS --aws-sigv4 aws:amz:us-east-1:s3 --user "$AK:$SK" -T /tmp/obj {endpoint}/{BUCKET}/inside/obj && '
              f'curl -fsS --aws-sigv4 aws:amz:us-east-1:s3 --user "$AK:$SK" {endpoint}/{BUCKET}/inside/obj')
    r = node.run_in_node(stored.stack, "st-1", ["sh", "-c", script], env={"AK": ACCESS, "SK": SECRET}, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "payload-1\n"
    bad = node.run_in_node(stored.stack, "st-1", ["sh", "-c", f'curl -s -o /dev/null -w "%{{http_code}}" '
                                                  f'--aws-sigv4 aws:amz:us-east-1:s3 --user "$AK:wrong" '
                                                  f'{endpoint}/{BUCKET}/inside/obj'], env={"AK": ACCESS})
    assert bad.stdout == "403", "a wrong secret must be refused"


def test_the_sample_dataset_is_listed_with_matching_checksums(stored):
    manifest = storage.sample_manifest()
    listed = storage.s3_in_netns(names.node_ns(stored.stack, "st-0"), "list",
                                 s3_request(stored, prefix="sample/", verify=True), obj="test")["objects"]
    by_key = {o["key"]: o for o in listed}
    assert set(by_key) == {s["key"] for s in manifest["shards"]} | {"sample/manifest.json"}
    for shard in manifest["shards"]:
        got = by_key[shard["key"]]
        assert (got["bytes"], got["sha256"]) == (shard["bytes"], shard["sha256"]), shard["key"]
    assert len(manifest["shards"]) == 4 and all(s["bytes"] == 4 << 20 for s in manifest["shards"])
    # The bytes are the lab's everywhere: the first shard's digest is fixed.
    assert manifest["shards"][0]["sha256"] == hashlib.sha256(storage.shard_bytes(0, 4 << 20)).hexdigest()


def test_the_store_listens_only_on_its_lab_address_in_its_own_namespaces(stored):
    pid = stored.store["pid"]
    sns = names.storage_ns(stored.stack)
    inside = subprocess.run(["ip", "netns", "exec", sns, "ss", "-Htlnp"], capture_output=True, text=True,
                            check=True).stdout
    listeners = {line.split()[3] for line in inside.splitlines() if f"pid={pid}," in line}
    assert listeners and all(a.startswith("198.18.100.250:") for a in listeners), listeners
    host = subprocess.run(["ss", "-Htlnp"], capture_output=True, text=True, check=True).stdout
    assert f"pid={pid}," not in host
    # weed's unix sockets (fixed /tmp paths) are in a /tmp of its own, not the host's.
    tmp = [m for m in proc.mounts(pid) if m["path"] == "/tmp"]
    assert tmp and tmp[-1]["fstype"] == "tmpfs" and tmp[-1]["source"] == names.stack_prefix(stored.stack) + "storage"
    sockets = list(Path(f"/proc/{pid}/root/tmp").glob("seaweedfs-*.sock"))
    assert sockets and all(not (Path("/tmp") / s.name).exists() or
                           (Path("/tmp") / s.name).stat().st_ino != s.stat().st_ino for s in sockets)


def test_create_object_store_again_keeps_the_server(stored):
    again = timed("object store create again", storage.create_object_store, stored.stack, address=STORE,
                  access_key=ACCESS, secret_key=SECRET, bucket=BUCKET)
    assert again == stored.store
    assert storage.read_object_store(stored.stack) == again


def test_the_cache_is_mounted_inside_the_node_and_not_on_the_host(stored):
    for n, state in stored.caches.items():
        assert state["mounted"] and state["fs"] == "xfs" and state["mount"] == "/mnt/cache"
        df = node.run_in_node(stored.stack, n, ["sh", "-c", "findmnt -no SOURCE,FSTYPE /mnt/cache && "
                                                "echo data > /mnt/cache/probe && cat /mnt/cache/probe"], check=True)
        source, fstype, probe = df.stdout.split()
        assert (source, fstype, probe) == (state["device"], "xfs", "data")
        assert not [m for m in proc.mounts() if m["source"] == state["device"] or m["path"] == "/mnt/cache"]
    devices = {s["device"] for s in stored.caches.values()}
    assert len(devices) == 2, "one device per node"
    if storage.md_available():
        assert all(s["raid"] == "raid0" and s["note"] is None for s in stored.caches.values())
    else:
        assert all(s["raid"] == "none" and "no md" in s["note"] for s in stored.caches.values())


def test_cache_and_pfs_again_change_nothing(stored):
    for n in ("st-0", "st-1"):
        assert timed(f"cache create again {n}", storage.create_cache, stored.stack, n, mount="/mnt/cache", fs="xfs",
                     raid="raid0", drives=4) == stored.caches[n]
        assert storage.create_pfs_mount(stored.stack, n, mount="/mnt/pfs") == stored.pfs[n]


def test_the_parallel_fs_is_shared_between_nodes(stored):
    node.run_in_node(stored.stack, "st-0", ["sh", "-c", "echo written-on-st-0 > /mnt/pfs/shared.txt"], check=True)
    got = node.run_in_node(stored.stack, "st-1", ["cat", "/mnt/pfs/shared.txt"], check=True).stdout
    assert got == "written-on-st-0\n"
    assert (storage.pfs_dir(stored.stack) / "shared.txt").read_text() == got
    assert all(s["mounted"] for s in stored.pfs.values())
    assert not [m for m in proc.mounts() if m["path"] == "/mnt/pfs"]


def test_a_mount_point_on_the_read_only_host_is_refused_and_the_cache_stays(stored):
    # /srv passes the mount point rule (/opt no longer does): the node's root is the host's, read-only.
    with pytest.raises(LabError, match="Read-only|read-only"):
        storage.create_cache(stored.stack, "st-0", mount="/srv/railyard-cache")
    with pytest.raises(LabError, match="/opt is a directory the operating system lives in"):
        storage.create_cache(stored.stack, "st-0", mount="/opt/railyard-cache")
    assert storage.read_cache(stored.stack, "st-0") == stored.caches["st-0"]


def test_delete_cache_and_pfs_mount_leave_no_mount_or_loop_device(stored):
    dev = stored.caches["st-1"]["device"]
    assert storage.delete_cache(stored.stack, "st-1")["deleted"] is True
    assert storage.delete_pfs_mount(stored.stack, "st-1")["deleted"] is True
    pid = node.init_pid(stored.stack, "st-1")
    assert not [m for m in proc.mounts(pid) if m["path"] in ("/mnt/cache", "/mnt/pfs")]
    assert not proc.loops_backed_under(node.node_dir(stored.stack, "st-1"))
    assert dev not in proc.loops_backed_under(storage.object_store_dir(stored.stack).parent)
    assert storage.read_cache(stored.stack, "st-1") is None and storage.delete_cache(stored.stack, "st-1")["deleted"] is False


def test_gc_keeps_known_storage_and_removes_an_unknown_store(stored):
    stack = stored.stack
    nodes = {names.fabric_ns(stack)} | {names.node_ns(stack, n) for n in ("st-0", "st-1")}
    removed = gc.gc(stack, nodes | {names.storage_ns(stack)})
    assert not any(removed.values()), removed
    assert storage.read_object_store(stack)["running"]
    weed = stored.store["pid"]
    removed = gc.gc(stack, nodes)  # a state that lost the store
    assert removed["netns"] == [names.storage_ns(stack)]
    assert str(storage.object_store_dir(stack)) in removed["dirs"]
    assert not proc.alive(weed) and storage.read_object_store(stack) is None
    # The parallel FS stays: the known nodes mount it.
    assert storage.pfs_exists(stack) and storage.read_pfs_mount(stack, "st-0")["mounted"]


def test_destroy_leaves_nothing_of_the_stack(stored):
    stack = stored.stack
    prefix = names.stack_prefix(stack)
    weed = stored.store["pid"]
    agents = [node.agent_pid(stack, n) for n in ("st-0", "st-1")]
    loops = [s["device"] for s in stored.caches.values() if s["device"]]
    assert weed and all(agents) and loops
    removed = timed("destroy_all", gc.destroy_all, stack)
    assert removed["netns"] and removed["dirs"]
    assert not [p for p in [weed, *agents] if proc.alive(p)]
    assert gc.inventory(stack) == {"stack": stack, "netns": [], "host_links": [], "processes": [], "mounts": [],
                                   "loops": [], "dirs": []}
    sh = lambda *a: subprocess.run(list(a), capture_output=True, text=True, check=True).stdout
    assert prefix not in sh("ip", "netns", "list") and prefix not in sh("ip", "-o", "link")
    assert not [l for l in sh("losetup", "-a").splitlines() if f"/lab/{stack}/" in l]
    assert f"/lab/{stack}" not in Path("/proc/self/mountinfo").read_text()
    assert not [l for l in sh("ps", "-eo", "pid=,args=").splitlines()
                if re.search(rf"{re.escape(prefix)}|/lab/{re.escape(stack)}/", l)]
    assert not net.netns_exists(names.storage_ns(stack))
