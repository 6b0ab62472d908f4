"""A lab node shows its hardware where hardware shows itself: the tree's PCI and RDMA devices,
NUMA nodes and hugepage counters in /sys, its cmdline and meminfo in /proc, while /sys/class/net
stays the node's live interfaces and the host's own PCI devices are not seen. Discovery over SSH
then finds the SKU's GPUs on a lab node exactly as on the server it stands for."""

from __future__ import annotations

import pytest

from railyard.drivers.hosts import remote
from railyard.remote.ssh import Target
from railyard.drivers.lab import hwtree, node
from railyard.model.catalog import load_catalog

SKU = "dgx-h100"


@pytest.fixture(scope="module")
def server(stack_factory, tmp_path_factory):
    c = stack_factory("hwview", rails=2, spine=False)
    c.create_fabric()
    tree = tmp_path_factory.mktemp("hw") / "gpu-0"
    manifest = hwtree.build_hwtree(load_catalog().nodes[SKU], tree)
    state = c.create_node("gpu-0", 0, hw_tree_source=str(tree))
    return c, state, tree, manifest


def sh(c, script: str) -> str:
    return node.run_in_node(c.stack, "gpu-0", ["sh", "-c", script], check=True).stdout


def test_the_trees_pci_and_rdma_devices_are_the_nodes_and_the_hosts_are_not(server):
    c, _, tree, _ = server
    assert sh(c, "ls /sys/bus/pci/devices").split() == sorted(p.name for p in (tree / "sys/bus/pci/devices").iterdir())
    assert sh(c, "ls /sys/class/infiniband").split() == sorted(p.name for p in (tree / "sys/class/infiniband").iterdir())
    roots = sh(c, "ls -d /sys/devices/pci*").split()
    assert roots == sorted(f"/sys/devices/{p.name}" for p in (tree / "sys/devices").glob("pci*"))
    # A device's link resolves inside the tree, as on the server.
    bdf = sorted(p.name for p in (tree / "sys/bus/pci/devices").iterdir())[-1]
    assert sh(c, f"cat /sys/bus/pci/devices/{bdf}/vendor") == (tree / f"sys/bus/pci/devices/{bdf}/vendor").read_text()


def test_links_stay_live_and_read_only(server):
    c, state, _, _ = server
    names = sh(c, "ls /sys/class/net").split()
    assert "lo" in names and all(sh(c, f"cat /sys/class/net/{n}/operstate").strip() for n in names)
    sh(c, "ip link set dev lo mtu 1500; ip link set dev lo mtu 65536")
    assert sh(c, "cat /sys/class/net/lo/mtu").strip() == "65536"
    assert node.run_in_node(c.stack, "gpu-0", ["sh", "-c", "echo 1 > /sys/class/net/lo/mtu"]).returncode != 0


def test_proc_shows_the_nodes_cmdline_and_memory(server):
    c, _, tree, _ = server
    assert sh(c, "cat /proc/cmdline") == (tree / "proc/cmdline").read_text()
    assert sh(c, "cat /proc/meminfo") == (tree / "proc/meminfo").read_text()


def test_discovery_over_ssh_finds_the_skus_gpus_on_the_lab_node(server):
    from railyard.model import hardware_check

    c, state, _, _ = server
    target = Target("gpu-0", state["mgmt_address"], host_keys=(state["host_key"],))
    facts, _ = remote.host_facts(target, private_key=c.key.read_text())
    sku = load_catalog().nodes[SKU]
    from railyard.model.pci_layout import layout

    where = layout(sku).bus_ids  # the addresses the tree gives the SKU's devices
    assert sorted(g["bdf"] for g in facts["gpus"]) == sorted(where[g.name] for g in sku.gpus)
    # The whole SKU check passes: a lab node is, to discovery, the server it stands for.
    assert [str(m) for m in hardware_check.check("gpu-0", facts, sku)] == []


def _peer(c, netdev: str) -> str:
    """The fabric's end of a node's rail veth: the cable a technician would pull."""
    import subprocess

    from railyard.drivers.lab import names

    index = sh(c, f"cat /sys/class/net/{netdev}/iflink").strip()
    out = subprocess.run(["ip", "-n", names.fabric_ns(c.stack), "-o", "link"], capture_output=True, text=True,
                         check=True).stdout
    return next(line.split(": ")[1].split("@")[0] for line in out.splitlines() if line.startswith(f"{index}: "))


