"""Stack lifetimes: ephemeral stacks expire, long-lived ones are protected. No Pulumi in here.

An ephemeral stack (`railyard:ephemeral.ttl` in its stack file) gets its expiry once, at its first
`up` (the Expiry resource, railyard/lifecycle/resource.py, keeps it in state), exports it as
`expiresAt` and carries it as the stack tag `railyard:expires-at`, where `railyard reap` reads it
without running the program. A stack without the tag is long-lived and never reaped.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

EXPIRES_TAG = "railyard:expires-at"
OUTPUT = "expiresAt"
# The dynamic resource's type token (pulumi-python:dynamic/<module>:<name>); `railyard up` finds
# the expiry in state by it, so a first `up` that failed half-way still gets its tag.
EXPIRY_TYPE = "pulumi-python:dynamic/railyard:Expiry"

LONG_LIVED = "long-lived"
UNEXPIRED = "unexpired"
EXPIRED = "expired"
INVALID = "invalid"


def protected(protect: bool | None, ephemeral: bool, playground: bool) -> bool:
    """Whether a stack's cluster is protected against destroy and replace.

    `railyard:protect` decides when written. Otherwise an ephemeral stack is not (the reaper must
    destroy it), a playground driver's stack is not (the lab: `make down` undoes `make up`), and
    every other stack is, since its machines cost money and hold data.
    """
    if protect is not None:
        return protect
    return not ephemeral and not playground


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def rfc3339(t: dt.datetime) -> str:
    """Whole seconds in UTC with a Z: `2026-11-30T09:00:00Z` (what tags, outputs and people read)."""
    return t.astimezone(dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> dt.datetime:
    """An RFC 3339 timestamp with a zone (Z or an offset); ValueError for anything else."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    value = dt.datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    if value.tzinfo is None:
        # A time without a zone means something different on every machine that reads it.
        raise ValueError(f"not an RFC 3339 time (no zone): {text!r}")
    return value.astimezone(dt.timezone.utc)


def expires_at(created_at: str, ttl_seconds: int) -> str:
    return rfc3339(parse_rfc3339(created_at) + dt.timedelta(seconds=int(ttl_seconds)))


@dataclass(frozen=True)
class Lifetime:
    """What the reaper knows about one stack: its tag, and what that means at `now`."""

    stack: str
    state: str  # LONG_LIVED, UNEXPIRED, EXPIRED or INVALID
    expires_at: dt.datetime | None = None
    tag: str | None = None

    def describe(self, now: dt.datetime) -> str:
        if self.state == LONG_LIVED:
            return "long-lived (no railyard:expires-at tag)"
        if self.state == INVALID:
            return f"unreadable {EXPIRES_TAG} tag {self.tag!r}"
        assert self.expires_at is not None
        delta = self.expires_at - now
        if self.state == EXPIRED:
            return f"expired {rfc3339(self.expires_at)} ({human(-delta)} ago)"
        return f"expires {rfc3339(self.expires_at)} (in {human(delta)})"


def classify(stack: str, tag: str | None, now: dt.datetime) -> Lifetime:
    if tag is None or tag == "":
        return Lifetime(stack, LONG_LIVED)
    try:
        when = parse_rfc3339(tag)
    except ValueError:
        # Never destroy on a tag nobody can read: it is reported, and left alone.
        return Lifetime(stack, INVALID, tag=tag)
    return Lifetime(stack, EXPIRED if when <= now else UNEXPIRED, when, tag)


def human(delta: dt.timedelta) -> str:
    """`2d 3h`, `3h 12m`, `4m 10s`, `12s`: the two largest units, for reports."""
    seconds = max(0, int(delta.total_seconds()))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(parts)
