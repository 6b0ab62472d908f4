"""`railyard env`: the shell exports that let a user run plain `pulumi` commands in the project."""

from __future__ import annotations

import os
import shlex

from railyard import paths
from railyard.engine.toolchain import engine_settings


def register(sub) -> None:
    p = sub.add_parser("env", help="print shell exports for running plain pulumi in this project",
                       description="Print shell exports; use as: eval \"$(railyard env)\"")
    p.set_defaults(func=handle)


def handle(args) -> int:
    root = paths.project_root()
    settings = engine_settings(root, dict(os.environ))
    print("# Railyard engine environment; eval \"$(.venv/bin/railyard env)\"")
    for key in sorted(settings):
        value = settings[key]
        if key == "PULUMI_CONFIG_PASSPHRASE":
            # Keep whatever the user already exported; lab stacks use the empty passphrase.
            print('export PULUMI_CONFIG_PASSPHRASE="${PULUMI_CONFIG_PASSPHRASE-}"')
            continue
        if key == "PATH":
            prefix = f"{paths.bin_dir(root)}{os.pathsep}{root / '.venv' / 'bin'}"
            print(f'export PATH={shlex.quote(prefix)}:"$PATH"')
            continue
        print(f"export {key}={shlex.quote(value)}")
    return 0
