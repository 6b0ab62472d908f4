"""Role variables lab nodes need: where their hardware tree presents sysfs and procfs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from railyard.drivers import Reboot, SubnetReading, SwitchLldp, TuningHooks, entry
from railyard.drivers.lab.node import HW_TREE
from railyard.drivers.lab.node.config import NODE_PATH

if TYPE_CHECKING:
    from railyard.model.spec import Spec
    from railyard.model.plan import NodePlan, Plan


# How a lab node is rebooted: the node's shim hands the request to its power supervisor
# (railyard/drivers/lab/node/power.py), which boots it with the command line update-grub wrote.
REBOOT_COMMAND = "systemctl reboot"
REBOOT_TIMEOUT_S = 120

# Roles reading kernel state; in the lab they read the node's hardware tree instead of the
# host's /sys and /proc (which nodes see read-only). host_hw is the read hugepages and iommu share.
TUNING_ROLES = ("host_hw", "sriov", "gpu_nic_affinity", "verify")

# Slurm in a node: no systemd (daemons by pid file), this machine's /usr (packages come from
# scripts/host-deps.sh), no cgroups delegated (linuxproc, no task binding), and counts the node
# cannot show (an HGX board presented on a few CPUs) taken from slurm.conf. The cgroup plugin slurmd
# loads regardless is v1's, which reads nothing at start (this machine's hierarchy is hybrid).
SLURM_VARS = {"slurm_service_manager": "direct", "slurm_install_packages": False,
              "slurm_proctrack_type": "proctrack/linuxproc", "slurm_task_plugin": "task/none",
              "slurm_cgroup_plugin": "cgroup/v1", "slurm_slurmd_parameters": "config_overrides",
              # No GPU driver makes /dev/nvidia<N> in a node: empty files in its own /run/railyard stand in.
              "slurm_gpu_device_prefix": "/run/railyard/nvidia", "slurm_gpu_stand_ins": True,
              # The node's stand-ins for the GPU tools (/run/railyard/bin), first, as on its PATH.
              "slurm_health_check_path": NODE_PATH}


# lldpd in a node: no systemd, this machine's /usr, and a frame every second rather than lldpd's 30 s,
# so that a cable moved by `railyard lab fault` shows in the next verify.
LLDP_VARS = {"lldp_service_manager": "direct", "lldp_install_packages": False, "lldp_tx_interval": 1}


def tuning_vars() -> dict[str, Any]:
    # Lab nodes run this machine's /usr: naming the interpreter spares a discovery run per host.
    out: dict[str, Any] = {"ansible_python_interpreter": "/usr/bin/python3"}
    for role in TUNING_ROLES:
        out[f"{role}_sysfs_root"] = f"{HW_TREE}/sys"
        out[f"{role}_procfs_root"] = f"{HW_TREE}/proc"
    return out


def node_vars(spec: Spec, plan: Plan, node: NodePlan | str) -> dict[str, Any]:
    # Only where Slurm runs, or the hypervisor isolates CPUs (the kernel mode, the lab's only one,
    # reads the node's command line), so a stack with neither keeps its tuning's inputs as they were.
    out = dict(SLURM_VARS) if spec.slurm is not None else {}
    if plan.fabric.cabling_by_lldp:
        out.update(LLDP_VARS)
    if plan.tuning(node).nvlink_domain is not None:
        out["nvlink_domain_procfs_root"] = f"{HW_TREE}/proc"
    if plan.tuning(node).cpu_isolation is not None:
        out["cpu_isolation_sysfs_root"] = f"{HW_TREE}/sys"
        out["cpu_isolation_procfs_root"] = f"{HW_TREE}/proc"
        out["cpu_isolation_irqbalance_restart"] = False  # no service manager, no irqbalance
    return out


def acceptance_vars() -> dict[str, Any]:
    # The probes' tools come from scripts/host-deps.sh; the presented NICs have no verbs devices,
    # and a real one of this machine's is not the node's to measure.
    # The rails are veths, whose bandwidth is CPU time on this machine's few cores: under the full
    # test suite's load one rail of a node was measured 78 % below the others, twice in a row, for
    # no fault of its own (0.89 against 4.02 Gb/s). Unless the stack says otherwise, a lab rail is
    # flagged only at a tenth of its node's others (a real fault, such as a 20 Mb/s shaper, is over
    # 99 % below): the driver's tolerance for rails at the host's rate.
    # An unbounded probe measures those cores and spends them: one second of iperf3 over loopback
    # here moved 25 Gb/s for 1.4 CPU-s (client and server; 4 % of the test suite's CPU in all).
    # At 2 Gb/s it costs 0.12 CPU-s, and a faulty rail (tc's 20 Mb/s) is still 99 % below.
    return {"acceptance_install_packages": False, "acceptance_dev_root": f"{HW_TREE}/dev",
            "acceptance_tolerance": entry("lab").capabilities.rails_at_host_rate, "acceptance_max_gbps": 2}


# The contract's hooks this module provides (railyard.drivers.TuningHooks).
def read_subnet(spec: Spec, plan: Plan, default: Callable[[], SubnetReading]) -> SubnetReading:
    """The lab's subnet is the simulator's (railyard.drivers.lab.subnet): its nodes have no HCA for
    ibnetdiscover to run on, so it runs here, against ibsim serving the lab's cabling."""
    from railyard.drivers.lab import subnet
    from railyard.sweep import SimulatorError

    rate, judged = subnet.simulated_rate(plan.fabric)
    try:
        text = subnet.ibnetdiscover(spec.stack, plan.fabric)
    except SimulatorError as exc:
        return SubnetReading(None, f"the lab's simulated subnet: {exc}")
    where = "the lab's subnet (ibsim)" + ("" if judged else f", every link at {rate}: ibsim trains at most HDR, "
                                          "so link speeds are not judged")
    return SubnetReading(text, where, judged)


def read_switch_lldp(spec: Spec, plan: Plan, private_key: str | None, timeout: float) -> SwitchLldp:
    """A RoCE lab stack's switches are the lab's routers, each running lldpd in its namespace on
    this machine: their tables are asked here, with lldpcli, as a switch's own CLI would be."""
    from railyard.drivers.lab import routers

    if plan.fabric.kind != "roce" or not plan.networks.compute.routed:
        return SwitchLldp({}, "the lab runs switches only for a routed RoCE fabric")
    return SwitchLldp({s.name: routers.lldp_table(spec.stack, s.name, timeout) for s in plan.fabric.switches()},
                      "the lab's switches, with lldpcli")


def reboot(spec: Spec, pool: str) -> Reboot:
    """A lab node reboots through its power supervisor, one node of a pool at a time (the
    stack's railyard:health.maxUnavailable, where it gives one, is the repair loop's)."""
    return Reboot(REBOOT_COMMAND, REBOOT_TIMEOUT_S, 1)


HOOKS = TuningHooks(tuning_vars=tuning_vars, acceptance_vars=acceptance_vars, node_vars=node_vars,
                    read_subnet=read_subnet, read_switch_lldp=read_switch_lldp, reboot=reboot)
