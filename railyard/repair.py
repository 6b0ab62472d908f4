"""The repair loop (`railyard verify --repair`): nodes verification found faulty are taken out of
Slurm, reset, checked again and returned, within each pool's budget; the rules are
railyard.model.node_health's, the reading railyard.verify's.

For each faulty node, in name order:

1. suspect: it is read again (a quick check's second look), and returned to `ready` if that
   finds nothing;
2. drained: Slurm drains it with a `railyard:` reason, if its pool has room (nodes out of
   service for any reason count), and its jobs are waited for up to railyard:health.drainTimeout;
   a node still busy then stays drained for the next run, never reset under a job;
3. repairing: its driver reboots it (drivers.reboot; through its BMC where it has one and does
   not answer or come back, drivers.power_cycle), the site playbook tunes it again (a boot
   resets what tuning set at run time, slurmd among it) and it is read again;
4. ready and resumed in Slurm when nothing is found; drained for another reset otherwise, and
   failed after MAX_TRIES: it stays drained and `railyard verify` hands it to a person.

A node a person drained, with a reason of their own, is never touched and is reported. Each
state change is recorded with its time, reason and finding in .railyard/health/<stack>.json.
Everything with side effects comes in through Actions, so the loop itself is tested with fakes.
"""

from __future__ import annotations

import fcntl
import shlex
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, ContextManager, Iterator, Mapping, Protocol

from railyard.model.health_check import SLURMD_PREFIX
from railyard.model.pair_collectives import pair_rail
from railyard.model.node_health import (
    MAX_TRIES, OUT, SINFO, Held, NodeState, after_check, dump_states, load_states, latest, merged, parse_sinfo,
    read_on, reason, slurm_user, states_from, take_out, triage,
)

if TYPE_CHECKING:
    from railyard.kube_api import Client as KubeClient
    from railyard.model.plan import Plan
    from railyard.model.spec.types import Spec
    from railyard.remote.ssh import Session, Target

POLL_S = 2.0
NO_SCHEDULER = ("the repair loop takes nodes out of Slurm or Kubernetes, and the stack has neither "
                "(railyard:slurm, or railyard:kubernetes with a kubeconfig in its outputs)")


class RepairError(Exception):
    """The loop could not go on (the scheduler did not answer, another run holds the stack)."""


class Abort(RepairError):
    """Stop the run at once, whatever node it is on: something about the cluster is not to be
    trusted (a host answered with another host key)."""


class Scheduler(Protocol):
    name: str

    def read(self) -> dict[str, Held]: ...

    def drain(self, node: str, why: str) -> None: ...

    def resume(self, node: str) -> None: ...

    def hold(self, who: str) -> ContextManager[None]:
        """The cluster's one repair run, held in the scheduler itself while the block runs, so a
        run from another checkout is refused; RepairError naming the holder where one is."""
        ...

    def lost(self) -> str | None:
        """Why the hold is no longer sure (its session gone, its lease lapsed), or None."""
        ...


# slurmctld's node holds the lock: flock on a file of its /run (gone at a boot), kept while the
# session's stdin brings a heartbeat at least every LOCK_SILENCE_S: a run that ends closes it, one
# that dies takes its ssh with it, and one cut off the network (a laptop put to sleep) falls
# silent, and sshd would not notice the connection gone for hours.
SLURM_LOCK = "/run/railyard-repair.lock"
LOCK_BEAT_S = 15.0
LOCK_SILENCE_S = 60


# The Kubernetes Lease (railyard.kube_lease) of the same.
LEASE = "railyard-repair"


def _hold_script(lock: str, silence: float = LOCK_SILENCE_S) -> str:
    # timeout(1) is run once before the lock is taken: one that cannot run (another syntax) would
    # end the beat loop at once, and let go of a lock its holder thinks it has.
    at = shlex.quote(lock)
    return (f"for tool in flock timeout; do command -v $tool > /dev/null || {{ echo \"error: no $tool here\"; exit 1; }}; done; "
            f"timeout 5 true || {{ echo 'error: timeout 5 true failed'; exit 1; }}; "
            f"if ! (: >> {at}) 2> /dev/null; then echo \"error: {lock} cannot be written\"; exit 1; fi; "
            f"exec 9>> {at}; flock -n 9; rc=$?; "
            f"case $rc in 0) printf '%s\\n' \"$1\" > {at}; echo ours; "
            f"while timeout {silence:g} sh -c 'read -r _'; do :; done;; "
            f"1) echo \"theirs: $(cat {at})\";; *) echo \"error: flock exited $rc\";; esac")


