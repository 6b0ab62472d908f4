"""Per-host role and connection variables of a hosts stack (Pulumi-free, so `railyard tune` and
the Pulumi program hand the roles the same ones): how Ansible reaches the listed server (its user,
port and jump host), the rails' addresses from the plan, for rail_network, the data drives
the dataset cache is made of, and the parallel file system's mount."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from railyard.drivers import Reboot, TuningHooks
from railyard.drivers.hosts.config import DEFAULT_PORT, Host, HostsConfig
from railyard.ssh_client import JUMP_VAR

if TYPE_CHECKING:
    from railyard.model.spec import Spec
    from railyard.model.plan import NodePlan, Plan


def jump(host: Host) -> dict | None:
    """The host's jump host as resources and the tuning run take it."""
    j = host.jump_host
    return {"address": j.address, "user": j.user, "port": j.port, "host_keys": list(j.host_keys)} if j else None


def node_vars(spec: Spec, plan: Plan, node: NodePlan | str) -> dict[str, Any]:
    config: HostsConfig = spec.driver_config
    if isinstance(node, str):
        node = plan.node_named(node)
    host = config.host(node.pool, node.index)
    out: dict[str, Any] = {"ansible_user": host.user}
    if host.port != DEFAULT_PORT:
        out["ansible_port"] = host.port
    if host.jump_host is not None:
        out[JUMP_VAR] = jump(host)  # the tuning run makes its ProxyCommand
    # The rails' addresses from the plan, written for the host's network stack (rail_network):
    # on servers Railyard did not build, nothing else gives them.
    mtu = plan.networks.compute.mtu
    out["rail_network_interfaces"] = [
        {"name": nic.netdev or nic.name, "address": nic.ip, "prefixlen": nic.prefixlen, "rail": nic.rail,
         "gateway": nic.gateway, "mtu": mtu} for nic in node.nics]
    if any(nic.gateway for nic in node.nics):
        out["rail_network_compute_cidr"] = plan.networks.compute.cidr
    # The cache on the server's own data drives (the lab driver mounts its nodes' caches itself).
    pool = plan.storage.pool(node.pool)
    if pool is not None and pool.drives and pool.drive_tb:
        out["dataset_cache_drive_count"] = pool.drives
        out["dataset_cache_drive_bytes"] = round(pool.drive_tb * 1e12)
        out["dataset_cache_raid"] = spec.storage.local_cache.raid
    # The parallel file system's client mount (parallel_fs): made where the stack gives its source,
    # checked where the site mounts it.
    pfs = spec.storage.parallel_fs
    if pfs is not None:
        out.update(parallel_fs_kind=pfs.kind, parallel_fs_mount=pfs.mount, parallel_fs_source=pfs.source,
                   parallel_fs_options=pfs.options)
    return out


# The contract's hooks this module provides (railyard.drivers.TuningHooks).
def reboot(spec: Spec, pool: str) -> Reboot:
    """The stack's reboot command and timeout (railyard:hosts.reboot), within the pool's
    maxUnavailable. No BMC power cycle here: its password is a secret only the engine opens."""
    config: HostsConfig = spec.driver_config
    return Reboot(config.reboot.command, float(config.reboot.timeout_seconds), config.pool(pool).reboot_budget)


HOOKS = TuningHooks(node_vars=node_vars, reboot=reboot)
