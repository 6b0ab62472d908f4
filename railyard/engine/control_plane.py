"""A Kubernetes control plane's binaries and CRDs, built offline like the engine, only for stacks
that ask for one.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and the Kueue controller are
built with `go build` from the Go module proxy, at the versions pinned in tools/kubernetes/*/go.mod
(one module per set of `k8s.io/*` versions: the control plane, etcd, kwok, Kueue), into the cache
outside the clone (railyard.engine.toolchain.ensure_built). Binaries a user already has are used
instead: `KUBEBUILDER_ASSETS` (the envtest convention) supplies etcd and kube-apiserver, and
`RAILYARD_KUBERNETES_BIN` names a directory that may supply any of them.

The CRDs come from the same pinned modules, read from the module cache, never committed: Kueue's
config/components/crd/bases, the SR-IOV Network Operator's config/crd/bases, and the
NetworkAttachmentDefinition CRD of the network-attachment-definition-client the operator requires.

Run `python -m railyard.engine.control_plane` to build (or find) them all; `railyard up` does so
for a lab stack with railyard:kubernetes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from railyard import paths
from railyard.engine.toolchain import Target, ToolchainError, ensure_built, go_version, link, log, module_dir, run_go

TOOLS = paths.PROJECT_ROOT / "tools" / "kubernetes"
# Must equal the k8s.io/kubernetes version tools/kubernetes/control-plane/go.mod requires.
KUBERNETES_RELEASE = "1.37.2"
ETCD_VERSION = "3.6.16"
KWOK_VERSION = "0.8.0"
KUEUE_VERSION = "0.17.0"
SRIOV_OPERATOR_VERSION = "1.6.0"

_SOURCES = ("go.mod", "go.sum")
CONTROL_PLANE = Target("kube-control-plane", TOOLS / "control-plane",
                       ("kube-apiserver", "kube-controller-manager", "kube-scheduler"), _SOURCES,
                       pins=(KUBERNETES_RELEASE,))
ETCD = Target("etcd", TOOLS / "etcd", ("etcd",), _SOURCES, pins=(ETCD_VERSION,))
KWOK = Target("kwok", TOOLS / "kwok", ("kwok",), _SOURCES, pins=(KWOK_VERSION,))
KUEUE = Target("kueue", TOOLS / "kueue", ("kueue",), _SOURCES, pins=(KUEUE_VERSION,))
# The operator's own NetworkAttachmentDefinition rendering, which tests compare the model's with.
SRIOV_RENDER = Target("sriov-render", TOOLS / "sriov", ("sriov-render",), ("go.mod", "go.sum", "main.go"),
                      pins=(SRIOV_OPERATOR_VERSION,))

TARGETS = (ETCD, CONTROL_PLANE, KWOK, KUEUE)
BINARIES = tuple(name for t in TARGETS for name in t.files)
ENVTEST = ("etcd", "kube-apiserver")
"""What KUBEBUILDER_ASSETS supplies (it has kubectl too, which Railyard never runs)."""
ASSETS_ENV = "KUBEBUILDER_ASSETS"
BIN_ENV = "RAILYARD_KUBERNETES_BIN"


def _version_ldflags() -> str:
    # Without them the binaries say v0.0.0-master, and clients (pulumi-kubernetes among them)
    # read the server's version.
    major, minor, _ = KUBERNETES_RELEASE.split(".")
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion=v{KUBERNETES_RELEASE}", f"-X {pkg}.gitMajor={major}",
                  f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"]
    return " ".join(flags)


def _build(target: Target, packages: tuple[str, ...], ldflags: str = "-s -w"):
    def build(out: Path) -> None:
        log(f"  go build {' '.join(target.files)}")
        # One package: name its binary (Go would call etcd's `v3`); several: Go names each.
        dest = str(out / target.files[0]) if len(packages) == 1 else f"{out}/"
        run_go(["build", "-ldflags", ldflags, "-o", dest, *packages], target.module_dir,
                f"building {', '.join(target.files)}")
    return build


BUILDERS = {
    CONTROL_PLANE.name: _build(CONTROL_PLANE, tuple(f"k8s.io/kubernetes/cmd/{n}" for n in CONTROL_PLANE.files),
                               _version_ldflags()),
    ETCD.name: _build(ETCD, ("go.etcd.io/etcd/server/v3",)),
    KWOK.name: _build(KWOK, ("sigs.k8s.io/kwok/cmd/kwok",)),
    KUEUE.name: _build(KUEUE, ("sigs.k8s.io/kueue/cmd/kueue",)),
    SRIOV_RENDER.name: _build(SRIOV_RENDER, (".",)),
}


def supplied(name: str, env: Mapping[str, str] | None = None) -> Path | None:
    """The user's own binary `name`, from RAILYARD_KUBERNETES_BIN or (etcd, kube-apiserver)
    KUBEBUILDER_ASSETS; None when neither has it. A directory named but lacking it is not an
    error: the rest are built."""
    env = os.environ if env is None else env
    dirs = [env.get(BIN_ENV)] + ([env.get(ASSETS_ENV)] if name in ENVTEST else [])
    for d in dirs:
        if d:
            cand = Path(d).expanduser() / name
            if cand.is_file() and os.access(cand, os.X_OK):
                return cand
    return None


def ensure(root: Path | None = None, env: dict[str, str] | None = None) -> dict[str, Path]:
    """Every control-plane binary, linked at .railyard/bin/<name>: the user's where supplied, else
    built (minutes, once per pin). Returns name -> the file the link points at."""
    root = root or paths.project_root()
    bindir = paths.bin_dir(root)
    found: dict[str, Path] = {}
    go = None
    for target in TARGETS:
        theirs = {n: supplied(n, env) for n in target.files}
        if all(theirs.values()):
            found.update({n: p for n, p in theirs.items() if p is not None})
            continue
        go = go or go_version()
        built = ensure_built(target, go, BUILDERS[target.name])
        for n in target.files:
            found[n] = theirs[n] or built / n
    for name, path in found.items():
        link(path.resolve(), bindir / name)
    return found


def binary(name: str, root: Path | None = None) -> Path:
    """Where the lab runs `name` from; ToolchainError naming the command that puts it there."""
    path = paths.bin_dir(root) / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ToolchainError(f"{path} is missing: a stack with railyard:kubernetes needs the control plane's "
                             "binaries, which `railyard up` builds (or run python -m railyard.engine.control_plane)")
    return path


def sriov_render() -> Path:
    """The operator's renderer (tests only)."""
    return ensure_built(SRIOV_RENDER, go_version(), BUILDERS[SRIOV_RENDER.name]) / "sriov-render"


