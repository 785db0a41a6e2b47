"""``hookgate serve``: open the store, bind, serve, reload on SIGHUP, drain on SIGTERM (operations.md §1.1)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import gc
import os
import signal
import socket
import sys
from collections.abc import Callable, Generator
from functools import partial
from typing import IO, Any

import uvicorn

from hookgate import __version__
from hookgate.clock import Clock, SystemClock
from hookgate.config.settings import Settings
from hookgate.edge.app import Gateway
from hookgate.edge.protocol import HookgateHttpProtocol
from hookgate.errors import ConfigError, HookgateError
from hookgate.flows.rules import DAY_MS
from hookgate.obs import logging as obs_logging
from hookgate.obs.metrics import Metrics
from hookgate.runtime.worker import Worker
from hookgate.store import open_store
from hookgate.threads import run_on_daemon_thread

LOG_FLUSH_SECONDS = 0.1
# The store's commit thread needs the GIL back when its COMMIT returns, to hand the group back to
# the event loop; with the default 5 ms switch interval a busy loop makes it wait up to 5 ms each
# time (group commits stall).
GIL_SWITCH_INTERVAL = 0.0002
GC_YOUNG_THRESHOLD = 7000
CONFIG_WATCH_SECONDS = 2.0
QUIET_RELEASE_SECONDS = 1.0  # a spell this long without a request or a write, after a burst, releases memory


_malloc_trim: Any = None


def trim_heap() -> None:
    """Return the C heap's free memory to the OS (glibc's ``malloc_trim``; nothing where libc has
    none): freed small blocks otherwise stay mapped, counted in RSS, until the heap reuses them."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


def _http_drain(settings: Settings) -> float:
    """How long requests in progress get once shutdown begins (at least 1 s, to write their answer)."""
    return max(1.0, float(settings.gateway.drain_timeout_seconds))


