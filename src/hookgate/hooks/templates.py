"""The mapping template language (hooks.md §6.3): placeholders, roots, paths and value rendering.

Lookups only ever index JSON data (dict keys, list positions): no attribute of any Python object is
reachable from a template, so ``{{__class__}}`` or ``{{items.length}}`` simply render empty.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

PLACEHOLDER = re.compile(r"\{\{([^}]+)\}\}")
_SEGMENT = re.compile(r"\[([0-9]+)\]|([^.\[\]]+)")
_DIGITS = re.compile(r"[0-9]+")
# An index of more digits than this is past the end of any list (and past what ``int()`` converts from
# text: Python refuses more than 4 300 digits, which made such a template a 500 on every request).
_INDEX_DIGITS = 18
_PAST_ANY_END = 10**_INDEX_DIGITS
_MISSING = object()


@dataclass(frozen=True, slots=True)
class TemplateContext:
    """The values a template can address."""

    payload: Any  # the decoded JSON body (dict or list)
    headers: Mapping[str, str]  # lower-cased names
    query: Mapping[str, str]
    path: str  # the raw subPath
    now_ms: int


def iso_now(now_ms: int) -> str:
    """ISO-8601 UTC with milliseconds and ``Z``: ``2026-11-22T12:34:56.789Z``."""
    moment = datetime.fromtimestamp(now_ms // 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{now_ms % 1000:03d}Z"


def segments(path: str) -> list[str | int]:
    """Split a path: ``[n]`` is an index (int), other maximal runs are names; empty segments vanish."""
    out: list[str | int] = []
    for m in _SEGMENT.finditer(path):
        index, name = m.group(1), m.group(2)
        if index is None:
            out.append(name)
        else:
            out.append(int(index) if len(index) <= _INDEX_DIGITS else _PAST_ANY_END)
    return out


def lookup(data: Any, path: str) -> Any:
    """Walk ``path`` through JSON data; ``_MISSING`` when any step leaves the data."""
    steps = segments(path)
    if not steps:
        return _MISSING  # an expression must address something inside the body
    return walk(data, steps)


def walk(data: Any, steps: list[str | int]) -> Any:
    """Follow parsed path segments through JSON data (dict keys, list positions, nothing else)."""
    value = data
    for seg in steps:
        if isinstance(value, dict):
            if isinstance(seg, int):
                return _MISSING
            value = value.get(seg, _MISSING) if type(seg) is str else _MISSING
        elif isinstance(value, list):
            if isinstance(seg, str):
                if not _DIGITS.fullmatch(seg) or len(seg) > _INDEX_DIGITS:
                    return _MISSING
                seg = int(seg)
            if seg >= len(value):
                return _MISSING
            value = value[seg]
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def js_number(value: float) -> str:
    """A finite number as JavaScript's ``String(n)`` and ``JSON.stringify`` write it (ECMA-262
    Number::toString): the shortest digits that read back as ``value``, written out from 1e-6 up to
    below 1e21 (``0.000001``, ``100000000000000000000``), else in exponent form with a signed,
    unpadded exponent (``1e-7``, ``1.5e+300``); ``-0`` is ``0``. Python's ``repr`` differs below
    1e-4 (``1e-05``) and in the exponent's form, and writes ``2.0`` where JavaScript writes ``2``."""
    if not math.isfinite(value):
        raise ValueError(f"not a JSON number: {value!r}")  # never produced by the JSON decoder
    if value == 0:
        return "0"
    text = repr(value)  # the same shortest digits; from 1e-4 to below 1e16 written out as JavaScript does
    if "e" not in text:
        return text.removesuffix(".0")
    sign, text = ("-", text[1:]) if text[0] == "-" else ("", text)
    mantissa, _, exponent = text.partition("e")  # repr's exponent form: d[.ddd]e±XX
    digits = mantissa.replace(".", "")
    n = int(exponent) + 1  # value = 0.<digits> × 10^n
    if 0 < n <= 21:  # 1e16 up to below 1e21: written out (always integral there)
        return sign + digits + "0" * (n - len(digits))
    if -6 < n <= 0:  # 1e-6 up to below 1e-4: written out
        return f"{sign}0.{'0' * -n}{digits}"
    return f"{sign}{mantissa}e{'+' if n >= 1 else '-'}{abs(n - 1)}"


