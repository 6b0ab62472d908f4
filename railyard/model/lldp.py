"""A host's LLDP neighbours as lldpd shows them (`lldpctl -f json`): which switch and port each of
its interfaces is cabled to, in the words the switch itself sends.

Runs on hosts inside the facts program (railyard.model.bundle), so it is standard-library only and
Python 3.7 compatible. `read()` asks the local lldpd; `parse()` is the pure part, tested on real
lldpctl output (railyard/data/fixtures/lldp/SOURCES.md).

lldpctl's `json` format is irregular: `lldp.interface` is an object keyed by interface name when
one neighbour is known and a list of one-key objects when there are more, and `lldp` is empty when
there is none. A chassis is keyed by its system name when it sends one. parse() takes every shape.
The result keeps only what identifies the far end (system name, chassis id, port id and its
subtype), never the ages and TTLs that change at every read, and for_state() drops the one age
read() adds, so that facts recorded in state at a refresh differ only when a cable does.
"""

from __future__ import annotations

import json
import subprocess

LLDPCTL = "lldpctl"
LLDPCLI = "lldpcli"
READ_TIMEOUT_S = 10
PID_FILE = "/run/lldpd.pid"
# An lldpd younger than this may not have heard every neighbour yet: a switch sends every 30 s by
# default (lldpd's and Cumulus's tx-interval), so a rail it has not heard from is not yet a
# missing cable.
LISTENING_S = 35


def _entries(interfaces: object) -> list:
    """(interface name, its neighbour object) pairs of either shape of lldp.interface."""
    if isinstance(interfaces, dict):
        return list(interfaces.items())
    if isinstance(interfaces, list):
        return [item for entry in interfaces if isinstance(entry, dict) for item in entry.items()]
    return []


def _chassis(chassis: object) -> dict:
    """{"system", "chassis_id"} of a chassis object, keyed by its system name or not."""
    if not isinstance(chassis, dict):
        return {"system": None, "chassis_id": None}
    if "id" in chassis and isinstance(chassis.get("id"), dict):  # no system name sent
        return {"system": None, "chassis_id": chassis["id"].get("value")}
    for system, body in chassis.items():
        ident = body.get("id") if isinstance(body, dict) else None
        return {"system": system, "chassis_id": ident.get("value") if isinstance(ident, dict) else None}
    return {"system": None, "chassis_id": None}


def parse(text: str) -> dict:
    """{interface: [{system, chassis_id, port, port_type}]} of lldpctl's `-f json` output, the
    neighbours of each local interface in the order lldpctl lists them. ValueError when it is not
    lldpctl's JSON."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    lldp = doc.get("lldp") if isinstance(doc, dict) else None
    if not isinstance(lldp, dict):
        # `-f json0` keeps every member a list (lldp, interface, chassis, ...): another format.
        raise ValueError("no lldp object (lldpctl -f json0? Railyard reads -f json)")
    out: dict = {}
    for name, body in _entries(lldp.get("interface")):
        if not isinstance(body, dict):
            continue
        port = body.get("port")
        ident = port.get("id") if isinstance(port, dict) else None
        if not isinstance(ident, dict):
            ident = {}
        neighbour = dict(_chassis(body.get("chassis")), port=ident.get("value"), port_type=ident.get("type"))
        out.setdefault(name, []).append(neighbour)
    return out


def parse_system(text: str) -> str | None:
    """The system name the local lldpd sends (`lldpcli -f json show chassis`), or None where it
    sends none or the text is not that output."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    local = doc.get("local-chassis") if isinstance(doc, dict) else None
    return _chassis(local.get("chassis") if isinstance(local, dict) else None)["system"]


def last_said(stderr: str) -> str:
    """The last line a failed lldpctl or lldpcli printed, without the time and level it stamps its
    messages with ("2026-12-06T09:17:50 [WARN/control] unable to connect ...")."""
    said = [line for line in stderr.splitlines() if line.strip()]
    return said[-1].split("] ", 1)[-1] if said else "no message"


CHASSIS = (LLDPCLI, "-f", "json", "show", "chassis")


def _system(argv: tuple) -> str | None:
    try:
        run = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, timeout=READ_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_system(run.stdout) if run.returncode == 0 else None


def read(argv: tuple = (LLDPCTL, "-f", "json"), chassis: tuple | None = CHASSIS) -> dict:
    """This host's neighbours, {"neighbours": parse()}, or {"not_read": why} where lldpd cannot be
    asked (not installed, not running, too slow): then nothing can be said about its cables. The
    system name it sends is {"system": name}: what its switches' own LLDP tables call it, which
    need not be its plan name (a host keeps its hostname). An lldpd started under LISTENING_S ago
    adds {"listening_s": its age}: a rail it has not heard yet is not judged. chassis: what prints
    the local chassis (the system name); None: not asked."""
    try:
        run = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, timeout=READ_TIMEOUT_S)
    except FileNotFoundError:
        return {"not_read": f"{argv[0]} missing: lldpd is not installed"}
    except subprocess.TimeoutExpired:
        return {"not_read": f"{argv[0]} gave no answer in {READ_TIMEOUT_S} s"}
    if run.returncode != 0:
        return {"not_read": f"{argv[0]} exited {run.returncode}: {last_said(run.stderr)}"}
    try:
        out: dict = {"neighbours": parse(run.stdout)}
    except ValueError as exc:
        return {"not_read": f"{argv[0]}: {exc}"}
    system = _system(chassis) if chassis else None
    if system:
        out["system"] = system
    age = running_s()
    if age is not None and age < LISTENING_S:
        out["listening_s"] = int(age)
    return out


def for_state(facts: dict) -> dict:
    """Host facts as a refresh records them: the LLDP reading without `listening_s`, an age that
    would make each refresh in lldpd's first seconds a change of the facts."""
    reading = facts.get("lldp")
    if not isinstance(reading, dict) or "listening_s" not in reading:
        return facts
    return {**facts, "lldp": {k: v for k, v in reading.items() if k != "listening_s"}}


def running_s(pid_file: str = PID_FILE, proc: str = "/proc") -> float | None:
    """How long the lldpd its pid file names has run, from its start time since boot (field 22 of
    /proc/<pid>/stat, in clock ticks) and the uptime; None where either cannot be read."""
    import os

    try:
        with open(pid_file) as fh:
            pid = int(fh.read().split()[0])
        with open(f"{proc}/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open(f"{proc}/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
