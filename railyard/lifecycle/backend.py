"""Lifetimes as the backend holds them: stack tags, the Expiry resource and protect flags in state.

Every call goes through railyard.engine.pulumi (the project's CLI, the offline environment, the
backend PULUMI_BACKEND_URL names), so the file backend and an S3-compatible one behave the same.
"""

from __future__ import annotations

import json
from typing import Any

from railyard import lifecycle
from railyard.engine import pulumi


def list_stacks(**kw: Any) -> list[str]:
    """The project's stacks in the backend (`pulumi stack ls`), sorted."""
    return sorted(s["name"] for s in pulumi.run_json(["stack", "ls"], **kw))


def stack_tags(stack: str, **kw: Any) -> dict[str, str]:
    return pulumi.run_json(["stack", "tag", "ls", "--stack", stack], **kw) or {}


def export(stack: str, **kw: Any) -> list[dict]:
    """The stack's resources from its state (no program run, nothing decrypted)."""
    proc = pulumi.run(["stack", "export", "--stack", stack], capture=True, **kw)
    return (json.loads(proc.stdout).get("deployment") or {}).get("resources") or []


def protected(resources: list[dict]) -> list[str]:
    return [r["urn"] for r in resources if r.get("protect")]


def expiry_in_state(resources: list[dict]) -> str | None:
    for r in resources:
        if r.get("type") == lifecycle.EXPIRY_TYPE and (r.get("outputs") or {}).get("expires_at"):
            return r["outputs"]["expires_at"]
    return None


def sync_expiry_tag(stack: str, **kw: Any) -> str | None:
    """Make the stack's `railyard:expires-at` tag say what its state says; return the expiry.

    Read from state rather than the `expiresAt` output so that a first `up` that failed half-way,
    which already costs money, is tagged and reaped too. A stack whose state has no Expiry (it was
    made long-lived) loses a stale tag, so the reaper never comes for it.
    """
    when = expiry_in_state(export(stack, **kw))
    tags = stack_tags(stack, **kw)
    if when is not None and tags.get(lifecycle.EXPIRES_TAG) != when:
        pulumi.run(["stack", "tag", "set", lifecycle.EXPIRES_TAG, when, "--stack", stack], capture=True, **kw)
    elif when is None and lifecycle.EXPIRES_TAG in tags:
        pulumi.run(["stack", "tag", "rm", lifecycle.EXPIRES_TAG, "--stack", stack], capture=True, **kw)
    return when