def _refused_by(holder: str) -> RepairError:
    return RepairError(f"another repair run holds this cluster ({holder or 'no holder named'}); try again when it "
                       "ends")


class Slurm:
    """The stack's Slurm, through its own commands on the controller's node over SSH."""

    name = "Slurm"

    def __init__(self, controller: Target, private_key: str | None, timeout: float = 30, lock: str = SLURM_LOCK,
                 beat: float = LOCK_BEAT_S, silence: float = LOCK_SILENCE_S):
        self.controller, self.private_key, self.timeout, self.lock = controller, private_key, timeout, lock
        self.beat, self.silence = beat, silence
        self.slurm_user: str | None = None
        self._kept: Session | None = None

    def _run(self, command: str) -> str:
        from railyard.remote.ssh import SshError, run

        try:
            result = run(self.controller, ["sh", "-c", command], private_key=self.private_key, timeout=self.timeout)
        except SshError as exc:
            raise RepairError(f"Slurm's controller {self.controller.name}: {exc}") from None
        if result.rc != 0:
            said = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise RepairError(f"Slurm's controller {self.controller.name}: `{command}` exited {result.rc}: {said}")
        return result.stdout

    def read(self) -> dict[str, Held]:
        if self.slurm_user is None:
            self.slurm_user = slurm_user(self._run("scontrol show config"))
        return parse_sinfo(self._run(SINFO), self.slurm_user)

    def drain(self, node: str, why: str) -> None:
        self._run(f"scontrol update NodeName={shlex.quote(node)} State=DRAIN Reason={shlex.quote(why)}")

    def resume(self, node: str) -> None:
        self._run(f"scontrol update NodeName={shlex.quote(node)} State=RESUME")

    @contextmanager
    def hold(self, who: str) -> Iterator[None]:
        from railyard.remote.ssh import SshError, session

        with ExitStack() as stack:
            try:
                kept = stack.enter_context(session(self.controller, ["sh", "-c", _hold_script(self.lock, self.silence), "hold", who],
                                                   private_key=self.private_key, timeout=self.timeout,
                                                   heartbeat=self.beat))
            except SshError as exc:
                raise RepairError(f"Slurm's controller {self.controller.name}: {exc}") from None
            said = kept.line
            if said.startswith("theirs:"):
                raise _refused_by(said.removeprefix("theirs:").strip())
            if said != "ours":
                raise RepairError(f"Slurm's controller {self.controller.name}: the repair lock {self.lock} was not "
                                  f"taken ({said or 'no answer'})")
            self._kept = kept
            try:
                yield
            finally:
                self._kept = None

    def lost(self) -> str | None:
        kept = self._kept
        return f"the session holding {self.lock} on {self.controller.name} ended" if kept and kept.lost() else None


