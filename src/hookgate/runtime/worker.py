"""The embedded worker (operations.md §4.4, model.md §5–§6): claims runs and heartbeats under leases.

One loop per process. Each tick it leases due runs (at most ``maxConcurrentRuns`` running at once)
and due heartbeats, and runs each in its own task that renews its lease every third of the lease
time. A run's whole outcome — status, reply, transcript, summary event, wake request, the executed
task's new state — is one transaction (``runtime.runs``). ``drain`` stops claiming, waits, then
releases what is left without consuming an attempt.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from hookgate.agents import base as agents
from hookgate.agents.base import AgentRuntime, build_runtime
from hookgate.channels import registry as channels
from hookgate.channels.base import ChannelAdapter
from hookgate.channels.registry import build_adapter
from hookgate.clock import Clock
from hookgate.config.settings import AgentSettings, ChannelSettings, Settings
from hookgate.errors import HookgateError, StoreUnavailable
from hookgate.flows.model import CANCELLED_BY_OPERATOR
from hookgate.obs.logging import INSTANCE_ID, get_logger
from hookgate.obs.metrics import Metrics
from hookgate.runtime.deliveries import MAX_RETRY_WAIT_MS, DeliveryContext, run_delivery
from hookgate.runtime.heartbeat import run_heartbeat
from hookgate.runtime.ports import RuntimeTx
from hookgate.runtime.runs import RunContext, execute_run
from hookgate.runtime.settle import log_store_error
from hookgate.store.base import Store

if TYPE_CHECKING:
    import httpx

POLL_SECONDS = 1.0
# The wall clock moved back against the monotonic one by more than this between two ticks: a step
# (NTP, a VM restored), not the slewing of a clock being corrected.
CLOCK_STEP_MS = 2000
BACKLOG_REFRESH_SECONDS = 1.0
DELIVERY_CONCURRENCY = 64  # deliveries in flight per worker (each to a different target)
# of one channel: a chat API that hangs for some chats (each send then takes its 15 s timeout) holds
# at most these slots, and the other channels' deliveries go on (16 in all once held every one)
DELIVERY_PER_CHANNEL = 16


class Worker:
    """Runs, heartbeats, deliveries; started by ``serve`` unless ``--no-worker``."""

    def __init__(self, store: Store, settings: Callable[[], Settings], clock: Clock, metrics: Metrics) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.instance = INSTANCE_ID
        self.log = get_logger()
        self._http: httpx.AsyncClient | None = None  # see http_client and start
        self._runtimes: dict[str, tuple[AgentSettings, AgentRuntime]] = {}
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._heartbeats: dict[str, asyncio.Task[Any]] = {}
        self._deliveries: dict[str, asyncio.Task[Any]] = {}
        self._delivery_channel: dict[str, str] = {}  # the channel of each delivery in _deliveries
        self._adapters: dict[str, tuple[ChannelSettings, ChannelAdapter]] = {}
        self._next_due: int | None = None
        self._backlog_at = 0.0  # monotonic time of the next backlog count
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()  # set by ``drain``
        self._poke_timer: asyncio.TimerHandle | None = None  # the earliest delayed poke
        self._stopping = False
        self._aborted: set[str] = set()
        self._loop_task: asyncio.Task[Any] | None = None
        self._ev_loop: asyncio.AbstractEventLoop | None = None  # set by ``start``; ``poke`` runs on it
        self._every: dict[str, float] = {}  # heartbeat.every per agent, as last scheduled
        self._scheduled_for: Settings | None = None
        self._wall_offset: int | None = None  # wall ms minus monotonic ms at the last tick

    # --- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        self._ev_loop = asyncio.get_running_loop()
        settings = self.settings()
        if any(agents.speaks_http(a) for a in settings.agents.agents) or any(
            channels.speaks_http(c) for c in settings.channels if c.enabled
        ):
            # Before serving: loading httpx and building its TLS context takes ~0.1 – 0.2 s, which
            # the first run or delivery would otherwise spend on the event loop, stalling requests.
            self.http_client()
        self._build(settings)
        await self._schedule_heartbeats(settings)
        # The deadlines of the file (leases, retries, turns) are wall-clock times. One a clock step
        # before this start left far ahead would hold its job for the step's length: none stays
        # further ahead than a lease, the longest retry wait or the agent's interval.
        await self._rewind(0)
        self._loop_task = asyncio.create_task(self._loop())

    def _build(self, settings: Settings) -> None:
        """Every agent's runtime and enabled channel's adapter, built now (at start, after a reload),
        not by the first run or delivery: their modules load here. Loaded by a first run while the
        process had no file descriptor left (a flood of connections), an import failed with EMFILE
        outside the runtime's errors, and the run's attempts were spent on it until it ended `lost`."""
        for agent in settings.agents.agents:
            self.runtime_for(agent)
        for channel in settings.channels:
            if channel.enabled:
                self.adapter_for(channel)

    def _clock_stepped_back(self) -> int:
        """How far the wall clock stepped back since the last tick (ms; 0 if it did not)."""
        offset = self._offset(self.clock.now_ms())
        last = self._wall_offset
        if last is not None and last - offset > CLOCK_STEP_MS:
            return last - offset  # (the offset is kept until the rewind has committed)
        self._wall_offset = offset
        return 0

    async def _rewind(self, step_ms: int) -> None:
        """Move the stored deadlines back with the wall clock (``step_ms``; 0: only their bounds)."""
        settings = self.settings()
        now = self.clock.now_ms()
        lease_ms = int(settings.storage.lease_seconds * 1000)
        every = {a.id: int(a.heartbeat.every_seconds * 1000) for a in settings.agents.agents}
        changed = await self.store.flow_write(
            lambda tx: tx.rewind_deadlines(now, step_ms, lease_ms, MAX_RETRY_WAIT_MS, every))
        if step_ms:
            self.log.warning("clock.stepped_back", step_ms=step_ms, deadlines=changed)
        self._wall_offset = self._offset(now)  # steps are measured from here

    def _offset(self, now_ms: int) -> int:
        """The wall clock (``now_ms``, just read) less the monotonic one, in ms."""
        return now_ms - int(self.clock.monotonic() * 1000)

    async def _schedule_heartbeats(self, settings: Settings) -> None:
        """At startup every agent's schedule; after a reload, the agents that are new or whose
        ``heartbeat.every`` changed (model.md §6.1)."""
        changed = [(a.id, int(a.heartbeat.every_seconds * 1000)) for a in settings.agents.agents
                   if self._every.get(a.id) != a.heartbeat.every_seconds]
        if changed:
            now = self.clock.now_ms()

            def schedule(tx: RuntimeTx) -> None:
                for agent_id, every_ms in changed:
                    tx.schedule_heartbeat(agent_id, every_ms, now)

            await self.store.flow_write(schedule)
        self._every = {a.id: a.heartbeat.every_seconds for a in settings.agents.agents}
        self._scheduled_for = settings

    def poke(self, delay: float = 0.0) -> None:
        """Something was enqueued: look for work (after ``delay``) instead of at the next poll."""
        if delay <= 0:
            self._wake.set()
            return
        # One timer, the earliest asked for: a poke whose time is at or after the pending timer's is
        # covered by it (the worker then finds everything due by that time; what becomes due later is
        # found by a later poke or poll). A burst of wakes, each asking for a look 300 ms later, arms
        # one timer per look instead of one per request. (The loop is kept from ``start``: on Python
        # 3.11 every ``asyncio.get_running_loop()`` is a ``getpid(2)`` system call, one per wake.)
        loop = self._ev_loop
        assert loop is not None  # ``start`` runs before ``poke`` is wired to anything
        at = loop.time() + delay
        handle = self._poke_timer
        if handle is not None:
            if handle.when() <= at:
                return
            handle.cancel()
        self._poke_timer = loop.call_at(at, self._poked)

    def _poked(self) -> None:
        self._poke_timer = None
        self._wake.set()

    def abort(self, run_id: str) -> None:
        """``cancel_flow`` cancelled the task this run executes: stop the runtime call."""
        task = self._running.get(run_id)
        if task is not None:
            self._aborted.add(run_id)
            task.cancel()

    async def drain(self, timeout: float) -> None:
        """Stop claiming; give running jobs ``timeout`` seconds, then abort and release them."""
        self._stopping = True
        self._stopped.set()
        self._wake.set()
        deadline = asyncio.get_running_loop().time() + timeout  # one budget for the tick and the jobs
        if self._loop_task is not None:
            # Not cancelled in the middle of a tick: a claim waiting for the writer still commits, and
            # the tick then gives back what it claimed (``_tick``). Cancelled only if it hangs.
            try:
                await asyncio.wait_for(asyncio.shield(self._loop_task), timeout)
            except (TimeoutError, HookgateError):
                self._loop_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, HookgateError):
                    await self._loop_task
        jobs = [*self._running.values(), *self._heartbeats.values(), *self._deliveries.values()]
        if jobs:
            remaining = max(0.0, deadline - asyncio.get_running_loop().time())
            _, pending = await asyncio.wait(jobs, timeout=remaining)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        for _, runtime in self._runtimes.values():
            await runtime.aclose()
        for _, adapter in self._adapters.values():
            await adapter.aclose()
        if self._http is not None:
            await self._http.aclose()

    # --- the loop --------------------------------------------------------------------------------

    async def _loop(self) -> None:
        while not self._stopping:
            self._wake.clear()  # before the tick: a poke during the tick means "look again"
            try:
                await self._tick()
            except HookgateError as exc:
                log_store_error(self.log, "worker.tick", exc)
                # Not again at once: the due time it went for has passed, and a store that keeps
                # failing (a full disk) was tried — and logged — thousands of times a second.
                self._next_due = None
                with contextlib.suppress(TimeoutError):  # (a shutdown does not wait for it)
                    await asyncio.wait_for(self._stopped.wait(), POLL_SECONDS)
                continue
            wait = POLL_SECONDS
            if self._next_due is not None:  # a delivery retry or a heartbeat due before the next poll
                wait = min(wait, max(0.0, (self._next_due - self.clock.now_ms()) / 1000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def _tick(self) -> None:
        settings = self.settings()
        if settings is not self._scheduled_for:  # a reload
            self._build(settings)
            await self._schedule_heartbeats(settings)
        if step := self._clock_stepped_back():
            await self._rewind(step)
        now = self.clock.now_ms()
        lease_ms = int(settings.storage.lease_seconds * 1000)
        free = settings.agents.max_concurrent_runs - len(self._running)

        free_deliveries = DELIVERY_CONCURRENCY - len(self._deliveries)

        # A job of this process whose lease expired (its renewal was held up, say by another process's
        # write lock) is still running here: claiming it again would run it twice at once.
        running, delivering = frozenset(self._running), frozenset(self._deliveries)
        busy = collections.Counter(self._delivery_channel.values())

        def claim(tx: RuntimeTx) -> tuple[list[str], list[str], list[tuple[str, str]]]:
            runs = tx.claim_runs(self.instance, now, now + lease_ms, free, skip=running) if free > 0 else []
            deliveries = (tx.claim_deliveries(self.instance, now, now + lease_ms, free_deliveries, skip=delivering,
                                              per_channel=DELIVERY_PER_CHANNEL, busy=busy)
                          if free_deliveries > 0 else [])
            return runs, tx.claim_heartbeats(self.instance, now, now + lease_ms), deliveries

        claimed, agents, deliveries = await self.store.flow_write(claim)
        if self._stopping:  # shutdown began while the claim waited for the writer: give it all back
            await self.store.flow_write(lambda tx: self._give_back(tx, claimed, [d for d, _ in deliveries], agents))
            return
        for delivery_id, channel in deliveries:
            self._delivery_channel[delivery_id] = channel
            self._deliveries[delivery_id] = asyncio.create_task(
                self._guard(delivery_id, self._deliver(delivery_id), kind="delivery"))
        for run_id in claimed:
            self.log.info("run.claimed", run_id=run_id)
            self._running[run_id] = asyncio.create_task(self._guard(run_id, self._run(run_id), kind="run"))
        for agent_id in agents:
            if agent_id in self._heartbeats:
                continue
            self._heartbeats[agent_id] = asyncio.create_task(
                self._guard(agent_id, self._heartbeat(agent_id), kind="heartbeat")
            )
        now = self.clock.now_ms()
        self._next_due = await self.store.flow_read(lambda tx: tx.next_job_due(now), small=True)
        mono = self.clock.monotonic()
        if mono >= self._backlog_at:
            # Counting a backlog reads every queued row: once a second, not once per finished run
            # (a tick follows every run, and with 20 000 queued runs the count was most of the work).
            self._backlog_at = mono + BACKLOG_REFRESH_SECONDS
            now = self.clock.now_ms()
            runs_backlog, deliveries_backlog, heartbeats_backlog = await self.store.flow_read(
                lambda tx: (tx.queued_runs(), tx.due_deliveries(now), tx.due_heartbeats(now)))
            self.metrics.queue_backlog.labels("runs").set(runs_backlog)
            self.metrics.queue_backlog.labels("deliveries").set(deliveries_backlog)
            self.metrics.queue_backlog.labels("heartbeats").set(heartbeats_backlog)

    def _give_back(self, tx: RuntimeTx, runs: list[str], deliveries: list[str], agents: list[str]) -> None:
        now = self.clock.now_ms()
        for run_id in runs:
            tx.release_run(run_id, self.instance, now)
        for delivery_id in deliveries:
            tx.release_delivery(delivery_id, self.instance)
        for agent_id in agents:
            if agent_id not in self._heartbeats:  # a turn of this process still runs: drain settles it
                tx.release_heartbeat(agent_id, self.instance)

    async def _guard(self, key: str, job: Awaitable[None], kind: str) -> None:
        jobs = {"run": self._running, "heartbeat": self._heartbeats, "delivery": self._deliveries}[kind]
        try:
            await job
        except asyncio.CancelledError:
            raise
        except StoreUnavailable as exc:  # no fault of the job's: its lease runs out, and it is taken up again
            log_store_error(self.log, f"worker.{kind}", exc, key=key)
        except Exception:
            self.log.exception("worker.job_failed", job=kind, key=key)
        finally:
            jobs.pop(key, None)
            if kind == "delivery":
                self._delivery_channel.pop(key, None)
            self._wake.set()

    def http_client(self) -> httpx.AsyncClient:
        """The client the HTTP runtimes and channels share, created on first use (httpx and its TLS
        context take ~100 ms to load and set up: a gateway that needs neither starts without them)."""
        if self._http is None:
            import httpx

            # no pool limit of its own: what is in flight is bounded by maxConcurrentRuns and the
            # delivery slots (64), and a send that waited for a pooled connection (httpx's default
            # is 100) would spend its 15 s timeout and an attempt doing nothing
            self._http = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None))
        return self._http

    def runtime_for(self, agent: AgentSettings) -> AgentRuntime:
        cached = self._runtimes.get(agent.id)
        if cached is None or cached[0] is not agent:
            cached = (agent, build_runtime(agent, http=self.http_client))
            self._runtimes[agent.id] = cached
        return cached[1]

    def adapter_for(self, channel: ChannelSettings) -> ChannelAdapter:
        cached = self._adapters.get(channel.id)
        if cached is None or cached[0] is not channel:  # built again after a reload changed the channel
            cached = (channel, build_adapter(channel, self.http_client))
            self._adapters[channel.id] = cached
        return cached[1]

    def delivery_context(self) -> DeliveryContext:
        return DeliveryContext(settings=self.settings(), store=self.store, clock=self.clock, metrics=self.metrics,
                               instance=self.instance, adapter_for=self.adapter_for, log=self.log,
                               settling=self._wake.set)

    def context(self) -> RunContext:
        return RunContext(settings=self.settings(), store=self.store, clock=self.clock, metrics=self.metrics,
                          instance=self.instance, runtime_for=self.runtime_for, log=self.log,
                          stop_signalled=self.stop_signalled)

    async def stop_signalled(self, within: float) -> bool:
        """Whether the gateway is stopping (``drain`` began), waiting at most ``within`` seconds for it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), within)
        return self._stopping

    async def _with_lease(self, renew: Callable[[int], Awaitable[bool]], work: Awaitable[None]) -> None:
        """Run ``work`` while renewing its lease every third of the lease time.

        A renewal the store fails (a full disk for a moment) is tried again each second while the
        lease last renewed still holds (less a margin of one such second); only then is ``work``
        cancelled — and its lease left to run out. A failed renewal cancelled it at once: the job's
        attempt was spent, and a run's model called again."""
        lease_s = self.settings().storage.lease_seconds
        retry_s = min(1.0, lease_s / 3)
        held_until = self.clock.monotonic() + lease_s - retry_s
        task = asyncio.ensure_future(work)
        try:
            wait = lease_s / 3
            while True:
                done, _ = await asyncio.wait({task}, timeout=wait)
                if done:
                    return task.result()
                asked = self.clock.monotonic()
                try:
                    await renew(self.clock.now_ms() + int(lease_s * 1000))
                except StoreUnavailable as exc:
                    if self.clock.monotonic() + retry_s >= held_until:
                        raise
                    log_store_error(self.log, "worker.renew", exc)
                    wait = retry_s
                    continue
                held_until, wait = asked + lease_s - retry_s, lease_s / 3
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            elif not task.cancelled():
                task.exception()  # retrieved: a renewal's failure is what propagates

    async def _run(self, run_id: str) -> None:
        def give_back(tx: RuntimeTx) -> None:
            now = self.clock.now_ms()
            if run_id in self._aborted:  # ``abort``: the task this run executes was cancelled
                tx.finish_run(run_id, "cancelled", None, CANCELLED_BY_OPERATOR, now)
            else:  # orderly shutdown: the attempt is given back (it runs again after the restart)
                tx.release_run(run_id, self.instance, now)

        try:
            await self._leased(execute_run(self.context(), run_id),
                               lambda tx, until: tx.renew_run_lease(run_id, self.instance, until), give_back)
        except asyncio.CancelledError:
            if run_id not in self._aborted:
                raise
            self._aborted.discard(run_id)
            self.metrics.runs.labels("task", "cancelled").inc()

    async def _leased(self, work: Awaitable[None], renew: Callable[[RuntimeTx, int], bool],
                      release: Callable[[RuntimeTx], None]) -> None:
        """``work`` under a lease that ``renew`` extends. A cancellation (an orderly shutdown, or an
        operator's abort of a run) settles the job through ``release`` before it propagates: given back,
        the next process takes it up at once, not after the lease."""

        async def renew_lease(until: int) -> bool:
            return bool(await self.store.flow_write(lambda tx: renew(tx, until)))

        try:
            await self._with_lease(renew_lease, work)
        except asyncio.CancelledError:
            await self.store.flow_write(release)
            raise

    async def _deliver(self, delivery_id: str) -> None:
        # given back on shutdown: no attempt is consumed; parts already sent stay recorded
        await self._leased(run_delivery(self.delivery_context(), delivery_id),
                           lambda tx, until: tx.renew_delivery_lease(delivery_id, self.instance, until),
                           lambda tx: tx.release_delivery(delivery_id, self.instance))

    async def _heartbeat(self, agent_id: str) -> None:
        # given back on shutdown: the turn's events and wake requests stay pending
        await self._leased(run_heartbeat(self.context(), agent_id),
                           lambda tx, until: tx.renew_heartbeat_lease(agent_id, self.instance, until),
                           lambda tx: tx.release_heartbeat(agent_id, self.instance))
