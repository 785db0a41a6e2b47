"""Import, cache and call Python transforms (hooks.md §6.5, §6.6).

Modules are imported by file path under a private name (the transforms directory never joins
``sys.path``), cached per (absolute path, export) and re-imported when the file's modification time,
size or inode changes. The containment and symlink checks run again on every (re)import.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import inspect
import itertools
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from hookgate.config.paths import ContainmentError, check_contained
from hookgate.config.settings import MappingSettings
from hookgate.threads import run_on_daemon_thread

NO_FUNCTION = "hook transform module must export a function"
_counter = itertools.count(1)


class TransformFailed(Exception):
    """A transform could not be loaded, raised, timed out or returned a bad value (→ 500).

    ``kind`` is the exception type name logged as ``hook.mapping_failed``. ``detail`` is shown by
    ``hookgate hooks test``; it is logged too only when it is ``ours`` — a fixed text of hookgate's
    (``hook transform module must export a function``), never the transform's own error message,
    which may quote the payload.
    """

    def __init__(self, kind: str, detail: str, *, ours: bool = False, lasting: bool = True) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.ours = ours
        self.lasting = lasting  # the module's own (it raised, exports nothing): the same until it changes


@dataclass(frozen=True, slots=True)
class _Loaded:
    signature: tuple[int, int, int]
    fn: Callable[..., Any]
    is_async: bool


def _signature(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _find_function(module: Any, export: str | None) -> Callable[..., Any]:
    names = (export,) if export else ("transform", "default")
    for name in names:
        fn = module.__dict__.get(name)
        if callable(fn):
            return fn  # type: ignore[no-any-return]
    raise TransformFailed("TransformExportError", NO_FUNCTION, ours=True)


_Flight = tuple[str, str | None, tuple[int, int, int] | None]  # a module, its export, its file's version
IMPORT_WAIT_MAX = 30.0  # how much longer than the call's timeout a request waits for its module's import


@dataclass(frozen=True, slots=True)
class _Failure:
    signature: tuple[int, int, int]
    kind: str
    detail: str
    ours: bool


class TransformLoader:
    """One per process (the gateway's, or the CLI's). Thread-safe: loading runs in worker threads.

    Each module imports under a lock of its own: a module whose top level is slow (or never ends)
    holds up the requests of its mapping, not another module's first import. A module that failed to
    import (it raised, exports no function) fails again, without running again, until its file changes."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str | None], _Loaded] = {}
        self._failed: dict[tuple[str, str | None], _Failure] = {}
        self._lock = threading.Lock()  # the dicts' own; held briefly, never across an import
        self._key_locks: dict[_Flight, threading.Lock] = {}  # one import at a time per module version
        self._importing: dict[_Flight, asyncio.Future[_Loaded]] = {}  # the loop's own

    def _imported(self, flight: _Flight, importing: asyncio.Future[_Loaded]) -> None:
        if self._importing.get(flight) is importing:
            del self._importing[flight]
        _retrieve(importing)

    def forget_failures(self) -> None:
        """A reload tries failed modules again (what they import may have been installed since)."""
        with self._lock:
            self._failed.clear()

    def fresh(self, mapping: MappingSettings) -> Callable[..., Any] | None:
        """The loaded function when its file is unchanged since the import, else ``None``."""
        loaded = self._fresh(mapping)
        return None if loaded is None else loaded.fn

    def _fresh(self, mapping: MappingSettings) -> _Loaded | None:
        # Lock-free, one ``stat``: the hot path of every call after the first. It runs on the event
        # loop, not in the worker thread: a ``stat`` there would release the GIL and make the worker
        # win it back from a busy loop a second time per call.
        path = mapping.transform_module or ""
        loaded = self._cache.get((path, mapping.transform_export))
        if loaded is None:
            return None
        try:
            signature = _signature(path)
        except (OSError, ValueError):  # ValueError: a NUL in the path (config check refuses one)
            return None
        return loaded if loaded.signature == signature else None

    async def call(
        self, mapping: MappingSettings, ctx: Any, transforms_dir: str, root: str | None, timeout: float
    ) -> Any:
        """Run the mapping's transform on ``ctx`` (import or re-import first when needed).

        The common case is a ``stat`` of the file and one hop to a worker thread that calls the
        function (an ``async def`` one is awaited on the loop instead). When the file is new or has
        changed, the (re)import runs in a thread first, outside the call's timeout.
        """
        loaded = self._fresh(mapping)
        if loaded is None:
            # On a daemon thread of its own, not the loop's shared executor: an import that never ends
            # held a thread that /metrics, reloads and file deliveries waited for, and the exit too.
            # The request waits at most IMPORT_WAIT_MAX more than its timeout; the import goes on, and
            # serves the next request when it ends. One import at a time per module: the requests
            # that come meanwhile wait for that one (a thread each would pile up behind a hung one).
            # keyed by the file's version too: the file fixed after an import that hangs is imported
            # anew, not waited for behind the hung one (its requests failed until a restart)
            path = mapping.transform_module or ""
            try:
                version: tuple[int, int, int] | None = _signature(path)
            except (OSError, ValueError):
                version = None
            flight = (path, mapping.transform_export, version)
            importing = self._importing.get(flight)
            if importing is None or importing.done():
                importing = self._importing[flight] = run_on_daemon_thread(
                    self._load, mapping, transforms_dir, root, name="hookgate-import")
                importing.add_done_callback(partial(self._imported, flight))
            try:
                loaded = await asyncio.wait_for(asyncio.shield(importing), timeout + IMPORT_WAIT_MAX)
            except TimeoutError:
                raise TransformFailed("TimeoutError", f"transform module import took longer than "
                                                      f"{timeout + IMPORT_WAIT_MAX:g}s", ours=True) from None
        return await call_transform(loaded.fn, ctx, timeout, is_async=loaded.is_async)

    def load(self, mapping: MappingSettings, transforms_dir: str, root: str | None = None) -> Callable[..., Any]:
        """The transform function of ``mapping``, (re)importing the module when its file changed."""
        return self._load(mapping, transforms_dir, root).fn

    def _load(self, mapping: MappingSettings, transforms_dir: str, root: str | None) -> _Loaded:
        raw = mapping.transform_module_raw or ""
        path = mapping.transform_module or ""
        key = (path, mapping.transform_export)
        try:
            signature = _signature(path)
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path, which no file has
            raise TransformFailed("FileNotFoundError", f"hook transform module not found: {path}", ours=True) from exc
        with self._lock:
            key_lock = self._key_locks.setdefault((*key, signature), threading.Lock())
        with key_lock:
            cached = self._cache.get(key)
            if cached is not None and cached.signature == signature:
                return cached
            try:
                if root is not None:
                    check_contained(root, os.path.relpath(transforms_dir, root), kind="transformsDir")
                resolved = check_contained(transforms_dir, raw, kind="module")
            except ContainmentError as exc:
                self._cache.pop(key, None)
                raise TransformFailed("ContainmentError", exc.message, ours=True) from exc
            if resolved != path:
                raise TransformFailed("ContainmentError", f"hook transform module moved: {raw}", ours=True)
            failed = self._failed.get(key)
            if failed is not None and failed.signature == signature:
                raise TransformFailed(failed.kind, failed.detail, ours=failed.ours)
            try:
                module = _import(path)
                fn = _find_function(module, mapping.transform_export)
            except TransformFailed as exc:
                if exc.lasting:  # not a passing failure to read the file (no descriptor left: EMFILE)
                    self._failed[key] = _Failure(signature, exc.kind, exc.detail, exc.ours)
                raise
            self._failed.pop(key, None)
            loaded = self._cache[key] = _Loaded(signature, fn, inspect.iscoroutinefunction(fn))
            return loaded


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # an abandoned import's failure: not "never retrieved"


