"""System event queue (model.md §4.1) and wake requests (model.md §6.2) on a real SQLite file."""

from __future__ import annotations

import asyncio
import sqlite3

from storetest import NOW, StoreFactory, sample

from hookgate.obs.metrics import Metrics
from hookgate.store.sqlite import SqliteStore

MAIN = "agent:main:main"


async def queue(
    store: SqliteStore,
    text: str,
    *,
    now: int = NOW,
    wake: str | None = None,
    key: str = MAIN,
    agent: str = "main",
) -> tuple[str, int]:
    result = await store.queue_system_event(
        session_key=key, agent_id=agent, text=text, now_ms=now, wake_reason=wake
    )
    return result.outcome, result.dropped


async def test_queued_then_coalesced_only_against_newest_pending(store: SqliteStore) -> None:
    assert await queue(store, "a") == ("queued", 0)
    assert await queue(store, "a") == ("coalesced", 0)
    assert await queue(store, "b") == ("queued", 0)
    # "a" is pending but not the newest: stored again
    assert await queue(store, "a") == ("queued", 0)
    events = await store.list_events(agent_id="main")
    assert [e.text for e in events] == ["a", "b", "a"]  # newest first
    assert all(e.status == "pending" and e.failed_turns == 0 for e in events)
    assert [e.seq for e in events] == sorted((e.seq for e in events), reverse=True)


async def test_coalesce_ignores_non_pending_events(store: SqliteStore) -> None:
    await queue(store, "x")

    def consume(conn):  # type: ignore[no-untyped-def]
        conn.execute("UPDATE system_events SET status = 'consumed'")

    await store._write(consume)
    assert await queue(store, "x") == ("queued", 0)


async def test_empty_text_stores_nothing(store: SqliteStore) -> None:
    assert await queue(store, "", wake="hook:wake") == ("empty", 0)
    assert await store.list_events(status="all") == []
    assert await store.get_session(MAIN) is None
    assert await store.pending_heartbeat_requests("main") == 0


async def test_21st_pending_event_drops_the_oldest(make_store: StoreFactory) -> None:
    metrics = Metrics()
    store = await make_store(metrics=metrics)
    for i in range(20):
        assert await queue(store, f"e{i}") == ("queued", 0)
    assert await queue(store, "e20") == ("queued", 1)
    pending = await store.list_events(status="pending", limit=100)
    assert len(pending) == 20
    assert pending[-1].text == "e1" and pending[0].text == "e20"
    dropped = await store.list_events(status="dropped")
    assert [e.text for e in dropped] == ["e0"]
    assert len(await store.list_events(status="all", limit=100)) == 21
    assert sample(metrics, "hookgate_system_events_total", outcome="dropped") == 1
    assert sample(metrics, "hookgate_system_events_total", outcome="queued") == 21


async def test_cap_drops_the_oldest_pending_not_the_oldest_row(store: SqliteStore) -> None:
    for i in range(21):
        await queue(store, f"e{i}")  # e0 dropped

    def consume_e1(conn):  # type: ignore[no-untyped-def]
        conn.execute("UPDATE system_events SET status = 'consumed' WHERE text = 'e1'")

    await store._write(consume_e1)
    assert await queue(store, "e21") == ("queued", 0)  # 20 pending again: nothing to drop
    assert await queue(store, "e22") == ("queued", 1)
    assert [e.text for e in await store.list_events(status="dropped")] == ["e2", "e0"]
    pending = await store.list_events(status="pending", limit=100)
    assert len(pending) == 20 and pending[-1].text == "e3"


async def test_a_queue_over_the_cap_is_trimmed_to_it(store: SqliteStore) -> None:
    """A queue holding more than 20 pending events (written before the cap, or by hand) is trimmed
    back to the 20 newest by the next event."""
    await queue(store, "first")

    def overfill(conn):  # type: ignore[no-untyped-def]
        for i in range(24):
            conn.execute("INSERT INTO system_events (session_key, text, created_at, status, updated_at) "
                         "VALUES (?, ?, ?, 'pending', ?)", (MAIN, f"old{i}", NOW, NOW))

    await store._write(overfill)
    assert await queue(store, "new") == ("queued", 6)
    pending = await store.list_events(status="pending", limit=100)
    assert len(pending) == 20
    assert pending[0].text == "new" and pending[-1].text == "old5"
    assert {e.text for e in await store.list_events(status="dropped", limit=100)} == {
        "first", "old0", "old1", "old2", "old3", "old4"}


async def test_queues_are_per_session(store: SqliteStore) -> None:
    for i in range(20):
        await queue(store, f"m{i}")
    assert await queue(store, "other", key="agent:hooks:main", agent="hooks") == ("queued", 0)
    assert await queue(store, "m19", key="agent:hooks:main", agent="hooks") == ("queued", 0)
    assert len(await store.list_events(agent_id="main", limit=100)) == 20
    assert [e.text for e in await store.list_events(agent_id="hooks")] == ["m19", "other"]


