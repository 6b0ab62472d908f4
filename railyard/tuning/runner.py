"""Running the site playbook through ansible-runner, for the HostTuning resource and `railyard tune`.

Secrets never stay on disk: the SSH private key lives in a 0600 file in a private temporary
directory for the length of the run (ansible-runner's own ssh_key would write it into the
private data dir), secret environment values are scrubbed from the artifacts ansible-runner
writes (its `command` file records the whole environment), and the run directory is checked
for any secret value before the run is reported.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from railyard import paths, ssh_client
from railyard.inventory import HostInput, HostInputs, MachineEntry
from railyard.messages import drift_line
from railyard.ssh_client import DEFAULT_PORT, JUMP_VAR, write_key
from railyard.templates import render

if TYPE_CHECKING:
    from railyard.model.plan import Plan
    from railyard.model.spec import Spec

PLAYBOOKS = paths.PROJECT_ROOT / "playbooks"


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    host_key: str
    vars: dict[str, Any]

    def record(self) -> HostInput:
        """The host as a run's input carries it (keyed by name in HostInputs)."""
        return {"address": self.address, "host_key": self.host_key, "vars": self.vars}


def host_inputs(hosts: Iterable[Host]) -> HostInputs:
    return {h.name: h.record() for h in hosts}


def hosts_of(inputs: HostInputs) -> list[Host]:
    """A run's hosts from its input, in name order."""
    return [Host(name=n, address=h["address"], host_key=h["host_key"], vars=dict(h["vars"]))
            for n, h in sorted(inputs.items())]


@dataclass
class HostResult:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


@dataclass
class Failure:
    host: str
    task: str
    message: str

    def __str__(self) -> str:
        return f"{self.host}: task '{self.task}': {self.message}"


@dataclass
class Change:
    """One host-level change, as check-and-diff mode reports it."""

    host: str
    setting: str
    old: str
    new: str

    def __str__(self) -> str:
        return drift_line(self.host, self.setting, self.old, self.new)


@dataclass
class RunResult:
    run_dir: Path
    status: str
    rc: int
    hosts: dict[str, HostResult] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    reports: dict[str, Any] = field(default_factory=dict)
    """Per host, what a module reported under the key `acceptance` (the acceptance playbook)."""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failures

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())


