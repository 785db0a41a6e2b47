"""The embedded SQLite store (operations.md §4.2): one write connection with group commit, a small
read pool, WAL.

Domain methods are thin: each builds a function of a ``sqlite3.Connection`` and hands it to
``_write`` (the group-committing ``Writer``: the function runs in the group's transaction, and only
what it wrote is undone when it raises) or ``_read`` (a pooled read connection inside one read
transaction). Later features add methods the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import sqlite3
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from hookgate import jsonbody
from hookgate.clock import Clock, SystemClock, new_id
from hookgate.errors import StoreUnavailable
from hookgate.obs.logging import LineLimiter, get_logger
from hookgate.obs.metrics import Metrics
from hookgate.runtime.events import MAX_PENDING_EVENTS
from hookgate.runtime.ports import RuntimeTx
from hookgate.store.base import (
    EnqueueResult,
    EventRecord,
    HeartbeatSchedule,
    IdempotencyClaim,
    NewRun,
    RunRecord,
    SessionRecord,
    StoreOpenError,
    StoreRole,
    WakeResult,
)
from hookgate.store.sqlite.flows import FQ, SqliteFlowTx
from hookgate.store.sqlite.schema import (
    LATEST_VERSION,
    Q,
    check_current,
    migrate,
    schema_version,
    start_transcript,
)
from hookgate.store.sqlite.seqids import MAX_SEQ, SeqIds
from hookgate.store.sqlite.seqids import new_key as new_id_key
from hookgate.store.sqlite.writer import Writer

T = TypeVar("T")

WAKE_DELAY_MS = 250  # model.md §6.2: wake requests within 250 ms coalesce into one turn
READ_POOL_SIZE = 4
BULK_READERS = 1  # threads for reads of no bounded size (``_read(bulk=True)``): one at a time
BULK_LIST_MIN_FLOWS = 1_000  # a list_flows longer than this is such a read (~2.5 ms of SQLite per 1 000)
KNOWN_SESSIONS_MAX = 4096
DROP_LOG_INTERVAL_S = 10.0
PROBE_AFTER_FAILURE_S = 1.0  # /readyz probes a failed store with a write only after this long without a failure
SWEEP_BATCH = 500  # rows per retention transaction: a few ms on the event loop
# A WAL is cut back to this size when it restarts (SQLite's journal_size_limit).
WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
# How long a starting serve waits for a command that is migrating the file (a 300 000-run file took 16 s).
MIGRATION_WAIT_S = 600.0
_LOCK_POLL_S = 0.1

# Binding None: the sqlite3 module sends every parameter that is not an exact int, float, str or
# bytearray through its adaptation protocol; for None that is a failed ``__adapt__`` and
# ``__conform__`` lookup, an AttributeError built and dropped each time (~0.3 µs a parameter, and a
# flow row binds eight or more). With an adapter registered, the lookup finds it at once. The value
# bound is the same NULL; the registry is process-wide, so every connection gains.
sqlite3.register_adapter(type(None), lambda value: value)

_encode_json = msgspec.json.Encoder().encode
_decode_json = jsonbody.decoder(dict[str, Any]).decode


class _QueueView:
    """A session's pending events (seqs, oldest first; the newest text) and its agent's newest pending
    wake request, as one write transaction sees them (one ``pending_queue`` row)."""

    __slots__ = ("newest", "pending", "wake_at", "wake_reason")

    def __init__(self, row: tuple[str | None, str | None, str | None, int | None]) -> None:
        seqs, self.newest, self.wake_reason, self.wake_at = row
        self.pending: deque[int] = deque(sorted(map(int, seqs.split(",")))) if seqs else deque()


def _create_private(path: str | os.PathLike[str]) -> None:
    """A new database file is made 0600 (whatever the umask: 022 made it 0644), so its ``-wal`` and
    ``-shm``, which SQLite gives the database's own mode, are too: prompts, replies and transcripts are
    no other local user's to read. An existing file keeps the mode its operator gave it."""
    with contextlib.suppress(OSError):  # it exists; or SQLite says better why it cannot be opened
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


