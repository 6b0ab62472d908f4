"""The coreweave driver's rules for a stack file: its `railyard:coreweave` keys, and what they must
say before anything is created.

Pulumi-free: the spec parser (through railyard.stack) and the CLI read it. `parse(section, spec)`
returns the CoreWeaveConfig (config.py) and every problem at once, each naming its config path.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any, Mapping

from railyard.drivers import RuleHooks
from railyard.drivers.coreweave import catalog
from railyard.drivers.coreweave.config import (
    KUEUE_CHART, KUEUE_NAMESPACE, LIFECYCLE_STATUSES, TAINT_EFFECTS, Cluster, CoreWeaveConfig, KueueChart,
    LifecycleRule, ObjectStorage, PoolConfig, Prefix, Taint, topology_levels,
)
from railyard.model.catalog import load_catalog
from railyard.model.errors import Problem
from railyard.model.spec import SectionReader, Secret, did_you_mean, is_secret, show

if TYPE_CHECKING:
    from railyard.model.spec import Spec


P = "railyard:coreweave"

KEYS: dict[str, tuple[str, ...]] = {
    "": ("zone", "apiToken", "vpcName", "cluster", "pools", "objectStorage", "kueue"),
    "cluster": ("name", "version", "public", "podCidr", "serviceCidr", "internalLbCidrs"),
    "cluster.<prefix>": ("name", "cidr"),
    "pools.<pool>": ("autoscaling", "minNodes", "maxNodes", "labels", "taints"),
    "pools.<pool>.taints[]": ("key", "value", "effect"),
    "objectStorage": ("policy", "lifecycle"),
    "objectStorage.lifecycle[]": ("id", "status", "prefix", "expirationDays", "abortIncompleteMultipartUploadDays"),
    "kueue": ("repository", "chart", "version", "namespace"),
}

# CoreWeave zones are written upper case: US-EAST-04A, RNO2A.
_ZONE = re.compile(r"^[A-Z0-9]+(-[A-Z0-9]+)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# CKS's minor version form, `v1.35` (the SDK's CksCluster.version); `1.35` is read as the same.
_VERSION = re.compile(r"^v?1\.[0-9]{2}$")
NAME_MAX = 30
# S3's lifecycle API carries Days and DaysAfterInitiation as 32-bit integers.
S3_MAX_DAYS = 2**31 - 1
"""CoreWeave's limit on VPC and CKS cluster names."""


def default_name(*parts: str) -> str:
    """A DNS label of at most NAME_MAX characters made from `parts` (the region, the stack)."""
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return name[:NAME_MAX].strip("-") or "railyard"


def name_ok(name: str) -> bool:
    return len(name) <= NAME_MAX and bool(_DNS_LABEL.match(name))
# Kubernetes label keys: an optional DNS-subdomain prefix and a name of at most 63 characters.
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return bool(_LABEL_NAME.match(name)) and (not prefix or (len(prefix) <= 253 and bool(_SUBDOMAIN.match(prefix))))


class _Reader(SectionReader):
    def __init__(self) -> None:
        super().__init__(f"only {P}.apiToken is a secret here; set this one without --secret")

    def missing(self, path: str, allowed: str, hint: str = "") -> None:
        # This driver's problems have always shown an absent required key as an empty value, without
        # a hint of its own: kept, so they read as they did.
        self.problem(path, show(None), allowed, "this key is required")

    def prefix(self, value: Any, path: str) -> Prefix | None:
        m = self.mapping(value, path, KEYS["cluster.<prefix>"])
        if m is None:
            return None
        if not m:
            self.problem(path, show(value), "a mapping with name and cidr", "this key is required")
            return None
        name = self.string(m, "name", f"{path}.name", "a DNS label: a-z, 0-9 and '-' (the VPC prefix's name)",
                           _DNS_LABEL, required=True)
        cidr = self.cidr(m, "cidr", f"{path}.cidr")
        return Prefix(name, cidr) if name is not None and cidr is not None else None

    def cidr(self, m: Mapping, key: str, path: str) -> str | None:
        value = self.plain(m, key, path, "an IPv4 network, e.g. 10.0.0.0/16", required=True)
        if value is None:
            return None
        try:
            return str(ipaddress.IPv4Network(str(value), strict=True))
        except ValueError as exc:
            self.problem(path, show(value), "an IPv4 network with no host bits set, e.g. 10.0.0.0/16", str(exc))
            return None


