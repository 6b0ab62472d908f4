#!/usr/bin/python
"""The parallel file system's client mount: checked against what the host has (its client, its
kernel, what is mounted and in fstab already), written to fstab and mounted, with a record of what
Railyard wrote; or, at teardown, that undone."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: parallel_fs_mount
short_description: Mount a parallel file system's client (Lustre, NFS, Weka) from fstab, or check the site's mount
description:
  - With a I(source) and I(manage=true), writes one fstab line (I(source) I(path) I(fstype) I(opts) plus
    C(_netdev,nofail)) and mounts it; a second run changes nothing. A changed source or options
    rewrites the line and mounts again (refused while the mount is busy).
  - Refuses, before anything is changed, a host without the kind's client, that is without its mount
    helper (C(/sbin/mount.<helper>)), or with a kernel that has neither the file system registered in
    C(/proc/filesystems) nor its module under C(/lib/modules/<release>).
  - Refuses a mount point that already holds another file system, and an fstab line for it that
    Railyard did not write. The same source already mounted there by the site is left as it is and
    not recorded, so teardown leaves it too.
  - Without a I(source), or with I(manage=false) (GPFS, whose mounts are the cluster's), only checks
    that I(path) is a mount of I(fstype) (and of I(source) when given), and changes nothing.
  - A mount that fails, or that the mount table shows with a type not in I(types), is taken down
    and its fstab line taken back out; new options the kernel refuses put the earlier mount back.
  - A moved mount point is mounted first, then the old one taken out (retried by later runs while busy).
  - With I(state=absent), unmounts what the record says Railyard mounted, removes its fstab line
    (every other line kept byte for byte) and the mount point it made, then the record.
  - Supports check mode.
options:
  path: {description: The mount point., type: path, required: true}
  fstype: {description: The file system type (mount -t)., type: str, required: true}
  types: {description: "The types the mount table may show for it (NFS mounted as nfs shows nfs4 when it negotiates v4); default: [fstype].", type: list, elements: str, default: []}
  source: {description: What to mount; empty to check the site's own mount., type: str, default: ""}
  opts: {description: Mount options; C(_netdev) and C(nofail) are always added., type: str, default: defaults}
  helper: {description: The mount helper the client provides (e.g. mount.lustre); empty for none., type: str, default: ""}
  kernel_module: {description: The kernel module that registers I(fstype); empty when the client loads its own., type: str, default: ""}
  client: {description: How errors name the client to install., type: str, default: the file system's client}
  manage: {description: Whether Railyard may write fstab and mount (false checks only)., type: bool, default: true}
  fstab: {description: The fstab file., type: path, default: /etc/fstab}
  record: {description: Where Railyard records the line it wrote., type: path, default: /var/lib/railyard/parallel-fs.json}
  state: {description: present or absent., type: str, choices: [present, absent], default: present}
"""

EXAMPLES = r"""
- name: A Lustre file system over the storage network
  parallel_fs_mount:
    path: /mnt/pfs
    fstype: lustre
    source: 10.0.0.1@o2ib:/lustre
    opts: flock
    helper: mount.lustre
    kernel_module: lustre
    client: the Lustre client
"""

RETURN = r"""
managed: {description: "Whether the mount is Railyard's (false when it is the site's, or only checked).", type: bool, returned: always}
line: {description: The fstab line Railyard keeps (empty when not managed)., type: str, returned: state=present}
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule

try:  # on a host: shipped as module_utils
    from ansible.module_utils.railyard_host_records import load_record, write_atomic, write_record
    from ansible.module_utils.railyard_mount_points import mount_at, resolve, unescape
except ImportError:  # run from its file by the tests
    from railyard.model.mount_points import mount_at, resolve, unescape
    from railyard.tuning.host_records import load_record, write_atomic, write_record

# Where util-linux's mount(8) looks for /sbin/mount.<type> helpers, and /usr/sbin for a /usr not merged.
HELPER_DIRS = ("/sbin", "/sbin/fs.d", "/sbin/fs", "/usr/sbin")
ALWAYS = ("_netdev", "nofail")


def same_form(source):
    """server:/export/ as server:/export; server:/ stays."""
    while source.endswith("/") and not source.endswith(":/") and len(source) > 1:
        source = source[:-1]
    return source


def escape(field):
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in field)


def mounted_at(path, mountinfo="/proc/self/mountinfo"):
    """(source, fstype) of the topmost mount at `path` as this host resolves it (the mount table
    shows /var/mnt/pfs where /mnt is a symlink to /var/mnt), or None; the source as the stack would
    write it (a trailing / of an export or subdirectory dropped, which kernels differ on)."""
    got = mount_at(resolve(path), mountinfo)
    return (same_form(got["source"]), got["fstype"]) if got else None


def fstab_entries(text, path):
    """[(line number, line)] of fstab lines that mount something at `path`."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if len(fields) >= 2 and not fields[0].startswith("#") and unescape(fields[1]).rstrip("/") == path.rstrip("/"):
            out.append((n, line))
    return out


def record_opts(record):
    """The options of a recorded fstab line."""
    return record["line"].split()[3]


