"""Reply delivery for the runtime (model.md §10.3), with the local channels ``console`` and ``file``.

Target resolution follows §10.3. Every reply with a target gets a row in the delivery log, committed
with the run's completion. The two local channels deliver in-process (a JSON line on stdout; a JSON
line appended and fsynced) and their row is ``delivered``. A reply for a network channel (telegram,
slack, …) is recorded ``pending``: its adapter is the delivery issue's work, which picks it up from
the log.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from hookgate.clock import new_id
from hookgate.runtime.ports import RuntimeTx
from hookgate.store.base import DeliveryRecord

if TYPE_CHECKING:
    from hookgate.runtime.runs import RunContext

LOCAL_CHANNELS = ("console", "file")
_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    has_target: bool
    delivered: bool | None  # None: not (yet) attempted
    record: DeliveryRecord | None = None  # the delivery-log row to commit with the run


def resolve_target(ctx: RunContext, tx: RuntimeTx, agent_id: str, channel: str, to: str | None
                   ) -> tuple[str, str] | str:
    """(channel, to) or the ``delivery.no_target`` reason."""
    settings = ctx.settings
    if channel != "last":
        cfg = settings.channel(channel)
        target = to or (cfg.default_to if cfg else None)
        return (channel, target) if cfg is not None and target else f"no delivery target for channel {channel}"
    last_channel, last_to = tx.last_route(f"agent:{agent_id}:main")
    if last_channel and settings.channel(last_channel) is not None:
        return last_channel, (to or last_to or "")
    whatsapp = settings.channel("whatsapp")
    if whatsapp is not None and (to or whatsapp.default_to):
        return "whatsapp", str(to or whatsapp.default_to)
    return f"no last route for agent {agent_id}"


def _send_local(ctx: RunContext, channel: str, line: dict[str, Any]) -> None:
    if channel == "console":
        sys.stdout.write(_encode(line).decode() + "\n")
        sys.stdout.flush()
        return
    cfg = ctx.settings.channel("file")
    assert cfg is not None
    path = str(cfg.options.get("path") or "hookgate-deliveries.jsonl")
    line = {**line, "ts": int(time.time() * 1000)}
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, _encode(line) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


async def deliver_reply(ctx: RunContext, *, agent_id: str, channel: str, to: Any, text: str, run_id: str,
                        session_key: str) -> DeliveryOutcome:
    """Resolve the target and deliver on a local channel; the last route follows explicit channels."""
    requested_to = to if isinstance(to, str) and to else None
    target = await ctx.store.flow_read(
        lambda tx: resolve_target(ctx, tx, agent_id, channel, requested_to), small=True)
    if isinstance(target, str):
        ctx.log.info("delivery.no_target", run_id=run_id, agent_id=agent_id, reason=target)
        ctx.metrics.deliveries.labels(channel, "no_target").inc()
        return DeliveryOutcome(False, None)
    chosen, target_to = target
    delivery_id = new_id()
    if chosen not in LOCAL_CHANNELS:
        ctx.log.info("delivery.pending", run_id=run_id, delivery_id=delivery_id, channel=chosen)
        record = DeliveryRecord(delivery_id, run_id, agent_id, chosen, target_to, text, "pending")
        return DeliveryOutcome(True, None, record)
    line = {"channel": chosen, "to": target_to, "text": text, "runId": run_id, "agentId": agent_id}
    try:
        _send_local(ctx, chosen, line)
    except OSError as exc:
        error = exc.strerror or "I/O error"
        ctx.log.warning("delivery.dead", run_id=run_id, delivery_id=delivery_id, channel=chosen, error=error)
        ctx.metrics.deliveries.labels(chosen, "dead").inc()
        record = DeliveryRecord(delivery_id, run_id, agent_id, chosen, target_to, text, "dead", "failed", error)
        return DeliveryOutcome(True, False, record)
    ctx.metrics.deliveries.labels(chosen, "delivered").inc()
    ctx.log.info("delivery.sent", run_id=run_id, delivery_id=delivery_id, channel=chosen)
    if channel != "last":
        now = ctx.clock.now_ms()
        await ctx.store.flow_write(
            lambda tx: tx.set_last_route(f"agent:{agent_id}:main", agent_id, chosen, target_to, now))
    record = DeliveryRecord(delivery_id, run_id, agent_id, chosen, target_to, text, "delivered", "delivered")
    return DeliveryOutcome(True, True, record)