class SqliteStore:
    """``Store`` on one SQLite file. Create, then ``await open()``; ``await close()`` when done."""

    backend = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "full",
        group_commit_ms: float = 2.0,
        busy_timeout_ms: int = 5000,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        ids: Callable[[], str] = new_id,
        read_pool_size: int = READ_POOL_SIZE,
    ) -> None:
        if durability not in ("full", "normal"):
            raise ValueError(f"durability must be 'full' or 'normal', not {durability!r}")
        self.path = Path(path)
        self.durability = durability
        self._group_commit_ms = group_commit_ms
        self._busy_timeout_ms = busy_timeout_ms
        self._metrics = metrics
        self._clock: Clock = clock or SystemClock()
        self._ids = ids
        self._read_pool_size = read_pool_size
        self._writer: Writer | None = None
        self.flow_ids: SeqIds | None = None  # set by open(): the keys are in the database
        self.run_ids: SeqIds | None = None
        self._seq_marks: dict[str, tuple[int, int]] = {}  # table → (writer.txn, last seq next_seq gave in it)
        self._readers: ThreadPoolExecutor | None = None
        self._bulk_reader: ThreadPoolExecutor | None = None
        self._read_local = threading.local()
        self._read_conns: list[sqlite3.Connection] = []
        self._loop_read: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        self._lock_fd: int | None = None
        self._read_only = False  # opened by a command that only reads: every connection read-only
        # Session keys known to be committed: the hot paths skip the existence check for them.
        self._known_sessions: set[str] = set()
        self._drop_log = LineLimiter(DROP_LOG_INTERVAL_S, KNOWN_SESSIONS_MAX)  # event.dropped, per session
        # Pending queues read in the current write transaction (``_queue_view``).
        self._queues: dict[tuple[str, str], _QueueView] = {}
        self._queues_mark: tuple[int, int] | None = None

    # --- lifecycle ---------------------------------------------------------------------------------

    @property
    def writer(self) -> Writer:
        if self._writer is None:
            raise StoreUnavailable("store unavailable")
        return self._writer

    async def open(self, role: StoreRole = "serve") -> None:
        """Take the serve lock (role ``serve``), open the write connection, migrate, start the writer.

        Role ``read`` (a command that only reads) changes nothing in the file: it must exist and hold
        this code's schema and id keys. Raises ``StoreOpenError`` (in use, schema newer than the code
        — or older, for ``read`` —, cannot open the file).
        """
        if self._writer is not None:
            raise RuntimeError("store is already open")
        if role == "serve":
            await self._take_lock()
        # (a failure in _open_sync releases the lock there; a cancellation leaves it held while the
        # thread may still be migrating: the process is ending, and its exit releases it)
        conn = await asyncio.to_thread(self._open_sync, role)
        self._writer = Writer(conn, group_commit_ms=self._group_commit_ms, metrics=self._metrics,
                              busy_timeout_ms=int(self._busy_timeout_ms))
        self._writer.start()
        self._readers = ThreadPoolExecutor(self._read_pool_size, thread_name_prefix="hookgate-store-read")
        self._bulk_reader = ThreadPoolExecutor(BULK_READERS, thread_name_prefix="hookgate-store-bulk-read")

    def _open_sync(self, role: StoreRole) -> sqlite3.Connection:
        if role == "read" and not self.path.is_file():
            # a command that only reads creates nothing: a mistyped path is not an empty store
            raise StoreOpenError(f"cannot open database {self.path}: no such file")
        try:
            # A command that only reads opens the file read-only: with query_only alone its
            # connection, closing as the last one, still folded a WAL a killed server had left into
            # the file.
            self._read_only = role == "read"
            conn = self._connect()
            try:
                if role == "read":  # the file as it is: no migration, no journal mode, no new keys
                    check_current(conn)
                else:
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute(f"PRAGMA synchronous={'FULL' if self.durability == 'full' else 'NORMAL'}")
                    # The WAL grows past its checkpoint size while a reader holds an old snapshot (a
                    # backup, a long `sqlite3` session); without a limit it kept that size for good.
                    conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
                    if role == "cli":
                        # Checkpoints stay with the serve process's write connection, which
                        # checkpoints and then restarts the WAL one after the other. A second
                        # connection checkpointing beside it is what SQLite's WAL-reset race (3.7.0 –
                        # 3.51.2; sqlite.org/wal.html) needs. A CLI command's connection still
                        # checkpoints when it closes as the last one (no server running).
                        conn.execute("PRAGMA wal_autocheckpoint=0")
                    self._migrate(conn, role)
                self.flow_ids = SeqIds(_id_key(conn, "flow_ids", create=role != "read"))
                self.run_ids = SeqIds(_id_key(conn, "run_ids", create=role != "read"))
            except BaseException:
                conn.close()
                raise
        except sqlite3.Error as exc:
            self._release_lock()
            raise StoreOpenError(f"cannot open database {self.path}: {exc}") from exc
        except BaseException:
            self._release_lock()
            raise
        return conn

    def _migrate(self, conn: sqlite3.Connection, role: StoreRole) -> None:
        """Bring the schema up to date; a migration that runs is logged (serve) and, for a command
        that writes, needs the serve lock: a serve process still running on the file is of an older
        version (a serve of this one has migrated it), and must not find its tables changed under it."""
        current = schema_version(conn)
        if current >= LATEST_VERSION:
            migrate(conn, self._clock.now_ms())  # a newer schema is refused there
            return
        if role == "cli":
            self._take_shared_lock(
                f"database {self.path} is of schema version {current} and a hookgate serve process is running "
                f"on it: a serve of this version migrates it to {LATEST_VERSION} when it starts; "
                "run this command after that"
            )
        log = get_logger() if role == "serve" and current else None
        if log is not None:  # (a new file's first migration is no news)
            log.info("store.migrating", from_version=current, to_version=LATEST_VERSION)
        started = time.monotonic()
        migrate(conn, self._clock.now_ms())
        if log is not None:
            log.info("store.migrated", from_version=current, to_version=LATEST_VERSION,
                     duration_ms=round((time.monotonic() - started) * 1000))
        if role == "cli":
            self._release_lock()

    def _connect(self, *, query_only: bool = False) -> sqlite3.Connection:
        if self._read_only:  # SQLite's URI: the path percent-encoded (a ``?`` or ``#`` in it is no parameter)
            # (one leading slash: SQLite reads a path's "//host/…" as a URI authority)
            path = "/" + os.path.abspath(self.path).lstrip("/")
            uri = f"file:{urllib.parse.quote(path)}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=self._busy_timeout_ms / 1000, isolation_level=None,
                                   check_same_thread=False)
        else:
            _create_private(self.path)
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False
            )
        conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
        conn.execute("PRAGMA foreign_keys=ON")
        if query_only:
            conn.execute("PRAGMA query_only=ON")
            # Readers serve point lookups and scans the OS page cache already holds: a small private
            # cache keeps RSS flat as the database grows (the writer keeps SQLite's default).
            conn.execute("PRAGMA cache_size=-256")
        return conn

    def _open_lock(self) -> int:
        # the file's real path: a second config naming it through a symlink meets the same lock
        lock_path = f"{os.path.realpath(self.path)}.lock"
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreOpenError(f"cannot open database {self.path}: {lock_path}: {exc.strerror}") from exc
        if os.geteuid() == 0:
            # root running a command first makes the lock file: it belongs to the database's owner (the
            # user serve runs as), who could not open it otherwise (mode 0600: no other user may take it)
            try:
                owner = os.stat(self.path)
                st = os.fstat(fd)
                if (st.st_uid, st.st_gid) != (owner.st_uid, owner.st_gid) and st.st_uid == 0:
                    os.fchown(fd, owner.st_uid, owner.st_gid)
            except OSError:
                pass  # no database yet: the lock stays root's, as the file will be
        return fd

    async def _take_lock(self) -> None:
        """The serve lock: exclusive. A command migrating the file holds it shared (``_migrate``); a
        serve that starts meanwhile waits for it (it exited "in use by another serve"), up to
        ``MIGRATION_WAIT_S``, on the event loop (a Ctrl-C ends the wait, before anything is opened).
        Raises ``StoreOpenError`` when another serve holds it."""
        fd = self._open_lock()
        deadline = time.monotonic() + MIGRATION_WAIT_S
        waiting = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    pass
                try:  # shared: only commands hold it so, and only while they migrate
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except OSError:
                    raise StoreOpenError(f"database {self.path} is in use by another hookgate serve process") from None
                fcntl.flock(fd, fcntl.LOCK_UN)
                if time.monotonic() > deadline:
                    raise StoreOpenError(f"database {self.path} is being migrated by a hookgate command "
                                         f"for over {MIGRATION_WAIT_S:.0f} s")
                if not waiting:
                    waiting = True
                    get_logger().info("store.waiting", reason="a hookgate command is migrating the database",
                                      path=str(self.path))
                await asyncio.sleep(_LOCK_POLL_S)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def _take_shared_lock(self, busy: str) -> None:
        """The serve lock shared, for a command that migrates: ``StoreOpenError(busy)`` while a serve
        holds it; other commands migrating at the same time share it (each migration re-checks the
        schema version under SQLite's write lock)."""
        fd = self._open_lock()
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreOpenError(busy) from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    async def close(self) -> None:
        """Finish every write submitted so far, close all connections, release the serve lock."""
        writer, self._writer = self._writer, None
        readers, self._readers = self._readers, None
        bulk, self._bulk_reader = self._bulk_reader, None
        if writer is not None:
            writer.stop()
            await writer.join()
        for pool in (readers, bulk):
            if pool is not None:
                await asyncio.to_thread(pool.shutdown, True)
        with self._read_lock:
            conns, self._read_conns = self._read_conns, []
        self._loop_read = None
        for conn in conns:
            conn.close()
        self._release_lock()

    async def ping(self, timeout: float = 1.0) -> bool:
        """A ``SELECT 1`` round trip through the writer; False on timeout, error or after a failed
        commit until a later commit that wrote succeeds."""
        writer = self._writer
        if writer is None:
            return False
        # After a failed commit, probe with a real (no-op) write so readiness can recover by itself;
        # but not while requests' commits keep failing: the probe touches one page and may fit where
        # a request's pages do not (a full disk), so it only speaks after a quiet PROBE_AFTER_FAILURE_S.
        if not writer.healthy and time.monotonic() - writer.failed_at < PROBE_AFTER_FAILURE_S:
            return False
        probe = _select_one if writer.healthy else _probe_write
        try:
            await asyncio.wait_for(self._write(probe), timeout)
        except (TimeoutError, StoreUnavailable, sqlite3.Error):
            return False
        return writer.healthy

    @property
    def writes(self) -> int:
        writer = self._writer
        return 0 if writer is None else writer.writes

    async def release_memory(self) -> None:
        """Empty the page caches of the write connection and the loop's read connection (``PRAGMA
        shrink_memory``): each keeps up to its ``cache_size`` of pages for as long as it lives, and
        after a burst that is most of what the process grew by. The next reads come from the OS's
        page cache. The pool's read connections (256 KiB each) belong to their threads: left as they are."""
        if self._writer is None:
            return
        try:
            await self._write(_shrink_memory)
        except StoreUnavailable:
            return
        if self._loop_read is not None:
            with contextlib.suppress(sqlite3.Error):
                _shrink_memory(self._loop_read)

    # --- extension points --------------------------------------------------------------------------

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in the writer's next group; returns after the group committed.

        ``sqlite3.OperationalError`` and commit failures surface as ``StoreUnavailable``; any other
        exception raised by ``fn`` undoes what ``fn`` wrote and is re-raised here unchanged.
        A caller cancelled while waiting does not undo the write.
        """
        return await self.writer.submit(fn)

    async def _read(self, fn: Callable[[sqlite3.Connection], T], *, inline: bool = False, bulk: bool = False) -> T:
        """Run ``fn`` in one read transaction (sees committed data).

        ``inline``: on the event loop's own read connection — for point reads of a few rows, where a
        hop to the pool thread costs more than the query. Larger reads go to the read pool.
        ``bulk``: a read whose size has no bound (a long ``list_flows``) goes to a thread of its own, one at
        a time, so that such reads use at most one core and never contend with each other for the
        GIL (docs/operations.md, "Lists without a bound").
        """
        readers = self._bulk_reader if bulk else self._readers
        if readers is None:
            raise StoreUnavailable("store unavailable")
        if inline:
            return self._run_read(fn, loop_conn=True)
        return await asyncio.get_running_loop().run_in_executor(readers, self._run_read, fn)

    def _run_read(self, fn: Callable[[sqlite3.Connection], T], loop_conn: bool = False) -> T:
        conn: sqlite3.Connection | None = self._loop_read if loop_conn else getattr(self._read_local, "conn", None)
        try:
            if conn is None:
                conn = self._connect(query_only=True)
                if loop_conn:
                    self._loop_read = conn
                else:
                    self._read_local.conn = conn
                with self._read_lock:
                    self._read_conns.append(conn)
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            if self._metrics is not None:
                self._metrics.store_errors.labels(backend=self.backend).inc()
            raise StoreUnavailable("store unavailable") from exc

    # --- system events and wake requests (model.md §4.1, §6.2; hooks.md §4) ------------------------

    async def queue_system_event(
        self, *, session_key: str, agent_id: str, text: str, now_ms: int, wake_reason: str | None
    ) -> WakeResult:
        if not text:
            return WakeResult("empty", 0)

        def op(conn: sqlite3.Connection) -> WakeResult:
            return self.queue_event_sync(conn, session_key, agent_id, text, now_ms, wake_reason)

        result = await self._write(op)
        self._known_session(session_key)
        self._count_event(result.outcome)
        if result.dropped:
            self._dropped(session_key, result.dropped)
        return result

    def queue_event_sync(
        self, conn: sqlite3.Connection, session_key: str, agent_id: str, text: str, now_ms: int,
        wake_reason: str | None,
    ) -> WakeResult:
        """The queue rules of model.md §4.1 inside the caller's transaction (text already prepared)."""
        self._ensure_session(conn, session_key, agent_id, None, now_ms)
        view = self._queue_view(conn, session_key, agent_id)
        if view.newest == text:
            result = WakeResult("coalesced", 0)
        else:
            seq = conn.execute(Q["insert_event"], (session_key, text, now_ms)).lastrowid
            assert seq is not None  # every INSERT sets it
            view.newest = text
            pending = view.pending
            pending.append(seq)
            dropped = 0
            if len(pending) == MAX_PENDING_EVENTS + 1:  # full: the new one pushes the oldest out
                dropped = conn.execute(Q["drop_event"], (pending.popleft(), now_ms)).rowcount
            elif len(pending) > MAX_PENDING_EVENTS:  # more than the cap (kept by an older version): trim
                dropped = conn.execute(
                    Q["drop_excess_pending_events"], (session_key, MAX_PENDING_EVENTS, now_ms)
                ).rowcount
                while len(pending) > MAX_PENDING_EVENTS:
                    pending.popleft()
            result = WakeResult("queued", dropped)
        if wake_reason is not None and (view.wake_reason != wake_reason or view.wake_at != now_ms):
            _record_wake(conn, agent_id, wake_reason, now_ms)
            view.wake_reason, view.wake_at = wake_reason, now_ms
        self._wrote_queue(conn, session_key, agent_id)
        return result

    def _queue_view(self, conn: sqlite3.Connection, session_key: str, agent_id: str) -> _QueueView:
        """The session's pending queue as this transaction sees it, read once per transaction.

        A group of wakes on one session reads the queue once instead of once per wake (the read was
        over half of a wake's SQL). The views are valid while nothing else has written: same
        ``Writer.txn`` (bumped by a new transaction and by an operation undone to its savepoint) and no
        row changed since the last queue operation finished (``total_changes``, which counts every
        row any statement of this connection changed, rolled back or not). Anything else — another
        operation's write, a failed operation, a new transaction — drops them all.
        """
        writer = self.writer
        if self._queues_mark != (writer.txn, conn.total_changes):
            self._queues.clear()
        self._queues_mark = None  # invalid until this operation has written everything
        key = (session_key, agent_id)
        view = self._queues.get(key)
        if view is None:
            view = self._queues[key] = _QueueView(conn.execute(Q["pending_queue"], key).fetchone())
        return view

    def _wrote_queue(self, conn: sqlite3.Connection, session_key: str, agent_id: str) -> None:
        queues = self._queues
        if len(queues) > 1:  # another view of the same session's events or agent's wakes is now stale
            mine = (session_key, agent_id)
            for key in [k for k in queues if k != mine and (k[0] == session_key or k[1] == agent_id)]:
                del queues[key]
        self._queues_mark = (self.writer.txn, conn.total_changes)

    def _count_event(self, outcome: str, n: int = 1) -> None:
        if self._metrics is not None:
            self._metrics.system_events.inc((outcome,), n)

    def _dropped(self, session_key: str, n: int) -> None:
        """The queue cap (model.md §4.1) dropped the oldest pending events of the session.

        Logged at most once per session per 10 s, with the drops since the last line: while a session's
        queue stays full every wake drops one, and a warning per request would flood the log (and
        cost a write each, warnings being flushed at once)."""
        self._count_event("dropped", n)
        if (count := self._drop_log.due(session_key, n)) is not None:
            get_logger().warning("event.dropped", session_key=session_key, count=count, reason="queue_cap")

    def _known_session(self, key: str) -> None:
        """Remember a session key whose record is committed (session records are never deleted)."""
        known = self._known_sessions
        if len(known) >= KNOWN_SESSIONS_MAX:
            known.clear()
        known.add(key)

    def _ensure_session(
        self, conn: sqlite3.Connection, key: str, agent_id: str, session_id: str | None, now_ms: int
    ) -> None:
        """Create the session record on first use (a fresh transcript id only when it is new)."""
        if key in self._known_sessions:
            return
        if conn.execute(Q["session_exists"], (key,)).fetchone() is None:
            conn.execute(Q["insert_session"], (key, agent_id, session_id or self._ids(), now_ms))

    async def pending_heartbeat_requests(self, agent_id: str) -> int:
        def op(conn: sqlite3.Connection) -> int:
            return int(conn.execute(Q["count_pending_heartbeat_requests"], (agent_id,)).fetchone()[0])

        return await self._read(op)

    async def get_heartbeat_schedule(self, agent_id: str) -> HeartbeatSchedule | None:
        def op(conn: sqlite3.Connection) -> HeartbeatSchedule | None:
            row = conn.execute(Q["get_heartbeat_schedule"], (agent_id,)).fetchone()
            return None if row is None else HeartbeatSchedule(*row)

        return await self._read(op)

    async def list_events(
        self, *, agent_id: str | None = None, status: str = "pending", limit: int = 50
    ) -> list[EventRecord]:
        status_param = None if status == "all" else status

        def op(conn: sqlite3.Connection) -> list[EventRecord]:
            rows = conn.execute(Q["list_events"], (agent_id, status_param, limit)).fetchall()
            return [EventRecord(*row) for row in rows]

        return await self._read(op)

    async def get_session(self, key: str) -> SessionRecord | None:
        def op(conn: sqlite3.Connection) -> SessionRecord | None:
            row = conn.execute(Q["get_session"], (key,)).fetchone()
            return None if row is None else SessionRecord(*row)

        return await self._read(op)

    # --- runs and hook idempotency (model.md §5.1, hooks.md §5.4) ----------------------------------

    async def enqueue_hook_run(self, run: NewRun, idempotency: IdempotencyClaim | None) -> EnqueueResult:
        session_id = run.session_id or self._ids()

        def op(conn: sqlite3.Connection) -> EnqueueResult:
            new = run
            seq: int | None = None
            if new.run_id is None:  # made here, from the seq the row will have
                seq, run_id = self.new_run_id(conn)
                new = dataclasses.replace(run, run_id=run_id)
            if idempotency is not None:
                claimed = conn.execute(
                    Q["claim_hook_idempotency"],
                    (idempotency.record_key, new.run_id, new.created_at, idempotency.expires_at),
                ).rowcount
                if claimed == 0:  # a live record holds the key (unique constraint): replay it
                    row = conn.execute(Q["get_hook_idempotency_run"], (idempotency.record_key,)).fetchone()
                    return EnqueueResult(str(row[0]), True)
            if not start_transcript(conn, new.session_key, new.agent_id, session_id, new.created_at):
                self._ensure_session(conn, new.session_key, new.agent_id, None, new.created_at)
            return EnqueueResult(self.insert_run(conn, new, session_id, seq), False)

        return await self._write(op)

    async def find_hook_idempotency(self, record_key: str, now_ms: int) -> str | None:
        def op(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(Q["find_live_hook_idempotency"], (record_key, now_ms)).fetchone()
            return None if row is None else str(row[0])

        return await self._read(op)

    async def get_run(self, run_id: str) -> RunRecord | None:
        def op(conn: sqlite3.Connection) -> RunRecord | None:
            row = conn.execute(Q["get_run"], (run_id, self.run_seq(run_id))).fetchone()
            return None if row is None else _run_record(row)

        return await self._read(op, inline=True)

    async def list_runs(
        self,
        *,
        agent_id: str | None = None,
        kind: str | None = None,
        statuses: Sequence[str] = (),
        since_ms: int | None = None,
        limit: int = 50,
    ) -> list[RunRecord]:
        status_json = _encode_json(list(statuses)).decode() if statuses else None

        def op(conn: sqlite3.Connection) -> list[RunRecord]:
            rows = conn.execute(Q["list_runs"], (agent_id, kind, status_json, since_ms, limit)).fetchall()
            return [_run_record(row) for row in rows]

        return await self._read(op)

    # --- TaskFlows (webhooks.md, model.md §1–§2): FlowTx transactions --------------------------------

    def new_session_id(self) -> str:
        return self._ids()

    # --- ids made from seqs (seqids.py) --------------------------------------------------------------

    def next_seq(self, conn: sqlite3.Connection, table: str) -> int:
        """The seq of the next row of ``table`` (flows, runs) that this write transaction inserts.

        The first in a transaction reads the table's AUTOINCREMENT high-water mark; the next ones count
        on from there: this connection alone writes until the commit, and ``Writer.txn`` changes with
        every transaction and every operation undone to its savepoint. A seq allocated and never
        inserted leaves a gap: harmless, a seq is never used twice."""
        txn = self.writer.txn
        mark = self._seq_marks.get(table)
        if mark is not None and mark[0] == txn:
            seq = mark[1] + 1
        else:
            seq = int(conn.execute(Q["next_seq"], (table,)).fetchone()[0])
        self._seq_marks[table] = (txn, seq)
        return seq

    def forget_seq(self, table: str) -> None:
        """A row of ``table`` took its seq from AUTOINCREMENT: count from the table again."""
        self._seq_marks.pop(table, None)

    def new_run_id(self, conn: sqlite3.Connection) -> tuple[int, str]:
        """The seq and id of the next run this write transaction inserts."""
        seq = self.next_seq(conn, "runs")
        return seq, self._run_ids().id_of(seq)

    def run_seq(self, run_id: str) -> int | None:
        """The seq ``run_id`` stands for if this database made it from one (``None``: it did not)."""
        seq = self._run_ids().seq_of(run_id)
        return seq if seq is not None and seq < MAX_SEQ else None

    def _run_ids(self) -> SeqIds:
        ids = self.run_ids
        if ids is None:
            raise StoreUnavailable("store unavailable")
        return ids

    def insert_run(self, conn: sqlite3.Connection, run: NewRun, session_id: str, seq: int | None) -> str:
        """Insert ``run`` (status queued): by ``seq`` when its id was made from it (``new_run_id``),
        else with a seq from AUTOINCREMENT and its id in the index of random ids. Returns the id."""
        params = (run.run_id, run.kind, run.agent_id, run.session_key, session_id, run.name,
                  _encode_json(run.inputs).decode(), run.created_at)
        if seq is not None:
            conn.execute(Q["insert_run_by_seq"], (*params, seq))
        else:
            conn.execute(Q["insert_run"], params)
            self.forget_seq("runs")
        return str(run.run_id)

    async def flow_write(self, fn: Callable[[RuntimeTx], T]) -> T:
        """Run ``fn`` in one write transaction; returns after it committed (and was fsynced)."""
        events: list[tuple[str, int, str]] = []

        def op(conn: sqlite3.Connection) -> T:
            events.clear()
            return fn(SqliteFlowTx(conn, self, events))

        result = await self._write(op)
        for outcome, dropped, session_key in events:
            self._count_event(outcome)
            if dropped:
                self._dropped(session_key, dropped)
        return result

    async def flow_read(self, fn: Callable[[RuntimeTx], T], *, small: bool = False) -> T:
        """Run ``fn`` on a read snapshot (writes through the tx are refused by SQLite); ``small``
        reads (a few rows) run inline on the event loop."""
        return await self._read(lambda conn: fn(SqliteFlowTx(conn, self, [])), inline=small)

    async def list_flow_views(self, owner_key: str) -> msgspec.Raw:
        """The owner's flows are counted first (inline, and only up to one past the threshold): a list
        of up to ``BULK_LIST_MIN_FLOWS`` is rendered on the read pool like any read, a longer one on the
        bulk thread, one at a time (``_read``) — so a short list never waits behind another owner's long one."""
        def count(conn: sqlite3.Connection) -> int:
            return int(conn.execute(FQ["count_owner_flows"], (owner_key, BULK_LIST_MIN_FLOWS + 1)).fetchone()[0])

        bulk = await self._read(count, inline=True) > BULK_LIST_MIN_FLOWS
        return await self._read(lambda conn: SqliteFlowTx(conn, self, []).list_flow_views(owner_key), bulk=bulk)

    async def sweep(self, now_ms: int) -> int:
        def op(conn: sqlite3.Connection) -> int:
            swept = conn.execute(Q["sweep_hook_idempotency"], (now_ms,)).rowcount
            return swept + conn.execute(FQ["sweep_webhook_idempotency"], (now_ms,)).rowcount

        return await self._write(op)

    async def sweep_history(self, runs_before_ms: int, events_before_ms: int,
                            batch: int = SWEEP_BATCH) -> tuple[int, int]:
        """Delete terminal runs that ended before ``runs_before_ms`` (with the transcript of an
        isolated run: heartbeat turns belong to the main session's history and stay), and consumed
        or dropped events and consumed wake requests older than ``events_before_ms``.

        In transactions of at most ``batch`` rows each: the operations run on the event loop, and a
        backlog of days must not stall requests for the length of one big delete."""

        def runs_op(conn: sqlite3.Connection) -> int:
            rows = conn.execute(Q["old_terminal_runs"], (runs_before_ms, batch)).fetchall()
            for seq, run_id, kind, session_id in rows:
                if kind != "heartbeat":
                    conn.execute(Q["delete_run_transcript"], (run_id, session_id))
                conn.execute(Q["delete_run"], (seq,))
            return len(rows)

        def events_op(conn: sqlite3.Connection) -> tuple[int, int]:
            events = conn.execute(Q["delete_old_events"], (events_before_ms, batch)).rowcount
            return events, conn.execute(Q["delete_old_wake_requests"], (events_before_ms, batch)).rowcount

        runs = events = 0
        while (n := await self._write(runs_op)) > 0:
            runs += n
            if n < batch:
                break
        while True:
            n_events, n_requests = await self._write(events_op)
            events += n_events
            if n_events < batch and n_requests < batch:
                break
        return runs, events


def _shrink_memory(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA shrink_memory")


def _select_one(conn: sqlite3.Connection) -> None:
    conn.execute(Q["select_one"]).fetchone()


def _probe_write(conn: sqlite3.Connection) -> None:
    conn.execute(Q["probe_write"])


def _record_wake(conn: sqlite3.Connection, agent_id: str, reason: str, now_ms: int) -> None:
    """Persist a wake request and pull the agent's heartbeat due time to ``now + 250 ms`` at the latest.

    The caller skips it when the agent's newest pending request has the same reason and the same
    millisecond (``pending_queue`` reads it): that one already stands for this one (a turn
    consumes the requests created up to its start, so any turn that consumes it would consume this
    one too) and it already pulled the due time to the same value. A burst of wakes thus records one
    request per agent, reason and millisecond, and the turn that consumes them no longer updates one
    row per wake. (Checked by the caller's select, not by an ``INSERT … SELECT … WHERE NOT EXISTS``:
    reading its own table, that insert materialises its select into an ephemeral table — a zeroed
    page and ~30 000 instructions per wake.)"""
    conn.execute(Q["insert_heartbeat_request"], (agent_id, reason, now_ms))
    conn.execute(Q["pull_heartbeat_due"], (agent_id, now_ms + WAKE_DELAY_MS, now_ms))


def _run_record(row: tuple[Any, ...]) -> RunRecord:
    values = list(row)
    values[6] = _decode_json(values[6])
    return RunRecord(*values)


def _id_key(conn: sqlite3.Connection, name: str, *, create: bool = True) -> bytes:
    """The database's key for flow or run ids (``seqids``), drawn and stored on the first open. Read
    first: a CLI command beside a running server does not take the write lock for it. Without
    ``create`` (a read-only command) a missing key is an error: a new one would find no flow or run."""
    row = conn.execute(FQ["id_key"], (name,)).fetchone()
    if row is None:
        if not create:
            raise StoreOpenError(f"the database has no {name} key (store_keys): its ids cannot be read")
        conn.execute(FQ["insert_id_key"], (name, new_id_key()))  # OR IGNORE: another process may be first
        row = conn.execute(FQ["id_key"], (name,)).fetchone()
    return bytes(row[0])