def fstab_line(p):
    opts = [o for o in p["opts"].split(",") if o and o != "defaults"]
    opts += [o for o in ALWAYS if o not in opts]
    return f"{escape(p['source'])} {escape(p['path'])} {p['fstype']} {','.join(opts)} 0 0"


def without_line(text, line):
    """fstab text without `line` (every occurrence), other lines byte for byte."""
    kept = [ln for ln in text.splitlines(keepends=True) if ln.rstrip("\n") != line]
    return "".join(kept)


def with_line(text, line):
    if text and not text.endswith("\n"):
        text += "\n"
    return text + line + "\n"


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def client_missing(p, filesystems="/proc/filesystems", modules_root="/lib/modules"):
    """What of the kind's client this host lacks, or None."""
    missing = []
    if p["helper"] and not any(os.path.exists(os.path.join(d, p["helper"])) for d in HELPER_DIRS):
        missing.append(f"no {p['helper']} in {', '.join(HELPER_DIRS)}")
    if p["kernel_module"]:
        with open(filesystems) as f:
            registered = {line.split()[-1] for line in f if line.strip()}
        if p["fstype"] not in registered and not module_file(p["kernel_module"], modules_root):
            release = platform.release()
            missing.append(f"the kernel {release} has no {p['fstype']} file system (not in {filesystems}, and no "
                           f"{p['kernel_module']}.ko under {modules_root}/{release})")
    return "; ".join(missing) or None


def module_file(name, modules_root):
    base = os.path.join(modules_root, platform.release())
    wanted = {f"{name}{ext}" for ext in (".ko", ".ko.xz", ".ko.zst", ".ko.gz")}
    for _, _, files in os.walk(base):
        if wanted.intersection(files):
            return True
    return False


def run(module, argv, what):
    rc, out, err = module.run_command(argv)
    if rc != 0:
        return f"{what}: {' '.join(argv)}: {(err or out).strip() or f'exit {rc}'}"
    return None


def mount_argv(p):
    """The fstab line's mount, spelled out: with the line's nofail, mount(8) would report a source
    that is not there as success."""
    opts = [o for o in p["opts"].split(",") if o and o not in ALWAYS]
    return ["mount", "-t", p["fstype"], "-o", ",".join(opts) or "defaults", p["source"], p["path"]]


def is_mount_of(got, source, types):
    """Whether `got` (mounted_at) is a mount of `source` by one of `types`."""
    return got is not None and got[1] in types and (not source or got[0] == source)


def seen(record):
    """(source, type) of Railyard's mount as the mount table showed it right after mounting."""
    return record.get("seen_source", record.get("source")), record.get("seen_type", record.get("fstype"))


def check_only(module, p):
    got = mounted_at(p["path"])
    want = f"a {p['fstype']} mount" + (f" of {p['source']}" if p["source"] else "")
    why = ("its mounts are the cluster's (mmmount); Railyard checks them" if not p["manage"]
           else "railyard:storage.parallelFs.source is not set, so the site mounts it and Railyard checks")
    if not is_mount_of(got, p["source"], p["types"]):
        found = f"{got[0]} ({got[1]})" if got else "nothing mounted"
        module.fail_json(msg=f"{p['path']} is not {want}: {found}; {why}. Nothing was changed", managed=False)
    module.exit_json(changed=False, managed=False, line="")


