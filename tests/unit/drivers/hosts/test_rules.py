"""The hosts driver's rules: `railyard:hosts` parsed into a HostsConfig, and every bad input
refused with its config path before any host is touched."""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import socket
import struct
from pathlib import Path

import pytest

from railyard import drivers
from railyard.drivers.hosts import inventory, rules
from railyard.drivers.hosts.config import Budget, HostsConfig
from railyard.model.errors import SpecError
from railyard.model.spec import Secret
from railyard.stack import from_config, load, parse_config

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "stacks" / "Pulumi.onprem-dgx.yaml"
H = "railyard:hosts"


def key(i: int, kind: str = "ssh-ed25519") -> str:
    """A well-formed example host key (`<type> <base64>`) no real host has."""
    t = kind.encode()
    blob = struct.pack(">I", len(t)) + t + struct.pack(">I", 32) + bytes(31) + bytes([i])
    return f"{kind} {base64.b64encode(blob).decode()}"


def config(**hosts_section) -> dict:
    """Two DGX H100 on 192.0.2.0/24, each listed with a pinned key; keyword args replace keys of
    railyard:hosts (None removes one)."""
    section = {
        "sshKey": "agent",
        "pools": {"gpu": {"hosts": [{"address": "192.0.2.11", "hostKey": key(1)},
                                    {"address": "192.0.2.12", "hostKey": key(2)}]}},
    }
    for k, v in hosts_section.items():
        if v is None:
            section.pop(k, None)
        else:
            section[k] = v
    return {
        "railyard:region": "onprem",
        "railyard:layout": "bare-metal",
        "railyard:driver": "hosts",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 2}],
        "railyard:fabric": {"compute": {"kind": "infiniband", "cidr": "198.19.0.0/16"},
                            "storage": {"cidr": "198.51.100.0/24"}, "management": {"cidr": "192.0.2.0/24"}},
        H: section,
    }


def hosts_config(cfg: dict) -> HostsConfig:
    return parse_config(cfg, "t").driver_config


def problems(cfg: dict) -> list:
    with pytest.raises(SpecError) as err:
        parse_config(cfg, "t")
    return list(err.value.problems)


def edited(edit) -> dict:
    cfg = config()
    edit(cfg)
    return cfg


def hosts_of(cfg: dict, pool: str = "gpu") -> list:
    return cfg[H]["pools"][pool]["hosts"]


# --- the example stack and the registry ----------------------------------------------------------


def test_the_example_stack_validates_and_plans_one_host_per_node():
    spec, plan = load(EXAMPLE)
    assert (spec.driver, spec.layout, spec.stack) == ("hosts", "bare-metal", "onprem-dgx")
    assert [(p.name, p.sku, p.count) for p in spec.node_pools] == [("dgx", "dgx-h100", 32)]
    c = spec.fabric.compute
    assert (c.kind, c.speed, c.switch) == ("infiniband", "ndr", "qm9700")
    cfg = spec.driver_config
    assert isinstance(cfg, HostsConfig) and cfg.uses_agent and cfg.host_key_mode == "pinned"
    hosts = cfg.hosts_of("dgx")
    assert len(hosts) == 32 == len(plan.nodes)
    assert all(h.pinned and h.jump_host is not None and h.jump_host.host_keys for h in hosts)
    assert all(__import__("ipaddress").ip_address(h.address) in spec.fabric.management.cidr for h in hosts)
    assert len({h.address for h in hosts}) == 32
    # The plan's node dgx-<i> is the pool's i-th host.
    assert [n.name for n in plan.nodes] == [f"dgx-{i}" for i in range(32)]
    assert cfg.host("dgx", 31) is hosts[31] and hosts[0].address == "198.18.101.11"
    assert cfg.pool("dgx").reboot_budget == 4


def test_the_example_stack_says_it_is_not_brought_up():
    head = EXAMPLE.read_text().split("config:")[0]
    assert "validates and plans" in head and "never brought up" in head


def test_the_registry_validates_hosts_and_runs_its_driver():
    import importlib

    entry = drivers.DRIVERS["hosts"]
    assert entry.implementation == "railyard.drivers.hosts.driver:HostsDriver"
    assert entry.rules == "railyard.drivers.hosts.rules"
    module, cls = entry.implementation.split(":")
    assert getattr(importlib.import_module(module), cls).name == "hosts"
    caps = entry.capabilities
    assert (caps.machines, caps.addresses, caps.tuned_by, caps.vms) == ("node", "plan", "railyard", "on-hypervisors")
    assert drivers.rules()["hosts"].KEYS is rules.KEYS


