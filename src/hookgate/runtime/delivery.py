"""Which replies go where (model.md §10.3): target resolution and the delivery row of a reply.

A reply with a target becomes a ``pending`` row in the delivery log, committed in the same
transaction as the run's completion (model.md §5.4 step 5): nothing is sent before the run is
recorded, and a delivery is enqueued at most once per run. Sending, retries and dead letters are the
delivery job's (``runtime.deliveries``), for every channel alike, console and file included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hookgate.clock import new_id
from hookgate.config.names import main_session_key
from hookgate.runtime.ports import RuntimeTx
from hookgate.store.base import DeliveryRecord

if TYPE_CHECKING:
    from hookgate.runtime.runs import RunContext


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    has_target: bool
    record: DeliveryRecord | None = None  # the ``pending`` delivery-log row to commit with the run


def resolve_target(ctx: RunContext, tx: RuntimeTx, agent_id: str, channel: str, to: str | None
                   ) -> tuple[str, str] | str:
    """(channel, to) or the ``delivery.no_target`` reason."""
    settings = ctx.settings
    if channel != "last":
        cfg = settings.channel(channel)
        target = to or (cfg.default_to if cfg else None)
        return (channel, target) if cfg is not None and target else f"no delivery target for channel {channel}"
    last_channel, last_to = tx.last_route(main_session_key(agent_id))
    if last_channel and settings.channel(last_channel) is not None:
        return last_channel, (to or last_to or "")
    whatsapp = settings.channel("whatsapp")
    if whatsapp is not None and (to or whatsapp.default_to):
        return "whatsapp", str(to or whatsapp.default_to)
    return f"no last route for agent {agent_id}"


async def deliver_reply(ctx: RunContext, *, agent_id: str, channel: str, to: Any, text: str,
                        run_id: str, session_key: str) -> DeliveryOutcome:
    """Resolve the target; with one, the ``pending`` delivery row to commit with the run."""
    requested_to = to if isinstance(to, str) and to else None
    target = await ctx.store.flow_read(
        lambda tx: resolve_target(ctx, tx, agent_id, channel, requested_to), small=True)
    if isinstance(target, str):
        ctx.log.info("delivery.no_target", run_id=run_id, agent_id=agent_id, session_key=session_key,
                     channel=channel, reason=target)
        ctx.metrics.deliveries.labels(channel, "no_target").inc()
        return DeliveryOutcome(False)
    chosen, target_to = target
    record = DeliveryRecord(new_id(), run_id, agent_id, chosen, target_to, text, "pending")
    return DeliveryOutcome(True, record)
