"""Hook runs with durable idempotency (hooks.md §5.4) and run listing."""

from __future__ import annotations

import asyncio

from storetest import NOW

from hookgate.store import IdempotencyClaim, NewRun
from hookgate.store.base import DeliveryRecord
from hookgate.store.sqlite import SqliteStore

KEY = "agent:hooks:hook:github"


def new_run(run_id: str, *, created_at: int = NOW, kind: str = "hook", agent: str = "hooks") -> NewRun:
    return NewRun(
        run_id=run_id,
        kind=kind,
        agent_id=agent,
        session_key=KEY,
        name="GitHub",  # type: ignore[arg-type]
        inputs={"message": "hi", "deliver": True, "timeoutSeconds": None},
        created_at=created_at,
    )


async def test_enqueue_stores_a_queued_run(store: SqliteStore) -> None:
    result = await store.enqueue_hook_run(new_run("r1"), None)
    assert (result.run_id, result.replayed) == ("r1", False)
    run = await store.get_run("r1")
    assert run is not None
    assert (run.kind, run.agent_id, run.session_key, run.name) == ("hook", "hooks", KEY, "GitHub")
    assert (run.status, run.attempt, run.created_at) == ("queued", 1, NOW)
    assert run.inputs == {"message": "hi", "deliver": True, "timeoutSeconds": None}
    assert run.started_at is None and run.reply is None and run.leased_by is None
    assert len(run.session_id) == 36
    session = await store.get_session(KEY)
    assert session is not None and session.agent_id == "hooks"
    assert await store.get_run("missing") is None


async def test_each_run_gets_a_fresh_session_id(store: SqliteStore) -> None:
    await store.enqueue_hook_run(new_run("r1"), None)
    await store.enqueue_hook_run(new_run("r2"), None)
    r1, r2 = await store.get_run("r1"), await store.get_run("r2")
    assert r1 is not None and r2 is not None and r1.session_id != r2.session_id


async def test_live_record_replays_original_run(store: SqliteStore) -> None:
    claim = IdempotencyClaim("k" * 64, expires_at=NOW + 300_000)
    first = await store.enqueue_hook_run(new_run("r1"), claim)
    assert (first.run_id, first.replayed) == ("r1", False)
    replay = await store.enqueue_hook_run(new_run("r2", created_at=NOW + 299_999), claim)
    assert (replay.run_id, replay.replayed) == ("r1", True)
    assert await store.get_run("r2") is None


async def test_expired_record_is_replaced(store: SqliteStore) -> None:
    claim = IdempotencyClaim("k1", expires_at=NOW + 300_000)
    await store.enqueue_hook_run(new_run("r1"), claim)
    later = IdempotencyClaim("k1", expires_at=NOW + 600_000)
    result = await store.enqueue_hook_run(new_run("r2", created_at=NOW + 300_000), later)
    assert (result.run_id, result.replayed) == ("r2", False)
    replay = await store.enqueue_hook_run(new_run("r3", created_at=NOW + 400_000), later)
    assert (replay.run_id, replay.replayed) == ("r2", True)


async def test_different_key_gives_a_new_run(store: SqliteStore) -> None:
    await store.enqueue_hook_run(new_run("r1"), IdempotencyClaim("k1", NOW + 300_000))
    result = await store.enqueue_hook_run(new_run("r2"), IdempotencyClaim("k2", NOW + 300_000))
    assert (result.run_id, result.replayed) == ("r2", False)


async def test_concurrent_duplicates_start_one_run(store: SqliteStore) -> None:
    claim = IdempotencyClaim("dup", NOW + 300_000)
    results = await asyncio.gather(*(store.enqueue_hook_run(new_run(f"r{i}"), claim) for i in range(50)))
    assert len({r.run_id for r in results}) == 1
    assert sum(not r.replayed for r in results) == 1
    assert len(await store.list_runs(limit=100)) == 1


async def test_sweep_deletes_only_expired_records(store: SqliteStore) -> None:
    await store.enqueue_hook_run(new_run("r1"), IdempotencyClaim("old", NOW + 1000))
    await store.enqueue_hook_run(new_run("r2"), IdempotencyClaim("new", NOW + 5000))
    assert await store.sweep(NOW + 1000) == 1
    assert await store.sweep(NOW + 1000) == 0
    replay = await store.enqueue_hook_run(new_run("r3", created_at=NOW + 2000), IdempotencyClaim("new", 0))
    assert replay.replayed and replay.run_id == "r2"
    assert await store.get_run("r1") is not None  # runs are not swept with their records


