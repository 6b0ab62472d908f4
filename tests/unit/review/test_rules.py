"""The review's rules: disruption classes, touched stacks, folding, values, secrets."""

from __future__ import annotations

from railyard.review import preview, render, rules
from railyard.review.preview import MISSING, SECRET, UNKNOWN
from railyard.review.rules import Disruption

NODE_HOST = "railyard:index:Cluster$railyard:index:NodePool$railyard:index:HgxNode$pulumi-python:dynamic:Resource"
HGX = "railyard:index:Cluster$railyard:index:NodePool$railyard:index:HgxNode"
TUNING = "railyard:index:Cluster$railyard:index:HostTuning"
STORAGE = "railyard:index:Cluster$railyard:index:StorageTiers$pulumi-python:dynamic:Resource"


def urn(chain: str, name: str, stack: str = "s") -> str:
    return f"urn:pulumi:{stack}::railyard::{chain}::{name}"


def step(op: str, chain: str, name: str, parent: str | None = None, old=None, new=None) -> dict:
    out: dict = {"op": op, "urn": urn(chain, name)}
    if old is not None:
        out["oldState"] = {"inputs": old, **({"parent": parent} if parent else {})}
    if new is not None:
        out["newState"] = {"inputs": new, **({"parent": parent} if parent else {})}
    return out


def node_steps(op: str, node: str, old=None, new=None) -> list[dict]:
    parent = urn(HGX, node)
    return [step(op, NODE_HOST, f"{node}-host", parent, old, new)]


def verdict_of(data: dict) -> rules.Verdict:
    units = render.units_of(preview.load(data, "s"))
    return rules.worst(u.verdict() for u in units)


# --- disruption classes ----------------------------------------------------------------------------

def test_deleting_a_storage_or_cache_resource_destroys_data():
    parent = urn(HGX, "gpu-1")
    data = {"steps": [step("delete", NODE_HOST, "gpu-1-host-storage", parent, old={"mount": "/mnt/cache"})]}
    assert verdict_of(data).disruption == Disruption.DESTROYS_DATA
    data = {"steps": [step("delete", STORAGE, "c-storage-object", urn("railyard:index:Cluster$railyard:index:"
                                                                        "StorageTiers", "c-storage"), old={})]}
    assert verdict_of(data).disruption == Disruption.DESTROYS_DATA


def _pickled(provider) -> str:
    import base64
    import pickle

    return base64.b64encode(pickle.dumps(provider)).decode()


def test_deleting_or_replacing_a_node_with_a_cache_destroys_data():
    cache = {"spec": {"node": "gpu-3", "cache": {"mount": "/mnt/cache", "fs": "xfs"}}}
    assert verdict_of({"steps": node_steps("delete", "gpu-3", cache)}).disruption == Disruption.DESTROYS_DATA
    assert verdict_of({"steps": node_steps("replace", "gpu-3", cache, cache)}).disruption == Disruption.DESTROYS_DATA
    # Without one, the node's jobs stop and nothing held is lost.
    bare = {"spec": {"node": "gpu-3", "cache": None}}
    assert verdict_of({"steps": node_steps("delete", "gpu-3", bare)}).disruption == Disruption.REPLACES_NODES


def _encoded(spec: dict) -> str:
    from railyard.drivers.lab.resources import encode_spec

    return encode_spec(spec)


