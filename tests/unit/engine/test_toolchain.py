"""The offline engine toolchain: caching, damage detection and the messages of a broken environment."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from railyard.engine import toolchain
from railyard.engine.toolchain import Target, ToolchainError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILYARD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def fake_target(tmp_path, monkeypatch):
    mod = tmp_path / "mod"
    mod.mkdir()
    (mod / "go.mod").write_text("module example\n")
    target = Target("fake", mod, ("tool-a", "tool-b"), ("go.mod",))
    calls = []

    def build(out: Path) -> None:
        calls.append(out)
        for name in target.files:
            (out / name).write_bytes(b"#!/bin/sh\necho " + name.encode() + b"\n" * 1000)
            (out / name).chmod(0o755)

    monkeypatch.setitem(toolchain._BUILDERS, "fake", build)
    return target, calls


def test_missing_go_toolchain_is_reported_with_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no go on it
    with pytest.raises(ToolchainError) as err:
        toolchain.go_version()
    assert "no Go toolchain" in str(err.value) and "golang-go" in str(err.value)


def test_module_refused_by_the_proxy_names_the_module():
    # The shape of the go command's error when the module proxy refuses a version (host redacted).
    stderr = (
        "go: github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3@v3.0.0-20260820084410-a05d88f24d05: "
        "reading https://PROXY/github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3/@v/"
        "v3.0.0-20260820084410-a05d88f24d05.info: 403 Forbidden\n\tserver response: This module version is not available.\n"
    )
    msg = toolchain.explain_go_failure(stderr, "building pulumi")
    assert "refused github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3@v3.0.0-20260820084410-a05d88f24d05" in msg
    assert "403 Forbidden" in msg


def test_missing_go_sum_entry_says_how_to_refresh_it():
    msg = toolchain.explain_go_failure(
        "main.go:5:2: missing go.sum entry for module providing package github.com/x/y (imported by z)", "building z")
    assert "go.sum lacks an entry for github.com/x/y" in msg


def test_second_run_does_no_go_work(cache, fake_target):
    target, calls = fake_target
    first = toolchain.ensure_built(target, "go1.26")
    second = toolchain.ensure_built(target, "go1.26")
    assert first == second and len(calls) == 1


def test_half_written_binary_is_detected_and_rebuilt(cache, fake_target):
    target, calls = fake_target
    built = toolchain.ensure_built(target, "go1.26")
    with (built / "tool-b").open("r+b") as f:
        f.truncate(10)  # what a killed copy or a full disk leaves behind
    assert "does not match its manifest" in toolchain.verify(built, target.files)
    rebuilt = toolchain.ensure_built(target, "go1.26")
    assert len(calls) == 2 and toolchain.verify(rebuilt, target.files) is None


def test_interrupted_build_without_manifest_is_not_trusted(cache, fake_target):
    target, calls = fake_target
    build_dir = cache / "bin" / f"fake-{target.key('go1.26')}"
    build_dir.mkdir(parents=True)
    (build_dir / "tool-a").write_text("partial")
    assert toolchain.verify(build_dir, target.files) == "no manifest (an interrupted build)"
    toolchain.ensure_built(target, "go1.26")
    assert len(calls) == 1


def test_failed_build_leaves_no_partial_directory(cache, fake_target, monkeypatch):
    target, _ = fake_target

    def broken(out: Path) -> None:
        (out / "tool-a").write_text("x")
        raise ToolchainError("building tool-b failed")

    monkeypatch.setitem(toolchain._BUILDERS, "fake", broken)
    with pytest.raises(ToolchainError):
        toolchain.ensure_built(target, "go1.26")
    assert not (cache / "bin").exists() or list((cache / "bin").iterdir()) == []


def test_cache_key_changes_with_pins_and_go_version(fake_target):
    target, _ = fake_target
    k1 = target.key("go1.26.8")
    assert target.key("go1.26.9") != k1
    (target.module_dir / "go.mod").write_text("module example\nrequire x v1\n")
    assert target.key("go1.26.8") != k1


@pytest.mark.parametrize("version,ok", [
    ("v3.274.1", True), ("v3.272.0", True), ("v3.271.9", False), ("v4.0.0", False), ("garbage", False),
])
def test_ambient_pulumi_version_range(version, ok):
    assert toolchain.compatible(toolchain.parse_version(version)) is ok


def test_ambient_pulumi_in_range_is_used_instead_of_building(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pulumi").write_text("#!/bin/sh\necho v3.280.0\n")
    (fake / "pulumi-language-python").write_text("#!/bin/sh\n")
    for p in fake.iterdir():
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    assert toolchain.ambient_pulumi(tmp_path) == fake / "pulumi"
    (fake / "pulumi").write_text("#!/bin/sh\necho v3.100.0\n")
    assert toolchain.ambient_pulumi(tmp_path) is None


def test_engine_environment_never_reaches_for_the_network(tmp_path):
    env = toolchain.engine_settings(tmp_path, {"PATH": "/usr/bin"})
    assert env["PULUMI_SKIP_UPDATE_CHECK"] == "true"
    assert env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] == "true"
    assert env["PULUMI_BACKEND_URL"] == f"file://{tmp_path / '.railyard' / 'state'}"
    assert env["PULUMI_HOME"] == str(tmp_path / ".railyard" / "pulumi-home")


def test_a_team_backend_and_passphrase_given_by_the_user_win(tmp_path):
    env = toolchain.engine_settings(tmp_path, {"PULUMI_BACKEND_URL": "s3://bucket", "PULUMI_CONFIG_PASSPHRASE_FILE": "/p"})
    assert "PULUMI_BACKEND_URL" not in env and "PULUMI_CONFIG_PASSPHRASE" not in env


# --- locating a module's files, on an empty module cache ------------------------------------------
# A tiny module served from a file:// GOPROXY, with go.sum entries computed as the go command does
# (golang.org/x/mod/sumdb/dirhash Hash1), so these tests never reach for the network and the
# module cache starts empty, as on a machine that has never built Railyard.

TINY, TINY_VERSION = "example.com/tiny", "v1.0.0"
TINY_GO_MOD = f"module {TINY}\n\ngo 1.21\n"


def _h1(files: dict[str, bytes]) -> str:
    import base64
    import hashlib

    summary = "".join(f"{hashlib.sha256(files[name]).hexdigest()}  {name}\n" for name in sorted(files))
    return "h1:" + base64.b64encode(hashlib.sha256(summary.encode()).digest()).decode()


@pytest.fixture
def go_proxy(tmp_path, monkeypatch, cache):
    """A main module requiring TINY, which only a file:// proxy serves; returns (main, proxy)."""
    import zipfile

    if toolchain.shutil.which("go") is None:
        pytest.fail("no Go toolchain on PATH: Railyard's set-up needs one (README)")
    files = {f"{TINY}@{TINY_VERSION}/go.mod": TINY_GO_MOD.encode(),
             f"{TINY}@{TINY_VERSION}/tiny.go": b"package tiny\n\nconst Answer = 42\n"}
    versions = tmp_path / "proxy" / TINY / "@v"
    versions.mkdir(parents=True)
    (versions / "list").write_text(f"{TINY_VERSION}\n")
    (versions / f"{TINY_VERSION}.info").write_text(json.dumps({"Version": TINY_VERSION, "Time": "2026-01-01T00:00:00Z"}))
    (versions / f"{TINY_VERSION}.mod").write_text(TINY_GO_MOD)
    with zipfile.ZipFile(versions / f"{TINY_VERSION}.zip", "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    main = tmp_path / "main"
    main.mkdir()
    (main / "go.mod").write_text(f"module example.com/main\n\ngo 1.21\n\nrequire {TINY} {TINY_VERSION}\n")
    (main / "go.sum").write_text(f"{TINY} {TINY_VERSION} {_h1(files)}\n"
                                 f"{TINY} {TINY_VERSION}/go.mod {_h1({'go.mod': TINY_GO_MOD.encode()})}\n")
    monkeypatch.setenv("GOPROXY", f"file://{tmp_path / 'proxy'}")
    monkeypatch.setenv("GOSUMDB", "off")
    for var in ("GOPRIVATE", "GONOPROXY", "GONOSUMDB", "GOINSECURE", "GOWORK"):
        monkeypatch.delenv(var, raising=False)
    return main, tmp_path / "proxy"


def test_a_module_not_yet_in_the_module_cache_is_downloaded_and_located(go_proxy, cache):
    main, _ = go_proxy
    modcache = cache / "go" / "mod"
    assert not (modcache / f"{TINY}@{TINY_VERSION}").exists()  # a machine that never built Railyard
    found = toolchain.module_dir(main, TINY)
    assert found.is_absolute() and found == modcache / f"{TINY}@{TINY_VERSION}"
    assert (found / "tiny.go").read_text().endswith("const Answer = 42\n")


def test_a_module_the_proxy_cannot_serve_is_a_clear_error_naming_it(go_proxy):
    main, proxy = go_proxy
    (proxy / TINY / "@v" / f"{TINY_VERSION}.zip").unlink()
    with pytest.raises(ToolchainError) as err:
        toolchain.module_dir(main, TINY)
    assert f"locating {TINY} failed" in str(err.value) and f"{TINY}@{TINY_VERSION}" in str(err.value)
    assert "Traceback" not in str(err.value)


def test_a_module_that_does_not_match_go_sum_is_refused_and_said_so(go_proxy):
    main, _ = go_proxy
    sums = (main / "go.sum").read_text().splitlines()
    sums[0] = f"{TINY} {TINY_VERSION} h1:{'A' * 43}="  # what a tampered or re-tagged module looks like
    (main / "go.sum").write_text("\n".join(sums) + "\n")
    with pytest.raises(ToolchainError) as err:
        toolchain.module_dir(main, TINY)
    assert "does not match go.sum" in str(err.value) and TINY in str(err.value)


def test_a_module_main_does_not_require_is_named_in_the_error(go_proxy):
    main, _ = go_proxy
    with pytest.raises(ToolchainError) as err:
        toolchain.module_dir(main, "example.com/absent")
    assert "locating example.com/absent failed" in str(err.value) and "not a known dependency" in str(err.value)


# --- What each stack needs, when it needs it (issue 37) ---------------------------------------------


@pytest.fixture
def fake_builds(cache, tmp_path, monkeypatch):
    """Every target "built" by writing its files, each build recorded: the engine's own builders
    never run, so what is asked to build is what the test sees."""
    built: list[str] = []

    def builder(name: str, files: tuple[str, ...]):
        def build(out: Path) -> None:
            built.append(name)
            for f in files:
                (out / f).write_text("#!/bin/sh\necho v3.274.1\n")
                (out / f).chmod(0o755)
        return build

    for t in (toolchain.CLI, toolchain.K8S, toolchain.SEAWEEDFS):
        monkeypatch.setitem(toolchain._BUILDERS, t.name, builder(t.name, t.files))
    monkeypatch.setattr(toolchain, "go_version", lambda: "go version go1.26.8 linux/amd64")
    root = tmp_path / "checkout"
    root.mkdir()
    return root, built


def test_the_engine_alone_builds_neither_the_kubernetes_provider_nor_weed(fake_builds):
    root, built = fake_builds
    tc = toolchain.ensure(root, allow_ambient=False, everything=False)
    assert built == ["cli"] and tc.source == "built"
    assert not (paths_of(root)["plugin"]).exists() and not (paths_of(root)["weed"]).exists()


def test_the_parts_a_stack_uses_are_built_once_by_the_first_command_that_needs_them(fake_builds):
    root, built = fake_builds
    toolchain.ensure(root, allow_ambient=False, everything=False)
    toolchain.ensure_kubernetes(root)
    toolchain.ensure_weed(root)
    toolchain.ensure_kubernetes(root)
    toolchain.ensure_weed(root)
    assert built == ["cli", "kubernetes", "seaweedfs"]
    assert paths_of(root)["plugin"].resolve().parent.name.startswith("kubernetes-")
    assert paths_of(root)["weed"].resolve().parent.name.startswith("seaweedfs-")


def test_everything_builds_every_part_up_front_as_make_test_needs(fake_builds):
    root, built = fake_builds
    toolchain.ensure(root, allow_ambient=False)
    assert sorted(built) == ["cli", "kubernetes", "seaweedfs"]


def test_a_kubernetes_plugin_the_user_installed_is_kept_and_nothing_is_built(fake_builds):
    root, built = fake_builds
    plugin = paths_of(root)["plugin"]
    plugin.parent.mkdir(parents=True)
    plugin.write_text("#!/bin/sh\n")  # the official plugin, as `pulumi plugin install` leaves it
    toolchain.ensure_kubernetes(root)
    assert built == [] and not plugin.is_symlink()


def paths_of(root: Path) -> dict[str, Path]:
    from railyard import paths

    return {"plugin": paths.pulumi_home(root) / "plugins" / f"resource-kubernetes-v{toolchain.KUBERNETES_VERSION}"
            / "pulumi-resource-kubernetes", "weed": paths.bin_dir(root) / "weed"}


@pytest.mark.parametrize("driver, layer, uses", [("lab", False, False), ("lab", True, True), ("hosts", True, True),
                                                 ("hosts", False, False), ("coreweave", False, True),
                                                 ("openstack", False, False)])
def test_the_kubernetes_provider_is_for_a_kubernetes_layer_or_a_driver_whose_resources_need_it(driver, layer, uses):
    from railyard import drivers

    assert drivers.uses_kubernetes_provider(driver, layer) is uses
