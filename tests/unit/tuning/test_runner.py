"""How the tuning run reaches hosts: known_hosts for their ports and jump hosts, a ProxyCommand
through the jump host with the run's own key and known_hosts, and ssh-agent's key where the stack
has no key of its own (no key file, no IdentitiesOnly)."""

from __future__ import annotations

import shlex

import yaml

from railyard.tuning import runner
from railyard.tuning.runner import JUMP_VAR, Host

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB"
JUMP_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABk"


def test_known_hosts_name_the_port_and_the_jump_host():
    h = Host("gpu-0", "192.0.2.11", KEY, {"ansible_port": 2222, JUMP_VAR: {
        "address": "203.0.113.10", "user": "admin", "port": 22, "host_keys": [JUMP_KEY]}})
    assert runner.known_hosts_lines(h) == f"[192.0.2.11]:2222 {KEY}\n203.0.113.10 {JUMP_KEY}\n"
    assert runner.known_hosts_lines(Host("gpu-1", "192.0.2.12", KEY, {})) == f"192.0.2.12 {KEY}\n"


def test_a_host_behind_a_jump_host_gets_a_proxy_command_with_the_runs_key_and_known_hosts(tmp_path):
    h = Host("gpu-0", "192.0.2.11", KEY, {JUMP_VAR: {"address": "203.0.113.10", "user": "admin", "port": 2200,
                                                    "host_keys": [JUMP_KEY]}})
    (through,) = runner._through_jump([h], tmp_path / "known_hosts", tmp_path / "id")
    extra = shlex.split(through.vars["ansible_ssh_extra_args"])
    assert extra[0] == "-o" and extra[1].startswith("ProxyCommand=")
    hop = shlex.split(extra[1][len("ProxyCommand="):])
    assert hop[0] == "ssh" and hop[-1] == "admin@203.0.113.10" and hop[hop.index("-p") + 1] == "2200"
    assert hop[hop.index("-W") + 1] == "[192.0.2.11]:22"
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in hop and str(tmp_path / "id") in hop
    assert "StrictHostKeyChecking=yes" in hop
    # A host without one is left as it is.
    plain = Host("gpu-1", "192.0.2.12", KEY, {})
    assert runner._through_jump([plain], tmp_path / "kh", None) == [plain]


def test_with_the_agents_key_the_inventory_lets_ssh_offer_the_agents_identities(tmp_path):
    hosts = [Host("gpu-0", "192.0.2.11", KEY, {"ansible_user": "admin"})]
    own = yaml.safe_load(runner.render_inventory("s", "root", hosts, tmp_path / "kh"))
    agent = yaml.safe_load(runner.render_inventory("s", "root", hosts, tmp_path / "kh", agent=True))
    assert "IdentitiesOnly=yes" in own["all"]["vars"]["ansible_ssh_common_args"]
    assert "IdentitiesOnly" not in agent["all"]["vars"]["ansible_ssh_common_args"]
    assert agent["all"]["hosts"]["gpu-0"]["ansible_user"] == "admin"


def test_a_failed_loop_reports_what_each_failed_item_said_not_ansibles_summary():
    res = {"failed": True, "msg": "One or more items failed", "results": [
        {"item": "hugepages", "changed": False, "msg": "The arg spec validation passed"},
        {"item": "sriov", "failed": True, "msg": "Validation of arguments failed:\nsriov_pfs must be a list"},
        {"_ansible_item_label": "dataset_cache", "item": {"name": "x"}, "failed": True,
         "msg": "value of dataset_cache_fstype must be one of: xfs, ext4, got: btrfs"},
    ]}
    msg = runner.failure_message(res)
    assert msg == ("sriov: Validation of arguments failed:\nsriov_pfs must be a list; "
                   "dataset_cache: value of dataset_cache_fstype must be one of: xfs, ext4, got: btrfs")
    assert runner.failure_message({"failed": True, "stderr": " no such file \n"}) == "no such file"


def test_a_run_past_its_timeout_is_stopped_with_its_process_group_and_said_so(tmp_path, monkeypatch):
    """The re-tune after a reset is bounded (railyard:health.retuneTimeout): a play that hangs is
    killed with everything it started, and the result is a failure that says it was stopped."""
    import time

    from railyard import procfs

    marker = tmp_path / "sleeping"
    book = tmp_path / "hang.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "hang", "ansible.builtin.shell": f"echo $$ > {marker}; exec sleep 300"}]}]))
    monkeypatch.setattr(runner, "PLAYBOOKS", tmp_path)
    monkeypatch.setattr(runner.paths, "runs_dir", lambda stack: tmp_path / "runs" / stack)
    started = time.monotonic()
    result = runner.run("t", [], None, playbook="hang.yml", timeout=10)
    assert time.monotonic() - started < 60 and not result.ok and result.status == "timeout"
    assert [str(f) for f in result.failures] == ["-: task 'ansible-playbook': stopped after 10 s, unfinished"]
    assert marker.exists(), "the play never reached its task within 10 s: nothing hung to stop"
    pid = int(marker.read_text())
    deadline = time.monotonic() + 10
    while procfs.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not procfs.alive(pid), "the hung task outlived its run"
