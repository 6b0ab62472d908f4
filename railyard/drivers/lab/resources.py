"""Pulumi dynamic resources over the lab runtime: each creates, reads, updates and deletes real
Linux objects through the functions of this package.

The provider classes live in this importable module on purpose: Pulumi serializes a dynamic
provider into every resource's state, and dill pickles a class from an importable module by
reference (a few hundred bytes) instead of by value (its whole code, per resource). They hold no
state, so the pickle holds no secret: it is stored in the clear (serialize_as_secret_always).

Per-node resources take their settings as one `spec` input: the Python SDK makes a tracked Output
of every top-level input, and those Outputs were most of what a 448-node preview cost beyond the
engine's own work (docs/benchmarks.md). A node's `spec` is a JSON document in one string (issue
18): the engine keeps every property value of every resource as objects of its own, in inputs,
outputs and the preview's events, about 1.4 KB per value, so a node's seventy-odd values were a
third of a 2,500-node preview's memory; one string is one value. `pulumi preview --diff` shows a
change inside it as a JSON diff, and `railyard review` as the paths that changed
(railyard.review.preview.decoded). A VM's settings stay plain inputs. Diff and the providers read
every layout (`_flat`: settings on top, in a `spec` mapping, in a `spec` string), so a stack
written before a change converges to the new layout without an update.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from railyard.dynamic import TypedResource, one_value


def _flat(props: dict) -> dict:
    """A resource's inputs with its `spec` (a mapping, or one as a JSON string) lifted to the top."""
    spec = props.get("spec")
    if isinstance(spec, str):
        spec = json.loads(spec)
    if not isinstance(spec, dict):
        return dict(props)
    return {**{k: v for k, v in props.items() if k != "spec"}, **spec}


def encode_spec(spec: dict) -> str:
    """A `spec` as the one string the engine stores (railyard.dynamic.one_value)."""
    return one_value(spec)


class _LabProvider(ResourceProvider):
    """Shared semantics: inputs listed in REPLACE replace the object, others update it in place;
    read reports an object removed behind Pulumi's back as gone, so refresh drops it and the next
    up recreates it; create adopts an existing object of the same name (the runtime converges).
    INPUTS and REPLACE name settings whether they sit on top or in `spec`."""

    REPLACE: tuple[str, ...] = ("stack",)
    INPUTS: tuple[str, ...] = ()
    serialize_as_secret_always = False

    def ensure(self, props: dict) -> dict:  # returns runtime outputs
        raise NotImplementedError

    def remove(self, props: dict) -> None:
        raise NotImplementedError

    def observe(self, props: dict) -> dict | None:
        raise NotImplementedError

    def object_id(self, props: dict) -> str:
        raise NotImplementedError

    def create(self, props):
        flat = _flat(props)
        outs = self.ensure(flat)
        return CreateResult(id_=self.object_id(flat), outs={**props, **outs})

    def diff(self, _id, olds, news):
        olds, news = _flat(olds), _flat(news)
        changed = [k for k in self.INPUTS if olds.get(k) != news.get(k)]
        replaces = [k for k in changed if k in self.REPLACE]
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=True)

    def update(self, _id, _olds, news):
        return UpdateResult(outs={**news, **self.ensure(_flat(news))})

    def delete(self, _id, props):
        self.remove(_flat(props))

    def read(self, id_, props):
        seen = self.observe(_flat(props))
        if seen is None:
            return ReadResult(id_=None, outs={})  # gone: refresh removes it from state
        return ReadResult(id_=id_, outs={**props, **seen})


class AccessKeyProvider(ResourceProvider):
    """The stack's SSH key pair (ed25519), generated once; the private key is a Pulumi secret."""

    serialize_as_secret_always = False  # the key is an output; the provider itself holds nothing

    def create(self, props):
        with tempfile.TemporaryDirectory() as d:
            key = Path(d) / "id"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", props["comment"], "-f", str(key)],
                           check=True)
            private, public = key.read_text(), (Path(d) / "id.pub").read_text().strip()
        return CreateResult(id_=props["comment"], outs={**props, "public_key": public, "private_key": private})

    def diff(self, _id, olds, news):
        return DiffResult(changes=olds.get("comment") != news.get("comment"), replaces=["comment"])


