#!/usr/bin/python
"""The local NVMe cache's block device: the SKU's data drives found, checked blank, and made one
md array (or one drive), with a record of what Railyard made; or, at teardown, that undone."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dataset_cache_drives
short_description: Choose the cache drives, refuse any that holds data Railyard did not make, and make the cache device
description:
  - Chooses the drives by size from C(/sys/block/nvme*n*) (the SKU's data drives; its OS drives differ
    in size), or takes I(devices) as given.
  - Refuses, before anything is changed, every chosen drive that holds a partition table, a
    filesystem or RAID signature, a mount or a holder (device-mapper, md) that Railyard did not record
    in I(record); each is named with what was found. A drive is never wiped to make room.
  - With several drives and a RAID level, creates (or assembles) the md array I(array_name) over them;
    with one drive or I(raid=none), the cache is the first drive. A kernel without md (no
    C(/proc/mdstat)) is refused by name rather than using fewer drives than asked.
  - Makes the filesystem when the device has none, and records the members, the array's UUID and the
    filesystem's UUID in I(record).
  - With I(state=absent), stops the recorded array and clears the signatures Railyard made on the
    recorded drives (the drives go back blank, as Railyard found them), then removes the record. A drive
    whose signature is no longer the recorded one is left alone and named.
  - Supports check mode.
options:
  drive_count: {description: How many data drives make the cache (0 with no I(devices) does nothing)., type: int, default: 0}
  drive_bytes: {description: Size of one data drive in bytes (the SKU's)., type: int, default: 0}
  tolerance: {description: Relative size difference still counted as that size., type: float, default: 0.05}
  devices: {description: The drives to use (paths under /dev), instead of choosing by size., type: list, elements: str, default: []}
  raid: {description: md RAID level over several drives, or none for the first drive alone., type: str, choices: [raid0, raid1, raid10, none], default: raid0}
  fstype: {description: Filesystem made on the cache device., type: str, choices: [xfs, ext4], default: xfs}
  array_name: {description: Name of the md array (/dev/md/NAME)., type: str, default: railyard-cache}
  record: {description: Where Railyard records what it made., type: path, default: /var/lib/railyard/cache-drives.json}
  state: {description: present or absent., type: str, choices: [present, absent], default: present}
"""

EXAMPLES = r"""
- name: The cache over a DGX H100's eight 3.84 TB data drives
  dataset_cache_drives:
    drive_count: 8
    drive_bytes: 3840000000000
    raid: raid0
    fstype: xfs
  register: cache
"""

RETURN = r"""
device: {description: The cache's block device (the array or the drive)., type: str, returned: state=present}
fs_uuid: {description: UUID of the cache's filesystem (empty in check mode before it exists)., type: str, returned: state=present}
members: {description: The drives the cache is made of., type: list, returned: always}
"""

import os

from ansible.module_utils.basic import AnsibleModule

try:  # on a host: the discovery's own rules and the record helpers, shipped as module_utils
    from ansible.module_utils.railyard_host_records import load_record, write_record
    from ansible.module_utils.railyard_mount_points import mounts
    from ansible.module_utils.railyard_sysfs_discovery import NVME_BLOCK, natural_key
except ImportError:  # loaded from its file by the unit tests
    from railyard.model.mount_points import mounts
    from railyard.model.sysfs_discovery import NVME_BLOCK, natural_key
    from railyard.tuning.host_records import load_record, write_record

MDADM_LEVEL = {"raid0": "0", "raid1": "1", "raid10": "10"}


def choose(block_dir, count, size, tolerance):
    """The first `count` NVMe namespaces of `size` bytes (within tolerance), in the kernel's order;
    (chosen, message) where message says what is missing."""
    found, other = [], []
    for name in sorted((n for n in os.listdir(block_dir) if NVME_BLOCK.match(n)), key=natural_key):
        try:
            with open(os.path.join(block_dir, name, "size")) as f:
                got = int(f.read().strip()) * 512
        except (OSError, ValueError):
            continue
        (found if abs(got - size) <= tolerance * size else other).append((name, got))
    if len(found) < count:
        return [], (f"{len(found)} NVMe drive(s) of {size / 1e12:.2f} TB found "
                    f"({', '.join(n for n, _ in found) or 'none'}), the cache wants {count}"
                    + (f"; others: {', '.join(f'{n} ({b / 1e12:.2f} TB)' for n, b in other)}" if other else ""))
    return [f"/dev/{n}" for n, _ in found[:count]], None


