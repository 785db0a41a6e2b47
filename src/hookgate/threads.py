"""Work that may never return, run off the event loop on a daemon thread of its own.

``asyncio.to_thread`` shares the loop's default executor (a handful of threads) and the interpreter
joins its threads at exit: one call that hangs — a transform module's top level spinning, an exec
secret provider that never answers — took a thread every other ``to_thread`` user (a ``/metrics``
scrape, a reload, a file delivery) then waited for, and kept the process alive after
``shutdown.completed``. A daemon thread per call costs ~50 µs, nothing for calls this rare.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def run_on_daemon_thread(fn: Callable[..., T], *args: Any, name: str = "hookgate-daemon") -> asyncio.Future[T]:
    """``fn(*args)`` on a new daemon thread; its outcome settles the returned future (on this loop).
    Cancelling or abandoning the future does not stop the call: its late outcome is dropped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def run() -> None:
        try:
            outcome: tuple[bool, Any] = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - whatever it raised is the caller's to see
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
