"""sushy-tools' Redfish emulator as a stand-in BMC for the tests, and the receiver of its external
notifications.

The emulator runs its FAKE driver (no libvirt): systems that are only records in a state
directory of the test's own. It listens on 127.0.0.1 only, over HTTPS with a certificate of a CA
the test makes, and asks for basic auth (an htpasswd file, bcrypt). With `external_notifier` on a
system, the fake driver PUTs the system's record to EXTERNAL_NOTIFICATION_URL at every change: the
Notifier here (on 127.0.0.1 too) records each one and, once the system's power state changes,
hands it to `on_power` (the lab test presses a lab node's power button there).

How the fake driver behaves (sushy_tools/emulator/resources/systems/fakedriver.py): a Reset is
not applied at once; it records a pending transition due 1 to 11 s later, applied only when the
system is next read. ForceRestart sets the system Off at once (one notification) and On when the
pending transition is applied (another).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import pytest

from tests.ports import free_port

USERNAME = "railyard-admin"
PASSWORD = "bmc-test-Pa55word"  # the emulator's only user; a test asserts it is never shown


class Notifier:
    """The external notifier's receiver: every notification with the time it came, and each
    system's power state as last notified (systems start On)."""

    def __init__(self, on_power: Callable[[str, str], None] | None = None):
        self.notes: list[dict] = []
        self.state: dict[str, str] = {}
        self.on_power = on_power
        self.failures: list[str] = []
        notifier = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self):  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                notifier.receive(body)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def receive(self, system: dict) -> None:
        name, state = system.get("name"), system.get("power_state")
        self.notes.append({"time": time.time(), "name": name, "power_state": state,
                           "pending": (system.get("pending_power") or {}).get("power_state")})
        if self.state.get(name, "On") != state:
            self.state[name] = state
            if self.on_power is not None:
                try:
                    self.on_power(name, state)
                except Exception as exc:  # the emulator only logs a failed notification: keep it for the test
                    self.failures.append(f"{name} {state}: {exc}")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


class Emulator:
    """`sushy-emulator --fake` on 127.0.0.1:<a free port> over HTTPS; `systems` as the fake driver
    takes them ({uuid, name, power_state, external_notifier, nics})."""

    def __init__(self, base: Path, systems: list[dict], notify_url: str | None = None):
        from railyard.drivers.lab.control_plane import pki

        import bcrypt

        exe = Path(sys.executable).parent / "sushy-emulator"
        if not exe.exists():
            pytest.fail("sushy-emulator is missing: install the test extra (.venv/bin/pip install -e '.[test]')")
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        ca, ca_key, _ = pki.ensure_ca(base, "railyard test BMC CA")
        pki.ensure_leaf(base, ca, ca_key, pki.Leaf("bmc", "127.0.0.1", server=True, ips=("127.0.0.1",)))
        self.ca = base / "ca.crt"
        # bcrypt's fewest rounds: the emulator checks the password on every request.
        digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
        (base / "htpasswd").write_text(f"{USERNAME}:{digest}\n")
        self.port = free_port()
        self.endpoint = f"https://127.0.0.1:{self.port}"
        config = {
            "SUSHY_EMULATOR_LISTEN_IP": "127.0.0.1",
            "SUSHY_EMULATOR_LISTEN_PORT": self.port,
            "SUSHY_EMULATOR_SSL_CERT": str(base / "bmc.crt"),
            "SUSHY_EMULATOR_SSL_KEY": str(base / "bmc.key"),
            "SUSHY_EMULATOR_AUTH_FILE": str(base / "htpasswd"),
            "SUSHY_EMULATOR_FAKE_DRIVER": True,
            "SUSHY_EMULATOR_FAKE_SYSTEMS": systems,
            "SUSHY_EMULATOR_STATE_DIR": str(base / "state"),
            # Nothing but the notifier below, on loopback: the default is localhost:9999.
            "EXTERNAL_NOTIFICATION_URL": notify_url or "http://127.0.0.1:9/",
        }
        (base / "emulator.conf").write_text("".join(f"{k} = {v!r}\n" for k, v in config.items()))
        self.log_path = base / "emulator.log"
        log = self.log_path.open("wb")
        # No proxy from the environment: the notifications go to loopback only.
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        env["NO_PROXY"] = env["no_proxy"] = "*"
        self.proc = subprocess.Popen([str(exe), "--config", str(base / "emulator.conf")], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, within: float = 60) -> None:
        import ssl

        ctx = ssl.create_default_context(cafile=str(self.ca))
        deadline = time.monotonic() + within
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sushy-emulator exited {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/redfish/v1", context=ctx, timeout=5):
                    return
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sushy-emulator did not answer within {within:g} s:\n{self.log()[-3000:]}")
                time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)

    def bmc(self, host: str, system_id: str | None = None, **kw):
        """A redfish.Target for this emulator, checked against its CA."""
        from railyard.drivers.hosts import redfish

        return redfish.Target(host=host, endpoint=self.endpoint, username=USERNAME, password=PASSWORD,
                              system_id=system_id, **{"verify": str(self.ca), **kw})


def fake_system(uuid: str, name: str, *, notify: bool = False, power_state: str = "On") -> dict:
    return {"uuid": uuid, "name": name, "power_state": power_state, "external_notifier": notify,
            "nics": [{"mac": "00:5c:52:31:3a:9c", "ip": "192.0.2.100"}]}