def roles_digest() -> str:
    """A digest of everything the playbook runs (roles, modules, module_utils, the model code they
    load): a change to any of it changes the tuning resource's inputs, so preview shows it."""
    h = hashlib.sha256()
    files = sorted(p for p in PLAYBOOKS.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for p in files:
        h.update(str(p.relative_to(PLAYBOOKS)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def render_inventory(stack: str, user: str, hosts: Iterable[Host], known_hosts: Path, *, agent: bool = False) -> str:
    """agent: the key is ssh-agent's (no key file, so ssh may offer the agent's identities)."""
    return render("inventory.yml.j2", stack=stack, user=user, known_hosts=str(known_hosts), agent=agent,
                  hosts=[{"name": h.name, "address": h.address, "vars": h.vars} for h in hosts])


def known_hosts_lines(host: Host) -> str:
    """The host's known_hosts line, for the port Ansible reaches it on (ansible_port), and its
    jump host's."""
    out = ssh_client.known_hosts_lines(host.address, host.vars.get("ansible_port") or DEFAULT_PORT, [host.host_key])
    jump = host.vars.get(JUMP_VAR)
    if jump:
        out += ssh_client.known_hosts_lines(jump["address"], jump["port"], jump.get("host_keys") or ())
    return out


def _through_jump(hosts: list[Host], known_hosts: Path, key_file: Path | None) -> list[Host]:
    """Hosts behind a jump host get a ProxyCommand with the run's own known_hosts and key."""
    out = []
    for h in hosts:
        jump = h.vars.get(JUMP_VAR)
        if jump:
            hop = ssh_client.proxy_command(ssh_client.options(known_hosts, key_file), jump["address"],
                                           jump.get("user"), int(jump["port"]), h.address,
                                           int(h.vars.get("ansible_port") or DEFAULT_PORT))
            h = Host(h.name, h.address, h.host_key, {**h.vars, "ansible_ssh_extra_args": f"-o ProxyCommand={shlex.quote(hop)}"})
        out.append(h)
    return out


def _change_lines(host: str, task: str, res: dict) -> list[Change]:
    """Host-level changes from a module's result: roles report them as `railyard_changes`
    ([{setting, old, new}]); other modules by their diff, summarised per file."""
    out = [Change(host, str(c.get("setting", task)), str(c.get("old", "")), str(c.get("new", "")))
           for c in res.get("railyard_changes") or ()]
    if out:
        return out
    diffs = res.get("diff") or []
    for d in diffs if isinstance(diffs, list) else [diffs]:
        if not isinstance(d, dict):
            continue
        # before_header names the file on the host; after_header may be a template's temp copy.
        where = d.get("before_header") or d.get("after_header") or task
        before, after = d.get("before"), d.get("after")
        if isinstance(before, str) and isinstance(after, str) and "\n" not in before.strip() + after.strip():
            out.append(Change(host, str(where), before.strip() or "∅", after.strip() or "∅"))
        elif isinstance(before, dict) and isinstance(after, dict) and "state" in after:
            out.append(Change(host, str(where), str(before.get("state", "absent")), str(after.get("state"))))
        else:
            out.append(Change(host, str(where), "old content", "new content"))
    return out or [Change(host, task, "current", "changed")]


def ansible_env() -> dict[str, str]:
    """What every ansible-runner run of the playbooks sets: their ansible.cfg, and the callback
    directory that ansible-runner's own ANSIBLE_CALLBACK_PLUGINS would otherwise hide from it
    (ansible.cfg's callback_plugins counts only where that variable is unset), where
    railyard_warmup lives."""
    return {"ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg"),
            "ANSIBLE_CALLBACK_PLUGINS": str(PLAYBOOKS / "callback_plugins")}


def run(
    stack: str,
    hosts: list[Host],
    private_key: str | None,
    *,
    user: str = "root",
    check: bool = False,
    limit: str | None = None,
    tags: str | None = None,
    forks: int | None = None,
    secret_env: dict[str, str] | None = None,
    secret_vars: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    keep_runs: int = 20,
    playbook: str = "site.yml",
    artifacts: dict[str, str] | None = None,
    timeout: int | None = None,
) -> RunResult:
    """Run playbooks/site.yml (or guest.yml, teardown.yml) against `hosts`; artifacts go to
    .railyard/runs/<stack>/<timestamp>, with `artifacts` (relative path -> text: what the run
    was made from, such as the VMs' libvirt domains) written there first. timeout: seconds after
    which ansible-runner kills the run's process group (a failure naming it)."""
    import ansible_runner

    runs = paths.runs_dir(stack)
    runs.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    run_dir = runs / stamp
    run_dir.mkdir()
    # The run's own: runs of other pools may be under way at the same time with other hosts.
    known_hosts = run_dir / "known_hosts"
    known_hosts.write_text("".join(known_hosts_lines(h) for h in hosts))
    for rel, text in sorted((artifacts or {}).items()):
        dest = (run_dir / rel).resolve()
        if run_dir.resolve() not in dest.parents:
            raise ValueError(f"artifact {rel!r} is outside the run directory")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)

    result = RunResult(run_dir=run_dir, status="unstarted", rc=-1)
    secrets = [private_key or "", *(secret_env or {}).values(), *(str(v) for v in (secret_vars or {}).values())]
    with tempfile.TemporaryDirectory(prefix="railyard-key-") as keydir:
        env = {
            **ansible_env(),
            # ansible-runner turns host key checking off unless told otherwise, and ssh takes the
            # first StrictHostKeyChecking it is given: the inventory's pinned keys would not count.
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            # The run's own SSH masters: one another run made (with other pinned keys) is never
            # reused, and none outlives the run (ended below).
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(Path(keydir) / "cp"),
            "ANSIBLE_NOCOLOR": "1",
            # ansible-playbook is the virtualenv's, whatever PATH the caller (or Pulumi) had.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            **(secret_env or {}),
        }
        key_file = write_key(keydir, private_key) if private_key is not None else None
        if key_file is not None:  # else ssh-agent's (SSH_AUTH_SOCK, passed through)
            env["ANSIBLE_PRIVATE_KEY_FILE"] = str(key_file)
        # The inventory names the key's path only inside a ProxyCommand, which lives as long as the run.
        inventory = render_inventory(stack, user, _through_jump(hosts, known_hosts, key_file), known_hosts,
                                     agent=private_key is None)
        # The stack's latest inventory for a hand run of that playbook; the guests' apart from the hosts'.
        (runs / ("guest-inventory.yml" if playbook == "guest.yml" else "inventory.yml")).write_text(inventory)
        (run_dir / "inventory.yml").write_text(inventory)
        cmdline = []
        if secret_vars:
            # Secret role variables (object-store credentials) as an extra-vars file beside the key:
            # never in the inventory, the run directory or a command line.
            vars_file = Path(keydir) / "secret-vars.json"
            fd = os.open(vars_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(secret_vars, f)
            cmdline += ["-e", f"@{vars_file}"]
        if check:
            cmdline += ["--check", "--diff"]

        def on_event(event: dict) -> bool:
            data = event.get("event_data") or {}
            kind = event.get("event")
            host, task = data.get("host", ""), data.get("task", "")
            if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
                result.failures.append(Failure(host, task, failure_message(data.get("res") or {})))
            elif kind == "runner_on_ok" and isinstance((data.get("res") or {}).get("acceptance"), dict):
                result.reports[host] = data["res"]["acceptance"]
            elif kind in ("runner_on_ok", "runner_item_on_ok") and check and (data.get("res") or {}).get("changed"):
                res = data.get("res") or {}
                results = res.get("results")
                items = results if isinstance(results, list) else []
                if not any(isinstance(r, dict) and "ansible_loop_var" in r for r in items):
                    # (a loop's summary repeats what its items reported)
                    result.changes.extend(_change_lines(host, task, res))
            if progress and kind == "playbook_on_task_start":
                progress(f"task: {task}")
            # Keep events on disk without their stdout, where a module may echo what it was given.
            return True

        runner = ansible_runner.run(
            private_data_dir=str(run_dir),
            project_dir=str(PLAYBOOKS),
            playbook=playbook,
            inventory=str(run_dir / "inventory.yml"),
            envvars=env,
            cmdline=" ".join(cmdline) or None,
            limit=limit,
            tags=tags,
            forks=forks,
            quiet=True,
            event_handler=on_event,
            timeout=timeout,
        )
        if runner.status == "timeout":
            _stop_run(str(Path(keydir) / "cp"))
        _end_masters(Path(keydir) / "cp")
    result.status, result.rc = runner.status, runner.rc
    if result.status == "timeout":
        result.failures.append(Failure("-", "ansible-playbook", f"stopped after {timeout} s, unfinished"))
    elif result.rc != 0 and not result.failures:
        # No task failed: the run itself did (a bad inventory, a missing ansible-playbook, a
        # syntax error); its last words are in stdout.
        out = ((runner.stdout.read() if runner.stdout else "") + "\n" +
               (runner.stderr.read() if getattr(runner, "stderr", None) else "")).strip()
        tail = out.splitlines()[-8:]
        result.failures.append(Failure("-", "ansible-playbook",
                                       " | ".join(tail) or f"{result.status} (rc {result.rc}) before any output"))
    for host, stats in _stats(runner).items():
        result.hosts[host] = stats
    _scrub(run_dir, secrets)
    _prune(runs, keep_runs)
    return result


def failure_message(res: dict) -> str:
    """What a failed task said. A loop's own message is only "One or more items failed": what each
    failed item said instead, named by its label (the site play checks every role's variables in
    one loop, and the role is the item)."""
    items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if items:
        return "; ".join(f"{r.get('_ansible_item_label', r.get('item'))}: {failure_message(r)}" for r in items)
    msg = res.get("msg") or res.get("stderr") or res.get("reason") or json.dumps(res)[:500]
    return str(msg).strip()


def _stop_run(control_dir: str, wait_s: float = 10.0) -> None:
    """Kill every process of a run stopped at its timeout, found by the control directory only its
    environment names. ansible-runner's own kill reaches ansible-playbook's process group only,
    and each of ansible's workers detaches into a session of its own: the task, and the module it
    runs, would go on with no one reading them."""
    import signal
    import time

    from railyard.procfs import alive, environ_value, pids

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        # Again until none is left: one forked while the last pass killed its parent.
        ours = [p for p in pids()
                if p != os.getpid() and alive(p) and environ_value(p, "ANSIBLE_SSH_CONTROL_PATH_DIR") == control_dir]
        if not ours:
            return
        for pid in ours:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def _end_masters(control_dir: Path) -> None:
    """End the SSH connection masters (ControlPersist) of a run: their sockets are in control_dir."""
    import signal

    from railyard.procfs import cmdline, pids

    for pid in pids():
        if any(str(control_dir) in arg for arg in cmdline(pid)):
            try:
                os.kill(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass


def _stats(runner: Any) -> dict[str, HostResult]:
    raw = runner.stats or {}
    out: dict[str, HostResult] = {}
    for key, attr in (("ok", "ok"), ("changed", "changed"), ("failures", "failed"), ("dark", "unreachable"),
                      ("skipped", "skipped")):
        for host, n in (raw.get(key) or {}).items():
            setattr(out.setdefault(host, HostResult()), attr, n)
    return out


def _scrub(run_dir: Path, secrets: list[str]) -> None:
    """Remove what ansible-runner recorded of the environment, then make sure no secret is left."""
    shutil.rmtree(run_dir / "env", ignore_errors=True)
    for command in run_dir.glob("artifacts/*/command"):
        try:
            data = json.loads(command.read_text())
            data["env"] = {k: v for k, v in (data.get("env") or {}).items()
                           if not any(s and s in str(v) for s in secrets) and not k.startswith(("AWS_", "PULUMI_"))}
            command.write_text(json.dumps(data, indent=2))
        except (OSError, ValueError):
            command.unlink(missing_ok=True)
    needles = [s.strip().encode() for s in secrets if s and len(s.strip()) >= 8]
    for p in run_dir.rglob("*"):
        if p.is_file():
            blob = p.read_bytes()
            if any(n in blob for n in needles):
                p.unlink()  # a file we cannot clean is not kept


def _prune(runs: Path, keep: int) -> None:
    dirs = sorted(d for d in runs.iterdir() if d.is_dir() and d.name[:1].isdigit())
    for d in dirs[:-keep]:
        shutil.rmtree(d, ignore_errors=True)


def hosts_from(spec: Spec, plan: Plan, inventory: Iterable[MachineEntry], *, object_endpoint: str | None = None,
               dataset_prefix: str = "", extra_vars: dict[str, Any] | None = None,
               node_vars: dict[str, dict[str, Any]] | None = None) -> list[Host]:
    """Hosts to tune: the stack's inventory (addresses, host keys) with each node's role variables
    and the driver's own (extra_vars for every node, node_vars per node: how it is reached)."""
    from railyard.tuning.vars import host_vars

    return [Host(name=n["name"], address=n["management_ip"], host_key=n["host_key"],
                 vars={**host_vars(spec, plan, n["name"], object_endpoint=object_endpoint,
                                     dataset_prefix=dataset_prefix), **(extra_vars or {}),
                       **(node_vars or {}).get(n["name"], {})})
            for n in inventory]


def stack_hosts(spec: Spec, plan: Plan, outputs: dict[str, Any]) -> tuple[list[Host], dict[str, Any]]:
    """The hosts of a stack that is up, as its tuning run has them (from its outputs: the
    inventory, the object tier's endpoint), and the run's secret variables: what `railyard tune`
    and the repair loop's re-tuning run with."""
    from railyard import drivers

    inventory = outputs.get("inventory") or []
    storage = outputs.get("storage") or {}
    hosts = hosts_from(spec, plan, inventory, object_endpoint=storage.get("object_endpoint"),
                       dataset_prefix=storage.get("dataset_prefix") or "",
                       extra_vars=drivers.tuning_vars(spec.driver),
                       node_vars={n["name"]: drivers.node_vars(spec, plan, n["name"]) for n in inventory})
    return hosts, object_store_vars(storage)


def run_isolated(request: dict) -> dict:
    """run() in a child process, for callers inside a gRPC server (Pulumi's dynamic provider):
    ansible-runner forks, and forking a process that runs gRPC threads is not safe. The request
    (private key included) travels on the child's stdin, never on its command line."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "railyard.tuning.runner"], input=json.dumps(request),
                          capture_output=True, text=True, check=False)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "failures": [f"-: tuning runner crashed (exit {proc.returncode}): "
                                          f"{' | '.join(proc.stderr.strip().splitlines()[-8:])}"],
                "changed": 0, "changes": [], "run_dir": ""}


def _main() -> None:
    request = json.loads(sys.stdin.read())
    hosts = hosts_of(request["hosts"])
    result = run(request["stack"], hosts, request.get("private_key") or None, user=request.get("user", "root"),
                 check=bool(request.get("check")), forks=request.get("forks"),
                 secret_vars=request.get("secret_vars") or None, playbook=request.get("playbook") or "site.yml",
                 tags=request.get("tags") or None, artifacts=request.get("artifacts") or None)
    print(json.dumps({"ok": result.ok, "status": result.status, "rc": result.rc, "changed": result.changed,
                      "reports": result.reports,
                      "failures": [str(f) for f in result.failures], "changes": [str(c) for c in result.changes],
                      "run_dir": str(result.run_dir)}))


def object_store_vars(storage: dict[str, Any]) -> dict[str, Any]:
    """The dataset_cache role's secret variables from a stack's storage outputs."""
    if not storage.get("access_key"):
        return {}
    return {"dataset_cache_access_key": storage["access_key"], "dataset_cache_secret_key": storage["secret_key"]}


if __name__ == "__main__":
    _main()
