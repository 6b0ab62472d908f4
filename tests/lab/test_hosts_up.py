"""The hosts driver end to end on the real engine: four lab nodes stand in for servers someone
already has, and a `hosts` stack lists their management addresses and host keys. The driver
reaches them over SSH only (its inventory sets no `*_sysfs_root`): `up` discovers and checks each
against its SKU, tunes it on its own /sys and /proc, and reboots the hosts whose kernel lacks the
boot-time settings one at a time (maxUnavailable 1), checking each came back with them."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
import yaml

from railyard import paths
from railyard.drivers.lab import hwtree, node
from railyard.drivers.lab.node import power
from railyard.model.catalog import load_catalog

from .stack_project import StackProject

ROOT = paths.PROJECT_ROOT
NODES = 4
STACK = "thosts"


@pytest.fixture(scope="module")
def servers(stack_factory, tmp_path_factory):
    """Four dgx-h100 lab nodes on all eight rails: the servers the stack names."""
    from railyard.stack import from_config

    c = stack_factory("hu", rails=8, spine=False)
    c.create_fabric()
    sku = load_catalog().nodes["dgx-h100"]
    # The rails as the plan names them, without addresses: the hosts' own network files give them.
    placeholder = stack_config(c, addresses=[c.node_args(i)["mgmt"]["address"].split("/")[0] for i in range(NODES)])
    _, plan = from_config(placeholder, STACK)
    c.plan = plan
    for i in range(NODES):
        tree = tmp_path_factory.mktemp("hw") / f"gpu-{i}"
        hwtree.build_hwtree(sku, tree)
        rails = [{"name": n.netdev, "rail": n.rail, "address": None} for n in plan.nodes[i].nics]
        c.create_node(f"srv-{i}", i, hw_tree_source=str(tree), rails=rails)
    c.before = {i: snapshot(c, i) for i in range(NODES)}
    return c


def snapshot(c, i: int) -> dict:
    """What destroy must give back as it was: the node's own /etc (its overlay's upper layer), its
    VFs, mounts, fstab, md arrays, hugepage counters, and what its drives hold."""
    import hashlib

    name = f"srv-{i}"
    etc = node.node_dir(c.stack, name) / "etc"
    # A file copied up unchanged (a rewrite that ended with the host's own bytes, as fstab after
    # the cache's line is removed) is what the node saw before.
    files = {str(f.relative_to(etc)): hashlib.sha256(f.read_bytes()).hexdigest()
             for f in sorted(etc.rglob("*")) if f.is_file() and not f.is_symlink()
             and not _same_as_host(f, Path("/etc") / f.relative_to(etc))}
    inside = node.run_in_node(c.stack, name, ["sh", "-c", "cat /sys/bus/pci/devices/*/sriov_numvfs; echo --; "
                                              "ip -o link show type macvlan | wc -l; echo --; "
                                              "cat /sys/devices/system/node/node*/hugepages/*/nr_hugepages "
                                              "/sys/kernel/mm/hugepages/*/nr_hugepages; echo --; "
                                              "cat /proc/mdstat 2>/dev/null; echo --; "
                                              "ip -o -4 addr show | grep -v ' eno3 ' | awk '{print $2, $4}'; echo --; "
                                              "ip -4 rule show; echo --; "
                                              "awk '{print $5}' /proc/self/mountinfo | sort; echo --; "
                                              "grep -v '^#' /etc/fstab; echo --; "
                                              "for d in /dev/nvme*; do echo $d $(blkid -p -o export $d | sort); done"],
                                 check=True).stdout
    return {"etc": files, "state": inside}


def _same_as_host(upper: Path, lower: Path) -> bool:
    try:
        return lower.is_file() and lower.read_bytes() == upper.read_bytes()
    except OSError:
        return False


def stack_config(c, addresses: list[str] | None = None) -> dict:
    """The stack naming the servers: their addresses and pinned keys (`addresses`: before they
    exist, trusting on first use, for planning)."""
    if addresses is None:
        hosts = [{"address": node.read_node(c.stack, f"srv-{i}")["mgmt_address"],
                  "hostKey": node.read_node(c.stack, f"srv-{i}")["host_key"]} for i in range(NODES)]
    else:
        hosts = [{"address": a} for a in addresses]
    return {
        "railyard:region": "onprem-lab",
        "railyard:layout": "bare-metal",
        "railyard:driver": "hosts",
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": NODES}],
        "railyard:fabric": {
            "compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": "198.19.0.0/16"},
            "storage": {"cidr": "198.18.96.0/20"},
            "management": {"cidr": c.mgmt_cidr},
        },
        "railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": 1, "perNuma": True},
                            "sriov": {"vfsPerPf": 2}},
        # One data drive: the lab's kernel has no md driver for an array over eight.
        # The stand-in servers' fabric ports are the fixture's plain veths (MTU 1500), not the
        # planned fabric: acceptance's MTU pings are proven on lab stacks (test_lab_acceptance.py).
        "railyard:acceptance": {"enabled": False},
        "railyard:storage": {"localCache": {"raid": "none"}},
        "railyard:hosts": {
            "sshKey": "agent",
            "hostKeys": "pinned" if addresses is None else "trust-on-first-use",
            "reboot": {"timeoutSeconds": 30, "maxUnavailable": 1},
            "pools": {"gpu": {"hosts": hosts}},
        },
    }


@pytest.fixture(scope="module")
def project(servers, tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    p = StackProject(tmp_path_factory.mktemp("hostsstack"), STACK, stack_config(servers))
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    # From stdin: the key's first line starts with '-', which `config set` would take for a flag.
    subprocess.run(p.argv("config", "set", "--secret", "--path", "railyard:hosts.sshKey"), cwd=p.dir,
                   env=p.env, input=servers.key.read_text(), text=True, check=True, capture_output=True)
    # The stack file as the engine left it: the key's ciphertext is part of the config from now on.
    p.config = yaml.safe_load(paths.stack_file(STACK, p.dir).read_text())["config"]
    assert "PRIVATE KEY" not in paths.stack_file(STACK, p.dir).read_text()
    yield p
    p.pulumi("destroy", "--yes", "--skip-preview", check=False)


def cmdline(c, i: int) -> str:
    return node.run_in_node(c.stack, f"srv-{i}", ["cat", "/proc/cmdline"], check=True).stdout.strip()


def test_a_cache_drive_holding_data_an_array_without_md_or_a_missing_fs_client_is_refused_before_any_host_changes(servers, project):
    events = {i: len(power.events(servers.stack, f"srv-{i}")) for i in range(NODES)}
    # Someone's filesystem on the data drive the cache would take (nvme2n1: the two OS drives come first).
    node.run_in_node(servers.stack, "srv-3", ["mkfs.ext4", "-q", "-F", "/dev/nvme2n1"], check=True)
    out = up_fails(project)
    # The plan's node of the fourth server is gpu-3.
    assert "gpu-3: task 'Check the cache drives (changes nothing)': refusing the cache drives: /dev/nvme2n1 " \
           "holds an ext4 signature" in out, out[-4000:]
    node.run_in_node(servers.stack, "srv-3", ["wipefs", "-a", "-q", "/dev/nvme2n1"], check=True)
    # The cache's mount point as two hosts resolve it (issue 38): one's /mnt/cache is the site's
    # own scratch mount, the other's a symlink into /etc. The stack is valid; only the hosts differ.
    run = node.run_in_node
    assert run(servers.stack, "srv-1", ["sh", "-c", "test ! -e /mnt/cache"]).returncode == 0
    run(servers.stack, "srv-1", ["sh", "-c", "mkdir /mnt/cache && mount -t tmpfs -o size=8m site-scratch /mnt/cache"],
        check=True)
    run(servers.stack, "srv-2", ["ln", "-s", "/etc/railyard-cache", "/mnt/cache"], check=True)
    try:
        out = up_fails(project)
    finally:
        run(servers.stack, "srv-1", ["sh", "-c", "umount /mnt/cache && rmdir /mnt/cache"], check=True)
        run(servers.stack, "srv-2", ["rm", "/mnt/cache"], check=True)
    assert "gpu-1: task 'Check the cache's mount point (changes nothing)': refusing the mount point /mnt/cache: it " \
           "is already a mount of site-scratch (tmpfs) that Railyard did not make" in out, out[-4000:]
    assert "gpu-2: task 'Check the cache's mount point (changes nothing)': refusing the mount point /mnt/cache: " \
           "this host resolves it to /etc/railyard-cache, and /etc is a directory the operating system lives in" \
           in out, out[-4000:]
    assert "set railyard:storage.localCache.mount to another path" in out
    assert run(servers.stack, "srv-2", ["test", "-e", "/etc/railyard-cache"]).returncode != 0
    # An array over eight drives needs md, which this kernel lacks: refused by name, not shrunk.
    config = copy.deepcopy(project.config)
    config["railyard:storage"] = {"localCache": {"raid": "raid0"}}
    project.write(config)
    try:
        out = up_fails(project)
    finally:
        project.write(project.config)
    assert "a raid0 cache over 8 drives needs the kernel's md driver" in out, out[-4000:]
    assert "railyard:storage.localCache.raid: none" in out
    # A Lustre file system to mount, on servers without its client (this kernel has none).
    config = copy.deepcopy(project.config)
    config["railyard:storage"] = {**config["railyard:storage"],
                                  "parallelFs": {"kind": "lustre", "source": "198.18.96.10@tcp:/lustre"}}
    project.write(config)
    try:
        out = up_fails(project)
    finally:
        project.write(project.config)
    for i in range(NODES):
        assert f"gpu-{i}: task 'Mount the parallel file system': cannot mount " \
               "198.18.96.10@tcp:/lustre at /mnt/pfs: the Lustre client" in out, out[-4000:]
    assert "no mount.lustre in /sbin" in out
    # No host was changed by any of these runs, and none rebooted.
    for i in range(NODES):
        assert snapshot(servers, i) == servers.before[i], f"srv-{i}"
        assert len(power.events(servers.stack, f"srv-{i}")) == events[i]


def test_up_tunes_and_reboots_one_host_at_a_time(servers, project):
    before = {i: power.events(servers.stack, f"srv-{i}") for i in range(NODES)}
    proc = project.pulumi("up", "--yes", "--skip-preview", check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    for i in range(NODES):
        assert "hugepages=" in cmdline(servers, i) and "intel_iommu=on" in cmdline(servers, i)
    # The rails have the plan's addresses, from the network files tuning wrote (ifupdown, the nodes' stack).
    for i, planned in enumerate(servers.plan.nodes):
        got = node.run_in_node(servers.stack, f"srv-{i}", ["ip", "-o", "-4", "addr", "show"], check=True).stdout
        for nic in planned.nics:
            assert f"{nic.netdev}    inet {nic.ip}/{nic.prefixlen}" in got.replace("  ", "    ") or \
                f"{nic.ip}/{nic.prefixlen}" in got, (nic.netdev, got)
        files = node.run_in_node(servers.stack, f"srv-{i}", ["cat", "/etc/network/interfaces.d/railyard-rails"],
                                 check=True).stdout
        assert all(nic.netdev in files for nic in planned.nics)
    # Every host rebooted once, and no two were down at the same time (the lab's own power log).
    windows = []
    for i in range(NODES):
        new = power.events(servers.stack, f"srv-{i}")[len(before[i]):]
        assert [e["event"] for e in new] == ["off", "on"], new
        windows.append((new[0]["time"], new[1]["time"]))
    windows.sort()
    assert all(a[1] <= b[0] for a, b in zip(windows, windows[1:])), windows
    # The cache is the SKU's first data drive, formatted and mounted by its filesystem's UUID,
    # with nofail so a drive that does not come up cannot hold a boot.
    for i in range(NODES):
        got = node.run_in_node(servers.stack, f"srv-{i}", ["sh", "-c", "findmnt -n -o SOURCE,FSTYPE /mnt/cache; "
                                                          "blkid -p -o value -s UUID /dev/nvme2n1; cat /etc/fstab"],
                               check=True).stdout.splitlines()
        assert got[0].split() == ["/dev/nvme2n1", "xfs"], got
        assert f"UUID={got[1]} /mnt/cache xfs defaults,noatime,nofail 0 0" in got[2:], got
    # The controller's view agrees.
    out = project.outputs()
    assert out["inventory"][0]["management_ip"] == node.read_node(servers.stack, "srv-0")["mgmt_address"]


def test_the_inventory_reaches_hosts_on_their_real_paths(project):
    inventory = (paths.runs_dir(STACK) / "inventory.yml").read_text()
    assert "sysfs_root" not in inventory and "procfs_root" not in inventory


def test_a_second_up_changes_nothing_and_reboots_nothing(servers, project):
    before = {i: len(power.events(servers.stack, f"srv-{i}")) for i in range(NODES)}
    preview = project.pulumi("preview", "--diff")
    assert "no host needs a reboot (4 checked)" in preview.stdout + preview.stderr, preview.stdout[-3000:]
    proc = project.pulumi("up", "--yes", "--skip-preview")
    assert "unchanged" in proc.stdout and "updated" not in proc.stdout, proc.stdout[-3000:]
    assert {i: len(power.events(servers.stack, f"srv-{i}")) for i in range(NODES)} == before


def up_fails(project) -> str:
    proc = project.pulumi("up", "--yes", "--skip-preview", check=False)
    assert proc.returncode != 0, proc.stdout[-3000:]
    return proc.stdout + proc.stderr


def test_a_wrong_host_key_is_refused_naming_the_host(servers, project, tmp_path):
    from .conftest import keypair

    _, other = keypair(tmp_path)
    config = copy.deepcopy(project.config)
    config["railyard:hosts"]["pools"]["gpu"]["hosts"][2]["hostKey"] = " ".join(other.split()[:2])
    project.write(config)
    try:
        out = up_fails(project)
        assert "gpu-2: the host key of" in out and "is not the pinned one" in out, out[-3000:]
        assert "PRIVATE KEY" not in out
    finally:
        project.write(project.config)
    project.pulumi("up", "--yes", "--skip-preview")


def test_a_rail_link_that_went_down_is_refused_at_the_next_up(servers, project):
    from railyard.drivers.lab import names, net

    fab, port = names.fabric_ns(servers.stack), names.node_port("srv-1", 3)
    net.run(["ip", "-n", fab, "link", "set", port, "down"], obj=port)
    try:
        refresh = project.pulumi("refresh", "--yes", "--skip-preview")
        assert refresh.returncode == 0
        out = up_fails(project)
        assert "gpu-1: mlx5_5 link down" in out, out[-3000:]
        assert "nothing was changed on the host" in out
    finally:
        net.run(["ip", "-n", fab, "link", "set", port, "up"], obj=port)
    project.pulumi("up", "--yes", "--skip-preview")


def verify(project, *args: str) -> subprocess.CompletedProcess[str]:
    """`railyard verify` of the stack, as a user runs it in the project."""
    return subprocess.run([str(ROOT / ".venv" / "bin" / "railyard"), "verify", "--stack", STACK, *args],
                          cwd=project.dir, env={**project.env, "RAILYARD_ROOT": str(project.dir)}, text=True,
                          capture_output=True, timeout=300, check=False)


def test_verify_reads_each_server_over_ssh_and_names_a_pulled_rail(servers, project):
    """The hosts driver's servers, read as `up` reads them: a pulled rail is the one finding, on the
    server the plan calls gpu-1; a subnet no server can read is refused, never passed."""
    import json

    from railyard.drivers.lab import names, net

    proc = verify(project, "--only", "hardware")
    assert proc.returncode == 0 and "4 node(s) of stack thosts verified" in proc.stdout, proc.stdout + proc.stderr
    fab, port = names.fabric_ns(servers.stack), names.node_port("srv-1", 3)
    net.run(["ip", "-n", fab, "link", "set", port, "down"], obj=port)
    try:
        proc = verify(project, "--only", "hardware", "--json")
    finally:
        net.run(["ip", "-n", fab, "link", "set", port, "up"], obj=port)
    assert proc.returncode == 1, proc.stderr
    assert [(f["kind"], f["node"], f["where"]) for f in json.loads(proc.stdout)] == [
        ("nic-down", "gpu-1", "nics.mlx5_5.state")]
    # The stand-in servers have no HCA: ibnetdiscover fails on each, and verify says so.
    proc = verify(project, "--only", "fabric")
    assert proc.returncode == 2 and "ibnetdiscover exited" in proc.stderr, proc.stderr


def test_a_host_that_does_not_come_back_stops_the_rollout(servers, project):
    before = {i: len(power.events(servers.stack, f"srv-{i}")) for i in range(NODES)}
    config = copy.deepcopy(project.config)
    # A new reservation, so every host needs a reboot, and a reboot command that powers off.
    config["railyard:tuning"]["hugepages"]["percentOfMemory"] = 2
    config["railyard:hosts"]["reboot"].update(command="systemctl poweroff", timeoutSeconds=10)
    project.write(config)
    try:
        out = up_fails(project)
        assert "gpu-0 did not come back within 10 s of `systemctl poweroff`; the rollout stopped, " \
               "and gpu-1, gpu-2, gpu-3 were not rebooted" in out, out[-3000:]
        after = {i: power.events(servers.stack, f"srv-{i}")[before[i]:] for i in range(NODES)}
        assert [e["event"] for e in after[0]] == ["off"]
        assert all(after[i] == [] for i in (1, 2, 3)), after
    finally:
        power.request(servers.stack, "srv-0", "poweron")
        project.write(project.config)
    # The rollout reads srv-0 over SSH at once: its boot must be done (its power log's "on").
    assert power.wait_events(servers.stack, "srv-0", before[0], 2, within=90) == ["off", "on"], \
        "srv-0 did not power on within 90 s"
    # Back to the stack as it was: only the host that booted the abandoned settings reboots.
    proc = project.pulumi("up", "--yes", "--skip-preview", check=False)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    again = {i: power.events(servers.stack, f"srv-{i}")[before[i]:] for i in range(NODES)}
    assert [e["event"] for e in again[0]] == ["off", "on", "off", "on"] and all(again[i] == [] for i in (1, 2, 3))


def test_with_kubernetes_each_host_is_labelled_in_the_cluster_the_stack_names(servers, project):
    """A cluster the servers belong to (a lab control plane of its own, its Nodes registered
    under the servers' names as kubelets would): the layer patches their labels and nothing else."""
    import ipaddress

    from railyard.drivers.lab import control_plane, fabric
    from railyard.drivers.lab.control_plane.api import Client
    from railyard.engine import control_plane as binaries

    from .railyard_project import free_networks

    binaries.ensure()
    cluster = f"{servers.stack}-k8s"
    mgmt = ipaddress.ip_network(free_networks(1)[0])
    fabric.create_fabric(cluster, rails=0, mgmt_cidr=str(mgmt), host_address=str(mgmt.network_address + 1))
    try:
        ranges = control_plane.cluster_ranges([str(mgmt), "198.18.96.0/20", servers.mgmt_cidr, "198.19.0.0/16"])
        state = control_plane.create_control_plane(cluster, address=f"{mgmt.broadcast_address - 1}/{mgmt.prefixlen}",
                                                   service_cidr=ranges[0], pod_cidr=ranges[1])
        api = Client(state["endpoint"].split("//")[1].split(":")[0], control_plane.API_PORT,
                     control_plane.control_plane_dir(cluster) / "pki")
        for i in range(NODES):  # as each server's kubelet registers itself
            api.apply({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": f"srv-{i}", "labels": {"kubernetes.io/hostname": f"srv-{i}"},
                "annotations": {"kwok.x-k8s.io/node": "fake"}}})
        subprocess.run(project.argv("config", "set", "--secret", "--path", "railyard:kubernetes.kubeconfig"),
                       cwd=project.dir, env=project.env, input=control_plane.admin_kubeconfig(cluster), text=True,
                       check=True, capture_output=True)
        config = yaml.safe_load(paths.stack_file(STACK, project.dir).read_text())["config"]
        for i, host in enumerate(config["railyard:hosts"]["pools"]["gpu"]["hosts"]):
            host["nodeName"] = f"srv-{i}"
        project.write(config)
        proc = project.pulumi("up", "--yes", "--skip-preview", check=False)
        assert proc.returncode == 0, "\n".join(ln for ln in proc.stdout.splitlines() if "error" in ln)[-5000:]
        node1 = api.get("/api/v1/nodes/srv-1")
        labels = node1["metadata"]["labels"]
        assert labels["railyard.io/su"] == "gpu-su0" and labels["railyard.io/pool"] == "gpu"
        assert labels["kubernetes.io/hostname"] == "srv-1"  # the kubelet's, left alone
        managers = {f["manager"] for f in node1["metadata"]["managedFields"]}
        assert "railyard" in managers, managers
        assert api.get("/apis/kueue.x-k8s.io/v1beta2/clusterqueues")["items"]
        # Without the layer again: the patch is withdrawn, the kubelet's Node stays. The stack is
        # long-lived, so its resources are protected: unprotected first, deliberately.
        project.write({**config, "railyard:protect": False})
        project.pulumi("up", "--yes", "--skip-preview")
        project.write({**project.config, "railyard:protect": False})
        proc = project.pulumi("up", "--yes", "--skip-preview", check=False)
        assert proc.returncode == 0, "\n".join(ln for ln in proc.stdout.splitlines() if "error" in ln)[-5000:]
        after = api.get("/api/v1/nodes/srv-1")["metadata"]["labels"]
        assert "railyard.io/su" not in after and after["kubernetes.io/hostname"] == "srv-1"
    finally:
        project.write(project.config)
        project.pulumi("up", "--yes", "--skip-preview", check=False)  # protected again, as the next test expects
        control_plane.delete_control_plane(cluster)
        fabric.delete_fabric(cluster)


