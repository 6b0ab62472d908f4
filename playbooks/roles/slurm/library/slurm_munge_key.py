#!/usr/bin/python
"""The cluster's munge key: the one Railyard wrote on the controller before, or a new one."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_munge_key
short_description: Read the cluster's munge key on the controller, or make a new one, writing nothing
description:
  - Returns the key at I(path) when Railyard wrote it there (M(railyard_files) holds a record of
    that file under I(root)); otherwise a new key of 1024 random hex digits. The role writes the
    returned key to every node with M(railyard_files), which keeps the host's own key for teardown.
  - A key the host had before (the one Debian's munge package made) is never reused, since it may
    be shared with other services, and it is different on every host.
  - Writes nothing, so it runs the same in check mode. Run it with no_log; the key is a secret.
options:
  path: {description: The munge key file., type: path, default: /etc/munge/munge.key}
  root: {description: The root M(railyard_files) keeps its records under., type: path, default: /}
author: Railyard
"""

EXAMPLES = r"""
- name: The cluster's key, from the controller
  slurm_munge_key:
    path: /etc/munge/munge.key
  delegate_to: gpu-0
  run_once: true
  no_log: true
  register: key
"""

RETURN = r"""
key:
  description: The key, as text (a secret).
  returned: always
  type: str
new:
  description: Whether the key is a new one (the file holds none Railyard wrote).
  returned: always
  type: bool
"""

import os
import secrets

from ansible.module_utils.basic import AnsibleModule

ORIGINALS = "var/lib/railyard/originals"


def main():
    module = AnsibleModule(argument_spec=dict(path=dict(type="path", default="/etc/munge/munge.key"),
                                              root=dict(type="path", default="/")),
                           supports_check_mode=True)
    path, root = module.params["path"], module.params["root"]
    rel = os.path.relpath(path, root) if path.startswith(root.rstrip("/") + "/") else path.lstrip("/")
    ours = os.path.exists(os.path.join(root, ORIGINALS, rel) + ".railyard.json")
    key = None
    if ours:
        try:
            with open(path) as fh:
                key = fh.read().strip()
        except (OSError, UnicodeDecodeError):
            key = None
    fresh = not key or len(key) < 64
    if fresh:
        key = secrets.token_hex(512)
    module.exit_json(changed=False, key=key, new=fresh)


if __name__ == "__main__":
    main()