class AccessKey(TypedResource, module="lab", name="AccessKey"):
    public_key: pulumi.Output[str]
    private_key: pulumi.Output[str]

    def __init__(self, name: str, comment: str, opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["private_key"]))
        super().__init__(AccessKeyProvider(), name, {"comment": comment, "public_key": None, "private_key": None}, opts)


class FabricProvider(_LabProvider):
    INPUTS = ("stack", "rails", "mgmt_cidr", "host_address")

    def object_id(self, props):
        from railyard.drivers.lab import names

        return names.fabric_ns(props["stack"])

    def ensure(self, props):
        from railyard.drivers.lab import fabric

        state = fabric.create_fabric(props["stack"], rails=int(props["rails"]), mgmt_cidr=props["mgmt_cidr"],
                                     host_address=props["host_address"])
        return {"namespace": state.get("id", self.object_id(props))}

    def observe(self, props):
        from railyard.drivers.lab import fabric

        state = fabric.read_fabric(props["stack"])
        return None if state is None else {"namespace": state.get("id", self.object_id(props))}

    def remove(self, props):
        from railyard import paths
        from railyard.drivers.lab import fabric, proc

        fabric.delete_fabric(props["stack"])
        # The fabric goes last (everything depends on it): with no node left, the stack's lab
        # directory goes too, so destroy leaves nothing behind.
        lab = paths.lab_dir(props["stack"])
        nodes = lab / "nodes"
        if lab.exists() and not (nodes.exists() and any(nodes.iterdir())):
            proc.remove_tree(lab)


