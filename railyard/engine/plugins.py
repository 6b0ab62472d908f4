"""The provider plugins a driver's resources need, and whether this checkout's PULUMI_HOME has them.

A driver's Python SDK names its plugin in the pulumi-plugin.json it ships (name, version, and the
server to fetch it from where that is not Pulumi's default). The engine runs with automatic plugin
acquisition off (railyard.engine.toolchain), so a missing plugin would otherwise surface half-way
through a preview as the engine's own error; Railyard says it before the engine starts, with the
command that installs it on a machine with internet.

The CoreWeave and OpenStack plugins cannot be built here: the Go module proxy refuses every version
of their provider modules. Their drivers are checked under Pulumi mocks and mypy instead (README).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from railyard import paths


@dataclass(frozen=True)
class Plugin:
    name: str
    version: str
    server: str | None
    sdk: str
    """The Python package that declares it (pulumi_coreweave)."""

    @property
    def directory(self) -> str:
        """Its folder in PULUMI_HOME/plugins, as the engine names it."""
        return f"resource-{self.name}-v{self.version}"

    def install_command(self) -> str:
        server = f" --server {self.server}" if self.server else ""
        return f"pulumi plugin install resource {self.name} v{self.version}{server}"


def declared(sdk: str) -> Plugin:
    """The plugin the installed SDK package `sdk` declares, read without importing the SDK (the
    large ones take seconds to import)."""
    found = importlib.util.find_spec(sdk)
    if found is None or not found.submodule_search_locations:
        raise LookupError(f"the Python package {sdk} is not installed in this virtualenv; `make setup` installs it "
                          "(pyproject.toml pins it)")
    meta = json.loads((Path(list(found.submodule_search_locations)[0]) / "pulumi-plugin.json").read_text())
    return Plugin(name=meta["name"], version=meta["version"].lstrip("v"), server=meta.get("server"), sdk=sdk)


def installed(plugin: Plugin, root: Path | None = None) -> bool:
    binary = paths.pulumi_home(root) / "plugins" / plugin.directory / f"pulumi-resource-{plugin.name}"
    return binary.is_file()


def missing(sdks: tuple[str, ...], root: Path | None = None) -> list[Plugin]:
    return [p for p in (declared(s) for s in sdks) if not installed(p, root)]


def missing_message(driver: str, sdks: tuple[str, ...], root: Path | None = None) -> str | None:
    """Why `up` or `preview` of a stack on `driver` cannot start here, naming each absent plugin and
    the command that installs it; None when every plugin is in place."""
    absent = missing(sdks, root)
    if not absent:
        return None
    home = paths.pulumi_home(root)
    names = ", ".join(f"{p.name} v{p.version}" for p in absent)
    commands = "; ".join(f"PULUMI_HOME={home} {p.install_command()}" for p in absent)
    return (f"railyard:driver {driver} needs the Pulumi resource plugin {names}, which is not installed in "
            f"{home}/plugins. On a machine with internet access, install it with: {commands} (`railyard plugins "
            "--install` runs it). That command was "
            "not run here: this machine reaches no plugin server, and the Go module proxy refuses the provider's "
            "module, so the plugin cannot be built either. Nothing was changed.")
