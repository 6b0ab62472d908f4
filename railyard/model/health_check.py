"""One node's quick GPU health check: what runs on the node, and how its output is judged (issue 41).

Two callers run the same code:

- `railyard verify` runs HEALTH_SCRIPT on every node over SSH and judges each node's sections with
  `judge` against `expect_of(its SKU)` (railyard.verify);
- slurmd runs `slurmd_check` on each node as its `HealthCheckProgram` (the slurm role installs
  this module with the ones it imports): the node checks itself with no controller in the loop,
  and a finding drains it through Slurm with the finding as the reason (`decide`).

A tool that is missing is `not run`, never a pass: it drains nothing and returns nothing to
service.

Standard library only, with railyard.model.gpu_health and railyard.model.node_health, so a node
runs it as it is.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

try:
    from railyard.model import gpu_health as gh
    from railyard.model import node_health
except ImportError:  # installed on a node beside its own copies (the slurm role)
    import gpu_health as gh  # type: ignore[no-redef,import-not-found]
    import node_health  # type: ignore[no-redef,import-not-found]

# What runs on a node, in one shell: each tool's output under a marker line, or that it is missing.
# The kernel's log is read only where the NVIDIA driver is (nvidia-smi is): a node without it has
# no Xid to show. $1 is dcgmi diag's run level; 0 runs no diagnostic (slurmd's check: a diagnostic
# on GPUs a job is using is neither fair to the job nor a fair judge of the GPUs). The deep check
# (level 3) also runs nccl-tests' all_reduce_perf over the node's $2 GPUs (0: none, where its
# result could not be judged), one process, so only NVLink carries it: 8 B to 8 GiB, doubling.
HEALTH_SCRIPT = r"""
section() { printf '\n@@railyard %s\n' "$1"; }
if command -v nvidia-smi >/dev/null 2>&1; then
  section nvidia-smi; nvidia-smi -q -x 2>&1
  section nvlink; nvidia-smi nvlink --status 2>&1
  section kernel-log; dmesg 2>&1 || journalctl -k -b --no-pager 2>&1
else
  section nvidia-smi-missing
fi
if [ "$1" -gt 0 ]; then
  if command -v dcgmi >/dev/null 2>&1; then
    section dcgmi; dcgmi diag -r "$1" -j 2>&1
  else
    section dcgmi-missing
  fi
fi
if [ "$1" -ge 3 ] && [ "${2:-0}" -gt 0 ]; then
  if command -v all_reduce_perf >/dev/null 2>&1; then
    section all_reduce_perf; all_reduce_perf -b 8 -e 8G -f 2 -g "$2" 2>&1; rc=$?
    section all_reduce_perf-exit; echo "$rc"
  else
    section all_reduce_perf-missing
  fi
fi
"""
SECTION = "@@railyard "
# The largest message HEALTH_SCRIPT's all_reduce_perf sends (-e 8G): a run without its row stopped early.
COLLECTIVE_MAX_BYTES = 8 * 1024 ** 3
NCCL_TESTS_FAILURE = re.compile(r"Test (CUDA|NCCL) failure|Invalid number of GPUs|Test failure")

# The drain reason of slurmd's health check: Railyard's (node_health.PREFIX), and its own, so the
# check returns to service only the nodes it drained itself, never the repair loop's or a person's.
SLURMD_PREFIX = f"{node_health.PREFIX} health check:"
# Where the slurm role puts the check's settings (the node's Expect, its name, the tools' PATH).
CONFIG = "/etc/railyard/health-check.json"
# The tools' PATH where the settings give none: slurmd runs the program with an empty environment.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# slurmd kills its HealthCheckProgram after 60 s (slurm.conf(5)): the tools, sinfo and scontrol
# together stay well within that, so a hung tool still leaves time to drain and to say why.
TOOLS_TIMEOUT_S = 35
SCONTROL_TIMEOUT_S = 8
# Xids NVIDIA's Xid documentation gives the user's application among their possible causes (a
# graphics engine exception, an MMU fault, a channel stopped, a preemptive cleanup after another
# error): `railyard verify` reports them for a person to weigh, but slurmd's check does not drain
# a node on its own for what may be a job's bug.
APPLICATION_XIDS = (13, 31, 43, 45)


@dataclass(frozen=True)
class Expect:
    """What the plan promises a node's GPU tools show: its SKU's GPU count, their PCI ids and
    NVLinks per GPU. Small and plain, so a node's settings file carries it."""

    gpus: int
    vendor: str | None = None
    device: str | None = None
    nvlinks_per_gpu: int | None = None
    nvlink_gbs: float | None = None
    """One NVLink's speed as nvidia-smi gives it (GB/s); None where no real output of it is kept."""

    def to_json(self) -> dict[str, Any]:
        out = {"gpus": self.gpus, "vendor": self.vendor, "device": self.device, "nvlinks_per_gpu": self.nvlinks_per_gpu}
        # slurmd's check runs no collective: its settings file (and the tuning digest) stays as it was.
        return out | ({"nvlink_gbs": self.nvlink_gbs} if self.nvlink_gbs is not None else {})

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Expect:
        return cls(int(d["gpus"]), d.get("vendor"), d.get("device"), d.get("nvlinks_per_gpu"), d.get("nvlink_gbs"))

    @property
    def nvlink_busbw(self) -> float | None:
        """What all_reduce_perf within the node should reach (gpu_health.expected_busbw_node); None
        where nothing can be held to it: no kept output of the GPU's links, or one GPU alone."""
        if not self.nvlinks_per_gpu or not self.nvlink_gbs or self.gpus < 2:
            return None
        return gh.expected_busbw_node(nvlinks=self.nvlinks_per_gpu, link_gbs=self.nvlink_gbs)


