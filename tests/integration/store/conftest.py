from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hookgate.obs.metrics import Metrics
from hookgate.store.sqlite import SqliteStore

sys.path.insert(0, str(Path(__file__).parent))

from storetest import StoreFactory


@pytest.fixture
async def make_store(tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """Open stores on ``tmp_path/hookgate.db`` (or ``path=``); every one is closed after the test."""
    opened: list[SqliteStore] = []

    async def make(*, role: str = "serve", path: Path | None = None, **kwargs: Any) -> SqliteStore:
        kwargs.setdefault("metrics", Metrics())
        store = SqliteStore(path or tmp_path / "hookgate.db", **kwargs)
        await store.open(role)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
async def store(make_store: StoreFactory) -> SqliteStore:
    return await make_store()
