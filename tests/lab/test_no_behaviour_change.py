"""No behaviour change for users (issue 11, item 5): stacks that the code of BASE brought up are
taken over by this checkout's code without a replace or a delete, and what users read stays the same.

The code of BASE runs from a git worktree: its `railyard` CLI, its Pulumi program and components
and its tuning roles bring up copies of `stacks/Pulumi.lab.yaml` and `stacks/Pulumi.lab-virtual.yaml`
(stack names and management/storage networks of their own, everything else as committed), tuning
included. Then this checkout's code, on the same project copy and backend, runs `preview` and `up`
(neither may replace or delete a resource; a resource whose name or type moves needs an alias) and
`down`. Beside that, on both sides: the plan JSON of the committed stack files, the inventory
`railyard tune --check` hands the roles (their variables per host) and what that check would
change, and the role variables the program gives its tuning resource, must be equal.

The review goldens (tests/unit/review/test_render.py) pin `railyard review`'s output already, so
they are not repeated here.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Iterator

import pytest
import yaml

from railyard import paths
from railyard.review.preview import decoded
from tests.lab.railyard_project import RailyardProject, code_env, free_networks, worktree_of

ROOT = paths.PROJECT_ROOT

# The commit issue 11 starts from: the refactor it asks for (plan model, driver contract,
# components, lab driver modules) must keep every user-visible behaviour of this commit.
BASE = "e5d6f5f092b077781a1a827b439608a5f0f03f91"

STACK_FILES = ("lab", "lab-virtual")

# Old → new differences that are deliberate bug fixes: fnmatch patterns over the paths the failure
# messages print (plan/<stack file>/<summary|detail>/<key.path>, tuning/<stack file>/<host>.<var>),
# each mapped to the fix it comes from; the closing note lists the same ones.
ALLOWED_DIFFERENCES: dict[str, str] = {
    # The complete plan (issue 11) gives each NIC its netdev and each NIC and VF its gateway;
    # `plan --detail` shows what the plan holds, so those keys are added. Nothing existing changes.
    "plan/*/detail/detail.nodes*.nics*.netdev": "added: each NIC's netdev, from the plan",
    "plan/*/detail/detail.nodes*.nics*.gateway": "added: each NIC's rail gateway, from the plan",
    "plan/*/detail/detail.nodes*.vms*.vfs*.gateway": "added: each VF's rail gateway, from the plan",
    # Issue 12: ssh in a tuning run reads no ~/.ssh/config and no global known_hosts, and each run
    # has its own known_hosts file (runs of two pools may overlap). Same hosts, same keys checked.
    "tuning/*/all/ansible_ssh_common_args": "a bug fix: -F /dev/null, GlobalKnownHostsFile=/dev/null, "
                                            "the run's own known_hosts",
    # Issue 13: a tenant is also a Kubernetes namespace with its pools and GPU quota (their
    # defaults shown); its name and pkey are as they were.
    "plan/*/*/tenants*.namespace": "added: the tenant's namespace (default: its name)",
    "plan/*/*/tenants*.pools": "added: the pools the tenant covers (default: all)",
    "plan/*/*/tenants*.gpu_quota": "added: the tenant's GPU quota (default: its pools' GPUs)",
    # Issue 16: every network has an MTU in the plan (railyard.model.mtu).
    "plan/*/*/networks.*.mtu": "added: each network's MTU, from the fixture table",
    # Issue 16, part 3: a RoCE switch's loopback, and the ETS classes as the QoS commands use them.
    "plan/*/detail/detail.switches*.loopback": "added: each RoCE switch's loopback (BGP router id)",
    "plan/*/*/fabrics.compute.loopbacks": "added: where a RoCE fabric's switch loopbacks come from",
    "plan/*/*/fabrics.compute.qos.ets_strict": "added: the ETS strict classes, parsed from the fixture's row",
    "plan/*/*/fabrics.compute.qos.ets_wrr": "added: the ETS WRR classes and shares, parsed from the fixture's row",
    # Issue 14: `plan --detail` of a virtual layout shows each VM's guest topology.
    "plan/*/detail/detail.guests*": "added: each VM's guest topology (railyard.model.guest_topology)",
    # Issue 14: guest tuning runs the host's roles inside the VMs, so its run's hosts (the VMs) are new.
    "tuning/*/*-vm[0-9]*": "added: the VMs, tuned by the guest playbook",
    # Issue 15: the plan says who tunes the machines (a cloud platform may tune its own), instead
    # of leaving it unsaid; the lab's answer is what it always did.
    "plan/*/*/host_tuning": "added: who tunes the hosts (railyard.drivers.platform_tuning)",
    # Issue 18: hugepages and iommu share one hardware read, the role host_hw they depend on, so
    # the lab's tree roots are handed to it instead of to each of them. The same trees are read.
    "tuning/*hugepages_sysfs_root": "moved to host_hw_sysfs_root (one hardware read for hugepages and iommu)",
    "tuning/*hugepages_procfs_root": "moved to host_hw_procfs_root (one hardware read for hugepages and iommu)",
    "tuning/*iommu_sysfs_root": "moved to host_hw_sysfs_root (one hardware read for hugepages and iommu)",
    "tuning/*iommu_procfs_root": "moved to host_hw_procfs_root (one hardware read for hugepages and iommu)",
    "tuning/*host_hw_sysfs_root": "added: the roots of the hardware read hugepages and iommu share",
    "tuning/*host_hw_procfs_root": "added: the roots of the hardware read hugepages and iommu share",
    # Issue 40: a RoCE stack's hosts run lldpd on their rails (role lldp), so that `railyard
    # verify` reads the fabric's cabling; an InfiniBand stack's hosts get no LLDP variable.
    "tuning/*.lldp_*": "added: lldpd on an Ethernet fabric's rails (role lldp)",
}

# Issue 16, part 3 (docs/lab.md): a lab RoCE stack's switches become FRR routers once. Its one
# spine namespace goes and the routed switches come; its nodes are updated in place, each rail
# gaining the leaf its port moves to (the veth moves whole, so a hypervisor's VFs stay). Only on
# the RoCE stack file.
ROUTED = "lab-virtual"
# What a rail of a node on a routed leaf gains: issue 16's MTU and leaf, and issue 40's planned
# port there (its alias, which the leaf's lldpd sends as the port id).
RAIL_KEYS = ("mtu", "leaf", "leaf_port")
# The stack file whose hosts run VMs.
VIRTUAL = "lab-virtual"


def _lldp_change(name: str, line: str) -> bool:
    """What `tune --check` says the lldp role (issue 40) would do on the RoCE stack's hosts: write
    lldpd's drop-in, record whether the host ran lldpd before, and start it. Nothing else of the
    check may change."""
    return name == ROUTED and any(what in line for what in (
        "/etc/lldpd.d/railyard.conf", "/var/lib/railyard/lldp-before.json", "Record the host's own lldpd",
        "Run lldpd by its pid file"))


def _routed_switch_step(name: str, step: dict) -> bool:
    if name != ROUTED:
        return False
    urn, op = step.get("urn", ""), step.get("op")
    if op == "delete":
        return urn.endswith("-net-spine")
    if op == "create":
        return urn.endswith("-net-switches")
    if op == "update" and urn.endswith("-host") and changed_inputs(step) == {"spec"}:
        old, new = inputs_of(step, "old"), inputs_of(step, "new")
        return _without_rail(old.get("spec"), *RAIL_KEYS) == _without_rail(new.get("spec"), *RAIL_KEYS)
    return False


# Issue 17, part 2 (docs/acceptance.md): `up` gains an acceptance stage after tuning, on by default,
# so every stack gains its component and its one run: created, nothing else touched.
def _acceptance_step(step: dict) -> bool:
    urn = step.get("urn", "")
    return step.get("op") == "create" and (("railyard:index:Acceptance::" in urn and urn.endswith("-acceptance"))
                                           or urn.endswith("-acceptance-run"))


# Issue 14 (docs/guests.md): a VM presents its guest topology, so each VM gains the `guest` input,
# an update that restarts its processes on its new hardware tree (the preview shows it); guest
# tuning then runs inside the VMs: its component and its one run are created.
def _guest_step(step: dict) -> bool:
    urn, op = step.get("urn", ""), step.get("op")
    if op == "create":
        return "railyard:index:GuestTuning" in urn
    if op == "update" and urn.endswith("-guest"):
        keys = changed_inputs(step)
        old, new = inputs_of(step, "old"), inputs_of(step, "new")
        # The VFs may gain their MTU in the same update (issue 16's, allowed by _mtu_update alone).
        return "guest" in keys and keys <= {"guest", "vfs"} and _without_mtu(old.get("vfs")) == _without_mtu(new.get("vfs"))
    return False


# Issue 18 (docs/lab.md): a node's cache and parallel-FS mount belong to the node's resource, whose
# settings are one `spec`. Each node is updated in place to hold its cache's settings (its other
# settings as they were; its rails may gain issue 16's MTU and leaf in the same update), and the
# storage resource is deleted from state only: its provider's delete leaves the cache mounted
# (tests/lab/test_merged_node_storage.py checks the lab objects).
def merged_storage_step(step: dict) -> bool:
    urn, op = step.get("urn", ""), step.get("op")
    if op == "delete":
        return urn.endswith("-host-storage")
    if op == "update" and urn.endswith("-host"):
        old, new = inputs_of(step, "old"), inputs_of(step, "new")
        return _node_settings(old) == _node_settings(new) and "cache" in (new.get("spec") or {})
    return False


def _node_settings(inputs: dict) -> dict:
    """A node's inputs in either layout, without its cache, its parallel-FS mount, its `lldp` and
    the rails' MTU, leaf and leaf port. `lldp` (issue 40: a refresh of a node of an Ethernet fabric
    reads its LLDP neighbours) changes nothing on the node and plans no update of its own; the
    merge's update records it."""
    flat = {k: v for k, v in inputs.items() if k not in ("spec", "__provider")}
    flat.update({k: v for k, v in (inputs.get("spec") or {}).items() if k not in ("cache", "pfs_mount", "lldp")})
    return _without_rail(flat, *RAIL_KEYS)