async def test_list_runs_filters_newest_first(store: SqliteStore) -> None:
    await store.enqueue_hook_run(new_run("a", created_at=NOW), None)
    await store.enqueue_hook_run(new_run("b", created_at=NOW + 10, kind="task"), None)
    await store.enqueue_hook_run(new_run("c", created_at=NOW + 20, agent="main"), None)

    def start_b(conn):  # type: ignore[no-untyped-def]
        conn.execute("UPDATE runs SET status = 'running' WHERE run_id = 'b'")

    await store._write(start_b)
    assert [r.run_id for r in await store.list_runs()] == ["c", "b", "a"]
    assert [r.run_id for r in await store.list_runs(agent_id="hooks")] == ["b", "a"]
    assert [r.run_id for r in await store.list_runs(kind="task")] == ["b"]
    assert [r.run_id for r in await store.list_runs(statuses=["queued"])] == ["c", "a"]
    assert [r.run_id for r in await store.list_runs(statuses=["running", "ok"])] == ["b"]
    assert [r.run_id for r in await store.list_runs(since_ms=NOW + 10)] == ["c", "b"]
    assert [r.run_id for r in await store.list_runs(limit=1)] == ["c"]


async def test_claim_takes_queued_and_expired_runs_oldest_first(store: SqliteStore) -> None:
    for i in range(6):
        await store.enqueue_hook_run(new_run(f"r{i}", created_at=NOW + i), None)

    def setup(conn):  # type: ignore[no-untyped-def]
        conn.execute("UPDATE runs SET status = 'ok' WHERE run_id = 'r0'")  # finished: never claimed
        conn.execute("UPDATE runs SET status = 'running', leased_by = 'x', lease_until = ? WHERE run_id = 'r1'",
                     (NOW - 1,))  # its worker died: claimable again
        conn.execute("UPDATE runs SET status = 'running', leased_by = 'x', lease_until = ? WHERE run_id = 'r2'",
                     (NOW + 60_000,))  # alive: not claimable
        conn.execute("UPDATE runs SET lease_until = ? WHERE run_id = 'r4'", (NOW + 60_000,))  # released, held back

    await store._write(setup)
    claimed = await store.flow_write(lambda tx: tx.claim_runs("me", NOW, NOW + 30_000, 2))
    assert claimed == ["r1", "r3"]
    assert await store.flow_write(lambda tx: tx.claim_runs("me", NOW, NOW + 30_000, 10)) == ["r5"]
    r1 = await store.get_run("r1")
    assert r1 is not None and (r1.status, r1.attempt) == ("running", 2)


async def test_a_claim_past_attempt_2_keeps_attempt_2s_start_through_a_release(store: SqliteStore) -> None:
    # The claim that finds attempt 2's lease expired counts a third attempt only for the worker to end
    # the run lost; a worker shutting down gives such a claim back (release_run), which set startedAt
    # to NULL, and the next claim stored its own time: the lost run showed a start nothing made.
    await store.enqueue_hook_run(new_run("r"), None)

    async def claim(at: int, who: str) -> None:
        assert await store.flow_write(lambda tx: tx.claim_runs(who, at, at + 10, 1)) == ["r"]

    async def state() -> tuple[str, int, int | None]:
        run = await store.get_run("r")
        assert run is not None
        return run.status, run.attempt, run.started_at

    await claim(NOW, "w1")
    await claim(NOW + 20, "w2")  # w1's lease expired: attempt 2 starts
    assert await state() == ("running", 2, NOW + 20)
    await claim(NOW + 40, "w3")
    assert await state() == ("running", 3, NOW + 20)
    await store.flow_write(lambda tx: tx.release_run("r", "w3", NOW + 41))
    assert await state() == ("queued", 3, NOW + 20)
    await claim(NOW + 50, "w4")
    assert await state() == ("running", 3, NOW + 20)
    await store.flow_write(lambda tx: tx.finish_run("r", "lost", None, "run interrupted; retry limit reached", NOW + 51))
    assert await state() == ("lost", 2, NOW + 20)
    # a queued attempt 1 given back and claimed again starts when it is claimed
    await store.enqueue_hook_run(new_run("q"), None)
    assert await store.flow_write(lambda tx: tx.claim_runs("w1", NOW + 60, NOW + 70, 1)) == ["q"]
    await store.flow_write(lambda tx: tx.release_run("q", "w1", NOW + 61))
    assert (await store.get_run("q")).started_at is None  # type: ignore[union-attr]
    assert await store.flow_write(lambda tx: tx.claim_runs("w1", NOW + 80, NOW + 90, 1)) == ["q"]
    assert (await store.get_run("q")).started_at == NOW + 80  # type: ignore[union-attr]


