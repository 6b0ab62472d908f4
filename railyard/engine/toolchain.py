"""The Pulumi engine, made available with no network but the package registries.

The CLI, Railyard's Python language host and the Kubernetes provider are built with `go build` from
the Go module proxy at the versions pinned below (go.mod/go.sum under tools/pulumi/), into a cache
outside the clone keyed on everything that goes into them. A complete build carries a manifest of
its files' digests, written last, so an interrupted or damaged build is detected and rebuilt. A
`pulumi` already on PATH within COMPATIBLE is used instead, as users with the official binaries have.

Run as `python -m railyard.engine.toolchain` (what `make` does) to ensure everything is in place.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from railyard import paths

PULUMI_VERSION = "3.274.1"
# Must equal the pulumi-kubernetes Python package pinned in pyproject.toml: the engine asks for
# exactly the version the package's pulumi-plugin.json names.
KUBERNETES_VERSION = "4.25.0"
# A pulumi on PATH in [min, max) is used as it is. The floor is the engine the pinned Python SDK
# (3.272.0) was released against; the ceiling keeps to the major version the SDK speaks.
COMPATIBLE = ((3, 272, 0), (4, 0, 0))
# Bumped when the recipe below changes in a way that changes the binaries.
RECIPE = 1

TOOLS = paths.PROJECT_ROOT / "tools" / "pulumi"
LDFLAGS_VERSION = "github.com/pulumi/pulumi/sdk/v3/go/common/version.Version"
K8S_VERSION_VAR = "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version"

CLI_FILES = ("pulumi", "pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python")
K8S_FILES = ("pulumi-resource-kubernetes",)

# Go's own messages for a module the proxy will not give us, and for a go.sum that lacks it.
_REFUSED = re.compile(r"(\S+@\S+): (?:reading|verifying|invalid version).*?(403 Forbidden|404 Not Found|410 Gone|not available)", re.S)
_MISSING_SUM = re.compile(r"missing go\.sum entry for module providing package (\S+)")
_SUM_MISMATCH = re.compile(r"verifying (\S+@\S+): checksum mismatch")


class ToolchainError(RuntimeError):
    """A toolchain problem, worded for the user; the CLI prints it without a traceback."""


@dataclass(frozen=True)
class Target:
    """One cached build: a set of binaries from one Go module directory."""

    name: str
    module_dir: Path
    files: tuple[str, ...]
    inputs: tuple[str, ...]
    pins: tuple[str, ...] = (PULUMI_VERSION, KUBERNETES_VERSION)
    """Versions that go into the binaries besides go.mod (their ldflags)."""

    def key(self, go_version: str) -> str:
        h = hashlib.sha256()
        for part in (f"recipe={RECIPE}", go_version, *self.pins):
            h.update(part.encode() + b"\0")
        for rel in self.inputs:
            h.update(rel.encode() + b"\0" + (self.module_dir / rel).read_bytes() + b"\0")
        return h.hexdigest()[:16]


CLI = Target("cli", TOOLS / "cli", CLI_FILES, ("go.mod", "go.sum", "pulumi-language-python/main.go"))
K8S = Target("kubernetes", TOOLS / "k8s", K8S_FILES, ("go.mod", "go.sum", "main.go"))
# The lab's object tier: a real S3-compatible server (SeaweedFS), built the same way.
SEAWEEDFS = Target("seaweedfs", paths.PROJECT_ROOT / "tools" / "seaweedfs", ("weed",), ("go.mod", "go.sum"))


@dataclass(frozen=True)
class Toolchain:
    pulumi: Path
    bin_dir: Path
    source: str  # "built" or "path"
    version: str


def log(msg: str) -> None:
    print(f"railyard: {msg}", file=sys.stderr, flush=True)


def parse_version(text: str) -> tuple[int, int, int] | None:
    m = re.search(r"v?(\d+)\.(\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def compatible(version: tuple[int, int, int] | None) -> bool:
    return version is not None and COMPATIBLE[0] <= version < COMPATIBLE[1]


def go_env() -> dict[str, str]:
    cache = paths.cache_root() / "go"
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(cache / "mod"),
        GOCACHE=str(cache / "build"),
        # -mod=readonly: go.sum is committed and complete; a build never edits it.
        GOFLAGS="-modcacherw -trimpath -mod=readonly -buildvcs=false",
        GOTOOLCHAIN="local",
        CGO_ENABLED="0",
    )
    return env


def go_version() -> str:
    go = shutil.which("go")
    if go is None:
        raise ToolchainError(
            "no Go toolchain on PATH. Railyard builds the Pulumi engine from the Go module proxy and "
            "needs Go >= 1.26 (Debian: apt-get install golang-go, or a Go release on PATH). With "
            f"internet access you can instead install the official pulumi {PULUMI_VERSION} "
            "(see README, 'Using the official Pulumi binaries')."
        )
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise ToolchainError(f"`go version` failed: {out.stderr.strip()}")
    return out.stdout.strip()


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(build_dir: Path, files: tuple[str, ...]) -> str | None:
    """None when build_dir holds a complete build of `files`, else what is wrong with it."""
    manifest = build_dir / "MANIFEST.json"
    if not manifest.is_file():
        return "no manifest (an interrupted build)"
    try:
        recorded = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return "unreadable manifest"
    for name in files:
        path = build_dir / name
        if not path.is_file() or not os.access(path, os.X_OK):
            return f"{name} is missing or not executable"
        entry = recorded.get(name) or {}
        if path.stat().st_size != entry.get("size") or _digest(path) != entry.get("sha256"):
            return f"{name} does not match its manifest (half-written or changed)"
    return None


def run_go(args: list[str], cwd: Path, what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a go command with a heartbeat (cold builds take minutes) and turn failures into advice."""
    start = time.monotonic()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(30):
            log(f"  still {what} ({time.monotonic() - start:.0f}s)")

    t = threading.Thread(target=heartbeat, daemon=True)
    t.start()
    try:
        proc = subprocess.run(["go", *args], cwd=cwd, env=go_env(), capture_output=True, text=True, check=False)
    finally:
        done.set()
    if check and proc.returncode != 0:
        raise ToolchainError(explain_go_failure(proc.stderr, what))
    return proc