def _deliberate(name: str, step: dict) -> bool:
    return (_routed_switch_step(name, step) or _acceptance_step(step) or _guest_step(step)
            or merged_storage_step(step))


def _without_rail(spec: Any, *keys: str) -> Any:
    if not isinstance(spec, dict):
        return spec
    return {**spec, "rails": [{k: v for k, v in r.items() if k not in keys} if isinstance(r, dict) else r
                              for r in spec.get("rails") or ()]}

# The one update a first preview may show: the tuning run, when the code the playbook runs changed
# (its `digest` input covers the roles, their modules and the model modules shipped to hosts), so
# the idempotent playbook runs once more and changes nothing on the nodes. Any other changed
# input, or an update of any other resource, is a behaviour change.
UPDATES_ALLOWED = {"-tuning-run": {"digest"}}


def _without_mtu(nics: Any) -> Any:
    return [{k: v for k, v in n.items() if k != "mtu"} if isinstance(n, dict) else n for n in nics or ()]


def _without_rail_mtu(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    return {**spec, "rails": _without_mtu(spec.get("rails"))}


# Issue 16 sets the planned MTU on the lab's rail links: each node's rails and each VM's VFs gain
# `mtu` (both veth ends; the VF itself) and the spine's links take it too. Updates in place,
# nothing else in them may differ.
def _mtu_update(step: dict) -> bool:
    old, new = inputs_of(step, "old"), inputs_of(step, "new")
    urn = step.get("urn", "")
    if urn.endswith("-host") and changed_inputs(step) == {"spec"}:
        return _without_rail_mtu(old.get("spec")) == _without_rail_mtu(new.get("spec"))
    if urn.endswith("-guest") and changed_inputs(step) == {"vfs"}:
        return _without_mtu(old.get("vfs")) == _without_mtu(new.get("vfs"))
    if urn.endswith("-tuning-run"):
        # A preview cannot know the outputs of the nodes it updates (their host keys), so the
        # inputs of the tuning run built from them read as unknown there; `up` then finds them
        # unchanged (test_up_with_the_new_code_... allows the digest alone).
        return changed_inputs(step) - {k for k in new if _unknown(new[k])} <= UPDATES_ALLOWED["-tuning-run"]
    return urn.endswith("-net-spine") and changed_inputs(step) == {"mtu"}


UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the engine's placeholder for a value not known yet


def _unknown(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(_unknown(v) for v in value)
    return value == UNKNOWN


def inputs_of(step: dict, side: str) -> dict:
    """A step's old or new inputs (preview JSON: oldState/newState; engine events: old/new), a lab
    node's `spec` read as the settings it holds: a mapping, or since issue 18 one JSON string (the
    same settings in either are no change; railyard.review.preview.decoded reads it so too)."""
    inputs = (step.get(f"{side}State") or step.get(side) or {}).get("inputs") or {}
    return {**inputs, "spec": decoded(inputs["spec"])} if "spec" in inputs else inputs


def changed_inputs(step: dict) -> set[str]:
    """The inputs an update step changes, from its old and new state (preview JSON: oldState and
    newState; engine events: old and new)."""
    old, new = inputs_of(step, "old"), inputs_of(step, "new")
    return {k for k in set(old) | set(new) if old.get(k) != new.get(k)} or {"?"}


def allowed_update(step: dict) -> bool:
    keys = changed_inputs(step)
    if step.get("op") == "update" and step["urn"].endswith("-tuning-run") and "hosts" in keys:
        # Its hosts' role variables may differ by ALLOWED_DIFFERENCES alone (issue 18 moved roots).
        keys = keys - {"hosts"} if _hosts_differ_as_allowed(step) else keys
    return step.get("op") == "update" and (any(
        step["urn"].endswith(suffix) and keys <= inputs for suffix, inputs in UPDATES_ALLOWED.items())
        or _mtu_update(step))


def _hosts_differ_as_allowed(step: dict) -> bool:
    old, new = inputs_of(step, "old").get("hosts"), inputs_of(step, "new").get("hosts")
    if not isinstance(old, dict) or not isinstance(new, dict) or old.keys() != new.keys():
        return False
    if any({k: v for k, v in old[h].items() if k != "vars"} != {k: v for k, v in new[h].items() if k != "vars"}
           for h in old):
        return False
    diffs = differences({h: old[h].get("vars") for h in old}, {h: new[h].get("vars") for h in new}, "tuning/run/")
    return all(any(fnmatch.fnmatchcase(p, pat) for pat in ALLOWED_DIFFERENCES) for p, _ in diffs)

# Every step that removes a resource or stands a new one up in its place.
FORBIDDEN_OPS = {"replace", "create-replacement", "delete-replaced", "delete", "discard", "discard-replaced",
                 "read-replacement"}


@pytest.fixture(scope="module")
def base_checkout(tmp_path_factory) -> Iterator[Path]:
    with worktree_of(BASE, tmp_path_factory.mktemp("base") / "checkout", "where issue 11 starts") as path:
        yield path


# --------------------------------------------------------------------------------------------------
# Comparing old and new


def differences(old: Any, new: Any, path: str) -> list[tuple[str, str]]:
    """(path, what changed) for every leaf that differs; `path` ends in "/" at the top."""
    def child(key: Any) -> str:
        return f"{path}{key}" if path.endswith("/") else f"{path}.{key}"

    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, str]] = []
        for key in sorted(old.keys() | new.keys(), key=str):
            if key not in new:
                out.append((child(key), f"removed (was {short(old[key])})"))
            elif key not in old:
                out.append((child(key), f"added ({short(new[key])})"))
            else:
                out += differences(old[key], new[key], child(key))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if old == new else [(path, f"{short(old)} → {short(new)}")]


