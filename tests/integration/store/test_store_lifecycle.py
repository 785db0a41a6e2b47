"""Opening, locking, migrating, reopening and crashing a real SQLite store."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from storetest import NOW, StoreFactory

from hookgate.config.settings import StorageSettings
from hookgate.store import StoreOpenError, open_store
from hookgate.store.sqlite import SqliteStore
from hookgate.store.sqlite.schema import LATEST_VERSION, parse_named_queries


async def test_second_serve_open_is_refused_cli_open_works(tmp_path: Path, make_store: StoreFactory) -> None:
    path = tmp_path / "hookgate.db"
    serve = await make_store(path=path)
    second = SqliteStore(path)
    with pytest.raises(StoreOpenError) as info:
        await second.open("serve")
    assert str(info.value) == f"database {path} is in use by another hookgate serve process"

    cli = await make_store(path=path, role="cli")
    await serve.queue_system_event(
        session_key="agent:main:main", agent_id="main", text="hi", now_ms=NOW, wake_reason=None
    )
    assert [e.text for e in await cli.list_events()] == ["hi"]
    await cli.queue_system_event(
        session_key="agent:main:main", agent_id="main", text="from cli", now_ms=NOW, wake_reason=None
    )
    assert [e.text for e in await serve.list_events()] == ["from cli", "hi"]

    await serve.close()
    again = await make_store(path=path)  # the lock is released on close
    assert await again.ping()


async def test_cli_writes_leave_checkpoints_to_the_serve_process(tmp_path: Path, make_store: StoreFactory) -> None:
    """Only the serve process's write connection checkpoints while it runs (a second checkpointing
    connection is what SQLite's WAL-reset race needs); a CLI command's pages stay in the WAL until
    the server's next checkpoint, or until the CLI's connection closes as the last one."""
    path = tmp_path / "hookgate.db"
    wal = tmp_path / "hookgate.db-wal"
    serve = await make_store(path=path)
    cli = await make_store(path=path, role="cli")
    size_before = path.stat().st_size

    def insert(conn: sqlite3.Connection) -> None:
        conn.executemany("INSERT INTO sessions (key, agent_id, session_id, created_at, updated_at) "
                         "VALUES (?, 'a', 's', 0, 0)", [(f"hook:{uuid.uuid4()}",) for _ in range(200)])

    for _ in range(60):  # random keys: ~2 000 WAL frames, twice SQLite's checkpoint threshold
        await cli._write(insert)
    assert wal.stat().st_size > 1500 * (4096 + 24)
    assert path.stat().st_size == size_before  # no page left the WAL: the CLI did not checkpoint
    await serve.close()
    await cli.close()  # the last connection checkpoints as it closes
    assert not wal.exists() and path.stat().st_size > size_before
    again = await make_store(path=path)
    count = await again._read(lambda c: int(c.execute("SELECT count(*) FROM sessions").fetchone()[0]))
    assert count == 60 * 200


async def test_lock_file_is_next_to_the_database(tmp_path: Path, make_store: StoreFactory) -> None:
    await make_store()
    assert (tmp_path / "hookgate.db.lock").stat().st_mode & 0o777 == 0o600  # no other user may hold it


async def test_a_new_database_and_its_wal_are_private_whatever_the_umask(tmp_path: Path,
                                                                          make_store: StoreFactory) -> None:
    # under the usual umask 022 they were 0644: any local user could read every prompt and reply
    old = os.umask(0o022)
    try:
        store = await make_store()
        await store._write(lambda c: c.execute("INSERT INTO sessions (key, agent_id, session_id, created_at, "
                                               "updated_at) VALUES ('k', 'a', 's', 0, 0)"))
    finally:
        os.umask(old)
    for name in ("hookgate.db", "hookgate.db-wal", "hookgate.db-shm"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name
    existing = tmp_path / "kept" / "hookgate.db"
    existing.parent.mkdir()
    existing.touch(mode=0o640)
    existing.chmod(0o640)
    await make_store(path=existing)
    assert existing.stat().st_mode & 0o777 == 0o640  # an existing file keeps the mode its operator gave it


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
async def test_a_lock_root_makes_belongs_to_the_databases_owner(tmp_path: Path, make_store: StoreFactory) -> None:
    """Root running a command first made the lock file root's, mode 0600: the user serve runs as
    could not open it. It now belongs to the database's owner."""
    first = await make_store()
    await first.close()
    (tmp_path / "hookgate.db.lock").unlink()
    os.chown(tmp_path / "hookgate.db", 4242, 4343)
    await make_store()
    st = (tmp_path / "hookgate.db.lock").stat()
    assert (st.st_uid, st.st_gid) == (4242, 4343)


