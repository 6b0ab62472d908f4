"""The Redfish client (railyard/drivers/hosts/redfish.py) against sushy-tools' emulator, a real
Redfish service on 127.0.0.1 (fake systems, HTTPS, basic auth), and against a tiny BMC of the
test's own for what the emulator does not offer (a BMC without ForceRestart, one that never
answers)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from railyard.drivers.hosts import redfish
from tests.ports import free_port

from .redfish_emulator import PASSWORD, Emulator, Notifier, fake_system

ONE = "11111111-1111-1111-1111-111111111111"
TWO = "22222222-2222-2222-2222-222222222222"


@pytest.fixture(scope="module")
def notifier():
    n = Notifier()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def one(tmp_path_factory, notifier):
    """An emulator with one system, which notifies."""
    e = Emulator(tmp_path_factory.mktemp("bmc-one"), [fake_system(ONE, "srv-0", notify=True)], notifier.url)
    yield e
    e.stop()


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    e = Emulator(tmp_path_factory.mktemp("bmc-two"), [fake_system(ONE, "srv-0"), fake_system(TWO, "srv-1")])
    yield e
    e.stop()


def test_the_only_system_is_the_hosts_and_its_power_state_is_read(one):
    client = redfish.Client(one.bmc("gpu-0"))
    assert client.power_state() == "On"
    assert client.system_path() == f"/redfish/v1/Systems/{ONE}"


def test_a_bmc_with_several_systems_needs_the_system_id(two):
    with pytest.raises(redfish.RedfishError, match=rf"gpu-0: its BMC {two.endpoint}: 2 ComputerSystems under "
                                                   rf"/redfish/v1/Systems \(({ONE}, {TWO}|{TWO}, {ONE})\); "
                                                   "name the host's with bmc.systemId"):
        redfish.Client(two.bmc("gpu-0")).power_state()
    assert redfish.Client(two.bmc("gpu-1", system_id=TWO)).power_state() == "On"


def test_an_unknown_system_id_is_named_with_the_bmc(two):
    with pytest.raises(redfish.RedfishError, match=rf"gpu-0: its BMC {two.endpoint}: GET /redfish/v1/Systems/nope: "
                                                   "HTTP 404"):
        redfish.Client(two.bmc("gpu-0", system_id="nope")).power_state()


def test_a_wrong_password_names_the_host_and_endpoint_and_never_a_password(one):
    target = one.bmc("gpu-0")
    wrong = redfish.Target(host="gpu-0", endpoint=one.endpoint, username=target.username, password="not-" + PASSWORD,
                           verify=target.verify)
    with pytest.raises(redfish.RedfishError) as err:
        redfish.Client(wrong).power_state()
    text = str(err.value)
    assert text.startswith(f"gpu-0: its BMC {one.endpoint}: GET /redfish/v1/Systems: HTTP 401"), text
    assert "check its bmc.username and bmc.password" in text
    assert PASSWORD not in text and PASSWORD not in repr(wrong) and PASSWORD not in repr(target)


def test_a_certificate_of_a_ca_not_given_is_refused_unless_verify_is_off(one):
    with pytest.raises(redfish.RedfishError, match=rf"gpu-0: its BMC {one.endpoint}: GET /redfish/v1/Systems: its "
                                                   r"certificate is not trusted \(.*\); give the CA"):
        redfish.Client(one.bmc("gpu-0", verify=True)).power_state()
    assert redfish.Client(one.bmc("gpu-0", verify=False)).power_state() == "On"


def test_force_restart_is_asked_for_and_the_bmc_reports_the_system_on_again(one, notifier):
    client = redfish.Client(one.bmc("gpu-0"))
    before = len(notifier.notes)
    started = time.monotonic()
    assert client.power_cycle(time.monotonic() + 30) == "ForceRestart"
    assert time.monotonic() - started < 30
    notes = [(n["name"], n["power_state"], n["pending"]) for n in notifier.notes[before:]]
    # Off at once with the restart pending, then On once it was applied (the fake driver applies
    # it when the system is read: the client's wait for On is what reads it).
    assert notes == [("srv-0", "Off", "ForceRestart"), ("srv-0", "On", None)], notes
    assert client.power_state() == "On"


class TinyBmc:
    """A BMC of one system whose Reset allows `allowed` (via @Redfish.ActionInfo when `info`);
    ForceOff takes effect after `off_after` reads, and nothing answers at all when `mute`."""

    def __init__(self, allowed: list[str] | None, info: bool = False, off_after: int = 2, mute: bool = False):
        self.posts: list[str] = []
        self.state = "On"
        self.reads_left = None
        bmc = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, doc: dict | None = None):
                body = json.dumps(doc).encode() if doc is not None else b""
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                if mute:
                    time.sleep(3)
                    return
                if self.path == "/redfish/v1/Systems":
                    return self._send(200, {"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]})
                if self.path == "/redfish/v1/Systems/1/ResetActionInfo":
                    return self._send(200, {"Parameters": [{"Name": "ResetType", "AllowableValues": allowed}]})
                if bmc.reads_left is not None:
                    bmc.reads_left -= 1
                    if bmc.reads_left <= 0:
                        bmc.state, bmc.reads_left = "Off", None
                action = {"target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"}
                if info:
                    action["@Redfish.ActionInfo"] = "/redfish/v1/Systems/1/ResetActionInfo"
                elif allowed is not None:
                    action["ResetType@Redfish.AllowableValues"] = allowed
                self._send(200, {"PowerState": bmc.state, "Actions": {"#ComputerSystem.Reset": action}})

            def do_POST(self):  # noqa: N802
                kind = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["ResetType"]
                bmc.posts.append(kind)
                if kind == "ForceOff":
                    bmc.reads_left = off_after
                elif kind == "On":
                    if bmc.state != "Off":  # an On before the ForceOff took effect is lost, as on the fake driver
                        bmc.posts.append("(ignored)")
                    bmc.state = "On"
                self._send(204)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def target(self, **kw) -> redfish.Target:
        return redfish.Target(host="gpu-3", endpoint=self.endpoint, username="admin", password="pw", **kw)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(redfish, "POLL_S", 0.01)
    made = []

    def make(*args, **kw):
        made.append(TinyBmc(*args, **kw))
        return made[-1]

    yield make
    for b in made:
        b.stop()


@pytest.mark.parametrize("info", [False, True], ids=["allowable-values", "action-info"])
def test_without_force_restart_it_is_force_off_then_on_once_the_system_is_off(tiny, info):
    bmc = tiny(["On", "ForceOff", "GracefulShutdown"], info=info, off_after=3)
    assert redfish.Client(bmc.target()).power_cycle(time.monotonic() + 10) == "ForceOff, then On"
    assert bmc.posts == ["ForceOff", "On"] and bmc.state == "On"


def test_force_restart_is_preferred_where_it_is_offered_or_nothing_is_listed(tiny):
    for allowed in (["On", "ForceOff", "ForceRestart"], None):
        bmc = tiny(allowed)
        assert redfish.Client(bmc.target()).power_cycle(time.monotonic() + 10) == "ForceRestart"
        assert bmc.posts == ["ForceRestart"], allowed


def test_a_bmc_offering_no_power_cycle_is_refused_naming_what_it_offers(tiny):
    bmc = tiny(["GracefulRestart", "Nmi"])
    with pytest.raises(redfish.RedfishError, match=r"gpu-3: its BMC http://127.0.0.1:\d+: /redfish/v1/Systems/1 "
                                                   r"offers neither ForceRestart nor ForceOff and On \(its "
                                                   r"ResetTypes: GracefulRestart, Nmi\)"):
        redfish.Client(bmc.target()).power_cycle(time.monotonic() + 10)
    assert bmc.posts == []


def test_a_system_that_never_reports_off_is_not_turned_on(tiny):
    bmc = tiny(["On", "ForceOff"], off_after=10**6)
    with pytest.raises(redfish.RedfishError, match="gpu-3: .* was still not Off when the wait ended, after a ForceOff"):
        redfish.Client(bmc.target()).power_cycle(time.monotonic() + 0.3)
    assert bmc.posts == ["ForceOff"]


def test_every_request_has_a_timeout(tiny):
    bmc = tiny(None, mute=True)
    started = time.monotonic()
    with pytest.raises(redfish.RedfishError, match=r"gpu-3: its BMC http://127.0.0.1:\d+: GET /redfish/v1/Systems: "
                                                   r"no answer within 0.5 s"):
        redfish.Client(bmc.target(timeout=0.5)).power_state()
    assert time.monotonic() - started < 2.5


def test_a_bmc_that_is_not_there_is_named():
    port = free_port()  # nothing listens there
    target = redfish.Target(host="gpu-4", endpoint=f"https://127.0.0.1:{port}", username="admin", password="pw")
    with pytest.raises(redfish.RedfishError, match=rf"gpu-4: its BMC https://127.0.0.1:{port}: GET "
                                                   r"/redfish/v1/Systems: .*(refused|Connection)"):
        redfish.Client(target).power_state()