def test_a_node_spec_held_as_one_json_string_is_reviewed_setting_by_setting():
    spec = {"node": "gpu-3", "cache": {"mount": "/mnt/cache", "fs": "xfs"}, "rails": [{"address": "198.19.0.2/19"}]}
    reformat = {**spec, "cache": {"mount": "/mnt/cache", "fs": "ext4"}}
    data = {"steps": node_steps("update", "gpu-3", {"spec": _encoded(spec)}, {"spec": _encoded(reformat)})}
    changes = preview.load(data, "s").steps[0].changes()
    assert [(preview.format_path(c.path), c.old, c.new) for c in changes] == [("spec.cache.fs", "xfs", "ext4")]
    assert preview.get_path({"spec": _encoded(spec)}, ("spec", "cache", "fs")) == "xfs"
    verdict = verdict_of(data)
    assert verdict.disruption == Disruption.DESTROYS_DATA and "spec.cache.fs reformats data" in verdict.why
    # Deleting a node whose string spec holds a cache loses the cache, as with a mapping.
    assert verdict_of({"steps": node_steps("delete", "gpu-3", {"spec": _encoded(spec)})}).disruption \
        == Disruption.DESTROYS_DATA
    readdress = {**spec, "rails": [{"address": "198.19.0.9/19"}]}
    changes = preview.load({"steps": node_steps("update", "gpu-3", {"spec": _encoded(spec)},
                                                {"spec": _encoded(readdress)})}, "s").steps[0].changes()
    assert [preview.format_path(c.path) for c in changes] == ["spec.rails[0].address"]


def test_a_node_spec_moving_from_a_mapping_to_a_string_is_no_change():
    spec = {"node": "gpu-3", "cache": None, "rails": [{"address": "198.19.0.2/19", "mtu": 4092}]}
    data = {"steps": node_steps("update", "gpu-3", {"spec": spec}, {"spec": _encoded(spec)})}
    assert preview.load(data, "s").steps[0].changes() == []
    # A string that is not JSON, or JSON that is not an object or array, stays a string.
    assert preview.decoded("{not json") == "{not json" and preview.decoded("[1]") == [1]
    assert preview.diff_values({"k": "12"}, {"k": "13"})[0].new == "13"


def test_the_storage_merged_into_its_node_leaves_state_only_and_destroys_nothing():
    from railyard.drivers.lab.resources import NodeProvider, NodeStorageProvider

    parent = urn(HGX, "gpu-1")
    old = {"__provider": _pickled(NodeStorageProvider()), "stack": "s", "node": "gpu-1",
           "spec": {"cache_mount": "/mnt/cache", "fs": "xfs"}}
    data = {"steps": [step("delete", NODE_HOST, "gpu-1-host-storage", parent, old=old)]}
    assert verdict_of(data).disruption == Disruption.IN_PLACE
    assert "merged into its node" in rules.classify_step("HgxNode", preview.load(data, "s").steps[0], ()).why
    # Any other provider's delete of a cache is what it says.
    other = {**old, "__provider": _pickled(NodeProvider())}
    assert verdict_of({"steps": [step("delete", NODE_HOST, "gpu-1-host-storage", parent, old=other)]}).disruption \
        == Disruption.DESTROYS_DATA
    masked = {**old, "__provider": SECRET}
    assert verdict_of({"steps": [step("delete", NODE_HOST, "gpu-1-host-storage", parent, old=masked)]}).disruption \
        == Disruption.DESTROYS_DATA


def test_replacing_or_deleting_a_node_replaces_nodes():
    assert verdict_of({"steps": node_steps("replace", "gpu-3", {"a": 1}, {"a": 1})}).disruption \
        == Disruption.REPLACES_NODES
    assert verdict_of({"steps": node_steps("delete", "gpu-3", {"a": 1})}).disruption == Disruption.REPLACES_NODES


def test_a_hugepage_boot_reservation_needs_a_reboot():
    parent = urn(TUNING, "c-tuning")
    old = {"hosts": {"gpu-0": {"vars": {"hugepages_per_node": {"0": 512}}}, "gpu-1": {"vars": {}}}}
    new = {"hosts": {"gpu-0": {"vars": {"hugepages_per_node": {"0": 614}}}, "gpu-1": {"vars": {}}}}
    data = {"steps": [step("update", f"{TUNING}$pulumi-python:dynamic:Resource", "c-tuning-run", parent, old, new)]}
    assert verdict_of(data).disruption == Disruption.NEEDS_REBOOT
    assert rules.classify_path("railyard:tuning.iommu").disruption == Disruption.NEEDS_REBOOT


