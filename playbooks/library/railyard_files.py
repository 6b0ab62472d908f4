#!/usr/bin/python
"""Several small configuration files in one module run, with check mode and diff."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: railyard_files
short_description: Write or remove a role's configuration files in one module run
description:
  - Each file is written only when its content, mode or ownership differs, through a temporary
    file in the same directory renamed over the old one (as M(ansible.builtin.copy) does), so a
    reader never sees half a file and a second run reports no change.
  - Missing parent directories are created (C(0755), owned by C(root)).
  - Why not M(ansible.builtin.template) per file? That is a directory task, then a stat and a copy
    or file run per file, each a module start on the host and a worker on the controller. A role
    writes its two or three files in one run here; the content is still rendered on the controller
    (C(lookup('ansible.builtin.template', ...)) with the role's templates).
options:
  files:
    description: The files, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path of the file.
        type: path
        required: true
      content:
        description: What the file holds (required when I(state=present)).
        type: str
      state:
        description: C(present) writes the file, C(absent) removes it.
        type: str
        choices: [present, absent]
        default: present
      mode:
        description: Permissions of a written file.
        type: raw
        default: "0644"
      owner:
        description: Owner of a written file.
        type: str
        default: root
      group:
        description: Group of a written file.
        type: str
        default: root
  root:
    description:
      - The root of the host's filesystem the files are under (a role passes its C(<role>_etc_root));
        what was there before is kept in C(<root>/var/lib/railyard/originals).
      - The first time a file is written, its previous content, mode and owner are saved there (or
        that it did not exist, and which parent directories were made for it). C(absent) then puts the
        host back as it was found - the old file restored, or the new one and its new directories
        removed - instead of deleting a file the host had before Railyard.
      - With it, C(absent) touches only files it has a record of, or whose first lines say
        C(Managed by Railyard) (the templates' header); a file Railyard did not write (or already
        put back) stays. Unset, nothing is kept and C(absent) deletes the file.
    type: path
author: Railyard
"""

EXAMPLES = r"""
- name: Write /etc/nccl.conf and the NCCL topology file
  railyard_files:
    files:
      - path: /etc/nccl.conf
        content: "{{ lookup('ansible.builtin.template', 'nccl.conf.j2') }}"
      - path: /etc/railyard/nccl-topo.xml
        content: "{{ lookup('ansible.builtin.template', 'nccl-topo.xml.j2') }}"
"""

RETURN = r"""
files:
  description: One entry per file.
  returned: always
  type: list
  elements: dict
  contains:
    path: {description: The file., type: str}
    state: {description: present or absent., type: str}
    changed: {description: Whether it was (or would be) written or removed., type: bool}
    restored: {description: For C(absent), whether the host's own earlier file was put back., type: bool}
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

DIR_MODE = 0o755
ORIGINALS = "var/lib/railyard/originals"


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def _missing_parents(path):
    out = []
    parent = os.path.dirname(path)
    while parent and parent != "/" and not os.path.isdir(parent):
        out.append(parent)
        parent = os.path.dirname(parent)
    return list(reversed(out))


def _text(data):
    return "" if data is None else data.decode("utf-8", "replace")


def _record_paths(root, path):
    # Named after the file's path below the root.
    rel = os.path.relpath(path, root) if path.startswith(root.rstrip("/") + "/") else path.lstrip("/")
    base = os.path.join(root, ORIGINALS, rel)
    return base + ".railyard.json", base + ".railyard.orig"


def _remember(root, path, before, made_dirs):
    """Keep what the host had at `path` before its first write (nothing if already kept)."""
    manifest, saved = _record_paths(root, path)
    if os.path.exists(manifest):
        return
    os.makedirs(os.path.dirname(manifest), mode=0o700, exist_ok=True)
    entry = {"existed": before is not None, "dirs": made_dirs}
    if before is not None:
        st = os.stat(path)
        entry.update(mode=st.st_mode & 0o7777, uid=st.st_uid, gid=st.st_gid)
        with open(saved, "wb") as fh:
            fh.write(before)
    with open(manifest + ".tmp", "w") as fh:
        json.dump(entry, fh)
    os.replace(manifest + ".tmp", manifest)


def _restore(root, path):
    """Put back what was kept for `path`; None when nothing was kept, else what the file holds now."""
    originals = os.path.join(root, ORIGINALS)
    manifest, saved = _record_paths(root, path)
    try:
        with open(manifest) as fh:
            entry = json.load(fh)
    except FileNotFoundError:
        return None
    if entry["existed"]:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.")
        with os.fdopen(fd, "wb") as out, open(saved, "rb") as src:
            shutil.copyfileobj(src, out)
        os.chmod(tmp, entry["mode"])
        os.chown(tmp, entry["uid"], entry["gid"])
        os.replace(tmp, path)
        os.unlink(saved)
    elif os.path.lexists(path):
        os.unlink(path)
    os.unlink(manifest)
    # The record's own directories go when they hold nothing more.
    d = os.path.dirname(manifest)
    while d.startswith(originals):
        try:
            os.rmdir(d)  # up to the originals directory, when empty
        except OSError:
            break
        d = os.path.dirname(d)
    # Then those the first write made, now that the records are out of them (a file under
    # /var/lib/railyard itself shares its parents with them).
    for made in reversed(entry["dirs"] if not entry["existed"] else []):
        try:
            os.rmdir(made)
        except OSError:
            break  # something else lives there now
    return _read(path)


MANAGED = b"Managed by Railyard"


def _managed(data):
    """A file Railyard's templates wrote (their header says so, in the first lines), record or not."""
    return data is not None and MANAGED in b"\n".join(data.splitlines()[:3])