class Kubernetes:
    """The stack's Kubernetes, through its API with the stack's kubeconfig: a node out is
    cordoned and tainted `<labelPrefix>/unhealthy:NoSchedule`, with the reason in an annotation of
    the same key. machines: each machine's Node names (a hypervisor's are its VMs')."""

    name = "Kubernetes"

    def __init__(self, client: KubeClient, label_prefix: str, machines: Mapping[str, list[str]]):
        from railyard.model.kubernetes.nodes import cordon_reason_key, unhealthy_key

        self.client, self.machines = client, machines
        self.key = unhealthy_key(label_prefix)
        # Acceptance's cordon (the Kubernetes layer's) marks its nodes with this reason.
        self.acceptance = cordon_reason_key(label_prefix)
        self._gone: threading.Event | None = None

    def read(self) -> dict[str, Held]:
        from railyard.kube_api import ApiError

        try:
            nodes = {n["metadata"]["name"]: n for n in (self.client.get("/api/v1/nodes") or {}).get("items", [])}
            pods = (self.client.get("/api/v1/pods?fieldSelector=status.phase%3DRunning") or {}).get("items", [])
        except (ApiError, OSError) as exc:
            raise RepairError(f"Kubernetes API: {exc}") from None
        # A DaemonSet's pods and a kubelet's static pods (owned by the Node) run on every node:
        # they are no jobs to wait for.
        busy = {p["spec"].get("nodeName") for p in pods
                if not any(o.get("kind") in ("DaemonSet", "Node") for o in p["metadata"].get("ownerReferences") or [])}
        out: dict[str, Held] = {}
        for machine, names in self.machines.items():
            views = [self._held(nodes[n], n in busy) for n in names if n in nodes]
            if views:  # a machine without a Node is none of Kubernetes' to show
                out[machine] = merged(views)
        return out

    def _held(self, node: dict, busy: bool) -> Held:
        annotations = node["metadata"].get("annotations") or {}
        ours = any(t.get("key") == self.key for t in node["spec"].get("taints") or [])
        out = ours or bool(node["spec"].get("unschedulable"))
        why = annotations.get(self.key) if ours else annotations.get(self.acceptance)
        return Held(out=out, reason=why if out else None, busy=busy)

    def _patch(self, name: str, change: Callable[[dict], dict]) -> None:
        """A merge patch of the Node, made from its current spec and checked against its
        resourceVersion: a concurrent change is read again, never overwritten."""
        from railyard.kube_api import ApiError

        for _ in range(5):
            try:
                node = self.client.get(f"/api/v1/nodes/{name}")
                if node is None:
                    raise RepairError(f"Kubernetes has no Node {name}")
                body = change(node)
                body.setdefault("metadata", {})["resourceVersion"] = node["metadata"]["resourceVersion"]
                status, said = self.client.request("PATCH", f"/api/v1/nodes/{name}", body,
                                                   "application/merge-patch+json")
            except (ApiError, OSError) as exc:
                raise RepairError(f"Kubernetes API: {exc}") from None
            if status == 200:
                return
            if status != 409:
                message = said.get("message") if isinstance(said, dict) else said
                raise RepairError(f"Kubernetes API: PATCH Node {name}: HTTP {status}: {message}")
        raise RepairError(f"Kubernetes API: Node {name} kept changing under the patch")

    def drain(self, node: str, why: str) -> None:
        def change(n: dict) -> dict:
            taints = [t for t in n["spec"].get("taints") or [] if t.get("key") != self.key]
            return {"metadata": {"annotations": {self.key: why}},
                    "spec": {"unschedulable": True, "taints": [*taints, {"key": self.key, "effect": "NoSchedule"}]}}

        for name in self.machines.get(node, []):
            self._patch(name, change)

    def resume(self, node: str) -> None:
        def change(n: dict) -> dict:
            taints = [t for t in n["spec"].get("taints") or [] if t.get("key") != self.key]
            return {"metadata": {"annotations": {self.key: None}},
                    "spec": {"unschedulable": None, "taints": taints or None}}

        for name in self.machines.get(node, []):
            self._patch(name, change)

    @contextmanager
    def hold(self, who: str) -> Iterator[None]:
        from railyard import kube_lease
        from railyard.kube_api import ApiError

        with ExitStack() as stack:
            try:
                gone = stack.enter_context(kube_lease.held(self.client, LEASE, who))
            except kube_lease.LeaseHeld as exc:
                raise _refused_by(str(exc)) from None
            except (ApiError, OSError) as exc:
                raise RepairError(f"Kubernetes API: {exc}") from None
            self._gone = gone
            try:
                yield
            finally:
                self._gone = None

    def lost(self) -> str | None:
        from railyard.kube_lease import NAMESPACE

        gone = self._gone
        return f"the Lease {NAMESPACE}/{LEASE} lapsed or was taken" if gone is not None and gone.is_set() else None


class Schedulers:
    """Every scheduler of the stack as one: a node is out where any shows it out, a person's
    where any shows a person's reason, busy where any runs its jobs."""

    def __init__(self, parts: list[Scheduler]):
        self.parts = parts
        self.name = " and ".join(p.name for p in parts)

    def read(self) -> dict[str, Held]:
        views = [p.read() for p in self.parts]
        return {node: merged(v[node] for v in views if node in v) for node in sorted({n for v in views for n in v})}

    def drain(self, node: str, why: str) -> None:
        for p in self.parts:
            p.drain(node, why)

    def resume(self, node: str) -> None:
        """Resume in every scheduler, even where one refuses (Slurm refuses to resume a node it
        has in service already); the first refusal is raised once all were asked."""
        refused: list[RepairError] = []
        for p in self.parts:
            try:
                p.resume(node)
            except RepairError as exc:
                refused.append(exc)
        if refused:
            raise refused[0]

    @contextmanager
    def hold(self, who: str) -> Iterator[None]:
        with ExitStack() as stack:
            for p in self.parts:
                stack.enter_context(p.hold(who))
            yield

    def lost(self) -> str | None:
        return next((why for p in self.parts if (why := p.lost())), None)


