#!/usr/bin/python
"""Set SR-IOV VF attributes (MAC, trust, spoof-check) through iproute2, with check mode and diff."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sriov_vf
short_description: Set the MAC, trust and spoof-check of a PF's SR-IOV virtual functions
description:
  - Reads the VFs of a physical function with C(ip -j -d link show dev PF) (its C(vfinfo_list)) and
    runs C(ip link set dev PF vf N mac M trust on|off spoofchk on|off) for each VF that differs.
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
        ),
        supports_check_mode=True,
    )
    pf, ip = module.params["pf"], module.params["ip_command"]
    current = _state(module, ip, pf)
    changed, before, after = [], [], []
    for want in sorted(module.params["vfs"], key=lambda v: v["index"]):
        n = want["index"]
        target = {"mac": want["mac"].lower(), "trust": want["trust"], "spoofchk": want["spoofchk"]}
        have = current.get(n)
        before.append(f"{pf} vf {n}: {_show(have)}")
        after.append(f"{pf} vf {n}: {_show(target)}")
        if have == target:
            continue
        changed.append(n)
        if module.check_mode:
            continue
        argv = ip + ["link", "set", "dev", pf, "vf", str(n), "mac", target["mac"],
                     "trust", "on" if target["trust"] else "off",
                     "spoofchk", "on" if target["spoofchk"] else "off"]
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"sriov_vf: {' '.join(argv)} failed: {err.strip() or out.strip()}",
                             changed_vfs=changed)
    if changed and not module.check_mode:
        now = _state(module, ip, pf)
        targets = {v["index"]: {"mac": v["mac"].lower(), "trust": v["trust"], "spoofchk": v["spoofchk"]}
                   for v in module.params["vfs"]}
        wrong = [n for n in changed if now.get(n) != targets[n]]
        if wrong:
            module.fail_json(msg=f"sriov_vf: {pf} VFs {wrong} do not read back as set", changed_vfs=changed)
    module.exit_json(changed=bool(changed), changed_vfs=changed,
                     diff=dict(before="\n".join(before) + "\n", after="\n".join(after) + "\n"))


if __name__ == "__main__":
    main()
