"""Suite-wide: the tiers run cheapest first (pyproject's testpaths: unit, roles, engine, lab), so a
broken model fails in seconds, and `make test` says which tier it is in."""

from __future__ import annotations

import pytest

_TIERS = {"unit": "unit (the model, commands, drivers under mocks)", "roles": "roles (Ansible against hardware trees)",
          "engine": "engine (the real Pulumi engine)", "lab": "lab (namespaces, SSH, the real engine end to end)"}
_current: list[str] = []


@pytest.hookimpl(trylast=True)
def pytest_runtest_logstart(nodeid: str, location) -> None:
    tier = nodeid.split("/")[1] if nodeid.startswith("tests/") and nodeid.count("/") > 1 else ""
    if tier in _TIERS and _current != [tier]:
        _current[:] = [tier]
        reporter = _reporter()
        if reporter is not None:
            reporter.write("\n")  # after the previous tier's dots
            reporter.write_line(f"tier: {_TIERS[tier]}", bold=True)


_config: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _config[:] = [config]


def _reporter():
    return _config[0].pluginmanager.get_plugin("terminalreporter") if _config else None
