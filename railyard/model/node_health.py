"""Each node's health state and the repair loop's decisions (`railyard verify --repair`), pure.

A node is in one state:

    ready      in service, nothing found
    suspect    a check found something; it is read again before anything is done to it
    drained    out of scheduling with a `railyard:` reason, waiting for its jobs to end or its reset
    repairing  being reset (a reboot), then checked again
    failed     found faulty after MAX_TRIES resets: out of service until a person looks at it

Every change records when, why and the finding behind it, so `railyard verify` can hand a person
the failed nodes with their history. The loop's side effects (Slurm, resets, SSH) live in
railyard.repair; here are only the rules, so they are tested without a cluster:

- a node a person took out of scheduling (a drain reason without the `railyard:` prefix, or
  none) is never touched, and is reported;
- a pool never has more than its budget of nodes out at once: nodes drained by anyone, and
  nodes Railyard holds drained, repairing or failed, all count;
- a node found faulty twice after a reset is failed, and stays out;
- a node's state moves only on a reading of every part of verification (hardware, fabric,
  health) in which it still has findings (NodeState.open): `--only hardware` neither clears nor
  returns a node drained for an Xid, and the loop leaves that node as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Collection, Iterable, Mapping

STATES = ("ready", "suspect", "drained", "repairing", "failed")
# Slurm's drain reason and the Kubernetes cordon annotation of every node Railyard takes out start
# with this; a reason without it is a person's, and the node is theirs.
PREFIX = "railyard:"
# Acceptance's drains (railyard.model.acceptance): Railyard's, but acceptance's to lift, since the
# loop does not run its network checks.
ACCEPTANCE = f"{PREFIX} acceptance:"
MAX_TRIES = 2
# States in which Railyard holds the node out of scheduling.
OUT = ("drained", "repairing", "failed")


@dataclass(frozen=True)
class Change:
    """One change of a node's state: when (Unix seconds), to what, why, and the finding behind it."""

    time: float
    state: str
    reason: str
    finding: str | None = None

    def to_json(self) -> dict:
        return {"time": round(self.time, 1), "state": self.state, "reason": self.reason, "finding": self.finding}


@dataclass(frozen=True)
class NodeState:
    state: str = "ready"
    reason: str = ""
    tries: int = 0
    """Resets since the node was last ready."""
    history: tuple[Change, ...] = ()
    open: tuple[str, ...] = ()
    """The parts of verification (hardware, fabric, health, and deep: health's --deep checks) in
    which the node's findings stand: those its last reading of each part found something in. Empty for a record made before they
    were kept, which any reading settles, as then."""

    def to(self, state: str, reason: str, now: float, finding: str | None = None, *,
           tries: int | None = None) -> NodeState:
        if state not in STATES:
            raise ValueError(f"no node state {state!r}")
        if state == self.state and reason == self.reason and tries in (None, self.tries):
            return self
        return replace(self, state=state, reason=reason, tries=self.tries if tries is None else tries,
                       history=(*self.history, Change(now, state, reason, finding)),
                       open=() if state == "ready" else self.open)

    def reread(self, read: Collection[str], found: list[str], part_of: Mapping[str, str]) -> NodeState:
        """The node after a reading of the parts `read` on it found `found` (messages; part_of:
        each one's part, where a reading made it): the parts read drop out of `open`, those of its
        findings come in. A finding of no part (an unreachable node, a reset that failed) read
        nothing, so every part open before stays open."""
        known = {part_of[m] for m in found if m in part_of}
        kept = set(self.open) if any(m not in part_of for m in found) else set(self.open) - set(read)
        return replace(self, open=tuple(sorted(kept | known)))

    def unread(self, read: Collection[str]) -> tuple[str, ...]:
        """The open parts a reading of `read` left unread, of a node a state of the loop's rests
        on (suspect, drained, repairing); a failed one waits for a person whatever is read."""
        return tuple(p for p in self.open if p not in read) if self.state in ("suspect", "drained", "repairing") else ()

    def basis(self) -> Change | None:
        """The last change with a finding: the one a node not ready rests on."""
        return next((c for c in reversed(self.history) if c.finding), None)

    def to_json(self) -> dict:
        return {"state": self.state, "reason": self.reason, "tries": self.tries,
                "history": [c.to_json() for c in self.history], **({"open": list(self.open)} if self.open else {})}

    @classmethod
    def from_json(cls, d: Mapping) -> NodeState:
        return cls(state=d["state"], reason=d.get("reason", ""), tries=int(d.get("tries", 0)),
                   history=tuple(Change(c["time"], c["state"], c.get("reason", ""), c.get("finding"))
                                 for c in d.get("history", ())),
                   open=tuple(d.get("open") or ()))


