"""The embedded SQLite backend of the store."""

from __future__ import annotations

from hookgate.store.sqlite.backend import SqliteStore

__all__ = ["SqliteStore"]