def _api_token(r: _Reader, s: Mapping) -> Secret | None:
    """Optional here: without it the provider's own token is used (preflight checks one is set)."""
    value = s.get("apiToken")
    if value is None:
        return None
    if not is_secret(value):
        r.problem(f"{P}.apiToken", "a plain-text value (not shown)", "a Pulumi secret",
                  f"pulumi config set --secret --path {P}.apiToken <token>; a token in plain text would be in "
                  "the stack file and in every preview")
        return None
    return Secret(value["secure"])


def _cluster(r: _Reader, s: Mapping, spec: Spec) -> Cluster | None:
    path = f"{P}.cluster"
    m = r.mapping(s.get("cluster"), path, KEYS["cluster"])
    if m is None:
        return None
    if not m:
        r.problem(path, "nothing", "a mapping with version, podCidr, serviceCidr and internalLbCidrs",
                  "this key is required: the CKS cluster's Kubernetes version and the VPC prefixes it uses")
        return None
    name = r.string(m, "name", f"{path}.name", f"a DNS label of at most {NAME_MAX} characters") or default_name(spec.stack)
    if not name_ok(name):
        r.problem(f"{path}.name", show(name), f"a DNS label of at most {NAME_MAX} characters")
    version = r.string(m, "version", f"{path}.version", "a Kubernetes minor version CKS offers, e.g. \"v1.32\"",
                       _VERSION, required=True)
    if version is not None and not version.startswith("v"):
        version = f"v{version}"
    public = r.boolean(m, "public", f"{path}.public", default=False) is True
    pod = r.prefix(m.get("podCidr"), f"{path}.podCidr")
    service = r.prefix(m.get("serviceCidr"), f"{path}.serviceCidr")
    lbs_raw = r.plain(m, "internalLbCidrs", f"{path}.internalLbCidrs", "a list of {name, cidr}", required=True)
    lbs: list[Prefix] = []
    if lbs_raw is not None:
        if not isinstance(lbs_raw, list) or not lbs_raw:
            r.problem(f"{path}.internalLbCidrs", show(lbs_raw), "a non-empty list of {name, cidr}")
        else:
            lbs = [p for i, v in enumerate(lbs_raw) if (p := r.prefix(v, f"{path}.internalLbCidrs[{i}]"))]
    if version is None or pod is None or service is None or len(lbs) != len(lbs_raw or []) or not lbs:
        return None
    return Cluster(name=name, version=version, pod_cidr=pod, service_cidr=service, internal_lb_cidrs=tuple(lbs),
                   public=public)


def _check_prefixes(r: _Reader, cluster: Cluster, spec: Spec) -> None:
    """The VPC holds the plan's networks and the cluster's ranges: no two may overlap, and no two
    prefixes may share a name (CKS finds the cluster's ranges by name)."""
    path = f"{P}.cluster"
    named = [(f"{path}.podCidr", cluster.pod_cidr), (f"{path}.serviceCidr", cluster.service_cidr)]
    named += [(f"{path}.internalLbCidrs[{i}]", p) for i, p in enumerate(cluster.internal_lb_cidrs)]
    fabric = spec.fabric
    theirs = []
    if fabric is not None:
        # The management network is the VPC's primary host prefix (the nodes' addresses); the
        # storage and compute networks are the plan's too, and no cluster range may shadow them.
        theirs = [(f"railyard:fabric.{n}.cidr", Prefix(n, str(getattr(fabric, n).cidr)))
                  for n in ("management", "storage", "compute")]
    seen: dict[str, str] = {}
    for where, p in theirs + named:
        if p.name in seen:
            r.problem(f"{where}.name", show(p.name), "a prefix name no other VPC prefix has",
                      f"{seen[p.name]} is named {p.name!r} already")
        seen.setdefault(p.name, where)
    everything = theirs + named
    for i, (where, p) in enumerate(everything):
        for other_where, q in everything[:i]:
            if ipaddress.ip_network(p.cidr).overlaps(ipaddress.ip_network(q.cidr)) and where.startswith(path):
                r.problem(f"{where}.cidr", p.cidr, f"a range apart from {other_where} ({q.cidr})",
                          "the cluster's pod, service and load-balancer ranges are VPC prefixes beside the plan's "
                          "networks, and CKS routes each to one place")