def explain_go_failure(stderr: str, what: str) -> str:
    m = _REFUSED.search(stderr)
    if m:
        return (
            f"{what} failed: the Go module proxy refused {m[1]} ({m[2]}). The pins in "
            "tools/pulumi/*/go.mod must name versions the proxy serves; see docs/engine.md for the "
            "fallback versions."
        )
    m = _SUM_MISMATCH.search(stderr)
    if m:
        return (
            f"{what} failed: {m[1]} as downloaded does not match go.sum (checksum mismatch). The module "
            "proxy served different content for a pinned version, or go.sum was edited; do not build from it."
        )
    m = _MISSING_SUM.search(stderr)
    if m:
        return (
            f"{what} failed: go.sum lacks an entry for {m[1]}. Refresh it on a machine that reaches "
            "the Go module proxy with `make -C tools/pulumi tidy` and commit go.sum."
        )
    tail = "\n".join(stderr.strip().splitlines()[-15:])
    return f"{what} failed:\n{tail}"


def module_dir(main_module: Path, module: str) -> Path:
    """The directory of `module` (at the version main_module's go.mod requires), downloading it first.

    `go list -m -f {{.Dir}}` prints an empty line for a module not yet in the module cache, which
    turned into a relative path on every fresh machine; `go mod download -json` fetches it (checked
    against go.sum) and names the directory, or says in its Error field why it cannot.
    """
    what = f"locating {module}"
    proc = run_go(["mod", "download", "-json", module], main_module, what, check=False)
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = None
    if not isinstance(info, dict):
        info = {}
    if info.get("Error") or proc.returncode != 0:
        raise ToolchainError(explain_go_failure(f"{info.get('Error', '')}\n{proc.stderr}", what))
    directory = info.get("Dir")
    if not directory or not Path(directory).is_absolute() or not Path(directory).is_dir():
        raise ToolchainError(f"{what} failed: `go mod download -json` gave no module directory ({proc.stdout.strip()[:200]!r})")
    return Path(directory)


def _build_cli(out: Path) -> None:
    ld = f"-s -w -X {LDFLAGS_VERSION}=v{PULUMI_VERSION}"
    for pkg, name in (
        ("github.com/pulumi/pulumi/pkg/v3/cmd/pulumi", "pulumi"),
        ("./pulumi-language-python", "pulumi-language-python"),
    ):
        log(f"  go build {name}")
        run_go(["build", "-tags", "osusergo,grpcnotrace", "-ldflags", ld, "-o", str(out / name), pkg],
                CLI.module_dir, f"building {name}")
    sdk = module_dir(CLI.module_dir, "github.com/pulumi/pulumi/sdk/v3")
    # The SDK module ships both Python shims; module-cache files are read-only, so copy with modes.
    for src in (sdk / "python/cmd/pulumi-language-python-exec", sdk / "python/dist/pulumi-resource-pulumi-python"):
        dest = out / src.name
        shutil.copyfile(src, dest)
        dest.chmod(0o755)


