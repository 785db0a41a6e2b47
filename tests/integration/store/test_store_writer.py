"""The writer thread: group commit, per-operation savepoints, commit failures, ping."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest
from storetest import NOW, StoreFactory, sample

from hookgate.errors import StoreUnavailable
from hookgate.obs.metrics import Metrics
from hookgate.store.sqlite import SqliteStore
from hookgate.store.sqlite import backend as sqlite_backend


def insert_session(key: str):  # type: ignore[no-untyped-def]
    def op(conn: sqlite3.Connection) -> str:
        conn.execute(
            "INSERT INTO sessions (key, agent_id, session_id, created_at, updated_at) VALUES (?, 'a', 's', 0, 0)",
            (key,),
        )
        return key

    return op


async def count_sessions(store: SqliteStore) -> int:
    return await store._read(lambda conn: int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0]))


async def test_group_commit_batches_concurrent_writes(make_store: StoreFactory) -> None:
    metrics = Metrics()
    store = await make_store(metrics=metrics)
    commits_before = store.writer.commits
    results = await asyncio.gather(
        *(
            store.queue_system_event(
                session_key=f"agent:a{i % 7}:main",
                agent_id=f"a{i % 7}",
                text=f"t{i}",
                now_ms=NOW,
                wake_reason=None,
            )
            for i in range(500)
        )
    )
    assert all(r.outcome == "queued" for r in results)
    commits = store.writer.commits - commits_before
    assert commits < 500 / 2, commits
    group_count = sample(metrics, "hookgate_store_group_size_count")
    group_sum = sample(metrics, "hookgate_store_group_size_sum")
    assert group_sum >= 500 and group_sum / group_count > 1
    assert sample(metrics, "hookgate_store_commit_seconds_count", backend="sqlite") == group_count


async def test_failing_operation_fails_only_its_waiter(store: SqliteStore) -> None:
    class Boom(Exception):
        pass

    def half_then_fail(conn: sqlite3.Connection) -> None:
        insert_session("doomed")(conn)
        raise Boom("no")

    ops = [store._write(insert_session(f"k{i}")) for i in range(10)]
    ops.insert(5, store._write(half_then_fail))
    ops.insert(7, store._write(insert_session("k3")))  # duplicate key: IntegrityError, only its waiter
    results = await asyncio.gather(*ops, return_exceptions=True)
    assert isinstance(results[5], Boom)
    assert isinstance(results[7], sqlite3.IntegrityError)
    assert [r for i, r in enumerate(results) if i not in (5, 7)] == [f"k{i}" for i in range(10)]
    assert await count_sessions(store) == 10
    assert await store.get_session("doomed") is None


async def test_operational_error_in_an_operation_is_store_unavailable(make_store: StoreFactory) -> None:
    metrics = Metrics()
    store = await make_store(metrics=metrics)

    def bad(conn: sqlite3.Connection) -> None:
        conn.execute("SELECT * FROM no_such_table")

    with pytest.raises(StoreUnavailable) as info:
        await store._write(bad)
    assert info.value.message == "store unavailable" and info.value.status == 503
    assert sample(metrics, "hookgate_store_errors_total", backend="sqlite") == 1
    assert await store._write(insert_session("after")) == "after"


async def test_commit_failure_fails_every_waiter_of_the_group(make_store: StoreFactory,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_backend, "PROBE_AFTER_FAILURE_S", 0.2)
    metrics = Metrics()
    store = await make_store(metrics=metrics)

    # A deferred foreign key violation passes every savepoint and fails at COMMIT.
    def violate(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute(
            "INSERT INTO system_events (session_key, text, created_at, updated_at) VALUES ('ghost', 't', 0, 0)"
        )

    ops = [store._write(insert_session(f"g{i}")) for i in range(5)] + [store._write(violate)]
    results = await asyncio.gather(*ops, return_exceptions=True)
    assert all(isinstance(r, StoreUnavailable) and r.message == "store unavailable" for r in results)
    assert await count_sessions(store) == 0
    assert sample(metrics, "hookgate_store_errors_total", backend="sqlite") == 6
    assert await store.ping() is False  # right after the failure: not probed yet
    await asyncio.sleep(0.25)
    assert await store.ping() is True  # a quiet while later the probe write commits: healthy again
    assert await store._write(insert_session("later")) == "later"


async def test_next_group_starts_before_the_finished_group_wakes(store: SqliteStore) -> None:
    """A group's waiters wake after the next group (queued meanwhile) has run and gone to the disk:
    their responses are written while that commit is in flight."""
    ran: list[str] = []

    def op(name: str):  # type: ignore[no-untyped-def]
        def fn(conn: sqlite3.Connection) -> str:
            ran.append(name)
            return insert_session(name)(conn)

        return fn

    first = store.writer.submit(op("first"))
    while ran != ["first"]:  # the first group runs, its COMMIT goes to the commit thread
        await asyncio.sleep(0)
    second = store.writer.submit(op("second"))  # queued behind that commit
    assert await first == "first"
    assert ran == ["first", "second"]  # the second group ran before the first one's waiter woke
    assert await second == "second"
    assert await count_sessions(store) == 2


async def test_ping(store: SqliteStore) -> None:
    assert await store.ping() is True
    await store.close()
    assert await store.ping() is False


async def test_cancelled_waiter_does_not_break_the_writer(store: SqliteStore) -> None:
    task = asyncio.ensure_future(store._write(insert_session("c1")))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store._write(insert_session("c2")) == "c2"


async def test_writes_after_close_are_refused(store: SqliteStore) -> None:
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.queue_system_event(session_key="s", agent_id="a", text="t", now_ms=0, wake_reason=None)
    with pytest.raises(StoreUnavailable):
        await store.list_events()


async def test_close_drains_submitted_writes(store: SqliteStore, make_store: StoreFactory) -> None:
    futures = [asyncio.ensure_future(store._write(insert_session(f"d{i}"))) for i in range(100)]
    await asyncio.sleep(0)
    await store.close()
    assert [await f for f in futures] == [f"d{i}" for i in range(100)]
    reopened = await make_store()
    assert await count_sessions(reopened) == 100


async def test_an_operation_that_wrote_then_failed_is_undone_alone(store: SqliteStore) -> None:
    """Operations run without a savepoint of their own; one that wrote before raising makes the group
    start over in savepoints: its writes are undone, every other operation's are committed once."""
    def write_then_fail(conn: sqlite3.Connection) -> None:
        insert_session("half")(conn)
        conn.execute("UPDATE sessions SET agent_id = 'changed'")  # touches the rows written before it too
        raise ValueError("after writing")

    def read_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("SELECT count(*) FROM sessions").fetchone()
        raise KeyError("before writing")

    ops = [store._write(insert_session(f"r{i}")) for i in range(6)]
    ops.insert(2, store._write(read_then_fail))
    ops.insert(4, store._write(write_then_fail))
    results = await asyncio.gather(*ops, return_exceptions=True)
    assert isinstance(results[2], KeyError) and isinstance(results[4], ValueError)
    assert [r for i, r in enumerate(results) if i not in (2, 4)] == [f"r{i}" for i in range(6)]
    assert await count_sessions(store) == 6
    assert await store.get_session("half") is None
    assert {s.agent_id for s in [await store.get_session(f"r{i}") for i in range(6)] if s} == {"a"}
    assert await store._write(insert_session("after")) == "after"


