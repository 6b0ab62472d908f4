"""One repair run at a time per cluster, whatever checkout it runs from: the loop holds a lock in
each scheduler (railyard.repair's Slurm.hold, a flock on slurmctld's node kept by an SSH session;
Kubernetes.hold, a coordination.k8s.io/v1 Lease, railyard.kube_lease). A second run is refused
naming the holder; a holder that dies lets go."""

from __future__ import annotations

import copy
import os
import stat
import threading
import types

import pytest

from railyard import kube_lease
from railyard.remote.ssh import Target
from railyard.repair import Kubernetes, RepairError, Schedulers, Slurm


class FakeLeases:
    """The API server's Leases: create (409 where one exists), get, and a PUT checked against
    the resourceVersion it was read at."""

    def __init__(self):
        self.leases: dict[str, dict] = {}
        self.writes = 0

    def get(self, path):
        return copy.deepcopy(self.leases.get(path.rsplit("/", 1)[1]))

    def request(self, method, path, body, content_type="application/json"):
        self.writes += 1
        name = body["metadata"]["name"]
        if method == "POST":
            if name in self.leases:
                return 409, {"message": "already exists"}
            self.leases[name] = {**copy.deepcopy(body), "metadata": {**body["metadata"], "resourceVersion": "1"}}
            return 201, self.leases[name]
        assert method == "PUT"
        current = self.leases[name]
        if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            return 409, {"message": "the object has been modified"}
        version = str(int(current["metadata"]["resourceVersion"]) + 1)
        self.leases[name] = {**copy.deepcopy(body), "metadata": {**body["metadata"], "resourceVersion": version}}
        return 200, self.leases[name]


def kube(api) -> Kubernetes:
    return Kubernetes(api, "railyard.io", {})


def test_a_second_run_is_refused_naming_the_first_and_the_lease_is_free_once_it_ends():
    api = FakeLeases()
    with kube(api).hold("run A"):
        assert api.leases["railyard-repair"]["spec"]["holderIdentity"] == "run A"
        with pytest.raises(RepairError, match=r"another repair run holds this cluster \(run A\)"):
            with kube(api).hold("run B"):
                pass
    assert "holderIdentity" not in api.leases["railyard-repair"]["spec"]
    with kube(api).hold("run B"):
        assert api.leases["railyard-repair"]["spec"]["holderIdentity"] == "run B"


