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
from decimal import Decimal
from typing import Any

import msgspec

PLACEHOLDER = re.compile(r"\{\{([^}]+)\}\}")
_SEGMENT = re.compile(r"\[([0-9]+)\]|([^.\[\]]+)")
_DIGITS = re.compile(r"[0-9]+")
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
        out.append(int(index) if index is not None else name)
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
                if not _DIGITS.fullmatch(seg):
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


def _integral(value: float) -> int:
    """An integral float as the integer its shortest round-trip form names (``1e21`` → 10**21)."""
    return 0 if value == 0 else int(Decimal(repr(value)))


# From this magnitude on an integral number keeps its exponent form (``1e+21``), as JavaScript prints
# it: written out, ``1e308`` is 309 digits, and a body of them rendered into a template ~100 times
# its own size (a 258 KB body became a 26 MB message).
_WRITTEN_OUT_BELOW = 1e21


def _number(value: float) -> str:
    if not math.isfinite(value):
        return ""  # not JSON data; never produced by the JSON decoder
    if value.is_integer() and abs(value) < _WRITTEN_OUT_BELOW:
        return str(_integral(value))
    return repr(value)


def _integral_floats_as_ints(value: Any) -> Any:
    """``value`` with every integral float inside it an integer, so that an object or array renders
    its numbers by the same rule as a lone one (``[2.0,-0.0]`` → ``[2,0]``, as ``{{x}}`` of ``2.0``
    is ``2``)."""
    if isinstance(value, float):
        integral = math.isfinite(value) and value.is_integer() and abs(value) < _WRITTEN_OUT_BELOW
        return _integral(value) if integral else value
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_floats_as_ints(v) for v in value]
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
            return msgspec.json.encode(_integral_floats_as_ints(value)).decode("utf-8")
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
