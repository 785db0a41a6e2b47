"""commit_outcome: a job's outcome committed again while the store fails, for at most a lease."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import pytest

from hookgate.config.loader import load_settings
from hookgate.errors import StoreUnavailable
from hookgate.runtime import settle


class _FailingStore:
    """Every write fails as a full disk does (the cause SQLite's), until ``heals`` writes have failed."""

    def __init__(self, heals: int | None = None) -> None:
        self.heals = heals
        self.tries = 0

    async def flow_write(self, fn: Any) -> Any:
        self.tries += 1
        if self.heals is None or self.tries <= self.heals:
            exc = StoreUnavailable("store unavailable")
            exc.__cause__ = sqlite3.OperationalError("database or disk is full")
            raise exc
        return fn(None)


class _Log:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append({"event": event, **fields})


class _Ctx:
    def __init__(self, store: _FailingStore, lease_seconds: float, tmp_path: Any) -> None:
        (tmp_path / "hookgate.json5").write_text(json.dumps({"storage": {"leaseSeconds": lease_seconds}}))
        self.settings = load_settings(str(tmp_path / "hookgate.json5"), {}, cwd=str(tmp_path))
        self.store = store
        self.log = _Log()


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settle, "SETTLE_WAITS_S", (0.01, 0.02, 0.05))
    monkeypatch.setattr(settle, "_store_errors", settle.LineLimiter(10.0, 16))


def test_an_outcome_is_committed_once_the_store_is_back(tmp_path: Any) -> None:
    ctx = _Ctx(_FailingStore(heals=3), 1, tmp_path)
    assert asyncio.run(settle.commit_outcome(ctx, lambda tx: "stored", "run-1")) == "stored"
    assert ctx.store.tries == 4
    # one line in the interval, standing for the first failure (the rest held back: no flood)
    assert [(e["operation"], e["count"], e["retry"], e["error"]) for e in ctx.log.lines] == [
        ("worker.outcome", 1, True, "database or disk is full")]


def test_it_gives_up_after_a_lease_and_its_lines_count_every_failure(tmp_path: Any) -> None:
    ctx = _Ctx(_FailingStore(), 1, tmp_path)
    for key in ("run-1", "run-2"):
        with pytest.raises(StoreUnavailable):
            asyncio.run(settle.commit_outcome(ctx, lambda tx: None, key))
    lines = ctx.log.lines
    assert [e["retry"] for e in lines].count(False) == 2  # each giving up is written
    assert sum(e["count"] for e in lines) == ctx.store.tries  # and the lines add up to every failure
    assert ctx.store.tries > 10  # tried for about the lease (1 s), not once
