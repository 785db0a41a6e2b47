"""``storage.sqlite.checkpoint: "background"``: WAL checkpoints off the commit path, a thread that
copies committed pages into the database file while the writer keeps committing.

By default (``"commit"``) SQLite checkpoints inside the ``COMMIT`` that takes the WAL past 1 000
frames: it copies every page of the lap into the database file and syncs that file while every
request in flight waits. With random-key indexes (flow, run and task ids, ``hook:<uuid>`` sessions)
a lap touches hundreds of distinct pages; on a disk that syncs a random page in ~50 µs that is a
10 – 20 ms stall every few dozen commits — the p99 of every write.

This thread runs a ``PASSIVE`` checkpoint on its own connection after commits (at most one pass per
``min_interval_s``), then ``fdatasync``s the database file itself: SQLite syncs the file only in a
pass that reaches the end of the WAL, which under steady writes this one rarely does. The pages
reach the disk while commits go on (a commit that meets that flush waits a few ms more, instead of
every request waiting for all of it). The write connection keeps SQLite's own checkpoint at the
threshold, which now finds the lap almost all copied and the file almost clean: it copies the
tail, syncs, and the WAL starts over as before. (A checkpoint on another connection alone never
catches up with a busy writer, and a WAL that never starts over only grows; one without the
``fdatasync`` leaves the writer's checkpoint the whole lap to sync.)

The price is CPU: pages are copied soon after each commit instead of once per lap, so a page
written in several passes is copied several times (bench/README.md has the figures). Durability is
SQLite's: a frame is dropped from the WAL only after a checkpoint that synced the database file;
the extra ``fdatasync`` only makes the file durable sooner. The descriptor it syncs stays open until
every connection of the store is closed (closing any descriptor of the file drops the process's
POSIX locks on it, SQLite's included).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

from hookgate.obs.logging import clean_text, get_logger

LOG_INTERVAL_S = 60.0
MIN_INTERVAL_S = 0.010  # between passes: a few commits' pages each, so the writer's own pass is short
_sync = getattr(os, "fdatasync", os.fsync)


class Checkpointer:
    """The background checkpoint thread of one database file; ``poke()`` after a commit that wrote."""

    def __init__(self, path: str, *, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self._interval = min_interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA cache_size=-64")  # a checkpoint copies frames: it needs no page cache
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._last: tuple[int, int] | None = None
        self.passes = 0  # passes that copied pages (tests read it)
        self.failures = 0  # failed passes in all
        self._logged_at = -LOG_INTERVAL_S
        self._logged_failures = 0
        self._thread = threading.Thread(target=self._loop, name="hookgate-store-checkpoint", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """A commit wrote frames: run a pass soon (any thread)."""
        self._wake.set()

    def stop(self) -> None:
        """End the thread and close its connection. The descriptor stays open: ``close_fd`` once the
        store's other connections are closed."""
        self._stop.set()
        self._wake.set()
        self._thread.join()
        self._conn.close()

    def close_fd(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            self._pass()
            if self._stop.wait(self._interval):  # at most one pass per interval
                return

    def _pass(self) -> None:
        try:
            _, frames, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if copied > 0 and (frames, copied) != self._last:
                _sync(self._fd)
                self.passes += 1
            self._last = (frames, copied)
        except (sqlite3.Error, OSError) as exc:
            # The writer's own checkpoint still runs at the threshold: nothing is lost, commits only
            # wait for whole checkpoints again. Logged at most once a minute, with the count.
            self.failures += 1
            now = time.monotonic()
            if now - self._logged_at >= LOG_INTERVAL_S:
                get_logger().warning("store.checkpoint_failed", error=clean_text(str(exc)),
                                     failures=self.failures - self._logged_failures)
                self._logged_at, self._logged_failures = now, self.failures
