"""HostMachine, the hosts driver's resource for one existing server, on the real engine against a
real lab node reached over SSH: `up` discovers the node's hardware (a dgx-h100 tree with one GPU
taken out) and refuses it, naming the difference from its SKU, before anything is recorded or
changed; the key stays secret."""

from __future__ import annotations

import base64
import json

import pytest

from railyard import paths
from railyard.drivers.lab import node
from tests.engine.conftest import Engine

ROOT = paths.PROJECT_ROOT

PROGRAM = '''
import base64

import pulumi

from railyard.drivers.hosts.resources import HostMachine

c = pulumi.Config()
machine = HostMachine("gpu-0", stack="hm", node="gpu-0", address=c.require("address"), user="root", port=22,
                      jump=None, host_keys=[c.require("hostKey")], sku=c.require("sku"), fabric=None,
                      speed_gbps=None,
                      # base64 in the config only because `pulumi config set` reads a leading '-' as a flag
                      private_key=c.require_secret("key").apply(lambda k: base64.b64decode(k).decode()))
pulumi.export("hostKey", machine.host_key)
'''


@pytest.fixture(scope="module")
def server(stack_factory, tmp_path_factory):
    import shutil

    from railyard.drivers.lab import hwtree
    from railyard.model.catalog import load_catalog
    from railyard.model.pci_layout import layout

    sku = load_catalog().nodes["dgx-h100"]
    tree = tmp_path_factory.mktemp("hw") / "gpu-0"
    hwtree.build_hwtree(sku, tree)
    # GPU4 lost (the one beside mlx5_6): its device directory and the bus's link to it go.
    bdf = layout(sku).bus_ids["GPU4"]
    shutil.rmtree((tree / "sys/bus/pci/devices" / bdf).resolve())
    (tree / "sys/bus/pci/devices" / bdf).unlink()
    c = stack_factory("hm", rails=2, spine=False)
    c.create_fabric()
    return c, c.create_node("gpu-0", 0, hw_tree_source=str(tree))


@pytest.fixture
def engine(tmp_path):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain` (make test does it first)")
    project = tmp_path / "project"
    project.mkdir()
    (project / "__main__.py").write_text(PROGRAM)
    (project / "Pulumi.yaml").write_text("name: hosts-machine\nruntime:\n  name: python\n  options:\n"
                                         f"    virtualenv: {ROOT / '.venv'}\n    toolchain: pip\n")
    (tmp_path / "state").mkdir()
    return Engine(project, tmp_path / "state")


def test_up_refuses_a_host_whose_hardware_is_not_its_skus_and_records_nothing(server, engine):
    c, state = server
    engine("stack", "init", "dev", "--secrets-provider", "passphrase")
    engine("config", "set", "address", state["mgmt_address"])
    engine("config", "set", "hostKey", state["host_key"])
    engine("config", "set", "sku", "dgx-h100")
    engine("config", "set", "--secret", "key", base64.b64encode(c.key.read_bytes()).decode())
    before = node.run_in_node(c.stack, "gpu-0", ["ls", "-A", "/tmp", "/root", "/etc"], check=True).stdout
    proc = engine("up", "--yes", "--skip-preview", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "gpu-0: 7 GPUs found, dgx-h100 has 8; none under the switch of mlx5_6 (NUMA 1)" in out, out[-3000:]
    assert "nothing was changed on the host" in out
    # Nothing recorded, nothing on the node, and the key never printed.
    resources = json.loads(engine("stack", "export").stdout)["deployment"].get("resources") or []
    assert not [r for r in resources if r["urn"].endswith("::gpu-0")]
    assert node.run_in_node(c.stack, "gpu-0", ["ls", "-A", "/tmp", "/root", "/etc"], check=True).stdout == before
    assert "PRIVATE KEY" not in out


def test_a_host_key_that_is_not_the_pinned_one_stops_up_naming_the_host(server, engine, tmp_path):
    from .conftest import keypair

    c, state = server
    _, other = keypair(tmp_path)
    engine("stack", "init", "dev", "--secrets-provider", "passphrase")
    engine("config", "set", "address", state["mgmt_address"])
    engine("config", "set", "hostKey", " ".join(other.split()[:2]))
    engine("config", "set", "sku", "dgx-h100")
    engine("config", "set", "--secret", "key", base64.b64encode(c.key.read_bytes()).decode())
    proc = engine("up", "--yes", "--skip-preview", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "gpu-0: the host key of" in out and "is not the pinned one" in out, out[-3000:]
