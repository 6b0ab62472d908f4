"""A small program for the engine smoke test: a Python dynamic resource and a Kubernetes object
rendered to YAML by the kubernetes provider (no cluster needed)."""

import os

import pulumi
import pulumi_kubernetes as k8s
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult, Resource


class MarkerProvider(ResourceProvider):
    """Writes a file; the smallest real side effect a dynamic provider can own."""

    def create(self, props):
        with open(props["path"], "w") as f:
            f.write(props["content"])
        return CreateResult(id_=props["path"], outs={**props, "size": len(props["content"])})

    def diff(self, _id, olds, news):
        replaces = ["path"] if olds.get("path") != news["path"] else []
        changed = bool(replaces) or olds.get("content") != news["content"]
        return DiffResult(changes=changed, replaces=replaces, delete_before_replace=True)

    def update(self, _id, _olds, news):
        with open(news["path"], "w") as f:
            f.write(news["content"])
        return UpdateResult(outs={**news, "size": len(news["content"])})

    def delete(self, _id, props):
        if os.path.exists(props["path"]):
            os.remove(props["path"])


class Marker(Resource):
    size: pulumi.Output[int]

    def __init__(self, name, path, content, opts=None):
        super().__init__(MarkerProvider(), name, {"path": path, "content": content, "size": None}, opts)


cfg = pulumi.Config()
out_dir = cfg.require("outDir")
marker = Marker("marker", path=os.path.join(out_dir, "marker.txt"), content=cfg.get("content") or "hello")
renderer = k8s.Provider("render", render_yaml_to_directory=os.path.join(out_dir, "manifests"))
cm = k8s.core.v1.ConfigMap(
    "smoke",
    metadata={"name": "railyard-smoke", "namespace": "default"},
    data={"content": cfg.get("content") or "hello"},
    opts=pulumi.ResourceOptions(provider=renderer),
)
pulumi.export("markerSize", marker.size)
pulumi.export("configMapName", cm.metadata["name"])
