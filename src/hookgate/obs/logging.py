"""Structured logging (operations.md §2): structlog, one JSON object per line on stderr.

Lines are buffered and flushed every 100 ms by the server (and at once for warnings and errors, and
outside a running server), so the access line of every request costs no extra system call.
Never pass a token, a secret, a body, a payload field, or a message text to a logger.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, MutableMapping
from typing import IO, Any

import msgspec
import structlog

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\s]+")  # C0, DEL, C1 (0x9b is a terminal CSI) and whitespace
_encode = msgspec.json.Encoder().encode

INSTANCE_ID = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(2).hex()}"


def clean_text(value: str, limit: int = 500) -> str:
    """A free-text value made safe for a log line: control characters (C0 and C1) → space, collapsed, cut."""
    return _CONTROL.sub(" ", value).strip()[:limit]


def failure_text(exc: BaseException) -> str:
    """What a log line says of a failure: its cause's text (SQLite's "database or disk is full" for a
    ``StoreUnavailable``), cleaned."""
    return clean_text(str(exc.__cause__ or exc))


class _Sink:
    """The byte sink every logger shares: lines collect in memory and leave in one ``write(2)`` per
    flush (the server flushes every 100 ms; warnings, errors and lines outside a server at once).

    Logging never fails its caller. A line that cannot be written — stderr closed, a broken pipe, a
    full disk — is dropped and counted (``dropped``) and the buffer is emptied, so the request it
    belongs to still gets the answer its committed effect earned (a 500 there would invite a retry
    that duplicates the effect).

    While a server runs (``set_buffered(True)``) the writes happen on a writer thread of their own, so
    a reader that stops reading (``hookgate serve 2>&1 | less``, a paused log shipper) blocks that
    thread, not the event loop: requests, ``/healthz`` and the stop signals go on. What waits for the
    reader is held up to ``MAX_PENDING`` bytes; lines past that are dropped and counted, and the
    first line written after them is a ``log.dropped`` warning with their count.

    A line may arrive while its own thread holds the sink's lock: the collector runs finalisers
    wherever an allocation triggers it, and a failed task's or a ``__del__``'s error is logged from
    there. Such a line goes to a queue the next batch takes in, not to the lock it would wait on
    forever (and with it the event loop's next flush).
    """

    FLUSH_BYTES = 1 << 16  # a buffer this full is written at once, whatever the ticker does
    MAX_PENDING = 8 << 20  # held for a reader that stopped reading; past it, lines are dropped

    def __init__(self) -> None:
        # stderr's copy is taken at the first write, after the CLI has put /dev/null on closed
        # standard descriptors: taken at import, it could itself land on a closed fd 0 or 1
        self.fd: int | None = None
        self.stream: IO[bytes] | None = None  # ``configure(stream=…)``: written to instead of ``fd``
        self.autoflush = True
        self.lock = threading.Lock()
        self.dropped = 0  # lines dropped since the process started (hookgate_log_lines_dropped_total)
        self._unreported = 0  # of those, the ones no ``log.dropped`` line has counted yet
        self._lines: list[bytes] = []
        self._size = 0
        self._changed = threading.Condition(self.lock)  # lines to write; a batch written
        self._writer: threading.Thread | None = None
        self._writing = False  # the writer thread holds a batch (taken from ``_lines``, not yet written)
        self._abandoned = False  # a stop gave up waiting for a stalled writer: flushes no longer wait
        self._inside = threading.local()  # ``.held``: this thread holds ``lock``
        self._reentered: deque[bytes] = deque()  # lines that arrived while their thread held ``lock``

    def open_stderr(self) -> int:
        """stderr's copy, taken now if not yet (``configure`` takes it): an ``OSError`` if it cannot be
        (stderr closed, no descriptor left), tried again at the next write."""
        if self.fd is None:
            self.fd = os.dup(2)
        return self.fd

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self.lock:
            self._inside.held = True
            try:
                yield
            finally:
                self._inside.held = False

    def write(self, line: bytes, urgent: bool) -> None:
        if getattr(self._inside, "held", False):
            self._reentered.append(line)  # taken in by the next batch
            return
        with self._locked():
            while self._reentered:  # earlier than this one
                self._lines.append(self._reentered.popleft())
            if self._size + len(line) > self.MAX_PENDING:  # only while the writer thread waits on a reader
                self.dropped += 1
                self._unreported += 1
                return
            self._lines.append(line)
            self._size += len(line)
            if urgent or self.autoflush or self._size >= self.FLUSH_BYTES:
                self._flush_locked()

    def flush(self, timeout: float = 2.0) -> None:
        """Everything pending written; with the writer thread, waits at most ``timeout`` for it."""
        if getattr(self._inside, "held", False):
            return
        with self._locked():
            self._flush_locked()
            if self._writer is not None and not self._abandoned:
                self._changed.wait_for(lambda: not self._lines and not self._writing, timeout)

    def start_writer(self) -> None:
        with self._locked():
            if self._writer is None:
                self._abandoned = False
                # a daemon: one blocked on a reader that never reads again does not keep the process
                self._writer = threading.Thread(target=self._run, name="hookgate-log", daemon=True)
                self._writer.start()

    def stop_writer(self, timeout: float = 2.0) -> None:
        """Back to writing on the caller's thread, once the writer has written what it holds; a writer
        still blocked after ``timeout`` keeps the lines (they are lost if the process then exits),
        and later flushes do not wait for it again."""
        self.flush(timeout)
        with self._locked():
            if self._writer is not None and not self._lines and not self._writing:
                writer, self._writer = self._writer, None
                self._changed.notify_all()
            else:
                writer, self._abandoned = None, self._writer is not None
        if writer is not None:
            writer.join(timeout)

    def _flush_locked(self) -> None:
        if self._writer is not None:
            self._changed.notify_all()
            return
        data, count, reported = self._take_locked()
        if count:
            self._write(data, count, reported)

    def _take_locked(self) -> tuple[bytes, int, int]:
        """The pending lines as one write, their count, and the dropped lines a ``log.dropped`` line
        put first reports (put back with the batch's own if the write fails)."""
        while self._reentered:
            self._lines.append(self._reentered.popleft())
        if not self._lines:
            return b"", 0, 0
        count, reported = len(self._lines), self._unreported
        if reported:
            self._lines.insert(0, _dropped_line(reported))
            self._unreported = 0
        data = b"".join(self._lines)
        self._lines.clear()
        self._size = 0
        return data, count, reported

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._locked():
                self._changed.wait_for(lambda: self._lines or self._reentered or self._writer is not me)
                if self._writer is not me and not self._lines and not self._reentered:
                    return
                data, count, reported = self._take_locked()
                self._writing = True
            try:
                self._write(data, count, reported)
            finally:
                with self._locked():
                    self._writing = False
                    self._changed.notify_all()

    def _write(self, data: bytes, count: int, reported: int) -> None:
        try:
            if self.stream is not None:
                self.stream.write(data)
                self.stream.flush()
                return
            fd = self.fd if self.fd is not None else self.open_stderr()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except (OSError, ValueError):
            with self._locked() if self._writer is threading.current_thread() else _NO_LOCK:
                self.dropped += count
                self._unreported += count + reported


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


_NO_LOCK = _NoLock()


def _dropped_line(count: int) -> bytes:
    fields = {"ts": _now_iso(), "level": "warning", "event": "log.dropped", "instance": INSTANCE_ID, "count": count}
    return _console(None, "", fields) if _state["console"] else _encode(fields) + b"\n"


_sink = _Sink()


class _LineLogger:
    def __init__(self, sink: _Sink) -> None:
        self._sink = sink

    def msg(self, message: bytes, urgent: bool = False) -> None:
        self._sink.write(message, urgent)

    info = debug = msg

    def warning(self, message: bytes) -> None:
        self._sink.write(message, True)

    error = critical = exception = warning


_ts_cache: list[Any] = [-1, "", -1, ""]  # second, its text; millisecond, its full stamp


def _now_iso() -> str:
    """ISO-8601 UTC with milliseconds; formatted once per millisecond (many lines share one)."""
    ms = int(time.time() * 1000)
    cache = _ts_cache
    if ms == cache[2]:
        return cache[3]  # type: ignore[no-any-return]
    sec = ms // 1000
    if sec != cache[0]:
        cache[0], cache[1] = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    stamp = f"{cache[1]}.{ms % 1000:03d}Z"
    cache[2], cache[3] = ms, stamp
    return stamp


def _timestamp(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    event["ts"] = _now_iso()
    return event


def _level(_: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    event["level"] = "warning" if method == "warn" else method
    event["instance"] = INSTANCE_ID
    return event


def _exception(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """``log.exception(…)``: the exception's type and where it was raised (``error_type``,
    ``error_at``: file, line and function of the innermost frame) in place of ``exc_info``. Not its
    message nor a traceback's values: they may quote a body, a reply or a secret (operations.md §2)."""
    info = event.pop("exc_info", None)
    if info is None or info is False:
        return event
    exc = info if isinstance(info, BaseException) else (info[1] if isinstance(info, tuple) else sys.exc_info()[1])
    if exc is None:
        return event
    event.setdefault("error_type", type(exc).__name__)
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        code = tb.tb_frame.f_code
        event.setdefault("error_at", f"{os.path.basename(code.co_filename)}:{tb.tb_lineno} in {code.co_name}")
    return event


def _cap(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Any text value past 500 characters is cleaned and cut (operations.md §2), whatever its field: a
    session key taken from a payload or rendered from a template logged a megabyte three times a run."""
    for key, value in event.items():
        if type(value) is str and len(value) > 500:
            event[key] = clean_text(value)
    return event


def _json(_: Any, __: str, event: MutableMapping[str, Any]) -> bytes:
    return _encode(event) + b"\n"


def _console(_: Any, __: str, event: MutableMapping[str, Any]) -> bytes:
    head = f"{event.pop('ts', '')} {event.pop('level', ''):7} {event.pop('event', '')}"
    event.pop("instance", None)
    rest = " ".join(f"{k}={v}" for k, v in event.items())
    return f"{head} {rest}\n".encode()


_state: dict[str, Any] = {"level": 20, "console": False}


def info_line(event: str, fields: dict[str, Any]) -> None:
    """The per-request fast path (``http.request``, ``hook.accepted``): the same line structlog would
    write at level info, without the processor chain. ``fields`` is consumed."""
    if _state["level"] > 20:
        return
    fields["event"] = event
    fields["ts"] = _now_iso()
    fields["level"] = "info"
    fields["instance"] = INSTANCE_ID
    _sink.write(_console(None, "", fields) if _state["console"] else _encode(fields) + b"\n", False)


def configure(level: str = "info", fmt: str | None = None, stream: IO[bytes] | None = None) -> None:
    """Configure structlog once per process. ``fmt`` None: console on a terminal, else JSON."""
    if fmt is None:
        fmt = "console" if sys.stderr is not None and sys.stderr.isatty() else "json"  # None: started with 2>&-
    _state["level"] = _LEVELS.get(level, 20)
    _state["console"] = fmt == "console"
    if stream is not None:
        _sink.stream = stream
    with contextlib.suppress(OSError):  # now, not at a first write that may come when no fd is left
        _sink.open_stderr()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            _timestamp,
            _level,
            _exception,
            _cap,
            _console if fmt == "console" else _json,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, 20)),
        logger_factory=lambda *_: _LineLogger(_sink),
        cache_logger_on_first_use=True,
    )


def set_buffered(buffered: bool) -> None:
    """While a server runs, lines are flushed by its ticker rather than one write per line, and
    written by a thread of their own (``_Sink``)."""
    _sink.autoflush = not buffered
    if buffered:
        _sink.start_writer()
    else:
        _sink.stop_writer()


def flush(timeout: float = 2.0) -> None:
    """Pending lines written (with the server's writer thread: waiting for it at most ``timeout``)."""
    _sink.flush(timeout)


def dropped_lines() -> int:
    """Log lines dropped since the process started: unwritable, or past what a stalled reader holds."""
    return _sink.dropped


def get_logger(**context: Any) -> Any:
    return structlog.get_logger().bind(**context)


class LineLimiter:
    """At most one log line per key per ``interval_s``, for a warning that can repeat on every
    request (warnings are flushed at once: one a request would flood the log and cost a write each).

    ``due(key, n)`` records ``n`` occurrences and returns how many the line about to be written stands
    for (those held back since the key's last line, plus ``n``), or ``None`` to hold this one back.
    Past ``max_keys`` keys the one whose line is oldest is forgotten, so a flood of distinct keys
    cannot grow the table; sized to the keys that can be active at once, none is forgotten within its
    interval; a forgotten key's held-back count is lost with it. (The table once started over when
    full: with more keys than that active, every key was new again, and every occurrence was logged.)"""

    def __init__(self, interval_s: float, max_keys: int = 4096) -> None:
        self.interval_s = interval_s
        self._max_keys = max_keys
        # key → (time.monotonic() of its line, held back), oldest line first
        self._last: OrderedDict[object, tuple[float, int]] = OrderedDict()

    def due(self, key: object = None, n: int = 1) -> int | None:
        now = time.monotonic()
        last, held = self._last.get(key, (-self.interval_s, 0))
        if now - last < self.interval_s:
            self._last[key] = (last, held + n)  # (its place stays: ordered by the time of its line)
            return None
        if self._last.pop(key, None) is None and len(self._last) >= self._max_keys:
            self._last.popitem(last=False)
        self._last[key] = (now, 0)
        return held + n

    def force(self, key: object = None, n: int = 1) -> int:
        """A line written whatever the interval (one that must not be held back): how many it
        stands for, those held back since the key's last line included; its interval starts again."""
        _, held = self._last.pop(key, (0.0, 0))
        if len(self._last) >= self._max_keys:
            self._last.popitem(last=False)
        self._last[key] = (time.monotonic(), 0)
        return held + n


class _StdlibBridge(logging.Handler):
    """Warnings and errors of libraries that log through ``logging`` (uvicorn), as JSON lines:
    ``server.message`` with the logger's name and its sanitised message. The same message from one
    logger is written at most once per 10 s, with the ``count`` it stands for: each malformed request
    (an unauthenticated client's bytes) cost a warning line and a write(2) of its own."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.limiter = LineLimiter(10.0, 256)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = clean_text(record.getMessage())
        except Exception:  # noqa: BLE001 - a malformed record must not break the caller
            message = "unformattable log record"
        count = self.limiter.due((record.name, record.levelno, message[:120]))
        if count is None:
            return
        log = get_logger()
        method = log.error if record.levelno >= logging.ERROR else log.warning
        method("server.message", logger=record.name, message=message, count=count,
               error_type=record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None)


def _exception_fields(exc: BaseException | None, fallback: type[BaseException] | None = None) -> dict[str, Any]:
    if exc is not None:
        return {"exc_info": exc}  # its type and where it was raised (``_exception``), never its message
    return {"error_type": fallback.__name__ if fallback is not None else None}


# each of the three below at most once per 10 s per error type, with the count it stands for: a
# transform whose objects raise in ``__del__`` on every request wrote 40 000 lines in 1.7 s
_UNHANDLED_LINES = LineLimiter(10.0, 256)


def _unhandled(event: str, type_name: str, **fields: Any) -> None:
    count = _UNHANDLED_LINES.due((event, type_name))
    if count is not None:
        get_logger().error(event, count=count, **fields)


def loop_exception_handler(_: Any, context: dict[str, Any]) -> None:
    """The event loop's unhandled errors (a task's exception never retrieved, a callback that raised:
    a transform's own tasks among them) as one JSON line each, ``loop.unhandled``; asyncio's default
    printed a traceback with the exception's message (a payload, a secret) across many lines."""
    exc = context.get("exception")
    where = "task" if "task" in context or "future" in context else "callback" if "handle" in context else "loop"
    fields = _exception_fields(exc if isinstance(exc, BaseException) else None)
    if exc is None:
        fields["message"] = clean_text(str(context.get("message", "")), 200)
    _unhandled("loop.unhandled", f"{where}:{type(exc).__name__}", where=where, **fields)


def thread_excepthook(args: Any) -> None:
    """A thread's unhandled exception (one a transform started) as ``thread.unhandled``, not a
    traceback with its message."""
    if args.exc_type is SystemExit:
        return
    name = getattr(args.thread, "name", None) or "?"
    _unhandled("thread.unhandled", getattr(args.exc_type, "__name__", "?"), thread=clean_text(str(name), 100),
               **_exception_fields(args.exc_value, args.exc_type))


def unraisable_hook(args: Any) -> None:
    """An exception Python cannot raise (in a ``__del__``, a finaliser) as ``python.unraisable``."""
    _unhandled("python.unraisable", getattr(args.exc_type, "__name__", "?"),
               **_exception_fields(args.exc_value, args.exc_type))


def install_unhandled_hooks(loop: Any) -> None:
    """Every error nothing else handles, as JSON lines (operations.md §2: one object per line)."""
    loop.set_exception_handler(loop_exception_handler)
    threading.excepthook = thread_excepthook
    sys.unraisablehook = unraisable_hook


def bridge_stdlib(*names: str) -> None:
    """Route the named stdlib loggers' warnings and errors into the JSON log (once per process)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(h, _StdlibBridge) for h in logger.handlers):
            logger.addHandler(_StdlibBridge(logging.WARNING))
        logger.propagate = False
