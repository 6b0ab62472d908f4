#!/usr/bin/python
"""A mount point as this host resolves it, checked before a role mounts or owns anything there."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: railyard_mount_point
short_description: Refuse a mount point that this host resolves into a system directory, or that holds a mount Railyard did not make
description:
  - Resolves I(path) as the host does (every symlink on the way followed) and refuses it when it is,
    or lies under, a directory the operating system lives in (C(/etc), C(/usr), C(/var), C(/boot), ...),
    by the same rule as the stack's validation (module_utils C(railyard_mount_points)). A host can
    differ from that rule where the stack cannot see it; C(/mnt) may be a symlink.
  - On OSTree hosts, where C(/mnt) and C(/srv) are symlinks to C(/var/mnt) and C(/var/srv), a path
    under them is still accepted.
  - With I(railyard_mounts=true) (the role mounts a file system of its own there), also refuses a
    resolved path that is already a mount point of anything but I(device), the block device the role
    made its file system on, since a mount Railyard did not make would be hidden, or written into.
    The device is compared by number, as the mount table gives it (no udev links needed).
  - Changes nothing, so it runs the same in check mode.
options:
  path: {description: The mount point as the stack writes it., type: path, required: true}
  key: {description: The stack key that sets it, for the message., type: str, default: ""}
  railyard_mounts: {description: Whether the role mounts a file system of its own at I(path)., type: bool, default: false}
  device: {description: "The block device of Railyard's own file system there; empty: none yet.", type: str, default: ""}
"""

EXAMPLES = r"""
- name: Check the cache's mount point (changes nothing)
  railyard_mount_point:
    path: /mnt/cache
    key: railyard:storage.localCache.mount
    railyard_mounts: true
    device: "{{ drives.device }}"
"""

RETURN = r"""
resolved: {description: The path as this host resolves it., type: str, returned: always}
"""

import os

from ansible.module_utils.basic import AnsibleModule

try:  # on a host: the stack's own rule, shipped as module_utils
    from ansible.module_utils.railyard_mount_points import mount_at, resolve, resolved_problem
except ImportError:  # loaded from its file by the unit tests
    from railyard.model.mount_points import mount_at, resolve, resolved_problem


def foreign_mount(resolved, device, mountinfo="/proc/self/mountinfo"):
    """What is mounted at `resolved` that is not a file system on `device`, as a phrase, or None."""
    got = mount_at(resolved, mountinfo)
    if got is None:
        return None
    if device:
        try:
            st = os.stat(device)
            if got["dev"] == f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}":
                return None
        except OSError:  # not made yet (an md array in check mode): nothing there is Railyard's
            pass
    return f"{got['source']} ({got['fstype']})"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            key=dict(type="str", default=""),
            railyard_mounts=dict(type="bool", default=False),
            device=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    resolved = resolve(p["path"])
    change = f"; set {p['key']} to another path" if p["key"] else ""
    why = resolved_problem(p["path"], resolved)
    if why is not None:
        module.fail_json(msg=f"refusing the mount point {p['path']}: {why}{change}. Nothing was changed",
                         resolved=resolved)
    if p["railyard_mounts"]:
        other = foreign_mount(resolved, p["device"])
        if other is not None:
            where = p["path"] if resolved == p["path"] else f"{p['path']} ({resolved} on this host)"
            module.fail_json(msg=f"refusing the mount point {where}: it is already a mount of {other} that "
                                 f"Railyard did not make, which a mount over it would hide{change}, or unmount it. "
                                 "Nothing was changed", resolved=resolved)
    module.exit_json(changed=False, resolved=resolved)


if __name__ == "__main__":
    main()
