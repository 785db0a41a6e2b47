"""Background WAL checkpoints for ``serve`` (operations.md §4.2).

SQLite's automatic checkpoint runs inside the ``COMMIT`` that crosses its threshold: on the commit
thread, so the whole group commit waits while WAL pages are copied into the database file and that
file is fsynced — the larger the threshold, the longer the stall. Here a thread of its own, with its
own connection, runs a ``PASSIVE`` checkpoint every ``interval`` seconds: it copies what the WAL
holds without blocking the writer or the readers, and the writer starts the WAL over from its
beginning once everything in it was copied. The write connection keeps SQLite's automatic
checkpoint only as a backstop (``WAL_AUTOCHECKPOINT_PAGES``), which then finds little left to copy.
Checkpoints move committed pages from one file to another; they have no part in durability.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable

CHECKPOINT_INTERVAL_SECONDS = 0.1


class Checkpointer:
    """A daemon thread: ``PRAGMA wal_checkpoint(PASSIVE)`` every ``interval`` seconds until ``stop``."""

    def __init__(self, connect: Callable[[], sqlite3.Connection],
                 interval: float = CHECKPOINT_INTERVAL_SECONDS) -> None:
        self._connect = connect
        self._interval = interval
        self._stop = threading.Event()
        self.checkpoints = 0  # completed PASSIVE checkpoints (tests read it)
        self._thread = threading.Thread(target=self._run, name="hookgate-store-checkpoint", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread (after the checkpoint in progress, if any) and close its connection."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while not self._stop.wait(self._interval):
                try:
                    if conn is None:
                        conn = self._connect()
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.checkpoints += 1
                except sqlite3.Error:
                    pass  # locked or I/O: the next tick tries again, and the writer's backstop remains
        finally:
            if conn is not None:
                conn.close()
