"""Where a cache or a parallel file system may be mounted (issue 38): the rule the stack's
validation and the host's check share, tested as the one function both call."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from railyard.model import mount_points
from railyard.model.mount_points import mount_at, mounts, path_problem, resolved_problem, system_dir

ROOT = Path(__file__).resolve().parents[3]

REFUSED = {
    "/": "root file system",
    "/etc": "/etc is a directory the operating system lives in",
    "/etc/railyard": "/etc is",
    "/usr/local": "/usr is",
    "/boot": "/boot is",
    "/boot/efi": "/boot is",
    "/efi": "/efi is",
    "/var": "/var is",
    "/var/lib": "/var is",
    "/var/lib/docker": "/var is",
    "/proc/sys": "/proc is",
    "/sys/fs/cgroup": "/sys is",
    "/dev/shm": "/dev is",
    "/run/cache": "/run is",
    "/bin": "/bin is",
    "/sbin": "/sbin is",
    "/lib": "/lib is",
    "/lib64/cache": "/lib64 is",
    "/lib32": "/lib32 is",
    "/libx32": "/libx32 is",
    "/opt/cache": "/opt is",
    "/home": "/home is",
    "/home/alice/cache": "/home is",
    "/root": "/root is",
    "/mnt/../etc": "it means /etc, and /etc is",
    "/mnt/cache/../../usr/local": "it means /usr/local, and /usr is",
    "/mnt//cache": "it means /mnt/cache; write that",
    "//mnt/cache": "it means /mnt/cache; write that",
    "/mnt/cache/.": "it means /mnt/cache; write that",
    "/mnt/./cache": "it means /mnt/cache; write that",
    "/mnt/cache/": "it means /mnt/cache; write that",
    "mnt/cache": "a relative path",
    "./cache": "a relative path",
    "/mnt/my cache": "whitespace",
    "/mnt/cache\n": "whitespace",
}

ALLOWED = ["/mnt", "/mnt/cache", "/mnt/pfs", "/srv/pfs", "/srv", "/scratch", "/data", "/lustre", "/raid",
           "/media/cache", "/tmp/cache", "/library", "/varnish", "/etcd-data", "/users/cache"]


@pytest.mark.parametrize("path", sorted(REFUSED))
def test_a_system_directory_or_a_path_not_in_normal_form_is_refused_saying_why(path):
    why = path_problem(path)
    assert why is not None and REFUSED[path] in why, why


@pytest.mark.parametrize("path", ALLOWED)
def test_mnt_srv_and_new_top_level_directories_are_allowed(path):
    assert path_problem(path) is None


def test_a_prefix_is_a_whole_path_component_not_a_string_prefix():
    assert system_dir("/library") is None and system_dir("/varnish") is None
    assert system_dir("/lib/x") == "/lib" and system_dir("/var") == "/var"


@pytest.mark.parametrize("path, resolved", [("/mnt/cache", "/var/mnt/cache"), ("/srv/pfs", "/var/srv/pfs"),
                                            ("/mnt", "/var/mnt")])
def test_on_ostree_hosts_mnt_and_srv_resolving_into_var_are_still_allowed(path, resolved):
    assert resolved_problem(path, resolved) is None


@pytest.mark.parametrize("path, resolved, names", [
    ("/mnt/cache", "/etc/cache", "resolves it to /etc/cache, and /etc is"),
    ("/scratch", "/var/lib/scratch", "resolves it to /var/lib/scratch, and /var is"),
    ("/mnt/cache", "/var/lib/cache", "and /var is"),  # /var/mnt is the one exception, not /var
    ("/data/cache", "/var/mnt/cache", "and /var is"),  # and only for what the stack put under /mnt
    ("/mnt/cache", "/", "and / is the root file system"),
])
def test_a_path_the_host_resolves_into_a_system_directory_is_refused(path, resolved, names):
    why = resolved_problem(path, resolved)
    assert why is not None and names in why, why


def test_the_written_path_is_still_judged_when_the_host_resolves_it_elsewhere():
    assert "/etc is" in resolved_problem("/etc/x", "/mnt/x")


def test_the_mount_table_is_read_unescaped_and_the_topmost_mount_wins(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "40 22 0:40 / /mnt/my\\040cache rw - tmpfs site\\040scratch rw\n"
        "41 40 259:3 / /mnt/my\\040cache rw - xfs /dev/nvme2n1 rw\n")
    assert [m["path"] for m in mounts(str(info))] == ["/", "/mnt/my cache", "/mnt/my cache"]
    assert mount_at("/mnt/my cache", str(info)) == {"dev": "259:3", "path": "/mnt/my cache", "fstype": "xfs",
                                                     "source": "/dev/nvme2n1"}
    assert mount_at("/mnt/other", str(info)) is None


def _module():
    path = ROOT / "playbooks/library/railyard_mount_point.py"
    spec = importlib.util.spec_from_file_location("railyard_mount_point", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_mount_is_railyards_only_when_it_is_of_the_device_the_cache_was_made_on(tmp_path):
    # /dev/null stands for the cache's device: the mount table names a device by its number.
    null = os.stat("/dev/null").st_rdev
    info = tmp_path / "mountinfo"
    info.write_text(f"41 22 {os.major(null)}:{os.minor(null)} / /mnt/cache rw - xfs /dev/md127 rw\n")
    foreign = _module().foreign_mount
    assert foreign("/mnt/cache", "/dev/null", str(info)) is None
    assert foreign("/mnt/cache", "", str(info)) == "/dev/md127 (xfs)"
    assert foreign("/mnt/cache", "/dev/zero", str(info)) == "/dev/md127 (xfs)"
    assert foreign("/mnt/cache", str(tmp_path / "md" / "railyard-cache"), str(info)) == "/dev/md127 (xfs)"
    assert foreign("/mnt/free", "", str(info)) is None


def test_the_hosts_check_ships_the_same_rule_as_module_utils():
    link = ROOT / "playbooks/module_utils/railyard_mount_points.py"
    assert link.is_symlink() and link.resolve() == Path(mount_points.__file__).resolve()