class _UvicornServer(uvicorn.Server):
    """Uvicorn without its own signal handling: hookgate installs its handlers on the loop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def ready_lines(settings: Settings, host: str, port: int) -> list[str]:
    base = f"http://{_url_host(host)}:{port}"
    lines = [f"hookgate {__version__} listening on {base}"]
    hooks = settings.hooks
    if hooks.enabled:
        bp = hooks.base_path
        line = f"hooks: POST {base}{bp}/wake, {bp}/agent"
        names = [m.match_path or "*" for m in hooks.mappings]  # "*": a mapping that matches any name
        if names:
            line += f", {bp}/<{'|'.join(dict.fromkeys(names))}>"
        lines.append(line)
    else:
        lines.append("hooks: disabled")
    for route in settings.webhooks.routes:
        if route.skipped_reason:
            lines.append(f"route {route.id}: skipped ({route.skipped_reason})")
        else:
            lines.append(f"route {route.id}: POST {base}{route.path}")
    st = settings.storage
    if st.backend == "sqlite":
        lines.append(f"store: sqlite {st.sqlite_path} (durability {st.durability})")
    else:
        lines.append("store: postgres")
    return lines


class Service:
    """One running gateway process: HTTP edge plus its background tasks."""

    def __init__(self, settings: Settings, reload_settings: Callable[[], Settings], *, bind: str | None,
                 port: int | None, out: IO[str], clock: Clock | None = None, worker: bool = True,
                 read_stamp: FileStamp | None = None) -> None:
        self.with_worker = worker
        self.worker: Worker | None = None
        self.settings = settings
        self.reload_settings = reload_settings
        self.host = bind or settings.gateway.bind
        self.port = settings.gateway.port if port is None else port
        self._flags = (bind, port)  # --bind/--port win over the file, at start and at every reload
        self._reload_lock = asyncio.Lock()
        self._reload_queued = False  # a reload waits for the running one: later signals join it
        self.out = out
        self.clock = clock or SystemClock()
        self.metrics = Metrics()
        self.log = obs_logging.get_logger()
        self._signals = 0
        self._worker_drain: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        # the config file as it was when last read (taken before each read): what the watch compares
        self._read_stamp = read_stamp
        if read_stamp is None and settings.config_path:
            self._read_stamp = file_stamp(settings.config_path)

    async def run(self) -> int:
        sys.setswitchinterval(GIL_SWITCH_INTERVAL)
        try:
            store = open_store(self.settings.storage, metrics=self.metrics, clock=self.clock)
            await store.open("serve")
        except HookgateError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 1
        try:
            return await self._serve(store)
        finally:
            _kill_running_providers()  # of a reload the stop abandoned
            await store.close()
            obs_logging.set_buffered(False)

    async def _serve(self, store: Any) -> int:
        gw = self.gateway = Gateway(self.settings, store, metrics=self.metrics, clock=self.clock)
        try:
            sock = _bind(self.host, self.port)
        except OSError as exc:
            print(f"error: cannot listen on {self.host}:{self.port}: {exc.strerror}", file=sys.stderr)
            return 1
        config = uvicorn.Config(
            gw, loop="none", http=HookgateHttpProtocol, ws="none", lifespan="off", access_log=False, log_config=None,
            server_header=False, proxy_headers=False, timeout_graceful_shutdown=_http_drain(self.settings),  # type: ignore[arg-type]  # a float is fine (asyncio.wait_for)
            timeout_keep_alive=30,
        )
        server = self.server = _UvicornServer(config)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_stop_signal)
        loop.add_signal_handler(signal.SIGHUP, lambda: self._spawn(self.reload("signal")))
        obs_logging.bridge_stdlib("uvicorn", "uvicorn.error")
        obs_logging.install_unhandled_hooks(loop)
        obs_logging.set_buffered(True)
        if self.with_worker:
            self.worker = Worker(store, lambda: self.settings, self.clock, self.metrics)
            await self.worker.start()
            gw.on_enqueue = self.worker.poke
            if gw.route_surface is not None:
                worker = self.worker
                gw.route_surface.service.on_enqueue = worker.poke
                gw.route_surface.service.on_abort = worker.abort
        self._spawn(self._flush_logs())
        self._spawn(self._release_when_quiet())
        self._spawn(self._sweep())
        if self.settings.config_path:
            self._spawn(self._watch_config(self.settings.config_path))
        port = sock.getsockname()[1]  # read now: a signal during uvicorn's start closes the socket
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.005)
        if server.started and not server.should_exit:  # (a signal during the start: no ready lines)
            _settle_heap()
            self._print_ready_lines(port)
            self.log.info("config.loaded", path=self.settings.config_path, config_hash=self.settings.config_hash)
            self._log_warnings(self.settings)
        await serving
        if self.worker is not None:
            await (self._worker_drain or self._drain_worker())  # none started: the server ended without a signal
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.log.info("shutdown.completed")
        return 0

    def _print_ready_lines(self, port: int) -> None:
        """The listening URL and endpoints on stdout (operations.md §1.1). Stdout closed (``>&-``), a
        full disk or a reader gone is no reason not to serve: the lines are dropped, and a warning says
        so on the log. (A reader that stops reading blocks this once, at the start.)"""
        try:
            if self.out is None:
                raise OSError("stdout is closed")
            for line in ready_lines(self.settings, self.host, port):
                print(line, file=self.out)
            self.out.flush()
        except (OSError, ValueError) as exc:
            self.log.warning("stdout.unwritable", error=obs_logging.clean_text(str(exc), 200))

    def _spawn(self, coro: Any) -> None:
        self._tasks.append(asyncio.create_task(coro))

    def _on_stop_signal(self) -> None:
        self._signals += 1
        if self._signals > 1:
            # the commands of runs in flight die with the process: left running, each would run again
            # beside itself once the restarted gateway takes its run up (operations.md §1.1: "as after
            # a crash" is what the leases see, not a second copy of the work)
            self.log.warning("shutdown.immediate", reason="second_signal")
            command = sys.modules.get("hookgate.agents.command")
            if command is not None:
                command.kill_running_commands()
            _kill_running_providers()
            obs_logging.flush(timeout=0.5)  # a log reader that stopped reading does not hold the exit
            os._exit(1)
        self.log.info("shutdown.started")
        self.gateway.shutting_down = True
        # operations.md §1.1: the listener stops accepting now (uvicorn would close it at its next
        # check, up to 0.1 s later), and the drain is the one configured now (a reload may have
        # changed it since the start)
        for listener in getattr(self.server, "servers", ()):  # none yet when uvicorn has not started
            listener.close()
        self.server.config.timeout_graceful_shutdown = _http_drain(self.settings)  # type: ignore[assignment]
        self.server.should_exit = True
        # running jobs get drainTimeoutSeconds from here, alongside the HTTP drain, not after it
        # (which may itself take that long); then they are aborted and their leases released
        if self.worker is not None:
            self._worker_drain = self._drain_worker()

    def _drain_worker(self) -> asyncio.Task[None]:
        """The worker stops claiming; running jobs get drainTimeoutSeconds, then are aborted and released."""
        assert self.worker is not None
        return asyncio.create_task(self.worker.drain(self.settings.gateway.drain_timeout_seconds))

    async def reload(self, trigger: str) -> None:
        """Re-read the config; an invalid one is logged and the old one stays active (README §4).

        One reload at a time: a slow one (an exec SecretRef) that finished after a later signal's
        would otherwise swap in the older file. A signal during a reload reads the file after it; the
        signals that come while one waits are that one (a storm of 20 SIGHUPs ran 20 reloads, each
        asking every exec secret provider again)."""
        if self._reload_queued:
            return  # one queued already: it starts after the running one, and reads the file after this signal
        self._reload_queued = True
        async with self._reload_lock:
            self._reload_queued = False
            await self._reload(trigger)

    async def _reload(self, trigger: str) -> None:
        if self.settings.config_path:
            # before the read: an edit during it is seen by the watch as a change (one more reload)
            self._read_stamp = file_stamp(self.settings.config_path)
        try:
            # a daemon thread of its own: a provider that hangs neither holds a thread of the loop's shared
            # executor nor keeps the process alive after a stop (it exited when the provider returned)
            new = await run_on_daemon_thread(self.reload_settings, name="hookgate-reload")
        except Exception as exc:  # noqa: BLE001 - a defect too is logged, and the old config stays
            lines = (exc.lines if isinstance(exc, ConfigError)
                     else [f"internal error while loading the config: {type(exc).__name__}"])
            self.metrics.config_reloads.labels("failed").inc()
            self.log.error("config.reload_failed", trigger=trigger,
                           errors=[obs_logging.clean_text(line) for line in lines])
            return
        old = self.settings
        # against what the process runs with (a change reverted by a later reload needs no restart):
        # the address it listens on, unless a flag chose it, and the storage it started with (kept below)
        bind_flag, port_flag = self._flags
        restart = [
            key
            for key, changed in (
                ("gateway.bind", bind_flag is None and new.gateway.bind != self.host),
                ("gateway.port", port_flag is None and new.gateway.port != self.port),
                ("storage", new.storage != old.storage),
            )
            if changed
        ]
        if restart:
            self.log.warning("config.reload_restart_required", keys=restart)
        if new.storage != old.storage:
            # ignored until a restart (README §4): the running store, worker leases and sweeps keep the
            # storage settings they started with
            new = dataclasses.replace(new, storage=old.storage)
        try:
            self.gateway.apply_settings(new)
        except Exception as exc:  # noqa: BLE001 - a defect: the old config goes back in, whole
            self.gateway.apply_settings(old)
            self.metrics.config_reloads.labels("failed").inc()
            self.log.error("config.reload_failed", trigger=trigger,
                           errors=[f"internal error while applying the config: {type(exc).__name__}"])
            return
        self.settings = new
        self.gateway.hooks.transforms.forget_failures()
        self.metrics.config_reloads.labels("ok").inc()
        self.log.info("config.loaded", trigger=trigger, config_hash=new.config_hash)
        self._log_warnings(new)

    def _log_warnings(self, settings: Settings) -> None:
        for route in settings.webhooks.routes:
            if route.skipped_reason:
                self.log.warning("webhook.route_skipped", route=route.id,
                                 reason=obs_logging.clean_text(route.skipped_reason))
        for warning in settings.warnings:
            self.log.warning("config.warning", message=obs_logging.clean_text(warning))
        for item in settings.secret_inputs:
            if item.value is None:  # an optional input (a channel's or runtime's key): its user fails later
                self.metrics.secret_resolution_failures.labels(item.source.split(":", 1)[0]).inc()
                self.log.warning("secret.unresolved", key=item.key_path, source=item.source,
                                 error=obs_logging.clean_text(item.error or "", 200))

    async def _flush_logs(self) -> None:
        while True:
            await asyncio.sleep(LOG_FLUSH_SECONDS)
            obs_logging.flush(timeout=0)  # hands the lines to the log's writer thread; never waits for it

    async def _release_when_quiet(self) -> None:
        """After a burst, once a whole ``QUIET_RELEASE_SECONDS`` passed without a request or a write:
        the store's page caches and the heap's free memory go back to the OS, so the process returns
        near its idle size (issue #2: RSS back within 10 % of idle after a run) instead of holding its
        high-water mark until the next burst. Once per quiet spell; a busy gateway never pays for it."""
        loop = asyncio.get_running_loop()
        seen: tuple[int, int] | None = None
        since = loop.time()
        released = True
        while True:
            await asyncio.sleep(QUIET_RELEASE_SECONDS / 4)
            server = self.server
            store = self.gateway.store
            activity = (server.server_state.total_requests if server is not None else 0, store.writes)
            if activity != seen:
                seen, since, released = activity, loop.time(), False
                continue
            if not released and loop.time() - since >= QUIET_RELEASE_SECONDS:
                released = True
                await store.release_memory()
                # Each connection is a reference cycle (uvicorn's parser and protocol hold each other,
                # as do hookgate's transport, flow and exchange): one that lived a while reaches the
                # oldest generation, which a frozen startup heap and a raised young threshold collect
                # rarely. Bursts of many connections held that memory (48 → 128 MB in one test) until then.
                gc.collect()
                trim_heap()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.settings.storage.retention.sweep_seconds)
            try:
                now = self.clock.now_ms()
                idempotency = await self.gateway.store.sweep(now)
                if idempotency:
                    self.log.info("retention.swept", idempotency=idempotency)
                if self.gateway.route_surface is not None:
                    tasks, flows = await self.gateway.route_surface.service.sweep(now)
                    if tasks or flows:
                        self.log.info("retention.swept", tasks=tasks, flows=flows)
                retention = self.settings.storage.retention
                before = now - int(retention.delivery_days * DAY_MS)
                deliveries = await self.gateway.store.flow_write(partial(_sweep_deliveries, before=before))
                runs, events = await self.gateway.store.sweep_history(
                    now - int(retention.run_days * DAY_MS), now - int(retention.event_days * DAY_MS))
                if deliveries or runs or events:
                    self.log.info("retention.swept", deliveries=deliveries, runs=runs, events=events)
            except HookgateError as exc:
                self.log.warning("store.error", operation="sweep", error=obs_logging.failure_text(exc))

    async def _watch_config(self, path: str) -> None:
        """Runs always and reads gateway.reload.watch on every tick, so a reload can turn watching on
        or off. It compares the file with the stamp of its last read (at start or by any reload, a
        SIGHUP's too): a change made between the reload that turned watching on and the first tick
        after it is a change, not the baseline."""
        while True:
            await asyncio.sleep(CONFIG_WATCH_SECONDS)
            if self.settings.gateway.reload_watch and file_stamp(path) != self._read_stamp:
                async with self._reload_lock:
                    # a SIGHUP's reload may have read this change meanwhile: no second reload for it
                    if file_stamp(path) != self._read_stamp:
                        await self._reload("watch")


FileStamp = tuple[float, int, int]


def file_stamp(path: str) -> FileStamp | None:
    """The file's (mtime, size, inode), or ``None`` when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime, st.st_size, st.st_ino)


def _kill_running_providers() -> None:
    secrets = sys.modules.get("hookgate.config.secrets")
    if secrets is not None:
        secrets.kill_running_providers()


def _settle_heap() -> None:
    """Once serving: everything built at startup (modules, config, compiled templates) moves to the
    collector's permanent generation, and young-generation collections run 10x less often. Requests
    make little cyclic garbage; full collections no longer walk the startup heap (they showed as
    p99 spikes of several ms) and the collector costs ~5 us less per create_flow."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def run_serve(settings: Settings, reload_settings: Callable[[], Settings], *, bind: str | None, port: int | None,
              worker: bool = True, read_stamp: FileStamp | None = None) -> int:
    """Run the gateway until SIGTERM/SIGINT; returns the exit status. ``read_stamp``: the config
    file's stamp taken before ``settings`` were read from it."""
    import uvloop

    service = Service(settings, reload_settings, bind=bind, port=port, out=sys.stdout, worker=worker,
                      read_stamp=read_stamp)
    return uvloop.run(service.run())


def _sweep_deliveries(tx: Any, before: int) -> int:
    return int(tx.delete_finished_deliveries(before))
