"""The benchmark harness and the pieces its engine and lab sections measure with (no engine run)."""

from __future__ import annotations

import json
import sys

from railyard.bench import bench_engine, bench_lab, harness, proctree
from railyard.engine.toolchain import command_settings


def test_process_tree_memory_is_summed_over_children_and_lines_are_stamped():
    child = "import time; x = bytearray(60_000_000); time.sleep(1.2)"
    script = f"import subprocess, sys; print('start', flush=True); subprocess.run([sys.executable, '-c', {child!r}])"
    run = proctree.run([sys.executable, "-c", script], interval=0.05)
    assert run.returncode == 0
    assert run.peak_rss_mib > 60  # the child's 60 MB counts, not only the parent's
    assert run.peak_rss_mib > run.peak_process_rss_mib
    # The peak's breakdown by kind sums to the peak: both are python processes here.
    assert run.rss_at_peak_mib.get("python (other)", 0) > 60
    assert abs(sum(run.rss_at_peak_mib.values()) - run.peak_rss_mib) < 0.01
    assert [line for _, line in run.lines] == ["start\n"]
    assert run.wall_s > 1.2


def test_on_new_names_the_process_kinds_of_a_pulumi_run():
    assert proctree.kind(["/x/.railyard/bin/pulumi", "preview"]) == "engine"
    assert proctree.kind(["/x/.venv/bin/python", "/c/pulumi-language-python-exec", "--monitor", "a"]) == "program"
    assert proctree.kind(["/x/.venv/bin/python", "-u", "-m", "pulumi.dynamic", "127.0.0.1:1"]) == "dynamic provider"
    assert proctree.kind(["/x/.railyard/bin/pulumi-language-python", "127.0.0.1:1"]) == "language host"
    assert proctree.kind(["/x/.venv/bin/python3.11", "/x/.venv/bin/ansible-playbook", "site.yml"]) == "ansible"


def test_previews_skip_the_per_step_checkpoint_and_nothing_else_does():
    assert command_settings(["preview", "--diff"]) == {"PULUMI_SKIP_CHECKPOINTS": "true"}
    for args in (["up", "--yes"], ["destroy"], ["refresh"], []):
        assert command_settings(args) == {}


