"""`railyard lab gc --all` on the real engine, in two project copies that each have a live stack.

Copy A also has a stack whose state was lost (`pulumi stack rm --force` leaves its lab objects
behind) and whose name is hashed into its tag. Each copy's `--all` may remove only what carries
its own checkout's marker and no state knows: A's lost stack. Both live stacks survive both runs,
and each run lists the other copy's stack as belonging elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from railyard import paths
from railyard.drivers.lab import names
from tests.lab.railyard_project import RailyardProject, free_networks, lab_config

ROOT = paths.PROJECT_ROOT
KEEP_A, LOST_A, KEEP_B = "gcak", "gc-a-lost", "gcbk"


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    assert names.stack_tag(LOST_A) != LOST_A, "the lost stack's name must be one that is hashed into its tag"
    base = tmp_path_factory.mktemp("gcall")
    a, b = RailyardProject(base / "a"), RailyardProject(base / "b")
    nets = free_networks(6)
    a.write_stack(KEEP_A, lab_config(1, nets[0], nets[1]))
    a.write_stack(LOST_A, lab_config(1, nets[2], nets[3]))
    b.write_stack(KEEP_B, lab_config(1, nets[4], nets[5]))
    try:
        jobs = [(a, KEEP_A), (a, LOST_A), (b, KEEP_B)]
        with ThreadPoolExecutor(len(jobs)) as pool:
            ups = list(pool.map(lambda j: j[0].railyard("up", "--stack", j[1], check=False), jobs))
        for (_, stack), proc in zip(jobs, ups):
            assert proc.returncode == 0, f"up {stack}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        a.pulumi("stack", "rm", "--force", "--yes", "--preserve-config", stack=LOST_A)  # the state is lost
        assert a.leftovers(LOST_A)["netns"], "the lost stack's objects must still be there"
        yield a, b
    finally:
        try:
            a.cleanup()
        finally:
            b.cleanup()


def steady(read):
    """A reading of lab objects that two reads 0.2 s apart agree on. A live node's own processes
    start short-lived children (the SR-IOV agent's `ip link show` at each rescan), which one
    snapshot may catch and the next not; a process gc killed is gone from both."""
    last = read()
    for _ in range(20):
        time.sleep(0.2)
        now = read()
        if now == last:
            return now
        last = now
    return last


def live(a: RailyardProject, b: RailyardProject) -> dict:
    """The objects of both copies' live stacks."""
    return {KEEP_A: a.leftovers(KEEP_A), KEEP_B: b.leftovers(KEEP_B)}


def changes(before: dict, after: dict) -> str:
    """What differs between two {stack: leftovers} readings, item by item (a process by its pid
    and command line), so that a failure says which object came or went."""
    def items(x: dict, stack: str, key: str) -> set[str]:
        return {repr((v["pid"], v["argv"], v["owner"])) if key == "processes" else repr(v)
                for v in x.get(stack, {}).get(key, [])}

    out = []
    for stack in sorted(set(before) | set(after)):
        for key in sorted(set(before.get(stack, {})) | set(after.get(stack, {}))):
            gone, came = items(before, stack, key) - items(after, stack, key), items(after, stack, key) - items(before, stack, key)
            out += [f"  {stack} {key}: gone {sorted(gone)}, came {sorted(came)}"] if gone or came else []
    return "\n".join(out)


def test_dry_run_lists_the_lost_stack_and_the_other_checkout_and_removes_nothing(copies):
    a, b = copies

    def reading():
        return {**live(a, b), LOST_A: a.leftovers(LOST_A)}

    before = steady(reading)
    out = a.railyard("lab", "gc", "--all", "--dry-run").stdout
    lines = {line.split("(tag")[0].strip(): line for line in out.splitlines() if line.startswith("  stack ")}
    assert "no state in the backend; would remove" in lines[f"stack {LOST_A}"], out
    assert names.node_ns(LOST_A, "gpu-0") in out and names.host_link(LOST_A) in out
    assert "would remove nothing" in lines[f"stack {KEEP_A}"], out
    assert f"tag {names.stack_tag(KEEP_B)}: belongs elsewhere" in out and str(b.dir) in out, out
    after = steady(reading)
    assert after == before, "the dry run changed the machine:\n" + changes(before, after)


def test_all_removes_only_what_no_state_of_its_own_checkout_knows(copies):
    a, b = copies
    before = steady(lambda: live(a, b))
    out = a.railyard("lab", "gc", "--all").stdout
    assert f"stack {LOST_A} (tag {names.stack_tag(LOST_A)}): no state in the backend; removed" in out, out
    assert a.leftovers(LOST_A) == {}, "every object of the lost stack: namespaces, links, processes, mounts, dirs"
    assert not paths.lab_dir(LOST_A, a.dir).exists()
    after = steady(lambda: live(a, b))
    assert after == before, "a live stack's objects changed:\n" + changes(before, after)


def test_the_other_checkouts_all_leaves_this_ones_live_stack_intact(copies):
    a, b = copies
    before = steady(lambda: live(a, b))
    out = b.railyard("lab", "gc", "--all").stdout
    assert f"tag {KEEP_A}: belongs elsewhere" in out and str(a.dir) in out, out
    after = steady(lambda: live(a, b))
    assert after == before, "a live stack's objects changed:\n" + changes(before, after)
    # Both live stacks still answer over SSH as their state says.
    for project, stack in ((a, KEEP_A), (b, KEEP_B)):
        proc = project.railyard("lab", "ssh", "--stack", stack, "gpu-0", "hostname")
        assert proc.stdout.strip() == "gpu-0"


def test_the_main_checkout_lists_both_copies_as_elsewhere(copies):
    a, _ = copies
    env = {k: v for k, v in a.env.items() if k not in ("RAILYARD_ROOT", "PULUMI_BACKEND_URL")}
    env["PULUMI_BACKEND_URL"] = f"file://{a.base / 'main-state'}"  # an empty backend: no stack of ours is in it
    (a.base / "main-state").mkdir(exist_ok=True)
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "railyard"), "lab", "gc", "--all", "--dry-run"], cwd=ROOT,
                          env=env, text=True, capture_output=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    for stack in (KEEP_A, "gcbk"):
        assert f"tag {names.stack_tag(stack)}: belongs elsewhere" in proc.stdout, proc.stdout
    assert os.path.isdir(paths.lab_dir(KEEP_A, a.dir))


def test_gc_of_a_named_stack_of_another_checkout_is_refused(copies):
    a, b = copies
    keep_b = b.leftovers(KEEP_B)
    proc = a.railyard("lab", "gc", "--stack", KEEP_B, check=False)
    assert proc.returncode == 1 and str(b.dir) in proc.stderr and "Nothing was removed" in proc.stderr, proc.stderr
    assert b.leftovers(KEEP_B) == keep_b


def test_up_of_a_stack_another_checkout_owns_is_refused_not_adopted(copies):
    a, b = copies
    keep_b = b.leftovers(KEEP_B)
    a.write_stack(KEEP_B, b.config_of(KEEP_B))
    proc = a.railyard("up", "--stack", KEEP_B, check=False)
    assert proc.returncode != 0 and "belongs to" in proc.stdout + proc.stderr
    assert b.leftovers(KEEP_B)["netns"] == keep_b["netns"]
    b_ssh = b.railyard("lab", "ssh", "--stack", KEEP_B, "gpu-0", "hostname")
    assert b_ssh.stdout.strip() == "gpu-0"
