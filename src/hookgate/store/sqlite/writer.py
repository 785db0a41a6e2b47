"""The single SQLite writer thread with group commit (operations.md §4.2).

Async callers ``submit`` a function of the write connection and await its result. The writer thread
takes the first waiting operation, opens one transaction and runs every operation in its own
``SAVEPOINT`` (a failing operation rolls back only its savepoint and fails only its waiter).

Collection (measured with ``bench/store_bench.py``): operations already queued are always taken
(they piled up during the previous commit's fsync — the natural group). When the queue is empty the
writer *waits* for more only if new submissions arrived since this group started (an open stream of
callers), each wait at most 200 µs and never past ``group_commit_ms`` after the first operation. A
lone request, or a burst that is completely queued already, commits at once. At 256 operations the
group closes. One commit (one fsync), then every waiter is completed with one
``call_soon_threadsafe`` per event loop.

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
IDLE_GAP_S = 0.0002  # a 200 µs pause in arrivals ends the collection of a group early
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
        # Labelled children resolved once: ``labels()`` costs microseconds on the hot path.
        self._commit_hist = metrics.store_commit.labels(backend=_BACKEND) if metrics else None
        self._errors = metrics.store_errors.labels(backend=_BACKEND) if metrics else None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._submitted = 0  # total submissions; tells the writer whether requests keep arriving
        self._idle_gap = IDLE_GAP_S
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
            self._submitted += 1
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
        stopping = False
        try:
            while not stopping:
                first = self._queue.get()
                if first is _STOP:
                    break
                items: list[_Item] = [first]
                try:
                    stopping = self._group(items)
                except BaseException as exc:  # noqa: BLE001 — a writer bug must fail its waiters, not hang them
                    self._complete(items, self._fail_all(items, exc))
        finally:
            self._drain_after_stop()
            self._conn.close()

    def _group(self, items: list[_Item]) -> bool:
        """Collect, execute and commit one group starting with ``items[0]``; True when stop was seen."""
        get = self._queue.get
        get_nowait = self._queue.get_nowait
        empty = queue.Empty
        stopping = False
        item = items[0]
        started = time.perf_counter()
        deadline = started + self._window
        submitted_at_start = self._submitted
        changes_before = self._conn.total_changes
        done: list[_Done] = []
        lost = not self._begin(item, done) or self._execute(item, done)
        while not lost and len(items) < self._max_group:
            try:
                item = get_nowait()
            except empty:
                # Idle-wait only while requests keep arriving during this group (an open stream of
                # callers); a burst that is fully queued already, or a lone request, commits now.
                if not self._window or self._submitted == submitted_at_start:
                    break
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                try:
                    item = get(timeout=min(remaining, self._idle_gap))
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
            done.append((item[1], False, _unavailable(exc)))  # _fail_all counts and flags it
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
        except BaseException as exc:  # noqa: BLE001 — whatever the operation raises goes to its waiter
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

    def _commit(
        self, items: list[_Item], done: list[_Done], started: float, changes_before: int
    ) -> list[_Done]:
        conn = self._conn
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            return self._fail_all(items, exc)
        self.commits += 1
        if conn.total_changes != changes_before:
            self.healthy = True
        if self._metrics is not None and self._commit_hist is not None:
            self._commit_hist.observe(time.perf_counter() - started)
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
        if self._errors is not None:
            self._errors.inc(n)

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
