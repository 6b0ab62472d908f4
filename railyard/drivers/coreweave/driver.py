"""The coreweave driver: a CKS cluster on CoreWeave bare metal, through the official SDKs.

- fabric: a NetworkingVpc whose prefixes are the plan's networks and the cluster's ranges, and the
  CksCluster in it (what every pool waits for);
- storage: the object tier as an ObjectStorageBucket, with its policy and lifecycle where the
  stack gives them;
- pool: one NodePool custom resource per pool (nodepool.py), applied with pulumi-kubernetes through
  a Provider made from the cluster's apiServerEndpoint and the stack's API token;
- kubeconfig: the same endpoint and token, for the Kubernetes layer; Kueue comes from CoreWeave's
  chart (kueue_chart).

CoreWeave tunes its own nodes (Capabilities.tuned_by == "platform"): no host tuning runs, and the
plan, the preview and the review say so. The provider plugin cannot be built on these machines;
`up` says so before the engine starts (railyard.engine.plugins), and tests run this under mocks.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import pulumi
import pulumi_coreweave as coreweave
import pulumi_kubernetes as k8s

from railyard.drivers.base import Access, Driver, NodeHandle, PoolPlan
from railyard.drivers.coreweave import nodepool
from railyard.drivers.coreweave.config import CoreWeaveConfig, LifecycleRule
from railyard.drivers.coreweave.rules import TOKEN_ENV
from railyard.model.plan import Plan
from railyard.model.spec import Spec

SERVICE_ACCOUNT = "railyard"


def kubeconfig_yaml(endpoint: str, cluster: str, token: str) -> str:
    """A kubeconfig for the CKS API server with a bearer token (its certificate is publicly
    trusted, so no CA is pinned)."""
    server = endpoint if endpoint.startswith("https://") else f"https://{endpoint}"
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": {"server": server}}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": SERVICE_ACCOUNT}}],
    })


def apply_node_pool(resource_name: str, manifest: dict[str, Any], provider: k8s.Provider,
                    parent: pulumi.Resource | None = None,
                    depends_on: list[pulumi.Resource] | None = None) -> k8s.apiextensions.CustomResource:
    """The NodePool as pulumi-kubernetes applies it (nodepool.resource_options): a new
    instanceType replaces the pool, a new targetNodes is an update in place, unless the autoscaler
    owns it."""
    return k8s.apiextensions.CustomResource(
        resource_name, api_version=manifest["apiVersion"], kind=manifest["kind"],
        metadata=manifest["metadata"], spec=manifest["spec"],
        opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=depends_on or [],
                                    **nodepool.resource_options(manifest)))


class CoreWeaveDriver(Driver):
    name = "coreweave"

    def __init__(self, spec: Spec, plan: Plan):
        super().__init__(spec, plan)
        self.config: CoreWeaveConfig = spec.driver_config
        self.cluster: coreweave.CksCluster | None = None
        self._kube: k8s.Provider | None = None
        """The NodePools' Kubernetes provider, on the cluster's API."""
        self.provider: coreweave.Provider | None = None
        self._kubeconfig: pulumi.Output[str] | None = None
        self._nobody = pulumi.Output.from_input("")
        # Read first: a stack without a token stops here, before any resource is registered.
        self.token = self._token()

    @property
    def tags(self) -> dict[str, str]:
        return {"railyard-region": self.spec.region, "railyard-stack": self.spec.stack}

    def _token(self) -> pulumi.Output[str]:
        """The stack's CoreWeave API token, in the order the provider itself reads one (its
        environment variable wins), then railyard:coreweave.apiToken, then coreweave:token. One
        token for the provider (self.provider) and the cluster's API (the kubeconfig), so the
        NodePools never act as someone else than the VPC. Preflight saw one is set."""
        env = os.environ.get(TOKEN_ENV)
        if env:
            return pulumi.Output.secret(env)
        if self.config.api_token is not None:
            return pulumi.Output.secret(
                pulumi.Config("railyard").require_secret_object("coreweave").apply(lambda c: c["apiToken"]))
        token = pulumi.Config("coreweave").get_secret("token")
        if token is None:
            raise pulumi.RunError(f"stack {self.spec.stack} has no CoreWeave API token (coreweave:token, "
                                  f"railyard:coreweave.apiToken or {TOKEN_ENV}); nothing was created")
        return pulumi.Output.secret(token)

    def _opts(self, parent: pulumi.Resource, **kw: Any) -> pulumi.ResourceOptions:
        """Every CoreWeave resource goes through the stack's provider, with its token; a named
        resource is deleted before its replacement is made (CoreWeave refuses two of one name)."""
        if self.provider is None:
            # An explicit provider reads no stack config: the provider's other settings are passed on.
            cw = pulumi.Config("coreweave")
            self.provider = coreweave.Provider(f"{self.spec.stack}-coreweave", token=self.token,
                                               endpoint=cw.get("endpoint"), s3_endpoint=cw.get("s3Endpoint"),
                                               http_timeout=cw.get("httpTimeout"),
                                               opts=pulumi.ResourceOptions(parent=parent))
        return pulumi.ResourceOptions(parent=parent, provider=self.provider, delete_before_replace=True, **kw)

    def access(self, name: str, parent: pulumi.Resource) -> Access:
        # Nobody logs in to a CKS node: CoreWeave runs them, and Railyard reaches the cluster's API.
        return Access(user="", public_key=self._nobody, private_key=pulumi.Output.secret(""))

    def fabric(self, name: str, parent: pulumi.Resource) -> list[pulumi.Resource]:
        cfg = self.config
        c = cfg.cluster
        # The nodes' addresses come from the VPC's primary host prefix: the plan's management
        # network. The cluster's pod, service and load-balancer ranges are VPC prefixes, by name.
        vpc = coreweave.NetworkingVpc(
            f"{name}-vpc", name=cfg.vpc_name, zone=cfg.zone,
            host_prefixes=[coreweave.NetworkingVpcHostPrefixArgs(
                name="management", type="PRIMARY", prefixes=[self.plan.networks.management.cidr])],
            vpc_prefixes=[coreweave.NetworkingVpcVpcPrefixArgs(name=p.name, value=p.cidr)
                          for p in (c.pod_cidr, c.service_cidr, *c.internal_lb_cidrs)],
            opts=self._opts(parent))
        self.cluster = coreweave.CksCluster(
            f"{name}-cks", name=c.name, zone=cfg.zone, version=c.version, vpc_id=vpc.id, public=c.public,
            pod_cidr_name=c.pod_cidr.name, service_cidr_name=c.service_cidr.name,
            internal_lb_cidr_names=[p.name for p in c.internal_lb_cidrs],
            opts=self._opts(parent, depends_on=[vpc]))
        return [vpc, self.cluster]

    def storage(self, name: str, parent: pulumi.Resource, depends_on: list[pulumi.Resource]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        obj = self.spec.storage.object
        if obj is not None:
            bucket = coreweave.ObjectStorageBucket(
                f"{name}-bucket", name=obj.bucket, zone=self.config.zone, tags=self.tags,
                opts=self._opts(parent))
            extra = self.config.object_storage
            if extra.policy is not None:
                coreweave.ObjectStorageBucketPolicy(
                    f"{name}-bucket-policy", bucket=bucket.name, policy=json.dumps(extra.policy, sort_keys=True),
                    opts=self._opts(parent))
            if extra.lifecycle:
                coreweave.ObjectStorageBucketLifecycleConfiguration(
                    f"{name}-bucket-lifecycle", bucket=bucket.name,
                    rules=[_lifecycle_rule(r) for r in extra.lifecycle],
                    opts=self._opts(parent))
            out.update(bucket=bucket.name, zone=self.config.zone)
        pfs = self.spec.storage.parallel_fs
        if pfs is not None:
            # CoreWeave's Distributed File Storage is attached to CKS through its own volumes,
            # which this driver does not make: say so rather than report a file system.
            out["parallel_fs"] = {"kind": pfs.kind, "mount": pfs.mount,
                                  "made_by": "not this driver: CoreWeave's file storage is provisioned outside Railyard"}
        return out

    def _kube_provider(self, parent: pulumi.Resource) -> k8s.Provider:
        if self._kube is None:
            self._kube = k8s.Provider(
                f"{self.spec.stack}-cks-provider", kubeconfig=self.kubeconfig_output(), enable_server_side_apply=True,
                opts=pulumi.ResourceOptions(parent=parent, depends_on=[self.cluster] if self.cluster else []))
        return self._kube

    def kubeconfig_output(self) -> pulumi.Output[str]:
        if self._kubeconfig is None:
            if self.cluster is None:
                raise RuntimeError("the coreweave driver's cluster is made by fabric(), which comes first")
            self._kubeconfig = pulumi.Output.secret(pulumi.Output.all(
                self.cluster.api_server_endpoint, self.cluster.name, self.token).apply(
                lambda v: kubeconfig_yaml(v[0] or "", v[1] or self.config.cluster.name, v[2])))
        return self._kubeconfig

    def pool(self, name: str, pool: PoolPlan, access: Access, parent: pulumi.Resource,
             depends_on: list[pulumi.Resource]) -> list[NodeHandle]:
        cr = apply_node_pool(name, nodepool.manifest(self.plan, self.config, pool.name), self._kube_provider(parent),
                             parent=parent, depends_on=depends_on)
        # One resource per pool: CKS assigns the machines and their addresses, and nobody logs in.
        return [NodeHandle(ready=[cr], management_ip=None, host_key=self._nobody, name=m.name)
                for m in pool.machines]

    def kubeconfig(self, name: str, parent: pulumi.Resource,
                   depends_on: list[pulumi.Resource]) -> pulumi.Output[str] | None:
        return self.kubeconfig_output()

    def kueue_chart(self) -> dict[str, str] | None:
        k = self.config.kueue
        return dataclasses.asdict(k) if k is not None else None


def _lifecycle_rule(rule: LifecycleRule) -> coreweave.ObjectStorageBucketLifecycleConfigurationRuleArgs:
    return coreweave.ObjectStorageBucketLifecycleConfigurationRuleArgs(
        id=rule.id, status=rule.status,
        filter=coreweave.ObjectStorageBucketLifecycleConfigurationRuleFilterArgs(prefix=rule.prefix)
        if rule.prefix is not None else None,
        expiration=coreweave.ObjectStorageBucketLifecycleConfigurationRuleExpirationArgs(days=rule.expiration_days)
        if rule.expiration_days is not None else None,
        abort_incomplete_multipart_upload=(
            coreweave.ObjectStorageBucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                days_after_initiation=rule.abort_incomplete_multipart_upload_days)
            if rule.abort_incomplete_multipart_upload_days is not None else None))
