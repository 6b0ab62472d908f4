"""A copy of the project (program, components, one stack file) with a throwaway file backend, so
the real engine runs on a stack of its own: the lab tests and the benchmarks share it, and neither
touches the user's `lab` stack or `.railyard/state`."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import subprocess
import time
from pathlib import Path

import yaml

from railyard import paths
from railyard.model import yamlio
from railyard.engine.toolchain import command_settings, engine_env

ROOT = paths.PROJECT_ROOT


class PulumiFailed(AssertionError):
    """A pulumi command exited non-zero. An AssertionError so a test shows it as a plain failure."""


def lab_config(nodes: int, mgmt: str, storage: str, **extra) -> dict:
    """A bare-metal lab stack of `nodes` DGX H100 on the given management and storage networks."""
    return {
        "railyard:region": "lab",
        "railyard:layout": "bare-metal",
        "railyard:driver": "lab",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": nodes}],
        "railyard:fabric": {
            "compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": "198.19.0.0/16"},
            "storage": {"cidr": storage},
            "management": {"cidr": mgmt},
        },
        **extra,
    }


# Networks picked but not routed yet, machine-wide: the lab tests run in several processes at once
# (make test's workers) and the benchmarks may run beside them, and between one process's pick and
# its stack's first route another would see the network free and pick it too.
RESERVATIONS = Path("/run/lock/railyard-networks")
# Long enough for a stack under load to route its management network (the first thing `up` makes);
# a network never routed (a storage network lives in the stack's namespaces only) is free again
# after it. Routed ones are guarded by their route.
RESERVATION_S = 900


def free_networks(pool: str, count: int, prefix: int, taken: set[str] | None = None) -> list[str]:
    """`count` /prefix networks of `pool` that no route of this machine overlaps, nor `taken` (the
    caller's own earlier picks not routed yet), nor another live process's recent pick. /24s and
    smaller come from the top of the pool and larger ones from its bottom, so many small picks
    never fragment every large block."""
    from railyard.drivers.lab import net

    candidates: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = list(
        ipaddress.ip_network(pool).subnets(new_prefix=prefix))
    if prefix >= 24:
        candidates.reverse()
    with _reservations() as (reserved, record):
        out: list[str] = []
        for candidate in candidates:
            cidr = str(candidate)
            if (cidr in (taken or ()) or any(candidate.overlaps(r) for r in reserved)
                    or net.overlapping_routes(cidr)):
                continue
            out.append(cidr)
            if len(out) == count:
                record(out)
                return out
    raise RuntimeError(f"no {count} free /{prefix} networks in {pool} (the others overlap routes of this machine "
                       f"or were picked by another process in the last {RESERVATION_S} s)")


@contextlib.contextmanager
def _reservations():
    """(other live processes' recent picks, a function recording picks as this process's), under a
    machine-wide lock; stale records (their process gone, or older than RESERVATION_S) are dropped."""
    RESERVATIONS.mkdir(parents=True, exist_ok=True)
    with open(RESERVATIONS / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now, others = time.time(), []
        for f in RESERVATIONS.glob("*_*"):
            try:
                pid, made = (int(x) for x in f.read_text().split())
            except (OSError, ValueError):
                pid, made = 0, 0
            if pid <= 0 or not Path(f"/proc/{pid}").exists() or now - made > RESERVATION_S:
                f.unlink(missing_ok=True)
            elif pid != os.getpid():  # one's own picks are the caller's to pass as `taken`
                others.append(ipaddress.ip_network(f.name.replace("_", "/")))

        def record(cidrs: list[str]) -> None:
            for cidr in cidrs:
                (RESERVATIONS / cidr.replace("/", "_")).write_text(f"{os.getpid()} {time.time():.0f}\n")

        yield others, record


def project_copy(directory: Path) -> Path:
    """A Pulumi project at `directory` running this checkout's program and components in its
    virtualenv, with an empty stacks/ of its own."""
    (directory / paths.STACKS_DIR).mkdir(parents=True)
    for name in ("__main__.py", "components"):
        os.symlink(ROOT / name, directory / name)
    # The engine this checkout built, so `railyard` commands with RAILYARD_ROOT=directory find it.
    local = paths.local_dir(directory)
    local.mkdir()
    for name in ("bin", "pulumi-home"):
        os.symlink(paths.local_dir(ROOT) / name, local / name)
    (directory / "Pulumi.yaml").write_text(
        "name: railyard\nruntime:\n  name: python\n  options:\n"
        f"    virtualenv: {ROOT / '.venv'}\n    toolchain: pip\nstackConfigDir: {paths.STACKS_DIR}\n")
    return directory


class StackProject:
    def __init__(self, base: Path, stack: str, config: dict):
        self.stack = stack
        self.dir = project_copy(base / "project")
        self.state = base / "state"
        self.state.mkdir()
        self.env = {**engine_env(ROOT), "PULUMI_BACKEND_URL": f"file://{self.state}", "PULUMI_CONFIG_PASSPHRASE": ""}
        self.write(config)

    def write(self, config: dict) -> None:
        path = paths.stack_file(self.stack, self.dir)
        doc = yamlio.load(path.read_text()) if path.exists() else {}
        doc["config"] = config
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def argv(self, *args: str) -> list[str]:
        return [str(paths.bin_dir(ROOT) / "pulumi"), *args, "--stack", self.stack, "--non-interactive"]

    def env_for(self, *args: str) -> dict[str, str]:
        """The environment `railyard` itself would run this pulumi command in."""
        return {**self.env, **command_settings(args)}

    def pulumi(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self.argv(*args), cwd=self.dir, env=self.env_for(*args), text=True,
                              capture_output=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise PulumiFailed(f"pulumi {' '.join(args)}:\n{proc.stdout[-5000:]}\n{proc.stderr[-3000:]}")
        return proc

    def railyard(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """The `railyard` console script in the project, as a user runs it there; not checked."""
        return subprocess.run([str(ROOT / ".venv" / "bin" / "railyard"), *args], cwd=self.dir, env=self.env, text=True,
                              capture_output=True, timeout=timeout, check=False)

    def checkpoint(self) -> Path:
        """The stack's checkpoint file in the file backend (the state `up` wrote)."""
        found = sorted(self.state.glob(f".pulumi/stacks/**/{self.stack}.json"))
        if not found:
            raise FileNotFoundError(f"no checkpoint for stack {self.stack} under {self.state}")
        return found[0]

    def outputs(self, secrets: bool = False) -> dict:
        return json.loads(self.pulumi("stack", "output", "--json", *(["--show-secrets"] if secrets else [])).stdout)

    def machines(self) -> list[dict]:
        out = []
        for node in self.outputs()["inventory"]:
            out.append(node)
            out.extend(node.get("vms") or [])
        return out

    def ssh(self, name: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = self.outputs(secrets=True)
        machines = [m for n in out["inventory"] for m in [n, *(n.get("vms") or [])]]
        target = next(m for m in machines if m["name"] == name)
        d = self.dir / ".ssh"
        d.mkdir(exist_ok=True, mode=0o700)
        (d / "id").write_text(out["access"]["privateKey"])
        (d / "id").chmod(0o600)
        (d / "kh").write_text("".join(f"{m['management_ip']} {m['host_key']}\n" for m in machines))
        proc = subprocess.run(["ssh", "-i", str(d / "id"), "-o", f"UserKnownHostsFile={d / 'kh'}",
                               "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
                               f"root@{target['management_ip']}", command],
                              text=True, capture_output=True, timeout=60, check=False)
        if check:
            assert proc.returncode == 0, f"{name}: {command}: {proc.stderr}"
        return proc
