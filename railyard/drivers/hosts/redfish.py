"""A host's BMC through Redfish: its ComputerSystem's power state, and one power cycle.

Standard library only (urllib, json, ssl). HTTP basic auth on every request, so there is no
session to open, keep or log out of, and no token to leak. Every request has a timeout. Errors
name the host and the BMC's endpoint, never the password.

Pulumi-free: the hosts driver's resources (HostMachine's `power_state`, the rollout's power cycle
of a host that did not come back) call it inside their provider.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from railyard.remote.rollout import PowerCycleError

SYSTEMS = "/redfish/v1/Systems"
RESET_ACTION = "#ComputerSystem.Reset"
TIMEOUT_S = 10.0
POLL_S = 1.0


class RedfishError(PowerCycleError):
    """A BMC that did not do or answer what it was asked (the rollout stops on it)."""


@dataclass(frozen=True)
class Target:
    """How to reach one host's BMC."""

    host: str
    """The host it belongs to, for messages (its node name)."""
    endpoint: str
    """`https://address[:port]`: the BMC's Redfish service (its root is /redfish/v1)."""
    username: str
    password: str = field(repr=False)
    verify: bool | str = True
    """True: the certificate is checked against the system's CAs; a string: against that CA file
    (PEM); False: not checked."""
    system_id: str | None = None
    """Its ComputerSystem under /redfish/v1/Systems; None: the only one there."""
    timeout: float = TIMEOUT_S

    @classmethod
    def from_props(cls, host: str, bmc: dict, password: str) -> Target:
        """From a resource's `bmc` input ({endpoint, username, verify, system_id}) and its password."""
        return cls(host=host, endpoint=bmc["endpoint"], username=bmc["username"], password=password,
                   verify=bmc.get("verify", True), system_id=bmc.get("system_id"))


def _context(verify: bool | str) -> ssl.SSLContext:
    if verify is False:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)


def _detail(body: bytes) -> str:
    """The message of a Redfish error body (its `error.message`, else the first extended info)."""
    try:
        error = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        return ""
    infos = error.get("@Message.ExtendedInfo") or []
    text = error.get("message") or (infos[0].get("Message") if infos and isinstance(infos[0], dict) else "")
    return str(text or "").strip()