def _build_k8s(out: Path) -> None:
    provider = module_dir(K8S.module_dir, "github.com/pulumi/pulumi-kubernetes/provider/v4") / "cmd/pulumi-resource-kubernetes"
    schema = json.loads((provider / "schema.json").read_text())
    schema["version"] = KUBERNETES_VERSION  # what upstream's generate step does
    (K8S.module_dir / "schema.json").write_text(json.dumps(schema, separators=(",", ":")))
    mapping = json.loads((provider / "terraform-mapping.json").read_text())
    (K8S.module_dir / "terraform-mapping.json").write_text(json.dumps(mapping, separators=(",", ":")))
    log("  go build pulumi-resource-kubernetes")
    run_go(["build", "-ldflags", f"-s -w -X {K8S_VERSION_VAR}={KUBERNETES_VERSION}",
             "-o", str(out / "pulumi-resource-kubernetes"), "."], K8S.module_dir, "building pulumi-resource-kubernetes")


def _build_seaweedfs(out: Path) -> None:
    log("  go build weed (SeaweedFS)")
    run_go(["build", "-ldflags", "-s -w", "-o", str(out / "weed"), "github.com/seaweedfs/seaweedfs/weed"],
            SEAWEEDFS.module_dir, "building weed")


_BUILDERS: dict[str, Callable[[Path], None]] = {
    "cli": _build_cli, "kubernetes": _build_k8s, "seaweedfs": _build_seaweedfs,
}


def ensure_built(target: Target, go: str, build: Callable[[Path], None] | None = None) -> Path:
    """The cache directory holding a verified build of `target`, building it if needed (with
    `build`, else the engine's own builder of that name)."""
    build_dir = _build_dir(target, go)
    problem = verify(build_dir, target.files) if build_dir.exists() else "not built yet"
    if problem is None:
        return build_dir
    log(f"building {target.name} ({problem}); a cold build of it takes minutes on 2 cores (docs/engine.md)")
    start = time.monotonic()
    tmp = build_dir.with_name(f"{build_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        (build or _BUILDERS[target.name])(tmp)
        manifest = {
            "target": target.name,
            "files": {n: {"size": (tmp / n).stat().st_size, "sha256": _digest(tmp / n)} for n in target.files},
        }
        (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=2))
        shutil.rmtree(build_dir, ignore_errors=True)
        tmp.rename(build_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"built {target.name} in {time.monotonic() - start:.0f}s -> {build_dir}")
    return build_dir


