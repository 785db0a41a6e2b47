"""A small strict validator for the config tree that reports EVERY error with its full key path.

msgspec stops at the first error; the config contract (README §4) wants all of them, so the schema
is a tree of these nodes (declared once in ``schema.py``). ``Node.check`` returns the value with
defaults filled in (the *effective* config) or ``INVALID`` after recording errors.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from hookgate.jsonbody import out_of_int64

# A UTF-16 surrogate in a str: what json5 and json make of a ``"\ud800"`` escape (json5 of each half of a
# pair, too), and what ``os.environ`` makes of a byte that is no UTF-8. No UTF-8 encoder takes one.
SURROGATE = re.compile("[\ud800-\udfff]")


def unpaired_surrogate(path: str, char: str) -> str:
    """The error line for an unpaired surrogate ``char`` at ``path``."""
    return f"{path}: must not contain an unpaired surrogate (\\u{ord(char):04x})"


class _Invalid:
    def __repr__(self) -> str:
        return "INVALID"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


INVALID: Final = _Invalid()
MISSING: Final = _Missing()


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()  # a string whose ``${VAR}`` is not set (already an error): fails every node


@dataclass
class Context:
    """Errors found so far and every secret input seen (key path, raw value).

    ``repair=True`` (a second pass over a section that had errors, so that its cross-field checks
    can still run): an object's field that does not validate takes its default, or is left out when
    it has none, unless it is ``pivotal``; a map's entry that does not validate is left out; each
    such key path is recorded in ``repaired``. Unknown keys are left out."""

    errors: list[str] = field(default_factory=list)
    secrets: list[tuple[str, Any]] = field(default_factory=list)
    repair: bool = False
    repaired: list[str] = field(default_factory=list)

    def error(self, path: str, message: str) -> _Invalid:
        self.errors.append(f"{path}: {message}")
        return INVALID

    def type_error(self, path: str, expected: str, value: object) -> _Invalid:
        """``expected <type>, got <type>`` — nothing for ``UNSET``: its ``${VAR}`` error says it."""
        if value is UNSET:
            return INVALID
        return self.error(path, f"expected {expected}, got {json_type(value)}")


def json_type(value: object) -> str:
    """The JSON type name used in ``expected <type>, got <type>``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


# A key printed bare in a key path: not empty, and nothing that reads as a separator or that a line of
# output would lose (``{"a.b": 1}`` printed ``a.b``, as if nested; ``{"": 1}`` printed an empty path).
_BARE_KEY = re.compile(r"[^\s.\[\]\"'\x00-\x1f\x7f-\x9f]+")