def short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 160 else text[:157] + "..."


def assert_unchanged(diffs: list[tuple[str, str]], what: str) -> None:
    left = [(p, d) for p, d in diffs if not any(fnmatch.fnmatchcase(p, pat) for pat in ALLOWED_DIFFERENCES)]
    lines = [f"  {p}: {d}" for p, d in left[:40]] + ([f"  ... and {len(left) - 40} more"] if len(left) > 40 else [])
    assert not left, (f"{what} differ between {BASE[:7]} and this checkout ({len(left)} differences; a deliberate "
                      "bug fix goes into ALLOWED_DIFFERENCES with its reason):\n" + "\n".join(lines))


def forbidden_steps(steps: Iterable[dict]) -> list[str]:
    return sorted({f"{s['op']} {s['urn']}" for s in steps if s.get("op") in FORBIDDEN_OPS})


# --------------------------------------------------------------------------------------------------
# The plan of the committed stack files


def plan_json(checkout: Path, stack_file: Path, *extra: str) -> dict:
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "railyard"), "plan", "--json", *extra, str(stack_file)],
                          env=code_env(checkout), text=True, capture_output=True, timeout=300, check=False)
    assert proc.returncode == 0, f"railyard plan --json {' '.join(extra)} {stack_file} with the code of " \
                                 f"{checkout}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


