#!/usr/bin/python
"""Set SR-IOV VF attributes (MAC, trust, spoof-check) through iproute2, with check mode and diff."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sriov_vf
short_description: Set the MAC, trust and spoof-check of a PF's SR-IOV virtual functions
description:
  - With I(method=ip), reads the VFs of a physical function with C(ip -j -d link show dev PF) (its
    C(vfinfo_list)) and runs C(ip link set dev PF vf N mac M trust on|off spoofchk on|off) for each
    VF that differs (netlink, which every SR-IOV driver offers).
  - With I(method=sysfs), uses the per-VF files mlx5 (MLNX_OFED sriov_sysfs) offers under the PF's
    PCI device, C(sriov/N/config) to read and C(sriov/N/mac), C(trust), C(spoofcheck) to write. The
    lab presents VFs this way, since its PFs are veths without a PF driver behind netlink.
  - I(method=auto) takes sysfs when the PF's device has a C(sriov) directory, else ip.
  - Changes nothing when every VF already has its settings.
options:
  pf:
    description: The PF's netdev.
    type: str
    required: true
  vfs:
    description: Settings per VF.
    type: list
    elements: dict
    required: true
    suboptions:
      index: {description: VF number., type: int, required: true}
      mac: {description: MAC address., type: str, required: true}
      trust: {description: Trusted VF., type: bool, default: false}
      spoofchk: {description: Source MAC spoof checking., type: bool, default: true}
  ip_command:
    description: The iproute2 command as an argv prefix.
    type: list
    elements: str
    default: [ip]
  method:
    description: How VF settings are read and written.
    type: str
    choices: [auto, ip, sysfs]
    default: auto
  device_path:
    description: The PF's PCI device directory in sysfs (needed for the sysfs method).
    type: path
  timeout:
    description: Seconds to wait for a VF's sysfs directory to appear after its VFs were created.
    type: int
    default: 30
author: Railyard
"""

EXAMPLES = r"""
- name: MACs of the VFs of ibp24s0
  sriov_vf:
    pf: ibp24s0
    vfs:
      - {index: 0, mac: "02:11:22:33:44:55", trust: false, spoofchk: true}
"""

RETURN = r"""
changed_vfs:
  description: VF numbers that were (or, in check mode, would be) set.
  returned: always
  type: list
  elements: int
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule


def _state(module, ip, pf):
    rc, out, err = module.run_command(ip + ["-j", "-d", "link", "show", "dev", pf])
    if rc != 0:
        module.fail_json(msg=f"sriov_vf: cannot read {pf}: {err.strip() or out.strip()}")
    try:
        links = json.loads(out or "[]")
    except ValueError:
        module.fail_json(msg=f"sriov_vf: {' '.join(ip)} gave no JSON for {pf}: {out[:200]!r}")
    vfs = {}
    for link in links:
        for vf in link.get("vfinfo_list", []) or []:
            vfs[int(vf.get("vf", -1))] = {
                "mac": str(vf.get("address", vf.get("mac", ""))).lower(),
                "trust": bool(vf.get("trust", False)),
                "spoofchk": bool(vf.get("spoofchk", True)),
            }
    return vfs


def _sysfs_state(module, device, indices, wait):
    """Per-VF settings from sriov/N/config, waiting for directories the driver is still creating."""
    vfs = {}
    for n in indices:
        config = os.path.join(device, "sriov", str(n), "config")
        deadline = time.monotonic() + wait
        while not os.path.exists(config) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not os.path.exists(config):
            continue
        with open(config) as fh:
            fields = {}
            for line in fh:
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        vfs[n] = {"mac": fields.get("MAC", "").lower(), "trust": fields.get("Trust", "OFF").upper() == "ON",
                  "spoofchk": fields.get("SpoofCheck", "OFF").upper() == "ON"}
    return vfs


def _sysfs_set(module, device, n, target):
    base = os.path.join(device, "sriov", str(n))
    for name, value in (("mac", target["mac"]), ("trust", "ON" if target["trust"] else "OFF"),
                        ("spoofcheck", "ON" if target["spoofchk"] else "OFF")):
        try:
            with open(os.path.join(base, name), "w") as fh:
                fh.write(value + "\n")
        except OSError as exc:
            module.fail_json(msg=f"sriov_vf: writing {value} to {base}/{name} failed: {exc.strerror}")


def _show(vf):
    if vf is None:
        return "absent"
    return f"mac {vf['mac']} trust {'on' if vf['trust'] else 'off'} spoofchk {'on' if vf['spoofchk'] else 'off'}"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pf=dict(type="str", required=True),
            vfs=dict(type="list", elements="dict", required=True, options=dict(
                index=dict(type="int", required=True),
                mac=dict(type="str", required=True),
                trust=dict(type="bool", default=False),
                spoofchk=dict(type="bool", default=True),
            )),
            ip_command=dict(type="list", elements="str", default=["ip"]),
            method=dict(type="str", choices=["auto", "ip", "sysfs"], default="auto"),
            device_path=dict(type="path"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    pf, ip = module.params["pf"], module.params["ip_command"]
    device, method = module.params["device_path"], module.params["method"]
    if method == "auto":
        method = "sysfs" if device and os.path.isdir(os.path.join(device, "sriov")) else "ip"
    if method == "sysfs" and not device:
        module.fail_json(msg="sriov_vf: the sysfs method needs device_path")
    targets = {v["index"]: {"mac": v["mac"].lower(), "trust": v["trust"], "spoofchk": v["spoofchk"]}
               for v in module.params["vfs"]}

    def read(wait):
        if method == "sysfs":
            return _sysfs_state(module, device, sorted(targets), wait)
        return _state(module, ip, pf)

    # In check mode the VFs may not exist yet (their count was not written): nothing to wait for.
    current = read(0 if module.check_mode else module.params["timeout"])
    changed, before, after = [], [], []
    for n, target in sorted(targets.items()):
        have = current.get(n)
        before.append(f"{pf} vf {n}: {_show(have)}")
        after.append(f"{pf} vf {n}: {_show(target)}")
        if have == target:
            continue
        changed.append(n)
        if module.check_mode:
            continue
        if method == "sysfs":
            if have is None:
                module.fail_json(msg=f"sriov_vf: {pf} has no VF {n} ({device}/sriov/{n} did not appear)")
            _sysfs_set(module, device, n, target)
            continue
        argv = ip + ["link", "set", "dev", pf, "vf", str(n), "mac", target["mac"],
                     "trust", "on" if target["trust"] else "off",
                     "spoofchk", "on" if target["spoofchk"] else "off"]
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"sriov_vf: {' '.join(argv)} failed: {err.strip() or out.strip()}",
                             changed_vfs=changed)
    if changed and not module.check_mode:
        deadline = time.monotonic() + module.params["timeout"]
        while True:
            now = read(0)
            wrong = [n for n in changed if now.get(n) != targets[n]]
            if not wrong or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # the lab's agent applies sysfs writes asynchronously
        if wrong:
            module.fail_json(msg=f"sriov_vf: {pf} VFs {wrong} do not read back as set", changed_vfs=changed)
    module.exit_json(changed=bool(changed), changed_vfs=changed,
                     diff=dict(before="\n".join(before) + "\n", after="\n".join(after) + "\n"))


if __name__ == "__main__":
    main()
