"""ibsim and the InfiniBand tools around it: a simulated subnet that OpenSM, ibnetdiscover,
ibtracert and smpquery talk to as if it were hardware.

The tools reach the simulator through libumad2sim (LD_PRELOAD), over abstract Unix sockets named
by IBSIM_SOCKNAME: nothing on disk and no network traffic, and every simulation its own name, so
two can run at once. OpenSM keeps its cache (OSM_CACHE_DIR), log and dumps in the simulation's
work directory instead of /var/cache/opensm and /var/log. `Simulator` kills its process group on
exit, failed or not, and every process it starts dies with the one that started it.
"""

from __future__ import annotations

import ctypes
import glob
import itertools
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

# Debian's packages: the command that each provides, and the preload library.
PACKAGES = {"ibsim": "ibsim-utils", "opensm": "opensm", "ibnetdiscover": "infiniband-diags",
            "ibtracert": "infiniband-diags", "smpquery": "infiniband-diags"}
PRELOAD_GLOB = "/usr/lib/*/umad2sim/libumad2sim.so"
PRELOAD_PACKAGE = "libumad2sim0"

_counter = itertools.count()
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent: int) -> Callable[[], None]:
    """For the child before exec: the kernel kills it when the thread that started it ends, even
    by SIGKILL, so no simulator or tool outlives a killed `railyard` or test (Railyard starts
    them from its main thread). A parent gone before the prctl took effect ends the child too."""
    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return arm


class SimulatorError(RuntimeError):
    pass


def tools() -> dict[str, str]:
    """Paths of the commands and the preload library; SimulatorError naming the packages missing."""
    found, missing = {}, set()
    for cmd, package in PACKAGES.items():
        path = shutil.which(cmd) or next((p for p in (f"/usr/sbin/{cmd}", f"/sbin/{cmd}") if os.access(p, os.X_OK)),
                                         None)
        if path:
            found[cmd] = path
        else:
            missing.add(package)
    preload = sorted(glob.glob(PRELOAD_GLOB))
    if preload:
        found["preload"] = preload[0]
    else:
        missing.add(PRELOAD_PACKAGE)
    if missing:
        raise SimulatorError(f"the InfiniBand simulator needs the Debian packages {', '.join(sorted(missing))} "
                             "(make deps installs them)")
    return found


def _socket_ready(name: str) -> bool:
    try:
        with open("/proc/net/unix", encoding="ascii", errors="replace") as f:
            return f"@{name}:ctl" in f.read()
    except OSError:
        return False


class Simulator:
    """An ibsim process serving one topology file, and the tools run against it."""

    def __init__(self, topology: Path, workdir: Path, limits: Mapping[str, int], *, start_timeout: float = 120.0):
        self.topology = Path(topology)
        self.workdir = Path(workdir)
        self.limits = dict(limits)
        self.start_timeout = start_timeout
        self.tools = tools()
        self.sockname = f"railyard-{os.getpid()}-{next(_counter)}"
        self.proc: subprocess.Popen | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> "Simulator":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.proc is not None:
            raise SimulatorError("this simulator is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "cache").mkdir(exist_ok=True)
        log = open(self.workdir / "ibsim.log", "wb")
        argv = [self.tools["ibsim"], "-s", "-n", "-N", str(self.limits["nodes"]), "-S", str(self.limits["switches"]),
                "-P", str(self.limits["ports"]), str(self.topology)]
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "IBSIM_SOCKNAME": self.sockname}, start_new_session=True,
                                         preexec_fn=_die_with_parent(os.getpid()))
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout
        while not _socket_ready(self.sockname):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise SimulatorError(f"ibsim exited with {code} while loading {self.topology}: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise SimulatorError(f"ibsim did not come up within {self.start_timeout:.0f} s")
            time.sleep(0.05)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.workdir / "ibsim.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        # ibsim warns once per port line it cannot find a LID in; that is every line of a plan.
        kept = [line for line in text if "parse_port_connection_data" not in line]
        return " | ".join(kept[-lines:])

    def peak_rss_kib(self) -> int | None:
        """ibsim's peak resident memory (VmHWM) so far."""
        if self.proc is None:
            return None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None

    # --- the tools -----------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        return {**os.environ, "LD_PRELOAD": self.tools["preload"], "IBSIM_SOCKNAME": self.sockname,
                "OSM_CACHE_DIR": str(self.workdir / "cache")}

    def run(self, tool: str, args: Sequence[str], *, timeout: float = 120.0, check: bool = True
            ) -> subprocess.CompletedProcess:
        if self.proc is None or self.proc.poll() is not None:
            raise SimulatorError(f"ibsim is not running (cannot run {tool}): {self.log_tail()}")
        argv = [self.tools[tool], *args]
        try:
            done = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=timeout,
                                  start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))
        except subprocess.TimeoutExpired as exc:
            raise SimulatorError(f"{tool} did not finish within {timeout:.0f} s") from exc
        if check and done.returncode != 0:
            err = "; ".join(line for line in done.stderr.splitlines() if "sim_connect" not in line)[-500:]
            raise SimulatorError(f"{tool} {' '.join(args)} exited with {done.returncode}: {err}")
        return done

    def ibnetdiscover(self) -> str:
        return self.run("ibnetdiscover", []).stdout

    def opensm(self, config: Path, *, timeout: float = 600.0) -> float:
        """One OpenSM sweep (-o: sweep, program the switches and HCAs, exit); returns its seconds."""
        start = time.monotonic()
        self.run("opensm", ["-o", "-F", str(config)], timeout=timeout)
        return time.monotonic() - start
