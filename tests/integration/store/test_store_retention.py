"""Retention of runs, transcripts, events and wake requests (operations.md §4.1: runDays, eventDays)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from storetest import NOW

from hookgate.store import NewRun
from hookgate.store.base import DeliveryRecord
from hookgate.store.sqlite import SqliteStore

DAY = 86_400_000
MAIN = "agent:main:main"


def run(run_id: str, created_at: int, *, kind: str = "hook", key: str = "agent:main:hook:x") -> NewRun:
    return NewRun(run_id=run_id, kind=kind, agent_id="main", session_key=key, name="Hook",  # type: ignore[arg-type]
                  inputs={"message": "m"}, created_at=created_at)


async def ended_run(store: SqliteStore, run_id: str, ended_at: int, *, status: str = "ok",
                    pending_delivery: bool = False) -> None:
    """An isolated hook run created a minute before it ended, with its prompt and reply in its transcript."""
    await store.enqueue_hook_run(run(run_id, ended_at - 60_000), None)
    record = await store.get_run(run_id)
    assert record is not None

    def finish(tx: Any) -> None:
        tx.append_transcript(record.session_key, record.session_id, "user", "prompt", run_id, ended_at)
        tx.append_transcript(record.session_key, record.session_id, "assistant", "reply", run_id, ended_at)
        tx.finish_run(run_id, status, "reply", None, ended_at)
        if pending_delivery:
            tx.record_delivery(DeliveryRecord(f"d-{run_id}", run_id, "main", "console", "t", "reply", "pending"),
                               ended_at)

    await store.flow_write(finish)


def count(db: Path, sql: str, *params: Any) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(sql, params).fetchone()[0])


async def test_terminal_runs_and_their_isolated_transcripts_are_swept(store: SqliteStore, tmp_path: Path) -> None:
    db = tmp_path / "hookgate.db"
    cutoff = NOW - 30 * DAY
    await ended_run(store, "old-ok", cutoff - 1)
    await ended_run(store, "old-error", cutoff - 5 * DAY, status="error")
    await ended_run(store, "recent", cutoff + 1)
    await ended_run(store, "undelivered", cutoff - 1, pending_delivery=True)
    await store.enqueue_hook_run(run("old-queued", cutoff - DAY), None)  # never ran: not terminal
    # a heartbeat turn writes into the main session's transcript: that history stays with the session
    main_session = await store.flow_write(lambda tx: tx.session_id_of(MAIN, "main", cutoff - 2))

    def heartbeat(tx: Any) -> None:
        tx.insert_finished_run(run("old-heartbeat", cutoff - 2, kind="heartbeat", key=MAIN), main_session, "ok",
                               "HEARTBEAT_OK", None, cutoff - 1)
        tx.append_transcript(MAIN, main_session, "assistant", "turn", "old-heartbeat", cutoff - 1)

    await store.flow_write(heartbeat)

    assert await store.sweep_history(cutoff, 0) == (3, 0)  # old-ok, old-error, old-heartbeat
    for gone in ("old-ok", "old-error", "old-heartbeat"):
        assert await store.get_run(gone) is None
    for kept in ("recent", "undelivered", "old-queued"):
        assert await store.get_run(kept) is not None
    assert count(db, "SELECT count(*) FROM transcript_messages WHERE run_id IN ('old-ok', 'old-error')") == 0
    assert count(db, "SELECT count(*) FROM transcript_messages WHERE run_id = 'recent'") == 2
    assert count(db, "SELECT count(*) FROM transcript_messages WHERE session_key = ?", MAIN) == 1
    assert await store.flow_read(lambda tx: tx.transcript_tail(MAIN, 10)) == [("assistant", "turn")]
    assert await store.sweep_history(cutoff, 0) == (0, 0)


async def test_runs_are_swept_in_batches_until_none_is_left(store: SqliteStore) -> None:
    cutoff = NOW - 30 * DAY
    for i in range(7):
        await ended_run(store, f"r{i}", cutoff - 1 - i)
    assert await store.sweep_history(cutoff, 0, batch=3) == (7, 0)  # 3 + 3 + 1
    assert await store.list_runs(limit=50) == []


async def test_consumed_and_dropped_events_and_consumed_wake_requests_are_swept(store: SqliteStore,
                                                                                tmp_path: Path) -> None:
    db = tmp_path / "hookgate.db"
    old = NOW - 10 * DAY
    for i in range(25):  # 25 distinct events: the queue keeps 20 pending and drops the 5 oldest
        await store.queue_system_event(session_key=MAIN, agent_id="main", text=f"e{i}", now_ms=old + i,
                                       wake_reason="hook:wake" if i < 3 else None)
    pending = await store.flow_read(lambda tx: tx.pending_events(MAIN))
    assert len(pending) == 20
    # a heartbeat turn consumed the 12 oldest pending events and the wake requests made before it
    await store.flow_write(lambda tx: tx.consume_events([seq for seq, _, _ in pending[:12]], "turn", old + 100))
    upto = await store.flow_read(lambda tx: tx.last_pending_heartbeat_request("main"))
    await store.flow_write(lambda tx: tx.finish_heartbeat("main", None, upto, old + 100))
    assert count(db, "SELECT count(*) FROM heartbeat_requests WHERE consumed = 1") >= 1
    # a recent consumed event and a recent wake request stay
    await store.queue_system_event(session_key=MAIN, agent_id="main", text="recent", now_ms=NOW - 1000,
                                   wake_reason="hook:wake")
    recent = [seq for seq, _, text in await store.flow_read(lambda tx: tx.pending_events(MAIN)) if text == "recent"]
    await store.flow_write(lambda tx: tx.consume_events(recent, "turn2", NOW - 500))

    events_cutoff = NOW - 7 * DAY
    runs, events = await store.sweep_history(0, events_cutoff, batch=4)
    assert (runs, events) == (0, 5 + 12)  # dropped + consumed, in batches of 4
    remaining = await store.list_events(agent_id="main", status="all", limit=100)
    assert sorted(e.text for e in remaining) == sorted([f"e{i}" for i in range(17, 25)] + ["recent"])
    assert {e.status for e in remaining if e.text != "recent"} == {"pending"}
    assert count(db, "SELECT count(*) FROM heartbeat_requests WHERE consumed = 1") == 0
    assert count(db, "SELECT count(*) FROM heartbeat_requests WHERE consumed = 0") == 1  # the recent wake
    assert await store.sweep_history(0, events_cutoff) == (0, 0)