_SLOW_COMMITS = textwrap.dedent("""
    import asyncio, sys, time
    from hookgate.obs import logging
    from hookgate.store.sqlite import SqliteStore

    logging.configure(fmt="json")  # lines go to stderr, as in serve

    async def main(path):
        store = SqliteStore(path, durability="full")
        await store.open("serve")
        store.writer.slow_commit_s = 0.0  # every COMMIT counts as slow
        async def wake(n):
            await store.queue_system_event(session_key="agent:a:main", agent_id="a",
                                           text=f"secret-text-{n}", now_ms=n, wake_reason=None)
        await wake(0)                      # logged at once
        for n in range(1, 6):              # within the second: counted, not logged
            await wake(n)
        time.sleep(1.1)
        await wake(6)                      # the next line carries the count
        await store.close()

    asyncio.run(main(sys.argv[1]))
""")


async def test_slow_commits_are_logged_once_a_second_with_durations_only(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _SLOW_COMMITS, str(tmp_path / "slow.db"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3] / "src")},
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    assert b"secret-text" not in stderr
    lines = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    slow = [line for line in lines if line.get("event") == "store.slow_commit"]
    assert [line["count"] for line in slow] == [1, 6]
    for line in slow:
        assert line["level"] == "warning" and line["backend"] == "sqlite"
        assert line["group_size"] >= 1 and 0 <= line["commit_ms"] <= line["max_commit_ms"]
        assert line["commit_ms"] <= line["group_ms"]
        assert set(line) <= {"event", "level", "ts", "instance", "backend", "commit_ms", "group_ms",
                             "group_size", "count", "max_commit_ms"}