@pytest.mark.parametrize("name", STACK_FILES)
def test_plan_json_of_the_committed_stack_file_is_unchanged(base_checkout, name):
    stack_file = paths.stack_file(name, base_checkout)  # the file as users have it at BASE
    diffs = []
    for mode, extra in (("summary", ()), ("detail", ("--detail",))):
        old, new = (plan_json(code, stack_file, *extra) for code in (base_checkout, ROOT))
        diffs += differences(old, new, f"plan/{name}/{mode}/")
    assert_unchanged(diffs, f"`railyard plan --json` of {paths.stack_file_name(name)}")


# --------------------------------------------------------------------------------------------------
# Stacks of the old code, taken over by the new


class Takeover:
    """The project copy, its stacks (stack file name → stack) and what the old code saw."""

    def __init__(self, project: RailyardProject, stacks: dict[str, str]):
        self.project = project
        self.stacks = stacks
        self.old_tune: dict[str, dict] = {}
        self.old_state_tuning: dict[str, dict] = {}

    def each(self, action: str, *extra: str, check: bool = True) -> dict[str, subprocess.CompletedProcess[str]]:
        """`railyard ACTION --stack S EXTRA...` for every stack at once, each required to succeed."""
        def one(stack: str) -> subprocess.CompletedProcess[str]:
            return self.project.railyard(action, "--stack", stack, *extra, check=False)

        with ThreadPoolExecutor(len(self.stacks)) as pool:
            procs = dict(zip(self.stacks, pool.map(one, self.stacks.values())))
        for name, proc in procs.items() if check else ():
            self.succeeded(name, action, proc)
        return procs

    def succeeded(self, name: str, action: str, proc: subprocess.CompletedProcess[str]) -> None:
        assert proc.returncode == 0, f"railyard {action} of the {name} copy ({self.stacks[name]}) exited " \
                                     f"{proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"

    def tune_check(self) -> dict[str, dict]:
        """`railyard tune --check` of every stack: the inventory it wrote for the roles (all.vars,
        and each host's variables) and the changes it says the playbook would make."""
        out = {}
        for name, proc in self.each("tune", "--check").items():
            inventory = yaml.safe_load((paths.runs_dir(self.stacks[name], self.project.dir) / "inventory.yml").read_text())
            out[name] = {"all": inventory["all"].get("vars") or {}, "hosts": inventory["all"].get("hosts") or {},
                         "changes": sorted(line.strip() for line in proc.stdout.splitlines()
                                           if line.strip().startswith("would change:"))}
        return out

    def state_tuning(self, stack: str) -> dict:
        """Each host's role variables as the program handed them to the tuning resource."""
        deployment = json.loads(self.project.pulumi("stack", "export", stack=stack).stdout)["deployment"]
        # (Acceptance's run has hosts and a digest too, and the tuning's variables among its own.)
        runs = [r for r in deployment.get("resources") or ()
                if isinstance(r.get("inputs", {}).get("hosts"), dict) and "digest" in r["inputs"]
                and not r["urn"].endswith("-acceptance-run")]
        assert runs, f"stack {stack} has no tuning resource (inputs `hosts` and `digest`) in its state"
        return {host: h.get("vars") for r in runs for host, h in r["inputs"]["hosts"].items()}


