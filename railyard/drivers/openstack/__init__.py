"""The openstack driver: the virtual layout's VMs as nova servers on an operator's OpenStack, on
provider networks the stack names (railyard:openstack), through the official Pulumi SDK.

The VMs are the machines Railyard gets (Capabilities.vms == "are-nodes"); their hypervisors, and so
their host tuning, are the operator's. Each VM is a server with the plan's shape (a pinned,
NUMA-aware flavor with its GPUs through a PCI alias), its management address and one SR-IOV port per
planned VF at the plan's rail address.

    config     the frozen dataclasses the `railyard:openstack` section is parsed into (OpenStackConfig)
    rules      KEYS and parse(section, spec): the driver's DriverRules (Pulumi-free)
    layout     names, flavors from the plan's guest topology and whether nova can pin them, the
               cloud-config that pins a server's host key (Pulumi-free)
    tuning     per-VM connection variables for the roles (the jump host), Pulumi-free
    resources  HostKey: a server's SSH host key, generated once
    driver     OpenStackDriver: the contract's methods, declaring the SDK's resources

Validation never talks to the cloud: what it holds (the image, the physical networks, the PCI
alias) is the provider's to refuse at `up`.
"""
