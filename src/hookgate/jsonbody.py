"""JSON request bodies: a nesting limit and the int64 range, checked without recursion; lone surrogates.

RFC 8259 §9 lets a parser limit the depth of nesting. msgspec's own limit is CPython's recursion
limit, less the frames already on the stack: a body that decodes in one place may then fail to
encode a few frames deeper (in a response envelope, a stored flow read back), and a Python walk of
such a value hits ``RecursionError``. So both surfaces refuse bodies nested deeper than
``MAX_DEPTH`` levels as invalid JSON, far below where any of that starts.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

MAX_DEPTH = 128
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class InvalidJSON(ValueError):
    """An answer from outside (a model API, a chat API, a command's stdout) that is no JSON we read."""


def _float(text: str) -> float:
    """A JSON number with a fraction or an exponent, parsed by CPython's correctly rounded ``float``.

    msgspec's own parser takes a slow path for a short number with a large exponent: a body of
    ``1e300, 1e300, …`` decoded at ~2 s per MB on the event loop, where every other request waited
    (0.36 s for a 256 KiB body); ``float`` reads it at ~0.1 s per MB. Out of range is refused as
    msgspec refuses it (the message and the ``- at `$…``` path it appends are the same)."""
    value = float(text)
    if math.isinf(value):
        raise ValueError("Number out of range")
    return value


def decoder(type_: Any = Any) -> msgspec.json.Decoder[Any]:
    """A decoder for JSON from outside or read back from the store: its untyped floats by ``_float``."""
    return msgspec.json.Decoder(type_, float_hook=_float)


_ANY = decoder()


def decode_answer(data: bytes | str) -> Any:
    """A JSON answer from outside, decoded as request bodies are (``decode``: lone surrogate escapes as
    U+FFFD, at most ``MAX_DEPTH`` levels). Every way it can fail — invalid JSON, invalid UTF-8, which
    msgspec raises as ``UnicodeDecodeError``, too deep — is ``InvalidJSON``: a caller that caught
    ``msgspec.DecodeError`` alone let the others end a run as a crash (retried, then lost) and a
    delivered message as a failure (sent again)."""
    try:
        return decode(_ANY, data)
    except (msgspec.DecodeError, UnicodeDecodeError, NestingTooDeep) as exc:
        raise InvalidJSON(str(exc)) from None


class NestingTooDeep(ValueError):
    """The body is valid JSON nested deeper than ``MAX_DEPTH``."""

    def __init__(self) -> None:
        super().__init__(f"JSON nested deeper than {MAX_DEPTH} levels")


def decode(decoder: msgspec.json.Decoder[Any], data: bytes | str) -> Any:
    """``decoder.decode(data)``, refusing more than ``MAX_DEPTH`` levels with ``NestingTooDeep``; a body
    that fails to decode is tried once more with its unpaired surrogate escapes as U+FFFD
    (``replace_lone_surrogates``).

    The walk runs only for a body holding more than ``MAX_DEPTH`` brackets, so the hot path pays
    two ``count`` calls."""
    try:
        value = decoder.decode(data)
    except RecursionError:  # deeper than msgspec can go at this stack depth
        raise NestingTooDeep from None
    except msgspec.DecodeError:
        mended = replace_lone_surrogates(data)
        if mended is None:
            raise
        return decode(decoder, mended)
    if isinstance(data, bytes):
        brackets = data.count(b"[") + data.count(b"{")
    else:
        brackets = data.count("[") + data.count("{")
    if brackets > MAX_DEPTH and depth_exceeds(value, MAX_DEPTH):
        raise NestingTooDeep
    return value


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` (decoded JSON) has containers nested more than ``limit`` deep."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        if depth > limit:
            return True
        stack.extend((child, depth) for child in children if isinstance(child, dict | list))
    return False


def out_of_int64(value: Any) -> bool:
    """Whether decoded JSON holds an integer outside the signed 64-bit range."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool) and not _INT64_MIN <= item <= _INT64_MAX:
            return True
    return False


# A ``\uXXXX`` surrogate escape whose backslash follows an even run of backslashes (escaped ones; after
# an odd run that backslash is itself escaped, and ``uXXXX`` is text): a high half with the low half
# right after it (a pair, kept), a high half alone, or a low half alone. One scan in C: a hostile body
# of backslashes costs what a regex pass costs.
_SURROGATE_ESCAPE = r"(?<!\\)((?:\\\\)*)\\u([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?|(?<!\\)((?:\\\\)*)\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_SURROGATE_ESCAPE_B = re.compile(_SURROGATE_ESCAPE.encode())
_SURROGATE_ESCAPE_S = re.compile(_SURROGATE_ESCAPE)
_SURROGATE_B = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE_S = re.compile(r"\\u[dD][89a-fA-F]")


def replace_lone_surrogates(data: bytes | str) -> bytes | str | None:
    """``data`` with every ``\\uXXXX`` escape of an unpaired UTF-16 surrogate replaced by ``\\ufffd``,
    or ``None`` when it has none.

    JSON's grammar admits such escapes (RFC 8259 §8.2: a string holding one is valid JSON whose
    meaning is unpredictable), and JavaScript's ``JSON.stringify`` writes one for a string cut inside
    a surrogate pair (an emoji halved by ``slice``): automation built in JavaScript sends them, and a
    JavaScript gateway takes them. msgspec refuses them (``Input data was truncated``), and no store
    can hold one as UTF-8. So a body that fails to decode is given a second chance with each lone
    surrogate as U+FFFD, what an UTF-8 encoder writes for it (WHATWG ``TextEncoder``). An escape
    counts only after an even run of backslashes, so ``\\\\ud800`` (an escaped backslash, then text)
    is none. The replacement has the escape's length: msgspec's byte offsets still hold."""
    quick: Any
    escape: Any
    fffd: Any
    if isinstance(data, bytes):
        quick, escape, fffd = _SURROGATE_B, _SURROGATE_ESCAPE_B, b"\\ufffd"
    else:
        quick, escape, fffd = _SURROGATE_S, _SURROGATE_ESCAPE_S, "\\ufffd"
    if not quick.search(data):
        return None
    replaced = False

    def mend(m: Any) -> Any:
        nonlocal replaced
        if m.group(3) is not None:  # a pair
            return m.group(0)
        replaced = True
        return (m.group(1) if m.group(2) is not None else m.group(4)) + fffd

    out = escape.sub(mend, data)
    return out if replaced else None
