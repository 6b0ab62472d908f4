"""A no-op Python dynamic resource: the baseline Railyard's own resources are compared with."""

from __future__ import annotations

from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider


class NoopProvider(ResourceProvider):
    def create(self, props):
        return CreateResult(id_=props["name"], outs=props)

    def diff(self, _id, olds, news):
        return DiffResult(changes=olds != news)


class Noop(Resource):
    """payload: properties to hold (the baseline with state gives each Noop the inputs of one of
    Railyard's resources, so state holds as much per resource as Railyard's does)."""

    def __init__(self, name: str, payload: dict | None = None, opts=None):
        super().__init__(NoopProvider(), name, {"name": name, **({"payload": payload} if payload else {})}, opts)