def link(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(src)
    tmp.replace(dest)


def ambient_pulumi(root: Path) -> Path | None:
    """A pulumi on PATH (not our own link) whose version is in the compatible range."""
    ours = paths.bin_dir(root).resolve()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or Path(d).resolve() == ours:
            continue
        cand = Path(d) / "pulumi"
        if cand.is_file() and os.access(cand, os.X_OK):
            out = subprocess.run([str(cand), "version"], capture_output=True, text=True, check=False)
            has_host = (cand.parent / "pulumi-language-python").exists() or shutil.which("pulumi-language-python")
            if out.returncode == 0 and compatible(parse_version(out.stdout)) and has_host:
                return cand
            return None  # the first pulumi on PATH is what a shell would run; don't look past it
    return None


def install_plugin(build_dir: Path, root: Path) -> None:
    """Put the provider in PULUMI_HOME's plugin cache, where the engine looks for an exact version."""
    plugin_dir = paths.pulumi_home(root) / "plugins" / f"resource-kubernetes-v{KUBERNETES_VERSION}"
    plugin_dir.mkdir(parents=True, exist_ok=True)
    link(build_dir / "pulumi-resource-kubernetes", plugin_dir / "pulumi-resource-kubernetes")


def ensure(root: Path | None = None, allow_ambient: bool = True, everything: bool = True) -> Toolchain:
    """The engine in place; with `everything`, also the parts only some stacks use (the Kubernetes
    provider, the lab's S3 server), which `make test` and `make bench` need and the first command
    of a stack that uses one otherwise builds (ensure_kubernetes, ensure_weed): a first `make up`
    of the default stack does not wait minutes for a provider it never starts."""
    root = root or paths.project_root()
    bindir = paths.bin_dir(root)
    ambient = ambient_pulumi(root) if allow_ambient else None
    if ambient is not None:
        link(ambient, bindir / "pulumi")
        source, pulumi = "path", ambient
    else:
        cli = ensure_built(CLI, go_version())
        for name in CLI_FILES:
            link(cli / name, bindir / name)
        source, pulumi = "built", cli / "pulumi"
    if everything:
        ensure_kubernetes(root)
        ensure_weed(root)
    # The project-local layout (all git-ignored); the file backend directory must exist for
    # Pulumi.yaml's relative backend URL to open.
    for d in (paths.state_dir(root), paths.local_dir(root) / "lab", paths.local_dir(root) / "runs", paths.bench_dir(root)):
        d.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([str(bindir / "pulumi"), "version"], capture_output=True, text=True,
                         env=engine_env(root), check=False)
    if out.returncode != 0:
        raise ToolchainError(f"{bindir / 'pulumi'} does not run: {out.stderr.strip()}")
    return Toolchain(pulumi=pulumi, bin_dir=bindir, source=source, version=out.stdout.strip())


def ensure_kubernetes(root: Path | None = None) -> None:
    """The Kubernetes provider in PULUMI_HOME: built (minutes, once per pin) where it is not yet,
    with ensure_built's progress lines. One the user installed there (the official plugin) is kept."""
    root = root or paths.project_root()
    plugin = _plugin_path(root)
    if plugin.exists() and not _in_cache(plugin):
        return
    go = go_version()
    if plugin.exists() and plugin.resolve() == _build_dir(K8S, go) / K8S_FILES[0]:
        return  # already the current pin's build: no digest of 100 MB on every stack command
    install_plugin(ensure_built(K8S, go), root)


def ensure_weed(root: Path | None = None) -> Path:
    """The lab's S3 server (SeaweedFS's weed) at .railyard/bin/weed, built where it is not yet."""
    root = root or paths.project_root()
    weed = paths.bin_dir(root) / "weed"
    go = go_version()
    if not (weed.exists() and weed.resolve() == _build_dir(SEAWEEDFS, go) / "weed"):
        link(ensure_built(SEAWEEDFS, go) / "weed", weed)
    return weed


def _build_dir(target: Target, go: str) -> Path:
    return paths.cache_root() / "bin" / f"{target.name}-{target.key(go)}"


def _in_cache(path: Path) -> bool:
    return path.resolve().is_relative_to(paths.cache_root().resolve())


def _plugin_path(root: Path) -> Path:
    return paths.pulumi_home(root) / "plugins" / f"resource-kubernetes-v{KUBERNETES_VERSION}" / "pulumi-resource-kubernetes"


def engine_env(root: Path | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every pulumi command runs in; `railyard env` prints the same settings."""
    root = root or paths.project_root()
    env = dict(os.environ if base is None else base)
    env.update(engine_settings(root, env))
    return env


def engine_settings(root: Path, env: dict[str, str]) -> dict[str, str]:
    settings = {
        "PATH": f"{paths.bin_dir(root)}{os.pathsep}{paths.PROJECT_ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "PULUMI_HOME": str(paths.pulumi_home(root)),
        # Never ask Pulumi Cloud for a newer version, never download a plugin: offline by design.
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_SKIP_CONFIRMATIONS": "true",
    }
    # A team backend given by the user wins over the project's file backend.
    if "PULUMI_BACKEND_URL" not in env:
        settings["PULUMI_BACKEND_URL"] = f"file://{paths.state_dir(root)}"
    # Lab stacks use an empty passphrase (their encryptionsalt is committed); any other stack's
    # owner sets PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE.
    if "PULUMI_CONFIG_PASSPHRASE" not in env and "PULUMI_CONFIG_PASSPHRASE_FILE" not in env:
        settings["PULUMI_CONFIG_PASSPHRASE"] = ""
    return settings


def command_settings(args: Sequence[str]) -> dict[str, str]:
    """Settings for one pulumi command, on top of engine_settings."""
    if args and args[0] == "preview":
        # The engine keeps a snapshot manager even for a preview and, after every step, serializes
        # the whole deployment only to hand it to a persister that discards it: quadratic in the
        # number of resources (most of a 448-node preview's engine CPU and memory, see
        # docs/benchmarks.md). A preview persists nothing, so saving once at the end loses nothing.
        # Never for up or destroy: there the checkpoints are what a killed run recovers from.
        return {"PULUMI_SKIP_CHECKPOINTS": "true"}
    return {}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m railyard.engine.toolchain")
    parser.add_argument("--no-ambient", action="store_true", help="build even if a compatible pulumi is on PATH")
    parser.add_argument("--engine-only", action="store_true",
                        help="only the engine; a stack's first command builds the Kubernetes provider or weed "
                             "where it uses them")
    args = parser.parse_args(argv)
    try:
        tc = ensure(allow_ambient=not args.no_ambient, everything=not args.engine_only)
    except ToolchainError as exc:
        log(f"error: {exc}")
        return 1
    log(f"pulumi {tc.version} ({tc.source}: {tc.pulumi}); linked at {tc.bin_dir / 'pulumi'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
