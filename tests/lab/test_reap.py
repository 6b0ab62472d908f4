"""Ephemeral and long-lived lab stacks on the real engine: `railyard up` tags the expiry, `railyard
reap` destroys what expired and nothing else, `railyard down` refuses a protected stack unless
--force, and a plain `make down` undoes `make up` of a lab stack; on the local file backend and on
an S3-compatible one.

The stacks are the test's own (never the user's `lab`), in copies of the project with backends of
their own (tests/lab/railyard_project.py). The S3 backend is a SeaweedFS server this module starts
on 127.0.0.1 with a temporary directory and stops at the end; no lab stack owns it, so destroying
a stack can never take its own backend with it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from railyard import lifecycle, paths
from railyard.lifecycle.backend import expiry_in_state
from railyard.model.node_health import NodeState
from railyard.repair import write_states
from tests.lab.railyard_project import RailyardProject, free_networks, lab_config

ROOT = paths.PROJECT_ROOT
SHORT = {"railyard:ephemeral": {"ttl": "1m"}}  # the shortest ttl the spec allows
LONG = {"railyard:ephemeral": {"ttl": "1d"}}
ACCESS_KEY, SECRET_KEY, BUCKET = "railyard-test", "railyard-test-secret", "state"


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(n: int) -> list[int]:
    """Ports whose weed gRPC twin (port + 10000) is free too."""
    out: list[int] = []
    while len(out) < n:
        port = random.randint(20000, 45000)
        if port not in out and _port_free(port) and _port_free(port + 10000):
            out.append(port)
    return out


class Weed:
    """`weed server` with S3 on 127.0.0.1, data in a temporary directory."""

    def __init__(self, base: Path):
        weed = paths.bin_dir(ROOT) / "weed"
        if not os.access(weed, os.X_OK):
            pytest.fail(f"{weed} is missing: the toolchain builds it (make toolchain)")
        master, volume, filer, self.port = _free_ports(4)
        (base / "data").mkdir(parents=True)
        (base / "s3.json").write_text(json.dumps({"identities": [{
            "name": "test", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        self.log = (base / "weed.log").open("w")
        self.proc = subprocess.Popen(
            [str(weed), "server", f"-dir={base / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
             f"-master.port={master}", f"-volume.port={volume}", "-filer", f"-filer.port={filer}",
             "-s3", f"-s3.port={self.port}", f"-s3.config={base / 's3.json'}", "-master.telemetry=false",
             "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=64", "-volume.max=8",
             "-master.defaultReplication=000", "-volume.preStopSeconds=0", "-metricsPort=0"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._create_bucket()

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name="us-east-1")

    def _create_bucket(self) -> None:
        deadline = time.time() + 90
        while True:
            try:
                self.client().create_bucket(Bucket=BUCKET)
                return
            except Exception:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise
                time.sleep(1)

    def keys(self) -> list[str]:
        out = self.client().list_objects_v2(Bucket=BUCKET)
        return [o["Key"] for o in out.get("Contents", [])]

    @property
    def backend_url(self) -> str:
        return f"s3://{BUCKET}?endpoint={self.endpoint}&use_path_style=true&region=us-east-1"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Three stacks in a file backend (expiring, unexpired, long-lived) and one expiring stack in an
    S3 backend, all brought up at once (host tuning makes each up take about a minute)."""
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    base = tmp_path_factory.mktemp("reap")
    weed = Weed(base / "weed")
    file = RailyardProject(base / "file")
    s3 = RailyardProject(base / "s3", backend_url=weed.backend_url, env={
        "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1"})
    nets = free_networks(8)
    file.write_stack("rpexp", lab_config(1, nets[0], nets[1], **SHORT))
    file.write_stack("rpyoung", lab_config(1, nets[2], nets[3], **LONG))
    # A lab stack is not protected by default (make down undoes make up); this one asks to be.
    file.write_stack("rplong", lab_config(1, nets[4], nets[5], **{"railyard:protect": True}))
    s3.write_stack("rps3exp", lab_config(1, nets[6], nets[7], **SHORT))
    try:
        jobs = [(file, "rpexp"), (file, "rpyoung"), (file, "rplong"), (s3, "rps3exp")]
        with ThreadPoolExecutor(len(jobs)) as pool:
            ups = list(pool.map(lambda j: j[0].railyard("up", "--stack", j[1], check=False), jobs))
        for (_, stack), proc in zip(jobs, ups):
            assert proc.returncode == 0, f"up {stack}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        yield {"file": file, "s3": s3, "weed": weed, "ups": dict(zip((s for _, s in jobs), ups)), "nets": nets}
    finally:
        try:
            file.cleanup()
            s3.cleanup()
        finally:
            weed.stop()


