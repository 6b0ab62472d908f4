"""The one reader of config: the spec's sections (load._Parser) and every driver's own section
(section.SectionReader) read values through it, so an absent key, an empty value, a secret where a
plain value belongs, YAML's bare on/off and a number written in quotes mean the same everywhere and
are told the same way.

Pulumi-free. Each reader returns None (or the default it is given) and records why when a value
cannot be used, so a stack's problems come all at once.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

from railyard.model.errors import Problem
from railyard.model.spec.show import _ABSENT, _did_you_mean, _is_secret, _one_of, _show


class ConfigReader:
    """A config's problems, and the readers that record them."""

    def __init__(self, secret_hint: str) -> None:
        self.problems: list[Problem] = []
        self.secret_hint = secret_hint
        """Told where a secret is given for a plain value: which keys may be secrets here."""

    # --- recording ---------------------------------------------------------------------------

    def problem(self, path: str, found: str, allowed: str, hint: str = "") -> None:
        self.problems.append(Problem(path, found, allowed, hint))

    def missing(self, path: str, allowed: str, hint: str = "") -> None:
        self.problem(path, _show(_ABSENT), allowed, "this key is required" + (f": {hint}" if hint else ""))

    # --- readers -----------------------------------------------------------------------------

    def mapping(self, value: Any, path: str, keys: Sequence[str] | None) -> dict | None:
        """A mapping whose keys are all in `keys` (None: any keys); absent or empty: {}."""
        if value is None or value is _ABSENT:
            return {}
        if _is_secret(value):
            self.problem(path, _show(value), "a mapping", self.secret_hint)
            return None
        if not isinstance(value, dict):
            self.problem(path, _show(value), f"a mapping with keys {', '.join(keys)}" if keys else "a mapping")
            return None
        for key in value:
            if keys is not None and key not in keys:
                self.problem(f"{path}.{key}", "an unknown key", _one_of(keys), _did_you_mean(key, keys))
        return value

    def raw(self, m: Mapping | None, key: str, path: str, *, required: bool, what: str, hint: str = "") -> Any:
        """The value under key, or _ABSENT: a key that is missing or left empty in YAML (null) is
        absent. A required key that is absent is told (with `hint`); a secret is refused unshown.
        An empty string is a value, which string() refuses: callers tell a key given from one left
        out by `key in m`, so "" must not pass as absent and unchecked."""
        value = m.get(key, _ABSENT) if m is not None else _ABSENT
        if value is None:
            value = _ABSENT
        if value is _ABSENT and required:
            self.missing(path, what, hint)
        if _is_secret(value):
            self.problem(path, _show(value), what, self.secret_hint)
            return None
        return value

    def plain(self, m: Mapping | None, key: str, path: str, what: str, required: bool = False,
              hint: str = "") -> Any:
        """The value under key, None when absent (raw's, for readers that check the value themselves)."""
        value = self.raw(m, key, path, required=required, what=what, hint=hint)
        return None if value is _ABSENT else value

    def integer(self, m: Mapping | None, key: str, path: str, *, default: int | None = None, minimum: int = 1,
                maximum: int | None = None, required: bool = False) -> int | None:
        allowed = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        value = self.raw(m, key, path, required=required, what=allowed)
        if value is _ABSENT:
            return None if required else default
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            hint = ""
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                hint = "write the number without quotes"
            # Not for a float past what the key takes: "write 1000000000" would only lead to the next refusal.
            elif isinstance(value, float) and value.is_integer() and minimum <= value <= (maximum or 10 ** 6):
                hint = f"write {int(value)}"
            self.problem(path, _show(value), allowed, hint)
            return None
        if value < minimum or (maximum is not None and value > maximum):
            self.problem(path, _show(value), allowed)
            return None
        return value

    def fraction(self, m: Mapping | None, key: str, path: str, *, default: float | None, example: str,
                 hint: str = "") -> float | None:
        """A number strictly between 0 and 1 (a tolerance): None where absent and no default, or refused."""
        allowed = f"a fraction between 0 and 1, e.g. {example}"
        value = self.raw(m, key, path, required=False, what=allowed)
        if value is _ABSENT:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            self.problem(path, _show(value), allowed, hint)
            return None
        return float(value)

    def number(self, m: Mapping | None, key: str, path: str, *, default: float | None) -> float | None:
        allowed = "a number > 0"
        value = self.raw(m, key, path, required=False, what=allowed)
        if value is _ABSENT:
            return default
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
            self.problem(path, _show(value), allowed)
            return None
        return value

    def boolean(self, m: Mapping | None, key: str, path: str, *, default: bool) -> bool | None:
        value = self.raw(m, key, path, required=False, what="true or false")
        if value is _ABSENT:
            return default
        if value is None:
            return None
        if not isinstance(value, bool):
            self.problem(path, _show(value), "true or false")
            return None
        return value

    def string(self, m: Mapping | None, key: str, path: str, what: str = "a string",
               pattern: re.Pattern | None = None, *, default: str | None = None, required: bool = False,
               hint: str = "") -> str | None:
        """A string, stripped (matching `pattern` where there is one); an empty one, or one of only
        whitespace, is refused, as no key takes one (leaving the key out gives its default)."""
        value = self.raw(m, key, path, required=required, what=what, hint=hint)
        if value is _ABSENT:
            return None if required else default
        if value is None:
            return None
        if isinstance(value, str) and not value.strip():
            self.problem(path, _show(value), what, "leave the key out for its default" if default is not None else "")
            return None
        if not isinstance(value, str) or (pattern is not None and not pattern.match(value.strip())):
            self.problem(path, _show(value), what)
            return None
        return value.strip()

    def choice(self, m: Mapping | None, key: str, path: str, choices: Sequence[str], *, default: str | None = None,
               required: bool = False) -> str | None:
        value = self.raw(m, key, path, required=required, what=_one_of(choices))
        if value is _ABSENT:
            return None if required else default
        if value is None:
            return None
        if isinstance(value, bool) and "on" in choices and "off" in choices:
            # YAML 1.1 reads a bare on/off as a boolean; take what the user wrote.
            value = "on" if value else "off"
        if value not in choices:
            self.problem(path, _show(value), _one_of(choices), _did_you_mean(value, choices))
            return None
        return value