# the magnitudes whose fractional floats msgspec writes as JavaScript does
_MSGSPEC_LOW, _MSGSPEC_HIGH = 1e-5, 1e21


def _number(value: float) -> str:
    # From 1e21 on an integral number keeps its exponent form (``1e+21``): written out, ``1e308`` is
    # 309 digits, and a body of them rendered into a template ~100 times its own size (a 258 KB body
    # became a 26 MB message).
    return js_number(value) if math.isfinite(value) else ""  # never produced by the JSON decoder


def _js_numbers(value: Any) -> Any:
    """``value`` with every float inside it in its JavaScript form, so that an object or array
    renders its numbers as ``JSON.stringify`` does and by the same rule as a lone one
    (``[2.0,-0.0,1e21]`` → ``[2,0,1e+21]``, as ``{{x}}`` of ``2.0`` is ``2``)."""
    if isinstance(value, float):
        # msgspec writes the floats between as JavaScript does (``0.00001``, ``1.5``), but ``2.0``,
        # ``1e21`` without the exponent's sign and ``1e-6`` where JavaScript writes ``0.000001``
        if math.isfinite(value) and (value.is_integer() or not _MSGSPEC_LOW <= abs(value) < _MSGSPEC_HIGH):
            return msgspec.Raw(_number(value).encode("ascii"))
        return value
    if isinstance(value, dict):
        return {k: _js_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_js_numbers(v) for v in value]
    return value


def to_text(value: Any) -> str:
    """Render one value: missing/null → ``""``, booleans lower-case, numbers shortest, JSON compact."""
    if value is None or value is _MISSING:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, dict | list):
        try:
            return msgspec.json.encode(_js_numbers(value)).decode("utf-8")
        except (TypeError, ValueError, OverflowError):
            return ""
    return ""


Getter = Callable[[TemplateContext], Any]


def _payload_getter(steps: list[str | int]) -> Getter:
    if not steps:
        return lambda ctx: _MISSING  # an expression must address something inside the body
    return lambda ctx: walk(ctx.payload, steps)


def compile_expression(expr: str) -> Getter:
    """One (trimmed) expression turned into a function of the context; parsed once per template."""
    if expr == "path":
        return lambda ctx: ctx.path
    if expr == "now":
        return lambda ctx: iso_now(ctx.now_ms)
    if expr.startswith("headers."):
        name = expr[len("headers."):].lower()
        return lambda ctx: ctx.headers.get(name, _MISSING)
    if expr.startswith("query."):
        name = expr[len("query."):]
        return lambda ctx: ctx.query.get(name, _MISSING)
    if expr.startswith("payload."):
        return _payload_getter(segments(expr[len("payload."):]))
    return _payload_getter(segments(expr))


def evaluate(expr: str, ctx: TemplateContext) -> Any:
    """The value of one (trimmed) expression."""
    return compile_expression(expr)(ctx)


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: literal text and placeholders in order (``PLACEHOLDER.split`` layout)."""

    literals: tuple[str, ...]  # one more than ``getters``
    getters: tuple[Getter, ...]
    uses_request: bool  # addresses ``headers.*`` or ``query.*``

    def render(self, ctx: TemplateContext) -> str:
        if not self.getters:
            return self.literals[0]
        parts = [self.literals[0]]
        for getter, literal in zip(self.getters, self.literals[1:], strict=True):
            parts.append(to_text(getter(ctx)))
            parts.append(literal)
        return "".join(parts)


@functools.lru_cache(maxsize=4096)
def compile_template(template: str) -> Template:
    """Parse once: templates come from the config, so the cache holds each of them once."""
    pieces = PLACEHOLDER.split(template)
    exprs = [e.strip() for e in pieces[1::2]]
    return Template(
        literals=tuple(pieces[0::2]),
        getters=tuple(compile_expression(e) for e in exprs),
        uses_request=any(e.startswith(("headers.", "query.")) for e in exprs),
    )


def render(template: str, ctx: TemplateContext) -> str:
    """Replace every placeholder; all other text is literal (no escaping, no filters)."""
    return compile_template(template).render(ctx)