def wait_until_expired(project: RailyardProject, stack: str) -> None:
    when = lifecycle.parse_rfc3339(project.tags(stack)[lifecycle.EXPIRES_TAG])
    delay = (when - lifecycle.utcnow()).total_seconds() + 1
    if delay > 0:
        time.sleep(delay)


def resources(project: RailyardProject, stack: str) -> list[dict]:
    state = json.loads(project.pulumi("stack", "export", stack=stack).stdout)
    return state["deployment"].get("resources") or []


def test_up_tags_an_ephemeral_stack_with_the_expiry_it_exports(world):
    file = world["file"]
    outputs = json.loads(file.pulumi("stack", "output", "--json", stack="rpyoung").stdout)
    tag = file.tags("rpyoung")[lifecycle.EXPIRES_TAG]
    assert outputs["expiresAt"] == tag
    when = lifecycle.parse_rfc3339(tag)
    assert dt.timedelta(hours=23) < when - lifecycle.utcnow() <= dt.timedelta(days=1), tag
    assert "is ephemeral: expires" in world["ups"]["rpyoung"].stdout


def test_a_later_up_keeps_the_expiry_of_the_first(world):
    file = world["file"]
    before = file.tags("rpyoung")[lifecycle.EXPIRES_TAG]
    file.railyard("up", "--stack", "rpyoung")
    assert file.tags("rpyoung")[lifecycle.EXPIRES_TAG] == before
    assert expiry_in_state(resources(file, "rpyoung")) == before


def test_a_long_lived_stack_has_no_expiry_and_a_protected_cluster(world):
    file = world["file"]
    assert lifecycle.EXPIRES_TAG not in file.tags("rplong")
    cluster = [r for r in resources(file, "rplong") if r["type"].startswith(("railyard:index:", "pulumi-python:"))]
    assert cluster and all(r.get("protect") for r in cluster), \
        [r["urn"] for r in cluster if not r.get("protect")]


def test_down_refuses_a_long_lived_stack_and_says_how_to_proceed(world):
    file = world["file"]
    proc = file.railyard("down", "--stack", "rplong", check=False)
    assert proc.returncode == 1
    assert "is protected" in proc.stderr and "railyard down --stack rplong --force" in proc.stderr, proc.stderr
    assert file.leftovers("rplong"), "a refused down must leave the stack as it was"


def test_make_down_undoes_make_up_of_a_lab_stack_without_force(world, tmp_path):
    """The README's first command and its undo, as a user types them (make, not railyard), in a
    project copy of its own so the other tests' backend keeps exactly their stacks."""
    file = RailyardProject(tmp_path)
    nets = free_networks(2, taken=set(world["nets"]))
    file.write_stack("rpplay", lab_config(1, nets[0], nets[1]))
    make = lambda *a: subprocess.run(["make", "-C", str(ROOT), *a], env=file.env, text=True,  # noqa: E731
                                     capture_output=True, timeout=900, check=False)
    try:
        up = make("up", "STACK=rpplay")
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        state = resources(file, "rpplay")
        assert state and not [r["urn"] for r in state if r.get("protect")], "a lab stack is not protected by default"
        down = make("down", "STACK=rpplay")
        assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
        assert "is protected" not in down.stderr
        assert resources(file, "rpplay") == [] and file.leftovers("rpplay") == {}
    finally:
        file.cleanup()


def test_reap_dry_run_lists_every_stack_and_changes_nothing(world):
    file = world["file"]
    wait_until_expired(file, "rpexp")
    proc = file.railyard("reap", "--dry-run")
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    assert "would be destroyed and removed" in lines["rpexp"], proc.stdout
    assert "not expired yet" in lines["rpyoung"], proc.stdout
    assert "long-lived" in lines["rplong"], proc.stdout
    assert file.stack_names() == ["rpexp", "rplong", "rpyoung"]
    assert file.leftovers("rpexp")


