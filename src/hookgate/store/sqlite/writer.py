"""The single SQLite write connection with group commit (operations.md §4.2).

Async callers ``submit`` a function of the write connection and await its result; the future
resolves only after the transaction holding it has committed (and, with ``durability: full``,
fsynced).

Where the work runs — chosen by measurement: the SQL of each operation is fast (tens of µs) but
the ``sqlite3`` module releases and re-takes the GIL around every statement. Run on a separate
writer thread, every statement therefore waited for a busy event loop to hand the GIL back, and a
group of 30 wakes took ~6 ms. So the operations run **on the event loop thread**, one after the
other in one open transaction, and only ``COMMIT`` (the fsync, which needs no GIL) runs on the
dedicated commit thread. While a commit is in flight, new operations queue up; when it lands, the
queued operations form the next group (at most 256), which runs and goes to the commit thread, and
only then is every waiter of the landed group completed — their responses are written while the
next commit is in flight, instead of the commit thread idling until the loop has written them.
A lone request is never delayed artificially; the group is whatever arrived during the previous
commit (never longer than that commit, so within ``groupCommitMs`` on a healthy disk).

A failing operation fails only its waiter, and nothing it wrote is committed. An operation whose
waiter was cancelled before its group ran is not run at all: nobody is told it committed. Operations run without
a ``SAVEPOINT`` of their own (two statements per operation, ~5 % of a wake): one that raises having
written nothing needs none (SQLite undoes a failing statement by itself); one that wrote and then
raised makes the writer roll the group back and run it again with a savepoint per operation, so that
only that operation's writes are undone. A failed
``BEGIN``/``COMMIT``, or a transaction SQLite rolled back itself (``SQLITE_FULL``/``SQLITE_IOERR``),
fails every waiter of the group with ``StoreUnavailable``: nothing of it was committed.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from hookgate.errors import StoreUnavailable
from hookgate.obs.logging import LineLimiter, get_logger
from hookgate.obs.metrics import Metrics

T = TypeVar("T")
WriteFn = Callable[[sqlite3.Connection], Any]
_Item = tuple[WriteFn, "asyncio.Future[Any]"]
_Done = tuple["asyncio.Future[Any]", bool, Any]

MAX_GROUP = 256
_BACKEND = "sqlite"
_LOCK_RETRY_S = 0.005
# A COMMIT this slow is logged as ``store.slow_commit`` (at most one line a second, with the count since
# the last): with ``durability: full`` it is the WAL's fdatasync (or a checkpoint inside the COMMIT)
# waiting on the disk, and every request of the group — and every one queued behind it — waited too.
SLOW_COMMIT_S = 0.1
SLOW_COMMIT_LOG_INTERVAL_S = 1.0


def _unavailable(cause: BaseException | None = None) -> StoreUnavailable:
    exc = StoreUnavailable("store unavailable")
    exc.__cause__ = cause
    return exc


def _failure(exc: BaseException) -> BaseException:
    """What the waiter of a failed operation gets: SQLite's operational errors are ``StoreUnavailable``."""
    return _unavailable(exc) if isinstance(exc, sqlite3.OperationalError) else exc


def _resolve(done: list[_Done]) -> None:
    for fut, ok, value in done:
        if fut.cancelled():
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