def join(path: str, key: str) -> str:
    """``path.key``, or ``path["key"]`` (JSON-quoted) for a key that would not read back as itself."""
    if _BARE_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _fmt(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else repr(float(n))


class Node:
    def check(self, value: Any, path: str, ctx: Context) -> Any:
        raise NotImplementedError


class Str(Node):
    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if not isinstance(value, str):
            return ctx.type_error(path, "string", value)
        return value


class Bool(Node):
    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if not isinstance(value, bool):
            return ctx.type_error(path, "boolean", value)
        return value


class AnyValue(Node):
    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if value is UNSET:
            return INVALID  # its ${VAR} error says it
        if out_of_int64(value):  # free values are encoded as JSON (configHash, a model's params)
            return ctx.error(path, "integer out of range")
        return value


@dataclass
class Num(Node):
    """A number (``integer=True``: an integer) within ``lo``…``hi``; ``gt``: strictly above."""

    lo: float | None = None
    hi: float | None = None
    integer: bool = False
    gt: float | None = None

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "integer" if self.integer else "number"
            return ctx.type_error(path, kind, value)
        if self.integer and not isinstance(value, int):
            # JSON5 has one number type: 1e6 and 1000000.0 are the integer 1000000, as for the
            # JavaScript gateway whose files hookgate reads
            if not (math.isfinite(value) and value.is_integer()):
                return ctx.type_error(path, "integer", value)
            value = int(value)
        if isinstance(value, float) and not math.isfinite(value):
            return ctx.error(path, "expected a finite number")
        if isinstance(value, int) and out_of_int64(value):
            return ctx.error(path, "integer out of range")
        if self.gt is not None and not value > self.gt:
            return ctx.error(path, f"must be greater than {_fmt(self.gt)}")
        if self.lo is not None and self.hi is not None and not self.lo <= value <= self.hi:
            return ctx.error(path, f"must be between {_fmt(self.lo)} and {_fmt(self.hi)}")
        if self.lo is not None and self.hi is None and value < self.lo:
            return ctx.error(path, f"must be at least {_fmt(self.lo)}")
        if self.lo is None and self.hi is not None and value > self.hi:
            return ctx.error(path, f"must be at most {_fmt(self.hi)}")
        return value


def Int(lo: float | None = None, hi: float | None = None) -> Num:
    return Num(lo, hi, integer=True)


@dataclass
class Enum(Node):
    values: tuple[str, ...]

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if not isinstance(value, str):
            return ctx.type_error(path, "string", value)
        if value not in self.values:
            options = ", ".join(f'"{v}"' for v in self.values)
            return ctx.error(path, f'expected one of {options}, got "{value}"')
        return value


@dataclass
class Arr(Node):
    item: Node
    min_items: int = 0
    max_items: int | None = None

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if not isinstance(value, list):
            return ctx.type_error(path, "array", value)
        out = [self.item.check(v, f"{path}[{i}]", ctx) for i, v in enumerate(value)]
        if len(value) < self.min_items or (self.max_items is not None and len(value) > self.max_items):
            hi = "" if self.max_items is None else f" to {self.max_items}"
            return ctx.error(path, f"must have {self.min_items}{hi} entries")
        return INVALID if any(v is INVALID for v in out) else out


@dataclass
class Map(Node):
    """An object with free keys; ``key_check(key, path, ctx)`` may reject a key (returns False)."""

    value: Node
    key_check: Callable[[str, str, Context], bool] | None = None

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if not isinstance(value, dict):
            return ctx.type_error(path, "object", value)
        out: dict[str, Any] = {}
        ok = True
        for key, item in value.items():
            sub = join(path, key)
            if self.key_check is not None and not self.key_check(key, sub, ctx):
                ok = ok and ctx.repair  # a repair pass leaves the key out
                continue
            checked = self.value.check(item, sub, ctx)
            if checked is INVALID and ctx.repair:  # so is an entry in error (no index shifts)
                ctx.repaired.append(sub)
                continue
            out[key] = checked
            ok = ok and checked is not INVALID
        return out if ok else INVALID


@dataclass
class Field:
    """One key of an ``Obj``: its node, its default and whether an absent object is filled in."""

    node: Node
    default: Any = MISSING
    fill: bool = False  # absent object → validate ``{}`` so nested defaults appear
    required: bool = False
    # a key the rest of its object is read by (an ``action``, an ``enabled``, a route's secret): in a
    # repair pass it is not replaced by a default; when in error, its whole object is set aside
    pivotal: bool = False


@dataclass
class Obj(Node):
    """A strict object: unknown keys are errors, defaults are filled in."""

    fields: Mapping[str, Field]

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if not isinstance(value, dict):
            return ctx.type_error(path, "object", value)
        out, ok = self.check_fields(value, path, ctx)
        return out if ok and all(v is not INVALID for v in out.values()) else INVALID

    def check_fields(self, value: Mapping[str, Any], path: str, ctx: Context) -> tuple[dict[str, Any], bool]:
        """Each declared field's checked value (``INVALID`` where it has errors) and whether the
        object itself is sound (no unknown key, nothing required missing). The loader uses this at
        the top level so the sections that did validate still get their cross-field checks."""
        out: dict[str, Any] = {}
        ok = True
        for key, item in value.items():
            spec = self.fields.get(key)
            if spec is None:
                ctx.error(join(path, key), "unknown key")
                ok = ok and ctx.repair
                continue
            if spec.pivotal:
                checked = _without_repair(spec.node, item, join(path, key), ctx)
            else:
                checked = spec.node.check(item, join(path, key), ctx)
            if checked is INVALID and ctx.repair and not (spec.required or spec.pivotal):
                ctx.repaired.append(join(path, key))
                continue  # as if absent: its default, if it has one, below
            out[key] = checked
        for key, spec in self.fields.items():
            if key in out:
                continue
            if spec.required:
                ctx.error(join(path, key), "required")
                ok = False
            elif spec.fill:
                out[key] = spec.node.check({}, join(path, key), ctx)
            elif spec.default is not MISSING:
                out[key] = _copy(spec.default)
        return out, ok


def _without_repair(node: Node, value: Any, path: str, ctx: Context) -> Any:
    """``node.check`` as in the strict pass (in either pass): any error in ``value`` makes it ``INVALID``."""
    repair, ctx.repair = ctx.repair, False
    try:
        return node.check(value, path, ctx)
    finally:
        ctx.repair = repair


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@dataclass
class Tagged(Node):
    """An object whose ``tag`` key selects the strict schema (runtimes, secret providers)."""

    tag: str
    variants: Mapping[str, Obj]
    default_tag: str | None = None

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if not isinstance(value, dict):
            return ctx.type_error(path, "object", value)
        tag = value.get(self.tag, self.default_tag)
        if tag is None:
            return ctx.error(join(path, self.tag), "required")
        checked = Enum(tuple(self.variants)).check(tag, join(path, self.tag), ctx)
        if checked is INVALID:
            return INVALID
        out = self.variants[tag].check(value, path, ctx)
        if out is not INVALID:
            out[self.tag] = tag
        return out


@dataclass
class OneOf(Node):
    """A string or an object (``model``): chosen by the JSON type."""

    string: Node
    obj: Node

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if isinstance(value, str):
            return self.string.check(value, path, ctx)
        if isinstance(value, dict):
            return self.obj.check(value, path, ctx)
        return ctx.type_error(path, "string or object", value)


SECRET_REF = Obj(
    {
        "source": Field(Enum(("env", "file", "exec"))),
        "provider": Field(Str()),
        "id": Field(Str()),
    }
)


@dataclass
class Secret(Node):
    """A secret input: a string, or a strict SecretRef ``{source, provider?, id}`` (webhooks.md §1.3).

    ``url=True`` marks a connection URL whose password only is masked in ``config show``.
    """

    url: bool = False

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        if isinstance(value, str):
            ctx.secrets.append((path, value))
            return value
        if not isinstance(value, dict):
            return ctx.type_error(path, "string or SecretRef object", value)
        out = _without_repair(SECRET_REF, value, path, ctx)
        if out is INVALID:  # a SecretRef is resolved whole or not at all: no default provider for a bad one
            return INVALID
        missing = [k for k in ("source", "id") if k not in out]
        for key in missing:
            ctx.error(join(path, key), "required")
        if missing:
            return INVALID
        ctx.secrets.append((path, out))
        return out


@dataclass
class Sensitive(Node):
    """A plain value (not a secret input) that may still carry a credential: an API header, a
    command's environment, a URL with a password. ``config show`` prints it ``[redacted]``, or with
    ``url=True`` with only a URL password masked (operations.md §6: tokens never appear there)."""

    inner: Node
    url: bool = False

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        return self.inner.check(value, path, ctx)
