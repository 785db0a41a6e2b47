"""``storage.sqlite.checkpoint: "background"``: the checkpoint thread copies pages while the writer
commits, the WAL still starts over, and closing leaves nothing open."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from pathlib import Path

import pytest
from storetest import StoreFactory

from hookgate.store.sqlite import SqliteStore, checkpoint


def insert_sessions(keys: list[str]):  # type: ignore[no-untyped-def]
    def op(conn: sqlite3.Connection) -> int:
        conn.executemany(
            "INSERT INTO sessions (key, agent_id, session_id, created_at, updated_at) VALUES (?, 'a', 's', 0, 0)",
            [(k,) for k in keys],
        )
        return len(keys)

    return op


async def write_random_keys(store: SqliteStore, groups: int, writers: int = 16, per_op: int = 8) -> list[str]:
    """``groups`` rounds of ``writers`` concurrent operations, each inserting ``per_op`` random-key
    sessions (random keys: every insert lands on its own index page, as flow and run ids do)."""
    written: list[str] = []
    for _ in range(groups):
        batches = [[f"hook:{uuid.uuid4()}" for _ in range(per_op)] for _ in range(writers)]
        await asyncio.gather(*(store._write(insert_sessions(b)) for b in batches))
        for b in batches:
            written.extend(b)
    return written


def open_fds() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


def wal_frames(path: Path) -> int:
    size = path.with_name(path.name + "-wal").stat().st_size
    return max(0, size - 32) // (4096 + 24)


async def test_background_checkpoints_copy_pages_and_the_wal_still_starts_over(
    tmp_path: Path, make_store: StoreFactory
) -> None:
    path = tmp_path / "hookgate.db"
    store = await make_store(path=path, checkpoint="background")
    checkpointer = store._checkpointer
    assert checkpointer is not None
    keys = await write_random_keys(store, groups=400)
    assert checkpointer.passes > 0 and checkpointer.failures == 0
    # ~200 000 frames' worth of pages went through the WAL; it kept starting over near SQLite's
    # 1 000-frame threshold instead of growing with every write (a checkpoint on another
    # connection alone never catches up with a busy writer)
    assert wal_frames(path) < 3000
    count = await store._read(lambda c: int(c.execute("SELECT count(*) FROM sessions").fetchone()[0]))
    assert count == len(keys)


async def test_the_default_has_no_checkpoint_thread(make_store: StoreFactory) -> None:
    store = await make_store()
    assert store._checkpointer is None
    cli = await make_store(role="cli", path=Path(store.path).with_name("other.db"), checkpoint="background")
    assert cli._checkpointer is None  # CLI commands open, write a little and close: SQLite's own suffices


async def test_close_stops_the_thread_and_releases_the_file(tmp_path: Path) -> None:
    path = tmp_path / "hookgate.db"
    before = open_fds()
    store = SqliteStore(path, checkpoint="background")
    await store.open("serve")
    keys = await write_random_keys(store, groups=50)
    checkpointer = store._checkpointer
    assert checkpointer is not None and str(path) in open_fds()
    await store.close()
    assert not checkpointer._thread.is_alive()
    assert open_fds() == before  # the database, its WAL and the lock file all closed
    assert not path.with_name(path.name + "-wal").exists()  # the last connection checkpointed and removed it
    again = SqliteStore(path, checkpoint="background")
    await again.open("serve")  # the serve lock was released
    try:
        count = await again._read(lambda c: int(c.execute("SELECT count(*) FROM sessions").fetchone()[0]))
        assert count == len(keys)
    finally:
        await again.close()


async def test_a_failing_pass_is_logged_once_and_commits_go_on(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged: list[tuple[str, dict[str, object]]] = []

    class Recorder:
        def warning(self, event: str, **fields: object) -> None:
            logged.append((event, fields))

    def failing_sync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(checkpoint, "get_logger", Recorder)
    monkeypatch.setattr(checkpoint, "_sync", failing_sync)
    store = await make_store(checkpoint="background")
    checkpointer = store._checkpointer
    assert checkpointer is not None
    await write_random_keys(store, groups=40)
    assert checkpointer.failures > 1 and checkpointer.passes == 0
    # logged once (at most once a minute), not once per failed pass
    assert logged == [("store.checkpoint_failed", {"error": "[Errno 5] Input/output error", "failures": 1})]
    count = await store._read(lambda c: int(c.execute("SELECT count(*) FROM sessions").fetchone()[0]))
    assert count == 40 * 16 * 8  # SQLite's own checkpoint still runs in the commit: nothing is lost
