"""The hosts' own check of a mount point (railyard_mount_point, issue 38), run as a role runs it
on a real kernel mount table and real symlinks, in a private mount namespace of its own: a path
the host resolves into a system directory, and a mount Railyard did not make, refused with
nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.roles.test_parallel_fs_mount import ns  # noqa: F401  (the private mount namespace)

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "playbooks/library/railyard_mount_point.py"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root (a private mount namespace)")


def check(ns, path: Path, **args) -> dict:  # noqa: F811
    params = {"path": str(path), "key": "railyard:storage.localCache.mount", **args, "_ansible_check_mode": True}
    f = ns.tmp / "mount-point-args.json"
    f.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    out = ns.run(sys.executable, str(MODULE), str(f), check=False).stdout
    return json.loads(out[out.index("{"):])


def test_a_path_that_a_symlink_takes_into_etc_is_refused_naming_the_key_and_nothing_is_made(ns):  # noqa: F811
    (ns.tmp / "mnt").symlink_to("/etc")
    got = check(ns, ns.tmp / "mnt" / "railyard-cache")
    assert got.get("failed") and got["resolved"] == "/etc/railyard-cache"
    assert "resolves it to /etc/railyard-cache, and /etc is a directory the operating system lives in" in got["msg"]
    assert "set railyard:storage.localCache.mount to another path" in got["msg"] and "Nothing was changed" in got["msg"]
    assert not os.path.lexists("/etc/railyard-cache")


def test_a_plain_free_directory_passes_and_reports_where_it_resolves(ns):  # noqa: F811
    real = ns.tmp / "scratch"
    real.mkdir()
    (ns.tmp / "link").symlink_to(real)
    got = check(ns, ns.tmp / "link" / "cache", railyard_mounts=True)
    assert not got.get("failed") and not got["changed"] and got["resolved"] == str(real / "cache")


def test_someone_elses_mount_is_refused_where_railyard_would_mount_its_own_and_left_mounted(ns):  # noqa: F811
    site = ns.tmp / "cache"
    site.mkdir()
    ns.run("mount", "-t", "tmpfs", "-o", "size=8m", "site-scratch", str(site))
    got = check(ns, site, railyard_mounts=True)
    assert got.get("failed") and f"{site}: it is already a mount of site-scratch (tmpfs) that Railyard did not make" \
        in got["msg"], got
    # Where the role only uses what is there (no drives of its own), the site's mount is the cache.
    assert not check(ns, site).get("failed")
    assert "site-scratch" in ns.run("findmnt", "-n", "-o", "SOURCE", "--mountpoint", str(site)).stdout
