"""The readers of a driver's own section (`railyard:<driver>`), shared by the drivers' rules so that
their problems read as the spec's do (drivers may not import one another, so this lives with the
model, on the one config reader, reader.ConfigReader).

Pulumi-free. A driver subclasses SectionReader for its own forms (a jump host, a segment, a BMC)
and says which of its keys may be secrets.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal, Mapping

from railyard.model.spec.reader import ConfigReader
from railyard.model.spec.show import _is_secret, _show
from railyard.model.spec.types import Secret

# A login name: no whitespace, no ':' and never a leading '-' (it would read as an ssh option).
LOGIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\$?$")
# sshKey's value for the key ssh-agent holds, instead of a secret private key.
SSH_AGENT: Final = "agent"


class SectionReader(ConfigReader):
    """A driver section's reader: the config reader's, with the forms several drivers share (a
    login name, a required secret, an SSH key). `secret_hint` says which of the section's keys may
    be secrets (each driver has its own)."""

    def user(self, m: Mapping, key: str, path: str) -> str | None:
        """A login name (LOGIN_NAME)."""
        allowed = "a login name: letters, digits, '_', '.', '-', '@', not starting with '-'"
        value = self.string(m, key, path, allowed)
        if value is not None and not LOGIN_NAME.match(value):
            self.problem(path, _show(value), allowed)
            return None
        return value

    def secret(self, raw: Any, path: str, allowed: str, set_it: str, leaked: str) -> Secret | None:
        """A required Pulumi secret. A plain value is refused and never echoed: it may be the
        credential itself, written in the clear (`leaked` says what to do about that)."""
        if _is_secret(raw):
            if not isinstance(raw["secure"], str) or not raw["secure"]:
                self.problem(path, "a secret with no ciphertext", allowed, set_it)
                return None
            return Secret(raw["secure"])
        if raw is None or raw == "":
            self.missing(path, allowed, set_it)
        elif isinstance(raw, str):
            self.problem(path, "a plain-text value (not shown)", allowed, f"{set_it}; {leaked}")
        else:
            self.problem(path, _show(raw), allowed, set_it)
        return None

    def ssh_key(self, m: Mapping, section: str) -> Secret | Literal["agent"] | None:
        """`railyard:<section>.sshKey`: the private key as a Pulumi secret, or SSH_AGENT."""
        path = f"railyard:{section}.sshKey"
        allowed = f"a Pulumi secret (the private key), or {SSH_AGENT!r} (the key ssh-agent holds)"
        set_it = f"pulumi config set --secret --path {section}.sshKey < ~/.ssh/id_ed25519, or sshKey: {SSH_AGENT}"
        raw = m.get("sshKey")
        if raw == SSH_AGENT:
            return SSH_AGENT
        if isinstance(raw, str) and raw.strip().lower() in ("ssh-agent", "agent", "sshagent"):
            self.problem(path, _show(raw), allowed, f"write {SSH_AGENT}")
            return None
        return self.secret(raw, path, allowed, set_it, "if it was a private key, replace it: it was written in the clear")
