"""The delivery job (model.md §10.4, operations.md §4.4): send one leased delivery, record the outcome.

A worker claims the oldest due pending delivery of each (channel, target) — so deliveries to one
target go out one at a time, in creation order, and one waiting for a retry holds back only its own
target. Sending goes through the channel's adapter (``channels``); every outcome is one transaction:

- delivered → ``delivered`` with the attempt, and the last route when the run named its channel;
- a retryable failure with attempts left → still ``pending``, ``nextAttemptAt`` = now + the backoff
  (1 s, 5 s, 30 s, 2 min, 10 min, ±20 % jitter) or the channel's ``Retry-After`` (at most 10 min);
- anything else → ``dead``; a hook run's reply then becomes the ``Hook <name>: …`` summary event in
  the main session (model.md §5.6), with an immediate heartbeat for ``wakeMode: now``.

A split text records each part as it goes out (one commit per part but the last, whose progress
commits with the outcome), so a retry never sends a part twice. A delivery is sent again after a
crash only if the crash came between the send and its commit (at least once, never after a
recorded success).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hookgate.channels.base import (
    RETRY_AFTER_MAX_SECONDS,
    RETRY_JITTER,
    RETRY_WAITS_SECONDS,
    ChannelAdapter,
    DeliveryError,
    Envelope,
)
from hookgate.clock import Clock
from hookgate.config.names import main_session_key
from hookgate.config.settings import ChannelSettings, Settings
from hookgate.obs.logging import clean_text
from hookgate.obs.metrics import Metrics
from hookgate.runtime.ports import RuntimeTx
from hookgate.runtime.replies import dead_letter_summary
from hookgate.runtime.settle import commit_outcome
from hookgate.store.base import DeliveryJob, Store


@dataclass(frozen=True, slots=True)
class DeliveryContext:
    settings: Settings
    store: Store
    clock: Clock
    metrics: Metrics
    instance: str
    adapter_for: Callable[[ChannelSettings], ChannelAdapter]
    log: Any
    jitter: Callable[[], float] = field(default=lambda: random.uniform(-1.0, 1.0))  # not crypto
    # Called just before an attempt's outcome is submitted to the store: the worker's next claim then
    # joins the same group commit and sees the target's next delivery at the head of its queue.
    settling: Callable[[], None] = field(default=lambda: None)


# The longest wait ``retry_delay_ms`` gives.
MAX_RETRY_WAIT_MS = int(max(max(RETRY_WAITS_SECONDS) * (1.0 + RETRY_JITTER), RETRY_AFTER_MAX_SECONDS) * 1000)


def retry_delay_ms(attempts_made: int, retry_after: float | None, jitter: float) -> int:
    """The wait before the next attempt after ``attempts_made`` failed ones (``jitter`` in [-1, 1])."""
    if retry_after is not None and retry_after >= 0:
        return int(min(retry_after, RETRY_AFTER_MAX_SECONDS) * 1000)
    base = RETRY_WAITS_SECONDS[min(attempts_made, len(RETRY_WAITS_SECONDS)) - 1]
    return int(base * (1.0 + RETRY_JITTER * max(-1.0, min(1.0, jitter))) * 1000)


def explicit_channel(job: DeliveryJob) -> bool:
    """Did the run name this channel? Deliveries to ``last`` do not move the last route (model.md §3)."""
    requested = job.run_inputs.get("channel")
    return job.run_kind == "hook" and isinstance(requested, str) and requested not in ("", "last")


async def run_delivery(ctx: DeliveryContext, delivery_id: str) -> None:
    """Send one leased delivery and commit its outcome."""
    job = await ctx.store.flow_read(lambda tx: tx.get_delivery(delivery_id))
    if job is None or job.status != "pending" or job.leased_by != ctx.instance:
        return
    cfg = ctx.settings.channel(job.channel)
    if cfg is None:
        await _failed(ctx, job, DeliveryError(f"channel {job.channel} is not available", retryable=False),
                      job.parts_sent, job.parts_sent, None)
        return
    adapter = ctx.adapter_for(cfg)
    parts = adapter.split(job.text)
    done = committed = job.parts_sent
    last_id: list[str | None] = [None]
    last_status: list[int | None] = [None]  # the chat API's answer to the last part sent (HTTP channels)

    async def sent(index: int, message_id: str | None, http_status: int | None) -> None:
        nonlocal done, committed
        done = index + 1
        last_status[0] = http_status
        if done < len(parts):  # the last part's progress commits with the outcome
            now = ctx.clock.now_ms()
            await commit_outcome(ctx, lambda tx: tx.delivery_part_sent(delivery_id, done, message_id, now), delivery_id)
            committed = done
        else:
            last_id[0] = message_id

    envelope = Envelope(delivery_id=job.delivery_id, run_id=job.run_id, agent_id=job.agent_id,
                        session_key=job.session_key or "", created_at=job.created_at)
    started = time.monotonic()
    try:
        if done < len(parts):
            await adapter.send(job.target, parts, done, envelope, sent)
    except DeliveryError as exc:
        ctx.metrics.delivery_attempt.labels(job.channel).observe(time.monotonic() - started)
        await _failed(ctx, job, exc, done, committed, last_id[0])
        return
    except Exception as exc:  # an adapter bug must not lose the delivery: retry it like a failure
        ctx.metrics.delivery_attempt.labels(job.channel).observe(time.monotonic() - started)
        ctx.log.exception("delivery.adapter_error", **_log_fields(job))
        await _failed(ctx, job, DeliveryError(f"{job.channel}: internal error ({type(exc).__name__})",
                                              retryable=True), done, committed, last_id[0])
        return
    ctx.metrics.delivery_attempt.labels(job.channel).observe(time.monotonic() - started)
    now = ctx.clock.now_ms()
    explicit = explicit_channel(job)

    def commit(tx: RuntimeTx) -> None:
        if done > committed:
            tx.delivery_part_sent(delivery_id, done, last_id[0], now)
        tx.finish_delivery_attempt(delivery_id, "delivered", None, "delivered", last_status[0], None, now)
        if explicit:
            tx.set_last_route(main_session_key(job.agent_id), job.agent_id, job.channel, job.target, now)

    ctx.settling()
    await commit_outcome(ctx, commit, delivery_id)
    ctx.metrics.deliveries.labels(job.channel, "delivered").inc()
    ctx.metrics.delivery_latency.labels(job.channel).observe(max(0.0, (now - job.created_at) / 1000))
    ctx.log.info("delivery.sent", **_log_fields(job), attempt=job.attempts + 1, parts=len(parts))


def _log_fields(job: DeliveryJob) -> dict[str, Any]:
    """What every line about a delivery carries (operations.md §2)."""
    return {"delivery_id": job.delivery_id, "run_id": job.run_id, "agent_id": job.agent_id,
            "session_key": job.session_key, "channel": job.channel}


async def _failed(ctx: DeliveryContext, job: DeliveryJob, exc: DeliveryError, done: int, committed: int,
                  last_message_id: str | None) -> None:
    cfg = ctx.settings.channel(job.channel)
    max_attempts = cfg.retry_max_attempts if cfg is not None else 1
    attempts = job.attempts + 1
    now = ctx.clock.now_ms()
    dead = not exc.retryable or attempts >= max_attempts
    next_at = None if dead else now + retry_delay_ms(attempts, exc.retry_after, ctx.jitter())
    summary = None
    wake = None
    target_agent = job.agent_id
    if dead and job.run_kind == "hook":
        summary = dead_letter_summary(job.run_name or "Hook", job.text)
        if not job.run_inputs.get("targetAgentGiven"):
            target_agent = ctx.settings.agents.default_agent_id
        if job.run_inputs.get("wakeMode", "now") == "now":
            wake = f"hook:{job.run_id}"

    def commit(tx: RuntimeTx) -> None:
        if done > committed:
            tx.delivery_part_sent(job.delivery_id, done, last_message_id, now)
        tx.finish_delivery_attempt(job.delivery_id, "dead" if dead else "pending", next_at,
                                   "dead" if dead else "retry", exc.http_status, exc.message, now)
        if summary is not None:
            tx.queue_system_event(main_session_key(target_agent), target_agent, summary, now, wake)

    ctx.settling()
    await commit_outcome(ctx, commit, job.delivery_id)
    if dead:
        ctx.metrics.deliveries.labels(job.channel, "dead").inc()
        ctx.log.warning("delivery.dead", **_log_fields(job), attempts=attempts, error=clean_text(exc.message),
                        http_status=exc.http_status)
    else:
        ctx.metrics.deliveries.labels(job.channel, "retry").inc()
        ctx.log.info("delivery.retry", **_log_fields(job), attempts=attempts, next_attempt_at=next_at,
                     error=clean_text(exc.message), http_status=exc.http_status)
