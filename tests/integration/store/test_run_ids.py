"""Run ids made from the run's seq (migration 11, store/sqlite/seqids.py), on a real SQLite file."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from storetest import NOW, StoreFactory
from test_store_lifecycle import database_at

from hookgate.store.base import DeliveryRecord, NewRun
from hookgate.store.sqlite.schema import Q

SESSION = "agent:main:main"


def _run(run_id: str | None = None, name: str = "Hook", kind: str = "hook") -> NewRun:
    return NewRun(run_id=run_id, kind=kind, agent_id="main", session_key=SESSION, name=name,  # type: ignore[arg-type]
                  inputs={"message": name}, created_at=NOW)


async def test_runs_survive_the_run_ids_migration_and_keep_their_ids(tmp_path: Path,
                                                                      make_store: StoreFactory) -> None:
    """A database at schema 10 keeps every run through migration 11, in claim order: old (random) ids
    are still found, claimed, finished and delivered for; a new run's id is made from a seq past every
    row; an old id cannot be stored twice."""
    path = tmp_path / "hookgate.db"
    conn = database_at(path, 10, SESSION)
    old_ids = [str(uuid.uuid4()) for _ in range(4)]
    for i, run_id in enumerate(old_ids):
        conn.execute(
            "INSERT INTO runs (run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt,"
            " created_at, updated_at) VALUES (?, 'hook', 'main', ?, 'sid', ?, '{}', 'queued', 1, ?, ?)",
            (run_id, SESSION, f"old {i}", NOW, NOW))  # one millisecond: the rowid decides the order
    conn.execute("DELETE FROM runs WHERE run_id = ?", (old_ids[0],))
    before = conn.execute("SELECT rowid, * FROM runs ORDER BY rowid").fetchall()
    conn.close()

    store = await make_store(path=path)
    after = await store._read(lambda c: c.execute("SELECT * FROM runs ORDER BY seq").fetchall())
    assert [row[:-1] for row in after] == before  # the same rows, seq = the old rowid
    assert {row[-1] for row in after} == {0}  # all in the index of random ids

    found = await store.get_run(old_ids[2])
    assert found is not None and found.name == "old 2"
    assert await store.get_run(old_ids[0]) is None
    claimed = await store.flow_write(lambda tx: tx.claim_runs("w1", NOW, NOW + 60_000, 10))
    assert claimed == old_ids[1:]  # claim order kept
    await store.flow_write(lambda tx: tx.finish_run(old_ids[1], "ok", "done", None, NOW + 1))
    finished = await store.get_run(old_ids[1])
    assert finished is not None and (finished.status, finished.reply) == ("ok", "done")
    assert await store.flow_write(lambda tx: tx.renew_run_lease(old_ids[2], "w1", NOW + 90_000))
    await store.flow_write(lambda tx: tx.release_run(old_ids[3], "w1", NOW + 2))
    assert (await store.get_run(old_ids[3])).status == "queued"  # type: ignore[union-attr]

    await store.flow_write(lambda tx: tx.record_delivery(
        DeliveryRecord("d-old", old_ids[1], "main", "console", "t", "reply", "pending"), NOW))
    job = await store.flow_read(lambda tx: tx.get_delivery("d-old"))
    assert (job.run_kind, job.run_name, job.session_key) == ("hook", "old 1", SESSION)

    new = await store.enqueue_hook_run(_run(name="new"), None)
    assert uuid.UUID(new.run_id).version == 4 and new.run_id not in old_ids
    assert await store._read(lambda c: c.execute("SELECT seq, id_from_seq FROM runs WHERE run_id = ?",
                                                 (new.run_id,)).fetchone()) == (5, 1)
    assert (await store.get_run(new.run_id)).name == "new"  # type: ignore[union-attr]

    def duplicate_old_id(tx: Any) -> None:
        tx.insert_finished_run(_run(old_ids[2], kind="heartbeat"), "sid", "ok", "", None, NOW)

    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE constraint failed"):
        await store.flow_write(duplicate_old_id)
    await store.close()

    reopened = await make_store(path=path)
    assert (await reopened.get_run(new.run_id)).name == "new"  # type: ignore[union-attr]
    assert (await reopened.get_run(old_ids[3])).name == "old 3"  # type: ignore[union-attr]


async def test_a_new_run_is_looked_up_by_its_primary_key(make_store: StoreFactory, tmp_path: Path) -> None:
    """No index by id is written for a run made by the store, and a lookup reads the row by seq; an id
    this database did not make — random, another database's, a flow id, or the right one in capitals —
    finds nothing."""
    store = await make_store()
    other = await make_store(path=tmp_path / "other.db")
    ids = [(await store.enqueue_hook_run(_run(name=f"r{i}"), None)).run_id for i in range(3)]
    foreign = (await other.enqueue_hook_run(_run(), None)).run_id
    flow_id = await store.flow_write(lambda tx: tx.new_flow_id())
    assert len(set(ids)) == 3 and foreign not in ids
    for i, run_id in enumerate(ids):
        assert (await store.get_run(run_id)).name == f"r{i}"  # type: ignore[union-attr]
    for stranger in (str(uuid.uuid4()), foreign, flow_id, ids[0].upper(), "not-a-uuid"):
        assert await store.get_run(stranger) is None
    random_entries = await store._read(
        lambda c: c.execute("SELECT count(*) FROM runs WHERE id_from_seq = 0").fetchone()[0])
    assert random_entries == 0  # nothing in the partial index runs_random_id

    seq = store.run_seq(ids[1])
    plan = await store._read(lambda c: c.execute(f"EXPLAIN QUERY PLAN {Q['get_run']}", (ids[1], seq)).fetchall())
    details = [row[-1] for row in plan]
    assert any("INTEGER PRIMARY KEY" in d for d in details), details
    assert any("runs_random_id" in d for d in details), details  # the probe for random ids


async def test_run_ids_in_one_transaction_count_on_and_never_collide(make_store: StoreFactory) -> None:
    """Several task runs in one write transaction, with a heartbeat run (a random id, its seq from
    AUTOINCREMENT) among them, groups of concurrent hook runs, and a transaction that fails: every
    stored run is found by its id and no seq is used twice."""
    store = await make_store()

    def several(tx: Any) -> list[str]:
        made = []
        for i in range(3):
            run_id = tx.new_run_id()
            tx.enqueue_run(_run(run_id, f"task {i}", "task"))
            made.append(run_id)
        heartbeat = str(uuid.uuid4())
        tx.insert_finished_run(_run(heartbeat, "Heartbeat", "heartbeat"), "sid", "ok", "", None, NOW)
        run_id = tx.new_run_id()
        tx.enqueue_run(_run(run_id, "after", "task"))
        return [*made, heartbeat, run_id]

    def failing(tx: Any) -> None:
        tx.enqueue_run(_run(tx.new_run_id(), "lost", "task"))
        raise RuntimeError("after the insert")

    first, hooks, again = await asyncio.gather(
        store.flow_write(several),
        asyncio.gather(*(store.enqueue_hook_run(_run(name=f"hook {i}"), None) for i in range(5))),
        store.flow_write(several))
    with pytest.raises(RuntimeError):
        await store.flow_write(failing)
    last = await store.flow_write(several)
    made = first + [h.run_id for h in hooks] + again + last
    assert len(set(made)) == len(made) == 20
    for run_id in made:
        assert (await store.get_run(run_id)).run_id == run_id  # type: ignore[union-attr]
    heartbeat = await store.get_run(first[3])
    assert heartbeat is not None and (heartbeat.status, heartbeat.started_at) == ("ok", NOW)
    seqs = await store._read(lambda c: [r[0] for r in c.execute("SELECT seq FROM runs ORDER BY seq")])
    assert seqs == list(range(1, 21))
    assert await store._read(lambda c: c.execute("SELECT count(*) FROM runs WHERE name = 'lost'").fetchone()[0]) == 0
