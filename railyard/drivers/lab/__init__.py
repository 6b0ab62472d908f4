"""The lab driver's runtime: a whole cluster on one machine, as real Linux objects.

No Pulumi here: the lab's Pulumi dynamic resources wrap these functions. Each operation is
idempotent (create adopts an existing object of the same name and converges it, delete of a
missing object succeeds), returns plain JSON-able data, and has a read/exists counterpart for
refresh. Every function that changes the machine needs root and says so at once without it.

    names   stack tag, netns and interface names (all derived; names are API)
    net     `ip` helpers: namespaces, links, bridges, addresses, routes, rules
    fabric  per-stack fabric namespace (rail, storage, mgmt bridges), host veth, spine
    node    node namespaces, their init, sshd, running commands inside, reboot-pending
    agent   the per-node SR-IOV agent (runs inside a node; standard library only)
    sriov   the host's view of a node's PFs and VFs; VF passthrough marks
    vm      VMs on hypervisor nodes, given the hypervisor's VFs
    storage the S3 object store (SeaweedFS), local cache on loop devices, shared parallel FS
    mountns binding a host directory into a node's mount namespace (a script)
    hwtree  a node's sysfs/procfs tree from the catalog
    gc      inventory of a stack's objects; removal of unknown ones; destroy_all
    proc    processes, mounts and loop devices read from /proc and /sys

docs/lab.md describes the layout and the conventions nodes follow.
"""
