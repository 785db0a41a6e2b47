"""Transforms directory containment (hooks.md §6.6) and config-relative paths.

``check_contained`` is re-run by the transform loader on every (re)import, so it only reads the
filesystem (``realpath`` of the nearest existing ancestor) and never caches.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Literal

ContainmentKind = Literal["transformsDir", "module"]


class ContainmentError(ValueError):
    """A transforms path escapes its base; ``message`` is the exact spec text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@lru_cache(maxsize=64)
def transforms_root(config_dir: str) -> str:
    """The transforms root: ``<config dir>/hooks/transforms`` (absolute)."""
    return os.path.join(os.path.abspath(config_dir), "hooks", "transforms")


def resolve_config_path(config_dir: str, raw: str) -> str:
    """A config path made absolute: ``~`` expanded, relative values joined to the config directory."""
    expanded = os.path.expanduser(raw)
    return os.path.normpath(os.path.join(os.path.abspath(config_dir), expanded))


def _escapes(base: str, candidate: str) -> bool:
    rel = os.path.relpath(candidate, base)
    return rel == ".." or rel.startswith(".." + os.sep) or os.path.isabs(rel)


def _nearest_existing(path: str) -> str:
    probe = path
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return probe


def _message(base: str, raw: str, kind: ContainmentKind) -> str:
    if kind == "transformsDir":
        return f"Hook transformsDir module path must be within {base}: {raw}"
    return f"Hook transform module path must be within {base}: {raw}"


def check_contained(base: str, raw: str, *, kind: ContainmentKind) -> str:
    """Resolve ``raw`` against ``base`` and return the absolute path, or raise ``ContainmentError``.

    ``kind="transformsDir"``: ``base`` is the transforms root; a blank value gives the root itself.
    ``kind="module"``: ``base`` is the transforms directory; a blank value is an error.
    """
    base = os.path.abspath(base)
    value = raw.strip()
    if not value:
        if kind == "module":
            raise ContainmentError("Hook transform module path is required")
        return base
    if value.startswith("~"):
        value = os.path.expanduser(value)
    resolved = os.path.normpath(os.path.join(base, value))
    if _escapes(base, resolved):
        raise ContainmentError(_message(base, raw, kind))
    existing = _nearest_existing(resolved)
    if not _escapes(existing, base):
        return resolved  # nothing below the base exists yet: no symlink to follow
    if _escapes(os.path.realpath(base), os.path.realpath(existing)):
        raise ContainmentError(_message(base, raw, kind))
    return resolved


def is_safe_relative_module(value: str) -> bool:
    """hooks.md §6.1: non-empty, not absolute, no leading ``~``, no ``:``, no ``..`` segment."""
    if not value or value.startswith("~") or ":" in value:
        return False
    if value.startswith(("/", "\\")) or os.path.isabs(value):
        return False
    segments = value.replace("\\", "/").split("/")
    return ".." not in segments