@dataclass
class Actions:
    """What the loop does to the cluster, and what it reads: the scheduler, a reset (the driver's
    reboot; raises with why it failed), a re-tune after it, a re-read of some nodes (node ->
    its findings' messages), the clock, and progress lines."""

    scheduler: Scheduler
    reset: Callable[[str], str | None]
    """Resets the node; returns how (a GPU reset, a reboot), for its history."""
    retune: Callable[[str], None]
    recheck: Callable[[list[str]], dict[str, list[str]]]
    now: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    progress: Callable[[str], None] = lambda line: None
    save: Callable[[Mapping[str, NodeState]], None] = lambda states: None
    """Records the states after each change, so a run that stops halfway loses nothing."""
    lost: Callable[[], str | None] = lambda: None
    """Why the run's hold on the cluster (Scheduler.hold) is no longer sure, or None: checked
    before each drain and reset, which another run may be making now."""

    def still_held(self) -> None:
        why = self.lost()
        if why:
            raise RepairError(f"the repair's hold on the cluster was lost ({why}); the run stopped")


@dataclass
class Outcome:
    """What one run left: every node's state, the nodes a person holds (and their reason), those
    acceptance holds, those left drained for the next run, those waiting for room in their pool,
    and what was done, in order."""

    states: dict[str, NodeState]
    by_person: dict[str, str] = field(default_factory=dict)
    by_acceptance: dict[str, str] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)
    """Nodes left drained for the next run: still running jobs, a drain or a return that failed."""
    waiting: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    stopped: str = ""
    """Why the loop stopped part way, where it did (its states are those it saved)."""
    unjudged: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Nodes left as they were because the parts their state rests on were not read (Triage)."""

    def failed(self) -> dict[str, NodeState]:
        """The hand-off list: nodes that need a person."""
        return {n: s for n, s in sorted(self.states.items()) if s.state == "failed"}


def judge(states: Mapping[str, NodeState], findings: Mapping[str, list[str]], nodes: list[str],
          scheduler: Scheduler | None, now: float, *, read: Mapping[str, Collection[str]] | None = None,
          part_of: Mapping[str, str] | None = None) -> Outcome:
    """The states a verification leaves without repairing anything (`railyard verify`): ready
    nodes with a finding become suspect, suspect ones without ready (triage's read and part_of)."""
    held = scheduler.read() if scheduler is not None else {}
    t = triage(states, findings, held, nodes, now, read=read, part_of=part_of)
    return Outcome(states=t.states, by_person=t.by_person, by_acceptance=t.by_acceptance, unjudged=t.unjudged)


def repair(states: Mapping[str, NodeState], findings: Mapping[str, list[str]], nodes: list[str],
           pools: Mapping[str, list[str]], budgets: Mapping[str, int], act: Actions, *,
           drain_timeout: float, keep_out: Mapping[str, str] | None = None,
           read: Mapping[str, Collection[str]] | None = None, part_of: Mapping[str, str] | None = None) -> Outcome:
    """One run of the loop over the nodes verification found faulty (node -> its findings'
    messages). keep_out: nodes never reset, and why (the Slurm controller's own node); a node whose
    every finding is a rail pair's is not reset either (UNTESTED). read, part_of: as triage's, which
    act.recheck brings up to date with what it read (a finding standing in a part it could not
    read again is act.recheck's to keep); a node whose open parts the check after its reset could
    not read is left drained for the next run."""
    keep_out = keep_out or {}
    part_of = part_of if part_of is not None else {}
    held = act.scheduler.read()
    t = triage(states, findings, held, nodes, act.now(), read=read, part_of=part_of)
    out = Outcome(states=t.states, by_person=t.by_person, by_acceptance=t.by_acceptance, unjudged=t.unjudged)
    s = out.states
    findings = dict(findings)

    def note(line: str) -> None:
        out.done.append(line)
        act.progress(line)
        act.save(s)

    def to_person(node: str, h: Held) -> None:
        out.by_person[node] = h.reason or "no reason given"
        note(f"{node}: taken out of service by a person during the run ({out.by_person[node]}); left alone")

    def back(node: str, why: str) -> None:
        h = act.scheduler.read().get(node, Held())
        if h.by_person:
            # Taken out by a person while the node was reset or read: theirs, and not resumed.
            to_person(node, h)
            return
        try:
            _resume(node, act)
        except Abort:
            raise
        except RepairError as exc:
            # Its checks passed: the resets it took count no more against a later fault.
            s[node] = s[node].to("drained", reason(f"not back in service: {exc}"), act.now(), tries=0)
            out.left.append(node)
            note(f"{node}: left drained for the next run: {exc}")
            return
        s[node] = s[node].to("ready", why, act.now(), tries=0)
        note(f"{node}: returned to service ({why})")

    # Nodes Railyard holds out that verification found healthy (a drain from a run whose reset
    # waited for jobs, a fault that went on its own) go back.
    for node in t.returnable:
        back(node, "checks passed")
    # The second look at new suspects: a reading's glitch is not a fault.
    suspects = [n for n in t.faulty if s[n].state == "suspect"]
    if suspects:
        again = act.recheck(suspects)
        for node in suspects:
            if not again.get(node):
                s[node] = s[node].to("ready", "checks passed when read again", act.now())
                note(f"{node}: found healthy when read again")
            else:
                findings[node] = again[node]
                s[node] = s[node].reread(read_on(read, node, s[node]), again[node], part_of)

    def drain(node: str, again: str = "") -> None:
        act.still_held()
        why = reason(findings[node][0])
        try:
            act.scheduler.drain(node, why)
        except Abort:
            raise
        except RepairError as exc:
            # Possibly out in one scheduler and not the other: recorded as drained, so the
            # next run takes it up (drains it again, or lifts the marks, should it be found healthy).
            s[node] = s[node].to("drained", why, act.now(), findings[node][0])
            out.left.append(node)
            note(f"{node}: drain failed ({exc}); left for the next run")
            return
        s[node] = s[node].to("drained", why, act.now(), findings[node][0])
        note(f"{node}: drained in {act.scheduler.name} ({why})" + (f"; {again}" if again else ""))

    queue = [n for n in sorted(t.faulty) if s[n].state in ("suspect", "drained")]
    while queue:
        held = act.scheduler.read()
        # A person who takes a node out during the run takes it over, as one who had before it.
        for node in [n for n in queue if held.get(n, Held()).by_person]:
            to_person(node, held[node])
        queue = [n for n in queue if n not in out.by_person]
        taken = take_out(s, [n for n in queue if s[n].state == "suspect"], held, pools, budgets)
        for node in taken:
            drain(node)
        # A node recorded drained is reset only out of service under the loop's own reason: its
        # drain may have failed in a scheduler, a person may have resumed it, or slurmd's health
        # check, whose drain a run took up, resumes it once its own lighter check passes.
        for node in [n for n in queue if s[n].state == "drained" and n not in out.left and n not in taken]:
            h = held.get(node, Held())
            if not h.all_out or h.system or (h.reason or "").startswith(SLURMD_PREFIX):
                # (Slurm's own DOWN returns the node to service once its slurmd registers after
                # the reboot, ReturnToService=2; a drain of ours outlasts it.)
                drain(node, "in service" if not h.out else "out in one scheduler only" if h.partly
                      else f"set down by Slurm until now ({h.reason})" if h.system
                      else f"held by slurmd's health check until now ({h.reason})")
        for node in [n for n in queue if s[n].state == "drained" and s[n].tries >= MAX_TRIES and n not in out.left]:
            # Its last reset could not be judged (what it was drained for was not read after it):
            # still faulty now, and its resets are spent, so its jobs need not be waited for.
            s[node] = after_check(s[node], findings[node], act.now())
            note(f"{node}: failed after {MAX_TRIES} resets; left drained for a person ({findings[node][0]})")
        drained = [n for n in queue if s[n].state == "drained" and n not in out.left]
        if not drained:
            break
        idle, held = _wait_idle(drained, act, drain_timeout)
        for node in drained:
            if node not in idle:
                out.left.append(node)
                note(f"{node}: still running jobs after {drain_timeout:g} s; left drained for the next run")
        for node in idle:
            h = held.get(node, Held())
            if h.by_person:
                to_person(node, h)
                continue
            if not h.all_out:
                # Returned to service while its jobs were waited for: not reset under new ones.
                out.left.append(node)
                note(f"{node}: back in service during the wait; left for the next run, which drains it again")
                continue
            why_not = keep_out.get(node) or (UNTESTED if _untestable(findings[node]) else None)
            if why_not:
                s[node] = s[node].to("failed", reason(f"not reset: {why_not}"), act.now(), findings[node][0])
                note(f"{node}: failed, not reset ({why_not})")
                continue
            act.still_held()
            tries = s[node].tries + 1
            s[node] = s[node].to("repairing", f"reset {tries} of {MAX_TRIES}", act.now(), tries=tries)
            note(f"{node}: resetting (try {tries} of {MAX_TRIES})")
            reread = True
            try:
                how = act.reset(node)
                if how:
                    note(f"{node}: {how}")
                act.retune(node)
                found = act.recheck([node]).get(node) or []
            except Abort:
                raise
            except Exception as exc:  # a reset or re-tune that failed is a finding of the node's
                found, reread = [f"{node}: reset failed: {exc}"], False
            parts = read_on(read, node, s[node])
            unread = s[node].unread(parts) if reread else ()
            s[node] = s[node].reread(parts, found, part_of)
            if unread:
                # What it was drained for could not be read after the reset (its lldpd not heard
                # yet): not judged mended or faulty, its reset counted; the next run reads it.
                s[node] = s[node].to("drained", reason(f"{', '.join(unread)} not read after its reset"), act.now())
                out.left.append(node)
                note(f"{node}: {', '.join(unread)} not read after its reset; left drained for the next run")
                continue
            checked = after_check(s[node], found, act.now())
            if checked.state == "ready":
                back(node, "checks passed after reset")  # ready once its schedulers have it back
                continue
            if checked.state == "drained" and _untestable(found):
                # What is left no reset re-tests: a person's, as such a node is before any reset.
                s[node] = s[node].to("failed", reason(f"not reset again: {found[0]}"), act.now(), found[0])
                note(f"{node}: failed, not reset again ({UNTESTED}); left drained for a person ({found[0]})")
                continue
            s[node] = checked
            if s[node].state == "failed":
                note(f"{node}: failed after {MAX_TRIES} resets; left drained for a person ({found[0]})")
            else:
                findings[node] = found
                note(f"{node}: still faulty after its reset ({found[0]})")
        # Each pass resets every idle drained node once, so the loop ends: a node leaves the
        # queue ready, failed, or left for the next run; suspects with no room in their pool end it.
        queue = [n for n in queue if n not in out.left and n not in out.by_person
                 and s[n].state in ("suspect", "drained")]
    out.waiting = [n for n in sorted(t.faulty) if s[n].state == "suspect" and n not in out.by_person]
    for node in out.waiting:
        note(f"{node}: waits for room in its pool (maxUnavailable)")
    act.save(s)
    return out


# A rail pair's finding is a cable, an optic or a NIC, and Slurm runs no pair on a drained node: a
# node whose every finding is one goes to a person without a reset, none could re-test it.
UNTESTED = "a rail pair's finding, which Slurm cannot re-test on a drained node"


def _untestable(findings: list[str]) -> bool:
    return bool(findings) and all(pair_rail(m) for m in findings)


def _resume(node: str, act: Actions, timeout: float = 90) -> None:
    """Return the node to service and wait until its scheduler shows it there, responding. A node
    just rebooted may refuse the resume until its daemon registers again: it is asked again
    until the timeout, then RepairError."""
    deadline = act.now() + timeout
    while True:
        try:
            act.scheduler.resume(node)
            said = None
        except RepairError as exc:
            said = str(exc)
        now = act.scheduler.read().get(node, Held())
        if not now.out and now.responding:  # in service, and its daemon heard from again
            return
        if act.now() >= deadline:
            raise RepairError(f"{node} is not back in service {timeout:g} s after its resume"
                              + (f": {said}" if said else ""))
        act.sleep(POLL_S)


def _wait_idle(nodes: list[str], act: Actions, timeout: float) -> tuple[list[str], dict[str, Held]]:
    """The nodes among `nodes` with no job left, waiting up to `timeout` for the others, and the
    schedulers' last view of every node."""
    deadline = act.now() + timeout
    while True:
        held = act.scheduler.read()
        idle = [n for n in nodes if not held.get(n, Held()).busy]
        if len(idle) == len(nodes) or act.now() >= deadline:
            return idle, held
        act.sleep(POLL_S)


def schedulers(spec: Spec, plan: Plan, hosts: Mapping[str, Target], private_key: str | None, outputs: dict,
               held: ExitStack) -> Schedulers | None:
    """The stack's schedulers (Slurm on its controller's node; Kubernetes through the kubeconfig
    the stack outputs), or None without either; `held` keeps the API client's key file open."""
    from railyard.kube_api import ApiError, from_kubeconfig
    from railyard.model.kubernetes import plan_kubernetes

    parts: list[Scheduler] = []
    if plan.slurm is not None and plan.slurm.controller.name in hosts:
        parts.append(Slurm(hosts[plan.slurm.controller.name], private_key))
    layer = plan_kubernetes(plan)
    if layer is not None and outputs.get("kubeconfig"):
        try:
            client = held.enter_context(from_kubeconfig(outputs["kubeconfig"]))
        except (ApiError, ValueError, KeyError, OSError) as exc:
            raise RepairError(f"the stack's kubeconfig: {exc}") from None
        machines: dict[str, list[str]] = {}
        for kn in layer.nodes:
            machines.setdefault(kn.hypervisor or kn.name, []).append(kn.name)
        parts.append(Kubernetes(client, layer.label_prefix, machines))
    return Schedulers(parts) if parts else None


def actions(spec: Spec, plan: Plan, hosts: Mapping[str, Target], private_key: str | None, outputs: dict,
            scheduler: Scheduler | None, recheck: Callable[[list[str]], dict[str, list[str]]],
            progress: Callable[[str], None],
            gpu_resets: Callable[[str], list[str] | None] = lambda node: None) -> Actions:
    """The loop's actions on a stack that is up: its schedulers, its resets, its tuning.

    gpu_resets: the GPUs whose reset alone would clear what the node's last reading found
    (railyard.model.gpu_health.gpu_reset_targets), or None. A node's first reset in a run is
    then `nvidia-smi -r` of those GPUs, which keeps the node up; a GPU reset that fails, and any
    later reset, is the driver's reboot."""
    from railyard import drivers
    from railyard.remote import rollout
    from railyard.remote.ssh import HostKeyMismatch
    from railyard.tuning import runner

    if scheduler is None:
        raise RepairError(NO_SCHEDULER)
    tuned, secret_vars = runner.stack_hosts(spec, plan, outputs)

    reset_gpus: set[str] = set()

    def reset(node: str) -> str | None:
        gpus = gpu_resets(node) if node not in reset_gpus else None
        reset_gpus.add(node)
        if gpus:
            try:
                said = _gpu_reset(hosts[node], gpus, private_key)
            except HostKeyMismatch as exc:
                raise Abort(f"{node}: {exc}; the run stopped") from None
            if said is None:
                return f"GPU reset of {', '.join(gpus)}"
            progress(f"{node}: GPU reset failed ({said}); rebooting instead")
        how = drivers.reboot(spec, plan.node_named(node).pool)
        if how is None:
            raise RepairError(f"the {spec.driver} driver cannot reboot its machines")
        try:
            done = rollout.reboot(hosts[node], command=how.command, timeout=how.timeout_s, private_key=private_key,
                                  progress=progress, power_cycle=drivers.power_cycle(spec, plan, node))
        except rollout.RolloutError as exc:
            raise RepairError(str(exc)) from None
        except HostKeyMismatch as exc:
            raise Abort(f"{node}: {exc}; the run stopped") from None
        return f"power-cycled through its BMC ({done['bmc_reset']})" if done.get("bmc_reset") else "rebooted"

    def retune(node: str) -> None:
        result = runner.run(spec.stack, tuned, private_key, limit=node, secret_vars=secret_vars,
                            timeout=spec.health.retune_timeout_s)
        if result.status == "timeout":
            raise RepairError(f"tuning after the reset did not finish in {spec.health.retune_timeout_s} s "
                              "(railyard:health.retuneTimeout); it was stopped")
        if not result.ok:
            raise RepairError("tuning after the reset failed: " + "; ".join(str(f) for f in result.failures[:3]))

    return Actions(scheduler=scheduler, reset=reset, retune=retune, recheck=recheck, progress=progress,
                   lost=scheduler.lost)


def _gpu_reset(host: Target, gpus: list[str], private_key: str | None) -> str | None:
    """`nvidia-smi -r -i <bus id>` of each GPU on the node; None once every one is reset, else what
    the tool or SSH said. A GPU some process still holds is refused by the tool itself."""
    from railyard.remote.ssh import HostKeyMismatch, SshError, run

    script = "; ".join(f"nvidia-smi -r -i {shlex.quote(g)} || exit $?" for g in gpus)
    try:
        result = run(host, ["sh", "-c", script], private_key=private_key, timeout=120)
    except HostKeyMismatch:
        raise  # another machine answers: the caller stops the run
    except SshError as exc:
        return str(exc)
    if result.rc == 0:
        return None
    lines = [line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    return f"exit {result.rc}: {lines[-1] if lines else 'no output'}"


def budgets(spec: Spec, plan: Plan, nodes: list[str]) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Each pool's nodes (of those given) and how many of them may be out at once:
    railyard:health.maxUnavailable, else the driver's own budget for the pool."""
    from railyard import drivers

    pools: dict[str, list[str]] = {}
    for node in nodes:
        pools.setdefault(plan.node_named(node).pool, []).append(node)
    out = {}
    for pool in pools:
        how = drivers.reboot(spec, pool)
        out[pool] = spec.health.max_unavailable or (how.max_unavailable if how else 1)
    return pools, out


# --- the states file --------------------------------------------------------------------------

def _parsed(what: str, parse: Callable[[], dict[str, NodeState]], advice: str) -> dict[str, NodeState]:
    try:
        return parse()
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RepairError(f"{what}: not node states Railyard wrote ({type(exc).__name__}: {exc}); {advice}") from None


def read_states(path: Path) -> dict[str, NodeState]:
    if not path.is_file():
        return {}
    return _parsed(str(path), lambda: load_states(path.read_text()),
                   "move it aside, and the states are taken again from the stack's nodeHealth output")


def write_states(path: Path, states: Mapping[str, NodeState]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(dump_states(states))
    tmp.replace(path)


def forget_states(stack: str, driver: str | None, still_held: Callable[[], bool] = lambda: False) -> None:
    """Remove the states file of a stack destroyed whole whose machines went with it: the next
    `up`'s are new. Servers that outlive their stack (the hosts driver's) keep their states and a
    person's hand-off list, and so does a stack whose driver is not known, or one `still_held`
    says is not gone whole (asked last: it reads the stack's state). The lock file stays: a
    verify may still hold it, and a new file would let a second run in beside it."""
    from railyard import drivers, paths

    path = paths.node_states(stack)
    if driver in drivers.DRIVERS and not drivers.entry(driver).capabilities.keeps_machines and path.is_file() \
            and not still_held():
        path.unlink(missing_ok=True)


def recorded_in(outputs: Mapping) -> dict[str, NodeState]:
    """The node states a stack's outputs hold; none for a stack last up before the output existed,
    or of a driver verify cannot read."""
    doc = outputs.get("nodeHealth")
    if not isinstance(doc, Mapping):
        return {}
    return _parsed("the stack output nodeHealth", lambda: states_from(doc),
                   "the next verify that changes a state writes it again")


def take_recorded(path: Path, recorded: Mapping[str, NodeState]) -> tuple[dict[str, NodeState], list[str]]:
    """Bring the states file up to the stack's recorded states (recorded_in) where another checkout
    (a fresh clone, the health workflow's runner) recorded a later change of a node: the states
    now, and the nodes taken. Hold `holding(path)` around it. Without this the program, which
    exports the file, would show such nodes back as they were here."""
    local = read_states(path)
    now = latest(local, recorded)
    taken = sorted(n for n, st in now.items() if local.get(n) != st)
    if taken:
        write_states(path, now)
    return now, taken


def taken_line(stack: str, taken: list[str]) -> str:
    return f"node states of {', '.join(taken)} taken from stack {stack}'s nodeHealth output (recorded later there)"


def take_recorded_from_stack(stack: str, driver: str) -> None:
    """take_recorded from the stack's outputs, for a command about to run the program, saying on
    stderr what it took or why it could not."""
    import sys

    from railyard import drivers, paths
    from railyard.engine import pulumi
    from railyard.engine.toolchain import ToolchainError

    if not drivers.verifiable(driver):
        return
    path = paths.node_states(stack)
    try:
        outputs = pulumi.stack_outputs(stack)
    except (pulumi.PulumiError, ToolchainError):
        # A stack never up has no outputs; a backend this checkout cannot open is named by the
        # engine command that follows.
        return
    try:
        recorded = recorded_in(outputs)
        if not any(s.history for s in recorded.values()):
            return  # nothing ever recorded: no states file, no lock file
        with holding(path):
            _, taken = take_recorded(path, recorded)
    except (RepairError, OSError) as exc:
        print(f"railyard: node states not taken from stack {stack}'s nodeHealth output: {exc}", file=sys.stderr)
        return
    if taken:
        print(f"railyard: {taken_line(stack, taken)}", file=sys.stderr)


@contextmanager
def holding(path: Path) -> Iterator[None]:
    """One run at a time per stack: a second one is refused, not queued behind a long repair."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RepairError(f"another `railyard verify` holds {path.name}; try again when it ends") from None
        yield


def out_of_service(states: Mapping[str, NodeState]) -> list[str]:
    """Nodes Railyard holds out of service, in name order."""
    return sorted(n for n, s in states.items() if s.state in OUT)