def load_states(text: str) -> dict[str, NodeState]:
    """The states file's nodes ({"nodes": {name: NodeState.to_json()}})."""
    return states_from(json.loads(text))


def states_from(doc: Mapping) -> dict[str, NodeState]:
    """The nodes of a states document: the file's, or the stack output `nodeHealth` (as_output)."""
    return {n: NodeState.from_json(d) for n, d in (doc.get("nodes") or {}).items()}


def as_document(states: Mapping[str, NodeState]) -> dict:
    return {"nodes": {n: s.to_json() for n, s in sorted(states.items())}}


def dump_states(states: Mapping[str, NodeState]) -> str:
    return json.dumps(as_document(states), indent=2) + "\n"


def latest(local: Mapping[str, NodeState], recorded: Mapping[str, NodeState]) -> dict[str, NodeState]:
    """Each node's record from whichever side changed it last (this checkout's file, or the stack's
    output another checkout recorded): an old file must not put a failed node back to ready. A
    reading moves a node's open parts without a change of state, so where both last changed at
    once, what stands on either side stands."""
    def changed(s: NodeState | None) -> float:
        return s.history[-1].time if s is not None and s.history else float("-inf")

    out: dict[str, NodeState] = {}
    for n in sorted({*local, *recorded}):
        mine, theirs = local.get(n), recorded.get(n)
        if theirs is not None and changed(theirs) > changed(mine):
            out[n] = theirs
        elif mine is not None:
            tie = theirs.open if theirs is not None and changed(theirs) == changed(mine) else ()
            out[n] = replace(mine, open=tuple(sorted({*mine.open, *tie}))) if tie else mine
    return out


def as_output(states: Mapping[str, NodeState], nodes: Iterable[str]) -> dict:
    """The stack output `nodeHealth`: the states file's document, with every node of the plan in it
    (a node with no record yet is ready), so the stack's state holds each node's one state and
    history, and a checkout without the file can take them back (railyard.repair.take_recorded)."""
    return as_document({**{n: NodeState() for n in nodes}, **states})


@dataclass(frozen=True)
class Held:
    """A node as its scheduler shows it: out of scheduling (drained, draining, down; cordoned),
    with what reason, and whether jobs still run on it."""

    out: bool = False
    reason: str | None = None
    busy: bool = False
    partly: bool = False
    """Out in one of its schedulers and in service in another (a person resumed it in one)."""
    system: bool = False
    """The scheduler set the reason itself (Slurm's "Not responding", "Node unexpectedly
    rebooted"): no person's decision, so no person's node."""
    responding: bool = True
    """Its scheduler hears from it (Slurm marks a node whose slurmd is silent with `*`)."""

    @property
    def all_out(self) -> bool:
        """Out of scheduling in every scheduler that knows it: no job can land on it."""
        return self.out and not self.partly

    @property
    def by_person(self) -> bool:
        """Out of scheduling by someone other than Railyard or the scheduler: their node, left as it is."""
        return self.out and not self.system and not (self.reason or "").startswith(PREFIX)

    @property
    def ours(self) -> bool:
        """Out with a reason of Railyard's repair loop (not acceptance's, which acceptance lifts)."""
        why = self.reason or ""
        return self.out and why.startswith(PREFIX) and not why.startswith(ACCEPTANCE)

    @property
    def acceptance(self) -> bool:
        return self.out and (self.reason or "").startswith(ACCEPTANCE)


