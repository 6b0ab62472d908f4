"""Where a cache or a parallel file system may be mounted: never over a directory the operating
system lives in, and only at a path written in its one normal form.

The cache role makes a file system and mounts it at its mount point, the parallel_fs role mounts
its client there, and both own the directory: over /etc or /usr/local that hides, and chowns, what
the host runs on. Validation refuses such a path in the stack file by name, before anything is
touched; on a server the hosts driver checks the path again as the host resolves it (symlinks
followed), since a host can differ from the rule (`/mnt` may be a symlink).

Standard library only: shipped to hosts as module_utils (playbooks/module_utils/
railyard_mount_points.py is a symlink to this file), so the stack's rule and the host's check are
the same code.
"""

from __future__ import annotations

import os
import posixpath
import re

# The directories of the Filesystem Hierarchy Standard that hold the system, and everything under
# them. /opt holds installed software (the NIC drivers' and DGX OS's tools among it); /efi is the
# EFI system partition's mount point beside /boot. /mnt, /srv, /media and new top-level
# directories (/scratch, /data, /lustre, /raid) are left free for exactly these mounts. So is /tmp:
# nothing the host runs on lives in a directory made there (a test's scratch cache often does).
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/efi", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
               "/proc", "/root", "/run", "/sbin", "/sys", "/usr", "/var")

# The one exception under /var, for paths as a host resolves them, never as a stack writes them.
# OSTree systems (Fedora CoreOS, RHEL for Edge) keep / read-only and make /mnt and /srv symlinks to
# /var/mnt and /var/srv: there /mnt/cache resolves into /var and is still the place the OS gives
# for mounts. A stack that writes /var/... itself is refused: every other directory under /var
# holds state the host runs on (/var/lib/dpkg, /var/lib/kubelet, /var/lib/containerd, /var/log).
OSTREE_LINKS = {"/mnt": "/var/mnt", "/srv": "/var/srv"}

ALLOWED = "an absolute, normalized path outside the system's directories, e.g. /mnt/cache, /srv/pfs or /scratch"

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def system_dir(path: str) -> str | None:
    """The system directory that the normalized absolute `path` is or lies under ("/" for the root
    itself), or None."""
    if path == "/":
        return "/"
    return next((d for d in SYSTEM_DIRS if _inside(path, d)), None)


def path_problem(path: str) -> str | None:
    """Why `path` cannot be a mount point as a stack file writes it (a sentence without the path
    itself), or None when it can."""
    if not path.startswith("/"):
        return "a relative path: the roles would resolve it against the working directory of each run"
    if any(c.isspace() for c in path) or _CONTROL.search(path):
        return "it holds whitespace or a control character, which fstab and mount(8) cannot carry as written"
    normal = posixpath.normpath(path)
    if normal.startswith("//"):  # POSIX keeps a leading // as implementation-defined; the kernel does not
        normal = "/" + normal.lstrip("/")
    top = system_dir(normal)
    if normal != path:
        why = f"not normalized (no '..', '.', '//' or trailing '/'): it means {normal}"
        return why + (f", and {_system(top)}" if top else "; write that")
    return _system(top) if top else None


def _system(top: str) -> str:
    if top == "/":
        return "/ is the root file system: a mount there hides the whole system"
    return (f"{top} is a directory the operating system lives in: a mount at or under it hides, and chowns, what "
            "the host runs on")


def resolved_problem(path: str, resolved: str) -> str | None:
    """Why `path`, which a host resolves to `resolved` (symlinks followed), cannot be a mount point
    there, or None when it can."""
    written = path_problem(path)
    if written is not None or resolved == path:
        return written
    for link, target in OSTREE_LINKS.items():
        if _inside(path, link) and _inside(resolved, target):
            return None
    top = system_dir(resolved)
    return f"this host resolves it to {resolved}, and {_system(top)}" if top else None


def resolve(path: str) -> str:
    """`path` as this host resolves it: every symlink on the way followed, the missing rest kept."""
    return os.path.realpath(path)


def unescape(field: str) -> str:
    """mountinfo's and fstab's octal escapes (\\040 for a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts(mountinfo: str = "/proc/self/mountinfo") -> list[dict[str, str]]:
    """The mount table, in mount order (the last entry at a path is the one on top): each mount's
    device number (major:minor), mount point, type and source, unescaped. `mountinfo` is any
    process's (/proc/PID/mountinfo)."""
    out = []
    with open(mountinfo) as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 2:
                continue
            out.append({"dev": fields[2], "path": unescape(fields[4]), "fstype": tail[0], "source": unescape(tail[1])})
    return out


def mount_at(path: str, mountinfo: str = "/proc/self/mountinfo") -> dict[str, str] | None:
    """The topmost mount whose mount point is exactly `path` (as the kernel shows it: resolved), or None."""
    found = None
    for m in mounts(mountinfo):
        if m["path"] == path:
            found = m
    return found
