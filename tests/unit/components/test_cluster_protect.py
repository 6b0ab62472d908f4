"""A long-lived stack's cluster is protected all the way down: ClusterArgs(protect=True) reaches
every resource under the Cluster through Pulumi's parent-to-child inheritance (Pulumi mocks)."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from railyard.model.plan import make_plan
from railyard.stack import load_stack_file

ROOT = Path(__file__).resolve().parents[3]


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        outs = dict(args.inputs)
        outs.update(host_key="ssh-ed25519 AAAAmock", public_key="ssh-ed25519 AAAAmockpub", private_key="mock")
        return f"{args.name}-id", outs

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def cluster_resources(protect: bool) -> list[pulumi.Resource]:
    pulumi.runtime.set_mocks(Mocks(), project="railyard", stack="lab", preview=False)
    from components.cluster import Cluster, ClusterArgs
    from railyard.drivers.base import load_driver

    spec = load_stack_file(ROOT / "stacks" / "Pulumi.lab.yaml")
    plan = make_plan(spec)
    cluster = Cluster(spec.stack, ClusterArgs(spec=spec, plan=plan, protect=protect), load_driver(spec, plan))
    out: list[pulumi.Resource] = [cluster, cluster.fabric, *cluster.fabric.ready, cluster.storage, cluster.tuning,
                                  cluster.tuning.run]
    for pool in cluster.pools:
        out += [pool, *pool.nodes]
    return out


@pytest.mark.parametrize("protect", [True, False])
def test_protect_reaches_every_resource_of_the_cluster(protect):
    resources = cluster_resources(protect)
    assert len(resources) > 8
    wrong = [getattr(r, "_name", r) for r in resources if bool(r._protect) is not protect]
    assert not wrong, f"protect={protect} did not reach {wrong}"