def merged(views: Iterable[Held]) -> Held:
    """One node's view out of several (its schedulers; a hypervisor's VMs): out where any is,
    with a person's reason first (theirs is the one Railyard must not override), busy where any is."""
    views = list(views)
    people = [h for h in views if h.by_person]
    first = people[0] if people else next((h for h in views if h.out), Held())
    return Held(out=first.out, reason=first.reason, busy=any(h.busy for h in views),
                partly=first.out and any(not h.out for h in views), system=first.system,
                responding=all(h.responding for h in views))


# `sinfo -N` prints a node once per partition; %T is its state in words, with a suffix for "not
# responding" (*) and the like; %u who set its reason; %E the reason ("none" without one), last, as
# it may hold anything.
SINFO = "sinfo --noheader --Node --format '%N|%T|%u|%E'"
_OUT_STATES = ("drain", "drained", "draining", "down", "fail", "failing")
_BUSY_STATES = ("allocated", "mixed", "draining", "completing", "failing")


def parse_sinfo(text: str, slurm_user: str = "slurm") -> dict[str, Held]:
    """SINFO's lines as each node's Held; a reason set by slurm_user (slurmctld's SlurmUser, who
    sets "Not responding" and the like) is the scheduler's own."""
    out: dict[str, Held] = {}
    for line in text.splitlines():
        if line.count("|") < 3:
            continue
        node, state, user, why = (p.strip() for p in line.split("|", 3))
        base = state.rstrip("*~#!%$@^-+").lower()
        gone = base in _OUT_STATES
        out.setdefault(node, Held(out=gone, reason=None if why in ("", "none") else why,
                                  busy=base in _BUSY_STATES, system=gone and user == slurm_user,
                                  responding=not state.endswith("*")))
    return out


def slurm_user(config: str) -> str:
    """SlurmUser from `scontrol show config` ("SlurmUser = slurm(64030)")."""
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SlurmUser":
            return value.strip().split("(", 1)[0]
    return "slurm"


def reason(text: str) -> str:
    """A drain reason Railyard writes: prefixed, on one line, and short enough for Slurm's
    `sinfo -R` column and a Kubernetes annotation (braces and % dropped: Ansible templates them)."""
    line = " ".join(text.split()).replace("{", "").replace("}", "").replace("%", "")
    return f"{PREFIX} {line}"[:120]


