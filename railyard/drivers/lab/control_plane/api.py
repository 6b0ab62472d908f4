"""The few calls the lab makes to its own API server before Pulumi can: readiness, and
server-side apply of what the cluster has installed before any workload (CRDs, Kueue's namespace
and webhook configurations). Standard library only, over TLS with the admin's client certificate.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from railyard.kube_api import ApiError, Client as KubeClient

FIELD_MANAGER = "railyard-lab"


class Client(KubeClient):
    """The lab's admin client, with what the lab does before Pulumi can."""

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply of `obj` (its apiVersion, kind and name say where), forcing
        ownership of the fields it sets: the lab's own objects, nobody else manages them."""
        path = resource_path(obj)
        status, body = self.request("PATCH", f"{path}?fieldManager={FIELD_MANAGER}&force=true", obj,
                                    "application/apply-patch+yaml")
        if status not in (200, 201):
            message = body.get("message") if isinstance(body, dict) else body
            raise ApiError(f"applying {obj['kind']} {obj['metadata']['name']}: HTTP {status}: {message}")
        return body

    def wait_established(self, names: list[str], timeout: float) -> None:
        """Until every CRD in `names` serves its kind."""
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending:
            crd = self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{pending[0]}") or {}
            conditions = {c.get("type"): c.get("status") for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise ApiError(f"CRD {pending[0]} was not established within {timeout:g}s")
            time.sleep(0.1)


_CORE_PLURALS = {"Namespace": "namespaces", "Node": "nodes"}


def resource_path(obj: dict[str, Any]) -> str:
    """The REST path of an object of the kinds the lab applies itself."""
    api, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
    if kind in _CORE_PLURALS and api == "v1":
        return f"/api/v1/{_CORE_PLURALS[kind]}/{meta['name']}"
    plural = {"CustomResourceDefinition": "customresourcedefinitions",
              "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
              "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}.get(kind)
    if plural is None:
        raise ApiError(f"the lab does not apply {kind} objects itself")
    return f"/apis/{api}/{plural}/{meta['name']}"


def serving(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections there."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