def test_a_hypervisors_cpu_isolation_needs_a_reboot_in_either_mode():
    parent = urn(TUNING, "c-tuning")
    old = {"hosts": {"gpu-0": {"vars": {"cpu_isolation_mode": "kernel", "cpu_isolation_cpus": "6-55"}}}}
    new = {"hosts": {"gpu-0": {"vars": {"cpu_isolation_mode": "systemd", "cpu_isolation_cpus": "6-55"}}}}
    data = {"steps": [step("update", f"{TUNING}$pulumi-python:dynamic:Resource", "c-tuning-run", parent, old, new)]}
    assert verdict_of(data).disruption == Disruption.NEEDS_REBOOT
    assert rules.classify_path("railyard:nodePools[0].cpuIsolation").disruption == Disruption.NEEDS_REBOOT


LAYER = "railyard:index:Cluster$railyard:index:KubernetesLayer"


def test_an_sriov_policy_change_needs_a_reboot_and_a_label_or_quota_change_is_in_place():
    parent = urn(LAYER, "c-kubernetes")
    policy = f"{LAYER}$kubernetes:sriovnetwork.openshift.io/v1:SriovNetworkNodePolicy"
    data = {"steps": [step("update", policy, "c-kubernetes-sriovnetworknodepolicy-c-gpu-rail0", parent,
                           {"spec": {"numVfs": 2}}, {"spec": {"numVfs": 4}})]}
    v = verdict_of(data)
    assert v.disruption == Disruption.NEEDS_REBOOT and "drains" in v.why
    node = f"{LAYER}$kubernetes:core/v1:Node"
    queue = f"{LAYER}$kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
    data = {"steps": [
        step("update", node, "c-kubernetes-node-gpu-0", parent, {"metadata": {"labels": {"railyard.io/su": "gpu-su0"}}},
             {"metadata": {"labels": {"railyard.io/su": "gpu-su1"}}}),
        step("update", queue, "c-kubernetes-clusterqueue-c-vision", parent,
             {"spec": {"resourceGroups": [{"flavors": [{"resources": [{"nominalQuota": "32"}]}]}]}},
             {"spec": {"resourceGroups": [{"flavors": [{"resources": [{"nominalQuota": "16"}]}]}]}})]}
    units = render.units_of(preview.load(data, "s"))
    assert {u.kind for u in units} == {"KubernetesLayer"}
    assert verdict_of(data).disruption == Disruption.IN_PLACE


def test_a_drift_line_on_boot_settings_needs_a_reboot_and_others_do_not():
    assert rules.classify_line("gpu-0: node0 hugepages-1G 0 → 700").disruption == Disruption.NEEDS_REBOOT
    assert rules.classify_line("gpu-0: /etc/nccl.conf old content → new content").disruption == Disruption.IN_PLACE


def test_a_new_file_system_on_the_cache_destroys_data_and_a_new_sku_replaces_nodes():
    assert rules.classify_path("railyard:storage.localCache.fs").disruption == Disruption.DESTROYS_DATA
    assert rules.classify_path("hosts.*.vars.dataset_cache_fstype").disruption == Disruption.DESTROYS_DATA
    assert rules.classify_path("railyard:nodePools[0].sku").disruption == Disruption.REPLACES_NODES


def test_creates_and_plain_updates_are_in_place():
    assert verdict_of({"steps": node_steps("create", "gpu-9", new={"a": 1})}).disruption == Disruption.IN_PLACE
    assert verdict_of({"steps": node_steps("update", "gpu-9", {"mgmt": "a"}, {"mgmt": "b"})}).disruption \
        == Disruption.IN_PLACE


def test_the_worst_class_wins_and_the_order_is_the_documented_one():
    assert [d.label for d in sorted(Disruption)] == ["in place", "needs a reboot", "replaces nodes", "destroys data"]


# --- which stacks a change touches ------------------------------------------------------------------

DRIVERS = {"lab": "lab", "lab-virtual": "lab", "us-east-bm": "coreweave", "us-south-vela": "openstack"}


def touched(*files: str) -> set[str]:
    return set(rules.touched_stacks(files, DRIVERS, {"lab"}))


