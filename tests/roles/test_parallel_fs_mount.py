"""The parallel_fs role's module on a real mount(8) and a real kernel mount table, in a private
mount namespace of its own (nothing reaches the host's): the fstab line, the mount, the record, a
second run that changes nothing, the refusals that change nothing, a remount on new options, the
rollback of a mount that fails, and a teardown that leaves the rest of fstab byte for byte.

This kernel has no Lustre, NFS, GPFS or Weka client, so the mounted file system is a tmpfs (its
`size=` option is what a remount must change); the module's path is the same for every kind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "playbooks/roles/parallel_fs/library/parallel_fs_mount.py"
SOURCE = "railyard-pfs"
SITE_FSTAB = "# the site's own fstab\nUUID=0a1b / ext4 errors=remount-ro 0 1\n\n/dev/sdb1  /data  xfs  defaults  0 2\n"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root (a private mount namespace)")


@pytest.fixture
def ns(tmp_path):
    """A process holding a private mount namespace, and how to run things in it."""
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "600"])
    try:
        for _ in range(100):  # until the holder is in its own namespace
            if os.readlink(f"/proc/{holder.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
                break
            subprocess.run(["sleep", "0.02"], check=True)
        yield Namespace(holder.pid, tmp_path)
    finally:
        holder.kill()
        holder.wait()


class Namespace:
    def __init__(self, pid: int, tmp: Path):
        self.pid, self.tmp = pid, tmp
        self.fstab = tmp / "fstab"
        self.fstab.write_text(SITE_FSTAB)
        self.record = tmp / "state/parallel-fs.json"
        self.mount = tmp / "pfs"

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", "-t", str(self.pid), "-m", *argv], capture_output=True, text=True,
                              check=check)

    def module(self, check_mode: bool = False, **args) -> dict:
        params = {"path": str(self.mount), "fstype": "tmpfs", "source": SOURCE, "opts": "size=16m",
                  "kernel_module": "tmpfs", "client": "the test's client", "fstab": str(self.fstab),
                  "record": str(self.record), **args, "_ansible_check_mode": check_mode}
        f = self.tmp / "args.json"
        f.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
        out = self.run(sys.executable, str(MODULE), str(f), check=False).stdout
        return json.loads(out[out.index("{"):])

    def mounted(self) -> list[tuple[str, str, str]]:
        """(source, fstype, options) of every mount at the mount point, in the namespace."""
        out = self.run("findmnt", "-n", "-r", "-o", "SOURCE,FSTYPE,OPTIONS", "--mountpoint", str(self.mount),
                       check=False).stdout
        return [tuple(line.split(" ", 2)) for line in out.splitlines()]


def line(ns: Namespace, opts: str = "size=16m") -> str:
    return f"{SOURCE} {ns.mount} tmpfs {opts},_netdev,nofail 0 0"


def test_a_mount_is_one_fstab_line_and_a_record_and_a_second_run_changes_nothing(ns):
    dry = ns.module(check_mode=True)
    assert dry["changed"] and not ns.record.exists() and ns.fstab.read_text() == SITE_FSTAB and not ns.mount.exists()

    got = ns.module()
    assert got["changed"] and got["managed"] and got["line"] == line(ns)
    assert ns.fstab.read_text() == SITE_FSTAB + line(ns) + "\n"
    [(source, fstype, options)] = ns.mounted()
    assert (source, fstype) == (SOURCE, "tmpfs") and "size=16384k" in options
    assert json.loads(ns.record.read_text())["line"] == line(ns)
    assert ns.mounted() and not os.path.ismount(ns.mount), "the mount must stay inside the test's namespace"

    again = ns.module()
    assert not again["changed"] and ns.fstab.read_text() == SITE_FSTAB + line(ns) + "\n" and len(ns.mounted()) == 1


def test_new_options_mount_it_again_with_them_in_place_of_the_old_line(ns):
    ns.module()
    got = ns.module(opts="size=32m,mode=0755")
    assert got["changed"]
    assert ns.fstab.read_text() == SITE_FSTAB + line(ns, "size=32m,mode=0755") + "\n"
    [(_, _, options)] = ns.mounted()
    assert "size=32768k" in options and "mode=755" in options


def test_teardown_unmounts_and_takes_out_its_line_only(ns):
    ns.module()
    ns.fstab.write_text(ns.fstab.read_text() + "tmpfs /scratch tmpfs size=1g 0 0\n")
    got = ns.module(state="absent")
    assert got["changed"] and ns.mounted() == [] and not ns.record.exists() and not ns.mount.exists()
    assert ns.fstab.read_text() == SITE_FSTAB + "tmpfs /scratch tmpfs size=1g 0 0\n"
    assert not ns.module(state="absent")["changed"]


def test_a_busy_mount_is_not_taken_away_and_the_error_says_why(ns):
    ns.module()
    # (nsenter's --wd would open the directory before entering the namespace: the host's, not the mount)
    busy = subprocess.Popen(["nsenter", "-t", str(ns.pid), "-m", "sh", "-c", f"cd {ns.mount} && exec sleep 60"])
    try:
        for _ in range(100):
            if os.path.exists(f"/proc/{busy.pid}/cwd") and os.readlink(f"/proc/{busy.pid}/cwd") == str(ns.mount):
                break
            subprocess.run(["sleep", "0.02"], check=True)
        got = ns.module(state="absent")
    finally:
        busy.kill()
        busy.wait()
    assert got.get("failed") and "busy" in got["msg"] and "Nothing was changed" in got["msg"]
    assert len(ns.mounted()) == 1 and ns.fstab.read_text().endswith(line(ns) + "\n") and ns.record.exists()


def test_an_fstab_line_railyard_did_not_write_is_refused_and_nothing_changes(ns):
    foreign = SITE_FSTAB + f"other:/export {ns.mount} nfs defaults 0 0\n"
    ns.fstab.write_text(foreign)
    got = ns.module()
    assert got.get("failed") and f"already mounts something at {ns.mount}" in got["msg"] and "line 5" in got["msg"]
    assert ns.fstab.read_text() == foreign and not ns.record.exists() and ns.mounted() == []
    # The very line Railyard would write, with no record of Railyard's: still the site's.
    ns.fstab.write_text(SITE_FSTAB + line(ns) + "\n")
    assert ns.module().get("failed")


def test_another_file_system_on_the_mount_point_is_refused_and_the_sites_own_mount_is_left(ns):
    ns.mount.mkdir()
    ns.run("mount", "-t", "tmpfs", "-o", "size=8m", "somebody-else", str(ns.mount))
    got = ns.module()
    assert got.get("failed") and "already a mount of somebody-else (tmpfs)" in got["msg"]
    assert ns.fstab.read_text() == SITE_FSTAB and not ns.record.exists()
    ns.run("umount", str(ns.mount))
    # The site mounted this very source itself: Railyard neither records nor, at teardown, removes it.
    ns.run("mount", "-t", "tmpfs", "-o", "size=8m", SOURCE, str(ns.mount))
    got = ns.module()
    assert not got["changed"] and not got["managed"] and not ns.record.exists()
    assert not ns.module(state="absent")["changed"] and len(ns.mounted()) == 1


def test_a_host_without_the_client_is_refused_by_name_before_anything_changes(ns):
    got = ns.module(helper="mount.railyard-no-such-client")
    assert got.get("failed")
    assert "the test's client is not installed (no mount.railyard-no-such-client in /sbin" in got["msg"]
    got = ns.module(fstype="lustre", kernel_module="lustre")
    assert got.get("failed") and "has no lustre file system (not in /proc/filesystems, and no lustre.ko" in got["msg"]
    assert ns.fstab.read_text() == SITE_FSTAB and not ns.record.exists() and not ns.mount.exists()


def test_a_mount_that_fails_takes_its_line_back_out(ns):
    got = ns.module(fstype="ext4", source="/dev/railyard-no-such-device", kernel_module="", opts="defaults")
    assert got.get("failed") and "mounting /dev/railyard-no-such-device" in got["msg"]
    assert "its fstab line was taken back out" in got["msg"]
    assert ns.fstab.read_text() == SITE_FSTAB and not ns.record.exists() and not ns.mount.exists()


def test_without_a_source_the_sites_mount_is_only_checked(ns):
    got = ns.module(source="")
    assert got.get("failed") and f"{ns.mount} is not a tmpfs mount: nothing mounted" in got["msg"]
    assert "the site mounts it" in got["msg"]
    ns.mount.mkdir()
    ns.run("mount", "-t", "tmpfs", "site-pfs", str(ns.mount))
    got = ns.module(source="")
    assert not got["changed"] and not got["managed"] and ns.fstab.read_text() == SITE_FSTAB
    # GPFS: its mounts are the cluster's, checked whatever the source.
    got = ns.module(manage=False, source="fs1")
    assert got.get("failed") and "mmmount" in got["msg"]


def test_a_mount_of_another_type_than_the_kind_shows_is_taken_back_down(ns):
    # mount(8) succeeds, but the mount table shows a type the kind never has: not the asked mount.
    got = ns.module(types=["nfs", "nfs4"])
    assert got.get("failed") and "mount(8) exited 0 but" in got["msg"] and "a tmpfs mount" in got["msg"]
    assert ns.mounted() == [] and ns.fstab.read_text() == SITE_FSTAB and not ns.record.exists()


def test_new_options_the_kernel_refuses_put_the_earlier_mount_back(ns):
    ns.module()
    got = ns.module(opts="size=not-a-size")
    assert got.get("failed") and "its fstab line was taken back out" in got["msg"]
    [(_, _, options)] = ns.mounted()
    assert "size=16384k" in options
    assert ns.fstab.read_text() == SITE_FSTAB + line(ns) + "\n"
    assert json.loads(ns.record.read_text())["line"] == line(ns)


def test_a_moved_mount_point_is_mounted_first_and_the_old_one_then_taken_out(ns):
    ns.module()
    old = ns.mount
    ns.mount = ns.tmp / "pfs2"
    got = ns.module()
    assert got["changed"] and len(ns.mounted()) == 1
    assert ns.fstab.read_text() == SITE_FSTAB + line(ns) + "\n"
    assert not old.exists() and "previous" not in json.loads(ns.record.read_text())
    assert ns.module(state="absent")["changed"] and ns.fstab.read_text() == SITE_FSTAB and not ns.mount.exists()


def test_a_mount_point_reached_through_a_symlink_is_found_so_a_second_run_changes_nothing(ns):
    # As on a host whose /mnt is a symlink: the mount table shows the resolved path, never the link.
    real = ns.tmp / "real"
    real.mkdir()
    (ns.tmp / "link").symlink_to(real)
    ns.mount = ns.tmp / "link" / "pfs"
    assert ns.module()["changed"]
    mounted = ns.run("findmnt", "-n", "-r", "-o", "SOURCE", "--mountpoint", str(real / "pfs")).stdout.split()
    assert mounted == [SOURCE]
    again = ns.module()
    assert not again["changed"] and not again.get("failed"), again
    assert ns.module(state="absent")["changed"] and not (real / "pfs").exists()
