"""The readers of a driver's own section (`railyard:<driver>`), shared by the drivers' rules so that
their problems read alike (drivers may not import one another, so this lives with the model).

Pulumi-free. A driver subclasses SectionReader for its own forms (a jump host, a segment, a BMC)
and says which of its keys may be secrets; every reader here returns None (or the default it is
given) and records why when a value cannot be used, so a stack's problems come all at once.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal, Mapping, Sequence

from railyard.model.errors import Problem
from railyard.model.spec.show import _did_you_mean, _is_secret, _one_of, _show
from railyard.model.spec.types import Secret

# A login name: no whitespace, no ':' and never a leading '-' (it would read as an ssh option).
LOGIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\$?$")
# sshKey's value for the key ssh-agent holds, instead of a secret private key.
SSH_AGENT: Final = "agent"


class SectionReader:
    """A driver section's problems, and the readers that record them."""

    def __init__(self, secret_hint: str) -> None:
        self.problems: list[Problem] = []
        self.secret_hint = secret_hint
        """The hint of a secret given where a plain value belongs: which keys of the section may be
        secrets (each driver has its own)."""

    def problem(self, path: str, found: str, allowed: str, hint: str = "") -> None:
        self.problems.append(Problem(path, found, allowed, hint))

    def missing(self, path: str, allowed: str, hint: str = "") -> None:
        hint = "this key is required" + (f": {hint}" if hint else "")
        self.problem(path, "nothing (the key is missing)", allowed, hint)

    def mapping(self, value: Any, path: str, keys: Sequence[str] | None) -> dict | None:
        """A mapping, its keys checked against `keys` (None: any keys); absent: {}."""
        if value is None:
            return {}
        if _is_secret(value) or not isinstance(value, dict):
            self.problem(path, _show(value), f"a mapping with keys {', '.join(keys)}" if keys else "a mapping")
            return None
        for key in value:
            if keys is not None and key not in keys:
                self.problem(f"{path}.{key}", "an unknown key", _one_of(keys), _did_you_mean(key, keys))
        return value

    def plain(self, m: Mapping, key: str, path: str, allowed: str, required: bool = False, hint: str = "") -> Any:
        """The value under key (None when absent or empty); a secret is refused unshown, and a
        required key that is absent is told (with `hint`)."""
        value = m.get(key)
        if _is_secret(value):
            self.problem(path, _show(value), allowed, self.secret_hint)
            return None
        if value is None and required:
            self.missing(path, allowed, hint)
        return value

    def string(self, m: Mapping, key: str, path: str, allowed: str, pattern: re.Pattern | None = None, *,
               required: bool = False, hint: str = "") -> str | None:
        """A non-empty string (matching `pattern` where there is one), stripped."""
        value = self.plain(m, key, path, allowed, required, hint)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip() or (pattern is not None and not pattern.match(value.strip())):
            self.problem(path, _show(value), allowed)
            return None
        return value.strip()

    def integer(self, m: Mapping, key: str, path: str, lo: int, hi: int | None = None) -> int | None:
        allowed = f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")
        value = self.plain(m, key, path, allowed)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
            hint = "write the number without quotes" if isinstance(value, str) and value.strip().isdigit() else ""
            self.problem(path, _show(value), allowed, hint)
            return None
        return value

    def boolean(self, m: Mapping, key: str, path: str, default: bool) -> bool:
        value = self.plain(m, key, path, "true or false")
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problem(path, _show(value), "true or false")
            return default
        return value

    def choice(self, m: Mapping, key: str, path: str, choices: Sequence[str], default: str) -> str | None:
        """One of `choices`; absent: `default`."""
        value = self.plain(m, key, path, _one_of(choices))
        if value is None:
            return default
        if value not in choices:
            self.problem(path, _show(value), _one_of(choices), _did_you_mean(value, choices))
            return None
        return value

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
