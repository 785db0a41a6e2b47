"""The public API of hook transforms (hooks.md §6.5): ``SKIP`` and ``TransformContext``.

A transform is a ``.py`` file in the transforms directory exporting ``transform`` (or ``default``, or
the configured ``transform.export``). It gets one read-only ``TransformContext`` and returns ``None``
(keep the mapped action), ``SKIP`` (answer 204, dispatch nothing) or a ``dict`` merged over the action::

    from hookgate.transforms import SKIP

    def transform(ctx):
        if ctx.headers.get("x-github-event") == "ping":
            return SKIP
        pr = ctx.payload.get("pull_request") or {}
        return {"message": f"Review PR #{pr.get('number')}: {pr.get('title')}", "name": "GitHub PR"}

``async def`` transforms are awaited; plain functions run in a worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

__all__ = ["SKIP", "Skip", "TransformContext"]


@final
class Skip:
    """The type of ``SKIP``: there is exactly one instance."""

    _instance: Skip | None = None

    def __new__(cls) -> Skip:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SKIP"

    def __reduce__(self) -> str:
        return "SKIP"


SKIP: Final = Skip()


@dataclass(frozen=True, slots=True)
class TransformContext:
    """What a transform sees of one request. Read-only; ``payload`` is the transform's own deep copy."""

    payload: dict[str, Any] | list[Any]
    headers: Mapping[str, str]  # lower-cased names, repeated values joined with ", "
    query: Mapping[str, str]  # decoded, the last value wins
    path: str  # the subPath
    url: str  # the request target as received (path and query)
    mapping_id: str