async def test_event_creates_the_session_once(store: SqliteStore) -> None:
    await queue(store, "first", now=NOW)
    session = await store.get_session(MAIN)
    assert session is not None
    assert (session.agent_id, session.created_at, session.updated_at) == ("main", NOW, NOW)
    assert len(session.session_id) == 36 and session.spawned_by is None
    await queue(store, "second", now=NOW + 5000)
    again = await store.get_session(MAIN)
    assert again is not None and again.session_id == session.session_id and again.created_at == NOW


async def test_wake_records_request_and_pulls_due_time(store: SqliteStore) -> None:
    assert await store.get_heartbeat_schedule("main") is None
    await queue(store, "wake 1", now=NOW, wake="hook:wake")
    schedule = await store.get_heartbeat_schedule("main")
    assert schedule is not None and schedule.due_at == NOW + 250
    assert await store.pending_heartbeat_requests("main") == 1

    # a later wake never pushes the due time back: min(current, now + 250)
    await queue(store, "wake 2", now=NOW + 100, wake="hook:wake")
    schedule = await store.get_heartbeat_schedule("main")
    assert schedule is not None and schedule.due_at == NOW + 250

    # a coalesced event still records its wake request
    assert await queue(store, "wake 2", now=NOW + 120, wake="hook:wake") == ("coalesced", 0)
    assert await store.pending_heartbeat_requests("main") == 3

    # a due time far in the future is pulled in
    def push_due(conn):  # type: ignore[no-untyped-def]
        conn.execute("UPDATE heartbeat_schedule SET due_at = ? WHERE agent_id = 'main'", (NOW + 3_600_000,))

    await store._write(push_due)
    await queue(store, "wake 3", now=NOW + 1000, wake="hook:wake")
    schedule = await store.get_heartbeat_schedule("main")
    assert schedule is not None and schedule.due_at == NOW + 1250


async def test_wakes_of_one_millisecond_record_one_request(store: SqliteStore) -> None:
    """A burst within one millisecond is one request per reason (one turn serves them all); the next
    millisecond, another reason, or the same millisecond after the turn consumed it, records anew."""
    for i in range(5):
        await queue(store, f"burst {i}", now=NOW, wake="hook:wake")
    assert await store.pending_heartbeat_requests("main") == 1
    await queue(store, "other reason", now=NOW, wake="task:t1")
    await queue(store, "same ms again", now=NOW, wake="hook:wake")  # the newest pending is task:t1 now
    assert await store.pending_heartbeat_requests("main") == 3
    await queue(store, "next ms", now=NOW + 1, wake="hook:wake")
    assert await store.pending_heartbeat_requests("main") == 4
    schedule = await store.get_heartbeat_schedule("main")
    assert schedule is not None and schedule.due_at == NOW + 250

    def consume(conn):  # type: ignore[no-untyped-def]
        conn.execute("UPDATE heartbeat_requests SET consumed = 1, consumed_at = ? WHERE agent_id = 'main'", (NOW,))

    await store._write(consume)
    await queue(store, "after the turn", now=NOW + 1, wake="hook:wake")
    assert await store.pending_heartbeat_requests("main") == 1


async def test_wake_on_a_schedule_without_due_time(store: SqliteStore) -> None:
    def disabled(conn):  # type: ignore[no-untyped-def]
        conn.execute("INSERT INTO heartbeat_schedule (agent_id, due_at, updated_at) VALUES ('main', NULL, 0)")

    await store._write(disabled)
    await queue(store, "now", now=NOW, wake="hook:wake")
    schedule = await store.get_heartbeat_schedule("main")
    assert schedule is not None and schedule.due_at == NOW + 250


async def test_next_heartbeat_mode_records_no_request(store: SqliteStore) -> None:
    await queue(store, "later", wake=None)
    assert await store.pending_heartbeat_requests("main") == 0
    assert await store.get_heartbeat_schedule("main") is None


async def test_list_events_filters_and_limit(store: SqliteStore) -> None:
    for i in range(5):
        await queue(store, f"e{i}")
    assert [e.text for e in await store.list_events(limit=2)] == ["e4", "e3"]
    assert await store.list_events(agent_id="nobody") == []
    assert await store.list_events(status="consumed") == []
    assert all(e.agent_id == "main" and e.session_key == MAIN for e in await store.list_events())


# --- one group of operations: the queue is read once per transaction (SqliteStore._queue_view) -------


async def test_a_group_of_wakes_follows_the_rules_one_by_one(store: SqliteStore) -> None:
    """Wakes committed together in one group get the outcomes they would get one after the other."""
    texts = ["a", "a", "b", *(f"e{i}" for i in range(20))]
    commits = store.writer.commits
    outcomes = await asyncio.gather(*(queue(store, t, wake="hook:wake") for t in texts))
    assert store.writer.commits == commits + 1  # one group
    assert outcomes[:3] == [("queued", 0), ("coalesced", 0), ("queued", 0)]
    assert outcomes[3:21] == [("queued", 0)] * 18
    assert outcomes[21:] == [("queued", 1), ("queued", 1)]  # the 21st and 22nd pending push out a and b
    assert [e.text for e in await store.list_events(status="dropped")] == ["b", "a"]
    pending = await store.list_events(status="pending", limit=100)
    assert [e.text for e in pending] == [f"e{i}" for i in reversed(range(20))]
    assert await store.pending_heartbeat_requests("main") == 1  # one millisecond, one reason

    # the next group starts from what the first one committed
    assert await queue(store, "e19") == ("coalesced", 0)
    assert await queue(store, "next") == ("queued", 1)
    assert [e.text for e in await store.list_events(status="dropped")] == ["e0", "b", "a"]


