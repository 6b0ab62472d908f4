"""A copy of the project that the `railyard` CLI itself runs in, with a backend of its own.

`railyard up|down|review|reap` find their project through RAILYARD_ROOT, so a test points that at
a directory holding the program (links to __main__.py and components/), stack files of its own,
and `.railyard/bin` and `.railyard/pulumi-home` linked to the checkout's toolchain. Its lab runtime
directories then live under the copy too (paths.lab_dir follows RAILYARD_ROOT), and the user's
`lab` stack and `.railyard/state` are never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import yaml

from railyard import paths
from railyard.bench import stack_project
from railyard.bench.stack_project import lab_config, project_copy  # noqa: F401 (lab_config: for the tests)
from railyard.drivers.lab import gc
from railyard.drivers.lab.errors import LabError
from railyard.engine.toolchain import engine_env

ROOT = paths.PROJECT_ROOT


@contextlib.contextmanager
def stack_up(base: Path, stack: str, config_of, *, timeout: float = 900):
    """A lab stack made fresh (and its leftovers from an earlier run collected) on management and
    storage networks of its own (config_of(mgmt, storage) gives its config), brought up, and
    destroyed after: the StackProject, with its config as `config`."""
    from .stack_project import StackProject

    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        raise AssertionError("the Pulumi toolchain is not set up: run `make toolchain`")
    gc.destroy_all(stack)
    (mgmt,) = free_networks(1, prefix=20)
    p = StackProject(base, stack, config_of(mgmt, STORAGE))
    p.config = config_of(mgmt, STORAGE)
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    try:
        p.pulumi("up", "--yes", "--skip-preview", timeout=timeout)
        yield p
    finally:
        p.pulumi("destroy", "--yes", "--skip-preview", check=False)
        gc.destroy_all(stack)


@contextlib.contextmanager
def worktree_of(commit: str, path: Path, why: str):
    """A git worktree of `commit` at `path` whose `railyard` is its own under code_env(path): the
    code a user had at that commit, for tests of taking its stacks over (`why` says which issue
    starts there)."""
    def git(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["git", "-C", str(ROOT), *args], text=True, capture_output=True, check=False)
        assert not check or proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
        return proc

    if git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
        raise AssertionError(f"commit {commit} ({why}) is not in this clone's history; the test needs a full "
                             "clone (git fetch --unshallow)")
    git("worktree", "add", "--detach", str(path), commit)
    try:
        # A checkout's own virtualenv: the engine's PATH and the orphan check look for
        # <checkout>/.venv/bin (ansible-playbook lives there).
        (path / ".venv").symlink_to(ROOT / ".venv")
        # From a directory holding no railyard: `python -c` puts its working directory first on
        # sys.path, so run from the worktree itself it would find the old code without PYTHONPATH.
        where = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c",
                                "import os, railyard; print(os.path.realpath(railyard.__file__))"],
                               cwd=path.parent, env=code_env(path), text=True, capture_output=True,
                               check=True).stdout.strip()
        assert Path(where).is_relative_to(path.resolve()), \
            f"with PYTHONPATH={path} the virtualenv still imports railyard from {where}"
        yield path
    finally:
        git("worktree", "remove", "--force", str(path), check=False)


def code_env(checkout: Path) -> dict[str, str]:
    """The environment that makes `railyard` the checkout's own (RailyardProject.run_code_of)."""
    env = dict(os.environ)
    if checkout != ROOT:
        env["PYTHONPATH"] = str(checkout)
    return env


# The lab tests' management networks (the default lab takes 198.18.0.0/20, fresh-check and the
# benchmarks 198.18.64.0/18). Several test workers pick from it at once (stack_project.free_networks
# keeps them apart).
TEST_POOL = "198.18.128.0/17"
# A storage network is never routed on the host (it lives in the stack's own namespaces), so every
# test stack may use the same one, and the pool's blocks stay for management networks.
STORAGE = "198.18.48.0/20"
# The top /24 of the lab range under the compute networks: a lab control plane's service range
# (control_plane.cluster_ranges) falls there; no test routes it.
KEPT_FREE = {"198.18.255.0/24"}


