"""The host-tuning resource: one run of the site playbook over the cluster's nodes; and the
acceptance resource, one run of the acceptance playbook after it.

Its inputs are every node's role variables and a digest of the playbooks, so `pulumi preview`
shows which nodes' tuning changes and why (the property paths under `hosts.<node>.vars`), and an
edit of a role reruns it. A failed host fails the resource with host, task and message.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from railyard.dynamic import TypedResource, wire_numbers


# Each playbook's run: its resource id's prefix, and what a failure says was failing.
RUNS = {"site.yml": ("tuning", "host tuning"), "guest.yml": ("guest-tuning", "guest tuning"),
        "teardown.yml": ("tuning", "removing the tuning from the hosts")}


class TuningProvider(ResourceProvider):
    def _run(self, props: dict, playbook: str | None = None) -> dict:
        from pathlib import Path

        from railyard.tuning import runner

        playbook = playbook or props.get("playbook") or "site.yml"
        result = runner.run_isolated({
            "stack": props["stack"], "hosts": wire_numbers(props["hosts"]), "private_key": props["private_key"],
            "user": props["user"], "forks": int(props["forks"]) if props.get("forks") else None,
            "secret_vars": props.get("secret_vars") or {}, "playbook": playbook,
            "artifacts": props.get("artifacts") or None,
        })
        if not result["ok"]:
            what = RUNS[playbook][1]
            lines = result["failures"] or [f"ansible-runner ended {result.get('status')} (rc {result.get('rc')})"]
            raise Exception(f"{what} failed:\n  " + "\n  ".join(lines) + f"\nartifacts: {result['run_dir']}")
        return {"last_run": Path(result["run_dir"]).name, "changed": result["changed"]}

    def create(self, props):
        prefix = RUNS[props.get("playbook") or "site.yml"][0]
        return CreateResult(id_=f"{prefix}-{props['stack']}", outs={**props, **self._run(props)})

    def diff(self, _id, olds, news):
        # The key too: destroy's teardown runs with the key state holds, which must be the current one.
        keys = ("stack", "user", "digest", "hosts", "secret_vars", "private_key", "playbook", "artifacts")
        return DiffResult(changes=any(olds.get(k) != news.get(k) for k in keys))

    def update(self, _id, _olds, news):
        return UpdateResult(outs={**news, **self._run(news)})

    def delete(self, _id, props):
        """Tuning lives on the hosts. Where they outlive the stack (teardown), the teardown playbook
        removes it; otherwise the hosts go with the stack and are left as they are."""
        if props.get("teardown"):
            self._run(props, playbook="teardown.yml")

    def read(self, id_, props):
        return ReadResult(id_=id_, outs=props)


class TuningRun(TypedResource, module="railyard", name="TuningRun"):
    last_run: pulumi.Output[str]
    changed: pulumi.Output[int]

    def __init__(self, name: str, *, stack: str, user: str, digest: str, hosts: Any, private_key: Any,
                 secret_vars: Any = None, forks: int | None = None, teardown: bool = False,
                 playbook: str = "site.yml", artifacts: Any = None, opts: pulumi.ResourceOptions | None = None):
        # teardown and playbook only where not the default: an input the lab's runs never had would
        # show as their change.
        extra: dict[str, Any] = {"teardown": True} if teardown else {}
        if playbook != "site.yml":
            extra["playbook"] = playbook
        if artifacts is not None:
            extra["artifacts"] = artifacts
        super().__init__(TuningProvider(), name, {**extra,
            "stack": stack, "user": user, "digest": digest, "hosts": hosts, "private_key": private_key,
            "secret_vars": pulumi.Output.secret(secret_vars or {}), "forks": forks, "last_run": None,
            "changed": None,
        }, opts)


class AcceptanceProvider(ResourceProvider):
    """Runs acceptance (railyard.tuning.acceptance) on create and on every update: a change to the
    nodes, their tuning (its last run is an input) or the checks runs it again."""

    def _run(self, props: dict) -> dict:
        from railyard.tuning import acceptance

        return acceptance.run({**props, "hosts": wire_numbers(props["hosts"])})

    def create(self, props):
        return CreateResult(id_=f"acceptance-{props['stack']}", outs={**props, **self._run(props)})

    def diff(self, _id, olds, news):
        keys = ("stack", "user", "digest", "hosts", "secret_vars", "mtu", "tolerance", "on_failure", "controller",
                "kubernetes", "after")
        return DiffResult(changes=any(olds.get(k) != news.get(k) for k in keys))

    def update(self, _id, _olds, news):
        return UpdateResult(outs={**news, **self._run(news)})

    def read(self, id_, props):
        return ReadResult(id_=id_, outs=props)


# What an acceptance run hands back (railyard.tuning.acceptance.run), stack output and all.
ACCEPTANCE_OUTPUTS = ("passed", "findings", "drained", "cordoned", "flagged", "median_gbps", "rail_pairs", "seconds", "report")


class AcceptanceRun(TypedResource, module="railyard", name="AcceptanceRun"):
    passed: pulumi.Output[bool]
    findings: pulumi.Output[list]
    drained: pulumi.Output[list]
    cordoned: pulumi.Output[dict]
    flagged: pulumi.Output[list]
    median_gbps: pulumi.Output[float]
    rail_pairs: pulumi.Output[int]
    seconds: pulumi.Output[float]
    report: pulumi.Output[str]

    def __init__(self, name: str, *, stack: str, user: str, digest: str, hosts: Any, private_key: Any,
                 secret_vars: Any, mtu: int, tolerance: float, on_failure: str, controller: str | None, after: Any,
                 kubernetes: bool = False, opts: pulumi.ResourceOptions | None = None):
        # kubernetes only where set: an input earlier runs never had would show as their change.
        extra = {"kubernetes": True} if kubernetes else {}
        super().__init__(AcceptanceProvider(), name, {**extra,
            "stack": stack, "user": user, "digest": digest, "hosts": hosts, "private_key": private_key,
            "secret_vars": pulumi.Output.secret(secret_vars or {}), "mtu": mtu, "tolerance": tolerance,
            "on_failure": on_failure, "controller": controller, "after": after,
            **{k: None for k in (*ACCEPTANCE_OUTPUTS, "last_run")},
        }, opts)
