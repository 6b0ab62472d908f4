"""Acceptance, outside the engine: the acceptance playbook over the nodes, its reports judged by
railyard.model.acceptance, the Markdown report written beside the run's artifacts, and, where the
stack says `onFailure: cordon`, the failed nodes drained in Slurm (their Kubernetes cordon is the
layer's, components/kubernetes.py, from the `cordoned` this hands back). Pulumi-free: the AcceptanceRun
resource calls it from its provider (railyard/tuning/resource.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from railyard.model.acceptance import Finding, cordon_reasons, evaluate, markdown
from railyard.tuning import runner

REPORT = "acceptance.md"


class AcceptanceFailed(Exception):
    pass


def run(props: dict[str, Any]) -> dict[str, Any]:
    """props: stack, user, private_key, secret_vars, hosts {name: {address, host_key, vars}}, mtu,
    tolerance, on_failure, controller (the Slurm controller, or None), kubernetes (the stack has
    the Kubernetes layer, which cordons what this reports in `cordoned`). The outputs, or
    AcceptanceFailed naming every node, rail and check that failed (onFailure: fail)."""
    base = {"stack": props["stack"], "private_key": props["private_key"], "user": props["user"],
            "secret_vars": props.get("secret_vars") or {}, "playbook": "acceptance.yml"}
    started = time.monotonic()
    result = runner.run_isolated({**base, "hosts": props["hosts"], "tags": "acceptance"})
    seconds = time.monotonic() - started
    judged = evaluate(result.get("reports") or {}, sorted(props["hosts"]), mtu=int(props["mtu"]),
                      tolerance=float(props["tolerance"]))
    findings: list[Finding] = judged["findings"]
    # Each failure is "host: task '...': message", by host.
    failures = [(f.split(":", 1)[0], f) for f in result.get("failures") or []]
    # A failure of the run itself (no inventory host to pin it on: ansible-playbook, the runner)
    # says nothing about the nodes.
    unpinned = [f for host, f in failures if host not in props["hosts"]]
    if unpinned or (not result.get("ok") and not failures):
        raise AcceptanceFailed("the acceptance run failed before judging any node:\n  " + "\n  ".join(
            unpinned or [f"ansible-runner ended {result.get('status')} (rc {result.get('rc')})"])
            + (f"\nartifacts: {result['run_dir']}" if result.get("run_dir") else ""))
    # A node whose run failed outright says why in the run's failures; that beats "reported nothing".
    failed_runs = dict(failures)
    findings = [Finding(f.node, "node", failed_runs[f.node].split(": ", 1)[-1]) if f.check == "node" and f.node in failed_runs
                else f for f in findings]
    report = Path(result["run_dir"]) / REPORT if result.get("run_dir") else None
    if report is not None:
        report.write_text(markdown({**judged, "findings": findings}, mtu=int(props["mtu"]),
                                   tolerance=float(props["tolerance"]), seconds=seconds))
    cordoned: dict[str, str] = {}
    if findings and props["on_failure"] == "cordon" and {f.node for f in findings} >= set(props["hosts"]):
        # Every node at once is the checks' own failure (a missing tool, a bad argument), or the
        # fabric's: draining the whole cluster would hide it.
        raise AcceptanceFailed("acceptance failed on every node; nothing was drained:\n  "
                               + "\n  ".join(str(f) for f in findings) + (f"\nreport: {report}" if report else ""))
    if findings and props["on_failure"] == "cordon":
        cordoned = _take_out(base, props, findings)
    elif findings:
        raise AcceptanceFailed("acceptance failed:\n  " + "\n  ".join(str(f) for f in findings)
                               + (f"\nreport: {report}" if report else ""))
    return {"passed": not findings, "findings": [f.to_json() for f in findings], "drained": sorted(cordoned) if _slurm(props) else [], "cordoned": cordoned,
            "rail_pairs": len(judged["rails"]), "median_gbps": judged["median_gbps"],
            "flagged": [{"node": e["node"], "rail": e["rail"], "peer": e["peer"], "gbps": e["gbps"]}
                        for e in judged["rails"] if e["flagged"]],
            "seconds": round(seconds, 1), "report": str(report) if report else None,
            "last_run": Path(result["run_dir"]).name if result.get("run_dir") else None}


def _slurm(props: dict) -> bool:
    """Whether the stack's Slurm controller is among the nodes (where the failed ones are drained)."""
    return bool(props.get("controller")) and props["controller"] in props["hosts"]


def _take_out(base: dict, props: dict, findings: list[Finding]) -> dict[str, str]:
    """The failed nodes out of scheduling, each with its first finding as the reason: drained in
    Slurm here, where the stack has it; cordoned by the Kubernetes layer, where it has that. The
    nodes and their reasons."""
    controller = props.get("controller")
    slurm = _slurm(props)
    if not slurm and not props.get("kubernetes"):
        raise AcceptanceFailed("acceptance failed, and onFailure: cordon has no scheduler to take the nodes out of:\n  "
                               + "\n  ".join(str(f) for f in findings))
    reasons = cordon_reasons(findings)
    if slurm:
        # What a node reported lands in an inventory variable, which Ansible templates: the
        # reasons carry no braces (node_health.reason).
        drain = [{"node": n, "reason": r} for n, r in sorted(reasons.items())]
        host = dict(props["hosts"][controller])
        host["vars"] = {**host["vars"], "acceptance_drain": drain}
        result = runner.run_isolated({**base, "hosts": {controller: host}, "tags": "drain"})
        if not result.get("ok"):
            raise AcceptanceFailed("acceptance failed, and draining the failed nodes did too:\n  "
                                   + "\n  ".join(result.get("failures") or []))
    return reasons
