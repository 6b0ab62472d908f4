"""The hosts driver: servers that already exist, reached over SSH.

A stack lists each pool's servers under `railyard:hosts` (or names an Ansible inventory file per
pool); the plan's node `<pool>-<i>` is the pool's i-th host. The hosts keep the addresses they have
on the management network; the plan's other networks (storage, compute rails) are what tuning
gives them. Boot-time settings are applied with a rolling reboot inside a budget per pool.

    config     the frozen dataclasses the `railyard:hosts` section is parsed into (HostsConfig)
    inventory  reading an Ansible inventory file (YAML or INI) without an Ansible runtime
    rules      KEYS and parse(section, spec): the driver's DriverRules (Pulumi-free)
    remote     the model's own modules run on a host over SSH, nothing copied there
    resources  HostMachine (one host reached, discovered and checked against its SKU) and
               HostReboots (a pool's rolling reboot, with BMC power cycles)
    redfish    a host's BMC: its power state, and the power cycle of a host that does not come back
    probe      what preview says of a pool's hosts: which will reboot, which cannot be reached
    tuning     per-host variables for the roles (user, port, jump host, rails), Pulumi-free
    driver     HostsDriver: the contract's methods, on top of the above

SSH connections and the rolling reboot itself are railyard.remote's (ssh, rollout, reboots),
which the lab driver reboots its nodes with too.

Validation never opens a network connection: a DNS name is checked for its form only, and a host
key is pinned from the stack or trusted on first use, never fetched here.
"""
