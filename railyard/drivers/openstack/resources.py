"""The one resource of the openstack driver that no provider has: a server's SSH host key,
generated once by Railyard, so it is pinned before the server first boots (layout.cloud_config).

A dynamic resource, as the lab's access key is: created once (a preview shows it unchanged, and so
the server's user_data), replaced only with its server. The private key is a secret in state and
in every Output.
"""

from __future__ import annotations

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

from railyard.dynamic import TypedResource


class HostKeyProvider(ResourceProvider):
    serialize_as_secret_always = False  # the key is an output; the provider itself holds nothing

    def create(self, props):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption()).decode()
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH).decode()
        return CreateResult(id_=props["machine"], outs={**props, "public_key": public, "private_key": private})

    def diff(self, _id, olds, news):
        return DiffResult(changes=olds.get("machine") != news.get("machine"), replaces=["machine"])


class HostKey(TypedResource, module="openstack", name="HostKey"):
    """An ed25519 host key for `machine`: public_key (`ssh-ed25519 <base64>`) and private_key
    (OpenSSH PEM, secret)."""

    public_key: pulumi.Output[str]
    private_key: pulumi.Output[str]

    def __init__(self, name: str, machine: str, opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["private_key"]))
        super().__init__(HostKeyProvider(), name, {"machine": machine, "public_key": None, "private_key": None}, opts)
