"""VF settings through mlx5's per-VF sysfs files, the way the lab's SR-IOV agent presents them."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.roles.conftest import make_host, read_json

pytestmark = pytest.mark.roles
USAGE = "usage: write <...>\n"


class FakeMlx5:
    """Applies writes to <pf>/sriov/N/{mac,trust,spoofcheck} to sriov/N/config, as mlx5 (and the
    lab agent) do, and puts the usage line back."""

    def __init__(self, pf_dirs: list[Path], numvfs: int):
        self.dirs = [d / "sriov" / str(i) for d in pf_dirs for i in range(numvfs)]
        for d in self.dirs:
            d.mkdir(parents=True)
            self.cfg = {}
            (d / "config").write_text(self._render({"MAC": "00:00:00:00:00:00", "SpoofCheck": "OFF", "Trust": "OFF"}))
            for name in ("mac", "trust", "spoofcheck"):
                (d / name).write_text(USAGE)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _render(cfg: dict) -> str:
        return "".join(f"{k:<11}: {v}\n" for k, v in cfg.items())

    def _run(self):
        keys = {"mac": "MAC", "trust": "Trust", "spoofcheck": "SpoofCheck"}
        while not self.stop.is_set():
            for d in self.dirs:
                for name, key in keys.items():
                    text = (d / name).read_text()
                    if text != USAGE and text.strip():
                        cfg = dict(line.split(": ", 1) for line in (d / "config").read_text().splitlines())
                        cfg = {k.strip(): v for k, v in cfg.items()}
                        cfg[key] = text.strip()
                        (d / "config").write_text(self._render(cfg))
                        (d / name).write_text(USAGE)
            time.sleep(0.05)


def test_vf_settings_go_through_mlx5_sysfs_files_when_the_pf_offers_them(tmp_path, s3):
    host = make_host("vela-a100", tmp_path / "v", s3.url)
    manifest = read_json(host.hw / "railyard-hwtree.json")
    pfs = host.vars["sriov_pfs"]
    dirs = [(host.hw / "sys/bus/pci/devices" / manifest["bus_ids"][pf["name"]]).resolve() for pf in pfs]
    fake = FakeMlx5(dirs, pfs[0]["numvfs"])
    fake.thread.start()
    try:
        first = host.run(tags="sriov")
        assert first.rc == 0, first.failed_tasks()
        again = host.run(tags="sriov")
        assert again.rc == 0 and again.changed() == 0, again.changed_tasks()
    finally:
        fake.stop.set()
        fake.thread.join()
    for pf, d in zip(pfs, dirs):
        for vf in pf["vfs"]:
            config = (d / "sriov" / str(vf["index"]) / "config").read_text()
            assert f"MAC        : {vf['mac']}" in config and "SpoofCheck : ON" in config and "Trust      : OFF" in config
    assert not (host.root / "ip/ip-state.json").exists(), "ip was not used where sysfs offers the settings"