def test_destroy_of_a_protected_stack_is_refused_and_otherwise_leaves_the_hosts_as_they_were(servers, project):
    vfs = node.run_in_node(servers.stack, "srv-0", ["ip", "-o", "link", "show", "type", "macvlan"], check=True).stdout
    assert len(vfs.splitlines()) == 16  # 2 per compute PF: the tuning is there to remove
    refused = project.pulumi("destroy", "--yes", "--skip-preview", check=False)
    assert refused.returncode != 0 and "protected" in refused.stdout + refused.stderr
    config = copy.deepcopy(project.config)
    config["railyard:protect"] = False
    project.write(config)
    project.pulumi("up", "--yes", "--skip-preview")
    project.pulumi("destroy", "--yes", "--skip-preview")
    for i in range(NODES):
        assert snapshot(servers, i) == servers.before[i], f"srv-{i}"
    # The next boot drops the boot-time settings: the bootloader no longer has them.
    line = node.run_in_node(servers.stack, "srv-0", ["cat", "/boot/railyard/cmdline"], check=True).stdout
    assert "hugepages=" not in line and "iommu" not in line


def test_the_tuning_run_itself_refuses_a_host_whose_key_is_not_the_one_pinned(servers, tmp_path):
    # ansible-runner turns host key checking off unless told otherwise; the run must not.
    from railyard.tuning import runner

    from .conftest import keypair

    _, other = keypair(tmp_path)
    state = node.read_node(servers.stack, "srv-0")
    host = runner.Host("srv-0", state["mgmt_address"], " ".join(other.split()[:2]), {"ansible_user": "root"})
    result = runner.run(f"{STACK}-keys", [host], servers.key.read_text(), tags="hugepages")
    assert not result.ok
    assert any("Host key verification failed" in f.message or "REMOTE HOST IDENTIFICATION" in f.message
               for f in result.failures), [str(f) for f in result.failures]