async def test_a_write_between_wakes_of_one_group_is_seen(store: SqliteStore) -> None:
    """Another operation of the same group that changes the queue: the wake after it reads it anew."""

    def append_b(conn):  # type: ignore[no-untyped-def]
        conn.execute("INSERT INTO system_events (session_key, text, created_at, status, updated_at) "
                     "VALUES (?, 'b', ?, 'pending', ?)", (MAIN, NOW, NOW))

    def consume_all(conn):  # type: ignore[no-untyped-def]
        conn.execute("UPDATE system_events SET status = 'consumed'")
        conn.execute("UPDATE heartbeat_requests SET consumed = 1, consumed_at = ?", (NOW,))

    commits = store.writer.commits
    outcomes = await asyncio.gather(
        queue(store, "a", wake="hook:wake"),
        store._write(append_b),
        queue(store, "b", wake="hook:wake"),  # b is the newest pending now
        store._write(consume_all),
        queue(store, "b", wake="hook:wake"),  # nothing pending any more
    )
    assert store.writer.commits == commits + 1
    assert [outcomes[0], outcomes[2], outcomes[4]] == [("queued", 0), ("coalesced", 0), ("queued", 0)]
    assert [e.text for e in await store.list_events(status="pending")] == ["b"]
    assert await store.pending_heartbeat_requests("main") == 1  # recorded again after the consume


async def test_a_failed_operation_in_the_group_leaves_the_queue_as_committed(store: SqliteStore) -> None:
    """An operation that wrote an event and then raised is undone; the wakes around it see the queue
    without its event."""

    def append_then_fail(conn):  # type: ignore[no-untyped-def]
        conn.execute("INSERT INTO system_events (session_key, text, created_at, status, updated_at) "
                     "VALUES (?, 'b', ?, 'pending', ?)", (MAIN, NOW, NOW))
        raise ValueError("boom")

    outcomes = await asyncio.gather(
        queue(store, "a"), store._write(append_then_fail), queue(store, "b"), return_exceptions=True
    )
    assert outcomes[0] == ("queued", 0)
    assert isinstance(outcomes[1], ValueError)
    assert outcomes[2] == ("queued", 0)  # b was never committed
    assert [e.text for e in await store.list_events(status="all")] == ["b", "a"]


async def test_two_agents_sharing_a_session_in_one_group(store: SqliteStore) -> None:
    """Views of one session under two agent ids: a write through one is seen through the other."""
    outcomes = await asyncio.gather(
        queue(store, "a", agent="main", wake="hook:wake"),
        queue(store, "b", agent="other", wake="hook:wake"),
        queue(store, "b", agent="main", wake="hook:wake"),
        queue(store, "c", agent="other", wake="hook:wake"),
    )
    assert outcomes == [("queued", 0), ("queued", 0), ("coalesced", 0), ("queued", 0)]
    assert [e.text for e in await store.list_events(status="pending")] == ["c", "b", "a"]
    assert await store.pending_heartbeat_requests("main") == 1
    assert await store.pending_heartbeat_requests("other") == 1


async def test_a_change_by_another_connection_between_groups_is_seen(store: SqliteStore) -> None:
    """An operator's command (another connection) consumes the queue between two groups."""
    assert await queue(store, "x") == ("queued", 0)
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("UPDATE system_events SET status = 'consumed'")
    finally:
        other.close()
    assert await queue(store, "x") == ("queued", 0)


async def test_a_queue_write_undone_by_a_savepoint_leaves_no_stale_view(store: SqliteStore) -> None:
    """An operation that queued an event and then raised is undone alone (its savepoint); a wake in the
    same group must not see that event as pending (it would be answered "coalesced" and stored nowhere)."""

    def queues_then_fails(conn: sqlite3.Connection) -> None:
        store.queue_event_sync(conn, MAIN, "main", "same", NOW, None)
        raise RuntimeError("after writing")

    def wake(conn: sqlite3.Connection) -> object:
        return store.queue_event_sync(conn, MAIN, "main", "same", NOW + 1, None)

    assert await queue(store, "before") == ("queued", 0)  # the session exists: the wake writes only its event
    failed, woke = await asyncio.gather(store._write(queues_then_fails), store._write(wake), return_exceptions=True)
    assert isinstance(failed, RuntimeError)
    assert woke.outcome == "queued"  # type: ignore[union-attr]
    events = await store.list_events(agent_id="main")
    assert [(e.text, e.status) for e in events] == [("same", "pending"), ("before", "pending")]