async def test_claiming_reads_only_the_claimable_runs(store: SqliteStore) -> None:
    """The claim and the backlog count use the partial index of queued/running runs: their cost does
    not grow with the finished runs kept in the table."""
    from hookgate.store.sqlite.flows import FQ

    for i in range(300):
        await store.enqueue_hook_run(new_run(f"done{i}", created_at=NOW + i), None)
    await store.enqueue_hook_run(new_run("late", created_at=NOW + 1000), None)
    await store._write(lambda c: c.execute("UPDATE runs SET status = 'ok' WHERE run_id LIKE 'done%'"))

    def plans(conn):  # type: ignore[no-untyped-def]
        return {name: " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + FQ[name], params))
                for name, params in (("claimable_runs", (NOW, 4)), ("queued_run_count", ()))}

    for name, plan in (await store._read(plans)).items():
        assert "runs_claimable" in plan and "SCAN runs" not in plan, (name, plan)
    assert await store.flow_read(lambda tx: tx.queued_runs()) == 1
    assert await store.flow_write(lambda tx: tx.claim_runs("me", NOW + 2000, NOW + 30_000, 4)) == ["late"]


async def test_runs_of_one_millisecond_are_claimed_in_the_order_they_were_accepted(store: SqliteStore) -> None:
    """Oldest first (model.md §5.4), and a burst accepted within one millisecond keeps its arrival order:
    the tie was broken by the random run id."""
    ids = ["f3", "0a", "c7", "1b", "e2", "5d"]  # arrival order, not sorted
    for run_id in ids:
        await store.enqueue_hook_run(new_run(run_id, created_at=NOW), None)
    assert await store.flow_write(lambda tx: tx.claim_runs("me", NOW, NOW + 30_000, 4)) == ids[:4]
    assert await store.flow_write(lambda tx: tx.claim_runs("me", NOW, NOW + 30_000, 4)) == ids[4:]


async def test_a_clock_step_moves_back_the_deadlines_still_ahead(store: SqliteStore) -> None:
    """The wall clock went back an hour. A retry time written before the step moves back by it and
    keeps what it had left; one written after the step, before the worker's next tick noticed it, was
    on the new clock already: it falls due at once (early, never late). A lease ends at most a lease's
    length from now: one written before the step is cut to that, one renewed since is left alone."""
    hour, lease, longest = 3_600_000, 30_000, 720_000
    now = NOW  # on the new clock
    for run_id in ("before", "after"):
        await store.enqueue_hook_run(new_run(run_id), None)

    def setup(conn):  # type: ignore[no-untyped-def]
        conn.execute("UPDATE runs SET status = 'running', leased_by = 'me', lease_until = ? WHERE run_id = 'before'",
                     (now + hour + 20_000,))  # renewed 10 s before the step
        conn.execute("UPDATE runs SET status = 'running', leased_by = 'me', lease_until = ? WHERE run_id = 'after'",
                     (now + 25_000,))  # renewed 5 s after it

    await store._write(setup)
    for delivery_id, run_id, retry_at in (("d-before", "before", now + hour + 1_000), ("d-after", "after", now + 5_000),
                                          ("d-small", "before", now + 40_000)):
        await store.flow_write(lambda tx, d=delivery_id, r=run_id: tx.record_delivery(
            DeliveryRecord(d, r, "hooks", "webhook", d, "x", "pending"), now))
        await store.flow_write(lambda tx, d=delivery_id, at=retry_at: tx.finish_delivery_attempt(
            d, "pending", at, "retry", 500, "e", now))
    await store.flow_write(lambda tx: tx.rewind_deadlines(now, hour, lease, longest, {}))

    def read(conn):  # type: ignore[no-untyped-def]
        return (dict(conn.execute("SELECT run_id, lease_until FROM runs").fetchall()),
                dict(conn.execute("SELECT delivery_id, next_attempt_at FROM deliveries").fetchall()))

    leases, retries = await store._read(read)
    assert leases == {"before": now + lease, "after": now + 25_000}
    assert retries == {"d-before": now + 1_000, "d-after": now, "d-small": now}
    # a step smaller than the longest wait: a retry written before it still waits only what it had left
    await store.flow_write(lambda tx: tx.finish_delivery_attempt("d-small", "pending", now + 65_000, "retry", 500,
                                                                 "e", now))
    await store.flow_write(lambda tx: tx.rewind_deadlines(now, 60_000, lease, longest, {}))
    _, retries = await store._read(read)
    assert retries["d-small"] == now + 5_000
    # at a start (the step unknown): nothing further ahead than its bound
    await store._write(lambda conn: conn.execute("UPDATE deliveries SET next_attempt_at = ? WHERE delivery_id = "
                                                  "'d-before'", (now + hour,)))
    await store.flow_write(lambda tx: tx.rewind_deadlines(now, 0, lease, longest, {}))
    _, retries = await store._read(read)
    assert retries["d-before"] == now + longest
