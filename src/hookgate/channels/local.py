"""The local channels (model.md §10.2): ``console`` (a JSON line on stdout) and ``file`` (appended).

Both write one JSON line per part, ``{"channel","to","text","runId","agentId"}``, the file adding
``"ts"`` (ms). Console lines go to **stdout**, never the log stream (which is stderr). A write error is
final (not retryable): retrying a full disk or a bad path in a second does not help.
"""

from __future__ import annotations

import asyncio
import os
import sys
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
                _write_stdout(line)
            except OSError as exc:
                raise _os_error(self.channel, exc) from None
            await sent(index, None, None)

    async def aclose(self) -> None:
        return None


def _write_stdout(data: bytes) -> None:
    out = sys.stdout  # looked up each time: tests and daemons replace it
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