def probe(module, dev):
    """blkid's low-level probe of what the device holds: {} when nothing."""
    rc, out, err = module.run_command(["blkid", "-p", "-o", "export", dev])
    if rc == 2:
        return {}
    if rc != 0:
        module.fail_json(msg=f"blkid -p {dev}: {err.strip() or out.strip() or f'exit {rc}'}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def mount_points():
    """{major:minor: [mount points]} of every mounted block device."""
    out = {}
    for m in mounts():
        out.setdefault(m["dev"], []).append(m["path"])
    return out


def in_use(dev, mounted):
    """Mount points (from mount_points()) and holders of the device, by device number whatever its name."""
    st = os.stat(dev)
    majmin = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    holders_dir = f"/sys/dev/block/{majmin}/holders"
    holders = sorted(os.listdir(holders_dir)) if os.path.isdir(holders_dir) else []
    return mounted.get(majmin, []), holders


def describe(info):
    if info.get("PTTYPE"):
        return f"a {info['PTTYPE']} partition table"
    kind = info.get("TYPE") or info.get("USAGE") or "a signature"
    uuid = f" (UUID {info['UUID']})" if info.get("UUID") else ""
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} signature{uuid}"


def recorded_signature(record, dev, info):
    """Whether what `dev` holds is what Railyard made there."""
    if not record or dev not in record.get("members", []):
        return False
    if record.get("array_uuid"):
        return info.get("TYPE") == "linux_raid_member" and info.get("UUID") == record["array_uuid"]
    return info.get("TYPE") == record.get("fstype") and info.get("UUID") == record.get("fs_uuid")


def present(module, p, record):
    changed = False
    if p["devices"]:
        members = list(p["devices"])
    else:
        members, missing = choose("/sys/block", p["drive_count"], p["drive_bytes"], p["tolerance"])
        if missing:
            module.fail_json(msg=f"no cache made: {missing}; nothing was changed", members=[])
    use_md = p["raid"] != "none" and len(members) > 1
    if not use_md:
        members = members[:1]
    absent_devs = [d for d in members if not os.path.exists(d)]
    if absent_devs:
        module.fail_json(msg=f"no cache made: {', '.join(absent_devs)} does not exist; nothing was changed", members=members)
    if use_md and not os.path.exists("/proc/mdstat"):
        module.fail_json(
            msg=f"no cache made: a {p['raid']} cache over {len(members)} drives needs the kernel's md driver, and this "
                f"kernel has none (no /proc/mdstat); set railyard:storage.localCache.raid: none to use "
                f"{members[0]} alone. Nothing was changed", members=members)
    if record and (record.get("members") != members or bool(record.get("array_uuid")) != use_md):
        module.fail_json(
            msg=f"no cache made: Railyard made this host's cache over {', '.join(record.get('members', []))}"
                f"{' as an md array' if record.get('array_uuid') else ''} ({p['record']}); the stack now asks for "
                f"{', '.join(members)}{' as ' + p['raid'] if use_md else ''}. Destroy the stack's cache first "
                "(playbooks/teardown.yml); nothing was changed", members=members)

    infos, refused = {}, []
    mounted = mount_points()
    for dev in members:
        info = probe(module, dev)
        infos[dev] = info
        mounts, holders = in_use(dev, mounted)
        ours = recorded_signature(record, dev, info)
        if info and not ours:
            refused.append(f"{dev} holds {describe(info)}")
        if mounts and not ours:
            refused.append(f"{dev} is mounted at {', '.join(mounts)}")
        if holders and not (ours and use_md):
            refused.append(f"{dev} is held by {', '.join(holders)}")
    if refused:
        module.fail_json(
            msg="refusing the cache drives: " + "; ".join(refused) + ". Railyard formats only blank drives, or the "
                f"ones it recorded in {p['record']}; wipe a drive (wipefs -a) only if its data is not needed. "
                "Nothing was changed", members=members)

    new = record or {"members": members, "fstype": p["fstype"], "array_uuid": "", "fs_uuid": ""}
    device = members[0]
    if use_md:
        device = f"/dev/md/{p['array_name']}"
        if not os.path.exists(device):
            changed = True
            if module.check_mode:
                module.exit_json(changed=True, device=device, fs_uuid="", members=members)
            if all(infos[d] for d in members):
                cmd = ["mdadm", "--assemble", device, *members]
            else:
                cmd = ["mdadm", "--create", device, "--run", "--quiet", f"--level={MDADM_LEVEL[p['raid']]}",
                       "--metadata=1.2", f"--raid-devices={len(members)}", f"--name={p['array_name']}", *members]
            module.run_command(cmd, check_rc=True)
            new["array_uuid"] = probe(module, members[0]).get("UUID", "")
    fs = probe(module, device)
    if not fs:
        changed = True
        if module.check_mode:
            module.exit_json(changed=True, device=device, fs_uuid="", members=members)
        mkfs = ["mkfs.xfs", "-q", device] if p["fstype"] == "xfs" else ["mkfs.ext4", "-q", device]
        module.run_command(mkfs, check_rc=True)
        fs = probe(module, device)
    elif fs.get("TYPE") != p["fstype"]:
        module.fail_json(msg=f"{device} holds {describe(fs)}, the stack asks for {p['fstype']}; nothing was changed",
                         members=members)
    new["fs_uuid"] = fs.get("UUID", "")
    if new != record:
        changed = True
        if not module.check_mode:
            write_record(p["record"], new)
    module.exit_json(changed=changed, device=device, fs_uuid=new["fs_uuid"], members=members)