def present(module, p, record):
    if not p["source"] or not p["manage"]:
        check_only(module, p)
    if record is not None and record.get("previous") and not module.check_mode:
        # An earlier mount point the stack moved away from, still busy when it moved: try again.
        if undo(module, record["previous"], None) is None:
            record = {k: v for k, v in record.items() if k != "previous"}
            write_record(p["record"], record)
    # The stack moved the mount point: the new one is mounted first, then the old one goes.
    moved = record if record is not None and (record["path"], record.get("fstab")) != (p["path"], p["fstab"]) else None
    if moved:
        record = None
    line = fstab_line(p)
    fstab = read(p["fstab"])
    ours = record.get("line") if record else None
    got = mounted_at(p["path"])
    entries = fstab_entries(fstab, p["path"])
    # Only the recorded line is Railyard's: an identical one it has no record of is the site's.
    foreign = [f"line {n}: {ln.strip()}" for n, ln in entries if ln != ours]

    if record is None and is_mount_of(got, p["source"], p["types"]):
        # The site mounted this very file system: it stays theirs (teardown leaves it).
        module.exit_json(changed=False, managed=False, line="")
    if foreign:
        module.fail_json(msg=f"{p['fstab']} already mounts something at {p['path']} ({'; '.join(foreign)}) that "
                             "Railyard did not write; remove it, or leave railyard:storage.parallelFs.source unset "
                             "to use the site's mount. Nothing was changed", managed=False)
    mounted_ours = record is not None and got == seen(record)
    if got is not None and not mounted_ours:
        module.fail_json(msg=f"{p['path']} is already a mount of {got[0]} ({got[1]}); Railyard mounts "
                             f"{p['source']} only on a free mount point. Nothing was changed", managed=False)
    if mounted_ours and ours == line and any(ln == line for _, ln in entries):
        module.exit_json(changed=False, managed=True, line=line)
    missing = client_missing(p)
    if missing:
        module.fail_json(msg=f"cannot mount {p['source']} at {p['path']}: {p['client']} is not installed "
                             f"({missing}). Nothing was changed", managed=False)
    if module.check_mode:
        module.exit_json(changed=True, managed=True, line=line)

    unmounted_old = False
    if mounted_ours and ours != line:
        # A new source or new options: the old mount goes first, and only if nothing holds it open.
        failed = run(module, ["umount", p["path"]], f"{p['path']} (mounted with the stack's earlier source or options)")
        if failed:
            module.fail_json(msg=f"{failed}; close what uses it and run again. Nothing was changed", managed=True)
        unmounted_old = True
    made_dir = not os.path.isdir(p["path"])
    if made_dir:
        os.makedirs(p["path"], mode=0o755)
    new = {"path": p["path"], "source": p["source"], "fstype": p["fstype"], "line": line, "fstab": p["fstab"],
           "made_dir": made_dir or bool(record and record.get("made_dir"))}
    if moved:
        new["previous"] = moved
    # The record first: a run cut short after it still knows what to take back out.
    write_record(p["record"], new)
    text = without_line(fstab, ours) if ours is not None and ours != line else fstab
    if line not in text.splitlines():
        text = with_line(text, line)
    if text != fstab:
        write_atomic(p["fstab"], text)
    if not mounted_ours or unmounted_old:
        failed = run(module, mount_argv(p), f"mounting {p['source']}")
        now = mounted_at(p["path"])
        if not failed and not is_mount_of(now, "", p["types"]):
            failed = (f"mounting {p['source']}: mount(8) exited 0 but {p['path']} is "
                      f"{'a ' + now[1] + ' mount' if now else 'not mounted'}")
        if failed:
            # Back as it was: the mount point, fstab, the record, and the earlier mount.
            if now is not None:
                run(module, ["umount", p["path"]], p["path"])
            write_atomic(p["fstab"], fstab)
            if record is None and moved is None:
                os.unlink(p["record"])
            else:
                write_record(p["record"], record if record is not None else moved)
            if made_dir:
                os.rmdir(p["path"])
            if unmounted_old and run(module, mount_argv({**p, **record, "opts": record_opts(record)}), "again"):
                failed += f"; the earlier mount of {record['source']} could not be made again"
            module.fail_json(msg=f"{failed}; its fstab line was taken back out", managed=record is not None)
        # Railyard's mount as the kernel shows it (a source it spells its own way, an nfs4 type),
        # which later runs and teardown compare with.
        new.update(seen_source=now[0], seen_type=now[1])
        write_record(p["record"], new)
    if moved:
        failed = undo(module, moved, None)
        if failed:
            module.warn(f"{failed}: the earlier mount point stays mounted until a later run can take it out")
        else:
            new.pop("previous")
            write_record(p["record"], new)
    module.exit_json(changed=True, managed=True, line=line)


def undo(module, record, record_path):
    """Unmount what `record` says Railyard mounted, take its fstab line and mount point back out,
    then the record (unless `record_path` is None); an error message when the mount is busy (and
    nothing changed)."""
    path, fstab = record["path"], record.get("fstab", "/etc/fstab")
    if mounted_at(path) == seen(record):
        failed = run(module, ["umount", path], path)
        if failed:
            return failed
    text = read(fstab)
    if record["line"] in text.splitlines():
        write_atomic(fstab, without_line(text, record["line"]))
    if record.get("made_dir"):
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            module.warn(f"{path} is left: {exc.strerror}")
    if record_path is not None:
        os.unlink(record_path)
    return None


def absent(module, p, record):
    if record is None:
        module.exit_json(changed=False, managed=False)
    if module.check_mode:
        module.exit_json(changed=True, managed=True)
    for earlier in [record.get("previous")] if record.get("previous") else []:
        failed = undo(module, earlier, None)
        if failed:
            module.fail_json(msg=f"{failed}; close what uses it and run again", managed=True)
    failed = undo(module, record, p["record"])
    if failed:
        module.fail_json(msg=f"{failed}; close what uses it and run again. Nothing was changed", managed=True)
    module.exit_json(changed=True, managed=True)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            fstype=dict(type="str", required=True),
            types=dict(type="list", elements="str", default=[]),
            source=dict(type="str", default=""),
            opts=dict(type="str", default="defaults"),
            helper=dict(type="str", default=""),
            kernel_module=dict(type="str", default=""),
            client=dict(type="str", default="the file system's client"),
            manage=dict(type="bool", default=True),
            fstab=dict(type="path", default="/etc/fstab"),
            record=dict(type="path", default="/var/lib/railyard/parallel-fs.json"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    p["path"] = p["path"].rstrip("/") or "/"
    p["source"] = same_form(p["source"])
    p["types"] = p["types"] or [p["fstype"]]
    try:
        record = load_record(p["record"], "mount")
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if p["state"] == "absent":
        absent(module, p, record)
    present(module, p, record)


if __name__ == "__main__":
    main()
