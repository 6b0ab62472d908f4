"""The real engine, offline: preview, up, an idempotent up, destroy, with a dynamic resource and a
Kubernetes manifest rendered by the locally built provider."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.engine


def test_preview_up_noop_destroy_round_trip(engine_project, tmp_path: Path):
    pulumi = engine_project
    out = tmp_path / "out"
    out.mkdir()
    pulumi("stack", "init", "dev", "--secrets-provider", "passphrase")
    pulumi("config", "set", "outDir", str(out))
    pulumi("config", "set", "content", "rails")

    preview = pulumi.json("preview")
    creates = {s["urn"].rsplit("::", 1)[1] for s in preview["steps"] if s["op"] == "create"}
    assert {"marker", "render", "smoke"} <= creates, creates
    assert not (out / "marker.txt").exists(), "preview must not run the provider's create"

    pulumi("up", "--yes", "--skip-preview")
    outputs = pulumi.json("stack", "output")
    assert outputs == {"markerSize": 5, "configMapName": "railyard-smoke"}
    assert (out / "marker.txt").read_text() == "rails"
    manifest = out / "manifests" / "1-manifest" / "v1-configmap-default-railyard-smoke.yaml"
    assert manifest.is_file(), sorted(p.name for p in out.rglob("*"))
    doc = yaml.safe_load(manifest.read_text())
    assert doc["kind"] == "ConfigMap" and doc["data"] == {"content": "rails"}

    # A second up with nothing changed must report no changes (the engine fails otherwise).
    pulumi("up", "--yes", "--skip-preview", "--expect-no-changes")

    pulumi("destroy", "--yes", "--skip-preview")
    assert not (out / "marker.txt").exists()
    assert not manifest.exists()
    assert pulumi.json("stack", "output") == {}


def test_engine_reports_its_pinned_version(engine_project):
    from railyard.engine.toolchain import PULUMI_VERSION, ambient_pulumi
    from railyard import paths

    version = engine_project("version").stdout.strip()
    if ambient_pulumi(paths.PROJECT_ROOT) is None:
        assert version == f"v{PULUMI_VERSION}"


def test_plugins_come_from_the_local_build(engine_project):
    from railyard.engine.toolchain import KUBERNETES_VERSION

    listing = engine_project("plugin", "ls").stdout
    assert "kubernetes" in listing and KUBERNETES_VERSION in listing, listing


def test_a_hosts_bmc_password_is_opened_from_the_stacks_own_config(engine_project, monkeypatch):
    """What the repair loop's power cycle opens, and only then: the secret as `pulumi config set
    --secret` keeps it (ciphertext in the stack file), read back by the real engine."""
    from railyard.drivers.hosts.tuning import bmc_password
    from railyard.remote.rollout import PowerCycleError

    pulumi = engine_project
    pulumi("stack", "init", "hosts-bmc", "--secrets-provider", "passphrase")
    pulumi("config", "set", "--path", "railyard:hosts.pools.gpu.hosts[1].bmc.password", "s3cret", "--secret")
    pulumi("config", "set", "--path", "railyard:hosts.pools.gpu.hosts[1].bmc.username", "admin")
    assert "s3cret" not in (pulumi.project / "Pulumi.hosts-bmc.yaml").read_text()
    for key in ("PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE"):
        monkeypatch.setenv(key, pulumi.env[key])
    at = ("pools", "gpu", "hosts", 1, "bmc", "password")
    assert bmc_password("hosts-bmc", at, cwd=pulumi.project) == "s3cret"
    with pytest.raises(PowerCycleError, match=r"its BMC password could not be opened: pulumi config get exited"):
        bmc_password("hosts-bmc", ("pools", "gpu", "hosts", 0, "bmc", "password"), cwd=pulumi.project)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "not the stack's")
    with pytest.raises(PowerCycleError, match="its BMC password could not be opened") as err:
        bmc_password("hosts-bmc", at, cwd=pulumi.project)
    assert "s3cret" not in str(err.value)
