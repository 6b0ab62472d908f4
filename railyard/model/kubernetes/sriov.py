"""Secondary networks, one per rail: what the SR-IOV Network Operator is asked for, and the
NetworkAttachmentDefinitions it would render from them.

Per pool and rail a SriovNetworkNodePolicy makes the plan's VFs on that rail's PF (its netdev name
from the SKU); per rail and tenant a SriovIBNetwork (InfiniBand) or SriovNetwork (RoCE, tagged with
the tenant's VLAN) offers them to the tenant's namespace. Policies exist only where the Kubernetes
nodes make VFs themselves (bare metal with tuning.sriov.vfsPerPf); in the virtual layout the
hypervisor's tuning makes them and hands them to the VMs.

`network_attachment` renders what the operator's controller does (api/v1/helper.go RenderNetAttDef
with bindata/manifests/cni-config/sriov/sriov-cni-config.yaml, v1.6.0), for clusters where that
controller does not run (the lab); tests/unit/model/test_kubernetes.py compares the two.
The operator's SriovIBNetwork has no partition key field (v1.6.0's CRD), so the tenant's pkey is
an annotation here and the subnet manager's partitions enforce it.
"""

from __future__ import annotations

import json
from typing import Any

API = "sriovnetwork.openshift.io/v1"
OPERATOR_NAMESPACE = "sriov-network-operator"
NAD_API = "k8s.cni.cncf.io/v1"


def policy(name: str, *, pool: str, rail: int, pf: str, vfs: int, link: str, mtu: int | None,
           label_key: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceName": f"rail{rail}",
        "nodeSelector": {label_key: pool},
        "numVfs": vfs,
        "nicSelector": {"pfNames": [pf]},
        "deviceType": "netdevice",
        "isRdma": True,
        "linkType": "ib" if link == "infiniband" else "eth",
        "priority": 99,
    }
    if mtu is not None:
        spec["mtu"] = mtu
    return {"apiVersion": API, "kind": "SriovNetworkNodePolicy",
            "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE}, "spec": spec}


def network(name: str, *, kind: str, rail: int, namespace: str, vlan: int | None = None,
            pkey: str | None = None, annotation_prefix: str = "") -> dict[str, Any]:
    """A SriovIBNetwork (kind "infiniband") or SriovNetwork (RoCE) for rail `rail` in `namespace`."""
    spec: dict[str, Any] = {"resourceName": f"rail{rail}", "networkNamespace": namespace}
    metadata: dict[str, Any] = {"name": name, "namespace": OPERATOR_NAMESPACE}
    if kind == "infiniband":
        if pkey is not None:
            metadata["annotations"] = {f"{annotation_prefix}/pkey": pkey}
        return {"apiVersion": API, "kind": "SriovIBNetwork", "metadata": metadata, "spec": spec}
    spec["vlan"] = vlan or 0
    return {"apiVersion": API, "kind": "SriovNetwork", "metadata": metadata, "spec": spec}


def network_attachment(net: dict[str, Any], resource_prefix: str) -> dict[str, Any]:
    """The NetworkAttachmentDefinition the operator renders for a SriovIBNetwork or SriovNetwork,
    for the spec fields `network` sets (resourceName, networkNamespace, vlan)."""
    spec = net["spec"]
    name = net["metadata"]["name"]
    namespace = spec.get("networkNamespace") or net["metadata"]["namespace"]
    # Byte for byte what the template's folded YAML string gives, so a cluster whose operator
    # renders them sees no difference.
    if net["kind"] == "SriovIBNetwork":
        body = '"type":"ib-sriov",'
    else:
        # The template always writes vlan, and vlanQoS when it is 0..7 (its zero value is).
        body = f'"type":"sriov","vlan":{int(spec.get("vlan", 0))},"vlanQoS":{int(spec.get("vlanQoS", 0))},'
    config = '{ "cniVersion":"1.0.0", "name":' + json.dumps(name) + "," + body + '"ipam":{} }'
    return {
        "apiVersion": NAD_API, "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {"k8s.v1.cni.cncf.io/resourceName": f"{resource_prefix}/{spec['resourceName']}"}},
        "spec": {"config": config},
    }
