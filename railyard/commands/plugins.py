"""`railyard plugins`: the provider plugins each driver needs, whether this checkout has them, and,
on a machine with internet access, `--install` to fetch the missing ones (the region drivers'
plugins cannot be built from the Go module proxy; railyard.engine.plugins)."""

from __future__ import annotations

import os
import subprocess
import sys

from railyard import drivers, paths
from railyard.engine import plugins


def register(sub) -> None:
    p = sub.add_parser("plugins", help="list the drivers' provider plugins; --install fetches missing ones",
                       description="List each driver's provider plugins and whether they are installed in "
                                   ".railyard/pulumi-home. --install runs `pulumi plugin install` for the missing "
                                   "ones: only on a machine with internet access (it is never run otherwise).")
    p.add_argument("--install", action="store_true", help="install the missing plugins (needs internet access)")
    p.set_defaults(func=handle)


def handle(args) -> int:
    root = paths.project_root()
    missing: list[plugins.Plugin] = []
    for name, entry in drivers.DRIVERS.items():
        for sdk in entry.plugins:
            p = plugins.declared(sdk)
            there = plugins.installed(p, root)
            print(f"{name:10} {p.name} v{p.version}: {'installed' if there else 'missing'}")
            if not there and p not in missing:
                missing.append(p)
    if not args.install or not missing:
        return 0
    env = {**os.environ, "PULUMI_HOME": str(paths.pulumi_home(root))}
    for p in missing:
        argv = [str(paths.bin_dir(root) / "pulumi"), *p.install_command().split()[1:]]
        print(f"railyard plugins: {' '.join(argv[1:])}", file=sys.stderr)
        if subprocess.run(argv, env=env, check=False).returncode != 0:
            print(f"railyard plugins: installing {p.name} v{p.version} failed (it needs internet access)",
                  file=sys.stderr)
            return 1
    return 0