@pytest.fixture(scope="module")
def takeover(base_checkout, tmp_path_factory) -> Iterator[Takeover]:
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    project = RailyardProject(tmp_path_factory.mktemp("nochange"))
    project.run_code_of(base_checkout)
    # The bytecode the old program leaves in the worktree shows which code the engine ran.
    project.env.pop("PYTHONDONTWRITEBYTECODE", None)
    nets = free_networks(2 * len(STACK_FILES))
    stacks = {}
    for i, name in enumerate(STACK_FILES):
        stack = f"nbc-{name}-{os.getpid()}"
        config = yaml.safe_load(paths.stack_file(name, base_checkout).read_text())["config"]
        config["railyard:fabric"]["management"]["cidr"] = nets[2 * i]
        config["railyard:fabric"]["storage"]["cidr"] = nets[2 * i + 1]
        project.write_stack(stack, config)
        stacks[name] = stack
    t = Takeover(project, stacks)
    try:
        t.each("up")
        # Only the program and its dynamic provider import these two, so their bytecode in the
        # worktree means the engine ran the base checkout's components and railyard.
        for pattern in ("components/__pycache__/cluster.*.pyc", "railyard/tuning/__pycache__/resource.*.pyc"):
            assert list(base_checkout.glob(pattern)), \
                f"the old up did not import {pattern.split('/__pycache__')[0]} from the base checkout {base_checkout}"
        t.old_state_tuning = {name: t.state_tuning(stack) for name, stack in stacks.items()}
        t.old_tune = t.tune_check()
        project.run_code_of(ROOT)
        yield t
    finally:
        project.cleanup()