def expect_of(sku: Any, nvlink_gbs: float | None = None) -> Expect:
    """A catalog SKU's Expect (duck-typed: this module may not import the catalog's YAML reader);
    nvlink_gbs: its GPU's link speed (catalog.nvlink_gbs)."""
    first = sku.gpus[0] if sku.gpus else None
    nvlinks = int(sku.nvlink_class[2:]) if sku.nvlink_class and sku.nvlink_class[2:].isdigit() else None
    return Expect(len(sku.gpus), first.pci_vendor if first else None, first.pci_device if first else None, nvlinks,
                  nvlink_gbs if nvlinks else None)


def split_sections(stdout: str) -> dict[str, str]:
    """HEALTH_SCRIPT's output by section name."""
    sections: dict[str, str] = {}
    current = None
    for line in stdout.splitlines(keepends=True):
        if line.startswith(SECTION):
            current = line[len(SECTION):].strip()
            sections[current] = ""
        elif current is not None:
            sections[current] += line
    return sections


def judge(sections: Mapping[str, str], expect: Expect, *, ignore_xids: Sequence[int] = (),
          tolerance: float = gh.COLLECTIVE_TOLERANCE) -> tuple[list[gh.HealthFinding], list[str], bool]:
    """A node's sections against its Expect: findings, why each check that could not run did not
    (never a pass), and whether any check ran. A tool that is there and fails (nvidia-smi with its
    driver gone, all_reduce_perf short of GPUs) is a finding, not a check that could not run.
    tolerance: how far below the plan's bus bandwidth all_reduce_perf may fall (a fraction)."""
    found: list[gh.HealthFinding] = []
    not_run: list[str] = []
    if "nvidia-smi" in sections:
        try:
            log = gh.parse_nvidia_smi(sections["nvidia-smi"])
        except ValueError:
            said = [line.strip() for line in sections["nvidia-smi"].splitlines() if line.strip()]
            found.append(gh.HealthFinding("nvidia-smi-failed", None, "nvidia-smi -q -x failed: "
                                          + (said[0][:160] if said else "no output"), "its XML", "no XML"))
        else:
            found += gh.judge_gpus(log, count=expect.gpus, pci_id=(expect.vendor, expect.device))
        links = gh.parse_nvlink_status(sections.get("nvlink", ""))
        if expect.nvlinks_per_gpu and links:
            found += gh.judge_nvlink(links, per_gpu=expect.nvlinks_per_gpu, link_gbps=expect.nvlink_gbs)
        elif expect.nvlinks_per_gpu:
            not_run.append("nvidia-smi nvlink --status showed no links")
        found += gh.judge_kernel_log(sections.get("kernel-log", ""), ignore=ignore_xids)
    else:
        not_run.append("nvidia-smi missing")
    dcgm_ran = False
    if "dcgmi" in sections:
        results = gh.parse_dcgm_diag(sections["dcgmi"])
        found += gh.judge_dcgm(results)
        not_run += gh.dcgm_skipped(results)
        if not results:
            # dcgmi there but no report (its host engine not running, say): nothing was checked.
            said = [line.strip() for line in sections["dcgmi"].splitlines() if line.strip()]
            not_run.append(f"dcgmi diag gave no result ({said[-1][:160] if said else 'no output'})")
        # A report whose every test was skipped checked nothing either.
        dcgm_ran = any(r.status != gh.DCGM_SKIP for r in results)
    elif "dcgmi-missing" in sections:
        not_run.append("dcgmi missing")
    collective = "all_reduce_perf" in sections and expect.nvlink_busbw is not None
    if collective:
        found += _collective(sections["all_reduce_perf"], sections.get("all_reduce_perf-exit", "").strip(), expect,
                             tolerance)
    elif "all_reduce_perf" in sections:
        not_run.append("all_reduce_perf: the plan gives no NVLink bandwidth to hold it to (no real output of "
                       "this GPU's links is kept, or the node has one GPU)")
    elif "all_reduce_perf-missing" in sections:
        not_run.append("all_reduce_perf missing")
    return found, not_run, "nvidia-smi" in sections or dcgm_ran or collective