def free_networks(count: int, prefix: int = 24, taken: set[str] | None = None) -> list[str]:
    """`count` /prefix networks from TEST_POOL that no host route overlaps nor another worker has
    just picked."""
    return stack_project.free_networks(TEST_POOL, count, prefix, {*(taken or ()), *KEPT_FREE})


class RailyardProject:
    def __init__(self, base: Path, backend_url: str | None = None, env: dict[str, str] | None = None):
        self.base = base
        self.dir = project_copy(base / "project")
        if backend_url is None:
            (base / "state").mkdir()
            backend_url = f"file://{base / 'state'}"
        self.env = {**os.environ, **(env or {}), "RAILYARD_ROOT": str(self.dir),
                    "PULUMI_BACKEND_URL": backend_url, "PULUMI_CONFIG_PASSPHRASE": ""}
        self.stacks: list[str] = []

    def run_code_of(self, checkout: Path) -> None:
        """Run the program, its components and the `railyard` CLI from `checkout` (another git
        worktree of this repository) from now on, against the same copy, backend and lab objects.
        The virtualenv has this checkout installed editable, but its finder comes after
        PYTHONPATH, so PYTHONPATH=checkout makes `railyard` the checkout's own; the copy's links
        decide which `__main__.py` and `components` the engine runs."""
        for name in ("__main__.py", "components"):
            (self.dir / name).unlink()
            os.symlink(checkout / name, self.dir / name)
        if Path(checkout).resolve() != ROOT:
            self.env["PYTHONPATH"] = str(checkout)
        elif "PYTHONPATH" in os.environ:
            self.env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        else:
            self.env.pop("PYTHONPATH", None)

    def stack_file(self, stack: str) -> Path:
        return paths.stack_file(stack, self.dir)

    def config_of(self, stack: str) -> dict:
        return yaml.safe_load(self.stack_file(stack).read_text())["config"]

    def write_stack(self, stack: str, config: dict) -> None:
        """Write the stack's config, keeping what the engine added (its encryptionsalt)."""
        path = self.stack_file(stack)
        doc = yaml.safe_load(path.read_text()) if path.exists() else {}
        doc["config"] = config
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        if stack not in self.stacks:
            self.stacks.append(stack)

    def railyard(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(ROOT / ".venv" / "bin" / "railyard"), *args], cwd=self.dir, env=self.env,
                              text=True, capture_output=True, timeout=timeout, check=False)
        if check:
            assert proc.returncode == 0, f"railyard {' '.join(args)} exited {proc.returncode}:\n" \
                                         f"{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
        return proc

    def pulumi(self, *args: str, stack: str | None = None, check: bool = True,
               timeout: float = 900) -> subprocess.CompletedProcess[str]:
        argv = [str(paths.bin_dir(ROOT) / "pulumi"), *args, *(["--stack", stack] if stack else []), "--non-interactive"]
        proc = subprocess.run(argv, cwd=self.dir, env=engine_env(self.dir, self.env), text=True, capture_output=True,
                              timeout=timeout, check=False)
        if check:
            assert proc.returncode == 0, f"pulumi {' '.join(args)} exited {proc.returncode}:\n" \
                                         f"{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
        return proc

    def stack_names(self) -> list[str]:
        return sorted(s["name"] for s in json.loads(self.pulumi("stack", "ls", "--json").stdout))

    def tags(self, stack: str) -> dict[str, str]:
        return json.loads(self.pulumi("stack", "tag", "ls", "--json", stack=stack).stdout)

    def leftovers(self, stack: str) -> dict:
        """The stack's lab objects still on this machine (empty lists when none)."""
        inv = gc.inventory(stack, self.dir)
        return {k: v for k, v in inv.items() if k != "stack" and v}

    def cleanup(self) -> None:
        """Whatever a failed test left: unprotect, destroy, then remove every lab object by name."""
        for stack in self.stacks:
            if self.pulumi("stack", "select", stack, check=False).returncode == 0:
                self.pulumi("state", "unprotect", "--all", "--yes", stack=stack, check=False)
                self.pulumi("destroy", "--yes", "--skip-preview", stack=stack, check=False)
            try:
                gc.destroy_all(stack, self.dir)
            except LabError as exc:
                if "belong to" not in str(exc):  # another checkout's objects of that name stay theirs
                    raise