def test_tune_hands_the_roles_the_same_variables_and_would_change_nothing_more(takeover):
    new = takeover.tune_check()
    diffs = []
    for name, old in takeover.old_tune.items():
        assert old["hosts"], f"`railyard tune` of the {name} copy found no hosts"
        diffs += differences(old["all"], new[name]["all"], f"tuning/{name}/all/")
        diffs += differences(old["hosts"], new[name]["hosts"], f"tuning/{name}/")
        diffs += differences(old["changes"], [c for c in new[name]["changes"] if not _lldp_change(name, c)],
                             f"tuning/{name}/check/")
    assert_unchanged(diffs, "the inventory `railyard tune --check` hands the roles, or what it would change,")


def test_preview_with_the_new_code_replaces_and_deletes_nothing(takeover):
    bad, changed = [], []
    for name, proc in takeover.each("preview", "--", "--json").items():
        out = proc.stdout
        preview = json.JSONDecoder().raw_decode(out[out.index("{"):])[0]
        assert preview.get("steps"), f"preview of the {name} copy listed no steps:\n{out[-3000:]}"
        steps = [s for s in preview.get("steps") or () if not _deliberate(name, s)]
        bad += [f"  {name}: {step}" for step in forbidden_steps(steps)]
        # Not even an update: a user's first preview after the change must show nothing to do.
        changed += [f"  {name}: {s['op']} {s['urn']}" for s in steps if s.get("op") != "same" and not allowed_update(s)]
        routed = {}
        for s in preview.get("steps") or ():
            if _routed_switch_step(name, s):
                routed[s["op"]] = routed.get(s["op"], 0) + 1
        if name == ROUTED and (routed.get("delete"), routed.get("create")) != (1, 1):
            changed += [f"  {name}: the spine's delete and the switches' create, once each, not {routed}"]
        added = sum(1 for s in preview.get("steps") or () if _acceptance_step(s))
        if added != 2:
            changed += [f"  {name}: the acceptance stage's component and run, created once each, not {added} steps"]
        deliberate: dict[str, int] = {}
        for s in preview.get("steps") or ():
            if _deliberate(name, s):
                deliberate[s["op"]] = deliberate.get(s["op"], 0) + 1
        guest = sum(1 for s in preview.get("steps") or () if _guest_step(s) and s["op"] == "create")
        if guest not in (0, 2) or (guest == 2) != (name == VIRTUAL):
            changed += [f"  {name}: guest tuning's component and run, created once each on the virtual stack, "
                        f"not {guest} steps"]
        summary = {op: n - deliberate.get(op, 0) for op, n in (preview.get("changeSummary") or {}).items()
                   if op != "same"}
        summary = {op: n for op, n in summary.items() if n}
        updates = sum(1 for s in steps if allowed_update(s))
        if set(summary) - {"update"} or summary.get("update", 0) != updates:
            changed += [f"  {name}: changeSummary {summary}"]
    assert not bad, "preview with the new code would replace or delete (an alias keeps a moved name or type):\n" \
                    + "\n".join(bad)
    assert not changed, "preview with the new code would change existing resources:\n" + "\n".join(changed)


