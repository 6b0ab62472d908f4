"""The stack spec: parsing, defaults and every validation rule, each test named for its rule."""

from __future__ import annotations

import copy
import ipaddress
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from railyard.model import addressing
from railyard.model.catalog import load_catalog
from railyard.model.errors import Problem, SpecError
from railyard.drivers.lab.rules import LAB_RANGE
from railyard.model.spec import (
    KEYS, NAMESPACE, Ephemeral, Secret, Spec, host_reserve_threads, os_reserve_gib, parse_ttl, stack_name_of,
)
from railyard.stack import documented_keys, from_config, load_stack_file
from tests.unit.model.model_only import parse_config

ROOT = Path(__file__).resolve().parents[3]
STACKS = ROOT / "stacks"
BAD = Path(__file__).resolve().parents[1] / "data" / "bad_stacks"
SHIPPED = ("lab", "lab-virtual", "lab-virtual-dgx", "us-east-bm", "us-south-vela")


def bad_files() -> list[Path]:
    return sorted(BAD.glob("*.yaml"))


def expectations(path: Path) -> dict[str, list[str]]:
    """The `# rule:`, `# expect:`, `# expect-line:`, `# expect-file:` and `# not-shown:` header lines."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^# ([a-z-]+): (.*)$", line)
        if not m:
            break
        out.setdefault(m.group(1), []).append(m.group(2).strip())
    return out


def problems_of(config: dict, stack: str = "test") -> list[Problem]:
    with pytest.raises(SpecError) as err:
        parse_config(config, stack=stack)
    return list(err.value.problems)


def paths_of(config: dict) -> list[str]:
    return [p.path for p in problems_of(config)]


def minimal(layout: str = "bare-metal") -> dict:
    """The smallest valid config of each layout: every other key takes its default."""
    if layout == "virtual":
        return {
            "railyard:region": "lab",
            "railyard:layout": "virtual",
            "railyard:driver": "lab",
            "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 2}],
            "railyard:fabric": {"compute": {"kind": "infiniband"}},
        }
    return {
        "railyard:region": "lab",
        "railyard:layout": "bare-metal",
        "railyard:driver": "lab",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 2}],
        "railyard:fabric": {"compute": {"kind": "infiniband"}},
    }


def with_(config: dict, key: str, value) -> dict:
    """A copy of config with railyard:<key> set; key is dotted, list items written `name[i]`."""
    out = copy.deepcopy(config)
    steps: list = []
    for i, part in enumerate(key.split(".")):
        name, index = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", part).groups()
        steps.append(f"{NAMESPACE}:{name}" if i == 0 else name)
        if index is not None:
            steps.append(int(index))
    node = out
    for step in steps[:-1]:
        node = node.setdefault(step, {}) if isinstance(step, str) else node[step]
    node[steps[-1]] = value
    return out


# --------------------------------------------------------------------------------------------------
# The malformed stack files: each names its rule and the config path that must be reported.


def test_there_are_at_least_30_malformed_stack_files():
    assert len(bad_files()) >= 30


@pytest.mark.parametrize("path", bad_files(), ids=lambda p: p.stem)
def test_malformed_stack_file_is_rejected_with_the_path_of_the_offending_key(path):
    expect = expectations(path)
    assert expect.get("rule"), f"{path.name} must state its rule in a '# rule:' line"
    assert set(expect) & {"expect", "expect-line", "expect-file"}, f"{path.name} must state what it expects"
    with pytest.raises(SpecError) as err:
        load_stack_file(path)
    paths = err.value.paths()
    for want in expect.get("expect", []):
        assert want in paths, f"{path.name}: expected a problem at {want}, got {paths}"
    for line in expect.get("expect-line", []):
        assert any(re.match(rf"^{re.escape(str(path))}:{line}:\d+$", p) for p in paths), \
            f"{path.name}: expected a problem at line {line}, got {paths}"
    if expect.get("expect-file"):
        assert any(p.startswith(str(path)) for p in paths), paths
    for secret in expect.get("not-shown", []):
        assert secret not in str(err.value), f"{path.name}: a secret was echoed"
    for problem in err.value.problems:
        assert problem.found and problem.allowed, problem


# --------------------------------------------------------------------------------------------------
# The shipped stacks


@pytest.mark.parametrize("stack", SHIPPED)
def test_shipped_stack_validates(stack):
    spec = load_stack_file(STACKS / f"Pulumi.{stack}.yaml")
    assert spec.stack == stack


def test_lab_stack_is_two_dgx_h100_bare_metal_on_ndr_infiniband():
    spec = load_stack_file(STACKS / "Pulumi.lab.yaml")
    assert (spec.layout, spec.driver) == ("bare-metal", "lab")
    assert [(p.sku, p.count) for p in spec.node_pools] == [("dgx-h100", 2)]
    c = spec.fabric.compute
    assert (c.kind, c.speed, c.switch, c.topology) == ("infiniband", "ndr", "qm9700", "rail-optimized")


def test_lab_virtual_stack_runs_one_8_gpu_vm_per_vela_host():
    spec = load_stack_file(STACKS / "Pulumi.lab-virtual.yaml")
    assert (spec.layout, spec.driver) == ("virtual", "lab")
    (pool,) = spec.node_pools
    assert (pool.sku, pool.count, pool.vms_per_host, pool.vm.gpus) == ("vela-a100", 2, 1, 8)
    assert spec.tuning.sriov.enabled


def test_us_east_bm_stack_has_3584_gpus_on_ndr_rail_optimized_infiniband():
    spec = load_stack_file(STACKS / "Pulumi.us-east-bm.yaml")
    catalog = load_catalog()
    gpus = sum(p.count * len_or_int(catalog.nodes[p.sku].gpus) for p in spec.node_pools)
    assert gpus == 3584
    assert (spec.layout, spec.driver, spec.region) == ("bare-metal", "coreweave", "us-east-04")
    assert (spec.fabric.compute.kind, spec.fabric.compute.speed) == ("infiniband", "ndr")


def test_us_south_vela_stack_is_virtual_vela_over_roce_on_sn5600_with_openstack():
    spec = load_stack_file(STACKS / "Pulumi.us-south-vela.yaml")
    assert (spec.layout, spec.driver) == ("virtual", "openstack")
    assert {p.sku for p in spec.node_pools} == {"vela-a100"}
    assert (spec.fabric.compute.kind, spec.fabric.compute.switch) == ("roce", "sn5600")



@pytest.mark.parametrize("stack", ("lab", "lab-virtual"))
def test_lab_stacks_take_every_address_from_198_18_0_0_15(stack):
    spec = load_stack_file(STACKS / f"Pulumi.{stack}.yaml")
    for net in (spec.fabric.compute.cidr, spec.fabric.storage.cidr, spec.fabric.management.cidr):
        assert net.subnet_of(LAB_RANGE), net


@pytest.mark.parametrize("stack", ("lab", "lab-virtual"))
def test_lab_stacks_commit_their_passphrase_salt(stack):
    # Lab stacks use the empty passphrase; committing the salt keeps a fresh clone's stack file unchanged.
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    assert str(document.get("encryptionsalt", "")).startswith("v1:")


def len_or_int(x) -> int:
    return x if isinstance(x, int) else len(x)


# --------------------------------------------------------------------------------------------------
# Defaults: every optional key has the documented default


def test_defaults_of_a_minimal_bare_metal_stack():
    spec = parse_config(minimal(), stack="t")
    c = spec.fabric.compute
    assert (c.speed, c.switch, c.topology, c.oversubscription, c.reserved_leaf_ports) == \
        ("ndr", "qm9700", "rail-optimized", 1, 0)
    assert c.cidr == ipaddress.ip_network("198.19.0.0/16")
    assert c.asn_base is None
    assert spec.fabric.storage.cidr == ipaddress.ip_network("198.18.32.0/20")
    assert spec.fabric.management.cidr == ipaddress.ip_network("198.18.0.0/20")
    assert spec.tenants == ()
    assert spec.storage.object is None and spec.storage.parallel_fs is None
    lc = spec.storage.local_cache
    assert (lc.mount, lc.raid, lc.fs) == ("/mnt/cache", "raid0", "xfs")
    hp = spec.tuning.hugepages
    assert (hp.size, hp.percent_of_memory, hp.count, hp.per_numa) == ("1G", 0, None, True)
    assert spec.tuning.sriov.vfs_per_pf == 0
    assert spec.tuning.affinity.policy == "pcie-nearest"
    assert spec.tuning.iommu == "passthrough"
    assert spec.tuning.preview_drift is False
    assert spec.ephemeral is None
    assert spec.node_pools[0].vms_per_host == 0 and spec.node_pools[0].vm is None


def test_roce_defaults_to_400gbe_on_sn5600_with_the_private_asn_base():
    config = with_(minimal(), "fabric.compute", {"kind": "roce"})
    config["railyard:nodePools"][0]["sku"] = "dgx-h100"
    spec = parse_config(config, stack="t")
    assert (spec.fabric.compute.speed, spec.fabric.compute.switch) == ("400gbe", "sn5600")
    assert spec.fabric.compute.asn_base == 4_200_000_000


def test_virtual_defaults_split_the_host_evenly_after_the_hypervisor_reserve():
    catalog = load_catalog()
    sku = catalog.nodes["dgx-h100"]
    config = with_(minimal("virtual"), "nodePools", [{"name": "gpu", "sku": "dgx-h100", "count": 2, "vmsPerHost": 2}])
    spec = parse_config(config, stack="t")
    pool = spec.node_pools[0]
    assert pool.vms_per_host == 2
    assert pool.vm.gpus == len_or_int(sku.gpus) // 2
    assert pool.vm.memory_gib == int((sku.memory_gib - os_reserve_gib(sku.memory_gib)) // 2)
    compute_nics = [n for n in sku.nics if n.role == "compute"]
    assert pool.vm.vfs == len(compute_nics)
    # SR-IOV defaults on, with just enough VFs per PF for every VM's VFs.
    assert spec.tuning.sriov.vfs_per_pf * len(compute_nics) >= 2 * pool.vm.vfs


def test_vm_shape_takes_its_size_from_the_catalog():
    catalog = load_catalog()
    shape_id, shape = next(iter(catalog.vm_shapes.items()))
    config = with_(minimal("virtual"), "nodePools",
                   [{"name": "gpu", "sku": "dgx-h100", "count": 1, "vm": {"shape": shape_id}}])
    try:
        spec = parse_config(config, stack="t")
    except SpecError as exc:  # the shape may not fit a dgx-h100; then it must say so at vm.shape
        assert all(p.path.endswith("vm.shape") for p in exc.problems), exc
        return
    vm = spec.node_pools[0].vm
    assert (vm.shape, vm.vcpus, vm.memory_gib) == (shape_id, shape.vcpus, shape.memory_gib)


def test_ephemeral_without_ttl_defaults_to_8h():
    spec = parse_config(with_(minimal(), "ephemeral", {}), stack="t")
    assert spec.ephemeral == Ephemeral(ttl="8h", ttl_seconds=8 * 3600)


def test_protect_is_kept_as_written_and_absent_is_none():
    assert parse_config(minimal(), stack="t").protect is None
    assert parse_config(with_(minimal(), "protect", True), stack="t").protect is True
    assert parse_config(with_(minimal(), "protect", False), stack="t").protect is False
    # How Pulumi writes a top-level scalar back (`pulumi config set`, `stack init`): a string.
    assert parse_config(with_(minimal(), "protect", "true"), stack="t").protect is True
    assert parse_config(with_(minimal(), "protect", "false"), stack="t").protect is False


def test_protect_must_be_a_boolean():
    problems = problems_of(with_(minimal(), "protect", "yes"))
    assert [(p.path, p.allowed) for p in problems] == [("railyard:protect", "true or false")]


def test_a_protected_ephemeral_stack_is_refused_since_the_reaper_never_unprotects():
    config = with_(with_(minimal(), "protect", True), "ephemeral", {"ttl": "1h"})
    [problem] = problems_of(config)
    assert problem.path == "railyard:protect" and "never reaped" in problem.hint
    assert parse_config(with_(with_(minimal(), "protect", False), "ephemeral", {}), stack="t").protect is False


@pytest.mark.parametrize("text,seconds", [("30m", 1800), ("8h", 28800), ("2d", 172800), (" 1h ", 3600)])
def test_ttl_is_parsed_to_seconds(text, seconds):
    assert parse_ttl(text) == seconds


@pytest.mark.parametrize("text", ["0h", "8", "h", "8w", "1.5h", "-1h", ""])
def test_ttl_rejects_anything_but_a_positive_count_of_m_h_or_d(text):
    with pytest.raises(ValueError):
        parse_ttl(text)


def test_os_reserve_is_the_larger_of_16_gib_and_a_tenth_of_memory():
    assert os_reserve_gib(64) == 16
    assert os_reserve_gib(2048) == pytest.approx(204.8)


def test_host_keeps_the_larger_of_4_threads_and_a_tenth_of_its_threads():
    assert host_reserve_threads(16) == 4
    assert host_reserve_threads(224) == 23


# --------------------------------------------------------------------------------------------------
# Pulumi's own keys and secrets


def test_pulumi_keys_and_other_namespaces_pass_untouched():
    config = minimal()
    config.update({
        "kubernetes:context": "kind-lab",
        "aws:region": {"secure": "AAAA"},
        "other:anything": [1, {"x": None}],
    })
    spec = parse_config(config, stack="t")
    assert spec.region == "lab"


def test_top_level_pulumi_keys_of_a_stack_file_pass_untouched(tmp_path):
    document = {
        "encryptionsalt": "v1:abc:def",
        "secretsprovider": "passphrase",
        "environment": ["team-env"],
        "config": minimal(),
    }
    path = tmp_path / "Pulumi.edge.yaml"
    path.write_text(yaml.safe_dump(document))
    assert load_stack_file(path).stack == "edge"


def test_secret_credentials_are_kept_opaque_and_never_rendered():
    ciphertext = "AAABAJ7Ymdgm0xJ8lq1pzX7TvxmBFY2zdbqq"
    config = with_(minimal(), "storage", {"object": {"bucket": "datasets", "credentials": {"secure": ciphertext}}})
    spec = parse_config(config, stack="t")
    creds = spec.storage.object.credentials
    assert isinstance(creds, Secret) and creds.ciphertext == ciphertext
    assert ciphertext not in repr(spec) and ciphertext not in str(creds)


def test_a_secret_where_a_plain_value_belongs_is_rejected_without_showing_it():
    ciphertext = "AAABAJ7Ymdgm0xJ8lq1pzX7TvxmBFY2zdbqq"
    problems = problems_of(with_(minimal(), "fabric.compute.speed", {"secure": ciphertext}))
    assert [p.path for p in problems] == ["railyard:fabric.compute.speed"]
    assert ciphertext not in str(SpecError(problems))


def test_empty_credentials_mean_driver_issued():
    spec = parse_config(with_(minimal(), "storage", {"object": {"credentials": ""}}), stack="t")
    assert spec.storage.object.credentials is None and spec.storage.object.bucket == "datasets"


# --------------------------------------------------------------------------------------------------
# Rules on single fields


def test_unknown_railyard_key_gets_a_did_you_mean_hint():
    config = minimal()
    config["railyard:fabrik"] = {}
    (problem,) = problems_of(config)
    assert problem.path == "railyard:fabrik"
    assert "did you mean railyard:fabric" in problem.hint


def test_unknown_nested_key_gets_a_did_you_mean_hint():
    (problem,) = problems_of(with_(minimal(), "tuning", {"hugepages": {"percentOfMem": 10}}))
    assert problem.path == "railyard:tuning.hugepages.percentOfMem"
    assert "percentOfMemory" in problem.hint


def test_snake_case_key_is_matched_to_its_camel_case_name():
    (problem,) = problems_of(with_(minimal(), "fabric.compute.reserved_leaf_ports", 2))
    assert "reservedLeafPorts" in problem.hint


def test_dotted_top_level_key_is_told_to_nest():
    config = minimal()
    config["railyard:tuning.iommu"] = "on"
    (problem,) = problems_of(config)
    assert problem.path == "railyard:tuning.iommu" and "nest it" in problem.hint


def test_unknown_sku_lists_every_valid_id():
    catalog = load_catalog()
    config = minimal()
    config["railyard:nodePools"][0]["sku"] = "no-such-node"
    (problem,) = problems_of(config)
    assert problem.path == "railyard:nodePools[0].sku"
    for sku in catalog.nodes:
        assert sku in problem.allowed


def test_unknown_switch_lists_every_valid_id():
    catalog = load_catalog()
    (problem,) = problems_of(with_(minimal(), "fabric.compute.switch", "nope"))
    for switch in catalog.switches:
        assert switch in problem.allowed


@pytest.mark.parametrize("count", [0, -3, 1.5, True, "2", None])
def test_counts_are_positive_integers(count):
    config = minimal()
    config["railyard:nodePools"][0]["count"] = count
    assert "railyard:nodePools[0].count" in paths_of(config)


@pytest.mark.parametrize("name", ["GPU", "gpu_pool", "-gpu", "gpu-", "g" * 64, "", "gpü"])
def test_pool_names_are_dns_labels(name):
    config = minimal()
    config["railyard:nodePools"][0]["name"] = name
    assert "railyard:nodePools[0].name" in paths_of(config)


@pytest.mark.parametrize("speed,kind", [("ndr", "infiniband"), ("hdr", "infiniband"), ("400gbe", "roce"),
                                        ("200gbe", "roce"), ("100gbe", "roce")])
def test_speed_of_the_other_kind_is_rejected(speed, kind):
    other = "roce" if kind == "infiniband" else "infiniband"
    paths = paths_of(with_(minimal(), "fabric.compute", {"kind": other, "speed": speed}))
    assert "railyard:fabric.compute.speed" in paths


def test_hdr_runs_on_qm8700():
    spec = parse_config(with_(minimal(), "fabric.compute", {"kind": "infiniband", "speed": "hdr",
                                                             "switch": "qm8700"}), stack="t")
    assert spec.fabric.compute.speed_gbps == 200


def test_ndr_does_not_run_on_qm8700():
    paths = paths_of(with_(minimal(), "fabric.compute", {"kind": "infiniband", "speed": "ndr", "switch": "qm8700"}))
    assert "railyard:fabric.compute.speed" in paths


@pytest.mark.parametrize("pkey", ["0x0001", "0x7ffe", "0x8001", "0xfffe", "0x1A2b"])
def test_pkeys_in_range_are_accepted_in_both_membership_forms(pkey):
    spec = parse_config(with_(minimal(), "tenants", [{"name": "t", "pkey": pkey}]), stack="t")
    (tenant,) = spec.tenants
    assert tenant.pkey == int(pkey, 16)
    assert tenant.full_membership == (int(pkey, 16) >= 0x8000)


@pytest.mark.parametrize("pkey", ["0x0000", "0x8000", "0x7fff", "0xffff", "0x10000", "8001", "0x", 32769, True])
def test_pkeys_outside_the_valid_range_are_rejected(pkey):
    assert "railyard:tenants[0].pkey" in paths_of(with_(minimal(), "tenants", [{"name": "t", "pkey": pkey}]))


def test_yaml_on_and_off_read_as_iommu_modes():
    assert parse_config(with_(minimal(), "tuning.iommu", True), stack="t").tuning.iommu == "on"
    assert parse_config(with_(minimal(), "tuning.iommu", False), stack="t").tuning.iommu == "off"


@pytest.mark.parametrize("cidr", ["198.18.0.0", "198.18.0.0/33", "not-a-net", "fd00::/64", "198.18.0.1/20", 5])
def test_cidrs_must_be_ipv4_networks_with_a_prefix_and_no_host_bits(cidr):
    assert "railyard:fabric.management.cidr" in paths_of(with_(minimal(), "fabric.management", {"cidr": cidr}))


def test_mounts_of_cache_and_parallel_fs_must_not_nest():
    config = with_(minimal(), "storage", {"parallelFs": {"mount": "/mnt"}, "localCache": {"mount": "/mnt/cache"}})
    assert "railyard:storage.localCache.mount" in paths_of(config)


# Issue 38: the examples of a mount over the system, each refused at the key that set it.
SYSTEM_MOUNTS = ["/", "/etc", "/usr/local", "/boot", "/var/lib", "/var", "/proc/cache", "/sys/fs/pfs", "/home",
                 "/root/cache", "/lib64", "/mnt/../etc", "/mnt//cache", "/mnt/cache/.", "/srv/pfs/../../usr"]


@pytest.mark.parametrize("key", ["localCache", "parallelFs"])
@pytest.mark.parametrize("mount", SYSTEM_MOUNTS)
def test_a_cache_or_parallel_fs_mounted_over_the_system_is_refused_at_its_key(key, mount):
    config = with_(minimal(), "storage", {key: {"mount": mount}})
    (problem,) = [p for p in problems_of(config) if p.path == f"railyard:storage.{key}.mount"]
    assert problem.found == repr(mount) and "normalized path outside the system's directories" in problem.allowed
    assert any(w in problem.hint for w in ("operating system lives in", "root file system", "not normalized")), problem


@pytest.mark.parametrize("key", ["localCache", "parallelFs"])
@pytest.mark.parametrize("mount", ["/mnt/data", "/srv/cache", "/scratch", "/lustre", "/data"])
def test_mnt_srv_and_new_top_level_mount_points_are_accepted(key, mount):
    spec = parse_config(with_(minimal(), "storage", {key: {"mount": mount}}), stack="t")
    tier = spec.storage.local_cache if key == "localCache" else spec.storage.parallel_fs
    assert tier.mount == mount


@pytest.mark.parametrize("count", [10 ** 9, 10 ** 30, 1e9, 1e100, float("inf"), 100_001])
def test_an_absurd_pool_count_is_named_at_its_key_with_a_readable_bound(count):
    (problem,) = problems_of(with_(minimal(), "nodePools[0].count", count))
    assert problem.path == "railyard:nodePools[0].count"
    assert problem.allowed == "an integer >= 1 and <= 100000" and not problem.hint, problem


def test_the_largest_pool_count_is_left_to_the_fabric_and_the_networks_to_refuse_in_words():
    problems = problems_of(with_(minimal(), "nodePools[0].count", 100_000))
    assert "railyard:nodePools[0].count" not in [p.path for p in problems]
    assert any(p.path == "railyard:fabric.compute" and "at most about" in p.allowed for p in problems), problems
    assert not any("/-" in str(p) for p in problems), problems


def test_an_oversubscription_past_half_the_leaf_is_refused_as_the_plan_would_not_be_it():
    assert parse_config(with_(minimal(), "fabric.compute.oversubscription", 32), stack="t")
    (problem,) = problems_of(with_(minimal(), "fabric.compute.oversubscription", 33))
    assert (problem.path, problem.allowed) == ("railyard:fabric.compute.oversubscription", "1..32")
    assert "qm9700 leaf has 64 ports, 32 of them down to nodes" in problem.hint


def _integer_keys() -> list[tuple[str, str]]:
    """(stack, config path) of every integer the spec and the drivers read from the shipped stacks,
    found by watching both readers parse them: a key added later is covered without being listed."""
    from railyard.model.spec import load as spec_load, section

    seen: dict[str, str] = {}
    originals = spec_load._Parser.integer, section.SectionReader.integer

    def watch(original):
        def integer(self, m, key, path, *args, **kwargs):
            seen.setdefault(path, current)
            return original(self, m, key, path, *args, **kwargs)
        return integer

    spec_load._Parser.integer, section.SectionReader.integer = map(watch, originals)
    try:
        for current in SHIPPED + ("lab-k8s", "onprem-dgx"):
            load_stack_file(STACKS / f"Pulumi.{current}.yaml")
    finally:
        spec_load._Parser.integer, section.SectionReader.integer = originals
    # One host or rail of a list stands for the rest.
    return sorted((stack, path) for path, stack in seen.items()
                  if not re.search(r"\[[1-9]\d*\]", path.replace("nodePools[", "pools(")))


def _set(config: dict, path: str, value) -> dict:
    out = copy.deepcopy(config)
    steps: list = []
    for part in path.split("."):
        name, indexes = re.fullmatch(r"([\w:-]+)((?:\[\d+\])*)", part).groups()
        steps += [name, *map(int, re.findall(r"\d+", indexes))]
    node = out
    for step in steps[:-1]:
        node = node[step] if isinstance(step, int) else node.setdefault(step, {})
    node[steps[-1]] = value
    return out


def test_every_integer_key_of_the_shipped_stacks_is_watched():
    paths = [p for _, p in _integer_keys()]
    for key in ("railyard:nodePools[0].count", "railyard:tuning.sriov.vfsPerPf", "railyard:hosts.reboot.timeoutSeconds",
                "railyard:openstack.rootDiskGiB", "railyard:coreweave.pools.h100.maxNodes"):
        assert key in paths


@pytest.mark.parametrize("stack, path", _integer_keys())
@pytest.mark.parametrize("value", [10 ** 30, -10 ** 9, 1e100])
def test_every_absurd_integer_is_refused_at_its_own_key_in_words(stack, path, value):
    config = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())["config"]
    with pytest.raises(SpecError) as err:
        from_config(_set(config, path, value), stack)
    mine = [p for p in err.value.problems if p.path == path or p.path == path.rsplit(".", 1)[0]]
    assert mine, f"{path}={value!r}: nothing at its key, only {err.value.paths()}"
    for problem in err.value.problems:
        text = str(problem).replace(str(value), "")
        assert "/-" not in text and not re.search(r"\d{16,}", text), f"{path}={value!r}: {problem}"


def _onprem_with_pfs(pfs: dict) -> dict:
    config = copy.deepcopy(yaml.safe_load((STACKS / "Pulumi.onprem-dgx.yaml").read_text())["config"])
    config["railyard:storage"]["parallelFs"] = pfs
    return config


@pytest.mark.parametrize("kind,source", [
    ("lustre", "10.0.0.1@o2ib:/lustre"), ("lustre", "10.0.0.1@o2ib,10.0.1.1@o2ib:10.0.0.2@o2ib:/scratch/ds"),
    ("nfs", "nfs.example.com:/datasets"), ("nfs", "[fd00::1]:/export"), ("weka", "backend-1/default"),
    ("gpfs", "fs1"),
])
def test_a_parallel_fs_source_of_its_kinds_shape_is_taken_as_written(kind, source):
    spec = parse_config(_onprem_with_pfs({"kind": kind, "mount": "/mnt/pfs", "source": source}), stack="onprem-dgx")
    assert (spec.storage.parallel_fs.source, spec.storage.parallel_fs.options) == (source, "")


@pytest.mark.parametrize("kind,source", [
    ("lustre", "nfs.example.com:/datasets"), ("lustre", "10.0.0.1@o2ib:/name-too-long"), ("nfs", "server/export"),
    ("nfs", "server:/a b"), ("weka", "a/b/c"), ("gpfs", "/dev/fs1"),
])
def test_a_parallel_fs_source_not_of_its_kinds_shape_names_the_kinds_form(kind, source):
    problems = problems_of(_onprem_with_pfs({"kind": kind, "source": source}), stack="onprem-dgx")
    [p] = [p for p in problems if p.path == "railyard:storage.parallelFs.source"]
    assert f"for {kind}, " in p.allowed


def test_parallel_fs_options_are_a_comma_list_and_never_given_for_gpfs():
    spec = parse_config(_onprem_with_pfs({"kind": "nfs", "source": "s:/x", "options": "vers=4.2,nconnect=8"}),
                        stack="onprem-dgx")
    assert spec.storage.parallel_fs.options == "vers=4.2,nconnect=8"
    for kind, source, options in [("nfs", "s:/x", "vers=4.2, hard"), ("gpfs", "fs1", "noatime")]:
        problems = problems_of(_onprem_with_pfs({"kind": kind, "source": source, "options": options}),
                               stack="onprem-dgx")
        assert [p.path for p in problems] == ["railyard:storage.parallelFs.options"], (kind, problems)


def test_object_endpoint_must_be_an_http_url():
    config = with_(minimal(), "storage", {"object": {"endpoint": "s3.example.com"}})
    assert "railyard:storage.object.endpoint" in paths_of(config)


def test_asn_base_must_be_private():
    config = with_(minimal(), "fabric.compute", {"kind": "roce", "asnBase": 65000 + 1000})
    assert "railyard:fabric.compute.asnBase" in paths_of(config)


# --------------------------------------------------------------------------------------------------
# Cross-field rules


def test_hugepages_up_to_the_os_reserve_are_accepted():
    sku = load_catalog().nodes["dgx-h100"]
    most = int((sku.memory_gib - os_reserve_gib(sku.memory_gib)) / sku.memory_gib * 100)
    parse_config(with_(minimal(), "tuning.hugepages", {"percentOfMemory": most}), stack="t")
    paths = paths_of(with_(minimal(), "tuning.hugepages", {"percentOfMemory": most + 1}))
    assert paths == ["railyard:tuning.hugepages.percentOfMemory"]


def test_2m_hugepage_count_is_counted_in_2m_pages():
    sku = load_catalog().nodes["dgx-h100"]
    pages = int((sku.memory_gib - os_reserve_gib(sku.memory_gib)) * 512)
    parse_config(with_(minimal(), "tuning.hugepages", {"size": "2M", "count": pages}), stack="t")
    assert paths_of(with_(minimal(), "tuning.hugepages", {"size": "2M", "count": pages + 1})) == \
        ["railyard:tuning.hugepages.count"]


def test_vfs_per_pf_up_to_the_nic_limit_are_accepted():
    sku = load_catalog().nodes["dgx-h100"]
    limits = [n.sriov_total_vfs for n in sku.nics if n.role == "compute" and n.sriov_total_vfs is not None]
    if not limits:
        pytest.skip("the catalog does not know the VF limit of dgx-h100")
    parse_config(with_(minimal(), "tuning.sriov", {"vfsPerPf": min(limits)}), stack="t")
    assert paths_of(with_(minimal(), "tuning.sriov", {"vfsPerPf": min(limits) + 1})) == \
        ["railyard:tuning.sriov.vfsPerPf"]


def test_virtual_layout_rejects_sriov_off():
    assert "railyard:tuning.sriov.vfsPerPf" in paths_of(with_(minimal("virtual"), "tuning.sriov", {"vfsPerPf": 0}))


def test_vms_per_host_times_vm_gpus_fits_the_host():
    gpus = len_or_int(load_catalog().nodes["dgx-h100"].gpus)
    ok = with_(minimal("virtual"), "nodePools",
               [{"name": "gpu", "sku": "dgx-h100", "count": 1, "vmsPerHost": 2, "vm": {"gpus": gpus // 2}}])
    parse_config(ok, stack="t")
    bad = with_(minimal("virtual"), "nodePools",
                [{"name": "gpu", "sku": "dgx-h100", "count": 1, "vmsPerHost": 2, "vm": {"gpus": gpus // 2 + 1}}])
    assert "railyard:nodePools[0].vm.gpus" in paths_of(bad)


def test_more_vms_than_gpus_is_reported_at_vms_per_host():
    gpus = len_or_int(load_catalog().nodes["dgx-h100"].gpus)
    config = with_(minimal("virtual"), "nodePools",
                   [{"name": "gpu", "sku": "dgx-h100", "count": 1, "vmsPerHost": gpus + 1}])
    assert "railyard:nodePools[0].vmsPerHost" in paths_of(config)


def test_vm_memory_fits_the_host_after_the_reserve():
    mem = load_catalog().nodes["dgx-h100"].memory_gib
    most = int(mem - os_reserve_gib(mem))
    ok = with_(minimal("virtual"), "nodePools", [{"name": "gpu", "sku": "dgx-h100", "count": 1,
                                                  "vm": {"memoryGiB": most}}])
    parse_config(ok, stack="t")
    ok["railyard:nodePools"][0]["vm"]["memoryGiB"] = most + 1
    assert paths_of(ok) == ["railyard:nodePools[0].vm.memoryGiB"]


def test_node_names_must_fit_a_dns_label_for_the_largest_index():
    name = "p" * 61  # p...p-9 is 63 characters; p...p-10 is 64
    config = minimal()
    config["railyard:nodePools"][0].update(name=name, count=10)
    parse_config(config, stack="t")
    config["railyard:nodePools"][0]["count"] = 11
    assert paths_of(config) == ["railyard:nodePools[0].name"]


def test_cidrs_may_not_overlap():
    config = with_(minimal(), "fabric.compute.cidr", "198.18.0.0/16")
    paths = paths_of(config)
    assert "railyard:fabric.compute.cidr" in paths


def test_network_sizes_are_the_ones_addressing_asks_for():
    # The validator owns no sizing rule: it reports what railyard.model.addressing needs.
    spec = parse_config(minimal(), stack="t")
    for need in addressing.address_needs(spec):
        key = need.path.removeprefix("railyard:")
        net = ipaddress.ip_network(need.cidr)
        just = f"{net.network_address}/{need.prefixlen}"
        parse_config(with_(minimal(), key, just), stack="t")
        smaller = f"{net.network_address}/{need.prefixlen + 1}"
        assert paths_of(with_(minimal(), key, smaller)) == [need.path], need


def test_fabric_planner_limits_are_reported_with_the_other_problems():
    # 32 reserved ports fill a qm9700 leaf's downward half: the planner's rule, reported at the key.
    config = with_(minimal(), "fabric.compute.reservedLeafPorts", 32)
    config["railyard:ephemeral"] = {"ttl": "8w"}
    assert set(paths_of(config)) == {"railyard:fabric.compute.reservedLeafPorts", "railyard:ephemeral.ttl"}


def test_non_lab_drivers_may_use_any_private_range():
    config = minimal()
    config["railyard:driver"] = "coreweave"
    config["railyard:fabric"]["management"] = {"cidr": "10.0.0.0/20"}
    parse_config(config, stack="t")


def test_every_problem_is_reported_together():
    config = minimal()
    del config["railyard:region"]
    config["railyard:layout"] = "cloud"
    config["railyard:nodePools"][0]["count"] = 0
    config["railyard:fabric"]["compute"]["speed"] = "fast"
    config["railyard:tuning"] = {"iommu": "maybe"}
    assert set(paths_of(config)) >= {
        "railyard:region", "railyard:layout", "railyard:nodePools[0].count",
        "railyard:fabric.compute.speed", "railyard:tuning.iommu",
    }


# --------------------------------------------------------------------------------------------------
# Errors, files and the module boundary


def test_problem_renders_on_one_line_with_path_found_allowed_and_hint():
    text = str(Problem("railyard:x", "'a\nb'", "c", "d"))
    assert "\n" not in text
    assert text.startswith("railyard:x: found") and "allowed: c" in text and "hint: d" in text


def test_spec_error_renders_one_line_per_problem():
    err = SpecError([Problem("a", "b", "c"), Problem("d", "e", "f", "g")])
    assert str(err).splitlines() == [str(p) for p in err.problems]


def test_missing_file_and_directory_are_problems_not_exceptions(tmp_path):
    for path in (tmp_path / "Pulumi.nope.yaml", tmp_path):
        with pytest.raises(SpecError) as err:
            load_stack_file(path)
        assert err.value.paths() == [str(path)]


def test_empty_stack_file_reports_every_required_key(tmp_path):
    path = tmp_path / "Pulumi.empty.yaml"
    path.write_text("")
    with pytest.raises(SpecError) as err:
        load_stack_file(path)
    assert set(err.value.paths()) >= {"railyard:region", "railyard:layout", "railyard:driver",
                                       "railyard:nodePools", "railyard:fabric.compute"}


@pytest.mark.parametrize("name,stack", [("Pulumi.us-east-bm.yaml", "us-east-bm"), ("Pulumi.lab.yml", "lab"),
                                        ("mine.yaml", "mine")])
def test_stack_name_comes_from_the_file_name(name, stack):
    assert stack_name_of(Path("stacks") / name) == stack


def test_spec_is_frozen():
    spec = parse_config(minimal(), stack="t")
    assert isinstance(spec, Spec)
    with pytest.raises(AttributeError):
        spec.region = "x"  # type: ignore[misc]


def test_every_key_is_documented_in_the_stack_reference():
    doc = (ROOT / "docs" / "stack-reference.md").read_text()
    for key in documented_keys():
        last = key.split(".")[-1].split(":")[-1]
        assert f"`{key}`" in doc or f"`{last}`" in doc, f"{key} is not in docs/stack-reference.md"
    for section in KEYS:
        if section:
            assert f"`{NAMESPACE}:{section}" in doc, f"no section for {section} in docs/stack-reference.md"


def test_spec_imports_no_pulumi_and_no_ansible():
    code = ("import sys, railyard.model.spec, railyard.commands.validate; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pulumi', 'ansible', 'ansible_runner')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------------------------------
# Robustness: whatever a stack file holds, validation answers with a Spec or a SpecError.

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=True),
                     st.text(max_size=12), st.sampled_from(["0x8001", "8h", "198.18.0.0/20", "ndr", "roce",
                                                            "dgx-h100", "vela-a100", "gx3d-h100", "virtual"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(sorted({k for keys in KEYS.values() for k in keys} | {"secure", "x"})),
                    inner, max_size=4)), max_leaves=12)
_PATHS = st.sampled_from([
    "region", "layout", "driver", "nodePools", "nodePools[0]", "nodePools[0].count", "nodePools[0].vm",
    "nodePools[0].vmsPerHost", "nodePools[0].sku", "fabric", "fabric.compute", "fabric.compute.speed",
    "fabric.compute.cidr", "fabric.compute.asnBase", "fabric.management", "tenants", "storage",
    "storage.object", "tuning", "tuning.hugepages", "tuning.sriov", "ephemeral", "protect",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=st.sampled_from(["bare-metal", "virtual"]),
       edits=st.lists(st.tuples(_PATHS, _VALUES), min_size=1, max_size=3))
def test_any_value_anywhere_gives_a_spec_or_a_spec_error(layout, edits):
    config = minimal(layout)
    for path, value in edits:
        try:
            config = with_(config, path, value)
        except (AttributeError, TypeError, KeyError, IndexError, AssertionError):
            continue  # an earlier edit removed the parent this path needs
    try:
        parse_config(config, stack="t")
    except SpecError as exc:
        for problem in exc.problems:
            assert problem.path.startswith(("railyard:", "region", "layout", "driver")), problem


def test_tenant_without_pkey_gets_full_membership_by_position():
    spec = parse_config(with_(minimal(), "tenants", [{"name": "a"}, {"name": "b", "pkey": "0x0010"}, {"name": "c"}]),
                        stack="t")
    assert [t.pkey_hex for t in spec.tenants] == ["0x8001", "0x0010", "0x8003"]


def test_explicit_pkey_may_not_take_another_tenants_default():
    config = with_(minimal(), "tenants", [{"name": "a"}, {"name": "b", "pkey": "0x0001"}])
    assert paths_of(config) == ["railyard:tenants[1].pkey"]