def _link_problems(c, state) -> list[str]:
    from railyard.model import hardware_check

    target = Target("gpu-0", state["mgmt_address"], host_keys=(state["host_key"],))
    facts, _ = remote.host_facts(target, private_key=c.key.read_text())
    return [str(m) for m in hardware_check.check("gpu-0", facts, load_catalog().nodes[SKU]) if "link" in str(m)]


def test_a_rail_whose_cable_is_pulled_is_refused_and_one_not_configured_yet_is_not(server):
    """Links stay live: the fabric's end of a rail taken down leaves the node's interface without
    carrier, which the SKU check refuses; an interface merely not configured up yet (a server
    before its rails are set up) is judged by its RDMA port, which is up."""
    import subprocess

    from railyard.drivers.lab import names

    c, state, _, _ = server
    peer = _peer(c, "ibp64s0")
    fabric = ["ip", "-n", names.fabric_ns(c.stack), "link", "set", "dev", peer]
    subprocess.run([*fabric, "down"], check=True)
    try:
        assert _link_problems(c, state) == ["gpu-0: mlx5_3 link down (ibp64s0 down)"]  # operstate of a veth whose peer is down
    finally:
        subprocess.run([*fabric, "up"], check=True)
    sh(c, "ip link set dev ibp64s0 down")
    try:
        assert _link_problems(c, state) == []
    finally:
        sh(c, "ip link set dev ibp64s0 up")


def _host_block_devices() -> list[str]:
    """The host's block devices other than loop devices (the lab's drives are loops), with what
    lsblk knows of each: a change to any of them is a change to a host disk."""
    import subprocess

    out = subprocess.run(["lsblk", "-b", "-n", "-r", "-o", "NAME,MAJ:MIN,TYPE,SIZE,FSTYPE,UUID,MOUNTPOINT"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(line for line in out.splitlines() if not line.startswith("loop"))


def test_the_nodes_dev_holds_its_own_drives_under_the_skus_names_and_nothing_of_the_hosts(server):
    import os

    from railyard.drivers.lab import proc
    from railyard.drivers.lab.node import drives

    c, _, tree, manifest = server
    names = sorted(manifest["nvme"], key=lambda n: int(n[4:-2]))
    assert drives.drive_names(tree) == names
    listed = sh(c, "ls /dev").split()
    assert sorted(listed) == sorted(["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
                                     "stdout", "tty", "urandom", "zero", *names])
    # Each drive is a block device backed by the node's own image, and is as the tree says.
    backing = {os.path.basename(b): dev
               for dev, b in proc.loops_backed_under(node.node_dir(c.stack, "gpu-0") / "drives").items()}
    for name in names:
        rdev, kind = sh(c, f"stat -L -c '%t:%T %F' /dev/{name}").strip().split(" ", 1)
        assert kind == "block special file", name
        major, minor = (int(x, 16) for x in rdev.split(":"))
        dev = backing[f"{name}.img"]
        assert os.stat(dev).st_rdev == os.makedev(major, minor), name
    # A drive is writable by the node, as a server's are to root.
    sh(c, f"mkfs.ext4 -q -F /dev/{names[-1]} && blkid -p -o value -s TYPE /dev/{names[-1]} | grep -qx ext4")
    # No host disk can be reached, nor a device node made for one.
    made = node.run_in_node(c.stack, "gpu-0", ["sh", "-c", "mknod /tmp/disk b 8 0"])
    assert made.returncode != 0 and "Operation not permitted" in made.stderr
    # The node has working pseudo-terminals of its own (ssh sessions with a tty need them).
    assert sh(c, "python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s))'").startswith("/dev/pts/")


def test_a_drive_formatted_in_the_node_leaves_the_hosts_block_devices_as_they_were(server):
    c, _, _, manifest = server
    before = _host_block_devices()
    name = sorted(manifest["nvme"])[0]
    # Mounted by UUID, as an fstab line would: the node's /proc/partitions names its drives.
    sh(c, f"mkfs.xfs -q -f /dev/{name} && mkdir -p /mnt/t && mount UUID=$(blkid -p -o value -s UUID /dev/{name}) "
          f"/mnt/t && findmnt -n -o SOURCE /mnt/t | grep -qx /dev/{name} && echo data > /mnt/t/f && umount /mnt/t "
          f"&& wipefs -a -q /dev/{name}")
    assert _host_block_devices() == before