def _pools(r: _Reader, s: Mapping, spec: Spec, label_prefix: str | None) -> dict[str, PoolConfig]:
    path = f"{P}.pools"
    m = r.mapping(s.get("pools"), path, None) or {}
    known = [p.name for p in spec.node_pools]
    for name in m:
        if name not in known:
            r.problem(f"{path}.{name}", "a pool the stack does not have", "one of " + ", ".join(known),
                      did_you_mean(name, known))
    mapping = catalog.instance_types()
    out = {}
    for i, pool in enumerate(spec.node_pools):
        pp = f"{path}.{pool.name}"
        pm = r.mapping(m.get(pool.name), pp, KEYS["pools.<pool>"]) or {}
        entry = mapping.get(pool.sku)
        if entry is None:
            r.problem(f"railyard:nodePools[{i}].sku", show(pool.sku),
                      "an SKU with a CoreWeave instance type: " + ", ".join(sorted(mapping)),
                      f"{catalog.INSTANCE_TYPES.name} maps an SKU only where a source says which instance it is")
        autoscaling = r.boolean(pm, "autoscaling", f"{pp}.autoscaling", default=False) is True
        lo = r.integer(pm, "minNodes", f"{pp}.minNodes", minimum=0)
        hi = r.integer(pm, "maxNodes", f"{pp}.maxNodes", minimum=1)
        if not autoscaling:
            for key, v in (("minNodes", lo), ("maxNodes", hi)):
                if v is not None:
                    r.problem(f"{pp}.{key}", show(v), f"absent while {pp}.autoscaling is false",
                              "set autoscaling: true for the autoscaler to use the bounds")
        else:
            if lo is None or hi is None:
                r.problem(f"{pp}.{'minNodes' if lo is None else 'maxNodes'}", "nothing", "an integer",
                          "an autoscaled pool needs both bounds")
            elif not lo <= pool.count <= hi:
                r.problem(f"{pp}.minNodes", f"{lo}..{hi}",
                          f"bounds around railyard:nodePools[{i}].count ({pool.count})",
                          "targetNodes is the pool's count, and the autoscaler keeps it inside the bounds")
        labels = _labels(r, pm.get("labels"), f"{pp}.labels", label_prefix)
        taints = _taints(r, pm.get("taints"), f"{pp}.taints")
        if entry is not None:
            out[pool.name] = PoolConfig(instance_type=entry.instance_type, autoscaling=autoscaling, min_nodes=lo,
                                        max_nodes=hi, labels=labels, taints=taints)
    return out


def _labels(r: _Reader, value: Any, path: str, label_prefix: str | None) -> dict[str, str]:
    m = r.mapping(value, path, None) or {}
    out = {}
    for key, v in m.items():
        if not isinstance(key, str) or not label_key_ok(key):
            r.problem(f"{path}.{key}", "a label key Kubernetes refuses",
                      "[prefix/]name: name up to 63 of A-Z a-z 0-9 - _ . (prefix a DNS subdomain)")
            continue
        if label_prefix is not None and key.startswith(f"{label_prefix}/"):
            r.problem(f"{path}.{key}", "a key under the Kubernetes layer's labelPrefix",
                      f"a key outside {label_prefix}/", "Railyard sets those from the plan (docs/kubernetes.md)")
            continue
        if is_secret(v) or not isinstance(v, str) or not _LABEL_VALUE.match(v):
            r.problem(f"{path}.{key}", show(v), "a label value: up to 63 of A-Z a-z 0-9 - _ . (a quoted string)")
            continue
        out[key] = v
    return out


