"""What Railyard records on a host about what it made there (the cache's drives, the parallel file
system's fstab line): read and written by the roles' modules, shipped to hosts as module_utils
(playbooks/module_utils/railyard_host_records.py is a symlink to this file), so it is standard
library only. A record is written whole (a temporary file renamed over it), so a run cut short
leaves the old record or the new, never half of one."""

from __future__ import annotations

import json
import os


def load_record(path, what):
    """The record at `path`, or None when there is none; `what` names what it keeps, for the error
    about a record that cannot be read."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} cannot be read ({exc}); move it aside only if no {what} of Railyard's is on "
                         "this host")


def write_atomic(path, text, mode=0o644):
    """`text` at `path` through a rename; an existing file keeps its mode and owner."""
    tmp = path + ".railyard-tmp"
    with open(tmp, "w") as f:
        f.write(text)
    try:
        st = os.stat(path)
        os.chmod(tmp, st.st_mode & 0o7777)
        os.chown(tmp, st.st_uid, st.st_gid)
    except FileNotFoundError:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def write_record(path, record):
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    write_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