async def test_a_serve_that_starts_while_a_command_migrates_waits_for_it(tmp_path: Path) -> None:
    """A command migrating the file holds the serve lock shared; a serve starting meanwhile exited
    with "in use by another hookgate serve process" although none ran. It now waits for the command,
    and still refuses at once when a serve holds the lock."""
    import fcntl

    path = tmp_path / "hookgate.db"
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a command, migrating
    serve = SqliteStore(path)
    opening = asyncio.create_task(serve.open("serve"))
    await asyncio.sleep(0.5)
    assert not opening.done() and not path.exists()  # waiting, on the event loop: nothing opened yet
    fcntl.flock(fd, fcntl.LOCK_UN)
    await asyncio.wait_for(opening, 10)
    try:
        second = SqliteStore(path)
        with pytest.raises(StoreOpenError, match="is in use by another hookgate serve process"):
            await asyncio.wait_for(second.open("serve"), 5)
    finally:
        os.close(fd)
        await serve.close()


async def test_schema_newer_than_code_refuses_to_open(tmp_path: Path, make_store: StoreFactory) -> None:
    path = tmp_path / "hookgate.db"
    store = await make_store(path=path)
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)",
            (LATEST_VERSION + 5,),
        )
    conn.close()
    newer = SqliteStore(path)
    with pytest.raises(StoreOpenError) as info:
        await newer.open()
    assert str(info.value) == (
        f"database schema version {LATEST_VERSION + 5} is newer than this hookgate ({LATEST_VERSION})"
    )
    # the failed open released the serve lock: a retry fails on the schema again, not on the lock
    with pytest.raises(StoreOpenError, match="newer than this hookgate"):
        await SqliteStore(path).open()


async def test_migrations_recorded_once(tmp_path: Path, make_store: StoreFactory) -> None:
    store = await make_store()
    await store.close()
    store = await make_store()
    rows = await store._read(lambda c: c.execute("SELECT version FROM schema_migrations").fetchall())
    assert rows == [(v,) for v in range(1, LATEST_VERSION + 1)]
    pragmas = await store._read(
        lambda c: (
            c.execute("PRAGMA journal_mode").fetchone()[0],
            c.execute("PRAGMA foreign_keys").fetchone()[0],
        )
    )
    assert pragmas == ("wal", 1)


async def test_unopenable_path_is_a_store_open_error(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "missing-dir" / "hookgate.db")
    with pytest.raises(StoreOpenError):
        await store.open("cli")


async def test_data_survives_close_and_reopen(tmp_path: Path, make_store: StoreFactory) -> None:
    from hookgate.store import IdempotencyClaim, NewRun

    store = await make_store(durability="normal")
    await store.queue_system_event(
        session_key="agent:main:main", agent_id="main", text="kept", now_ms=NOW, wake_reason="hook:wake"
    )
    run = NewRun("r1", "hook", "main", "agent:main:hook:x", "X", {"message": "m"}, NOW)
    await store.enqueue_hook_run(run, IdempotencyClaim("idem", NOW + 300_000))
    await store.close()
    reopened = await make_store()
    assert [e.text for e in await reopened.list_events()] == ["kept"]
    assert await reopened.pending_heartbeat_requests("main") == 1
    replay = await reopened.enqueue_hook_run(
        NewRun("r2", "hook", "main", "agent:main:hook:x", "X", {}, NOW + 1),
        IdempotencyClaim("idem", NOW + 300_001),
    )
    assert (replay.run_id, replay.replayed) == ("r1", True)


