"""One heartbeat turn of an agent (model.md §6.3): consume the main session's pending events."""

from __future__ import annotations

import time

from hookgate.clock import new_id
from hookgate.config.names import main_session_key
from hookgate.runtime.delivery import deliver_reply
from hookgate.runtime.ports import RuntimeTx
from hookgate.runtime.prompts import heartbeat_prompt, heartbeat_skipped, render_events
from hookgate.runtime.replies import is_heartbeat_ack, is_silent
from hookgate.runtime.runs import RunContext, agent_of, call_agent
from hookgate.runtime.settle import commit_outcome
from hookgate.store.base import NewRun

MAX_FAILED_TURNS = 3
FAILED = ("error", "timed_out")  # the turns that count against their events (model.md §4.1)


async def run_heartbeat(ctx: RunContext, agent_id: str) -> None:
    settings = ctx.settings
    agent = agent_of(settings, agent_id)
    session = main_session_key(agent_id)
    started_ms = ctx.clock.now_ms()
    every_ms = agent.heartbeat.every_seconds * 1000

    def next_due(now: int) -> int | None:
        return now + every_ms if every_ms else None

    def read(tx: RuntimeTx) -> tuple[list[tuple[int, int, str]], list[tuple[str, str]], int]:
        # one snapshot: the wake requests pending now are the ones whose events this turn sees
        return (tx.pending_events(session), tx.transcript_tail(session, settings.agents.history_messages),
                tx.last_pending_heartbeat_request(agent_id))

    events, history, answered_upto = await ctx.store.flow_read(read, small=True)
    tz = settings.agents.envelope_timezone
    rendered = render_events([(created, text) for _, created, text in events], tz)
    if heartbeat_skipped(rendered, agent.heartbeat.prompt):
        now = ctx.clock.now_ms()
        await commit_outcome(ctx, lambda tx: tx.finish_heartbeat(agent_id, next_due(now), answered_upto, now), agent_id)
        ctx.metrics.heartbeats.labels("skipped").inc()
        ctx.log.info("heartbeat.skipped", agent_id=agent_id)
        return
    prompt = heartbeat_prompt(rendered, agent.heartbeat.prompt)
    run_id = new_id()
    t0 = time.monotonic()
    result = await call_agent(
        ctx, agent, kind="heartbeat", run_id=run_id, session_key=session, prompt=prompt, subject=rendered,
        model_override=None, gmail=False, thinking=None, timeout_s=agent.timeout_seconds, history=tuple(history),
    )
    seqs = [seq for seq, _, _ in events]
    ack = result.status == "ok" and is_heartbeat_ack(result.reply or "", agent.heartbeat.ack_max_chars)
    if result.status == "ok":
        outcome = "ack" if ack else "ran"
    else:
        outcome = "skipped" if result.status == "skipped" else "failed"
    record = None
    silent = result.status == "ok" and is_silent(result.reply, agent.heartbeat.ack_max_chars)
    if result.status == "ok" and not silent:
        delivery = await deliver_reply(ctx, agent_id=agent_id, channel="last", to=None, text=result.reply or "",
                                       run_id=run_id, session_key=session)
        record = delivery.record
        if record is not None:
            outcome = "delivered"  # handed to the delivery job with the turn's commit
        elif not delivery.has_target:
            ctx.log.info("heartbeat.undelivered", agent_id=agent_id, run_id=run_id)
    now = ctx.clock.now_ms()
    run_record = NewRun(run_id=run_id, kind="heartbeat", agent_id=agent_id, session_key=session, name="Heartbeat",
                    inputs={"events": len(events)}, created_at=started_ms)

    def commit(tx: RuntimeTx) -> int:
        session_id = tx.session_id_of(session, agent_id, now)
        dropped = 0
        if result.status == "ok":
            tx.append_transcript(session, session_id, "user", prompt, run_id, now)
            tx.append_transcript(session, session_id, "assistant", result.reply or "", run_id, now)
            tx.consume_events(seqs, run_id, now)
        elif result.status in FAILED:
            dropped = tx.fail_events(seqs, MAX_FAILED_TURNS, now)
        # skipped (the runtime failed its preflight): no model saw the events, they stay pending uncharged
        tx.finish_heartbeat(agent_id, next_due(now), answered_upto, now)
        tx.insert_finished_run(run_record, session_id, result.status, result.reply, result.error, now)
        if record is not None:
            tx.record_delivery(record, now)
        return dropped

    dropped = await commit_outcome(ctx, commit, agent_id)
    ctx.metrics.heartbeats.labels(outcome).inc()
    if result.status == "ok":
        ctx.metrics.system_events.inc(("consumed",), len(seqs))
    if dropped:
        ctx.metrics.system_events.inc(("dropped",), dropped)
        ctx.log.warning("event.dropped", agent_id=agent_id, session_key=session, count=dropped,
                        reason="failed_turns")
    if silent:
        ctx.metrics.deliveries.labels("last", "suppressed").inc()
    ctx.metrics.runs.labels("heartbeat", result.status).inc()
    ctx.metrics.run_duration.labels("heartbeat", str(agent.runtime.get("kind", "echo"))).observe(
        time.monotonic() - t0)
    ctx.log.info("heartbeat.ran", agent_id=agent_id, run_id=run_id, status=result.status, outcome=outcome,
                 events=len(seqs), duration_ms=round((time.monotonic() - t0) * 1000, 1))