def test_reap_refuses_named_stacks_that_have_not_expired_or_are_long_lived(world):
    proc = world["file"].railyard("reap", "--stack", "rplong", "--stack", "rpyoung")
    assert proc.returncode == 0
    assert "refused: long-lived" in proc.stdout and "refused: not expired yet" in proc.stdout, proc.stdout
    assert "0 destroyed" in proc.stdout


def test_reap_destroys_the_expired_stack_leaving_nothing_and_touches_no_other(world):
    file = world["file"]
    wait_until_expired(file, "rpexp")
    before = {s: len(resources(file, s)) for s in ("rpyoung", "rplong")}
    # Node states recorded for two of them (as `railyard verify` writes them).
    failed = {"gpu-0": NodeState().to("failed", "railyard: gpu-0: GPU3 missing", time.time())}
    for stack in ("rpexp", "rpyoung"):
        write_states(paths.node_states(stack, file.dir), failed)
    proc = file.railyard("reap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rpexp" in proc.stdout and "destroyed and removed" in proc.stdout, proc.stdout
    assert file.stack_names() == ["rplong", "rpyoung"]
    assert file.leftovers("rpexp") == {}
    assert {s: len(resources(file, s)) for s in before} == before
    assert file.stack_file("rpexp").exists(), "the stack file belongs to the checkout, not the backend"
    # The reaped lab stack's nodes are gone, and their states with them; the other's stay.
    assert not paths.node_states("rpexp", file.dir).exists()
    assert paths.node_states("rpyoung", file.dir).exists()


def test_reap_exits_non_zero_when_a_destroy_fails(world):
    """An expired stack another update holds locked (the file backend's lock file) cannot be destroyed."""
    file = world["file"]
    file.write_stack("rplocked", lab_config(1, "198.18.254.0/24", "198.18.255.0/24", **SHORT))  # never up
    file.pulumi("stack", "init", "--secrets-provider", "passphrase", stack="rplocked")
    file.pulumi("stack", "tag", "set", lifecycle.EXPIRES_TAG, "2020-01-01T00:00:00Z", stack="rplocked")
    lock = file.base / "state" / ".pulumi" / "locks" / "organization" / "railyard" / "rplocked"
    lock.mkdir(parents=True, exist_ok=True)  # the engine keeps the stack's lock directory
    (lock / "held-by-a-test.json").write_text(json.dumps({
        "pid": 1, "username": "test", "hostname": "elsewhere", "timestamp": "2020-01-01T00:00:00Z"}))
    try:
        proc = file.railyard("reap", check=False)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "rplocked" in proc.stdout and "destroy failed" in proc.stdout, proc.stdout
        assert "rplocked" in file.stack_names()
    finally:
        (lock / "held-by-a-test.json").unlink()
    assert file.railyard("reap", "--stack", "rplocked").returncode == 0
    assert "rplocked" not in file.stack_names()


def test_down_force_unprotects_and_destroys_a_long_lived_stack(world):
    file = world["file"]
    proc = file.railyard("down", "--stack", "rplong", "--force")
    assert "unprotecting" in proc.stderr
    assert file.leftovers("rplong") == {}
    assert resources(file, "rplong") == []


def test_reap_on_an_s3_backend(world):
    s3, weed = world["s3"], world["weed"]
    s3.pulumi("stack", "init", "--secrets-provider", "passphrase", stack="rps3keep")  # long-lived, empty
    wait_until_expired(s3, "rps3exp")
    dry = s3.railyard("reap", "--dry-run")
    assert f"in s3://{BUCKET} " in dry.stdout and "would be destroyed and removed" in dry.stdout, dry.stdout
    assert s3.stack_names() == ["rps3exp", "rps3keep"]
    proc = s3.railyard("reap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert s3.stack_names() == ["rps3keep"]
    assert s3.leftovers("rps3exp") == {}
    # The checkpoint is gone; what stays is the engine's own .bak and backups/, as after any stack rm.
    assert ".pulumi/stacks/railyard/rps3exp.json" not in weed.keys(), weed.keys()