class _CommitThread:
    """The one thread ``BEGIN`` waits and ``COMMIT`` run on: a queue and a loop, nothing else.

    (A ``ThreadPoolExecutor`` did the same with a concurrent future, a condition variable and a
    callback list per call: Python work the commit thread ran holding the GIL, while the event
    loop, busy with the next group, waited for it.)
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], Callable[[BaseException | None], None]] | None]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="hookgate-store-commit", daemon=True)
        self._thread.start()

    def run(self, job: Callable[[], None], done: Callable[[BaseException | None], None]) -> None:
        """Run ``job`` on the thread, then ``done(None)`` or ``done(exception)`` there."""
        self._jobs.put((job, done))

    def stop(self) -> None:
        """Finish the queued jobs, then end the thread."""
        self._jobs.put(None)
        self._thread.join()

    def _loop(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, done = item
            try:
                job()
            except BaseException as exc:  # noqa: BLE001 - handed to the writer on the loop
                done(exc)
            else:
                done(None)
            del item, job, done


class Writer:
    """Owns the only write connection; see the module docstring for the commit protocol."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        group_commit_ms: float,
        metrics: Metrics | None,
        max_group: int = MAX_GROUP,
        busy_timeout_ms: int = 5000,
    ) -> None:
        self._conn = conn
        self._window = max(0.0, group_commit_ms) / 1000.0
        self._max_group = max_group
        self._busy_timeout_s = busy_timeout_ms / 1000.0
        self._metrics = metrics
        self._commit_hist = metrics.store_commit.labels(backend=_BACKEND) if metrics else None
        self._errors = metrics.store_errors.labels(backend=_BACKEND) if metrics else None
        self._pending: deque[_Item] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._commits = _CommitThread()
        self._in_flight = False  # a BEGIN or COMMIT runs on the commit thread
        self._scheduled = False
        self._closed = False
        self._drained: asyncio.Event | None = None
        self.healthy = True  # False after a failed commit, until a commit that wrote succeeds
        self.failed_at = 0.0  # time.monotonic() of the last failed commit
        self.commits = 0  # groups committed (tests and benchmarks read it)
        self.writes = 0  # groups committed that changed a row (an idle worker's polls change none)
        # Bumped by every BEGIN and every savepoint rolled back: what an operation learned of the
        # database holds only while it is unchanged (``total_changes`` does not go down on a rollback).
        self.txn = 0
        self.slow_commit_s = SLOW_COMMIT_S
        self._commit_s = 0.0  # how long the last COMMIT took on the commit thread
        self._slow_log = LineLimiter(SLOW_COMMIT_LOG_INTERVAL_S)
        self._slow_max_s = 0.0  # the slowest COMMIT since the last store.slow_commit line

    def start(self) -> None:
        """Bind to the running event loop (operations run on it)."""
        self._loop = asyncio.get_running_loop()
        self._drained = asyncio.Event()
        # Lock waits happen on the commit thread (see _begin), never on the event loop.
        self._conn.execute("PRAGMA busy_timeout=0")

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``fn``; the future resolves after its group committed."""
        loop = self._loop
        if self._closed or loop is None:
            raise StoreUnavailable("store unavailable")
        fut: asyncio.Future[T] = loop.create_future()
        self._pending.append((fn, fut))
        if not self._scheduled and not self._in_flight:
            self._scheduled = True
            loop.call_soon(self._flush)
        return fut

    def stop(self) -> None:
        """Refuse new work; everything submitted before still commits."""
        self._closed = True
        self._maybe_drained()

    async def join(self) -> None:
        """Wait until every submitted operation has completed, then close the connection."""
        if self._drained is not None:
            await self._drained.wait()
        await asyncio.to_thread(self._commits.stop)
        self._conn.close()

    # --- the commit protocol -------------------------------------------------------------------------

    def _flush(self) -> None:
        self._scheduled = False
        if self._in_flight or not self._pending:
            self._maybe_drained()
            return
        batch = [self._pending.popleft() for _ in range(min(len(self._pending), self._max_group))]
        started = time.perf_counter()
        try:
            self._begin()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                self._finish(batch, self._fail_all(batch, exc))
                return
            # Another process (a CLI command) holds the write lock: wait for it off the loop.
            self._in_flight = True
            self._commits.run(self._begin_waiting, lambda exc: self._call(self._after_begin, exc, batch, started))
            return
        self._run(batch, started)

    def _begin(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        self.txn += 1

    def _begin_waiting(self) -> None:
        deadline = time.monotonic() + self._busy_timeout_s
        while True:
            try:
                self._begin()
                return
            except sqlite3.OperationalError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(_LOCK_RETRY_S)

    def _after_begin(self, exc: BaseException | None, batch: list[_Item], started: float) -> None:
        self._in_flight = False
        if exc is not None:
            self._finish(batch, self._fail_all(batch, exc), next_inline=True)
            return
        self._run(batch, started)

    def _run(self, batch: list[_Item], started: float) -> None:
        conn = self._conn
        changes_before = conn.total_changes
        done: list[_Done] = []
        errors = 0  # counted once the group is not run again
        # Optimistic: no savepoint per operation (two statements each). An operation that raises
        # having written nothing fails alone: SQLite already undid its failing statement. One that
        # wrote and then raised cannot be undone alone: the group starts over, each operation in its
        # own savepoint (``_execute``) — operations are functions of the connection, safe to re-run.
        for fn, fut in batch:
            if fut.cancelled():  # its caller gave up before it ran (a worker stopped mid-claim): not run
                continue
            before = conn.total_changes
            try:
                value = fn(conn)
            except BaseException as exc:  # noqa: BLE001 — whatever the operation raises goes to its waiter
                if not conn.in_transaction:  # SQLite rolled it back (SQLITE_FULL, SQLITE_IOERR): exc says why
                    self._finish(batch, self._fail_all(batch, exc))
                    return
                if conn.total_changes != before:
                    self._rerun_in_savepoints(batch, started, changes_before)
                    return
                errors += isinstance(exc, sqlite3.OperationalError)
                done.append((fut, False, _failure(exc)))
            else:
                done.append((fut, True, value))
        self._error(errors)
        self._commit_group(batch, done, started, changes_before)

    def _rerun_in_savepoints(self, batch: list[_Item], started: float, changes_before: int) -> None:
        conn = self._conn
        try:
            conn.execute("ROLLBACK")
            self._begin()
        except sqlite3.Error as exc:
            self._finish(batch, self._fail_all(batch, exc))
            return
        done: list[_Done] = []
        for item in batch:
            if (lost := self._execute(item, done)) is not None:
                self._finish(batch, self._fail_all(batch, lost))
                return
        self._commit_group(batch, done, started, changes_before)

    def _commit_group(self, batch: list[_Item], done: list[_Done], started: float, changes_before: int) -> None:
        self._in_flight = True
        self._commits.run(
            self._commit, lambda exc: self._call(self._after_commit, exc, batch, done, started, changes_before)
        )

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        """From the commit thread back onto the loop."""
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _commit(self) -> None:
        t0 = time.perf_counter()
        self._conn.execute("COMMIT")
        self._commit_s = time.perf_counter() - t0

    def _after_commit(
        self, exc: BaseException | None, batch: list[_Item], done: list[_Done], started: float,
        changes_before: int,
    ) -> None:
        self._in_flight = False
        if exc is not None:
            self._finish(batch, self._fail_all(batch, exc), next_inline=True)
            return
        self.commits += 1
        if self._conn.total_changes != changes_before:
            self.healthy = True
            self.writes += 1
        group_s = time.perf_counter() - started
        if self._metrics is not None and self._commit_hist is not None:
            self._commit_hist.observe(group_s)
            self._metrics.store_group_size.observe(len(batch))
        if self._commit_s >= self.slow_commit_s:
            self._slow_commit(len(batch), group_s)
        self._finish(batch, done, next_inline=True)

    def _slow_commit(self, group_size: int, group_s: float) -> None:
        """Log a slow COMMIT: durations and the group's size only, never what it wrote."""
        self._slow_max_s = max(self._slow_max_s, self._commit_s)
        if (count := self._slow_log.due()) is None:
            return
        get_logger().warning(
            "store.slow_commit", backend=_BACKEND, commit_ms=round(self._commit_s * 1000, 1),
            group_ms=round(group_s * 1000, 1), group_size=group_size, count=count,
            max_commit_ms=round(self._slow_max_s * 1000, 1),
        )
        self._slow_max_s = 0.0

    def _finish(self, batch: list[_Item], done: list[_Done], *, next_inline: bool = False) -> None:
        """Complete a group's waiters and start the next group.

        ``next_inline`` (a BEGIN or COMMIT landing, called back from the commit thread): the next group
        goes to the disk first, then this group's waiters wake up, so their responses are written
        while that commit is in flight instead of the commit thread idling meanwhile. Otherwise (a
        group that failed at once, inside ``_flush``) the next flush is scheduled: no recursion."""
        if self._pending and not self._scheduled and not self._in_flight:
            if next_inline:
                self._flush()
            else:
                self._scheduled = True
                assert self._loop is not None
                self._loop.call_soon(self._flush)
        _resolve(done)
        self._maybe_drained()

    def _maybe_drained(self) -> None:
        if self._closed and not self._pending and not self._in_flight and self._drained is not None:
            self._drained.set()

    def _execute(self, item: _Item, done: list[_Done]) -> BaseException | None:
        """Run one operation in its own savepoint (the re-run of a group); returns what lost the whole
        transaction, if it was lost."""
        conn = self._conn
        fn, fut = item
        if fut.cancelled():
            return None
        try:
            conn.execute("SAVEPOINT op")
            value = fn(conn)
            conn.execute("RELEASE op")
        except BaseException as exc:  # noqa: BLE001 — whatever the operation raises goes to its waiter
            if not conn.in_transaction:
                return exc
            try:
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
            except sqlite3.Error as undo:
                return undo
            self.txn += 1  # the operation's writes are gone: views read since are stale
            self._error(int(isinstance(exc, sqlite3.OperationalError)))
            done.append((fut, False, _failure(exc)))
            return None
        done.append((fut, True, value))
        return None

    def _fail_all(self, batch: list[_Item], cause: BaseException | None) -> list[_Done]:
        conn = self._conn
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        self.healthy = False
        self.failed_at = time.monotonic()
        self._error(len(batch))
        return [(fut, False, _unavailable(cause)) for _, fut in batch]

    def _error(self, n: int) -> None:
        if n and self._errors is not None:
            self._errors.inc(n)