def test_a_lease_its_holder_stopped_renewing_is_taken_once_expired_and_a_live_one_is_renewed():
    api = FakeLeases()
    clock = [1_000_000.0]
    kube_lease.acquire(api, "railyard-repair", "a run that died", now=lambda: clock[0])
    clock[0] += kube_lease.DURATION_S - 1
    with pytest.raises(kube_lease.LeaseHeld):
        kube_lease.acquire(api, "railyard-repair", "run B", now=lambda: clock[0])
    clock[0] += 2
    kube_lease.acquire(api, "railyard-repair", "run B", now=lambda: clock[0])
    assert api.leases["railyard-repair"]["spec"]["holderIdentity"] == "run B"

    renewed = threading.Event()
    first = api.leases["railyard-repair"]["spec"]["renewTime"]

    def tick():
        clock[0] += 5
        if api.leases["railyard-repair"]["spec"]["renewTime"] != first:
            renewed.set()
        return clock[0]

    with kube_lease.held(api, "railyard-repair", "run B", every=0.05, now=tick):
        assert renewed.wait(5), "the holder never renewed its lease"


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    """An `ssh` first on PATH that runs the remote command here, as sshd would there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text('#!/bin/sh\nfor last; do :; done\nexec sh -c "$last"\n')
    ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_slurms_lock_on_the_controller_refuses_a_second_run_and_is_let_go_when_the_session_ends(fake_ssh):
    lock = str(fake_ssh / "railyard-repair.lock")
    controller = Target("gpu-0", "10.0.0.1", host_keys=("ssh-ed25519 AAAA",))
    first, second = Slurm(controller, "KEY", lock=lock), Slurm(controller, "KEY", lock=lock)
    with first.hold("run A from ws-1"):
        with pytest.raises(RepairError, match=r"another repair run holds this cluster \(run A from ws-1\)"):
            with second.hold("run B"):
                pass
    with second.hold("run B"):
        assert open(lock).read() == "run B\n"


def test_both_schedulers_are_held_and_a_refusal_by_one_lets_go_of_the_other(fake_ssh):
    lock = str(fake_ssh / "railyard-repair.lock")
    api = FakeLeases()
    controller = Target("gpu-0", "10.0.0.1", host_keys=("ssh-ed25519 AAAA",))
    with Slurm(controller, "KEY", lock=lock).hold("a person's own run"):
        with pytest.raises(RepairError, match="a person's own run"):
            with Schedulers([kube(api), Slurm(controller, "KEY", lock=lock)]).hold("run B"):
                pass
    assert "holderIdentity" not in api.leases["railyard-repair"]["spec"]


def test_the_controllers_lock_outlives_no_silent_holder_and_a_beating_one_keeps_it(fake_ssh):
    """A holder cut off the network (a laptop put to sleep: no FIN reaches sshd) stops beating,
    and the lock goes after the silence; a live one keeps it however long its run."""
    import subprocess
    import time

    from railyard.repair import _hold_script

    lock = str(fake_ssh / "railyard-repair.lock")
    controller = Target("gpu-0", "10.0.0.1", host_keys=("ssh-ed25519 AAAA",))
    silent = subprocess.Popen(["sh", "-c", _hold_script(lock, silence=2), "hold", "a sleeping laptop"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert silent.stdout.readline().strip() == "ours"
        with pytest.raises(RepairError, match="a sleeping laptop"):
            with Slurm(controller, "KEY", lock=lock).hold("run B"):
                pass
        assert silent.wait(timeout=10) == 0  # its stdin open and silent: let go
    finally:
        silent.kill()
        silent.wait()
    with Slurm(controller, "KEY", lock=lock, beat=0.1, silence=1.5).hold("run B"):
        time.sleep(3.5)
        with pytest.raises(RepairError, match=r"\(run B\)"):
            with Slurm(controller, "KEY", lock=lock).hold("run C"):
                pass


def test_a_lock_that_cannot_be_taken_is_said_so_not_taken_for_another_runs(fake_ssh):
    controller = Target("gpu-0", "10.0.0.1", host_keys=("ssh-ed25519 AAAA",))
    with pytest.raises(RepairError, match=r"the repair lock /nonexistent/dir/x.lock was not taken \(error: "
                                          r"/nonexistent/dir/x.lock cannot be written\)"):
        with Slurm(controller, "KEY", lock="/nonexistent/dir/x.lock").hold("run A"):
            pass


def test_a_hold_that_is_lost_is_seen_by_the_session_and_the_lease_and_stops_the_loop(fake_ssh):
    import time

    from railyard.remote.ssh import session
    from railyard.repair import Actions, repair

    controller = Target("gpu-0", "10.0.0.1", host_keys=("ssh-ed25519 AAAA",))
    with session(controller, "echo ours; exec sleep 30", private_key="KEY", heartbeat=0.1) as kept:
        assert kept.line == "ours" and not kept.lost()
        kept.proc.kill()
        kept.proc.wait()
        assert kept.lost()

    api = FakeLeases()
    with kube_lease.held(api, "railyard-repair", "run A", every=0.05) as gone:
        assert not gone.is_set()
        api.leases["railyard-repair"]["spec"]["holderIdentity"] = "run B"  # it lapsed, and B took it
        deadline = time.monotonic() + 5
        while not gone.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone.is_set()

    # The loop: before its first drain, a lost hold stops the run with nothing done.
    log = []
    act = Actions(scheduler=types.SimpleNamespace(read=dict, drain=lambda n, w: log.append(n), resume=None),
                  reset=lambda n: log.append(n), retune=lambda n: None, recheck=lambda ns: {n: ["x"] for n in ns},
                  lost=lambda: "the session holding /run/railyard-repair.lock on gpu-0 ended")
    with pytest.raises(RepairError, match=r"the repair's hold on the cluster was lost \(the session holding"):
        repair({}, {"gpu-1": ["gpu-1: GPU2 missing"]}, ["gpu-1"], {"gpu": ["gpu-1"]}, {"gpu": 1}, act,
               drain_timeout=0)
    assert log == []
