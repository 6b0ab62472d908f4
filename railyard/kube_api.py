"""A Kubernetes API client of the standard library: the few calls Railyard makes outside Pulumi
(the lab's API server before Pulumi can reach it; the repair loop's cordons), over TLS with a
client certificate or a bearer token.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit


class ApiError(RuntimeError):
    pass


class Client:
    def __init__(self, host: str, port: int, pki: Path, user: str = "admin", timeout: float = 10.0, *,
                 token: str | None = None):
        """pki: a directory holding ca.crt and, without a token, <user>.crt and <user>.key."""
        self.host, self.port, self.timeout, self.token = host, port, timeout, token
        self.context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        if token is None:
            self.context.load_cert_chain(str(pki / f"{user}.crt"), str(pki / f"{user}.key"))

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, Any]:
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=self.timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = content_type
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, raw.decode(errors="replace")

    def ready(self) -> bool:
        try:
            status, body = self.request("GET", "/readyz")
        except (OSError, ssl.SSLError, http.client.HTTPException):
            return False
        return status == 200

    def get(self, path: str) -> dict[str, Any] | None:
        status, body = self.request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise ApiError(f"GET {path}: HTTP {status}: {body}")
        return body


@contextmanager
def from_kubeconfig(text: str, timeout: float = 10.0) -> Iterator[Client]:
    """A client of a kubeconfig's current context (its CA and client certificate as data, or a
    token), whose key lives only in a 0600 file of a 0700 directory for the client's life."""
    from railyard.model import yamlio

    config = yamlio.load(text) or {}
    current = config.get("current-context")
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
    ctx = contexts.get(current) or (next(iter(contexts.values())) if contexts else {})
    clusters = {c["name"]: c["cluster"] for c in config.get("clusters") or []}
    users = {u["name"]: u["user"] for u in config.get("users") or []}
    cluster = clusters.get(ctx.get("cluster")) or (next(iter(clusters.values())) if clusters else None)
    user = users.get(ctx.get("user")) or (next(iter(users.values())) if users else {})
    if not cluster or "certificate-authority-data" not in cluster or not cluster.get("server"):
        raise ApiError("the kubeconfig names no cluster with its server and certificate-authority-data")
    url = urlsplit(cluster["server"])
    with tempfile.TemporaryDirectory(prefix="railyard-kube-") as d:
        pki = Path(d)
        os.chmod(pki, 0o700)
        files = {"ca.crt": cluster["certificate-authority-data"]}
        if "token" not in user:
            if "client-certificate-data" not in user or "client-key-data" not in user:
                raise ApiError("the kubeconfig's user has neither a token nor client-certificate-data and "
                               "client-key-data")
            files |= {"user.crt": user["client-certificate-data"], "user.key": user["client-key-data"]}
        for name, data in files.items():
            fd = os.open(pki / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(data))
        yield Client(url.hostname or "", url.port or 443, pki, "user", timeout, token=user.get("token"))