def test_a_stack_file_touches_only_its_stack_whatever_its_driver():
    assert touched("stacks/Pulumi.us-east-bm.yaml") == {"us-east-bm"}
    assert touched("stacks/Pulumi.lab.yaml") == {"lab"}


def test_program_code_touches_every_stack_whose_driver_runs():
    for f in ("components/cluster.py", "__main__.py", "railyard/model/plan.py", "playbooks/site.yml",
              "templates/inventory.yml.j2", "Pulumi.yaml"):
        assert touched(f) == {"lab", "lab-virtual"}, f


def test_a_driver_touches_only_its_own_stacks():
    assert touched("railyard/drivers/lab/node/lifecycle.py") == {"lab", "lab-virtual"}
    assert touched("railyard/drivers/coreweave/driver.py") == set()


def test_cli_docs_and_tests_touch_nothing():
    assert touched("railyard/commands/review.py", "railyard/review/render.py", "docs/review.md", "tests/x.py",
                   ".github/workflows/deploy.yml", "railyard/drivers/lab/cli.py") == set()


def test_the_reason_names_what_changed():
    why = rules.touched_stacks(["stacks/Pulumi.lab.yaml", "components/a.py"], DRIVERS, {"lab"})
    assert why["lab"] == "stacks/Pulumi.lab.yaml changed"
    assert why["lab-virtual"] == "code it runs changed (components/a.py)"


# --- folding, values, secrets ----------------------------------------------------------------------

def test_440_nodes_with_one_change_take_one_line():
    steps = []
    for i in range(443):
        steps += node_steps("update", f"gpu-{i}", {"sku": "x", "rack": "a"}, {"sku": "x", "rack": "b"})
    text = render.render([render.StackReview("s", "test", preview.load({"steps": steps}, "s"))])
    assert "`gpu-0`, `gpu-1`, `gpu-2` … and 440 more nodes, the same change" in text, text
    assert text.count("`host: rack`") + text.count("`rack`") == 1, text


def test_nodes_changing_the_same_property_to_their_own_values_are_folded_with_a_count():
    steps = []
    for i in range(10):
        steps += node_steps("update", f"gpu-{i}", {"ip": f"10.0.0.{i}/24"}, {"ip": f"10.0.0.{i}/25"})
    text = render.render([render.StackReview("s", "test", preview.load({"steps": steps}, "s"))])
    assert "… and 9 more nodes changing the same properties, each with its own values" in text, text


def test_identical_per_node_settings_inside_one_resource_fold():
    parent = urn(TUNING, "c-tuning")
    old = {"hosts": {f"gpu-{i}": {"vars": {"hugepages_per_node": {"0": 512}}} for i in range(6)}}
    new = {"hosts": {f"gpu-{i}": {"vars": {"hugepages_per_node": {"0": 410}}} for i in range(6)}}
    data = {"steps": [step("update", f"{TUNING}$pulumi-python:dynamic:Resource", "c-tuning-run", parent, old, new)]}
    text = render.render([render.StackReview("s", "test", preview.load(data, "s"))])
    assert "`hosts.*.vars.hugepages_per_node.0`: `512` → `410` on `gpu-0`, `gpu-1`, `gpu-2` … and 3 more nodes" \
        in text, text


def test_drift_lines_fold_by_setting_across_nodes():
    diags = [{"urn": urn(TUNING, "c-tuning"), "severity": "info", "message": f"gpu-{i}: node0 hugepages-1G 0 → 700\n"}
             for i in range(5)]
    text = render.render([render.StackReview("s", "test", preview.load({"steps": [], "diagnostics": diags}, "s"))])
    assert "`node0 hugepages-1G 0 → 700` on `gpu-0`, `gpu-1`, `gpu-2` … and 2 more nodes" in text, text
    assert "**needs a reboot**" in text


def test_replacements_and_deletions_come_first():
    steps = node_steps("create", "gpu-5", new={"a": 1}) + node_steps("update", "gpu-1", {"a": 1}, {"a": 2}) \
        + node_steps("delete", "gpu-2", old={"a": 1})
    text = render.render([render.StackReview("s", "test", preview.load({"steps": steps}, "s"))])
    assert text.index("**Replaced or deleted**") < text.index("**Updated**") < text.index("**Created**")


