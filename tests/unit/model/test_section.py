"""The readers every driver's section shares (railyard.model.spec.SectionReader): each records
why a value cannot be used, in the model's wording, and never shows a secret."""

from __future__ import annotations

import re

from railyard.model.spec import SectionReader

P = "railyard:x"


def reader() -> SectionReader:
    return SectionReader(f"only {P}.token may be a secret here")


def test_a_secret_where_a_plain_value_belongs_is_refused_unshown_with_the_drivers_hint():
    r = reader()
    assert r.string({"name": {"secure": "v1:CIPHER"}}, "name", f"{P}.name", "a name", required=True) is None
    (problem,) = r.problems
    assert (problem.found, problem.hint) == ("a secret (not shown)", f"only {P}.token may be a secret here")
    assert "CIPHER" not in str(problem)


def test_a_required_key_is_told_missing_once_with_why():
    r = reader()
    assert r.string({}, "image", f"{P}.image", "an image", required=True, hint="what servers boot") is None
    assert [(p.path, p.found, p.hint) for p in r.problems] == [
        (f"{P}.image", "nothing (the key is missing)", "this key is required: what servers boot")]


def test_mappings_numbers_choices_and_login_names():
    r = reader()
    assert r.mapping({"a": 1, "bb": 2}, P, ("a", "b")) == {"a": 1, "bb": 2}
    assert r.mapping({"anything": 1}, P, None) == {"anything": 1}
    assert r.mapping("text", P, None) is None
    assert r.integer({"n": "8"}, "n", f"{P}.n", 1, 4) is None
    assert r.integer({"n": 3}, "n", f"{P}.n", 1, 4) == 3
    assert r.boolean({}, "b", f"{P}.b", True) is True and r.boolean({"b": "yes"}, "b", f"{P}.b", False) is False
    assert r.choice({}, "c", f"{P}.c", ("prefer", "isolate"), "prefer") == "prefer"
    assert r.choice({"c": "isolated"}, "c", f"{P}.c", ("prefer", "isolate"), "prefer") is None
    assert r.user({"u": "-oProxyCommand=x"}, "u", f"{P}.u") is None
    assert r.string({"z": "us-east"}, "z", f"{P}.z", "upper case", re.compile(r"^[A-Z-]+$")) is None
    assert [(p.path, p.found, p.allowed, p.hint) for p in r.problems] == [
        (f"{P}.bb", "an unknown key", "one of a, b", "did you mean b?"),
        (P, "'text'", "a mapping", ""),
        (f"{P}.n", "'8'", "an integer >= 1 and <= 4", "write the number without quotes"),
        (f"{P}.b", "'yes'", "true or false", ""),
        (f"{P}.c", "'isolated'", "one of prefer, isolate", "did you mean isolate?"),
        (f"{P}.u", "'-oProxyCommand=x'", "a login name: letters, digits, '_', '.', '-', '@', not starting with '-'",
         ""),
        (f"{P}.z", "'us-east'", "upper case", ""),
    ]
