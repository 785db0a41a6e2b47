"""The single SQLite writer thread with group commit (operations.md §4.2).

Async callers ``submit`` a function of the write connection and await its result. The writer thread
takes the first waiting operation, opens one transaction and runs every operation in its own
``SAVEPOINT`` (a failing operation rolls back only its savepoint and fails only its waiter). It keeps
collecting while operations are already queued; it *waits* for more (up to ``group_commit_ms`` after
the first) only when the previous group had more than one operation, i.e. when concurrent load is
known to exist, so a lone request is never delayed. At 256 operations or the deadline it commits once
(one fsync) and completes every waiter with one ``call_soon_threadsafe`` per event loop.

A failed ``BEGIN``/``COMMIT`` or a lost transaction (SQLite rolls the whole transaction back on
``SQLITE_FULL``/``SQLITE_IOERR``) fails every waiter of the group with ``StoreUnavailable``.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from hookgate.errors import StoreUnavailable
from hookgate.obs.metrics import Metrics

T = TypeVar("T")
WriteFn = Callable[[sqlite3.Connection], Any]
# (fn, future, loop) — a plain tuple: this is the hot path.
_Item = tuple[WriteFn, "asyncio.Future[Any]", asyncio.AbstractEventLoop]
# (future, ok, value-or-exception)
_Done = tuple["asyncio.Future[Any]", bool, Any]

MAX_GROUP = 256
_STOP = object()
_BACKEND = "sqlite"


def _unavailable(cause: BaseException | None = None) -> StoreUnavailable:
    exc = StoreUnavailable("store unavailable")
    exc.__cause__ = cause
    return exc


def _resolve(done: list[_Done]) -> None:
    """Runs on the event loop: complete the waiters of one group (cancelled ones are skipped)."""
    for fut, ok, value in done:
        if fut.cancelled():
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


class Writer:
    """Owns the only write connection; see the module docstring for the commit protocol."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        group_commit_ms: float,
        metrics: Metrics | None,
        max_group: int = MAX_GROUP,
    ) -> None:
        self._conn = conn
        self._window = max(0.0, group_commit_ms) / 1000.0
        self._max_group = max_group
        self._metrics = metrics
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="hookgate-store-writer", daemon=True)
        self.healthy = True  # False after a failed commit, until a commit that wrote succeeds
        self.commits = 0  # groups committed (tests and benchmarks read it)

    def start(self) -> None:
        self._thread.start()

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``fn`` for the writer thread; the future resolves after its group committed."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise StoreUnavailable("store unavailable")
            self._queue.put((fn, fut, loop))
        return fut

    def stop(self) -> None:
        """Refuse new work; the thread finishes everything submitted before and exits."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)

    def join(self) -> None:
        self._thread.join()

    # --- the thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        busy = False
        stopping = False
        try:
            while not stopping:
                first = self._queue.get()
                if first is _STOP:
                    break
                items: list[_Item] = [first]
                try:
                    stopping = self._group(items, busy)
                except BaseException as exc:  # a bug in the writer itself: fail the group, keep going
                    self._complete(items, self._fail_all(items, exc))
                busy = len(items) > 1
        finally:
            self._drain_after_stop()
            self._conn.close()

    def _group(self, items: list[_Item], busy: bool) -> bool:
        """Collect, execute and commit one group starting with ``items[0]``; True when stop was seen."""
        get = self._queue.get
        get_nowait = self._queue.get_nowait
        empty = queue.Empty
        stopping = False
        item = items[0]
        started = time.perf_counter()
        deadline = started + self._window
        changes_before = self._conn.total_changes
        done: list[_Done] = []
        lost = not self._begin(item, done) or self._execute(item, done)
        while not lost and len(items) < self._max_group:
            try:
                item = get_nowait()
            except empty:
                if not busy:
                    break
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                try:
                    item = get(timeout=remaining)
                except empty:
                    break
            if item is _STOP:
                stopping = True
                break
            items.append(item)
            lost = self._execute(item, done)
        if lost:
            done = self._fail_all(items, None)
        else:
            done = self._commit(items, done, started, changes_before)
        self._complete(items, done)
        return stopping

    def _begin(self, item: _Item, done: list[_Done]) -> bool:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._error(1)
            self.healthy = False
            done.append((item[1], False, _unavailable(exc)))
            return False
        return True

    def _execute(self, item: _Item, done: list[_Done]) -> bool:
        """Run one operation in its savepoint; returns True when the whole transaction was lost."""
        conn = self._conn
        fn, fut, _ = item
        try:
            conn.execute("SAVEPOINT op")
            value = fn(conn)
            conn.execute("RELEASE op")
        except BaseException as exc:
            if not conn.in_transaction:
                return True
            try:
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
            except sqlite3.Error:
                return True
            if isinstance(exc, sqlite3.OperationalError):
                self._error(1)
                done.append((fut, False, _unavailable(exc)))
            else:
                done.append((fut, False, exc))
            return False
        done.append((fut, True, value))
        return False

    def _commit(self, items: list[_Item], done: list[_Done], started: float, changes_before: int) -> list[_Done]:
        conn = self._conn
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            return self._fail_all(items, exc)
        self.commits += 1
        if conn.total_changes != changes_before:
            self.healthy = True
        if self._metrics is not None:
            self._metrics.store_commit.labels(backend=_BACKEND).observe(time.perf_counter() - started)
            self._metrics.store_group_size.observe(len(items))
        return done

    def _fail_all(self, items: list[_Item], cause: BaseException | None) -> list[_Done]:
        conn = self._conn
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        self.healthy = False
        self._error(len(items))
        return [(fut, False, _unavailable(cause)) for _, fut, _ in items]

    def _error(self, n: int) -> None:
        if self._metrics is not None:
            self._metrics.store_errors.labels(backend=_BACKEND).inc(n)

    @staticmethod
    def _complete(items: list[_Item], done: list[_Done]) -> None:
        first_loop = items[0][2]
        if all(it[2] is first_loop for it in items):
            _post(first_loop, done)
            return
        by_loop: dict[asyncio.AbstractEventLoop, list[_Done]] = {}
        for (_, _, loop), entry in zip(items, done):
            by_loop.setdefault(loop, []).append(entry)
        for loop, entries in by_loop.items():
            _post(loop, entries)

    def _drain_after_stop(self) -> None:
        """Fail anything that slipped in after ``_STOP`` (or after the thread died)."""
        with self._lock:
            self._closed = True
        leftovers: list[_Item] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                leftovers.append(item)
        if leftovers:
            self._complete(leftovers, [(fut, False, _unavailable()) for _, fut, _ in leftovers])


def _post(loop: asyncio.AbstractEventLoop, done: list[_Done]) -> None:
    try:
        loop.call_soon_threadsafe(_resolve, done)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass
