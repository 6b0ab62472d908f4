"""Running the model's own Python on a host over SSH, without copying a file there.

The host runs `python3 -I -` and reads one program on stdin: the sources of the modules it needs,
an importer that serves them from memory, and a call of the entry point, whose JSON answer is
the last line of stdout. So discovery uses the very code the controller tests (one sysfs
discovery implementation), needs only the standard library on the host, and leaves nothing
behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import railyard

from railyard.drivers.hosts.ssh import Result, SshError, Target, run

ROOT = Path(railyard.__file__).resolve().parent.parent

_LOADER = '''
import importlib.abc, importlib.util, json, sys

class _Memory(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in SOURCES:
            return importlib.util.spec_from_loader(name, self, is_package=name in PACKAGES)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        if module.__name__ in PACKAGES:
            module.__path__ = []
        exec(compile(SOURCES[module.__name__], "<railyard:" + module.__name__ + ">", "exec"), module.__dict__)

sys.meta_path.insert(0, _Memory())
_module, _, _func = ENTRY.partition(":")
_answer = getattr(importlib.import_module(_module), _func)(*ARGS)
sys.stdout.write("\\n" + json.dumps(_answer) + "\\n")
'''


def _source(module: str) -> tuple[str, bool]:
    base = ROOT.joinpath(*module.split("."))
    if (base / "__init__.py").is_file():
        return (base / "__init__.py").read_text(), True
    return base.with_suffix(".py").read_text(), False


def program(modules: list[str], entry: str, args: list[Any] = ()) -> str:
    """The program a host runs: `modules` (their packages added) served from memory, then
    `entry` ("module:function") called with `args`, its JSON answer printed last."""
    wanted: list[str] = []
    for module in modules:
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name not in wanted:
                wanted.append(name)
    sources, packages = {}, []
    for name in wanted:
        sources[name], is_package = _source(name)
        if is_package:
            packages.append(name)
    return (f"SOURCES = {sources!r}\nPACKAGES = {packages!r}\nENTRY = {entry!r}\nARGS = {list(args)!r}\n"
            + _LOADER)


def call(target: Target, modules: list[str], entry: str, args: list[Any] = (), *, private_key: str | None,
         timeout: float = 120) -> tuple[Any, Result]:
    """Run `entry` on the host; (its answer, the SSH result). A failing program is an SshError
    naming the host and the program's last error line."""
    result = run(target, ["python3", "-I", "-"], private_key=private_key, input=program(modules, entry, args),
                 timeout=timeout)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if result.rc != 0 or not lines:
        err = [line for line in result.stderr.splitlines() if line.strip()]
        raise SshError(f"{target.name}: {entry} failed on {target.address} (exit {result.rc}): "
                       f"{err[-1] if err else 'no output'}")
    try:
        return json.loads(lines[-1]), result
    except ValueError:
        raise SshError(f"{target.name}: {entry} on {target.address} printed no JSON answer") from None
