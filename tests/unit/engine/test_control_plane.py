"""railyard.engine.control_plane: which control-plane binaries are built and which a user
supplies (KUBEBUILDER_ASSETS, RAILYARD_KUBERNETES_BIN), and that the pins agree with go.mod."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from railyard.engine import control_plane, toolchain


def executable(d: Path, name: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_text("#!/bin/sh\necho supplied\n")
    p.chmod(0o755)
    return p


def test_envtest_assets_supply_etcd_and_the_api_server_only(tmp_path):
    assets = tmp_path / "assets"
    for name in ("etcd", "kube-apiserver", "kube-scheduler"):
        executable(assets, name)
    env = {control_plane.ASSETS_ENV: str(assets)}
    assert control_plane.supplied("etcd", env) == assets / "etcd"
    assert control_plane.supplied("kube-apiserver", env) == assets / "kube-apiserver"
    # envtest's directory holds no scheduler; one that happens to be there is not taken from it
    assert control_plane.supplied("kube-scheduler", env) is None


def test_a_bin_directory_supplies_any_and_wins_over_envtest(tmp_path):
    mine, assets = tmp_path / "mine", tmp_path / "assets"
    executable(mine, "etcd")
    executable(mine, "kueue")
    executable(assets, "etcd")
    env = {control_plane.BIN_ENV: str(mine), control_plane.ASSETS_ENV: str(assets)}
    assert control_plane.supplied("etcd", env) == mine / "etcd"
    assert control_plane.supplied("kueue", env) == mine / "kueue"
    (mine / "kueue").chmod(0o644)  # not executable: not supplied
    assert control_plane.supplied("kueue", env) is None


def test_supplied_binaries_are_linked_and_nothing_is_built(tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    for name in control_plane.BINARIES:
        executable(mine, name)
    monkeypatch.setattr(control_plane, "ensure_built",
                        lambda *a, **k: pytest.fail("built although every binary was supplied"))
    root = tmp_path / "project"
    found = control_plane.ensure(root, {control_plane.BIN_ENV: str(mine)})
    assert set(found) == set(control_plane.BINARIES)
    for name in control_plane.BINARIES:
        link = root / ".railyard" / "bin" / name
        assert link.resolve() == (mine / name).resolve()
        assert control_plane.binary(name, root) == link


def test_only_the_targets_a_user_does_not_cover_are_built(tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    executable(mine, "etcd")
    built = []

    def fake_build(target, go, build=None):
        built.append(target.name)
        out = tmp_path / "cache" / target.name
        for name in target.files:
            executable(out, name)
        return out

    monkeypatch.setattr(control_plane, "ensure_built", fake_build)
    monkeypatch.setattr(control_plane, "go_version", lambda: "go version go1.26.8 linux/amd64")
    found = control_plane.ensure(tmp_path / "project", {control_plane.BIN_ENV: str(mine)})
    assert built == ["kube-control-plane", "kwok", "kueue"]
    assert found["etcd"] == mine / "etcd"


def test_a_missing_binary_names_the_command_that_builds_it(tmp_path):
    with pytest.raises(toolchain.ToolchainError, match="railyard.engine.control_plane"):
        control_plane.binary("kube-apiserver", tmp_path)


@pytest.mark.parametrize("target, module, version", [
    (control_plane.CONTROL_PLANE, "k8s.io/kubernetes", control_plane.KUBERNETES_RELEASE),
    (control_plane.ETCD, "go.etcd.io/etcd/server/v3", control_plane.ETCD_VERSION),
    (control_plane.KWOK, "sigs.k8s.io/kwok", control_plane.KWOK_VERSION),
    (control_plane.KUEUE, "sigs.k8s.io/kueue", control_plane.KUEUE_VERSION),
    (control_plane.SRIOV_RENDER, "github.com/k8snetworkplumbingwg/sriov-network-operator",
     control_plane.SRIOV_OPERATOR_VERSION),
])
def test_each_pin_is_the_version_its_go_mod_requires(target, module, version):
    text = (target.module_dir / "go.mod").read_text()
    assert re.search(rf"^\s*{re.escape(module)} v{re.escape(version)}\b", text, re.M), (module, version)


def test_the_control_plane_module_replaces_every_staging_module_with_the_same_release():
    text = (control_plane.CONTROL_PLANE.module_dir / "go.mod").read_text()
    replaces = re.findall(r"^\s*(k8s\.io/\S+) => (\S+) (v\S+)$", text, re.M)
    assert len(replaces) >= 30
    minor = control_plane.KUBERNETES_RELEASE.split(".", 1)[1]
    assert {(a == b, v) for a, b, v in replaces} == {(True, f"v0.{minor}")}
