"""A lab node: a network, mount and UTS namespace held by one init process, with sshd inside.

What a node is made of (stack tag T, node N, runtime dir D = lab_dir(stack)/nodes/N):

- netns ``ry-T-n-N`` holding the node's NICs. Each NIC is a veth whose node end carries the name
  the caller gives (the SKU's real netdev name, e.g. ``ibp24s0``) and whose other end is a port
  of the fabric namespace on the NIC's bridge (names.node_port). Rail NICs route per NIC, as on a
  rail-optimized cluster: ``ip rule from <nic address> lookup 100+rail`` (pref 1000+rail), and
  that table holds the rail's subnet on the NIC and, when a spine exists, the compute network via
  the rail's gateway. Same-rail traffic is one hop, other rails cross the spine; there is no
  default route.
- an init process (``node_init.py``) started in that netns with new mount and UTS namespaces. It
  overlays the host's /etc and /var with the node's own layers (D/etc, D/var: what the node
  writes stays there, with ssh host keys of its own), binds D/boot, D/mnt, D/root on /boot,
  /mnt, /root, mounts tmpfs on /run, /tmp and /dev/shm, a read-only sysfs of the node's netns on
  /sys, makes /proc/sys, /proc/irq, /proc/sysrq-trigger, /proc/bus and the rest of the host's root
  filesystem read-only, sets the hostname to N and starts sshd on the management address only
  (root, by key only). The hardware tree directory (D/hw unless `hw_tree_source` names another)
  is bound at /run/railyard/hw. Every node process lacks CAP_SYS_BOOT, CAP_SYS_MODULE and
  CAP_SYS_TIME, so a tuning mistake fails instead of reaching the host's kernel.
- its power: a supervisor on the host (power.py, power.sh) restarts the node when the shim
  (lab-shim.sh) hands it a reboot, booting it with the bootloader's command line; every request
  is also recorded (`reboot_pending`).
- an SR-IOV agent (agent.py), started by the init once sshd runs and again by create when it died:
  it makes VFs when tuning writes sriov_numvfs in the node's hardware tree.

VMs (vm.py) are built by the same `converge`, with their VFs moved in instead of veths made.

Every function is idempotent: `create_node` adopts whatever of the node exists (a crash halfway
leaves nothing it cannot finish) and converges it to the request; `delete_node` of a missing node
succeeds; `read_node` reports what is there now in the shape `create_node` returns, or None.
Results are plain JSON data.

The package, one module per concern (this module only re-exports):

    config     the node's own configuration, checked and written on the host before anything
               runs: NIC requests (Nic), its runtime dir, sshd's config, authorized and host keys
    wiring     its veths and their fabric ports, addresses, per-rail rules and routing tables
    power      reboot, power-off and power-on: the supervisor, its fifo and its log of transitions
    processes  init, sshd and the agent: finding, starting and killing them; running a command
               inside the node; what it recorded (reboot pending) and its host key
    lifecycle  create_node / converge / read_node / delete_node: the three put together
"""

# What code outside the package uses: the lab's Pulumi providers (resources.py, whose pickled
# classes call node.<name> at run time), vm.py, sriov.py, storage, gc, tuning, rules and tests;
# and the API docs/lab.md lists for the module.
from railyard.drivers.lab.node.config import (
    Nic,
    _parse_nics,
    _write_if_changed,
    check_compute_cidr,
    check_dir_location,
    check_unique,
    node_dir,
    parse_keys,
)
from railyard.drivers.lab.node.lifecycle import converge, create_node, delete_node, node_exists, read_node
from railyard.drivers.lab.node.processes import (
    AGENT_DIR,
    HW_TREE,
    _identity,
    agent_pid,
    host_key,
    init_pid,
    reboot_pending,
    run_in_node,
    start_agent,
)
from railyard.drivers.lab.node.wiring import _own_ports

__all__ = [
    "AGENT_DIR", "HW_TREE", "Nic", "_identity", "_own_ports", "_parse_nics", "_write_if_changed", "agent_pid",
    "check_compute_cidr", "check_dir_location", "check_unique", "converge", "create_node", "delete_node",
    "host_key", "init_pid", "node_dir", "node_exists", "parse_keys", "read_node", "reboot_pending", "run_in_node",
    "start_agent",
]