def _kept(root, path):
    """(whether a record exists, what absent would leave at `path`: the kept content or None)."""
    manifest, saved = _record_paths(root, path)
    try:
        with open(manifest) as fh:
            entry = json.load(fh)
    except FileNotFoundError:
        return False, None
    return True, (_read(saved) if entry["existed"] else None)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="dict", required=True, options=dict(
                path=dict(type="path", required=True),
                content=dict(type="str"),
                state=dict(type="str", choices=["present", "absent"], default="present"),
                mode=dict(type="raw", default="0644"),
                owner=dict(type="str", default="root"),
                group=dict(type="str", default="root"),
            )),
            root=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    for f in module.params["files"]:
        if not os.path.isabs(f["path"]):
            module.fail_json(msg=f"{f['path']}: not an absolute path")
        if f["state"] == "present" and f["content"] is None:
            module.fail_json(msg=f"{f['path']}: content is required when state is present")

    root = module.params["root"]
    results, diffs = [], []
    for f in module.params["files"]:
        path = f["path"]
        before = _read(path)
        if f["state"] == "absent":
            # With a record of the host's files, only what Railyard wrote is Railyard's to remove:
            # a file it has no record of (the host's own, or one it already put back) stays.
            kept, after = _kept(root, path) if root else (False, None)
            if root and not kept and not _managed(before):
                after = before
            changed = before != after or kept
            if changed and not module.check_mode:
                if kept:
                    _restore(root, path)
                elif before is not None:
                    os.unlink(path)
            if before != after:
                diffs.append(dict(before_header=path, after_header=path, before=_text(before), after=_text(after)))
            results.append(dict(path=path, state="absent", changed=changed, restored=kept and after is not None))
            continue

        content = f["content"].encode("utf-8")
        changed = before != content
        if not module.check_mode:
            made = _missing_parents(path)
            if root and changed:
                _remember(root, path, before, made)
            for d in made:
                # The record may have made it already: a file under /var/lib/railyard itself.
                if not os.path.isdir(d):
                    os.mkdir(d, DIR_MODE)
                module.set_owner_if_different(d, "root", False)
                module.set_group_if_different(d, "root", False)
            if changed:
                fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.")
                with os.fdopen(fd, "wb") as fh:
                    fh.write(content)
                module.atomic_move(tmp, path)
        file_args = dict(path=path, mode=f["mode"], owner=f["owner"], group=f["group"],
                         secontext=None, attributes=None)
        if before is not None or not module.check_mode:
            # In check mode a file to be created has nothing to compare attributes with.
            changed = module.set_fs_attributes_if_different(file_args, changed)
        if before != content:
            diffs.append(dict(before_header=path, after_header=path, before=_text(before), after=_text(content)))
        results.append(dict(path=path, state="present", changed=changed))

    module.exit_json(changed=any(r["changed"] for r in results), files=results, diff=diffs)


if __name__ == "__main__":
    main()
