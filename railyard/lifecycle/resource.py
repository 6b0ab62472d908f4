"""The Expiry resource: an ephemeral stack's expiry, fixed when its first `up` creates it.

Its provider lives in this importable module so that dill pickles it by reference (see
railyard/drivers/lab/resources.py). It touches nothing outside Pulumi's state.
"""

from __future__ import annotations

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from railyard import lifecycle


class ExpiryProvider(ResourceProvider):
    def create(self, props):
        created = lifecycle.rfc3339(lifecycle.utcnow())
        return CreateResult(id_=f"{props['stack']}-expiry", outs={
            **props, "created_at": created, "expires_at": lifecycle.expires_at(created, int(props["ttl_seconds"]))})

    def diff(self, _id, olds, news):
        # Only an edit of the ttl moves the expiry (to first up + new ttl); a later `up` never does.
        changed = [k for k in ("ttl", "ttl_seconds") if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=[])

    def update(self, _id, olds, news):
        created = olds["created_at"]
        return UpdateResult(outs={**news, "created_at": created,
                                  "expires_at": lifecycle.expires_at(created, int(news["ttl_seconds"]))})

    def read(self, id_, props):
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id, _props):
        """Nothing outside the state to remove."""


class Expiry(Resource, module="railyard", name="Expiry"):
    """Outputs: `created_at` (the first `up`) and `expires_at` (RFC 3339, UTC)."""

    created_at: pulumi.Output[str]
    expires_at: pulumi.Output[str]

    def __init__(self, name: str, *, stack: str, ttl: str, ttl_seconds: int,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(ExpiryProvider(), name, {
            "stack": stack, "ttl": ttl, "ttl_seconds": ttl_seconds, "created_at": None, "expires_at": None,
        }, opts)
