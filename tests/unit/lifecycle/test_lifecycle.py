"""Stack lifetimes without the engine: expiry arithmetic, the tag's meaning, the Expiry provider,
and what `railyard reap` decides for each kind of stack (its backend calls replaced)."""

from __future__ import annotations

import datetime as dt

import pytest

from railyard import lifecycle
from railyard.commands import reap
from railyard.lifecycle import backend
from railyard.lifecycle.resource import ExpiryProvider

NOW = dt.datetime(2026, 11, 30, 9, 0, 0, tzinfo=dt.timezone.utc)


def test_expiry_is_rfc3339_in_utc_whole_seconds():
    assert lifecycle.expires_at("2026-11-30T09:00:00Z", 8 * 3600) == "2026-11-30T17:00:00Z"
    assert lifecycle.rfc3339(dt.datetime(2026, 1, 2, 3, 4, 5, 999, tzinfo=dt.timezone(dt.timedelta(hours=2)))) \
        == "2026-01-02T01:04:05Z"
    assert lifecycle.parse_rfc3339("2026-11-30T10:00:00+01:00") == NOW


@pytest.mark.parametrize("protect, ephemeral, playground, expected", [
    (None, False, False, True),    # a long-lived stack of real machines: protected
    (None, False, True, False),    # the lab: `make down` undoes `make up`
    (None, True, False, False),    # ephemeral: the reaper must be able to destroy it
    (True, False, True, True),     # a lab stack someone wants kept
    (False, False, False, False),  # a deliberately unprotected stack of real machines
])
def test_protection_follows_the_key_then_the_lifetime_then_the_driver(protect, ephemeral, playground, expected):
    assert lifecycle.protected(protect, ephemeral=ephemeral, playground=playground) is expected


def test_a_time_without_a_zone_is_refused():
    with pytest.raises(ValueError):
        lifecycle.parse_rfc3339("2026-11-30T09:00:00")


@pytest.mark.parametrize("tag, state", [
    (None, lifecycle.LONG_LIVED), ("", lifecycle.LONG_LIVED),
    ("2026-11-30T08:59:59Z", lifecycle.EXPIRED), ("2026-11-30T09:00:00Z", lifecycle.EXPIRED),
    ("2026-11-30T09:00:01Z", lifecycle.UNEXPIRED), ("tomorrow", lifecycle.INVALID),
])
def test_the_tag_decides_the_lifetime(tag, state):
    assert lifecycle.classify("s", tag, NOW).state == state


def test_descriptions_say_when():
    assert lifecycle.classify("s", "2026-11-30T12:30:00Z", NOW).describe(NOW) \
        == "expires 2026-11-30T12:30:00Z (in 3h 30m)"
    assert lifecycle.classify("s", "2026-11-28T09:00:10Z", NOW).describe(NOW) \
        == "expired 2026-11-28T09:00:10Z (1d 23h ago)"


def test_the_expiry_is_fixed_at_the_first_up_and_moves_only_with_the_ttl():
    p = ExpiryProvider()
    created = p.create({"stack": "s", "ttl": "8h", "ttl_seconds": 28800.0})  # numbers arrive as floats
    outs = created.outs
    assert lifecycle.parse_rfc3339(outs["expires_at"]) - lifecycle.parse_rfc3339(outs["created_at"]) \
        == dt.timedelta(hours=8)
    same = {"stack": "s", "ttl": "8h", "ttl_seconds": 28800.0}
    assert p.diff("id", outs, same).changes is False
    longer = {"stack": "s", "ttl": "2d", "ttl_seconds": 172800.0}
    assert p.diff("id", outs, longer).changes is True and not p.diff("id", outs, longer).replaces
    updated = p.update("id", outs, longer).outs
    assert updated["created_at"] == outs["created_at"]
    assert updated["expires_at"] == lifecycle.expires_at(outs["created_at"], 172800)


def test_the_expiry_is_read_from_state_by_its_type():
    resources = [{"type": "pulumi-python:dynamic:Resource", "outputs": {"expires_at": "no"}},
                 {"type": lifecycle.EXPIRY_TYPE, "outputs": {"expires_at": "2026-12-01T00:00:00Z"}}]
    assert backend.expiry_in_state(resources) == "2026-12-01T00:00:00Z"
    assert backend.expiry_in_state(resources[:1]) is None


@pytest.fixture
def fake_backend(monkeypatch):
    stacks = {
        "old": ({lifecycle.EXPIRES_TAG: "2026-11-30T08:00:00Z"}, []),
        "young": ({lifecycle.EXPIRES_TAG: "2026-11-30T10:00:00Z"}, []),
        "keeper": ({}, [{"urn": "u1", "protect": True}]),
        "was-long-lived": ({lifecycle.EXPIRES_TAG: "2026-11-29T00:00:00Z"}, [{"urn": "u2", "protect": True}]),
        "garbled": ({lifecycle.EXPIRES_TAG: "soon"}, []),
    }
    monkeypatch.setattr(backend, "stack_tags", lambda s, **kw: stacks[s][0])
    monkeypatch.setattr(backend, "export", lambda s, **kw: stacks[s][1])
    return stacks


def test_reap_plans_to_destroy_only_the_expired_unprotected_stack(fake_backend):
    decisions = {life.stack: why for life, why in reap.plan(sorted(fake_backend), explicit=False, now=NOW)}
    assert decisions["old"] is None
    assert decisions["young"] == "not expired yet"
    assert decisions["keeper"].startswith("long-lived: reap never touches it")
    assert "2 resources" not in decisions["was-long-lived"] and "protected" in decisions["was-long-lived"]
    assert "not an RFC 3339 time" in decisions["garbled"]


def test_naming_a_stack_that_may_not_be_reaped_is_refused_with_the_reason(fake_backend):
    decisions = {life.stack: why for life, why in reap.plan(["keeper", "young"], explicit=True, now=NOW)}
    assert decisions["keeper"].startswith("refused: long-lived")
    assert decisions["young"] == "refused: not expired yet"