def _collective(text: str, status: str, expect: Expect, tolerance: float) -> list[gh.HealthFinding]:
    """A run that failed (a status other than 0, or stopped before its largest size) is a finding
    of its own: the sizes it did finish say nothing of the node."""
    said = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    try:
        run = gh.parse_all_reduce_perf(text)
    except ValueError:
        run = None
    largest = max((r.size for r in run.rows), default=0) if run else 0
    if run is None or status not in ("", "0") or largest < COLLECTIVE_MAX_BYTES or run.avg_busbw is None:
        errors = [line for line in said if not line[:1].isdigit()]
        # nccl-tests' own failure lines (common.h, util.cu), not what MPI or a launcher printed around them.
        failures = [line for line in errors if NCCL_TESTS_FAILURE.search(line)]
        why = (failures[0] if failures else f"exit status {status}" if status not in ("", "0") else
               f"it stopped after {largest} bytes" if run else errors[-1] if errors else "no result row")[:160]
        return [gh.HealthFinding("collective-failed", None, f"all_reduce_perf failed: {why}", "its whole table",
                                 f"exit status {status or '?'}, up to {largest} bytes")]
    assert expect.nvlink_busbw is not None
    return gh.judge_collective(run, expected_gbs=expect.nvlink_busbw, tolerance=tolerance)


# --- slurmd's HealthCheckProgram ------------------------------------------------------------------

@dataclass(frozen=True)
class Action:
    """What the check does to its node in Slurm: "drain" (with reason), "resume", or None (why says)."""

    verb: str | None
    reason: str | None
    why: str


def decide(findings: Sequence[str], ran: bool, held: node_health.Held) -> Action:
    """The check's verdict on its node, given its findings' messages and how Slurm holds it now.

    - a finding drains a node in service, with the first finding as the reason;
    - a node the check drained earlier and now finds clean is returned to service;
    - a node drained by anyone else (a person, the repair loop, acceptance, Slurm itself) keeps its
      state and reason: the check neither drains it again nor returns it;
    - a check that could not run changes nothing."""
    why = held.reason or ""
    ours = held.out and why.startswith(SLURMD_PREFIX)
    if held.out and not ours:
        return Action(None, None, f"left as it is: out of service already ({why or 'no reason'})")
    if not ran:
        return Action(None, None, "no check ran")
    if findings:
        more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
        text = node_health.reason(f"health check: {findings[0]}{more}")
        if ours and why == text:
            return Action(None, None, "drained already for this finding")
        return Action("drain", text, "found faulty")
    if ours:
        return Action("resume", None, "found healthy again")
    return Action(None, None, "healthy")


def _run(argv: list[str], env: Mapping[str, str], timeout: float) -> tuple[int, str, str]:
    """(exit status, stdout, stderr); a command missing or out of time is a status of its own
    (127, 124, as the shell and timeout(1) give them), never an exception in slurmd's program."""
    try:
        done = subprocess.run(argv, capture_output=True, env=dict(env), timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        return 124, (exc.stdout or b"").decode(errors="replace"), f"{argv[0]}: no answer in {timeout:g} s"
    except OSError as exc:
        return 127, "", f"{argv[0]}: {exc.strerror or exc}"
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


def slurmd_check(config: str = CONFIG) -> int:
    """slurmd's HealthCheckProgram: check this node, drain or return it in Slurm (`decide`), and
    say what was found on stdout. Exits 1 with a finding (slurmd logs a failed check), 0 otherwise."""
    with open(config, encoding="utf-8") as fh:
        settings = json.load(fh)
    expect = Expect.from_json(settings["expect"])
    node = os.environ.get("SLURMD_NODENAME") or settings["node"]
    env = {"PATH": settings.get("path") or DEFAULT_PATH, "LC_ALL": "C"}
    rc, out, err = _run(["sh", "-c", HEALTH_SCRIPT, "health", str(settings.get("dcgm_level", 0))], env,
                        TOOLS_TIMEOUT_S)
    if rc == 124:
        print(f"{node}: {err}")
    findings, not_run, ran = judge(split_sections(out), expect, ignore_xids=APPLICATION_XIDS)
    for f in findings:
        print(f"{node}: {f.kind}: {f.message}")
    for why in not_run:
        print(f"{node}: not run: {why}")
    rc, out, err = _run(["sh", "-c", f"{node_health.SINFO} --nodes {shlex.quote(node)}"], env, SCONTROL_TIMEOUT_S)
    held = node_health.parse_sinfo(out).get(node)
    if rc != 0 or held is None:
        print(f"{node}: Slurm's view of the node not read: {(err.strip() or 'no output').splitlines()[-1]}")
        return 1 if findings else 0
    action = decide([f.message for f in findings], ran, held)
    if action.verb == "drain":
        argv = ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={action.reason}"]
    elif action.verb == "resume":
        argv = ["scontrol", "update", f"NodeName={node}", "State=RESUME"]
    else:
        print(f"{node}: {action.why}")
        return 1 if findings else 0
    rc, out, err = _run(argv, env, SCONTROL_TIMEOUT_S)
    said = (err.strip() or out.strip()).splitlines()
    print(f"{node}: {action.verb} ({action.why})" + ("" if rc == 0 else f": scontrol exited {rc}: "
                                                      f"{said[-1] if said else 'no output'}"))
    return 1 if findings else 0
