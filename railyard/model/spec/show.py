"""How a value looks in a problem (a secret is never shown), and did-you-mean hints: the helpers
the parser (load.py) and the cross-field rules (rules.py) both use.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable, TypeGuard

_ABSENT = object()


def _is_secret(value: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict) and set(value) == {"secure"}


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def _show(value: Any) -> str:
    """A value as a person reads it in an error; a secret is never shown."""
    if value is _ABSENT:
        return "nothing (the key is missing)"
    if _is_secret(value):
        return "a secret (not shown)"
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__} ({value})"


def _norm(word: str) -> str:
    return word.lower().replace("_", "").replace("-", "")


def _suggest(word: Any, choices: Iterable[str]) -> str | None:
    """The choice the user most likely meant, or None."""
    if not isinstance(word, str):
        return None
    choices = list(choices)
    for c in choices:
        if _norm(c) == _norm(word):
            return c
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(word.lower(), [c.lower() for c in choices], n=1, cutoff=0.6)
        close = [c for c in choices if close and c.lower() == close[0]]
    return close[0] if close else None


def _one_of(choices: Iterable[Any]) -> str:
    return "one of " + ", ".join(str(c) for c in choices)


def _did_you_mean(word: Any, choices: Iterable[str], prefix: str = "") -> str:
    s = _suggest(word, choices)
    return f"did you mean {prefix}{s}?" if s else ""


def _fmt(x: float) -> str:
    if abs(x) >= 1e9:  # a count typed with too many zeros: its float's every digit is noise
        return f"{x:.3g}"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


# The same helpers for a driver's rules (model.spec.DriverRules), so its problems read like the
# model's own.
show = _show
is_secret = _is_secret
did_you_mean = _did_you_mean
one_of = _one_of
