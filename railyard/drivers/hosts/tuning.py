"""Per-host role and connection variables of a hosts stack (Pulumi-free, so `railyard tune` and
the Pulumi program hand the roles the same ones): how Ansible reaches the listed server (its user,
port and jump host), the rails' addresses from the plan, for rail_network, the data drives
the dataset cache is made of, and the parallel file system's mount."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from railyard.drivers import Reboot, SwitchLldp, TuningHooks
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
    maxUnavailable."""
    config: HostsConfig = spec.driver_config
    return Reboot(config.reboot.command, float(config.reboot.timeout_seconds), config.pool(pool).reboot_budget)


def bmc_password(stack: str, at: tuple[str | int, ...], cwd: Path | None = None) -> str:
    """A host's BMC password, opened as the engine opens it: that one value of the stack's
    railyard:hosts, read with `pulumi config get --path` (the stack's passphrase or secrets
    provider, as for `up`). It is held in memory for the one power cycle and never written or
    printed. PowerCycleError where it cannot be opened."""
    import json

    from railyard.engine import pulumi
    from railyard.engine.toolchain import ToolchainError
    from railyard.remote.rollout import PowerCycleError

    path = "railyard:hosts" + "".join(f"[{k}]" if isinstance(k, int) else f"[{json.dumps(k)}]" for k in at)
    try:
        got = pulumi.run(["config", "get", "--path", path, "--stack", stack, "--json"], capture=True, check=False,
                         cwd=cwd)
    except ToolchainError as exc:
        raise PowerCycleError(f"its BMC password could not be opened: {exc}") from None
    if got.returncode != 0:
        # stderr only: stdout would be the value itself, had anything been opened.
        said = got.stderr.strip().splitlines()
        raise PowerCycleError(f"its BMC password could not be opened: pulumi config get exited {got.returncode}: "
                              f"{said[-1] if said else 'no output'}")
    try:
        return str(json.loads(got.stdout)["value"])
    except (ValueError, KeyError, TypeError):
        raise PowerCycleError(f"its BMC password could not be opened: pulumi config get --path {path} gave no value") from None


def power_cycle(spec: Spec, plan: Plan, node: str) -> Callable[[float], str] | None:
    """What power-cycles the host through its BMC (railyard:hosts' `bmc`), or None for a host
    without one. Its password is opened only when the cycle is asked for."""
    from railyard.drivers.hosts import redfish

    config: HostsConfig = spec.driver_config
    n = plan.node_named(node)
    bmc = config.host(n.pool, n.index).bmc
    if bmc is None:
        return None

    def cycle(deadline: float) -> str:
        target = redfish.Target.from_props(node, bmc.resource_input(), bmc_password(spec.stack, bmc.password_at))
        return redfish.Client(target).power_cycle(deadline)

    return cycle


# Switches asked at once: each holds one ssh process, as a node's read does (railyard.verify.WORKERS).
SWITCH_WORKERS = 16


def read_switch_lldp(spec: Spec, plan: Plan, private_key: str | None, timeout: float) -> SwitchLldp:
    """The LLDP tables of the switches railyard:hosts.switches names, each read over SSH with its
    lldpCommand (lldpctl's JSON), concurrently and each bounded by `timeout`: a switch that does not
    answer is named, never waited for. The switch's ports must be named as the plan names them
    (Cumulus's `swp12`, routing.port_netdev) or, where the catalog gives the switch's lanes, as SONiC
    does (routing.port_number); a table in another naming is set aside with a note
    (railyard.model.fabric.verify.matched_tables)."""
    from concurrent.futures import ThreadPoolExecutor

    from railyard.model import lldp
    from railyard.remote.ssh import SshError, Target, run

    config: HostsConfig = spec.driver_config
    sw = config.switches
    if sw is None or not sw.hosts:
        return SwitchLldp({}, "railyard:hosts.switches names none")

    def one(s: Any) -> tuple[str, Any]:
        target = Target(s.name, s.address, user=sw.user, port=sw.port, jump=sw.jump_host, host_keys=s.host_keys)
        try:
            result = run(target, sw.command, private_key=private_key, timeout=timeout)
        except SshError as exc:
            return s.name, str(exc).split(": ", 1)[-1]
        except OSError as exc:  # no ssh here: every switch says so, none is passed
            return s.name, f"ssh could not be run: {exc}"
        if result.rc != 0:
            return s.name, f"{sw.command} exited {result.rc}: {lldp.last_said(result.stderr)}"
        try:
            return s.name, lldp.parse(result.stdout)
        except ValueError as exc:
            return s.name, f"{sw.command}: {exc}"

    with ThreadPoolExecutor(max_workers=min(SWITCH_WORKERS, len(sw.hosts))) as pool:
        tables = dict(pool.map(one, sw.hosts))
    return SwitchLldp(tables, f"over SSH, `{sw.command}`")


HOOKS = TuningHooks(node_vars=node_vars, reboot=reboot, power_cycle=power_cycle, read_switch_lldp=read_switch_lldp)