class Client:
    """One BMC's Redfish service, its ComputerSystem found on first use."""

    def __init__(self, bmc: Target):
        self.bmc = bmc
        self.where = f"{bmc.host}: its BMC {bmc.endpoint}"
        # No proxy: a BMC sits on an out-of-band network, and a proxy from the environment would
        # be handed the password with every request.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                   urllib.request.HTTPSHandler(context=_context(bmc.verify)))
        # Sent with the first request: not every BMC answers 401 with a challenge, which
        # urllib's own basic-auth handler would wait for.
        token = base64.b64encode(f"{bmc.username}:{bmc.password}".encode()).decode()
        self._auth = f"Basic {token}"
        self._system: str | None = None

    def request(self, method: str, path: str, body: dict | None = None) -> Any:
        """The JSON the BMC answers `method path` with (None for an empty answer)."""
        url = self.bmc.endpoint.rstrip("/") + path
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": self._auth, "Accept": "application/json", "OData-Version": "4.0",
            **({"Content-Type": "application/json"} if data is not None else {})})
        what = f"{self.where}: {method} {path}"
        try:
            with self._opener.open(req, timeout=self.bmc.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = _detail(exc.read() or b"")
            hint = "; check its bmc.username and bmc.password" if exc.code in (401, 403) else ""
            raise RedfishError(f"{what}: HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")
                               + hint) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise RedfishError(f"{what}: its certificate is not trusted ({reason.verify_message}); give "
                                   "the CA that signed it as bmc.verify") from None
            if isinstance(reason, TimeoutError):
                raise RedfishError(f"{what}: no answer within {self.bmc.timeout:g} s") from None
            raise RedfishError(f"{what}: {reason}") from None
        except TimeoutError:
            raise RedfishError(f"{what}: no answer within {self.bmc.timeout:g} s") from None
        except OSError as exc:
            raise RedfishError(f"{what}: {exc.strerror or exc}") from None
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise RedfishError(f"{what}: the answer is not JSON") from None

    def _get(self, path: str) -> dict:
        doc = self.request("GET", path)
        if not isinstance(doc, dict):
            raise RedfishError(f"{self.where}: GET {path}: the answer is not a Redfish resource")
        return doc

    def system_path(self) -> str:
        """The path of its ComputerSystem: bmc.system_id's, else the only member of Systems."""
        if self._system is None:
            if self.bmc.system_id is not None:
                self._system = f"{SYSTEMS}/{urllib.parse.quote(self.bmc.system_id, safe='')}"
            else:
                members = [m.get("@odata.id") for m in self._get(SYSTEMS).get("Members") or []
                           if isinstance(m, dict)]
                if len(members) != 1:
                    ids = ", ".join(str(m).rsplit("/", 1)[-1] for m in members) or "none"
                    raise RedfishError(f"{self.where}: {len(members)} ComputerSystems under {SYSTEMS} ({ids}); "
                                       "name the host's with bmc.systemId")
                self._system = str(members[0]).rstrip("/")
        return self._system

    def system(self) -> dict:
        return self._get(self.system_path())

    def power_state(self) -> str:
        """The ComputerSystem's PowerState: On, Off, PoweringOn, PoweringOff, Paused."""
        state = self.system().get("PowerState")
        if not isinstance(state, str):
            raise RedfishError(f"{self.where}: {self.system_path()} has no PowerState")
        return state

    def _reset_action(self) -> tuple[str, tuple[str, ...] | None]:
        """The Reset action's target, and the ResetTypes it allows (None: every one, as Redfish
        reads an action that lists none)."""
        action = (self.system().get("Actions") or {}).get(RESET_ACTION)
        if not isinstance(action, dict) or not action.get("target"):
            raise RedfishError(f"{self.where}: {self.system_path()} has no {RESET_ACTION} action")
        allowed = action.get("ResetType@Redfish.AllowableValues")
        if allowed is None and action.get("@Redfish.ActionInfo"):
            info = self._get(action["@Redfish.ActionInfo"])
            for parameter in info.get("Parameters") or []:
                if isinstance(parameter, dict) and parameter.get("Name") == "ResetType":
                    allowed = parameter.get("AllowableValues")
        return action["target"], (tuple(allowed) if allowed is not None else None)

    def _await(self, state: str, deadline: float) -> bool:
        while True:
            if self.power_state() == state:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)

    def power_cycle(self, deadline: float) -> str:
        """Cut the host's power and turn it on again: ForceRestart, or, where the BMC does not
        offer it, ForceOff and (once it reports Off) On. Returns what it asked for. Waits, until
        `deadline` (time.monotonic()) at most, for the BMC to report the system On again."""
        target, allowed = self._reset_action()
        if allowed is None or "ForceRestart" in allowed:
            self.request("POST", target, {"ResetType": "ForceRestart"})
            done = "ForceRestart"
        elif "ForceOff" in allowed and "On" in allowed:
            self.request("POST", target, {"ResetType": "ForceOff"})
            # An On while the ForceOff is still under way may be taken for a no-op.
            if not self._await("Off", deadline):
                raise RedfishError(f"{self.where}: {self.system_path()} was still not Off when the wait "
                                   "ended, after a ForceOff")
            self.request("POST", target, {"ResetType": "On"})
            done = "ForceOff, then On"
        else:
            raise RedfishError(f"{self.where}: {self.system_path()} offers neither ForceRestart nor ForceOff "
                               f"and On (its ResetTypes: {', '.join(allowed) or 'none'})")
        # A BMC answers before it carries the reset out; it is done when the system reads On again.
        # (sushy-tools' fake driver, like some BMCs, applies a pending transition only when read.)
        try:
            self._await("On", deadline)
        except RedfishError:
            pass  # the reset was sent; whether the host is back is for SSH to say
        return done
