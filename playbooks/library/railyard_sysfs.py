#!/usr/bin/python
"""Set sysfs/procfs attributes in place, with check mode and diff."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: railyard_sysfs
short_description: Set kernel attributes under /sys and /proc in place
description:
  - Writes values to sysfs and procfs attribute files (C(sriov_numvfs), C(nr_hugepages),
    C(smp_affinity_list)) the way the kernel expects them, opened and written in place, never by
    the temporary-file-and-rename that M(ansible.builtin.copy) does, which pseudo-filesystems refuse.
  - An attribute already at its value is left alone, so a second run reports no change.
  - Attributes are never created; a missing file means the kernel does not offer it, and fails.
options:
  settings:
    description: The attributes to set, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path of the attribute file.
        type: path
        required: true
      value:
        description: The value to hold (written with a trailing newline).
        type: str
        required: true
      reset_value:
        description:
          - Written first when the current value is neither this nor the target. C(sriov_numvfs)
            needs C(0) before a different non-zero count.
        type: str
      compare:
        description: >-
          C(cpulist) compares CPU lists as sets (C(0-3) equals C(0,1,2,3)); C(cpumask) hex CPU masks
          by value (C(f) equals C(00000000,0000000f)); C(text) as stripped text.
        type: str
        choices: [text, cpulist]
        default: text
      label:
        description: What to call the attribute in messages and diffs (default the path).
        type: str
      read_back:
        description:
          - Fail when the attribute does not read back as written. Off for counters the kernel may
            satisfy only in part (C(nr_hugepages) on fragmented memory); the caller checks those.
        type: bool
        default: true
author: Railyard
"""

EXAMPLES = r"""
- name: Four VFs on mlx5_0
  railyard_sysfs:
    settings:
      - path: /sys/bus/pci/devices/0000:18:00.0/sriov_numvfs
        value: "4"
        reset_value: "0"
"""

RETURN = r"""
results:
  description: One entry per setting.
  returned: always
  type: list
  elements: dict
  contains:
    path: {description: The attribute file., type: str}
    before: {description: Its value before the run., type: str}
    value: {description: The value asked for., type: str}
    after: {description: "Its value read back after the write (the kernel may satisfy a counter in part; the target in check mode).", type: str}
    changed: {description: Whether it was (or would be) written., type: bool}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.railyard_sysfs_discovery import parse_cpulist


def _same(current, value, compare):
    if compare == "cpulist":
        try:
            return set(parse_cpulist(current)) == set(parse_cpulist(value))
        except ValueError:
            return False
    if compare == "cpumask":
        try:
            return int(current.replace(",", ""), 16) == int(value.replace(",", ""), 16)
        except ValueError:
            return False
    return current.strip() == value.strip()


def _read(module, path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError as exc:
        module.fail_json(msg=f"{path}: cannot read ({exc.strerror}); the kernel does not offer this attribute here")


def _write(module, path, value, label):
    try:
        with open(path, "w") as fh:
            fh.write(value + "\n")
    except OSError as exc:
        module.fail_json(msg=f"{label}: writing {value!r} to {path} failed: {exc.strerror}")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            settings=dict(type="list", elements="dict", required=True, options=dict(
                path=dict(type="path", required=True),
                value=dict(type="str", required=True),
                reset_value=dict(type="str"),
                compare=dict(type="str", choices=["text", "cpulist", "cpumask"], default="text"),
                label=dict(type="str"),
                read_back=dict(type="bool", default=True),
            )),
        ),
        supports_check_mode=True,
    )
    results, before_lines, after_lines = [], [], []
    for s in module.params["settings"]:
        path, value, label = s["path"], s["value"].strip(), s["label"] or s["path"]
        if not os.path.exists(path):
            module.fail_json(msg=f"{label}: {path} does not exist; the kernel does not offer this attribute here")
        current = _read(module, path)
        changed = not _same(current, value, s["compare"])
        after = value if changed else current
        if changed and not module.check_mode:
            reset = s["reset_value"]
            if reset is not None and current not in ("", reset.strip()):
                _write(module, path, reset, label)
            _write(module, path, value, label)
            now = _read(module, path)
            if s["read_back"] and not _same(now, value, s["compare"]):
                module.fail_json(msg=f"{label}: wrote {value!r} to {path} but it reads back {now!r}",
                                 results=results)
            after = now
        results.append(dict(path=path, value=value, before=current, after=after, changed=changed))
        before_lines.append(f"{label}: {current}")
        after_lines.append(f"{label}: {after}")
    changed = any(r["changed"] for r in results)
    diff = dict(before="\n".join(before_lines) + "\n", after="\n".join(after_lines) + "\n")
    # One line per changed attribute for Railyard's drift report (NODE: SETTING OLD -> NEW).
    railyard_changes = [dict(setting=s["label"] or s["path"], old=r["before"], new=r["after"])
                        for s, r in zip(module.params["settings"], results) if r["changed"]]
    module.exit_json(changed=changed, results=results, diff=diff, railyard_changes=railyard_changes)


if __name__ == "__main__":
    main()