def test_defaults_of_a_minimal_hosts_section():
    cfg = hosts_config(config())
    assert cfg.reboot.command == "systemctl reboot" and cfg.reboot.timeout_seconds == 600
    assert cfg.reboot.max_unavailable == Budget(hosts=1)
    (pool,) = cfg.pools
    assert pool.reboot_budget == 1 and pool.inventory is None
    h = cfg.host("gpu", 1)
    assert (h.address, h.user, h.port, h.jump_host, h.host_keys) == ("192.0.2.12", "root", 22, None, (key(2),))
    assert h.where == f"{H}.pools.gpu.hosts[1]"


def test_per_host_settings_override_the_sections():
    cfg = config(user="admin", port=2222, jumpHost="ops@203.0.113.10:2200",
                 knownHosts=[f"[203.0.113.10]:2200 {key(5)}", f"2001:db8::5 {key(6)}"])
    hosts_of(cfg)[1].update(user="dgxuser", port=22, jumpHost="[2001:db8::5]:22")
    a, b = hosts_config(cfg).hosts_of("gpu")
    assert (a.user, a.port, str(a.jump_host), a.jump_host.host_keys) == (
        "admin", 2222, "ops@203.0.113.10:2200", (key(5),))
    assert (b.user, b.port, b.jump_host.address, b.jump_host.user) == ("dgxuser", 22, "2001:db8::5", None)
    assert b.jump_host.host_keys == (key(6),)


def test_a_jump_host_without_a_pinned_key_is_refused_once_where_it_is_given():
    (problem,) = problems(config(jumpHost="admin@203.0.113.10"))
    assert problem.path == f"{H}.jumpHost" and "203.0.113.10" in problem.allowed
    cfg = config(jumpHost="admin@203.0.113.10", knownHosts=[f"203.0.113.10 {key(9)}"])
    hosts_of(cfg)[1]["jumpHost"] = "203.0.113.11"
    (problem,) = problems(cfg)
    assert problem.path == f"{H}.pools.gpu.hosts[1].jumpHost"
    # Trust on first use is for the hosts: a jump host is pinned even then (nothing would record
    # a key learned for it).
    (problem,) = problems(config(jumpHost="admin@203.0.113.10", hostKeys="trust-on-first-use"))
    assert problem.path == f"{H}.jumpHost" and "always pinned" in problem.hint


@pytest.mark.parametrize("value,count,hosts", [(3, 20, 3), ("25%", 8, 2), ("10%", 4, 1), ("100%", 5, 5),
                                               (9, 4, 4)])
def test_max_unavailable_is_hosts_or_a_percentage_never_below_one(value, count, hosts):
    cfg = config(reboot={"maxUnavailable": value})
    cfg["railyard:nodePools"][0]["count"] = count
    hosts_of(cfg)[:] = [{"address": f"192.0.2.{20 + i}", "hostKey": key(i)} for i in range(count)]
    assert hosts_config(cfg).pool("gpu").reboot_budget == hosts


def test_a_pool_may_set_its_own_budget():
    cfg = config(reboot={"maxUnavailable": 1})
    cfg[H]["pools"]["gpu"]["maxUnavailable"] = "50%"
    assert hosts_config(cfg).pool("gpu").reboot_budget == 1  # 50% of 2 rounds down to 1
    cfg[H]["pools"]["gpu"]["maxUnavailable"] = 2
    assert hosts_config(cfg).pool("gpu").reboot_budget == 2


def test_trust_on_first_use_takes_hosts_without_keys_and_keeps_the_pinned_ones():
    cfg = config(hostKeys="trust-on-first-use")
    del hosts_of(cfg)[0]["hostKey"]
    a, b = hosts_config(cfg).hosts_of("gpu")
    assert not a.pinned and b.host_keys == (key(2),)


