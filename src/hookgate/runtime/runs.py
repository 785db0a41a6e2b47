"""Executing one isolated run (model.md §5): preflight, model checks, the call, one completion commit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hookgate.agents.base import AgentRuntime, AgentRuntimeError, RuntimeRequest, preflight
from hookgate.agents.models import ModelRejected, choose_model, complete_with_fallbacks, normalize_thinking
from hookgate.clock import Clock
from hookgate.config.settings import AgentSettings, Settings
from hookgate.obs.metrics import Metrics
from hookgate.runtime.delivery import deliver_reply
from hookgate.runtime.ports import RuntimeTx
from hookgate.runtime.prompts import hook_prompt
from hookgate.runtime.replies import hook_summary_event, is_silent
from hookgate.runtime.wrapper import suspicious_patterns
from hookgate.store.base import RunRecord, Store

MAX_ATTEMPTS = 2
LOST_ERROR = "run interrupted; retry limit reached"


@dataclass(frozen=True, slots=True)
class RunContext:
    settings: Settings
    store: Store
    clock: Clock
    metrics: Metrics
    instance: str
    runtime_for: Callable[[AgentSettings], AgentRuntime]
    log: Any


@dataclass(frozen=True, slots=True)
class CallResult:
    status: str  # ok | error | timed_out | skipped
    reply: str | None = None
    error: str | None = None
    prompt: str | None = None
    model: str | None = None


def agent_of(settings: Settings, agent_id: str) -> AgentSettings:
    return settings.agents.get(agent_id) or settings.agents.get(settings.agents.default_agent_id) or \
        settings.agents.agents[0]


async def call_agent(
    ctx: RunContext, agent: AgentSettings, *, kind: str, run_id: str, session_key: str, prompt: str, subject: str,
    model_override: str | None, gmail: bool, thinking: str | None, timeout_s: int,
    history: tuple[tuple[str, str], ...] = (),
) -> CallResult:
    """Preflight → model checks → the runtime call under the run timeout (model.md §5.3–§5.4)."""
    reason = preflight(agent)
    if reason is not None:
        return CallResult("skipped", error=reason, prompt=prompt)
    runtime = ctx.runtime_for(agent)
    hooks = ctx.settings.hooks
    try:
        choice = choose_model(override=model_override, gmail_default=hooks.gmail.model if gmail else None,
                              agent=agent, defaults_model=None, models=ctx.settings.agents.models, runtime=runtime)
    except ModelRejected as exc:
        return CallResult("error", error=exc.message, prompt=prompt)
    level = (normalize_thinking(thinking) or (normalize_thinking(hooks.gmail.thinking) if gmail else None)
             or normalize_thinking(agent.thinking))
    request = RuntimeRequest(
        agent_id=agent.id, run_kind=kind, session_key=session_key, run_id=run_id, model=choice.model,
        thinking=level, system_prompt=agent.system_prompt, history=history, prompt=prompt, subject=subject,
        params=dict(choice.params),
    )
    try:
        async with asyncio.timeout(timeout_s):
            reply, used = await complete_with_fallbacks(runtime, request, choice)
    except TimeoutError:
        return CallResult("timed_out", error=f"run timed out after {timeout_s}s", prompt=prompt)
    except AgentRuntimeError as exc:
        return CallResult("error", error=exc.message, prompt=prompt)
    return CallResult("ok", reply=reply.strip(), prompt=prompt, model=used)


async def execute_run(ctx: RunContext, run_id: str) -> None:
    """Run a leased run to its terminal status; everything it produces commits in one transaction."""
    run = await ctx.store.get_run(run_id)
    if run is None or run.status != "running":
        return
    started = time.monotonic()
    if run.attempt > MAX_ATTEMPTS:
        result = CallResult("lost", error=LOST_ERROR)
        ctx.log.warning("run.lost", run_id=run.run_id, agent_id=run.agent_id)
    else:
        if run.attempt > 1:
            ctx.log.info("run.resumed", run_id=run.run_id, attempt=run.attempt)
        ctx.log.info("run.started", run_id=run.run_id, kind=run.kind, agent_id=run.agent_id, attempt=run.attempt)
        result = await _call_for(ctx, run)
    await complete_hook_run(ctx, run, result)
    elapsed = time.monotonic() - started
    agent = agent_of(ctx.settings, run.agent_id)
    ctx.metrics.runs.labels(run.kind, result.status).inc()
    ctx.metrics.run_duration.labels(run.kind, str(agent.runtime.get("kind", "echo"))).observe(elapsed)
    ctx.log.info("run.finished", run_id=run.run_id, status=result.status, duration_ms=round(elapsed * 1000, 1),
                 model=result.model, wrap=run.inputs.get("wrap"))


async def _call_for(ctx: RunContext, run: RunRecord) -> CallResult:
    inputs = run.inputs
    agent = agent_of(ctx.settings, run.agent_id)
    gmail = inputs.get("externalContentSource") == "gmail"
    prompt = hook_prompt(
        run_id=run.run_id, name=run.name, message=str(inputs.get("message", "")), received_ms=run.created_at,
        now_ms=ctx.clock.now_ms(), tz_setting=ctx.settings.agents.envelope_timezone,
        wrap=bool(inputs.get("wrap", True)), source=str(inputs.get("externalContentSource", "webhook")),
        deliver=bool(inputs.get("deliver", True)),
    )
    patterns = suspicious_patterns(str(inputs.get("message", "")))
    if patterns:
        ctx.log.warning("hook.suspicious_content", run_id=run.run_id, count=len(patterns), patterns=patterns)
    timeout_s = int(inputs.get("timeoutSeconds") or agent.timeout_seconds)
    return await call_agent(
        ctx, agent, kind="hook", run_id=run.run_id, session_key=run.session_key, prompt=prompt,
        subject=str(inputs.get("message", "")), model_override=inputs.get("model"), gmail=gmail,
        thinking=inputs.get("thinking"), timeout_s=timeout_s,
    )


async def complete_hook_run(ctx: RunContext, run: RunRecord, result: CallResult) -> None:
    """Status, transcript, delivery and the main-session summary (model.md §5.4 step 5, §5.5, §5.6)."""
    inputs = run.inputs
    settings = ctx.settings
    deliver = bool(inputs.get("deliver", True))
    delivered: bool | None = None
    has_target = False
    if result.status == "ok" and deliver and result.reply and not is_silent(
        result.reply, agent_of(settings, run.agent_id).heartbeat.ack_max_chars
    ):
        outcome = await deliver_reply(ctx, agent_id=run.agent_id, channel=str(inputs.get("channel") or "last"),
                                      to=inputs.get("to"), text=result.reply, run_id=run.run_id,
                                      session_key=run.session_key)
        has_target, delivered = outcome.has_target, outcome.delivered
    name = run.name
    summary = hook_summary_event(name=name, status=result.status, reply=result.reply, error=result.error,
                                 deliver=deliver, delivered=delivered, has_target=has_target)
    target_agent = run.agent_id if inputs.get("targetAgentGiven") else settings.agents.default_agent_id
    wake = None
    if summary is not None and inputs.get("wakeMode", "now") == "now":
        wake = f"hook:{run.run_id}" if result.status == "ok" else f"hook:{run.run_id}:error"
    now = ctx.clock.now_ms()

    def commit(tx: RuntimeTx) -> None:
        tx.finish_run(run.run_id, result.status, result.reply, result.error, now)
        if result.status == "ok" and result.prompt is not None and result.reply is not None:
            tx.append_transcript(run.session_key, run.session_id, "user", result.prompt, run.run_id, now)
            tx.append_transcript(run.session_key, run.session_id, "assistant", result.reply, run.run_id, now)
        if summary is not None:
            tx.queue_system_event(f"agent:{target_agent}:main", target_agent, summary, now, wake)

    await ctx.store.flow_write(commit)
