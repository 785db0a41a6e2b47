"""Races on a real server, made repeatable by another process holding SQLite's write lock (as a CLI
command or a stalled disk would): a lease that expires under a running job, a shutdown while a claim
waits for the writer, overlapping reloads, a wake committed after a heartbeat turn read its events."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import threading
import time
from typing import Any

from gateway import AUTH, GatewayFactory, RunningGateway, wait_for
from workerkit import config, db, post_agent, run_row


def hold_write_lock(gw: RunningGateway, seconds: float) -> None:
    """Another process (a CLI command) holding SQLite's write lock for a while (operations.md §4.1
    busyTimeoutMs): the gateway's writer waits for it."""
    conn = sqlite3.connect(gw.workdir / "hookgate.db", timeout=10, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        time.sleep(seconds)
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_a_lease_that_expires_under_a_running_run_does_not_run_it_twice(gateway_factory: GatewayFactory) -> None:
    """operations.md §4.4 / model.md §5.7: a lease is renewed while the run is active; a run is never
    executed twice at once by one process. A write lock held by another process for ~2 leases delays
    the renewal past the lease; the worker's next tick must not claim the run it is still executing
    (it once did: two concurrent executions, attempt 2 without any crash)."""
    gw = gateway_factory(config())
    run_id = post_agent(gw, message="[[echo:sleep=4]] long job", name="Long", deliver=False)
    wait_for(lambda: run_row(gw, run_id).get("status") == "running")
    time.sleep(0.2)
    # a second request arrives while the lock is held: its commit pokes the worker right after the lock goes
    results: list[int] = []

    def late_request() -> None:
        time.sleep(0.5)
        with gw.client() as c:
            results.append(c.post("/hooks/agent", json={"message": "other", "deliver": False},
                                  headers=AUTH).status_code)

    t = threading.Thread(target=late_request)
    t.start()
    hold_write_lock(gw, 2.2)
    t.join()
    assert results == [200]
    row = wait_for(lambda: (r := run_row(gw, run_id)) and r["status"] not in ("queued", "running") and r, timeout=15)
    time.sleep(4.5)  # let any second execution finish too
    events = gw.flushed_log_events()
    claimed = [e for e in events if e.get("event") == "run.claimed" and e.get("run_id") == run_id]
    started = [e for e in events if e.get("event") == "run.started" and e.get("run_id") == run_id]
    with db(gw) as conn:
        transcript = conn.execute("SELECT count(*) FROM transcript_messages WHERE run_id = ?", (run_id,)).fetchone()[0]
    row = run_row(gw, run_id)
    # one process, no crash: one claim, one execution, attempt 1, one prompt/reply pair
    assert (len(claimed), len(started), row["attempt"], transcript) == (1, 1, 1, 2), (
        len(claimed), len(started), row["attempt"], transcript)


def test_sigterm_while_a_claim_waits_for_the_writer_leaves_nothing_leased(
        gateway_factory: GatewayFactory) -> None:
    """operations.md §1.1: on SIGTERM workers stop claiming; jobs still running are released
    **without consuming an attempt**; model.md §5.7: an orderly shutdown releases its leases.
    The worker's tick has submitted its claim to the writer (which waits for a lock another process
    holds). ``drain`` once cancelled the loop task, but the cancelled claim still committed during
    ``store.close()``: the run stayed ``running``, leased by an exited instance, and came back only as
    attempt 2. Now the tick gives back what it claimed once shutdown began, and the writer does not
    run an operation whose waiter was cancelled before its group ran."""
    gw = gateway_factory(config(gateway={"drainTimeoutSeconds": 1}))
    with gw.client() as c:
        assert c.get("/healthz").status_code == 200
    run_ids: list[str] = []

    def post() -> None:
        try:
            with gw.client() as c:
                r = c.post("/hooks/agent", json={"message": "queued during the lock", "deliver": False},
                           headers=AUTH)
                if r.status_code == 200:
                    run_ids.append(r.json()["runId"])
        except Exception:  # noqa: BLE001, S110 - the request may be cut by the shutdown
            pass

    locker = threading.Thread(target=hold_write_lock, args=(gw, 3.5))
    locker.start()
    time.sleep(0.2)
    poster = threading.Thread(target=post)
    poster.start()
    time.sleep(1.3)  # the worker's 1 s poll submits its claim behind the enqueue
    gw.signal(signal.SIGTERM)
    assert gw.proc is not None
    code = gw.proc.wait(20)
    locker.join()
    poster.join()
    gw.stop()
    assert code == 0
    with db(gw) as conn:
        rows = [dict(r) for r in conn.execute("SELECT run_id, status, attempt, leased_by, started_at FROM runs")]
    # after an orderly exit nothing may stay leased by the exited process
    assert all(r["status"] != "running" and r["leased_by"] is None for r in rows), rows


def test_overlapping_reloads_end_with_the_newest_file(gateway_factory: GatewayFactory, tmp_path: Any) -> None:
    """README §4: SIGHUP re-reads the config and swaps it in atomically. Two reloads overlap (the first
    one resolves a slow exec SecretRef). Applied as each finished, the config read by the *earlier*
    SIGHUP once replaced the later one: the process ran a config that was no longer the file's. Reloads
    now run one at a time, so the last signal's read of the file wins."""
    script = tmp_path / "slow-secret.sh"
    script.write_text('#!/bin/sh\n/bin/cat >/dev/null\n/bin/sleep 2\n'
                      'printf \'{"protocolVersion":1,"values":{"hooks":"v2-token"}}\'\n')
    script.chmod(0o700)
    cfg = config()
    cfg["hooks"]["token"] = "v1-token"
    gw = gateway_factory(cfg)
    v2 = config()
    v2["secrets"] = {"providers": {"slow": {"source": "exec", "command": str(script)}}}
    v2["hooks"]["token"] = {"source": "exec", "provider": "slow", "id": "hooks"}
    gw.config_path.write_text(json.dumps(v2))
    gw.signal(signal.SIGHUP)  # reload #1: reads v2, then waits ~2 s for the exec provider
    time.sleep(0.5)
    v3 = config()
    v3["hooks"]["token"] = "v3-token"
    gw.config_path.write_text(json.dumps(v3))
    gw.signal(signal.SIGHUP)  # reload #2: reads v3 at once
    wait_for(lambda: sum(e.get("event") == "config.loaded" and "trigger" in e for e in gw.flushed_log_events()) >= 2,
             timeout=20)  # both reloads done

    def status(token: str) -> int:
        with gw.client() as c:
            return c.post("/hooks/wake", json={"text": "x"}, headers={"Authorization": f"Bearer {token}"}).status_code

    # the file says v3 and the last SIGHUP was sent after it was written: v3 must be the active config
    assert (status("v3-token"), status("v2-token")) == (200, 401)


def pending_events(gw: RunningGateway) -> list[str]:
    with db(gw) as conn:
        return [r[0] for r in conn.execute("SELECT text FROM system_events WHERE status = 'pending'")]


def test_a_wake_committed_after_the_turn_read_its_events_is_left_for_the_next_turn(
        gateway_factory: GatewayFactory) -> None:
    """model.md §6.2: a wake request is persisted and pulls the heartbeat to now + 250 ms; "if the
    agent's heartbeat is running, the request is kept and examined 1 s after that turn ends".
    A turn once consumed the wake requests *created* before its start, though it saw only the events
    committed at its read: a wake whose commit landed after the read (here: behind the heartbeat claim,
    which waited for another process's write lock) lost its request to a turn that never saw its event,
    and the event waited for the next *scheduled* heartbeat (30 min). A turn now consumes the requests
    its own read saw."""
    gw = gateway_factory(config())
    # a race of one commit's length (the turn's read against the wake's COMMIT): tried a few times
    for i in range(4):
        with gw.client() as c:
            assert c.post("/hooks/wake", json={"text": f"first {i}"}, headers=AUTH).status_code == 200
        results: list[int] = []

        def second(i: int = i, results: list[int] = results) -> None:
            time.sleep(0.6)
            with gw.client() as c:
                results.append(c.post("/hooks/wake", json={"text": f"second {i}"}, headers=AUTH).status_code)

        t = threading.Thread(target=second)
        t.start()
        hold_write_lock(gw, 1.2)  # the claim of the due heartbeat waits for the lock; "second" queues behind it
        t.join()
        assert results == [200]
        # a wake request pulls the turn to +250 ms, or to 1 s after a running turn; the next
        # scheduled one is 30 min away, so waiting up to 10 s for it tells the two apart
        try:
            wait_for(lambda: pending_events(gw) == [], timeout=10)
        except AssertionError:
            pass  # reported below, with what the store holds
        with db(gw) as conn:
            requests = [tuple(r) for r in conn.execute("SELECT reason, created_at, consumed FROM heartbeat_requests "
                                                     "ORDER BY id DESC LIMIT 2")]
            due = conn.execute("SELECT due_at FROM heartbeat_schedule WHERE agent_id = 'main'").fetchone()[0]
        # the event stays pending while its wake request is consumed and the next turn is 30 min away
        assert pending_events(gw) == [], (i, pending_events(gw), requests, due, int(time.time() * 1000))


def test_a_task_cancelled_while_its_run_ends_ends_the_run_cancelled(gateway_factory: GatewayFactory) -> None:
    """webhooks.md §4.12: `cancel_flow` cancels a running executed task and "its runtime call is
    aborted"; model.md §5.1: a task run cancelled so ends `cancelled`. When the call had returned
    and its completion waited for the writer behind `cancel_flow`'s commit (here: another process
    holds the write lock across both), the task ended `cancelled` but its run `ok`, with the reply
    in the transcript. The run now ends `cancelled` too and keeps no reply."""
    cfg = config(agents={"list": [{"id": "main", "default": True}]})
    cfg["plugins"] = {"entries": {"webhooks": {"config": {"routes": {"ci": {
        "sessionKey": "agent:main:main", "secret": "s3cret", "execute": True}}}}}}
    gw = gateway_factory(cfg)
    headers = {"Authorization": "Bearer s3cret"}

    def act(**body: Any) -> dict[str, Any]:
        with gw.client() as c:
            r = c.post("/plugins/webhooks/ci", json=body, headers=headers, timeout=20)
        assert r.status_code == 200, r.text
        return dict(r.json()["result"])

    flow = act(action="create_flow", goal="g")["flow"]
    task = act(action="run_task", flowId=flow["flowId"], runtime="subagent", task="[[echo:sleep=1.5]] job")["task"]
    with db(gw) as conn:
        wait_for(lambda: conn.execute("SELECT status FROM runs WHERE kind = 'task'").fetchone()[0] == "running")
    cancelled: list[dict[str, Any]] = []
    lock = threading.Thread(target=hold_write_lock, args=(gw, 2.5))
    lock.start()  # from now on, nothing commits until the lock goes
    time.sleep(0.3)
    canceller = threading.Thread(target=lambda: cancelled.append(act(action="cancel_flow", flowId=flow["flowId"])))
    canceller.start()  # queued first; the echo's call returns ~1 s later and its completion queues behind
    lock.join()
    canceller.join()
    assert cancelled[0]["cancelled"] is True
    ended = next(t for t in cancelled[0]["tasks"] if t["taskId"] == task["taskId"])
    assert ended["status"] == "cancelled" and ended["error"] == "Cancelled by operator."
    with db(gw) as conn:
        run = wait_for(lambda: (r := conn.execute("SELECT run_id, status, reply, error FROM runs WHERE kind = 'task'")
                                .fetchone()) and r["status"] not in ("queued", "running") and dict(r))
        transcript = conn.execute("SELECT count(*) FROM transcript_messages WHERE run_id = ?",
                                  (run["run_id"],)).fetchone()[0]
    assert (run["status"], run["reply"], run["error"], transcript) == ("cancelled", None, "Cancelled by operator.", 0)


def _counting_provider(tmp_path: Any, seconds: float, answer: bool = True) -> Any:
    """An exec secret provider that notes each call (its pid) in ``calls`` and answers after
    ``seconds`` (or never: it becomes that sleep)."""
    calls = tmp_path / "calls"
    script = tmp_path / "counting-secret.sh"
    reply = 'printf \'{"protocolVersion":1,"values":{"hooks":"hook-secret"}}\'\n' if answer else ""
    script.write_text(f'#!/bin/sh\n/bin/cat >/dev/null\necho $$ >> {calls}\n'
                      f'{"" if answer else "exec "}/bin/sleep {seconds}\n{reply}')
    script.chmod(0o700)
    cfg = config()
    cfg["secrets"] = {"providers": {"counted": {"source": "exec", "command": str(script), "timeoutMs": 120_000}}}
    cfg["hooks"]["token"] = {"source": "exec", "provider": "counted", "id": "hooks"}
    return cfg, calls


def test_a_storm_of_reload_signals_is_one_reload_after_the_running_one(gateway_factory: GatewayFactory,
                                                                      tmp_path: Any) -> None:
    """20 SIGHUPs in 0.2 s ran 20 reloads, each asking every exec secret provider again (10 s of a
    0.5 s provider in the audit). The signals that come while a reload runs wait for one more, which reads the file
    after all of them."""
    cfg, calls = _counting_provider(tmp_path, 2)  # every signal lands while the first reload waits
    gw = gateway_factory(cfg)
    started = len(calls.read_text().splitlines())  # the start's own resolution
    for _ in range(20):
        gw.signal(signal.SIGHUP)
        time.sleep(0.01)
    wait_for(lambda: sum(e.get("event") == "config.loaded" and "trigger" in e for e in gw.flushed_log_events()) >= 2,
             timeout=20)
    time.sleep(2.5)  # time for a third, if one were coming
    reloads = [e for e in gw.flushed_log_events() if e.get("event") == "config.loaded" and "trigger" in e]
    assert len(reloads) == 2 and len(calls.read_text().splitlines()) - started == 2, reloads
    with gw.client() as c:
        assert c.post("/hooks/wake", json={"text": "x"}, headers=AUTH).status_code == 200


def test_a_stop_during_a_slow_reload_does_not_wait_for_it(gateway_factory: GatewayFactory, tmp_path: Any) -> None:
    """SIGTERM while a reload waits on an exec provider: shutdown.completed came at once, but the
    process exited only when the provider answered (14.5 s for a 15 s provider)."""
    gw = gateway_factory(config())
    cfg, calls = _counting_provider(tmp_path, 60, answer=False)
    gw.config_path.write_text(json.dumps(cfg))
    gw.signal(signal.SIGHUP)
    wait_for(lambda: calls.exists() and calls.read_text().endswith("\n"))
    assert gw.proc is not None
    try:
        gw.proc.send_signal(signal.SIGTERM)
        assert gw.proc.wait(timeout=10) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):  # the provider's runner may have ended it
            os.kill(int(calls.read_text().split()[0]), signal.SIGKILL)