def test_a_failing_section_is_reported_and_the_others_still_count(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(harness.paths, "bench_dir", lambda root=None: tmp_path)

    def good(ctx):
        yield harness.Sample("fast", 0.5, "s", target=1.0)

    def bad(ctx):
        yield harness.Sample("partial", 2.0, "s")
        raise RuntimeError("lab up failed\ndetails")

    report = harness.run_sections([harness.Section("bad", "", bad), harness.Section("good", "", good)], 1, False,
                                  tmp_path / "out.json")
    assert report["errors"] == [{"section": "bad", "error": "RuntimeError: lab up failed\ndetails"}]
    assert [f["figure"] for f in report["figures"]] == ["partial", "fast"]
    assert json.loads((tmp_path / "out.json").read_text())["figures"][1]["status"] == "met"
    table = capsys.readouterr().out
    assert "bad failed: RuntimeError: lab up failed" in table and "load average" in table


def test_the_large_preview_is_split_into_pools_the_lab_networks_hold():
    assert bench_engine.pools(448) == [{"name": "gpu", "sku": "dgx-h100", "count": 448}]
    units = bench_engine.pools(2_500)
    assert len(units) == 8 and sum(p["count"] for p in units) == 2_500


def test_validated_stack_files_for_every_size(tmp_path):
    from railyard.stack import load_stack_file

    import yaml

    for nodes, config in [*((n, bench_engine.preview_config(n)) for n in {*bench_engine.SIZES, *bench_engine.STATE_SIZES}),
                          *((n, bench_lab.lab_config(n, "198.18.64.0/23", "198.18.66.0/23")) for n in bench_lab.SIZES)]:
        path = tmp_path / f"Pulumi.b{nodes}.yaml"
        path.write_text(yaml.safe_dump({"config": config}))
        spec = load_stack_file(path)
        assert sum(p.count for p in spec.node_pools) == nodes


def _event(t, key, urn, **extra):
    return t, {key: {"metadata": {"urn": urn, "op": "create"}, **extra}}


def test_the_tuning_step_is_timed_from_its_engine_events():
    urn = "urn:pulumi:s::railyard::railyard:index:Cluster$railyard:index:HostTuning$pulumi-python:dynamic:Resource::s-tuning-run"
    evs = [_event(1.0, "resourcePreEvent", "urn:x::s-fabric-net"), _event(13.25, "resourcePreEvent", urn),
           _event(14.0, "resOutputsEvent", "urn:x::s-fabric-net"), _event(49.5, "resOutputsEvent", urn),
           (50.0, {"summaryEvent": {"result": "succeeded", "resourceChanges": {"create": 18}}})]
    assert bench_lab.step_seconds(evs, bench_lab.TUNING_RUN_SUFFIX) == 36.25
    assert bench_lab.summary(evs)["resourceChanges"] == {"create": 18}
    assert bench_lab.step_seconds(evs[:2], bench_lab.TUNING_RUN_SUFFIX) is None


def test_events_are_read_from_json_lines_with_their_arrival():
    run = proctree.TreeRun(0, 1.0, 0, 0, lines=[(0.5, '{"sequence": 0, "preludeEvent": {}}\n'), (0.7, "noise\n")])
    assert bench_lab.events(run) == [(0.5, {"sequence": 0, "preludeEvent": {}})]


def test_resources_per_node_are_the_node_component_and_what_is_under_it():
    prefix = "urn:pulumi:s::railyard::railyard:index:Cluster$railyard:index:NodePool"
    result = {"steps": [
        {"urn": f"{prefix}$railyard:index:HgxNode::gpu-0", "newState": {"type": "railyard:index:HgxNode"}},
        {"urn": f"{prefix}$railyard:index:HgxNode$pulumi-python:dynamic:Resource::gpu-0-host", "newState": {}},
        {"urn": f"{prefix}::lab-gpu", "newState": {"type": "railyard:index:NodePool"}},
        {"urn": "urn:pulumi:s::railyard::pulumi:pulumi:Stack::railyard-s", "newState": {"type": "pulumi:pulumi:Stack"}},
    ]}
    assert bench_engine.resource_count(result) == 3
    assert bench_engine.node_resource_count(result) == 2


def test_the_hosts_sections_stacks_validate_and_plan_448_hosts_on_their_own_networks():
    import ipaddress

    from railyard.bench import bench_hosts
    from railyard.stack import from_config

    mgmt, storage = "198.19.192.0/20", "198.19.208.0/20"
    net = ipaddress.ip_network(mgmt)
    addresses = [str(net.network_address + 10 + i) for i in range(448)]
    spec, plan = from_config(bench_hosts.hosts_config(addresses, [bench_hosts.PLACEHOLDER_KEY] * 448, mgmt, storage),
                             "bench-hosts448")
    assert spec.driver == "hosts" and len(plan.nodes) == 448
    assert spec.driver_config.host("gpu", 447).address == addresses[-1]
    # Its networks are the lab's own (198.18.0.0/15) and none of the other stacks' management ranges.
    assert ipaddress.ip_network(mgmt).subnet_of(bench_hosts.POOL)
    assert not bench_hosts.POOL.overlaps(ipaddress.ip_network("198.18.0.0/16"))
    assert not bench_hosts.POOL.overlaps(ipaddress.ip_network(bench_hosts.COMPUTE))


def test_the_kubernetes_sections_stacks_plan_448_nodes_with_and_without_the_layer():
    from railyard.bench import bench_kubernetes
    from railyard.stack import from_config

    mgmt, storage = "198.19.192.0/20", "198.19.208.0/20"
    _, plain = from_config(bench_kubernetes.layer_config(448, mgmt, storage, False), "bench-k8s448")
    _, layer = from_config(bench_kubernetes.layer_config(448, mgmt, storage, True), "bench-k8s448l")
    assert plain.kubernetes is None and len(layer.kubernetes.nodes) == 448
    result = {"steps": [{"urn": "urn:pulumi:s::railyard::railyard:index:Cluster$railyard:index:KubernetesLayer"
                                "$kubernetes:core/v1:Node::s-kubernetes-node-gpu-0"},
                        {"urn": "urn:pulumi:s::railyard::railyard:index:Cluster$railyard:index:KubernetesLayer"
                                "$kubernetes:kueue.x-k8s.io/v1beta2:Topology::s-kubernetes-topology-s"}]}
    assert (bench_kubernetes.node_objects(result), bench_kubernetes.layer_resources(result)) == (1, 2)


def test_the_table_prints_each_figures_note_under_it():
    from railyard.bench.harness import render_table

    report = {"figures": [
        {"section": "opensm", "figure": "448 nodes: OpenSM sweep", "median": 7.4, "unit": "s", "values": [7.4],
         "target": None, "status": "", "note": "engine ftree"},
        {"section": "opensm", "figure": "448 nodes: ibsim peak RSS", "median": 49.0, "unit": "MiB", "values": [49.0],
         "target": None, "status": "", "note": ""}]}
    lines = render_table(report).splitlines()
    assert lines[-1] == "note: 448 nodes: OpenSM sweep: engine ftree"
    assert sum(line.startswith("note:") for line in lines) == 1