def test_values_show_unknowns_secrets_and_absence_and_never_a_key():
    assert render.value(UNKNOWN) == "(known after up)"
    assert render.value(SECRET) == SECRET
    assert render.value(MISSING) == "(none)"
    assert render.value("-----BEGIN OPENSSH PRIVATE KEY-----\nabc") == SECRET
    assert render.value("x" * 100).startswith("`xxx") and "…" in render.value("x" * 100)


def test_secret_inputs_stay_masked_in_the_comment():
    old = {"private_key": SECRET, "user": "root"}
    new = {"private_key": SECRET, "user": "admin"}
    data = {"steps": node_steps("update", "gpu-0", old, new)}
    text = render.render([render.StackReview("s", "test", preview.load(data, "s"))])
    assert "private_key" not in text  # unchanged as far as anyone can tell: the engine masks both sides
    secure = rules.config_changes({"config": {"k": {"secure": "v1:aaa"}}}, {"config": {"k": {"secure": "v1:bbb"}}})
    assert secure == [("k", SECRET, f"{SECRET} (changed)")]


def test_the_driver_stop_is_reported_not_raised():
    data = {"steps": [], "diagnostics": [
        {"severity": "error", "message": "error: Pulumi.x.yaml: railyard:driver 'coreweave' is validated but not "
                                         "implemented yet: `up` stops here and nothing was created.\n"},
        {"severity": "error", "message": "error: an unhandled error occurred: program exited with non-zero exit code: 1\n"},
    ]}
    text = render.render([render.StackReview("x", "test", preview.load(data, "x"))])
    assert "- **`x`**: not previewed: railyard:driver `coreweave` is not implemented yet" in text, text
    assert "unhandled error" not in text


def test_a_protected_resource_in_the_way_says_how_to_proceed():
    msg = ('error: Preview failed: resource "urn:pulumi:s::railyard::a$b::gpu-1-host" cannot be deleted\n'
           "because it is protected. To unprotect the resource, ...")
    data = {"steps": node_steps("delete", "gpu-1", old={"a": 1}), "diagnostics": [{"severity": "error", "message": msg}]}
    text = render.render([render.StackReview("s", "test", preview.load(data, "s"))])
    assert "**preview failed**, `up` would fail too: gpu-1-host is protected (a long-lived stack)" in text, text
    assert "pulumi state unprotect" in text


def test_property_paths_round_trip():
    for text in ("a.b[0].c", 'hosts["gpu-0"].vars', "railyard:tuning.hugepages"):
        assert preview.format_path(preview.parse_path(text)).replace('["gpu-0"]', ".gpu-0") \
            == text.replace('["gpu-0"]', ".gpu-0")


def test_a_comment_stays_within_what_github_accepts():
    reviews = []
    for k in range(40):
        steps = []
        for i in range(60):
            # A property of its own per node: nothing folds, as in the worst case.
            steps += node_steps("update", f"n{k}-{i}", {f"p{i}": f"10.{k}.0.{i}/24"}, {f"p{i}": f"10.{k}.1.{i}/24"})
        reviews.append(render.StackReview(f"s{k}", "test", preview.load({"steps": steps}, f"s{k}")))
    text = render.render(reviews)
    assert len(text) <= 65536
    assert text.count("\n- **`s") == 40, "every stack keeps its summary line"
    assert "do not fit in one comment; `make review` prints them" in text


def test_a_stack_whose_machines_the_platform_tunes_says_acceptance_is_not_run():
    from railyard.commands.review import checked_by_acceptance

    cw = {"config": {"railyard:driver": "coreweave"}}
    assert not checked_by_acceptance(cw) and checked_by_acceptance({"config": {"railyard:driver": "lab"}})
    line = render.summary_line(render.StackReview("us-east-bm", "test", skipped="not in this backend",
                                                  notes=["acceptance: not run by this driver"]))
    assert line == "- **`us-east-bm`**: not previewed: not in this backend · acceptance: not run by this driver"
