"""Durability at the edges (README §5, §9; operations.md §1.1, §4.2): one serve per database file even
through a symlink, readiness while a full disk refuses requests' commits, and the answer of a request
that the drain's deadline cuts."""

from __future__ import annotations

import resource
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from gateway import AUTH, GatewayFactory, RunningGateway, hooks_config


def test_second_serve_through_a_symlinked_path_is_refused(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """operations.md §1.1: "With SQLite, a second `serve` on the same database file refuses to start:
    `database <path> is in use by another hookgate serve process` (an exclusive lock on `<path>.lock`)."
    operations.md §4.2: "One `serve` process per database file"."""
    first = gateway_factory()
    other = tmp_path / "other"
    other.mkdir()
    (other / "link.db").symlink_to(first.workdir / "hookgate.db")  # the very same database file
    cfg = hooks_config()
    cfg["storage"]["sqlite"]["path"] = "link.db"
    second = RunningGateway(other, cfg)
    try:
        try:
            second.start()
            started = True
        except RuntimeError:
            started = False
        if started:  # both processes now write (and run workers on) one file
            with second.client() as c:
                assert c.post("/hooks/wake", json={"text": "via second"}, headers=AUTH).status_code == 200
            with sqlite3.connect(first.workdir / "hookgate.db") as conn:
                assert conn.execute("SELECT count(*) FROM system_events WHERE text = 'via second'").fetchone()[0] == 1
    finally:
        second.stop()
    assert not started, "a second serve started on the same database file (reached through a symlink)"
    assert "is in use by another hookgate serve process" in second.stderr()


def fill_the_disk(gw: RunningGateway) -> list[str]:
    """Make the disk full for the server only: RLIMIT_FSIZE just above the files' size now (Python
    ignores SIGXFSZ, so SQLite's write gets EFBIG → "disk I/O error"), then wakes until one is refused.
    Returns the texts of the wakes acknowledged meanwhile (``free_the_disk`` undoes it)."""
    sizes = [p.stat().st_size for p in gw.workdir.iterdir() if p.is_file()]
    limit = max(sizes) + 200_000
    assert gw.proc is not None
    _, hard = resource.prlimit(gw.proc.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(gw.proc.pid, resource.RLIMIT_FSIZE, (limit, hard))  # the soft limit: free_the_disk lifts it
    acked: list[str] = []
    with gw.client() as c:
        for i in range(200):  # fill what is left
            text = f"big{i} " + "x" * 20000
            r = c.post("/hooks/wake", json={"text": text, "mode": "next-heartbeat"}, headers=AUTH)
            if r.status_code == 200:
                acked.append(f"big{i}")
        for i in range(500):
            r = c.post("/hooks/wake", json={"text": f"small{i}", "mode": "next-heartbeat"}, headers=AUTH)
            if r.status_code != 200:
                break
            acked.append(f"small{i}")
    return acked


def free_the_disk(gw: RunningGateway) -> None:
    assert gw.proc is not None
    _, hard = resource.prlimit(gw.proc.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(gw.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))


def test_readyz_reports_store_while_a_full_disk_fails_every_write(gateway_factory: GatewayFactory) -> None:
    """operations.md §4.2: "If the database cannot be written (disk full, I/O error), affected requests get
    503 (README §5) and `/readyz` reports `store`." README §6: /readyz is 503 with `failing` listing
    "store" unless a store round-trip succeeds."""
    cfg = hooks_config()
    gw = gateway_factory(cfg, args=("--no-worker",))
    with gw.client() as c:
        assert c.post("/hooks/wake", json={"text": "before", "mode": "next-heartbeat"}, headers=AUTH).status_code == 200
    acked = fill_the_disk(gw)
    with gw.client() as c:
        observed = []
        for i in range(5):
            wake = c.post("/hooks/wake", json={"text": f"tiny{i}", "mode": "next-heartbeat"}, headers=AUTH)
            ready = c.get("/readyz")
            observed.append((wake.status_code, ready.status_code, ready.json()["failing"]))
    # every write is refused ...
    assert [w for w, _, _ in observed] == [503] * 5, observed
    # ... and nothing acknowledged was lost (this part holds)
    gw.kill9()
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        stored = {t.split(" ", 1)[0] for (t,) in conn.execute("SELECT text FROM system_events")}
    assert set(acked) <= stored
    # ... and readiness says so
    assert [(r, f) for _, r, f in observed] == [(503, ["store"])] * 5, observed


def test_a_request_cut_by_the_drain_timeout_still_gets_a_json_answer(gateway_factory: GatewayFactory) -> None:
    """README §5: "Every response body is JSON, `Content-Type: application/json; charset=utf-8`" …
    "An unexpected exception gives `500`: Surface B `{"ok":false,"error":"Internal Server Error"}` …
    Nothing was committed." / "The store being unreachable or failing a commit gives `503` with
    `Retry-After: 1`". operations.md §1.1: on SIGTERM "requests in progress finish".

    A wake waits for the write lock (another process holds it, within busyTimeoutMs) when SIGTERM
    arrives; drainTimeoutSeconds (1 s) ends before the lock is released."""
    cfg = hooks_config(bodyTimeoutSeconds=10)
    cfg["gateway"] = {"drainTimeoutSeconds": 1}
    gw = gateway_factory(cfg, args=("--no-worker",))
    blocker = sqlite3.connect(gw.workdir / "hookgate.db", isolation_level=None, timeout=5)
    blocker.execute("BEGIN IMMEDIATE")
    result: dict[str, Any] = {}

    def send() -> None:
        try:
            with gw.client() as c:
                result["r"] = c.post("/hooks/wake", json={"text": "waiting", "mode": "next-heartbeat"},
                                     headers=AUTH)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            result["r"] = exc

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(0.3)  # the request now waits for the writer
    gw.signal(signal.SIGTERM)
    time.sleep(2.5)
    blocker.execute("ROLLBACK")
    blocker.close()
    sender.join(15)
    assert gw.proc is not None and gw.proc.wait(10) == 0
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        committed = conn.execute("SELECT count(*) FROM system_events WHERE text = 'waiting'").fetchone()[0]
    r = result["r"]
    assert not isinstance(r, Exception), r
    assert committed == 0 or r.status_code == 200
    assert r.headers.get("content-type") == "application/json; charset=utf-8", (r.status_code, r.headers, r.text)
    if r.status_code == 500:
        assert r.content == b'{"ok":false,"error":"Internal Server Error"}'
    elif r.status_code == 503:
        assert r.content == b'{"ok":false,"error":"Service Unavailable"}' and r.headers["retry-after"] == "1"
    else:
        assert r.status_code == 200 and committed == 1


def test_a_full_disk_for_a_while_costs_a_run_no_attempt_and_floods_no_log(gateway_factory: GatewayFactory) -> None:
    """A run whose model call ended while the disk was full: its end could not commit, nor its lease
    be renewed. It used to be given up at once (a failed renewal cancelled the call; a failed end
    threw the reply away): its lease ran out and attempt 2 called the model again — a second such
    failure ended it `lost` although the process never died. Now the end is committed once the disk
    has room, the call made once. Meanwhile the worker's tick, failing, went round again at once:
    thousands of `store.error` lines a second. And every line stays JSON (an unretrieved task
    exception printed a traceback)."""
    cfg = hooks_config()
    cfg["storage"]["leaseSeconds"] = 10
    cfg["agents"] = {"list": [{"id": "main", "default": True, "heartbeat": {"every": "1s", "prompt": "Anything?"}}]}
    gw = gateway_factory(cfg)
    with gw.client() as c:
        r = c.post("/hooks/agent", json={"message": "[[echo:sleep=4]] slow", "deliver": False}, headers=AUTH)
    assert r.status_code == 200
    run_id = r.json()["runId"]
    started = time.monotonic()
    fill_the_disk(gw)
    with gw.client() as c:
        assert c.post("/hooks/wake", json={"text": "refused", "mode": "now"}, headers=AUTH).status_code == 503
    time.sleep(max(0.0, started + 7 - time.monotonic()))  # the call has ended (4 s), its end waits
    free_the_disk(gw)

    def ended() -> Any:
        with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
            return conn.execute("SELECT status, attempt FROM runs WHERE run_id = ?", (run_id,)).fetchone()

    deadline = time.monotonic() + 20
    while (row := ended()) is None or row[0] == "running":
        assert time.monotonic() < deadline, row
        time.sleep(0.1)
    assert row == ("ok", 1)
    events = gw.flushed_log_events()
    assert [e["event"] for e in events if e.get("run_id") == run_id and e["event"].startswith("run.")] == [
        "run.claimed", "run.started", "run.finished"]
    store_errors = [e for e in events if e["event"] == "store.error" and e["operation"].startswith("worker.")]
    assert store_errors and len(store_errors) <= 12, len(store_errors)  # once per operation in 10 s
    assert all(e["level"] == "warning" and e["count"] >= 1 for e in store_errors)
    assert {e["error"] for e in store_errors} == {"disk I/O error"}  # SQLite's words, not "store unavailable"
    assert not [e for e in events if e["event"] == "worker.job_failed"]
    text = gw.stderr()
    assert "Traceback" not in text and all(line.startswith("{") for line in text.splitlines()), text[-2000:]


def test_an_outcome_the_disk_has_no_room_for_is_given_up_after_a_lease(gateway_factory: GatewayFactory) -> None:
    """A run's end too big for what the disk has left, while small writes still fit (its lease is
    renewed): its commit is tried again for a lease's length, not for minutes — each failed try fails
    the group commit of the requests beside it and sends /readyz to 503 — then given up as before:
    the run's next attempt meets the same, and the third claim ends it `lost`."""
    cfg = hooks_config(maxBodyBytes=8_000_000)
    cfg["storage"]["leaseSeconds"] = 2
    gw = gateway_factory(cfg)
    big = "[[echo:sleep=3]] " + "lorem ipsum " * 200_000  # ~2.4 MB: prompt, reply and transcript ~7 MB
    with gw.client() as c:
        r = c.post("/hooks/agent", json={"message": big, "deliver": False}, headers=AUTH)
    assert r.status_code == 200
    run_id = r.json()["runId"]
    # an empty WAL (a busy machine may need a few tries), then room for small writes only
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        for _ in range(50):
            if conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the WAL could not be checkpointed")
    conn.close()
    sizes = [p.stat().st_size for p in gw.workdir.iterdir() if p.is_file()]
    assert gw.proc is not None
    _, hard = resource.prlimit(gw.proc.pid, resource.RLIMIT_FSIZE)
    # room for the run's small writes (its claims rewrite its row) however the WAL stands, not for its end
    resource.prlimit(gw.proc.pid, resource.RLIMIT_FSIZE, (max(max(sizes), 4_300_000) + 3_000_000, hard))
    with gw.client() as c:  # small writes still fit
        assert c.post("/hooks/wake", json={"text": "small", "mode": "next-heartbeat"}, headers=AUTH).status_code == 200

    def status() -> Any:
        with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
            return conn.execute("SELECT status, attempt, error FROM runs WHERE run_id = ?", (run_id,)).fetchone()

    deadline = time.monotonic() + 60  # two attempts of (1 s + a lease of tries + the lease running out)
    while (row := status())[0] in ("queued", "running"):
        assert time.monotonic() < deadline, row
        time.sleep(0.2)
    assert row == ("lost", 2, "run interrupted; retry limit reached")
    outcome = [e for e in gw.flushed_log_events() if e["event"] == "store.error" and e["operation"] == "worker.outcome"]
    assert outcome and all(e["key"] == run_id and e["error"] == "disk I/O error" for e in outcome)
    # the first attempt's giving up is logged (the second may fail earlier, at its start's own write,
    # on a disk this full: whether it fits depends on where the WAL stands)
    assert [e["retry"] for e in outcome].count(False) >= 1


def test_a_run_claimed_while_no_file_descriptor_is_left_still_runs(gateway_factory: GatewayFactory) -> None:
    """A flood of connections took every file descriptor the process may have. The first run then
    loaded its agent runtime's module, which needs one: the import failed outside the runtime's
    errors, each attempt was spent on it, and the accepted run ended `lost` without its model ever
    being called. Runtimes and adapters are now built at start."""
    import socket

    gw = gateway_factory(hooks_config())
    assert gw.proc is not None
    kept = socket.create_connection(("127.0.0.1", gw.port))  # a client connected before the flood
    open_now = len(list(Path(f"/proc/{gw.proc.pid}/fd").iterdir()))
    resource.prlimit(gw.proc.pid, resource.RLIMIT_NOFILE, (open_now + 10, open_now + 10))
    flood = []
    try:
        for _ in range(40):  # more than the process may accept: it has none left
            flood.append(socket.create_connection(("127.0.0.1", gw.port)))
        time.sleep(0.5)
        body = b'{"message":"under pressure","deliver":false}'
        kept.sendall(b"POST /hooks/agent HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hook-secret\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        answer = kept.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        run_id = answer.split(b'"runId":"')[1].split(b'"')[0].decode()

        def status() -> Any:
            with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
                return conn.execute("SELECT status, attempt FROM runs WHERE run_id = ?", (run_id,)).fetchone()

        deadline = time.monotonic() + 10
        while (row := status())[0] != "ok":
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
        assert row == ("ok", 1)
    finally:
        for sock in (kept, *flood):
            sock.close()
    assert not [e for e in gw.flushed_log_events() if e["event"] == "worker.job_failed"]
