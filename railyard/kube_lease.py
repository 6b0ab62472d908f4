"""A coordination.k8s.io/v1 Lease held while the block runs: how one repair run at a time owns a
cluster's Kubernetes, whatever checkout it runs from (a workstation, the scheduled workflow's
runner). It is Kubernetes' own leader-election record, so `kubectl get lease -n kube-system`
shows who holds it and since when.

The holder renews it every DURATION_S / 3 seconds from a thread; a holder that dies stops renewing
and the lease is free DURATION_S seconds after its last renewal. A run that finds the lease held
and unexpired by another is refused, naming the holder.
"""

from __future__ import annotations

import http.client
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from railyard.kube_api import Client

NAMESPACE = "kube-system"
DURATION_S = 60
# What a call to the API may raise besides its refusals: the connection's failures.
_DOWN = (OSError, http.client.HTTPException)


class LeaseHeld(Exception):
    """Another holder has the lease (its identity is the message)."""


def _path(name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}"


def _micro(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def _seconds(micro: str) -> float:
    import calendar

    whole, _, frac = micro.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + (float(f"0.{frac}") if frac else 0.0)


def _free(lease: dict[str, Any], who: str, now: float) -> bool:
    spec = lease.get("spec") or {}
    holder, renewed = spec.get("holderIdentity"), spec.get("renewTime") or spec.get("acquireTime")
    if not holder or holder == who or not renewed:
        return True
    return _seconds(renewed) + int(spec.get("leaseDurationSeconds") or DURATION_S) < now


def _write(client: Client, method: str, path: str, body: dict) -> tuple[int, Any]:
    from railyard.kube_api import ApiError

    try:
        return client.request(method, path, body)
    except _DOWN as exc:
        raise ApiError(f"{method} {path}: {exc}") from None


def _read(client: Client, path: str) -> dict[str, Any] | None:
    from railyard.kube_api import ApiError

    try:
        return client.get(path)
    except _DOWN as exc:
        raise ApiError(f"GET {path}: {exc}") from None


def acquire(client: Client, name: str, who: str, now: Callable[[], float] = time.time) -> None:
    """Take the lease for `who`. Raises LeaseHeld naming another holder, ApiError where the API
    refuses."""
    from railyard.kube_api import ApiError

    path = _path(name)
    t = now()
    spec = {"holderIdentity": who, "leaseDurationSeconds": DURATION_S, "acquireTime": _micro(t), "renewTime": _micro(t)}
    current = _read(client, path)
    if current is None:
        status, body = _write(client, "POST", path.rsplit("/", 1)[0],
                              {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                               "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec})
    elif not _free(current, who, t):
        raise LeaseHeld(current["spec"]["holderIdentity"])
    else:
        status, body = _write(client, "PUT", path, {**current, "spec": {**current.get("spec", {}), **spec}})
    if status == 409:
        # Another took it between the read and the write.
        taken = _read(client, path) or {}
        raise LeaseHeld((taken.get("spec") or {}).get("holderIdentity") or "another run")
    if status not in (200, 201):
        raise ApiError(f"Lease {NAMESPACE}/{name}: HTTP {status}: {body}")


@contextmanager
def held(client: Client, name: str, who: str, *, every: float = DURATION_S / 3,
         now: Callable[[], float] = time.time) -> Iterator[threading.Event]:
    """Hold the lease while the block runs, renewing it, and give it up after (the holder
    cleared, so the next run need not wait for it to expire). The block gets an event set once
    the lease is no longer surely held: another holds it, or no renewal went through for
    DURATION_S."""
    from railyard.kube_api import ApiError

    acquire(client, name, who, now)
    stop, lost = threading.Event(), threading.Event()

    def renew() -> None:
        renewed = now()
        while not stop.wait(every):
            try:
                current = _read(client, _path(name)) or {}
                if (current.get("spec") or {}).get("holderIdentity") != who:
                    lost.set()  # it expired and another took it: nothing of ours to renew
                    return
                status, _ = _write(client, "PUT", _path(name),
                                   {**current, "spec": {**current["spec"], "renewTime": _micro(now())}})
                if status == 200:
                    renewed = now()
            except (ApiError, KeyError, TypeError):
                pass  # the next beat tries again; DURATION_S allows two misses
            if now() - renewed >= DURATION_S:
                lost.set()

    beat = threading.Thread(target=renew, name=f"lease-{name}", daemon=True)
    beat.start()
    try:
        yield lost
    finally:
        stop.set()
        beat.join()
        try:
            current = _read(client, _path(name)) or {}
            if (current.get("spec") or {}).get("holderIdentity") == who:
                spec = {k: v for k, v in current["spec"].items() if k not in ("holderIdentity", "renewTime")}
                _write(client, "PUT", _path(name), {**current, "spec": spec})
        except (ApiError, KeyError, TypeError):
            pass  # it expires on its own