def absent(module, p, record):
    if record is None:
        module.exit_json(changed=False, members=[])
    members = record.get("members", [])
    left = []
    if not module.check_mode:
        mounted = mount_points()
        array = f"/dev/md/{p['array_name']}"
        if record.get("array_uuid") and os.path.exists(array):
            module.run_command(["mdadm", "--stop", array], check_rc=True)
        for dev in members:
            info = probe(module, dev) if os.path.exists(dev) else {}
            if not info:
                continue
            if not recorded_signature(record, dev, info):
                left.append(f"{dev} ({describe(info)})")
                continue
            mounts, _ = in_use(dev, mounted)
            if mounts:
                module.fail_json(msg=f"{dev} is still mounted at {', '.join(mounts)}; unmount the cache first")
            if record.get("array_uuid"):
                module.run_command(["mdadm", "--zero-superblock", dev], check_rc=True)
            module.run_command(["wipefs", "-a", "-q", dev], check_rc=True)
        os.unlink(p["record"])
    module.exit_json(changed=True, members=members,
                     warnings=[f"left as they are, not holding what Railyard made: {', '.join(left)}"] if left else [])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            drive_count=dict(type="int", default=0),
            drive_bytes=dict(type="int", default=0),
            tolerance=dict(type="float", default=0.05),
            devices=dict(type="list", elements="str", default=[]),
            raid=dict(type="str", choices=["raid0", "raid1", "raid10", "none"], default="raid0"),
            fstype=dict(type="str", choices=["xfs", "ext4"], default="xfs"),
            array_name=dict(type="str", default="railyard-cache"),
            record=dict(type="path", default="/var/lib/railyard/cache-drives.json"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        record = load_record(p["record"], "cache")
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if p["state"] == "absent":
        absent(module, p, record)
    if not p["devices"] and p["drive_count"] < 1:
        module.exit_json(changed=False, members=[])
    if not p["devices"] and p["drive_bytes"] < 1:
        module.fail_json(msg="drive_bytes is needed to choose drives by size")
    present(module, p, record)


if __name__ == "__main__":
    main()
