"""hooks.md §6.3: the template language, by example and by property."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookgate.hooks.templates import TemplateContext, iso_now, lookup, render, segments, to_text

NOW = 1795350896789  # 2026-11-22T…Z


def ctx(payload: Any = None, headers: dict[str, str] | None = None, query: dict[str, str] | None = None,
        path: str = "mapped/") -> TemplateContext:
    return TemplateContext({} if payload is None else payload, headers or {}, query or {}, path, NOW)


def r(template: str, payload: Any = None, **kw: Any) -> str:
    return render(template, ctx(payload, **kw))


def test_roots() -> None:
    c = ctx({"path": "body-path", "now": "body-now", "a": {"b": "x"}},
            headers={"x-foo": "bar, baz"}, query={"q": "v"})
    assert render("{{path}}|{{now}}", c) == f"mapped/|{iso_now(NOW)}"
    assert iso_now(NOW).endswith("Z") and len(iso_now(NOW)) == len("2026-11-22T12:34:56.789Z")
    assert iso_now(1_000) == "1970-01-01T00:00:01.000Z"
    assert render("{{headers.X-Foo}} {{ query.q }} {{payload.a.b}} {{a.b}}", c) == "bar, baz v x x"
    assert render("{{payload.path}} {{query.Q}} {{headers.missing}}", c) == "body-path  "


def test_placeholder_syntax_and_literals() -> None:
    p = {"a": "A"}
    assert r("x {{a}} y {{  a  }} z", p) == "x A y A z"
    assert r("{a} {{}} {{ a } }}", p) == "{a} {{}} {{ a } }}"
    assert r("{{{a}}}", p) == "}"  # expression "{a" is a missing key; the last "}" is literal
    assert r("no placeholders", p) == "no placeholders"


def test_paths_and_indexes() -> None:
    p = {"items": [{"id": "i0"}, {"id": "i1"}], "m": {"0": "zero"}, "messages": [{"id": "m0"}]}
    assert r("{{items.1.id}} {{items[0].id}} {{messages[0].id}}", p) == "i1 i0 m0"
    assert r("{{items[-1].id}}|{{items.-1}}|{{items[5]}}|{{items.x}}", p) == "|||"
    assert r("{{m[0]}}|{{m.0}}", p) == "|zero"  # an index on an object yields nothing
    assert r("{{items..1...id}}", p) == "i1"  # empty segments are skipped
    assert r("{{[1].id}}", [{"id": "a"}, {"id": "b"}]) == "b"
    assert segments("a[0].b[x]..c[12]") == ["a", 0, "b", "x", "c", 12]


@pytest.mark.parametrize("digits", [19, 4_301, 5_000])
def test_an_index_of_many_digits_is_past_the_end(digits: int) -> None:
    """More than 4 300 digits is more than ``int()`` converts from text: such a template was a 500."""
    p = {"items": [1, 2], "m": {"9" * digits: "kept"}}
    assert r("x{{items[" + "9" * digits + "]}}|{{items." + "9" * digits + "}}|{{m." + "9" * digits + "}}", p) \
        == "x||kept"
    assert r("{{items[" + "0" * digits + "1]}}", p) == ""


@pytest.mark.parametrize("expr", ["__proto__", "constructor.name", "items.length", "toString", "__class__",
                                  "items.__len__", "a.__class__.__name__", "keys", "items.append", "a.upper",
                                  "__dict__", "items.count"])
def test_no_language_attributes(expr: str) -> None:
    assert r("{{" + expr + "}}", {"items": [1, 2], "a": "s"}) == ""


def test_value_rendering() -> None:
    p = {"n": None, "t": True, "f": False, "i": 42, "neg": -7, "x": 2.0, "y": 1.5, "big": 1e16, "tiny": 1e-7,
         "o": {"b": 1, "a": [1, "x"]}, "u": "héllo ✓", "arr": [1, "x"], "z": -0.0}
    assert r("{{n}}|{{missing}}|{{t}}|{{f}}|{{i}}|{{neg}}", p) == "||true|false|42|-7"
    assert r("{{x}}|{{y}}|{{big}}|{{tiny}}|{{z}}", p) == "2|1.5|10000000000000000|1e-7|0"
    assert r("{{o}}|{{arr}}|{{u}}", p) == '{"b":1,"a":[1,"x"]}|[1,"x"]|héllo ✓'
    assert to_text({"k": "é"}) == '{"k":"é"}'
    # inside an object or array an integral number follows the same rule as a lone one
    nested = {"e": [2.0, 1e20, 1e2, -0.0, 1.5, 7], "d": {"x": 2.0, "s": "2.0"}}
    assert r("{{e}}|{{d}}", nested) == '[2,100000000000000000000,100,0,1.5,7]|{"x":2,"s":"2.0"}'
    assert r("{{e.0}}|{{e.1}}|{{e.3}}", nested) == "2|100000000000000000000|0"
    # from 1e21 on, the exponent form, as JavaScript prints it: written out, 1e308 is 309 digits, and
    # a body of such numbers rendered ~100 times its own size
    huge = {"a": 1e21, "b": -1e308, "c": [1e21, 2.5e300]}
    assert r("{{a}}|{{b}}", huge) == "1e+21|-1e+308"
    assert r("{{c}}", huge) == "[1e+21,2.5e+300]"
    assert r("{{x}}", {"x": 999999999999999900000.0}) == "999999999999999900000"


# What JavaScript's String(n) and JSON.stringify write for these numbers (node 18, ECMA-262
# Number::toString): written out from 1e-6 to below 1e21, else a signed, unpadded exponent.
JS_NUMBERS = [
    (1e-7, "1e-7"), (1e-6, "0.000001"), (1e-5, "0.00001"), (1.5e-6, "0.0000015"), (1.25e-7, "1.25e-7"),
    (-0.000001234, "-0.000001234"), (0.1, "0.1"), (0.5, "0.5"), (100.0, "100"), (-0.0, "0"),
    (1e16, "10000000000000000"), (123456789012345680000.0, "123456789012345680000"), (1e21, "1e+21"),
    (-1e21, "-1e+21"), (1.5e300, "1.5e+300"), (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"), (0.30000000000000004, "0.30000000000000004"),
]


@pytest.mark.parametrize(("value", "expected"), JS_NUMBERS)
def test_numbers_render_as_javascript_writes_them(value: float, expected: str) -> None:
    assert r("{{x}}", {"x": value}) == expected
    assert r("{{a}}", {"a": [value]}) == f"[{expected}]"
    assert r("{{o}}", {"o": {"k": value}}) == f'{{"k":{expected}}}'


def test_example_16() -> None:
    p = {"items": [{"id": "a"}, {"id": "b"}]}
    c = ctx(p, headers={"x-foo": "F"})
    assert render("{{__proto__}}{{constructor.name}}{{items.length}}{{toString}}", c) == ""
    assert render("{{items.1.id}} {{headers.X-Foo}}", c) == "b F"


# --- properties --------------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(
    allow_nan=False, allow_infinity=False) | st.text(max_size=8)
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.text(max_size=6), kids, max_size=4), max_leaves=20)
payloads = st.dictionaries(st.text(max_size=6), json_values, max_size=5) | st.lists(json_values, max_size=4)
path_chars = st.sampled_from(list("ab01._[]-{} ") + ["__class__", "length", "__dict__", "headers", "payload",
                                                     "query", "path", "now", "é"])
expressions = st.lists(path_chars, max_size=8).map("".join)


def _json_parts(value: Any) -> set[str]:
    """Every text a lookup may legitimately produce from this JSON document."""
    out = {to_text(value)}
    if isinstance(value, dict):
        for v in value.values():
            out |= _json_parts(v)
    elif isinstance(value, list):
        for v in value:
            out |= _json_parts(v)
    return out


@settings(max_examples=150, deadline=None)
@given(payload=payloads, expr=expressions)
def test_lookup_only_reaches_json_data(payload: Any, expr: str) -> None:
    value = lookup(payload, expr)
    rendered = to_text(value)
    assert isinstance(rendered, str)
    assert rendered == "" or rendered in _json_parts(payload)


@settings(max_examples=150, deadline=None)
@given(payload=payloads, template=st.text(max_size=40) | st.lists(
    st.sampled_from(["{{", "}}", " ", "x"]) | expressions, max_size=8).map("".join))
def test_render_never_raises_and_keeps_literal_text(payload: Any, template: str) -> None:
    out = render(template, ctx(payload))
    assert isinstance(out, str)
    if "{{" not in template:
        assert out == template


@settings(max_examples=100, deadline=None)
@given(key=st.text(min_size=1, max_size=8).filter(lambda k: not any(c in k for c in ".[]}") and k.strip() == k
                                                   and k not in ("path", "now")
                                                   and not k.startswith(("headers.", "query.", "payload."))),
       value=json_values)
def test_bare_and_payload_paths_render_the_value(key: str, value: Any) -> None:
    payload = {key: value}
    expected = "" if value is None else to_text(value)
    assert r("{{" + key + "}}", payload) == expected
    assert r("{{payload." + key + "}}", payload) == expected
    if isinstance(value, dict | list):
        assert _same_data(json.loads(expected), value)


def _same_data(rendered: Any, value: Any) -> bool:
    """The rendered JSON reads back as ``value``; a float may come back as the integer it names."""
    if isinstance(value, float):
        return not isinstance(rendered, bool) and isinstance(rendered, int | float) and float(rendered) == value
    if isinstance(value, dict):
        return isinstance(rendered, dict) and list(rendered) == list(value) and all(
            _same_data(rendered[k], v) for k, v in value.items())
    if isinstance(value, list):
        return isinstance(rendered, list) and len(rendered) == len(value) and all(
            _same_data(a, b) for a, b in zip(rendered, value, strict=True))
    return type(rendered) is type(value) and rendered == value


@settings(max_examples=100, deadline=None)
@given(value=st.floats(allow_nan=False, allow_infinity=False))
def test_floats_round_trip(value: float) -> None:
    text = to_text(value)
    assert float(text) == value
    if value.is_integer() and abs(value) < 1e21:  # written out without a fraction
        assert "." not in text and "e" not in text
    elif value.is_integer():  # from 1e21 on, the exponent form, as JavaScript prints it
        assert "e+" in text
