"""The lab driver: a whole cluster on one machine, as real Linux objects.

Its modules come in four layers, each importing only its own and the ones above it
(tests/unit/drivers/test_contract.py keeps it so):

1. plumbing: names are API, so everything derives them in one place.
       errors  LabError
       names   stack tag, netns and interface names (all derived)
       net     `ip` helpers: namespaces, links, bridges, addresses, routes, rules
       proc    processes, mounts and loop devices read from /proc and /sys
       mountns binding a host directory into a node's mount namespace (a script)
2. programs a node runs or is given, which import nothing of the lab:
       agent      the per-node SR-IOV agent (standard library only)
       node_init  a node's init (pid 1 of its namespaces)
       hwtree     a node's sysfs/procfs tree from the catalog
       gpu_tools  the node's nvidia-smi, all_reduce_perf and dcgmi, answering from that tree
                  (standard library only)
       control_plane.api, control_plane.pki  the control plane's API client and certificates
3. the lab's objects, each idempotent (create adopts and converges an object of the same name,
   delete of a missing one succeeds) and read back for refresh; no Pulumi:
       fabric   per-stack fabric namespace (rail, storage, mgmt bridges), host veth, spine
       routers  a RoCE fabric's switches as FRR routers
       node     node namespaces, their init, sshd, power, running commands inside
       sriov    the host's view of a node's PFs and VFs; VF passthrough marks
       vm       VMs on hypervisor nodes, given the hypervisor's VFs
       storage  the S3 object store (SeaweedFS), local cache on loop devices, shared parallel FS
       control_plane  etcd, kube-apiserver, kwok and Kueue for a lab stack with Kubernetes
       subnet   the stack's InfiniBand subnet as ibsim serves it, and a technician's edits of it
       faults   faults made on purpose (`railyard lab fault`) and their journal, undone by --clear
4. the driver: what the engine and the CLI call.
       resources  the Pulumi dynamic resources wrapping layer 3 (their module paths are in state)
       driver, rules, tuning, cli  the driver contract's halves (railyard.drivers)
       gc         inventory of a stack's objects; removal of unknown ones; destroy_all

Every function that changes the machine needs root and says so at once without it.
docs/lab.md describes the layout and the conventions nodes follow.
"""