def _taints(r: _Reader, value: Any, path: str) -> tuple[Taint, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        r.problem(path, show(value), "a list of {key, value, effect}")
        return ()
    out = []
    for i, t in enumerate(value):
        tp = f"{path}[{i}]"
        m = r.mapping(t, tp, KEYS["pools.<pool>.taints[]"])
        if m is None:
            continue
        key = r.string(m, "key", f"{tp}.key", "a taint key ([prefix/]name)", required=True)
        if key is not None and not label_key_ok(key):
            r.problem(f"{tp}.key", show(key), "[prefix/]name: name up to 63 of A-Z a-z 0-9 - _ .")
            key = None
        val = r.string(m, "value", f"{tp}.value", "a taint value", _LABEL_VALUE)
        effect = r.string(m, "effect", f"{tp}.effect", "one of " + ", ".join(TAINT_EFFECTS), required=True)
        if effect is not None and effect not in TAINT_EFFECTS:
            r.problem(f"{tp}.effect", show(effect), "one of " + ", ".join(TAINT_EFFECTS),
                      did_you_mean(effect, TAINT_EFFECTS))
            effect = None
        if key is not None and effect is not None:
            out.append(Taint(key=key, effect=effect, value=val))
    return tuple(out)


def _object_storage(r: _Reader, s: Mapping, spec: Spec) -> ObjectStorage:
    path = f"{P}.objectStorage"
    m = r.mapping(s.get("objectStorage"), path, KEYS["objectStorage"]) or {}
    if m and spec.storage.object is None:
        r.problem(path, "a policy or lifecycle", "absent while the stack has no railyard:storage.object",
                  "they belong to the object tier's bucket")
    policy = r.plain(m, "policy", f"{path}.policy", "an S3 bucket policy document (Version, Statement)")
    if policy is not None and (not isinstance(policy, dict) or "Statement" not in policy):
        r.problem(f"{path}.policy", show(policy), "an S3 bucket policy document: a mapping with Version and Statement")
        policy = None
    rules: list[LifecycleRule] = []
    raw = r.plain(m, "lifecycle", f"{path}.lifecycle", "a list of lifecycle rules")
    if raw is not None and not isinstance(raw, list):
        r.problem(f"{path}.lifecycle", show(raw), "a list of lifecycle rules")
        raw = None
    ids: set[str] = set()
    for i, rule in enumerate(raw or []):
        rp = f"{path}.lifecycle[{i}]"
        rm = r.mapping(rule, rp, KEYS["objectStorage.lifecycle[]"])
        if rm is None:
            continue
        rid = r.string(rm, "id", f"{rp}.id", "a rule id", required=True)
        if rid is not None and rid in ids:
            r.problem(f"{rp}.id", show(rid), "an id no other rule has")
        status = r.string(rm, "status", f"{rp}.status", "Enabled or Disabled") or "Enabled"
        if status not in LIFECYCLE_STATUSES:
            r.problem(f"{rp}.status", show(status), "Enabled or Disabled", did_you_mean(status, LIFECYCLE_STATUSES))
        prefix = r.string(rm, "prefix", f"{rp}.prefix", "an object key prefix")
        days = r.integer(rm, "expirationDays", f"{rp}.expirationDays", minimum=1, maximum=S3_MAX_DAYS)
        abort = r.integer(rm, "abortIncompleteMultipartUploadDays", f"{rp}.abortIncompleteMultipartUploadDays",
                          minimum=1, maximum=S3_MAX_DAYS)
        if days is None and abort is None and rid is not None:
            r.problem(rp, "a rule that does nothing", "expirationDays or abortIncompleteMultipartUploadDays")
        if rid is not None:
            ids.add(rid)
            rules.append(LifecycleRule(id=rid, status=status, prefix=prefix, expiration_days=days,
                                       abort_incomplete_multipart_upload_days=abort))
    return ObjectStorage(policy=policy, lifecycle=tuple(rules))


def _kueue(r: _Reader, s: Mapping, spec: Spec) -> KueueChart | None:
    path = f"{P}.kueue"
    m = r.mapping(s.get("kueue"), path, KEYS["kueue"])
    if m is None:
        return None
    if spec.kubernetes is None:
        if m:
            r.problem(path, "a Kueue chart", "absent while the stack has no railyard:kubernetes",
                      "Kueue is installed for the Kubernetes layer's queues")
        return None
    if not m:
        r.problem(path, "nothing", "a mapping with repository and version (CoreWeave's Kueue chart)",
                  "the Kubernetes layer's queues need Kueue; CoreWeave's docs install it from its cks-kueue chart: "
                  "name the chart repository and the version to pin")
        return None
    repo = r.string(m, "repository", f"{path}.repository", "the Helm repository's https:// URL", required=True)
    if repo is not None and not repo.startswith("https://"):
        r.problem(f"{path}.repository", show(repo), "an https:// URL")
        repo = None
    version = r.string(m, "version", f"{path}.version", "the chart version to pin, e.g. \"0.1.0\"", required=True)
    chart = r.string(m, "chart", f"{path}.chart", "a chart name", _DNS_LABEL) or KUEUE_CHART
    namespace = r.string(m, "namespace", f"{path}.namespace", "a namespace (DNS label)", _DNS_LABEL) or KUEUE_NAMESPACE
    if repo is None or version is None:
        return None
    return KueueChart(repository=repo, version=version, chart=chart, namespace=namespace)


def parse(section: Any, spec: Spec) -> tuple[CoreWeaveConfig | None, list[Problem]]:
    r = _Reader()
    if section is None:
        r.problem(P, "nothing", "a mapping with zone and cluster",
                  "a CoreWeave stack names its zone and its CKS cluster (docs/stack-reference.md)")
    s = section if isinstance(section, dict) else {}
    zone = r.string(s, "zone", f"{P}.zone", "a CoreWeave Availability Zone, e.g. US-EAST-04A", _ZONE,
                    required=section is not None)
    token = _api_token(r, s)
    vpc_name = r.string(s, "vpcName", f"{P}.vpcName", f"a DNS label of at most {NAME_MAX} characters") \
        or default_name(spec.region, spec.stack)
    if not name_ok(vpc_name):
        r.problem(f"{P}.vpcName", show(vpc_name), f"a DNS label of at most {NAME_MAX} characters")
    cluster = _cluster(r, s, spec) if section is not None else None
    if cluster is not None:
        _check_prefixes(r, cluster, spec)
    label_prefix = spec.kubernetes.label_prefix if spec.kubernetes is not None else None
    pools = _pools(r, s, spec, label_prefix)
    object_storage = _object_storage(r, s, spec)
    kueue = _kueue(r, s, spec)
    kind = spec.fabric.compute.kind if spec.fabric is not None else "infiniband"
    # CoreWeave labels only NVL72 nodes with their domain, and Kueue wants every level on every node
    # of the Topology: with other pools beside the racks, the level is left out.
    nodes = load_catalog().nodes
    racks = bool(spec.node_pools) and all(
        p.sku in nodes and nodes[p.sku].nvlink_domain is not None for p in spec.node_pools)
    if r.problems or zone is None or cluster is None:
        return None, r.problems
    return CoreWeaveConfig(zone=zone, api_token=token, vpc_name=vpc_name, cluster=cluster, pools=pools,
                           object_storage=object_storage, kueue=kueue,
                           platform_topology=topology_levels(kind, racks)), r.problems


TOKEN_ENV = "COREWEAVE_API_TOKEN"
"""The provider's own environment variable for the token (it wins over coreweave:token)."""


def preflight(spec: Spec) -> str | None:
    """A CoreWeave stack needs an API token before the engine starts: the provider's and the
    cluster's. Nothing of it is read here but whether it is set."""
    import os

    from railyard import paths
    from railyard.model.spec import read_stack_file

    if getattr(spec.driver_config, "api_token", None) is not None or os.environ.get(TOKEN_ENV):
        return None
    path = paths.stack_file(spec.stack)
    # The provider's own key, outside railyard:, so the spec does not hold it.
    config = read_stack_file(path)[0] if path.is_file() else {}
    if is_secret(config.get("coreweave:token")):
        return None
    return (f"stack {spec.stack} has no CoreWeave API token; nothing was changed. Set the provider's, which "
            f"the NodePools and the Kubernetes layer use too: pulumi config set --secret coreweave:token "
            f"--stack {spec.stack} (or {P}.apiToken with --path, or {TOKEN_ENV} in the environment)")


# The contract's hooks this module provides (railyard.drivers.RuleHooks).
HOOKS = RuleHooks(keys=KEYS, parse=parse, preflight=preflight)