class LabFabric(TypedResource, module="lab", name="Fabric"):
    namespace: pulumi.Output[str]

    def __init__(self, name: str, *, stack: str, rails: int, mgmt_cidr: str, host_address: str,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(FabricProvider(), name, {"stack": stack, "rails": rails, "mgmt_cidr": mgmt_cidr,
                                                  "host_address": host_address, "namespace": None}, opts)


class SpineProvider(_LabProvider):
    INPUTS = ("stack", "gateways", "mtu")

    def object_id(self, props):
        from railyard.drivers.lab import names

        return names.spine_ns(props["stack"])

    def ensure(self, props):
        from railyard.drivers.lab import fabric

        mtu = props.get("mtu")
        fabric.create_spine(props["stack"], gateways=list(props["gateways"]), mtu=int(mtu) if mtu else None)
        return {}

    def observe(self, props):
        from railyard.drivers.lab import fabric

        return None if fabric.read_spine(props["stack"]) is None else {}

    def remove(self, props):
        from railyard.drivers.lab import fabric

        fabric.delete_spine(props["stack"])


class LabSpine(TypedResource, module="lab", name="Spine"):
    def __init__(self, name: str, *, stack: str, gateways: list[str], mtu: int | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(SpineProvider(), name, {"stack": stack, "gateways": gateways, "mtu": mtu}, opts)


class SwitchesProvider(_LabProvider):
    """A RoCE stack's switches routing with FRR (routers.py), one object: their links join them."""

    INPUTS = ("stack", "switches", "mtu")

    def object_id(self, props):
        from railyard.drivers.lab import names

        return names.switches_id(props["stack"])

    def ensure(self, props):
        from railyard.drivers.lab import routers

        mtu = props.get("mtu")
        state = routers.ensure(props["stack"], [dict(s) for s in props["switches"]], int(mtu) if mtu else None)
        return {"running": sorted(n for n, s in state["switches"].items() if s["frr"])}

    def observe(self, props):
        from railyard.drivers.lab import routers

        state = routers.read(props["stack"])
        if not state["switches"]:
            return None
        return {"running": sorted(n for n, s in state["switches"].items() if s["frr"])}

    def remove(self, props):
        from railyard.drivers.lab import routers

        routers.delete_all(props["stack"])


class LabSwitches(TypedResource, module="lab", name="Switches"):
    running: pulumi.Output[list]

    def __init__(self, name: str, *, stack: str, switches: list[dict], mtu: int | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(SwitchesProvider(), name, {"stack": stack, "switches": switches, "mtu": mtu, "running": None},
                         opts)


class NodeProvider(_LabProvider):
    """A node and its local storage: the NVMe cache (loop-device images, the configured fs,
    mounted in the node) and its mount of the stack's shared parallel-FS directory, which a
    resource of their own (`LabNodeStorage`) held before issue 18.

    A new cache layout (fs, RAID, drive count or size) is an update, not a replace: create_cache
    starts the cache over and leaves the node running; the review names it as reformatting data
    (`spec.cache.fs` and the like)."""

    REPLACE = ("stack", "node")
    INPUTS = ("stack", "node", "sku", "mgmt", "rails", "storage", "compute_cidr", "authorized_key", "cache", "pfs_mount",
              "nic_firmware", "link_gbps")

    def object_id(self, props):
        from railyard.drivers.lab import names

        return names.node_ns(props["stack"], props["node"])

    def ensure(self, props):
        from railyard.drivers.lab import node

        hw = _hw_tree(props)
        state = node.create_node(
            props["stack"], props["node"], mgmt=dict(props["mgmt"]), authorized_keys=props["authorized_key"],
            # Pulumi's wire format carries every number as a float.
            rails=[{**r, "rail": int(r["rail"]), **_mtu(r)} for r in props["rails"]], storage=dict(props["storage"]) if props.get("storage") else None,
            compute_cidr=props.get("compute_cidr") or None, hw_tree_source=hw,
        )
        return {"host_key": state["host_key"], **_ensure_local_storage(props)}

    def observe(self, props):
        from railyard.drivers.lab import node, storage

        state = node.read_node(props["stack"], props["node"])
        if state is None or not state.get("running"):
            return None
        cache = props.get("cache")
        if cache and not (storage.read_cache(props["stack"], props["node"]) or {}).get("mounted"):
            # Part of what the stack declares is gone: refresh drops the node, and the next up
            # converges it (create adopts the running node and makes the cache again).
            return None
        facts = _facts(props)
        # A node that cannot be read keeps its last facts, as a host down for maintenance does.
        return {"host_key": state["host_key"], **({"facts": facts} if facts is not None else {})}

    def update(self, _id, olds, news):
        # The facts are a refresh's; an update of the node's settings keeps the last ones seen.
        done = super().update(_id, olds, news)
        if olds.get("facts") is not None:
            done.outs = {**(done.outs or {}), "facts": olds["facts"]}
        return done

    def remove(self, props):
        from railyard.drivers.lab import node, storage

        # Whatever the inputs say (a stack written before issue 18 has no `cache` on its nodes):
        # each of these is a no-op where there is nothing.
        storage.delete_pfs_mount(props["stack"], props["node"])
        storage.delete_cache(props["stack"], props["node"])
        node.delete_node(props["stack"], props["node"])


def _facts(props: dict) -> str | None:
    """What `railyard verify` reads of the node, for a refresh to record as the hosts driver's
    does: the same program (sysfs_discovery.host_facts), run in the node as over SSH, with the
    node's LLDP neighbours where the stack's cabling is judged by them (`lldp`), as one string
    (railyard.dynamic.one_value) without the reading's age (lldp.for_state). Drift is judged
    live by verify and the drift check, not from these; None where the program fails."""
    from railyard.drivers.lab import node
    from railyard.drivers.lab.errors import LabError
    from railyard.model import bundle, lldp

    try:
        done = node.run_in_node(props["stack"], props["node"], ["python3", "-I", "-S", "-"],
                                input=bundle.host_facts_program(lldp=bool(props.get("lldp"))), timeout=60)
        return one_value(lldp.for_state(bundle.answer(done.stdout))) if done.returncode == 0 else None
    except (ValueError, OSError, subprocess.TimeoutExpired, LabError):
        return None


def _ensure_local_storage(props: dict) -> dict:
    """The node's cache (`cache`) and parallel-FS mount (`pfs_mount`) as asked, removing what is
    no longer asked for; the cache's device and note, recorded in state."""
    from railyard.drivers.lab import storage

    stack, name, cache, pfs_mount = props["stack"], props["node"], props.get("cache"), props.get("pfs_mount")
    if pfs_mount:
        storage.create_pfs_mount(stack, name, mount=pfs_mount)
    elif storage.pfs_mount_exists(stack, name):
        storage.delete_pfs_mount(stack, name)
    if not cache:
        if storage.cache_exists(stack, name):
            storage.delete_cache(stack, name)
        return {}
    return _cache_outputs(storage.create_cache(stack, name, mount=cache["mount"], fs=cache["fs"], raid=cache["raid"],
                                               drives=int(cache["drives"]), size_gib=float(cache["size_gib"])))


def _cache_outputs(cache: dict) -> dict:
    """What state records of a cache (storage.create_cache's or read_cache's result)."""
    return {"cache_device": cache.get("device"), "cache_note": cache.get("note") or ""}


def _mtu(nic: dict) -> dict:
    """A NIC's MTU as an integer again (Pulumi's wire format carries every number as a float)."""
    return {"mtu": int(nic["mtu"])} if nic.get("mtu") is not None else {}


def _hw_tree(props: dict) -> str | None:
    """The node's hardware tree, built once from its catalog entry: it then holds the state tuning
    writes (hugepage counters, sriov_numvfs), which an update of the node must not reset."""
    from railyard.drivers.lab import hwtree, node
    from railyard.model.catalog import load_catalog

    dest = node.node_dir(props["stack"], props["node"]) / "hwtree"
    if not (dest / "sys").is_dir():
        hwtree.build_hwtree(load_catalog().nodes[props["sku"]], dest, replace=True)
    if props.get("nic_firmware"):
        # A pinned version is the planned one: the node is flashed to it, as a fleet update would.
        hwtree.set_nic_firmware(dest, props["nic_firmware"])
    if props.get("link_gbps"):
        hwtree.set_link_speed(dest, load_catalog().nodes[props["sku"]], int(props["link_gbps"]))
    return str(dest)


class LabNode(TypedResource, module="lab", name="Node"):
    """`cache`: {mount, fs, raid, drives, size_gib} for the node's local cache, or None;
    `pfs_mount`: where the stack's parallel FS is mounted in the node, or None; `nic_firmware`:
    the stack's pinned NIC firmware, which the node's RDMA devices show, or None; `link_gbps`: the
    compute fabric's speed where it is below the SKU's compute NICs' (their ports train at it), or None;
    `lldp`: a refresh records the node's LLDP neighbours too (an Ethernet fabric's cabling)."""

    host_key: pulumi.Output[str]

    def __init__(self, name: str, *, stack: str, node: str, sku: str, mgmt: dict, rails: list[dict],
                 storage: dict | None, compute_cidr: str | None, authorized_key: Any, cache: dict | None = None,
                 pfs_mount: str | None = None, nic_firmware: str | None = None, link_gbps: int | None = None,
                 lldp: bool = False, opts: pulumi.ResourceOptions | None = None):
        # Three top-level inputs: the SDK tracks an Output per top-level input, and the stack and
        # node names are settings like the rest (the providers read them through `_flat`). The
        # authorized key stays apart: it is an Output, unknown until the access key exists.
        super().__init__(NodeProvider(), name, {
            "spec": encode_spec({"stack": stack, "node": node, "sku": sku, "mgmt": mgmt, "rails": rails,
                                 "storage": storage, "compute_cidr": compute_cidr, "cache": cache,
                                 "pfs_mount": pfs_mount,
                                 # Only where set: other stacks keep their inputs as before.
                                 **({"nic_firmware": nic_firmware} if nic_firmware else {}),
                                 **({"link_gbps": link_gbps} if link_gbps else {}),
                                 # Not among NodeProvider.INPUTS: it changes what a refresh reads, not
                                 # the node. A node made before it plans no update for it: read()
                                 # gets the state's outputs, which hold it only after an update of
                                 # the node's settings, so its refreshes read them from then on.
                                 **({"lldp": True} if lldp else {})}),
            "authorized_key": authorized_key, "host_key": None,
        }, opts)


class ObjectStoreProvider(_LabProvider):
    """The stack's S3-compatible object tier (SeaweedFS) with its bucket and sample dataset. Its
    one identity is generated at create and kept as secret outputs."""

    REPLACE = ("stack", "address")
    INPUTS = ("stack", "address", "bucket")

    def object_id(self, props):
        from railyard.drivers.lab import names

        return names.storage_ns(props["stack"])

    def create(self, props):
        import secrets

        keys = {"access_key": "RY" + secrets.token_hex(9).upper(), "secret_key": secrets.token_urlsafe(30)}
        outs = self._ensure({**props, **keys})
        return CreateResult(id_=self.object_id(props), outs={**props, **keys, **outs})

    def update(self, _id, olds, news):
        keys = {k: olds[k] for k in ("access_key", "secret_key")}
        return UpdateResult(outs={**news, **keys, **self._ensure({**news, **keys})})

    def _ensure(self, props):
        from railyard.drivers.lab import storage

        state = storage.create_object_store(props["stack"], address=props["address"], access_key=props["access_key"],
                                            secret_key=props["secret_key"], bucket=props["bucket"])
        return {"endpoint": state["endpoint"], "dataset_prefix": (state.get("dataset") or {}).get("prefix", "")}

    def observe(self, props):
        from railyard.drivers.lab import storage

        state = storage.read_object_store(props["stack"])
        if state is None or not state.get("running"):
            return None
        return {"endpoint": state["endpoint"]}

    def remove(self, props):
        from railyard.drivers.lab import storage

        storage.delete_object_store(props["stack"])


class LabObjectStore(TypedResource, module="lab", name="ObjectStore"):
    endpoint: pulumi.Output[str]
    dataset_prefix: pulumi.Output[str]
    access_key: pulumi.Output[str]
    secret_key: pulumi.Output[str]

    def __init__(self, name: str, *, stack: str, address: str, bucket: str, opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["secret_key"]))
        super().__init__(ObjectStoreProvider(), name, {
            "stack": stack, "address": address, "bucket": bucket, "endpoint": None, "dataset_prefix": None,
            "access_key": None, "secret_key": None}, opts)


class NodeStorageProvider(_LabProvider):
    """Stacks written before issue 18 hold a node's cache and parallel-FS mount as a resource of
    their own, with this provider pickled in its state. The node's resource owns them now
    (NodeProvider), so the program no longer declares this one and the engine deletes it from
    state: that delete must leave the cache mounted (the node's update has adopted it, and the
    node's own delete removes it). Read still reports what is there, for a refresh in between;
    nothing creates or diffs it any more."""

    def observe(self, props):
        from railyard.drivers.lab import storage

        cache = storage.read_cache(props["stack"], props["node"])
        return _cache_outputs(cache) if cache and cache.get("mounted") else None

    def remove(self, props):
        pass


def _guest_tree(props: dict) -> str | None:
    """The VM's hardware tree: its guest topology as a guest SKU (railyard.model.guest_sku) presents
    it. Built again only when the topology changes, so the state guest tuning wrote (hugepage
    counters) survives an update that leaves it as it was."""
    guest = props.get("guest")
    if not guest:
        return None
    from railyard.drivers.lab import hwtree, node, vm
    from railyard.model.catalog import load_catalog
    from railyard.model.guest_sku import guest_sku
    from railyard.dynamic import wire_numbers

    if node.node_exists(props["stack"], props["vm"]) and not vm.is_vm(props["stack"], props["vm"]):
        return None  # a node of that name: create_vm refuses it, and its tree is not the VM's to rebuild
    guest = wire_numbers(guest)
    dest = node.node_dir(props["stack"], props["vm"]) / "hwtree"
    record = dest / "guest.json"
    text = json.dumps(guest, sort_keys=True)
    try:
        same = record.read_text() == text
    except OSError:
        same = False
    if not same or not (dest / "sys").is_dir():
        hwtree.build_hwtree(guest_sku(load_catalog().nodes[guest["sku"]], guest["topology"], props["vm"]), dest,
                            replace=True)
        record.write_text(text)
    return str(dest)


class VmProvider(_LabProvider):
    REPLACE = ("stack", "vm", "hypervisor")
    INPUTS = ("stack", "vm", "hypervisor", "mgmt", "vfs", "storage", "compute_cidr", "authorized_key", "guest")

    def object_id(self, props):
        from railyard.drivers.lab import names

        return names.node_ns(props["stack"], props["vm"])

    def ensure(self, props):
        from railyard.drivers.lab import vm

        state = vm.create_vm(
            props["stack"], props["vm"], hypervisor=props["hypervisor"], mgmt=dict(props["mgmt"]),
            authorized_keys=props["authorized_key"],
            vfs=[{**v, "slot": int(v["slot"]), "rail": int(v["rail"]), **_mtu(v)} for v in props["vfs"]],
            storage=dict(props["storage"]) if props.get("storage") else None,
            compute_cidr=props.get("compute_cidr") or None, hw_tree_source=_guest_tree(props),
        )
        return {"host_key": state["host_key"]}

    def observe(self, props):
        from railyard.drivers.lab import vm

        state = vm.read_vm(props["stack"], props["vm"])
        if state is None or not state.get("running"):
            return None
        return {"host_key": state["host_key"]}

    def remove(self, props):
        from railyard.drivers.lab import vm

        vm.delete_vm(props["stack"], props["vm"])


class LabVm(TypedResource, module="lab", name="Vm"):
    host_key: pulumi.Output[str]

    def __init__(self, name: str, *, stack: str, vm: str, hypervisor: str, mgmt: dict, vfs: list[dict],
                 storage: dict | None, compute_cidr: str | None, authorized_key: Any, guest: dict | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(VmProvider(), name, {
            "stack": stack, "vm": vm, "hypervisor": hypervisor, "mgmt": mgmt, "vfs": vfs, "storage": storage,
            "compute_cidr": compute_cidr, "authorized_key": authorized_key, "guest": guest, "host_key": None}, opts)


class ControlPlaneProvider(_LabProvider):
    """The stack's Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
    kube-scheduler, Kueue, kwok) on the management network; its admin kubeconfig is a secret
    output. A new address or range re-issues certificates and restarts what reads them."""

    INPUTS = ("stack", "address", "service_cidr", "pod_cidr")

    def object_id(self, props):
        from railyard.drivers.lab import names

        return names.control_plane_ns(props["stack"])

    def ensure(self, props):
        from railyard.drivers.lab import control_plane

        state = control_plane.create_control_plane(props["stack"], address=props["address"],
                                                   service_cidr=props["service_cidr"], pod_cidr=props["pod_cidr"])
        return {"endpoint": state["endpoint"], "ca_certificate": state["ca_certificate"],
                "kubeconfig": control_plane.admin_kubeconfig(props["stack"])}

    def observe(self, props):
        from railyard.drivers.lab import control_plane

        state = control_plane.read_control_plane(props["stack"])
        if state is None or not all(state["running"].values()):
            return None
        return {"endpoint": state["endpoint"], "ca_certificate": state["ca_certificate"]}

    def diff(self, _id, olds, news):
        from railyard.drivers.lab import control_plane

        result = super().diff(_id, olds, news)
        if not result.changes and control_plane.needs_renewal(news["stack"]):
            # Certificates near expiry: an up renews them although no input changed.
            return DiffResult(changes=True, replaces=[], delete_before_replace=True)
        return result

    def remove(self, props):
        from railyard.drivers.lab import control_plane

        control_plane.delete_control_plane(props["stack"])


class LabControlPlane(TypedResource, module="lab", name="ControlPlane"):
    endpoint: pulumi.Output[str]
    ca_certificate: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, *, stack: str, address: str, service_cidr: str, pod_cidr: str,
                 opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["kubeconfig"]))
        super().__init__(ControlPlaneProvider(), name, {
            "stack": stack, "address": address, "service_cidr": service_cidr, "pod_cidr": pod_cidr,
            "endpoint": None, "ca_certificate": None, "kubeconfig": None}, opts)