def test_up_with_the_new_code_replaces_and_deletes_nothing(takeover):
    bad, summaries = [], {}
    procs = takeover.each("up", "--", "--json", check=False)
    for name, proc in procs.items():
        # `up --json` streams engine events, one JSON object a line; the CLI adds its node list.
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        steps = [e[k]["metadata"] for e in events for k in ("resourcePreEvent", "resOutputsEvent") if k in e]
        assert steps, f"up of the {name} copy reported no steps:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        summaries[name] = next((e["summaryEvent"] for e in events if "summaryEvent" in e), {})
        # The engine's summary counts the RoCE stack's one delete (the spine) and one create (the
        # switches); the step events say which resources they were.
        expected = {"delete": 1, "create": 1} if name == ROUTED else {}
        # and every stack the acceptance stage's component and run, the virtual one guest tuning's.
        guest = any(_guest_step(s) and s.get("op") == "create" for s in steps)
        expected["create"] = expected.get("create", 0) + 2 + (2 if guest else 0)
        merged = {s["urn"] for s in steps if s.get("op") == "delete" and merged_storage_step(s)}
        expected["delete"] = expected.get("delete", 0) + len(merged)
        changes = {op: n - expected.get(op, 0) for op, n in (summaries[name].get("resourceChanges") or {}).items()
                   if op in FORBIDDEN_OPS or op not in ("same", "update")}
        changes = {op: n for op, n in {**{op: -n for op, n in expected.items()}, **changes}.items() if n}
        bad += [f"  {name}: {s['op']} {s['urn']}" for s in steps
                if s.get("op") == "create" and not _deliberate(name, s)]
        steps = [s for s in steps if not _deliberate(name, s)]
        updates = [s for s in steps if s.get("op") == "update"]
        bad += [f"  {name}: update {s['urn']} ({', '.join(sorted(changed_inputs(s)))})"
                for s in updates if not allowed_update(s)]
        bad += [f"  {name}: {step}" for step in forbidden_steps(steps)]
        bad += [f"  {name}: summary {changes}"] if changes else []
    assert not bad, "up with the new code replaced, deleted or updated (an alias keeps a moved name or type):\n" \
                    + "\n".join(bad) + "\nthe engine's errors:\n" + "\n".join(
                        line[-1200:] for p in procs.values() for line in p.stdout.splitlines()
                        if '"severity":"error"' in line.replace(" ", ""))
    # Only now: a command that fails after the engine's work must not hide the steps above.
    for name, proc in procs.items():
        takeover.succeeded(name, "up", proc)
        assert summaries[name].get("result") == "succeeded", f"up of the {name} copy: {summaries[name]}"


def test_the_new_up_hands_the_tuning_the_same_role_variables(takeover):
    diffs = []
    for name, stack in takeover.stacks.items():
        diffs += differences(takeover.old_state_tuning[name], takeover.state_tuning(stack), f"tuning/{name}/")
    assert_unchanged(diffs, "the tuning resource's role variables in the state")


def test_down_with_the_new_code_leaves_nothing(takeover):
    takeover.each("down")
    left = {stack: takeover.project.leftovers(stack) for stack in takeover.stacks.values()}
    assert not any(left.values()), f"down left lab objects behind: {left}"
