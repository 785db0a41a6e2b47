"""Body decoding and payload coercion for Surface B (hooks.md §2 steps 8–9)."""

from __future__ import annotations

from typing import Any

import msgspec

from hookgate import jsonbody
from hookgate.errors import RequestError
from hookgate.jstext import js_trim

_BOM = b"\xef\xbb\xbf"
_decoder = jsonbody.decoder()

Payload = dict[str, Any] | list[Any]


def decode_hook_body(body: bytes) -> Payload:
    """Decode a hook body: BOM dropped, UTF-8 checked, trimmed, strict JSON; scalars become ``{}``.

    Raises ``RequestError`` with ``invalid JSON: …`` texts.
    """
    if body.startswith(_BOM):
        body = body[3:]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError("invalid JSON: body is not valid UTF-8") from None
    text = js_trim(text)
    if not text:
        return {}
    try:
        value = jsonbody.decode(_decoder, text)
    except msgspec.DecodeError as exc:
        raise RequestError(f"invalid JSON: {_detail(exc)}") from None
    except jsonbody.NestingTooDeep as exc:
        raise RequestError(f"invalid JSON: {exc}") from None
    if isinstance(value, dict | list):
        return value
    return {}


def _detail(exc: msgspec.DecodeError) -> str:
    detail = str(exc)
    return detail[:200] if detail else "malformed JSON"


def fields(payload: Payload) -> dict[str, Any]:
    """Direct wake/agent read fields only from objects (an array has no fields)."""
    return payload if isinstance(payload, dict) else {}


def trimmed_str(value: Any) -> str | None:
    """A trimmed non-empty string, else ``None``."""
    if isinstance(value, str):
        text = js_trim(value)
        if text:
            return text
    return None