def test_known_hosts_lines_pin_hosts_by_address_port_and_hashed_name():
    salt = bytes(range(20))
    digest = hmac.new(salt, b"[192.0.2.12]:2222", hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
    cfg = config(knownHosts=f"# ssh-keyscan output\n192.0.2.11,dgx-01 {key(7)}\n{hashed} {key(8, 'ssh-rsa')}\n"
                            f"[192.0.2.11]:2222 {key(9)}\n")
    for h in hosts_of(cfg):
        del h["hostKey"]
    hosts_of(cfg)[1]["port"] = 2222
    a, b = hosts_config(cfg).hosts_of("gpu")
    assert a.host_keys == (key(7),) and b.host_keys == (key(8, "ssh-rsa"),)


def test_a_host_key_comment_is_allowed_and_dropped():
    cfg = config()
    hosts_of(cfg)[0]["hostKey"] = key(1) + " root@dgx-01"
    assert hosts_config(cfg).host("gpu", 0).host_keys == (key(1),)


def test_dns_names_and_ipv6_addresses_are_hosts_too_and_nothing_is_looked_up(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("validation opened a network connection")

    for name in ("getaddrinfo", "gethostbyname", "create_connection"):
        monkeypatch.setattr(socket, name, no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    cfg = config()
    hosts_of(cfg)[0]["address"] = "dgx-01.pod1.example.net"
    hosts_of(cfg)[1]["address"] = "2001:db8::12"
    a, b = hosts_config(cfg).hosts_of("gpu")
    assert (a.address, b.address) == ("dgx-01.pod1.example.net", "2001:db8::12")


def test_the_ssh_key_secret_is_kept_opaque_and_never_rendered():
    cfg = config(sshKey={"secure": "v1:PRIVATEKEYCIPHERTEXT"})
    spec = parse_config(cfg, "t")
    assert isinstance(spec.driver_config.ssh_key, Secret) and not spec.driver_config.uses_agent
    assert spec.driver_config.ssh_key.ciphertext == "v1:PRIVATEKEYCIPHERTEXT"
    for text in (repr(spec.driver_config), str(spec.driver_config), repr(spec), str(spec)):
        assert "PRIVATEKEYCIPHERTEXT" not in text


def test_a_stack_of_another_driver_may_not_have_a_hosts_section():
    cfg = config()
    cfg["railyard:driver"] = "lab"
    cfg["railyard:fabric"] = {"compute": {"kind": "infiniband"}}
    assert [p.path for p in problems(cfg)] == [H]


def test_a_hosts_stack_without_the_section_is_told_both_required_keys():
    cfg = config()
    del cfg[H]
    assert [p.path for p in problems(cfg)] == [f"{H}.sshKey", f"{H}.pools"]


# --- each bad input: exactly one problem, at its path --------------------------------------------


def _two_pools(cfg: dict) -> None:
    cfg["railyard:nodePools"].append({"name": "spare", "sku": "dgx-h100", "count": 1})
    cfg[H]["pools"]["spare"] = {"hosts": [{"address": "192.0.2.11", "hostKey": key(3)}]}


BAD = {
    "address_twice_in_one_pool": (lambda c: hosts_of(c)[1].update(address="192.0.2.11"),
                                  f"{H}.pools.gpu.hosts[1].address", f"{H}.pools.gpu.hosts[0] has it"),
    "address_twice_in_two_spellings": (
        lambda c: [hosts_of(c)[0].update(address="2001:db8::1"), hosts_of(c)[1].update(address="2001:DB8::01")],
        f"{H}.pools.gpu.hosts[1].address", "hosts[0] has it"),
    "host_in_two_pools": (_two_pools, f"{H}.pools.spare.hosts[0].address", "in pool gpu already"),
    "budget_of_zero": (lambda c: c[H].update(reboot={"maxUnavailable": 0}), f"{H}.reboot.maxUnavailable",
                       "never finish"),
    "budget_of_zero_percent": (lambda c: c[H].update(reboot={"maxUnavailable": "0%"}),
                               f"{H}.reboot.maxUnavailable", "never finish"),
    "pool_budget_of_zero": (lambda c: c[H]["pools"]["gpu"].update(maxUnavailable=0),
                            f"{H}.pools.gpu.maxUnavailable", "never finish"),
    "budget_over_100_percent": (lambda c: c[H].update(reboot={"maxUnavailable": "150%"}),
                                f"{H}.reboot.maxUnavailable", "'1%'..'100%'"),
    "budget_quoted": (lambda c: c[H].update(reboot={"maxUnavailable": "2"}), f"{H}.reboot.maxUnavailable",
                      "without quotes"),
    "ssh_key_missing": (lambda c: c[H].pop("sshKey"), f"{H}.sshKey", "this key is required"),
    "ssh_key_written_as_ssh_agent": (lambda c: c[H].update(sshKey="ssh-agent"), f"{H}.sshKey", "write agent"),
    "pinned_host_without_key": (lambda c: hosts_of(c)[1].pop("hostKey"), f"{H}.pools.gpu.hosts[1].hostKey",
                                "trust-on-first-use"),
    "host_key_not_base64": (lambda c: hosts_of(c)[0].update(hostKey="ssh-ed25519 not*base64"),
                            f"{H}.pools.gpu.hosts[0].hostKey", "not base64"),
    "host_key_without_type": (lambda c: hosts_of(c)[0].update(hostKey=key(1).split()[1]),
                              f"{H}.pools.gpu.hosts[0].hostKey", "not `<type> <base64>`"),
    "host_key_under_another_type": (lambda c: hosts_of(c)[0].update(hostKey="ssh-rsa " + key(1).split()[1]),
                                    f"{H}.pools.gpu.hosts[0].hostKey", "does not begin with its type"),
    "host_key_of_dsa": (lambda c: hosts_of(c)[0].update(hostKey=key(1, "ssh-dss")),
                        f"{H}.pools.gpu.hosts[0].hostKey", "not a host key type"),
    "host_key_with_host_name": (lambda c: hosts_of(c)[0].update(hostKey="192.0.2.11 " + key(1)),
                                f"{H}.pools.gpu.hosts[0].hostKey", "in front is a host name"),
    "address_not_an_address": (lambda c: hosts_of(c)[0].update(address="192.0.2.300"),
                               f"{H}.pools.gpu.hosts[0].address", "0-255"),
    "address_with_user": (lambda c: hosts_of(c)[0].update(address="root@192.0.2.11"),
                          f"{H}.pools.gpu.hosts[0].address", "user:"),
    "address_missing": (lambda c: hosts_of(c)[0].pop("address"), f"{H}.pools.gpu.hosts[0].address", "required"),
    "address_outside_management": (lambda c: hosts_of(c)[1].update(address="198.51.100.12"),
                                   f"{H}.pools.gpu.hosts[1].address", "management.cidr"),
    "address_is_the_broadcast": (lambda c: hosts_of(c)[1].update(address="192.0.2.255"),
                                 f"{H}.pools.gpu.hosts[1].address", "broadcast"),
    "fewer_hosts_than_nodes": (lambda c: hosts_of(c).pop(), f"{H}.pools.gpu.hosts", "i-th host"),
    "pool_without_hosts": (lambda c: c[H].update(pools={}), f"{H}.pools.gpu", "list its hosts"),
    "hosts_of_a_pool_that_is_not": (lambda c: c[H]["pools"].update(gpus={"hosts": []}), f"{H}.pools.gpus",
                                    "did you mean gpu?"),
    "inventory_and_hosts": (lambda c: c[H]["pools"]["gpu"].update(inventory="x.ini"), f"{H}.pools.gpu",
                            "one place"),
    "group_without_inventory": (lambda c: c[H]["pools"]["gpu"].update(group="dgx"), f"{H}.pools.gpu.group",
                                "inventory: FILE"),
    "unknown_host_key": (lambda c: hosts_of(c)[0].update(adress="x"), f"{H}.pools.gpu.hosts[0].adress",
                         "did you mean address?"),
    "unknown_section_key": (lambda c: c[H].update(sshkey="agent"), f"{H}.sshkey", "did you mean"),
    "host_keys_mode_unknown": (lambda c: c[H].update(hostKeys="tofu"), f"{H}.hostKeys", "write trust-on-first-use"),
    "jump_host_malformed": (lambda c: c[H].update(jumpHost="admin@bastion:port"), f"{H}.jumpHost", ""),
    "user_like_an_option": (lambda c: c[H].update(user="-oProxyCommand=x"), f"{H}.user", ""),
    "port_out_of_range": (lambda c: hosts_of(c)[0].update(port=70000), f"{H}.pools.gpu.hosts[0].port", ""),
    "reboot_timeout_zero": (lambda c: c[H].update(reboot={"timeoutSeconds": 0}), f"{H}.reboot.timeoutSeconds", ""),
    "reboot_command_of_two_lines": (lambda c: c[H].update(reboot={"command": "sync\nreboot"}),
                                    f"{H}.reboot.command", "&&"),
    "known_hosts_pattern": (lambda c: c[H].update(knownHosts=[f"192.0.2.* {key(1)}"]), f"{H}.knownHosts[0]",
                            "pins no particular host"),
    "object_store_of_the_driver": (lambda c: c.update({"railyard:storage": {"object": {"bucket": "datasets"}}}),
                                   "railyard:storage.object.endpoint", "no object store of its own"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_one_problem_at_its_path(name):
    edit, path, hint = BAD[name]
    (problem,) = problems(edited(edit))
    assert problem.path == path
    assert hint in f"{problem.found} {problem.allowed} {problem.hint}"
    assert problem.found and problem.allowed


def test_a_plain_text_ssh_key_is_refused_and_never_shown():
    (problem,) = problems(config(sshKey="-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAA"))
    assert problem.path == f"{H}.sshKey" and "b3BlbnNzaC1rZXktdjEAAAAA" not in str(problem)
    assert "written in the clear" in problem.hint


def test_a_secret_where_none_belongs_is_refused_without_showing_it():
    cfg = config()
    hosts_of(cfg)[0]["hostKey"] = {"secure": "v1:HOSTKEYCIPHER"}
    (problem,) = problems(cfg)
    assert problem.path == f"{H}.pools.gpu.hosts[0].hostKey" and "HOSTKEYCIPHER" not in str(problem)


def test_every_problem_is_reported_together():
    cfg = config(sshKey=None, reboot={"maxUnavailable": 0})
    hosts_of(cfg)[1].update(address="192.0.2.11")
    hosts_of(cfg)[0].pop("hostKey")
    assert [p.path for p in problems(cfg)] == [
        f"{H}.sshKey", f"{H}.reboot.maxUnavailable", f"{H}.pools.gpu.hosts[1].address",
        f"{H}.pools.gpu.hosts[0].hostKey"]


# --- inventory files ----------------------------------------------------------------------------

YAML_INVENTORY = """\
all:
  vars:
    ansible_user: ops
  hosts:
    bastion.pod1.example.net:
  children:
    dgx:
      vars:
        ansible_user: dgxadmin
      hosts:
        dgx-[01:02]:
          ansible_ssh_common_args: -o ProxyJump=jump@203.0.113.10
        dgx-03: {ansible_host: 192.0.2.33, ansible_port: 2222, ansible_user: root}
      children:
        dgx_spare:
          hosts:
            dgx-04: {ansible_host: 192.0.2.34}
"""

INI_INVENTORY = """\
; the pod's servers
bastion.pod1.example.net

[dgx]
dgx-[01:02] ansible_ssh_common_args='-J jump@203.0.113.10'
192.0.2.33:2222 ansible_user=root   # by address

[dgx:children]
dgx_spare

[dgx_spare]
dgx-04 ansible_host=192.0.2.34

[dgx:vars]
ansible_user=dgxadmin
"""


def inventory_config(path: str, count: int = 4, group: str | None = "dgx", **section) -> dict:
    section.setdefault("hostKeys", "trust-on-first-use")
    # The inventories' jump host; jump hosts are pinned whatever hostKeys says.
    section.setdefault("knownHosts", [f"203.0.113.10 {key(9)}"])
    cfg = config(**section)
    cfg["railyard:nodePools"][0]["count"] = count
    cfg[H]["pools"]["gpu"] = {"inventory": path, **({"group": group} if group else {})}
    return cfg


@pytest.mark.parametrize("name,text", [("pod1.yml", YAML_INVENTORY), ("pod1.ini", INI_INVENTORY)])
def test_an_inventory_file_gives_the_groups_hosts_in_order(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    pool = hosts_config(inventory_config(str(tmp_path / name))).pool("gpu")
    got = [(h.name, h.address, h.user, h.port, str(h.jump_host) if h.jump_host else None) for h in pool.hosts]
    third = ("dgx-03", "192.0.2.33") if name.endswith(".yml") else ("192.0.2.33", "192.0.2.33")
    assert got == [
        ("dgx-01", "dgx-01", "dgxadmin", 22, "jump@203.0.113.10"),
        ("dgx-02", "dgx-02", "dgxadmin", 22, "jump@203.0.113.10"),
        (*third, "root", 2222, None),
        ("dgx-04", "192.0.2.34", "dgxadmin", 22, None),
    ]
    assert pool.inventory == tmp_path / name and pool.group == "dgx"
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "dgx-04" in ln)
    assert pool.hosts[3].where == f"{tmp_path / name}:{line}"


@pytest.mark.parametrize("name,text", [("pod1.yml", YAML_INVENTORY), ("pod1.ini", INI_INVENTORY)])
def test_group_all_is_every_host_of_the_file(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    pool = hosts_config(inventory_config(str(tmp_path / name), count=5, group=None)).pool("gpu")
    assert [h.name for h in pool.hosts][0] == "bastion.pod1.example.net" and len(pool.hosts) == 5


def test_a_relative_inventory_path_starts_at_the_project_root(tmp_path, monkeypatch):
    (tmp_path / "inventories").mkdir()
    (tmp_path / "inventories" / "pod1.ini").write_text(INI_INVENTORY)
    monkeypatch.setenv("RAILYARD_ROOT", str(tmp_path))
    assert len(hosts_config(inventory_config("inventories/pod1.ini")).hosts_of("gpu")) == 4
    # A root given to the rules directly, as a program with another project root would.
    spec = parse_config(inventory_config(str(tmp_path / "inventories" / "pod1.ini")), "t")
    cfg, found = rules.parse(inventory_config("pod1.ini")[H], spec, root=tmp_path / "inventories")
    assert found == [] and [h.name for h in cfg.hosts_of("gpu")] == ["dgx-01", "dgx-02", "192.0.2.33", "dgx-04"]


def test_known_hosts_lines_pin_an_inventorys_hosts(tmp_path):
    (tmp_path / "pod1.ini").write_text("[dgx]\n192.0.2.31\n192.0.2.32\n")
    cfg = inventory_config(str(tmp_path / "pod1.ini"), count=2, hostKeys="pinned",
                           knownHosts=[f"192.0.2.31 {key(1)}", f"192.0.2.32 {key(2)}"])
    assert [h.host_keys for h in hosts_config(cfg).hosts_of("gpu")] == [(key(1),), (key(2),)]
    cfg[H]["knownHosts"].pop()
    (problem,) = problems(cfg)
    assert problem.path == f"{H}.pools.gpu.inventory" and "192.0.2.32" in problem.found
    assert f"{tmp_path / 'pod1.ini'}:3" in problem.found


BAD_INVENTORIES = {
    "yaml_syntax": ("pod1.yml", "all:\n  hosts:\n    dgx-01: {ansible_host: 192.0.2.31\n", ":4"),
    "yaml_hosts_as_a_list": ("pod1.yml", "all:\n  hosts:\n    - dgx-01\n", ":3: hosts of group 'all'"),
    "yaml_unknown_group_key": ("pod1.yml", "all:\n  host:\n    dgx-01:\n", ":2: group 'all' has a key 'host'"),
    "yaml_host_twice": ("pod1.yml", "all:\n  hosts:\n    dgx-01:\n    dgx-01:\n", ":4: 'dgx-01' given twice"),
    "ini_bad_section": ("pod1.ini", "[dgx\n192.0.2.31\n", ":1: '[dgx' is not a section header"),
    "ini_bad_pair": ("pod1.ini", "[dgx]\n192.0.2.31 ansible_user\n", ":2: 'ansible_user' is not key=value"),
    "ini_bad_range": ("pod1.ini", "[dgx]\ndgx-[01:3]\n", ":2: 'dgx-[01:3]'"),
    "ini_unclosed_quote": ("pod1.ini", "[dgx]\n192.0.2.31 ansible_user='ops\n", ":2:"),
}


@pytest.mark.parametrize("name", BAD_INVENTORIES)
def test_an_inventory_that_does_not_parse_is_refused_naming_file_and_line(tmp_path, name):
    file, text, where = BAD_INVENTORIES[name]
    (tmp_path / file).write_text(text)
    (problem,) = problems(inventory_config(str(tmp_path / file), group=None))
    assert problem.path == f"{H}.pools.gpu.inventory"
    assert f"{tmp_path / file}{where}" in problem.found, problem.found


def test_a_missing_inventory_file_and_an_unknown_group_are_refused(tmp_path):
    (problem,) = problems(inventory_config(str(tmp_path / "nope.ini")))
    assert problem.path == f"{H}.pools.gpu.inventory" and "no such file" in problem.found
    (tmp_path / "pod1.ini").write_text(INI_INVENTORY)
    (problem,) = problems(inventory_config(str(tmp_path / "pod1.ini"), group="gpu"))
    assert "no group 'gpu'" in problem.found and "dgx_spare" in problem.found


def test_an_inventorys_hosts_follow_every_host_rule(tmp_path):
    (tmp_path / "pod1.ini").write_text("[dgx]\ndgx-01 ansible_host=192.0.2.31\ndgx-02 ansible_host=10.0.0.9\n"
                                       "dgx-03 ansible_host=192.0.2.31\n")
    found = problems(inventory_config(str(tmp_path / "pod1.ini"), count=3))
    assert [p.path for p in found] == [f"{H}.pools.gpu.inventory"] * 2
    twice, outside = found
    assert "dgx-03" in twice.found and "dgx-01" in twice.hint and ":2" in twice.hint
    assert "dgx-02" in outside.found and "192.0.2.0/24" in outside.allowed


def test_an_inventory_with_the_wrong_number_of_hosts_names_file_and_group(tmp_path):
    (tmp_path / "pod1.ini").write_text(INI_INVENTORY)
    (problem,) = problems(inventory_config(str(tmp_path / "pod1.ini"), count=3))
    assert problem.path == f"{H}.pools.gpu.inventory"
    assert problem.found == f"4 hosts in group dgx of {tmp_path / 'pod1.ini'}"
    assert "nodePools[0].count" in problem.allowed


@pytest.mark.parametrize("pattern,hosts", [
    ("dgx-[01:03]", ["dgx-01", "dgx-02", "dgx-03"]), ("n[a:c]", ["na", "nb", "nc"]),
    ("h[0:20:10]", ["h0", "h10", "h20"]), ("r[1:2]n[1:2]", ["r1n1", "r1n2", "r2n1", "r2n2"]), ("plain", ["plain"]),
])
def test_host_ranges_expand_as_ansible_writes_them(pattern, hosts):
    assert inventory.expand(pattern) == hosts


def test_an_inventory_whose_groups_form_a_cycle_is_refused(tmp_path):
    (tmp_path / "pod1.ini").write_text("[a:children]\nb\n[b:children]\na\n[a]\nx\n")
    with pytest.raises(inventory.InventoryError, match="child of itself"):
        inventory.read(tmp_path / "pod1.ini", "a")


def test_the_config_is_frozen():
    cfg = hosts_config(config())
    with pytest.raises(AttributeError):
        cfg.pools = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        cfg.hosts[0].address = "x"  # type: ignore[misc]
    assert copy.deepcopy(cfg) == cfg


def test_an_inventory_hosts_bad_variables_are_told_with_the_host(tmp_path):
    (tmp_path / "pod1.yml").write_text("all:\n  hosts:\n    dgx-01: {ansible_host: 192.0.2.31, ansible_port: '22'}\n"
                                       "    dgx-02: {ansible_host: 192.0.2.999}\n")
    port, address = problems(inventory_config(str(tmp_path / "pod1.yml"), count=2, group=None))
    assert port.path == address.path == f"{H}.pools.gpu.inventory"
    assert port.found == f"ansible_port '22' of host dgx-01 at {tmp_path / 'pod1.yml'}:3"
    assert port.hint == "write the number without quotes"
    assert address.found.startswith("ansible_host '192.0.2.999' of host dgx-02")


WEIRD = (None, 0, -1, True, 1.5, "", "x", "0%", "100%", [], ["x"], {}, {"x": 1}, {"secure": "v1:c"})
KEY_PATHS = ("user", "port", "jumpHost", "sshKey", "hostKeys", "knownHosts", "reboot", "reboot.command",
             "reboot.timeoutSeconds", "reboot.maxUnavailable", "pools", "pools.gpu", "pools.gpu.hosts",
             "pools.gpu.hosts[0]", "pools.gpu.hosts[0].address", "pools.gpu.hosts[0].hostKey",
             "pools.gpu.hosts[0].jumpHost", "pools.gpu.inventory", "pools.gpu.group", "pools.gpu.maxUnavailable")


@pytest.mark.parametrize("key_path", KEY_PATHS)
def test_any_value_anywhere_gives_a_config_or_problems_never_a_crash(key_path):
    import re

    for value in WEIRD:
        cfg = config()
        node, steps = cfg[H], []
        for part in key_path.split("."):
            name, index = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", part).groups()
            steps.append(name)
            if index is not None:
                steps.append(int(index))
        for step in steps[:-1]:
            node = node.setdefault(step, {}) if isinstance(step, str) else node[step]
        node[steps[-1]] = copy.deepcopy(value)
        try:
            parse_config(cfg, "t")
        except SpecError as err:
            assert all(p.found and p.allowed for p in err.problems), (key_path, value)
            assert "v1:c" not in str(err), (key_path, value)


def test_an_unreadable_host_key_mode_is_one_problem_not_one_per_host():
    cfg = config(hostKeys="tofu")
    for h in hosts_of(cfg):
        del h["hostKey"]
    assert [p.path for p in problems(cfg)] == [f"{H}.hostKeys"]


@pytest.mark.parametrize("args,jump,refused", [
    ("-J admin@bastion", "admin@bastion", None),
    ("-Jadmin@bastion", "admin@bastion", None),
    ("-o ProxyJump=admin@bastion", "admin@bastion", None),
    ("-o 'ProxyJump admin@bastion' -o StrictHostKeyChecking=no", "admin@bastion", None),
    ('-o ProxyJump="admin@bastion"', "admin@bastion", None),
    ("-o ServerAliveInterval=30", None, None),
    ("-o ProxyCommand='ssh -W %h:%p bastion'", None, "a ProxyCommand"),
    ("-o ProxyJump=a,b", None, "ProxyJump 'a,b' (one jump host only)"),
    ("-o 'ProxyJump admin@b", None, "unbalanced quotes"),
])
def test_an_inventorys_ssh_arguments_give_their_jump_host_or_are_refused(args, jump, refused):
    """A bastion the inventory names is never bypassed: what Railyard cannot follow is refused."""
    from railyard.ssh_client import proxy_jump

    assert proxy_jump(args) == (jump, refused)


@pytest.mark.parametrize("address", ["fe80::1%eth0", "fe80::1%';touch${IFS}x;'", "a%h.example.net"])
def test_an_address_with_a_percent_is_no_host_address(address):
    """ssh expands % in host names; a scope id is no server's management address."""
    from railyard.drivers.hosts.rules import address_kind

    assert address_kind(address) is None


def test_inventory_values_read_as_ansible_reads_them(tmp_path):
    """Quoted INI values lose their quotes; a vaulted YAML variable does not make the file unreadable."""
    from railyard.drivers.hosts import inventory

    ini = tmp_path / "pod.ini"
    ini.write_text("[dgx]\nnode1 ansible_host=192.0.2.11\n\n[dgx:vars]\nansible_user='admin'\nansible_port=2222\n")
    (host,) = inventory.read(ini, "dgx")
    assert (host.vars["ansible_user"], host.vars["ansible_port"]) == ("admin", 2222)
    yml = tmp_path / "pod.yml"
    yml.write_text("all:\n  vars:\n    secret: !vault |\n      $ANSIBLE_VAULT;1.1;AES256\n      6162\n"
                   "  hosts:\n    node1:\n      ansible_host: 192.0.2.11\n")
    (host,) = inventory.read(yml)
    assert host.vars["ansible_host"] == "192.0.2.11"


# --- Kubernetes ------------------------------------------------------------------------------------


def test_a_kubernetes_layer_needs_the_clusters_kubeconfig_as_a_secret():
    cfg = config()
    cfg["railyard:kubernetes"] = {}
    assert [p.path for p in problems(cfg)] == ["railyard:kubernetes.kubeconfig"]
    cfg["railyard:kubernetes"] = {"kubeconfig": "client-key-data: c2VjcmV0"}
    found = problems(cfg)
    assert [p.path for p in found] == ["railyard:kubernetes.kubeconfig"]
    assert "c2VjcmV0" not in str(found)  # a credential in the clear is refused, never shown
    cfg["railyard:kubernetes"] = {"kubeconfig": {"secure": "v1:ciphertext"}}
    assert parse_config(cfg, "t").kubernetes.kubeconfig is not None


def test_each_host_is_labelled_under_the_node_name_its_kubelet_registers():
    from railyard.drivers.base import load_driver

    cfg = edited(lambda c: hosts_of(c)[1].update(nodeName="dgx-b07.pod1.example"))
    cfg["railyard:kubernetes"] = {"kubeconfig": {"secure": "v1:ciphertext"}}
    spec, plan = from_config(cfg, "t")
    assert load_driver(spec, plan).kubernetes_node_names() == {"gpu-1": "dgx-b07.pod1.example"}
    bad = edited(lambda c: hosts_of(c)[0].update(nodeName="DGX_07"))
    assert [p.path for p in problems(bad)] == ["railyard:hosts.pools.gpu.hosts[0].nodeName"]


def test_sibling_groups_merge_by_ansible_group_priority_as_ansible_does(tmp_path):
    # Checked against ansible-core's InventoryManager: the higher priority merges later and wins;
    # at equal priority the later name wins.
    from railyard.drivers.hosts import inventory

    yml = tmp_path / "pod.yml"
    yml.write_text("all:\n  children:\n"
                   "    a:\n      vars: {ansible_user: from_a, ansible_group_priority: 10}\n      hosts: {dgx-01: }\n"
                   "    b:\n      vars: {ansible_user: from_b}\n      hosts: {dgx-01: }\n")
    (host,) = inventory.read(yml)
    assert host.vars["ansible_user"] == "from_a"
    yml.write_text(yml.read_text().replace(", ansible_group_priority: 10", ""))
    (host,) = inventory.read(yml)
    assert host.vars["ansible_user"] == "from_b"
    yml.write_text(yml.read_text().replace("{ansible_user: from_b}", "{ansible_user: from_b, ansible_group_priority: x}"))
    with pytest.raises(inventory.InventoryError, match="ansible_group_priority 'x'"):
        inventory.read(yml)


def test_the_repair_loop_reboots_a_host_with_the_stacks_command_within_its_pools_budget():
    cfg = config(reboot={"command": "/sbin/reboot -f", "timeoutSeconds": 900, "maxUnavailable": 1})
    cfg[H]["pools"]["gpu"]["maxUnavailable"] = 2
    spec = parse_config(cfg, "t")
    assert drivers.reboot(spec, "gpu") == drivers.Reboot("/sbin/reboot -f", 900.0, 2)