# --- CRDs -----------------------------------------------------------------------------------------

def kwok_module() -> Path:
    """The kwok module: its kustomize/stage holds the stages the lab's kwok runs with."""
    return module_dir(KWOK.module_dir, "sigs.k8s.io/kwok")


def kueue_module() -> Path:
    return module_dir(KUEUE.module_dir, "sigs.k8s.io/kueue")


def sriov_module() -> Path:
    return module_dir(SRIOV_RENDER.module_dir, "github.com/k8snetworkplumbingwg/sriov-network-operator")


def crd_files() -> dict[str, list[Path]]:
    """The CRDs a Railyard cluster needs, by what they belong to, from the pinned modules."""
    nad = module_dir(SRIOV_RENDER.module_dir, "github.com/k8snetworkplumbingwg/network-attachment-definition-client")
    return {
        "kueue": sorted((kueue_module() / "config" / "components" / "crd" / "bases").glob("*.yaml")),
        "sriov-network-operator": sorted((sriov_module() / "config" / "crd" / "bases").glob("*.yaml")),
        "network-attachment-definition": [nad / "artifacts" / "networks-crd.yaml"],
    }


def versions(found: dict[str, Path]) -> dict[str, str]:
    """What each binary says it is (`--version`; the Kueue controller has no such flag), for the log."""
    out = {}
    for name, path in found.items():
        if name == "kueue":
            out[name] = f"kueue v{KUEUE_VERSION} (pinned; it prints no version)"
            continue
        p = subprocess.run([str(path), "--version"], capture_output=True, text=True, check=False, timeout=30)
        text = (p.stdout or p.stderr).strip()
        out[name] = text.splitlines()[0] if text else "?"
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m railyard.engine.control_plane")
    parser.add_argument("--with-test-tools", action="store_true",
                        help="also the SR-IOV operator's renderer, which the tests compare the model's with")
    args = parser.parse_args(argv)
    try:
        found = ensure()
        files = crd_files()
        kwok_module()
        if args.with_test_tools:
            log(f"sriov-render: {sriov_render()}")
    except ToolchainError as exc:
        log(f"error: {exc}")
        return 1
    for name, line in versions(found).items():
        log(f"{name}: {line} ({found[name]})")
    log(f"CRDs: {', '.join(f'{k} ({len(v)})' for k, v in files.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