@dataclass
class Triage:
    """Where each node stands after a verification, before anything is done to it."""

    states: dict[str, NodeState]
    faulty: dict[str, str] = field(default_factory=dict)
    """Nodes with a finding that the loop may act on: the first finding's message."""
    by_person: dict[str, str] = field(default_factory=dict)
    """Nodes a person took out of scheduling, and their reason (left alone)."""
    by_acceptance: dict[str, str] = field(default_factory=dict)
    """Faulty nodes acceptance's cordon holds out, and its reason (acceptance's to lift)."""
    returnable: list[str] = field(default_factory=list)
    """Nodes Railyard holds out (or left marked out) that were found healthy: to be returned to
    service."""
    unjudged: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Nodes with findings standing in parts this reading did not read on them, and those parts:
    their state stands, whatever was found, and nothing is done to them."""


def read_on(read: Mapping[str, Collection[str]] | None, node: str, s: NodeState) -> Collection[str]:
    """The parts a reading read on the node; where the caller gives no map, every part, so every
    part open on it."""
    return read.get(node, ()) if read is not None else s.open


def triage(states: Mapping[str, NodeState], findings: Mapping[str, list[str]], held: Mapping[str, Held],
           nodes: Iterable[str], now: float, *, read: Mapping[str, Collection[str]] | None = None,
           part_of: Mapping[str, str] | None = None) -> Triage:
    """Each node's state given what verification found on it (node -> finding messages) and how
    its schedulers hold it (`held` has the nodes they know): a ready node with a finding becomes
    suspect, a suspect one without any is ready again; a failed node stays failed until a person
    returns it to service in one of its schedulers; a person's node keeps whatever it has, even
    one Railyard had drained (the person took it over). Nodes no longer in `nodes` are dropped.
    read: the parts of verification the reading read on each node (every part where None);
    part_of: each finding message's part (NodeState.reread)."""
    nodes = sorted(nodes)
    part_of = part_of or {}
    out = Triage(states={n: s for n, s in states.items() if n in nodes})
    for node in nodes:
        s = states.get(node, NodeState())
        h = held.get(node, Held())
        found = findings.get(node) or []
        if h.by_person:
            out.by_person[node] = h.reason or "no reason given"
            continue
        if s.state == "failed" and node in held and not h.all_out:
            # The hand-off's end: a person put the node back into service (in any of its
            # schedulers) after looking at it; the marks Railyard left elsewhere are lifted below.
            s = s.to("ready", "returned to service by a person", now, tries=0)
        elif found and s.state == "failed":
            continue
        parts = read_on(read, node, s)
        unread = s.unread(parts)
        s = s.reread(parts, found, part_of)
        if unread:
            # What it was found faulty in was not read again: neither cleared nor acted on.
            out.unjudged[node] = unread
        elif found and h.acceptance and s.state not in OUT:
            out.by_acceptance[node] = h.reason or ""
        elif found:
            out.faulty[node] = found[0]
            if s.state in ("ready", "suspect") and h.ours:
                # Drained by an earlier run whose record was lost: the drain is Railyard's.
                s = s.to("drained", h.reason or reason(found[0]), now, found[0])
            elif s.state == "repairing" and s.tries >= MAX_TRIES:
                # A run stopped during its last reset: as the check after it would have it.
                s = after_check(s, found, now)
            elif s.state == "repairing":
                # A run stopped during its reset (the fault may predate it): drained, to be reset
                # again, its tries kept.
                s = s.to("drained", reason(f"reset interrupted: {found[0]}"), now, found[0])
            elif s.state == "ready":
                s = s.to("suspect", reason(found[0]), now, found[0])
        elif s.state == "suspect":
            s = s.to("ready", "checks passed", now)
        elif s.state in ("drained", "repairing"):
            out.returnable.append(node)
        elif s.state == "ready" and h.ours:
            out.returnable.append(node)  # a ready node still carrying Railyard's marks
        out.states[node] = s
    return out


def take_out(states: Mapping[str, NodeState], candidates: Iterable[str], held: Mapping[str, Held],
             pools: Mapping[str, list[str]], budgets: Mapping[str, int]) -> list[str]:
    """Which faulty nodes may leave service now, in name order, so that no pool has more than its
    budget out at once (any node a scheduler shows out, or Railyard holds out, counts). Nodes
    Railyard already holds out are not candidates: they are out already; a node its scheduler
    set down on its own is taken at no cost, being out already."""
    chosen: list[str] = []
    wanted = set(candidates)
    for pool, members in sorted(pools.items()):
        out = sum(1 for n in members if held.get(n, Held()).out or states.get(n, NodeState()).state in OUT)
        room = budgets[pool] - out
        for node in sorted(members):
            if node not in wanted or states.get(node, NodeState()).state in OUT:
                continue
            if held.get(node, Held()).out:
                chosen.append(node)  # out already (Slurm set it down): counted, and costs no room
            elif room > 0:
                chosen.append(node)
                room -= 1
    return chosen


def after_check(s: NodeState, findings: list[str], now: float) -> NodeState:
    """A node's state after the check that follows its reset: ready when nothing was found,
    failed after MAX_TRIES resets, else drained for another try."""
    if not findings:
        return s.to("ready", "checks passed after reset", now, tries=0)
    if s.tries >= MAX_TRIES:
        return s.to("failed", reason(f"failed after {s.tries} resets: {findings[0]}"), now, findings[0])
    return s.to("drained", reason(findings[0]), now, findings[0])
