#!/usr/bin/python
"""A daemon kept running by its pid file, where no service manager runs (the lab's nodes)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: railyard_daemon
short_description: Keep a self-daemonizing daemon running, by its pid file, without a service manager
description:
  - For hosts without systemd (the lab's nodes, containers). Where systemd runs, the role uses
    M(ansible.builtin.systemd_service) instead.
  - C(started) starts the daemon when its pid file names no live process of I(exe); C(restarted)
    stops it first; C(stopped) sends SIGTERM, then SIGKILL after 10 s. The directories it needs are
    made first, with their owner and mode.
  - The start waits until the pid file names a live process (and I(ready) exists, when given); a
    daemon that exits or never gets there fails the task with the end of its log.
options:
  name: {description: What the daemon is called in messages., type: str, required: true}
  argv: {description: The command that starts it (it daemonizes itself)., type: list, elements: str, required: true}
  exe: {description: The executable its process runs (default the first of I(argv))., type: path}
  pidfile: {description: Where it writes its pid., type: path, required: true}
  ready: {description: A path that exists once it serves (a socket)., type: path}
  log: {description: Its log file, quoted when it fails to start., type: path}
  dirs:
    description: Directories made before it starts.
    type: list
    elements: dict
    default: []
  state: {description: The state wanted., type: str, choices: [started, restarted, stopped], default: started}
  timeout: {description: Seconds to wait for it to start., type: int, default: 30}
author: Railyard
"""

EXAMPLES = r"""
- name: slurmd, kept running by its pid file
  railyard_daemon:
    name: slurmd
    argv: [/usr/sbin/slurmd, --conf-server, 198.18.0.2, -N, gpu-3]
    pidfile: /run/slurmd.pid
    log: /var/log/slurm/slurmd.log
    dirs: [{path: /var/spool/slurmd, owner: root, mode: "0755"}]
"""

RETURN = r"""
pid:
  description: The daemon's pid once started; none when stopped, or in check mode when it would start.
  returned: always
  type: int
"""

import grp
import os
import pwd
import signal
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule


def _pid(params):
    try:
        with open(params["pidfile"]) as fh:
            pid = int(fh.read().split()[0])
        exe = os.readlink(f"/proc/{pid}/exe")
    except (OSError, ValueError, IndexError):
        return None
    # Debian's /usr/sbin/slurmd is a link (through /etc/alternatives) to slurmd-wlm, which runs.
    want = os.path.realpath(params["exe"] or params["argv"][0])
    return pid if exe.replace(" (deleted)", "") == want else None


def _tail(path, lines=15):
    try:
        with open(path, errors="replace") as fh:
            return "".join(fh.readlines()[-lines:]).strip()
    except OSError:
        return ""


def _dirs(params):
    for d in params["dirs"]:
        os.makedirs(d["path"], exist_ok=True)
        uid = pwd.getpwnam(d.get("owner", "root")).pw_uid
        gid = grp.getgrnam(d.get("group", d.get("owner", "root"))).gr_gid
        os.chown(d["path"], uid, gid)
        os.chmod(d["path"], int(str(d.get("mode", "0755")), 8))


def _stop(pid):
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}") or _zombie(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _start(module, params):
    _dirs(params)
    name = params["name"]
    # Its output to a file, not a pipe: the daemon's child may keep the parent's stdout open, and
    # a pipe would then never end. Only the starting parent's exit is waited for.
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(params["argv"], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=params["timeout"])
        except subprocess.TimeoutExpired:
            rc = None  # a program that does not daemonize: judged by its pid file below
        out.seek(0)
        said = out.read().decode("utf-8", "replace").strip()
    if rc not in (0, None):
        module.fail_json(msg=f"{name} did not start (exit {rc}): {said[-600:]} {_tail(params['log'] or '')[-600:]}".strip())
    deadline = time.monotonic() + params["timeout"]
    while time.monotonic() < deadline:
        pid = _pid(params)
        if pid and (not params["ready"] or os.path.exists(params["ready"])):
            return pid
        time.sleep(0.2)
    module.fail_json(msg=f"{name} is not running {params['timeout']} s after its start; "
                         f"its log ({params['log'] or 'none'}) ends: {_tail(params['log'] or '')[-900:]}")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True), argv=dict(type="list", elements="str", required=True),
            exe=dict(type="path"), pidfile=dict(type="path", required=True), ready=dict(type="path"),
            log=dict(type="path"), dirs=dict(type="list", elements="dict", default=[]),
            state=dict(type="str", choices=["started", "restarted", "stopped"], default="started"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    pid = _pid(params)
    state = params["state"]
    if state == "stopped":
        if pid and not module.check_mode:
            _stop(pid)
        module.exit_json(changed=bool(pid), pid=None)
    if state == "started" and pid:
        module.exit_json(changed=False, pid=pid)
    if module.check_mode:
        module.exit_json(changed=True, pid=pid)
    if pid:
        _stop(pid)
    module.exit_json(changed=True, pid=_start(module, params))


if __name__ == "__main__":
    main()