async def test_open_store_factory(tmp_path: Path) -> None:
    store = open_store(StorageSettings(sqlite_path=str(tmp_path / "f.db"), durability="normal"))
    assert isinstance(store, SqliteStore) and store.durability == "normal"
    await store.open("cli")
    try:
        assert await store.ping()
    finally:
        await store.close()
    with pytest.raises(StoreOpenError, match='"postgres" is not available in this build'):
        open_store(StorageSettings(backend="postgres", postgres_dsn="postgresql://x"))


def test_named_queries_parse() -> None:
    queries = parse_named_queries("-- name: a\nSELECT 1;\n\n-- name: b_2\n-- note\nSELECT 2;\n")
    assert queries == {"a": "SELECT 1;", "b_2": "-- note\nSELECT 2;"}
    with pytest.raises(ValueError, match="duplicate"):
        parse_named_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


_CRASHER = textwrap.dedent("""
    import asyncio, os, signal, sys
    from hookgate.obs import logging
    from hookgate.store.sqlite import SqliteStore

    logging.configure()  # log lines (event.dropped: each writer passes the queue cap) go to stderr, as in serve

    async def main(path, durability):
        store = SqliteStore(path, durability=durability)
        await store.open("serve")
        async def writer(i):
            n = 0
            while True:
                n += 1
                text = f"w{i}-{n}"
                await store.queue_system_event(session_key=f"agent:a{i}:main", agent_id=f"a{i}",
                                               text=text, now_ms=n, wake_reason=None)
                os.write(1, (text + "\\n").encode())  # acknowledged: committed before this line
                if i == 0 and n == 300:
                    os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.gather(*(writer(i) for i in range(16)))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
""")


@pytest.mark.parametrize("durability", ["full", "normal"])
async def test_acknowledged_writes_survive_sigkill(
    tmp_path: Path, make_store: StoreFactory, durability: str
) -> None:
    path = tmp_path / "crash.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CRASHER,
        str(path),
        durability,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3] / "src")},
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == -signal.SIGKILL, stderr.decode()
    acknowledged = stdout.decode().split()
    assert len(acknowledged) >= 300

    store = await make_store(path=path)  # the dead process's lock is gone
    stored = await store._read(lambda c: {row[0] for row in c.execute("SELECT text FROM system_events")})
    missing = [t for t in acknowledged if t not in stored]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"


# the columns runs had in every schema (migration 11 added seq and id_from_seq around them)
RUN_COLUMNS = ("run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt, created_at, "
               "started_at, ended_at, reply, error, leased_by, lease_until, updated_at")


def database_at(path: Path, version: int, session_key: str) -> sqlite3.Connection:
    """A database migrated to ``version`` only (as an older hookgate left it), holding one session."""
    from hookgate.store.sqlite.schema import MIGRATIONS, migrate

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    assert migrate(conn, NOW, MIGRATIONS[:version]) == version
    conn.execute("INSERT INTO sessions (key, agent_id, session_id, created_at, updated_at) "
                 "VALUES (?, 'main', 'sid', 1, 1)", (session_key,))
    return conn


