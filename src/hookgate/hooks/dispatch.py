"""Commit a wake or an agent action: the one dispatch path of direct and mapped hooks (§4, §5.5, §6.8)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from hookgate.clock import Clock, new_id
from hookgate.config.names import main_session_key
from hookgate.config.settings import Settings
from hookgate.errors import RequestError
from hookgate.hooks.actions import AgentAction, WakeAction
from hookgate.hooks.policy import (
    idempotency_record_key,
    logical_session_key,
    rebind_session_key,
    requested_session_key,
    resolve_agent,
    stored_session_key,
)
from hookgate.runtime.events import prepare_event_text, sanitize_system_text
from hookgate.store.base import IdempotencyClaim, NewRun, Store

ExternalSource = Literal["webhook", "gmail"]


class WakeOutcome(msgspec.Struct, frozen=True):
    mode: str
    outcome: str  # queued | coalesced
    dropped: int


class AgentOutcome(msgspec.Struct, frozen=True):
    run_id: str
    replayed: bool
    agent_id: str
    session_key: str


async def dispatch_wake(action: WakeAction, settings: Settings, store: Store, clock: Clock) -> WakeOutcome:
    """Queue the text on the default agent's main session; ``now`` also requests a heartbeat."""
    agent_id = settings.agents.default_agent_id
    result = await store.queue_system_event(
        session_key=main_session_key(agent_id),
        agent_id=agent_id,
        text=prepare_event_text(action.text),
        now_ms=clock.now_ms(),
        wake_reason="hook:wake" if action.mode == "now" else None,
    )
    # Text that sanitises to nothing cannot be queued; it still answers like an accepted duplicate.
    outcome = "coalesced" if result.outcome == "empty" else result.outcome
    return WakeOutcome(mode=action.mode, outcome=outcome, dropped=result.dropped)


class PreparedRun(msgspec.Struct, frozen=True):
    """An agent action after policy: everything needed to commit it (or to show it in `hooks test`)."""

    action: AgentAction
    agent_id: str
    explicit_agent: bool
    logical_key: str  # before rebinding
    scope_session_key: str | None
    rebind_error: RequestError | None
    session_key: str | None  # stored key (None when rebinding failed)
    external_source: ExternalSource
    wrap: bool


def prepare_agent(
    action: AgentAction, settings: Settings, *, external_source: ExternalSource = "webhook", wrap: bool = True
) -> PreparedRun:
    """Agent policy and session policy in spec order, without touching the store."""
    target = resolve_agent(action, settings.agents, settings.hooks)
    requested = requested_session_key(action, settings.hooks)
    logical = logical_session_key(requested, settings.hooks, new_id())
    scope_key = requested if requested is not None else settings.hooks.default_session_key
    try:
        rebound = rebind_session_key(logical, target.effective, settings.hooks)
        stored: str | None = stored_session_key(rebound, target.effective)
        rebind_error = None
    except RequestError as exc:
        stored, rebind_error = None, exc
    return PreparedRun(
        action=action,
        agent_id=target.effective,
        explicit_agent=target.explicit,
        logical_key=logical,
        scope_session_key=scope_key,
        rebind_error=rebind_error,
        session_key=stored,
        external_source=external_source,
        wrap=wrap,
    )


def run_inputs(prepared: PreparedRun) -> dict[str, Any]:
    a = prepared.action
    return {
        "message": a.message,
        "model": a.model,
        "thinking": a.thinking,
        "timeoutSeconds": a.timeout_seconds,
        "deliver": a.deliver,
        "channel": a.channel,
        "to": a.to,
        "wakeMode": a.wake_mode,
        "wrap": prepared.wrap,
        "externalContentSource": prepared.external_source,
        "targetAgentGiven": prepared.explicit_agent,
    }


async def dispatch_agent(
    prepared: PreparedRun,
    *,
    path: str,
    idempotency_key: str | None,
    settings: Settings,
    store: Store,
    clock: Clock,
) -> AgentOutcome:
    """Idempotency lookup → rebinding check → commit the run and its record in one transaction."""
    now = clock.now_ms()
    claim: IdempotencyClaim | None = None
    if idempotency_key is not None and settings.hooks.token is not None:
        record_key = idempotency_record_key(
            token=settings.hooks.token,
            path=path,
            action=prepared.action,
            effective_agent=prepared.agent_id,
            scope_session_key=prepared.scope_session_key,
            key=idempotency_key,
        )
        claim = IdempotencyClaim(
            record_key=record_key, expires_at=now + settings.hooks.idempotency_ttl_seconds * 1000
        )
    if prepared.rebind_error is not None or prepared.session_key is None:
        if claim is not None:
            original = await store.find_hook_idempotency(claim.record_key, now)
            if original is not None:
                return AgentOutcome(original, True, prepared.agent_id, "")
        raise prepared.rebind_error or RequestError("sessionKey rejected")
    run = NewRun(
        run_id=None,  # the store makes it inside the transaction that commits the run
        kind="hook",
        agent_id=prepared.agent_id,
        session_key=prepared.session_key,
        name=sanitize_system_text(prepared.action.name),
        inputs=run_inputs(prepared),
        created_at=now,
    )
    result = await store.enqueue_hook_run(run, claim)
    return AgentOutcome(result.run_id, result.replayed, prepared.agent_id, prepared.session_key)
