"""The nesting limit and int64 check of JSON bodies: iterative, so no depth raises RecursionError."""

from __future__ import annotations

import msgspec
import pytest

from hookgate import jsonbody

decoder = msgspec.json.Decoder()


def nested(depth: int, leaf: str = "1") -> bytes:
    return ("[" * depth + leaf + "]" * depth).encode()


@pytest.mark.parametrize("data", [nested(128), b'{"a":' + nested(127) + b"}", nested(3) + b" ", "[[1]]"])
def test_up_to_the_limit_decodes(data: bytes | str) -> None:
    assert jsonbody.decode(decoder, data) == decoder.decode(data)


@pytest.mark.parametrize("data", [nested(129), b'{"a":' + nested(128) + b"}", nested(900), nested(50_000),
                                  "[" * 129 + "]" * 129])
def test_deeper_is_refused(data: bytes | str) -> None:
    with pytest.raises(jsonbody.NestingTooDeep, match="JSON nested deeper than 128 levels"):
        jsonbody.decode(decoder, data)


def test_brackets_inside_strings_do_not_count() -> None:
    data = b'{"s":"' + b"[" * 500 + b'"}'
    assert jsonbody.decode(decoder, data) == {"s": "[" * 500}


def test_depth_counts_containers_not_scalars() -> None:
    assert not jsonbody.depth_exceeds([[{"a": [1, "x", None]}]], 4)
    assert jsonbody.depth_exceeds([[{"a": [[]]}]], 4)
    assert not jsonbody.depth_exceeds("scalar", 0)


def test_int64_range_at_any_depth() -> None:
    deep_ok: object = 2**63 - 1
    deep_bad: object = -(2**63) - 1
    for _ in range(5000):  # far deeper than Python's recursion limit
        deep_ok, deep_bad = [deep_ok], {"k": deep_bad}
    assert not jsonbody.out_of_int64(deep_ok)
    assert jsonbody.out_of_int64(deep_bad)
    assert not jsonbody.out_of_int64([True, False, -(2**63), 1.5e300])
    assert jsonbody.out_of_int64({"a": [1, {"b": 2**63}]})


@pytest.mark.parametrize(("data", "expected"), [
    (b'"a\\ud83d"', "a\ufffd"),                       # a high half at the end
    (b'"\\ud83d\\ude00"', "\U0001f600"),              # a pair is the character (decoded at once)
    (b'"\\udc00x\\ud800\\ud800\\udc00"', "\ufffdx\ufffd\U00010000"),  # lone low, lone high, pair
    (b'"\\ud800\\u0041"', "\ufffdA"),                 # a high half before another escape
    (b'"\\ud800\\n"', "\ufffd\n"),
    (b'"\\\\ud800 \\uD800"', "\\ud800 \ufffd"),   # an escaped backslash, then text; upper-case hex
    (b'{"\\udfff":1}', {"\ufffd": 1}),                # in a key
    ('"\\ud800"', "\ufffd"),                          # str input
])
def test_lone_surrogate_escapes_decode_as_replacement_characters(data: bytes | str, expected: object) -> None:
    assert jsonbody.decode(decoder, data) == expected


@pytest.mark.parametrize("data", [b'"\\ud800', b'["\\ud800",]', b'"\\ud800" x', b'"\\Ud800"'])
def test_a_lone_surrogate_does_not_mend_invalid_json(data: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        jsonbody.decode(decoder, data)


def test_replacement_keeps_offsets_and_leaves_clean_bodies_alone() -> None:
    data = b'{"a":"\\ud800","b":"\\ud83d\\ude00"}'
    mended = jsonbody.replace_lone_surrogates(data)
    assert mended == b'{"a":"\\ufffd","b":"\\ud83d\\ude00"}' and len(mended) == len(data)
    assert jsonbody.replace_lone_surrogates(b'"\\ud83d\\ude00"') is None
    assert jsonbody.replace_lone_surrogates(b'"plain"') is None


@pytest.mark.parametrize("number", ["1e300", "4.9e-324", "2.2250738585072011e-308", "1.7976931348623157e308",
                                    "-0.0", "0.1", "1E+22", "123.456e-7", "1." + "1" * 400 + "e3"])
def test_floats_decode_as_msgspec_decodes_them(number: str) -> None:
    data = f'{{"a":[{number}],"b":{{"c":{number}}}}}'.encode()
    assert jsonbody.decode(jsonbody.decoder(), data) == decoder.decode(data)
    assert jsonbody.decode_answer(data) == decoder.decode(data)


@pytest.mark.parametrize("data", [b'{"a":[1e999]}', b'{"a":{"b":-1e400}}', b"[2e308]"])
def test_a_float_out_of_range_is_refused_with_msgspecs_words(data: bytes) -> None:
    with pytest.raises(msgspec.ValidationError) as ours:
        jsonbody.decode(jsonbody.decoder(), data)
    with pytest.raises(msgspec.ValidationError) as theirs:
        decoder.decode(data)
    assert str(ours.value) == str(theirs.value)


def test_large_exponents_cost_about_what_plain_floats_cost() -> None:
    """A body of ``1e300, 1e300, …`` took msgspec's slow path, ~400 times the cost of ``0.1, 0.1, …``
    (2 s per MB, on the event loop). Both are timed here, in one process, and compared."""
    import time

    def cost(token: bytes) -> float:
        body = b'{"a":[' + b",".join([token] * 40_000) + b"]}"
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            jsonbody.decode(jsonbody.decoder(), body)
            best = min(best, time.perf_counter() - started)
        return best / len(body)

    plain = cost(b"0.1")
    assert cost(b"1e300") < 10 * plain
    assert cost(b"4.9e-324") < 10 * plain