async def test_runs_survive_the_rowid_migration(tmp_path: Path, make_store: StoreFactory) -> None:
    """A database at schema 4 (runs WITHOUT ROWID) opened by this version keeps every run, unchanged."""
    path = tmp_path / "hookgate.db"
    conn = database_at(path, 4, "agent:main:hook:x")
    for i, status in enumerate(["queued", "running", "ok", "error"]):
        conn.execute(
            "INSERT INTO runs (run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt,"
            " created_at, updated_at, reply, leased_by, lease_until) "
            "VALUES (?, 'hook', 'main', 'agent:main:hook:x', 'sid', 'Hook', '{\"message\":\"m\"}', ?, 1, ?, ?, ?, ?, ?)",
            (f"run-{i}", status, NOW - i, NOW - i, f"reply {i}", "w1" if status == "running" else None,
             NOW + 5000 if status == "running" else None),
        )
    before = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY run_id").fetchall()
    conn.close()

    store = await make_store(path=path)
    after = await store._read(lambda c: c.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY run_id").fetchall())
    assert after == before
    table_sql = await store._read(lambda c: c.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()[0])
    assert "WITHOUT ROWID" not in table_sql
    assert (await store.get_run("run-2")).reply == "reply 2"  # type: ignore[union-attr]
    assert [r.run_id for r in await store.list_runs(statuses=["queued", "running"])] == ["run-0", "run-1"]


async def test_events_and_runs_survive_the_check_migration(tmp_path: Path, make_store: StoreFactory) -> None:
    """A database at schema 5 keeps every event and run through migration 6 (CHECKs without IN lists),
    event numbers keep growing past the highest ever used, and the CHECKs still refuse unknown values."""
    path = tmp_path / "hookgate.db"
    conn = database_at(path, 5, "agent:main:main")
    for i, status in enumerate(["pending", "consumed", "dropped", "pending", "pending"]):
        conn.execute("INSERT INTO system_events (session_key, text, created_at, status, updated_at) "
                     "VALUES ('agent:main:main', ?, ?, ?, ?)", (f"e{i}", NOW + i, status, NOW + i))
    conn.execute("DELETE FROM system_events WHERE text = 'e4'")  # the highest seq (5) is gone, not reusable
    for i, (kind, status) in enumerate([("hook", "queued"), ("task", "running"), ("heartbeat", "ok")]):
        conn.execute(
            "INSERT INTO runs (run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt,"
            " created_at, updated_at) VALUES (?, ?, 'main', 'agent:main:main', 'sid', 'Hook', '{}', ?, 1, ?, ?)",
            (f"run-{i}", kind, status, NOW + i, NOW + i))
    events_before = conn.execute("SELECT * FROM system_events ORDER BY seq").fetchall()
    runs_before = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY rowid").fetchall()
    conn.close()

    store = await make_store(path=path)
    assert await store._read(lambda c: c.execute("SELECT * FROM system_events ORDER BY seq").fetchall()) == events_before
    runs_after = await store._read(lambda c: c.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY rowid").fetchall())
    assert runs_after == runs_before
    await store.queue_system_event(session_key="agent:main:main", agent_id="main", text="new", now_ms=NOW,
                                   wake_reason=None)
    newest = (await store.list_events(limit=1))[0]
    assert newest.text == "new" and newest.seq == 6
    assert [e.text for e in await store.list_events(status="pending")] == ["new", "e3", "e0"]

    def bad_event(c: sqlite3.Connection) -> None:
        c.execute("UPDATE system_events SET status = 'lost' WHERE text = 'new'")

    def bad_run(c: sqlite3.Connection) -> None:
        c.execute("UPDATE runs SET kind = 'cron' WHERE run_id = 'run-0'")

    def bad_status(c: sqlite3.Connection) -> None:
        c.execute("UPDATE runs SET status = 'done' WHERE run_id = 'run-0'")

    for op in (bad_event, bad_run, bad_status):
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            await store._write(op)
    sql = await store._read(lambda c: " ".join(r[0] for r in c.execute(
        "SELECT sql FROM sqlite_master WHERE name IN ('system_events', 'runs')")))
    assert " IN (" not in sql


async def test_deliveries_and_attempts_survive_the_delivery_check_migration(
    tmp_path: Path, make_store: StoreFactory
) -> None:
    """A database at schema 6 keeps every delivery and attempt through migration 7 (the deliveries
    CHECK without an IN list): attempt ids keep growing past the highest ever used, deleting a
    delivery still deletes its attempts, and the CHECK still refuses an unknown status."""
    path = tmp_path / "hookgate.db"
    conn = database_at(path, 6, "agent:main:main")
    for i, status in enumerate(["pending", "delivered", "dead"]):
        conn.execute(
            "INSERT INTO deliveries (delivery_id, run_id, agent_id, channel, target, text, status, attempts,"
            " created_at, updated_at, seq, parts_sent, leased_by, lease_until) "
            "VALUES (?, ?, 'main', 'console', 'ops', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (f"d{i}", f"run-{i}", f"reply {i}", status, i, NOW + i, NOW + i, i + 1, i, "w1" if i == 0 else None,
             NOW + 5000 if i == 0 else None))
        for n in range(2):
            conn.execute("INSERT INTO delivery_attempts (delivery_id, at, outcome, http_status, error) "
                         "VALUES (?, ?, ?, ?, ?)", (f"d{i}", NOW + n, "error" if n == 0 else "ok", 500 + n, f"e{n}"))
    conn.execute("DELETE FROM delivery_attempts WHERE id = 6")  # the highest id (6) is gone, not reusable
    deliveries_before = conn.execute("SELECT * FROM deliveries ORDER BY seq").fetchall()
    attempts_before = conn.execute("SELECT * FROM delivery_attempts ORDER BY id").fetchall()
    conn.close()

    store = await make_store(path=path)

    assert await store._read(lambda c: c.execute("SELECT * FROM deliveries ORDER BY seq").fetchall()) == deliveries_before
    assert await store._read(lambda c: c.execute("SELECT * FROM delivery_attempts ORDER BY id").fetchall()) == attempts_before

    def new_attempt(c: sqlite3.Connection) -> int:
        return int(c.execute("INSERT INTO delivery_attempts (delivery_id, at, outcome) VALUES ('d0', ?, 'ok')",
                             (NOW,)).lastrowid or 0)

    assert await store._write(new_attempt) == 7

    def delete_delivery(c: sqlite3.Connection) -> None:
        c.execute("DELETE FROM deliveries WHERE delivery_id = 'd1'")

    await store._write(delete_delivery)
    remaining = await store._read(lambda c: [r[0] for r in c.execute(
        "SELECT delivery_id FROM delivery_attempts ORDER BY id")])
    assert remaining == ["d0", "d0", "d2", "d0"]

    def bad_status(c: sqlite3.Connection) -> None:
        c.execute("UPDATE deliveries SET status = 'sent' WHERE delivery_id = 'd0'")

    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        await store._write(bad_status)
    sql = await store._read(lambda c: c.execute("SELECT sql FROM sqlite_master WHERE name = 'deliveries'").fetchone()[0])
    assert " IN (" not in sql
    assert await store._read(lambda c: c.execute("PRAGMA foreign_key_check").fetchall()) == []


async def test_sessions_and_their_references_survive_the_sessions_rowid_migration(
    tmp_path: Path, make_store: StoreFactory
) -> None:
    """A database at schema 8 keeps every session, event, run and transcript line through migration 9
    (sessions become a rowid table): dropping the old sessions table cascades to nothing, and the
    references are enforced again afterwards."""
    path = tmp_path / "hookgate.db"
    conn = database_at(path, 8, "agent:main:main")
    conn.execute("INSERT INTO sessions (key, agent_id, session_id, spawned_by, last_channel, last_to, created_at,"
                 " updated_at) VALUES ('agent:main:hook:x', 'main', 'sid2', 'agent:main:main', 'console', 'ops', 2, 3)")
    for i in range(3):
        conn.execute("INSERT INTO system_events (session_key, text, created_at, status, updated_at) "
                     "VALUES ('agent:main:main', ?, ?, 'pending', ?)", (f"e{i}", NOW + i, NOW + i))
        conn.execute(
            "INSERT INTO runs (run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt,"
            " created_at, updated_at) VALUES (?, 'hook', 'main', 'agent:main:hook:x', 'sid2', 'Hook', '{}', 'ok', 1,"
            " ?, ?)", (f"run-{i}", NOW + i, NOW + i))
        conn.execute("INSERT INTO transcript_messages (session_key, session_id, role, text, run_id, created_at) "
                     "VALUES ('agent:main:hook:x', 'sid2', 'user', ?, ?, ?)", (f"m{i}", f"run-{i}", NOW + i))
    tables = ("sessions", "system_events", "runs", "transcript_messages")
    columns = {t: RUN_COLUMNS if t == "runs" else "*" for t in tables}
    before = {t: conn.execute(f"SELECT {columns[t]} FROM {t} ORDER BY rowid").fetchall() for t in tables
              if t != "sessions"}
    before["sessions"] = conn.execute("SELECT * FROM sessions ORDER BY key").fetchall()
    conn.close()

    store = await make_store(path=path)
    for table in tables:
        order = "key" if table == "sessions" else "rowid"
        rows = await store._read(
            lambda c, t=table, o=order: c.execute(f"SELECT {columns[t]} FROM {t} ORDER BY {o}").fetchall())
        assert rows == before[table], table
    assert (await store.get_session("agent:main:hook:x")).spawned_by == "agent:main:main"  # type: ignore[union-attr]
    table_sql = await store._read(lambda c: c.execute("SELECT sql FROM sqlite_master WHERE name = 'sessions'").fetchone()[0])
    assert "WITHOUT ROWID" not in table_sql
    assert await store._read(lambda c: c.execute("PRAGMA foreign_key_check").fetchall()) == []

    def orphan_event(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO system_events (session_key, text, created_at, status, updated_at) "
                  "VALUES ('agent:main:nobody', 'x', 1, 'pending', 1)")

    def duplicate_session(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO sessions (key, agent_id, session_id, created_at, updated_at) "
                  "VALUES ('agent:main:main', 'main', 's', 1, 1)")

    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
        await store._write(orphan_event)
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE constraint failed"):
        await store._write(duplicate_session)
    await store.queue_system_event(session_key="agent:main:hook:new", agent_id="main", text="new", now_ms=NOW,
                                   wake_reason=None)
    assert await store.get_session("agent:main:hook:new") is not None


def test_a_foreign_keys_off_migration_that_breaks_a_reference_is_rolled_back(tmp_path: Path) -> None:
    from hookgate.store.sqlite.schema import FOREIGN_KEYS_OFF, MIGRATIONS, Migration, migrate

    conn = database_at(tmp_path / "hookgate.db", len(MIGRATIONS), "agent:main:main")
    conn.execute("INSERT INTO system_events (session_key, text, created_at, status, updated_at) "
                 "VALUES ('agent:main:main', 'e', 1, 'pending', 1)")
    broken = Migration(len(MIGRATIONS) + 1, "broken", f"{FOREIGN_KEYS_OFF}\nDELETE FROM sessions;\n")
    with pytest.raises(sqlite3.IntegrityError, match="dangling references"):
        migrate(conn, NOW, (*MIGRATIONS, broken))
    assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1  # rolled back
    assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == len(MIGRATIONS)
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1  # back on
    conn.close()


def test_a_foreign_keys_off_migration_that_cannot_begin_leaves_foreign_keys_on(tmp_path: Path) -> None:
    from hookgate.store.sqlite.schema import FOREIGN_KEYS_OFF, MIGRATIONS, Migration, migrate

    path = tmp_path / "hookgate.db"
    conn = database_at(path, len(MIGRATIONS), "agent:main:main")
    conn.execute("PRAGMA busy_timeout=50")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    later = Migration(len(MIGRATIONS) + 1, "later", f"{FOREIGN_KEYS_OFF}\nCREATE TABLE t (x);\n")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        migrate(conn, NOW, (*MIGRATIONS, later))
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    other.execute("ROLLBACK")
    assert migrate(conn, NOW, (*MIGRATIONS, later)) == len(MIGRATIONS) + 1
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    other.close()
    conn.close()


def _flow(flow_id: str, owner: str, goal: str) -> Any:
    from hookgate.flows.rules import new_flow
    from hookgate.webhooks.schema import parse_action

    action = parse_action({"action": "create_flow", "goal": goal})
    return new_flow(action, flow_id=flow_id, owner_key=owner, route_controller_id="webhooks/r", now=NOW)  # type: ignore[arg-type]


async def test_flows_survive_the_flow_ids_migration_and_keep_their_ids(tmp_path: Path,
                                                                        make_store: StoreFactory) -> None:
    """A database at schema 9 keeps every flow through migration 10: old (random) ids are still found
    and updated, a new flow's seq is past the highest ever used (the newest old flow was deleted),
    and a new id made from a seq is found by it, also after a restart."""
    path = tmp_path / "hookgate.db"
    conn = database_at(path, 9, "agent:main:main")
    old_ids = [str(uuid.uuid4()) for _ in range(4)]
    for i, flow_id in enumerate(old_ids):
        conn.execute("INSERT INTO flows (flow_id, owner_key, sync_mode, revision, status, notify_policy, goal,"
                     " created_at, updated_at) VALUES (?, 'agent:main:main', 'managed', 0, 'queued', 'done_only',"
                     " ?, ?, ?)", (flow_id, f"old {i}", NOW + i, NOW + i))
    conn.execute("DELETE FROM flows WHERE flow_id = ?", (old_ids[-1],))
    before = conn.execute("SELECT * FROM flows ORDER BY seq").fetchall()
    conn.close()

    store = await make_store(path=path)
    after = await store._read(lambda c: c.execute("SELECT * FROM flows ORDER BY seq").fetchall())
    assert [row[:-1] for row in after] == before  # the same rows; the new last column says "random id"
    assert {row[-1] for row in after} == {0}

    def read(flow_id: str) -> Any:
        return store.flow_read(lambda tx: tx.get_flow(flow_id, "agent:main:main"))

    found = await read(old_ids[1])
    assert found.goal == "old 1" and found.seq == 2
    assert await read(old_ids[-1]) is None
    assert await store.flow_read(lambda tx: tx.get_flow(old_ids[0], "agent:main:other")) is None  # owner isolation
    moved = msgspec.structs.replace(found, revision=1, status="running")
    assert await store.flow_write(lambda tx: tx.update_flow_if_revision(moved, 0))
    assert (await read(old_ids[1])).status == "running"
    assert not await store.flow_write(lambda tx: tx.update_flow_if_revision(moved, 0))  # revision moved on

    def create(tx: Any) -> tuple[str, int]:
        flow_id = tx.new_flow_id()
        return flow_id, tx.insert_flow(_flow(flow_id, "agent:main:main", "new"))

    new_id, seq = await store.flow_write(create)
    assert seq == 5  # 4 was used by the deleted flow
    assert uuid.UUID(new_id).version == 4 and new_id not in old_ids
    assert (await read(new_id)).goal == "new"
    assert await store._read(lambda c: c.execute("SELECT id_from_seq FROM flows WHERE seq = 5").fetchone()) == (1,)

    def duplicate_old_id(tx: Any) -> None:
        tx.insert_flow(_flow(old_ids[0], "agent:main:main", "again"))

    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE constraint failed"):
        await store.flow_write(duplicate_old_id)
    await store.close()

    reopened = await make_store(path=path)
    assert (await reopened.flow_read(lambda tx: tx.get_flow(new_id, "agent:main:main"))).goal == "new"
    assert (await reopened.flow_read(lambda tx: tx.admin_get_flow(old_ids[0]))).goal == "old 0"


async def test_a_new_flow_is_looked_up_by_its_primary_key(make_store: StoreFactory, tmp_path: Path) -> None:
    """No index by id is written for a new flow, and its lookup reads the row by seq; an id that this
    database did not make — random, another database's, or the right one in capitals — finds nothing."""
    store = await make_store()
    other = await make_store(path=tmp_path / "other.db")

    def create(tx: Any) -> str:
        flow_id: str = tx.new_flow_id()
        tx.insert_flow(_flow(flow_id, "agent:main:main", "g"))
        return flow_id

    ids = [await store.flow_write(create) for _ in range(3)]
    foreign = await other.flow_write(create)
    assert len(set(ids)) == 3 and foreign != ids[0]
    for flow_id in ids:
        assert (await store.flow_read(lambda tx, f=flow_id: tx.get_flow(f, "agent:main:main"))).flow_id == flow_id
    for stranger in (str(uuid.uuid4()), foreign, ids[0].upper()):
        assert await store.flow_read(lambda tx, s=stranger: tx.get_flow(s, "agent:main:main")) is None
        assert await store.flow_read(lambda tx, s=stranger: tx.admin_get_flow(s)) is None
    entries = await store._read(lambda c: c.execute("SELECT count(*) FROM flows WHERE id_from_seq = 0").fetchone()[0])
    assert entries == 0  # nothing in the partial index flows_random_id

    seq = store.flow_ids.seq_of(ids[1])  # type: ignore[union-attr]
    from hookgate.store.sqlite.flows import _SELECT_BY_SEQ_OWNED

    plan = await store._read(lambda c: c.execute(
        f"EXPLAIN QUERY PLAN {_SELECT_BY_SEQ_OWNED}", (seq, ids[1], "agent:main:main")).fetchall())
    assert any("INTEGER PRIMARY KEY" in row[-1] for row in plan), plan


async def test_new_flow_ids_in_one_transaction_count_on_and_never_collide(make_store: StoreFactory) -> None:
    """Several new flows in one write transaction, with a flow of another id scheme among them (its
    seq comes from AUTOINCREMENT), and a transaction that fails: every stored flow is found by its id,
    and no seq is used twice, even one whose transaction was rolled back."""
    store = await make_store()

    def several(tx: Any) -> list[str]:
        made = []
        for i in range(3):
            flow_id = tx.new_flow_id()
            tx.insert_flow(_flow(flow_id, "agent:main:main", f"a{i}"))
            made.append(flow_id)
        random_id = str(uuid.uuid4())
        tx.insert_flow(_flow(random_id, "agent:main:main", "random"))
        made.append(random_id)
        flow_id = tx.new_flow_id()
        tx.insert_flow(_flow(flow_id, "agent:main:main", "after"))
        return [*made, flow_id]

    def failing(tx: Any) -> None:
        flow_id = tx.new_flow_id()
        tx.insert_flow(_flow(flow_id, "agent:main:main", "lost"))
        raise RuntimeError("after the insert")

    first, again = await asyncio.gather(store.flow_write(several), store.flow_write(several))
    with pytest.raises(RuntimeError):
        await store.flow_write(failing)
    last = await store.flow_write(several)
    made = first + again + last
    assert len(set(made)) == len(made) == 15
    for flow_id in made:
        assert (await store.flow_read(lambda tx, f=flow_id: tx.admin_get_flow(f))).flow_id == flow_id
    seqs = await store._read(lambda c: [r[0] for r in c.execute("SELECT seq FROM flows ORDER BY seq")])
    assert seqs == list(range(1, 16))
    assert await store._read(lambda c: c.execute("SELECT count(*) FROM flows WHERE goal = 'lost'").fetchone()[0]) == 0


async def test_a_wal_grown_behind_a_long_reader_is_cut_back_when_it_restarts(
        tmp_path: Path, make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader holding an old snapshot (a backup, a `sqlite3` session) keeps the WAL from restarting,
    so it grows; once the reader is gone and the WAL restarts, it is cut back to the limit — it kept
    its largest size for as long as the server ran (on a small disk, space lost until a restart)."""
    from hookgate.store.sqlite import backend

    monkeypatch.setattr(backend, "WAL_SIZE_LIMIT_BYTES", 256 * 1024)
    path = tmp_path / "hookgate.db"
    wal = tmp_path / "hookgate.db-wal"
    store = await make_store(path=path)

    def insert(conn: sqlite3.Connection) -> None:
        conn.executemany("INSERT INTO sessions (key, agent_id, session_id, created_at, updated_at) "
                         "VALUES (?, 'a', 's', 0, 0)", [(f"hook:{uuid.uuid4()}",) for _ in range(200)])

    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM sessions").fetchone()  # a snapshot the WAL must keep
    for _ in range(60):
        await store._write(insert)
    grown = wal.stat().st_size
    assert grown > 12 * 1024 * 1024  # three times what SQLite's checkpoints keep it to (1 000 pages)
    reader.execute("COMMIT")
    reader.close()
    sizes = []
    for _ in range(60):  # past a checkpoint the WAL restarts from its beginning
        await store._write(insert)
        sizes.append(wal.stat().st_size)
    # cut back at the first commit after the restart (to what that commit wrote), then SQLite's usual size
    assert min(sizes) < 1024 * 1024 and max(sizes[sizes.index(min(sizes)):]) < 5 * 1024 * 1024, (grown, sizes)
