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
    assert r.integer({"n": "8"}, "n", f"{P}.n", minimum=1, maximum=4) is None
    assert r.integer({"n": 3}, "n", f"{P}.n", minimum=1, maximum=4) == 3
    assert r.boolean({}, "b", f"{P}.b", default=True) is True
    assert r.boolean({"b": "yes"}, "b", f"{P}.b", default=False) is None
    assert r.choice({}, "c", f"{P}.c", ("prefer", "isolate"), default="prefer") == "prefer"
    assert r.choice({"c": "isolated"}, "c", f"{P}.c", ("prefer", "isolate"), default="prefer") is None
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


def test_the_spec_and_every_drivers_section_read_values_by_one_grammar():
    """An empty key, a number in quotes, a bare on/off and a blank string read the same in the
    spec's sections as in a driver's: both parsers are the one ConfigReader."""
    from railyard.model.spec.load import _Parser
    from railyard.model.spec.reader import ConfigReader

    assert issubclass(_Parser, ConfigReader) and issubclass(SectionReader, ConfigReader)
    spec, section = _Parser(None, {}), reader()
    for r in (spec, section):
        assert r.integer({"n": None}, "n", "n", default=4) == 4  # left empty in YAML: absent
        assert r.string({"s": ""}, "s", "s", "a name", default="x") is None
        assert r.integer({"n": "8"}, "n", "n") is None
        assert r.integer({"n": 8.0}, "n", "n") is None
        assert r.choice({"c": False}, "c", "c", ("on", "off")) == "off"
        assert r.string({"s": "  "}, "s", "s", "a name") is None
        assert r.string({"s": " gpu "}, "s", "s", "a name") == "gpu"
    assert [(p.found, p.allowed, p.hint) for p in spec.problems] == \
        [(p.found, p.allowed, p.hint) for p in section.problems] == [
            ("''", "a name", "leave the key out for its default"),
            ("'8'", "an integer >= 1", "write the number without quotes"),
            ("8.0", "an integer >= 1", "write 8"),
            ("'  '", "a name", ""),
        ]
