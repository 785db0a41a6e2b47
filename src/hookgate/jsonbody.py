"""JSON request bodies: a nesting limit and the int64 range, checked without recursion.

RFC 8259 §9 lets a parser limit the depth of nesting. msgspec's own limit is CPython's recursion
limit, less the frames already on the stack: a body that decodes in one place may then fail to
encode a few frames deeper (in a response envelope, a stored flow read back), and a Python walk of
such a value hits ``RecursionError``. So both surfaces refuse bodies nested deeper than
``MAX_DEPTH`` levels as invalid JSON, far below where any of that starts.
"""

from __future__ import annotations

from typing import Any

import msgspec

MAX_DEPTH = 128
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class NestingTooDeep(ValueError):
    """The body is valid JSON nested deeper than ``MAX_DEPTH``."""

    def __init__(self) -> None:
        super().__init__(f"JSON nested deeper than {MAX_DEPTH} levels")


def decode(decoder: msgspec.json.Decoder[Any], data: bytes | str) -> Any:
    """``decoder.decode(data)``, refusing more than ``MAX_DEPTH`` levels with ``NestingTooDeep``.

    The walk runs only for a body holding more than ``MAX_DEPTH`` brackets, so the hot path pays
    two ``count`` calls."""
    try:
        value = decoder.decode(data)
    except RecursionError:  # deeper than msgspec can go at this stack depth
        raise NestingTooDeep from None
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
