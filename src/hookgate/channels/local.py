"""The local channels (model.md §10.2): ``console`` (a JSON line on stdout) and ``file`` (appended).

Both write one JSON line per part, ``{"channel","to","text","runId","agentId"}``, the file adding
``"ts"`` (ms). Console lines go to **stdout**, never the log stream (which is stderr). A write error is
final (not retryable): retrying a full disk or a bad path in a second does not help.
"""

from __future__ import annotations

import asyncio
import errno
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence

import msgspec

from hookgate.channels.base import MAX_CHARS, DeliveryError, Envelope, SentCallback, split_text
from hookgate.config.names import DEFAULT_FILE_CHANNEL_PATH
from hookgate.config.settings import ChannelSettings

FILE_MODE = 0o600  # delivered texts are as private as the database that holds them


class DeliveryLine(msgspec.Struct, omit_defaults=True):
    channel: str
    to: str
    text: str
    runId: str
    agentId: str
    ts: int | None = None


def _os_error(channel: str, exc: OSError) -> DeliveryError:
    return DeliveryError(f"{channel}: {exc.strerror or type(exc).__name__}", retryable=False)


class ConsoleAdapter:
    channel = "console"

    def __init__(self, cfg: ChannelSettings) -> None:
        self.cfg = cfg

    def split(self, text: str) -> list[str]:
        return split_text(text, MAX_CHARS[self.channel])

    async def send(self, to: str, parts: Sequence[str], start: int, envelope: Envelope, sent: SentCallback) -> None:
        for index in range(start, len(parts)):
            line = msgspec.json.encode(DeliveryLine("console", to, parts[index], envelope.run_id,
                                                    envelope.agent_id)) + b"\n"
            try:
                await _STDOUT.write(line)
            except OSError as exc:
                raise _os_error(self.channel, exc) from None
            await sent(index, None, None)

    async def aclose(self) -> None:
        return None


class _StdoutWriter:
    """Console lines written by a thread of their own, in order: a stdout nobody reads (``hookgate serve
    | less`` left paused, a full pipe) blocks that thread and the console deliveries waiting on it,
    not the event loop, and so not ingest, ``/healthz`` or the other channels. A daemon thread: one
    blocked on a reader that never reads again does not keep the process from exiting. A delivery
    whose wait is cancelled (a drain at shutdown) may still see its line written later."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[bytes, asyncio.AbstractEventLoop, asyncio.Future[None]]] = \
            queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def write(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hookgate-console", daemon=True)
                self._thread.start()
        self._queue.put((data, loop, done))
        await done

    def _run(self) -> None:
        while True:
            data, loop, done = self._queue.get()
            error: OSError | None = None
            try:
                _write_stdout(data)
            except OSError as exc:
                error = exc
            except BaseException as exc:  # noqa: BLE001 - a closed stdout (ValueError), one a transform replaced:
                error = OSError(f"{type(exc).__name__}: {exc}")  # that write fails, the thread goes on
            try:
                loop.call_soon_threadsafe(_settle, done, error)
            except RuntimeError:  # that loop has closed
                pass


def _settle(done: asyncio.Future[None], error: OSError | None) -> None:
    if done.done():  # cancelled meanwhile
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)


_STDOUT = _StdoutWriter()


def _write_stdout(data: bytes) -> None:
    out = sys.stdout  # looked up each time: tests and daemons replace it
    if out is None:  # the process started with stdout closed
        raise OSError(errno.EBADF, "stdout is closed")
    binary = getattr(out, "buffer", None)
    if binary is None:
        out.write(data.decode("utf-8"))
        out.flush()
        return
    out.flush()  # whatever is pending in the text layer goes first
    binary.write(data)
    binary.flush()


class FileAdapter:
    channel = "file"

    def __init__(self, cfg: ChannelSettings, *, clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        path = cfg.options.get("path")  # absolute: the config resolves it, a default one too
        self.path = path if isinstance(path, str) and path else os.path.abspath(DEFAULT_FILE_CHANNEL_PATH)
        self.clock = clock
        self._lock = asyncio.Lock()  # lines from concurrent deliveries never interleave

    def split(self, text: str) -> list[str]:
        return split_text(text, MAX_CHARS[self.channel])

    async def send(self, to: str, parts: Sequence[str], start: int, envelope: Envelope, sent: SentCallback) -> None:
        for index in range(start, len(parts)):
            line = msgspec.json.encode(DeliveryLine("file", to, parts[index], envelope.run_id, envelope.agent_id,
                                                    int(self.clock() * 1000))) + b"\n"
            async with self._lock:
                try:
                    await asyncio.to_thread(_append, self.path, line)
                except OSError as exc:
                    raise _os_error(self.channel, exc) from None
            await sent(index, None, None)

    async def aclose(self) -> None:
        return None


def _append(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
