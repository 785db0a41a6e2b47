"""Shared helpers of the store integration tests (fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from hookgate.obs.metrics import Metrics
from hookgate.store.sqlite import SqliteStore

StoreFactory = Callable[..., Awaitable[SqliteStore]]
NOW = 1_790_000_000_000


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
