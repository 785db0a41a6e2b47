"""Durable state behind one ``Store`` protocol (operations.md §4); ``open_store`` picks the backend."""

from __future__ import annotations

from hookgate.clock import Clock
from hookgate.config.settings import POSTGRES_UNAVAILABLE, StorageSettings
from hookgate.obs.metrics import Metrics
from hookgate.store.base import (
    EnqueueResult,
    EventRecord,
    HeartbeatSchedule,
    IdempotencyClaim,
    NewRun,
    RunRecord,
    SessionRecord,
    Store,
    StoreOpenError,
    StoreRole,
    WakeResult,
)

__all__ = [
    "EnqueueResult",
    "EventRecord",
    "HeartbeatSchedule",
    "IdempotencyClaim",
    "NewRun",
    "RunRecord",
    "SessionRecord",
    "Store",
    "StoreOpenError",
    "StoreRole",
    "WakeResult",
    "open_store",
]


def open_store(
    settings: StorageSettings, *, metrics: Metrics | None = None, clock: Clock | None = None
) -> Store:
    """The configured store, not yet opened: ``await store.open(role)`` before use."""
    if settings.backend == "sqlite":
        from hookgate.store.sqlite import SqliteStore

        return SqliteStore(
            settings.sqlite_path,
            durability=settings.durability,
            group_commit_ms=settings.group_commit_ms,
            busy_timeout_ms=settings.busy_timeout_ms,
            metrics=metrics,
            clock=clock,
        )
    if settings.backend == "postgres":
        raise StoreOpenError(POSTGRES_UNAVAILABLE)
    raise ValueError(f"unknown storage backend {settings.backend!r}")