def _import(path: str) -> Any:
    digest = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    name = f"_hookgate_transform_{digest}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TransformFailed("ImportError", f"cannot import {path}", ours=True)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name while executing
    try:
        # Compiled from the source itself, not through the loader: its bytecode cache (__pycache__)
        # trusts a whole-second mtime and the size, so an edit of the same size within the second
        # of the previous write would run the old code again.
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        sys.modules.pop(name, None)
        raise TransformFailed(type(exc).__name__, str(exc), lasting=False) from exc
    try:
        code = compile(source, path, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - running the configured transform is the point
    except BaseException as exc:
        sys.modules.pop(name, None)
        # Synchronous code: whatever it raised is the module's own, a CancelledError included (the
        # request's cancellation arrives at an await, never here).
        if isinstance(exc, Exception):
            raise TransformFailed(type(exc).__name__, str(exc)) from exc
        raise TransformFailed(type(exc).__name__, str(exc)) from None
    for old in [k for k in sys.modules if k.startswith(f"_hookgate_transform_{digest}_") and k != name]:
        sys.modules.pop(old, None)
    return module


class _Inbox:
    """One event loop's side of the pool: finished calls and the call deadlines.

    Workers post results here; one ``call_soon_threadsafe`` wakes the loop for every result posted
    while a drain is pending, so a busy loop is woken once per batch, not once per call. Deadlines
    are checked by one timer every ``TICK`` while calls are in flight (a call times out within
    ``TICK`` after its limit): an ``asyncio.timeout`` or a timer handle per call costs more than the
    rest of the hop.
    """

    TICK = 0.01
    QUEUE_WAIT_MAX = 30.0  # how much longer than its timeout a call may wait for a free thread

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._done: deque[tuple[asyncio.Future[Any], Any, BaseException | None]] = deque()
        self._scheduled = False
        # the calls in flight: their deadline, timeout and start cell (``_Pool.call``)
        self._deadlines: dict[asyncio.Future[Any], tuple[float, float, list[float]]] = {}
        self._ticking: asyncio.TimerHandle | None = None
        self.grow_check: asyncio.TimerHandle | None = None  # the pool's pending look at its threads
        self.wake_pending = False  # the pool's threads are woken at the end of this loop iteration

    def post(self, future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        """From a worker thread."""
        self._done.append((future, result, error))
        if not self._scheduled:
            self._scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop has closed: nobody is waiting any more
                pass

    def _drain(self) -> None:
        self._scheduled = False  # before popping: a result posted from now on schedules a new drain
        done = self._done
        while done:
            future, result, error = done.popleft()
            if future.done():  # timed out meanwhile
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

    def deadline(self, future: asyncio.Future[Any], timeout: float, started: list[float]) -> None:
        """Fail ``future`` with ``TimeoutError`` once its call has run ``timeout`` seconds, unless
        ``forget``-ten first. ``started[0]`` is set (``time.monotonic()``) by the thread that takes the
        call: a call still waiting for a thread — every one busy with slow transforms, perhaps of other
        mappings — is not failed for that wait (hooks.md §6.5 bounds the call), but for at most
        ``QUEUE_WAIT_MAX`` seconds more."""
        self._deadlines[future] = (self.loop.time() + timeout, timeout, started)
        if self._ticking is None:
            self._ticking = self.loop.call_later(self.TICK, self._tick)

    def forget(self, future: asyncio.Future[Any]) -> None:
        self._deadlines.pop(future, None)

    def _tick(self) -> None:
        """Every ``TICK`` while calls are in flight (a handful: one scan is cheaper than a timer each)."""
        now = self.loop.time()
        expired = [future for future, (deadline, _, _) in self._deadlines.items() if deadline <= now]
        for future in expired:
            deadline, timeout, started = self._deadlines[future]
            if started[0]:  # running: its own time counts from when a thread took it
                if started[0] + timeout > now:
                    self._deadlines[future] = (started[0] + timeout, timeout, started)
                    continue
            elif now < deadline + self.QUEUE_WAIT_MAX:  # still waiting for a thread
                continue
            del self._deadlines[future]
            if not future.done():
                future.set_exception(TimeoutError())
        self._ticking = self.loop.call_later(self.TICK, self._tick) if self._deadlines else None


class _Pool:
    """Daemon worker threads for synchronous transforms.

    Lighter than a ``ThreadPoolExecutor`` hop (no concurrent future to chain), and a transform
    stuck in an endless loop cannot hold up the process's exit: its thread is a daemon.

    Grows only when the work needs it: a call waiting in the queue starts a new thread (up to
    ``MAX_THREADS``) when every thread has been busy with its current call for ``GROW_AFTER``
    seconds — slow or stuck transforms (timed-out calls keep their thread until they return). Quick
    transforms, however many, are served by one thread: more would only contend for the GIL and
    hold memory.
    """

    MAX_THREADS = 32
    GROW_AFTER = 0.005

    def __init__(self) -> None:
        # Calls wait in a deque; waiting threads are notified once per event-loop iteration for all
        # the calls made in it, so a burst of calls costs one thread wake-up and one GIL hand-over,
        # not one each. A busy thread takes the next call without being notified.
        self._calls: deque[tuple[_Inbox, asyncio.Future[Any], Callable[..., Any], Any, list[float]]] = deque()
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._threads = 0
        self._idle = 0
        self._busy_since: dict[int, float] = {}  # thread ident → when its current call started
        self._inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Inbox] = weakref.WeakKeyDictionary()

    def _inbox(self, loop: asyncio.AbstractEventLoop) -> _Inbox:
        inbox = self._inboxes.get(loop)
        if inbox is None:
            inbox = self._inboxes[loop] = _Inbox(loop)
        return inbox

    async def call(self, fn: Callable[..., Any], arg: Any, timeout: float) -> Any:
        """``fn(arg)`` in a worker thread; ``TimeoutError`` after ``timeout`` seconds (the thread is
        left to finish on its own)."""
        loop = asyncio.get_running_loop()
        inbox = self._inbox(loop)
        future: asyncio.Future[Any] = loop.create_future()
        started = [0.0]  # set by the thread that takes the call
        self._calls.append((inbox, future, fn, arg, started))
        if not inbox.wake_pending:
            inbox.wake_pending = True
            loop.call_soon(self._wake, inbox)
        inbox.deadline(future, timeout, started)
        try:
            return await future
        finally:
            inbox.forget(future)

    def _wake(self, inbox: _Inbox) -> None:
        inbox.wake_pending = False
        with self._ready:
            if self._idle:
                self._ready.notify(len(self._calls))
        self._maybe_grow(inbox)

    def _maybe_grow(self, inbox: _Inbox) -> None:
        inbox.grow_check = None
        with self._lock:
            if self._idle or self._threads >= self.MAX_THREADS or not self._calls:
                return
            if self._threads == 0:
                wait = 0.0
            else:  # a thread between two calls counts as one that just started
                newest = max(self._busy_since.values(), default=time.monotonic())
                wait = self.GROW_AFTER - (time.monotonic() - newest)
            if wait <= 0:
                self._threads += 1
                name = f"hookgate-transform-{self._threads}"
        if wait <= 0:
            threading.Thread(target=self._work, name=name, daemon=True).start()
            wait = self.GROW_AFTER
        if inbox.grow_check is None:  # look again once the newest call has run that long
            inbox.grow_check = inbox.loop.call_later(wait, self._maybe_grow, inbox)

    def _work(self) -> None:
        me = threading.get_ident()
        busy = self._busy_since
        calls = self._calls
        while True:
            with self._ready:
                while not calls:
                    self._idle += 1
                    self._ready.wait()
                    self._idle -= 1
                inbox, future, fn, arg, started = calls.popleft()
                if future.done():  # it gave up waiting (or its request went away): not run at all
                    continue
                busy[me] = started[0] = time.monotonic()
            try:
                result, error = fn(arg), None
            except BaseException as exc:  # noqa: BLE001 - reported to the awaiting request, never raised here
                result, error = None, exc if isinstance(exc, Exception) else TransformFailed(type(exc).__name__, str(exc))
            with self._lock:
                del busy[me]
            inbox.post(future, result, error)
            del inbox, future, fn, arg, started, result, error


_POOL = _Pool()


async def _bounded(awaitable: Any, deadline: float) -> Any:
    """Await a transform's awaitable until ``deadline`` (loop time), then give up on it: it is
    cancelled and no longer waited for, so one that catches the cancellation and goes on still fails
    at its deadline (its late result or error is dropped). ``TimeoutError`` when it was too late."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(_contained(awaitable, deadline - loop.time()))
    try:
        await asyncio.wait((task,), timeout=max(0.0, deadline - loop.time()))
    except asyncio.CancelledError:  # the request itself is cancelled: so is the transform
        task.cancel()
        task.add_done_callback(_drop_outcome)  # not awaited: its error must not be reported as unretrieved
        raise
    if not task.done():
        task.cancel()
        task.add_done_callback(_drop_outcome)
        raise TimeoutError
    return task.result()  # its value, its exception, or CancelledError when it was cancelled itself


class _Stepped:
    """Awaits an awaitable and adds up how long its own steps ran (``busy``): each resumption until it
    yields again is time the transform held the event loop, not time other work held it."""

    __slots__ = ("_awaitable", "busy")

    def __init__(self, awaitable: Any) -> None:
        self._awaitable = awaitable
        self.busy = 0.0

    def __await__(self) -> Any:
        inner = self._awaitable.__await__()
        clock = time.perf_counter
        value: Any = None
        error: BaseException | None = None
        while True:
            started = clock()
            try:
                yielded = inner.send(value) if error is None else inner.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                self.busy += clock() - started
            value, error = None, None
            try:
                value = yield yielded
            except GeneratorExit:
                inner.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - a cancellation, handed on to the transform
                error = exc


async def _contained(awaitable: Any, budget: float) -> Any:
    """A task that raises ``SystemExit`` or ``KeyboardInterrupt`` stops the event loop itself; a
    transform's is its failure like any other exception (its text unlogged: it may hold payload).

    An ``async def`` transform that blocks (``time.sleep``, a busy loop) holds the event loop, so no
    timer can interrupt it: one whose own steps ran longer than ``budget`` has taken too long
    (hooks.md §6.5) whatever it then returns or raises — ``TimeoutError``, its outcome dropped. Only
    its own steps count: one that was merely kept waiting while another blocked the loop is not
    failed for it."""
    stepped = _Stepped(awaitable)
    try:
        value = await stepped
    except asyncio.CancelledError:
        raise
    except (SystemExit, KeyboardInterrupt) as exc:
        raise TransformFailed(type(exc).__name__, "") from None
    except BaseException:
        if stepped.busy > budget:
            raise TimeoutError from None
        raise
    if stepped.busy > budget:
        raise TimeoutError
    return value


def _drop_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not report it as never retrieved


async def call_transform(fn: Callable[..., Any], ctx: Any, timeout: float, *, is_async: bool | None = None) -> Any:
    """Call ``fn(ctx)``: awaited when async, else in a worker thread; at most ``timeout`` seconds."""
    if is_async is None:
        is_async = inspect.iscoroutinefunction(fn)
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        if is_async:
            return await _bounded(fn(ctx), deadline)
        result = await _POOL.call(fn, ctx, timeout)
        if inspect.isawaitable(result):  # a plain function that returned a coroutine or a future
            result = await _bounded(result, deadline)
        return result
    except TimeoutError:
        raise TransformFailed("TimeoutError", f"transform took longer than {timeout:g}s", ours=True) from None
    except TransformFailed:
        raise
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the request itself is being cancelled
            raise
        # the transform's own (it awaited something that was cancelled): it failed
        raise TransformFailed("CancelledError", str(exc)) from None
    except BaseException as exc:  # trusted code, but it must not stop the server
        raise TransformFailed(type(exc).__name__, str(exc)) from exc
