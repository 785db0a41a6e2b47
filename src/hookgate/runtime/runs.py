"""Executing one isolated run (model.md §5): preflight, model checks, the call, one completion commit."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hookgate.agents.base import AgentRuntime, AgentRuntimeError, RuntimeRequest, preflight
from hookgate.agents.models import ModelRejected, choose_model, complete_with_fallbacks, normalize_thinking
from hookgate.clock import Clock
from hookgate.config.names import main_session_key
from hookgate.config.settings import AgentSettings, Settings
from hookgate.flows.model import CANCELLED, CANCELLED_BY_OPERATOR, Task, is_terminal
from hookgate.flows.notifications import Notification, notification_session
from hookgate.flows.rules import Retention, RunEnd, apply_run_ended, apply_run_started, may_settle, settle
from hookgate.obs.logging import clean_text
from hookgate.obs.metrics import Metrics
from hookgate.runtime.delivery import deliver_reply
from hookgate.runtime.ports import RuntimeTx
from hookgate.runtime.prompts import hook_prompt, task_prompt
from hookgate.runtime.replies import hook_summary_event, is_silent
from hookgate.runtime.settle import commit_outcome
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
    # whether the gateway is stopping, waiting at most the given seconds for a stop signal
    stop_signalled: Callable[[float], Awaitable[bool]] | None = None


# A command killed by one of these while the gateway itself stops was stopped with it: a service
# manager signals the whole control group at once (systemd's default KillMode), and the command
# often dies before the drain would have aborted it.
_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL})
STOP_SIGNAL_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class CallResult:
    status: str  # ok | error | timed_out | skipped | lost | cancelled
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
    # model.md §5.3: the first recognised source wins (§9.3: an unrecognised value passes to the next)
    level = (normalize_thinking(thinking) or (normalize_thinking(hooks.gmail.thinking) if gmail else None)
             or normalize_thinking(agent.thinking) or normalize_thinking(ctx.settings.agents.default_thinking)
             or "off")
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
        if exc.signal in _STOP_SIGNALS and ctx.stop_signalled is not None \
                and await ctx.stop_signalled(STOP_SIGNAL_WAIT_S):
            # given back as at a drain's end, its attempt not consumed: it runs again after the restart
            ctx.log.info("run.released", run_id=run_id, agent_id=agent.id, reason="command_stopped_with_gateway",
                         signal=exc.signal)
            raise asyncio.CancelledError from None
        return CallResult("error", error=exc.message, prompt=prompt)
    return CallResult("ok", reply=reply.strip(), prompt=prompt, model=used)


async def execute_run(ctx: RunContext, run_id: str) -> None:
    """Run a leased run to its terminal status; everything it produces commits in one transaction."""
    run = await ctx.store.get_run(run_id)
    if run is None or run.status != "running":
        return
    started = time.monotonic()
    known = run_log_fields(run)
    if run.attempt > MAX_ATTEMPTS:
        result = CallResult("lost", error=LOST_ERROR)
        ctx.log.warning("run.lost", **known)
    else:
        if run.attempt > 1:
            ctx.log.info("run.resumed", **known, attempt=run.attempt)
        ctx.log.info("run.started", **known, kind=run.kind, attempt=run.attempt)
        result = await (_call_for_task(ctx, run) if run.kind == "task" else _call_for(ctx, run))
    if run.kind == "task":
        result = await complete_task_run(ctx, run, result)
    else:
        await complete_hook_run(ctx, run, result)
    elapsed = time.monotonic() - started
    agent = agent_of(ctx.settings, run.agent_id)
    ctx.metrics.runs.labels(run.kind, result.status).inc()
    ctx.metrics.run_duration.labels(run.kind, str(agent.runtime.get("kind", "echo"))).observe(elapsed)
    # the model may be a request's `model` field: logged as free text (operations.md §2)
    ctx.log.info("run.finished", **known, status=result.status, duration_ms=round(elapsed * 1000, 1),
                 model=clean_text(result.model) if result.model else result.model, wrap=run.inputs.get("wrap"))


def run_log_fields(run: RunRecord) -> dict[str, Any]:
    """What every line about a run carries (operations.md §2: ``run_id``, ``agent_id``,
    ``session_key``, and a task run's ``task_id`` and ``flow_id``)."""
    known: dict[str, Any] = {"run_id": run.run_id, "agent_id": run.agent_id, "session_key": run.session_key}
    if run.kind == "task":
        known["task_id"] = run.inputs.get("taskId")
        known["flow_id"] = run.inputs.get("flowId")
    return known


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
    timeout_s = int(inputs.get("timeoutSeconds") or agent.timeout_seconds)
    result = await call_agent(
        ctx, agent, kind="hook", run_id=run.run_id, session_key=run.session_key, prompt=prompt,
        subject=str(inputs.get("message", "")), model_override=inputs.get("model"), gmail=gmail,
        thinking=inputs.get("thinking"), timeout_s=timeout_s,
    )
    _check_suspicious(ctx, run, result, str(inputs.get("message", "")))
    return result


def _check_suspicious(ctx: RunContext, run: RunRecord, result: CallResult, content: str) -> None:
    """model.md §5.4 step 4: a successful isolated run (hook or task) has its external content checked
    for suspicious patterns (hooks.md §7.5); a match is logged, nothing else changes."""
    if result.status != "ok":
        return
    patterns = suspicious_patterns(content)
    if patterns:
        ctx.log.warning("hook.suspicious_content", **run_log_fields(run), count=len(patterns), patterns=patterns)


def _retention(ctx: RunContext) -> Retention:
    r = ctx.settings.storage.retention
    return Retention(task_days=r.task_days, lost_task_days=r.lost_task_days)


async def _call_for_task(ctx: RunContext, run: RunRecord) -> CallResult:
    """An executed task (webhooks.md §5.4): the task moves to running, then the agent gets it wrapped."""
    task_id = str(run.inputs.get("taskId"))
    now = ctx.clock.now_ms()

    def start(tx: RuntimeTx) -> Task | None:
        task = tx.get_task(task_id)
        if task is None or is_terminal(task.status):
            return None
        change = apply_run_started(task, now, run.run_id)
        tx.update_task(change.task)
        _notify(ctx, tx, change.notifications, task.owner_key, now)
        return change.task

    task = await ctx.store.flow_write(start)
    if task is None:
        return CallResult("cancelled", error=CANCELLED_BY_OPERATOR)
    agent = agent_of(ctx.settings, run.agent_id)
    prompt = task_prompt(task_id=task.task_id, label=task.label, task=task.task, received_ms=run.created_at,
                         now_ms=ctx.clock.now_ms(), tz_setting=ctx.settings.agents.envelope_timezone)
    result = await call_agent(ctx, agent, kind="task", run_id=run.run_id, session_key=run.session_key,
                              prompt=prompt, subject=task.task, model_override=None, gmail=False, thinking=None,
                              timeout_s=agent.timeout_seconds)
    _check_suspicious(ctx, run, result, task.task)
    return result


def _notify(ctx: RunContext, tx: RuntimeTx, notes: tuple[Notification, ...], owner: str, now: int) -> None:
    if notes:
        session, agent = notification_session(owner, ctx.settings.agents.default_agent_id)
        for note in notes:
            tx.queue_system_event(session, agent, note.text, now, note.heartbeat_reason)


async def complete_task_run(ctx: RunContext, run: RunRecord, result: CallResult) -> CallResult:
    """The run's end moves its task (succeeded / failed / timed_out / lost), notifies, settles the
    flow; returns the end recorded. A task that ``cancel_flow`` cancelled while its run was ending
    (after the call returned, before this commit: the abort came too late to stop it) keeps its
    end, and so does the run: ``cancelled``, without its reply in the transcript — it ended ``ok``
    with the reply kept, beside a task ``cancelled`` whose runtime call was said to be aborted."""
    task_id = str(run.inputs.get("taskId"))
    now = ctx.clock.now_ms()
    ends: dict[str, RunEnd] = {"ok": "ok", "error": "error", "skipped": "skipped", "timed_out": "timed_out",
                               "lost": "lost"}

    def commit(tx: RuntimeTx) -> CallResult:
        task = tx.get_task(task_id)
        final = result
        if task is not None and task.status == CANCELLED:
            final = CallResult("cancelled", error=CANCELLED_BY_OPERATOR, model=result.model)
        tx.finish_run(run.run_id, final.status, final.reply, final.error, now)
        if final.status == "ok" and final.prompt is not None and final.reply is not None:
            tx.append_transcript(run.session_key, run.session_id, "user", final.prompt, run.run_id, now)
            tx.append_transcript(run.session_key, run.session_id, "assistant", final.reply, run.run_id, now)
        end = ends.get(final.status)
        if task is None or is_terminal(task.status) or end is None:
            return final
        change = apply_run_ended(task, end, final.reply if end == "ok" else final.error, now, _retention(ctx))
        tx.update_task(change.task)
        _notify(ctx, tx, change.notifications, task.owner_key, now)
        flow = tx.admin_get_flow(task.parent_flow_id) if task.parent_flow_id else None
        if flow is not None and may_settle(flow):  # a flow's tasks are read only when they can settle it
            settled = settle(flow, tx.list_tasks(flow.flow_id), change.task, now)
            if settled is not None:
                tx.update_flow_if_revision(settled, flow.revision)
        return final

    recorded: CallResult = await commit_outcome(ctx, commit, run.run_id)
    return recorded


async def complete_hook_run(ctx: RunContext, run: RunRecord, result: CallResult) -> None:
    """Status, transcript, delivery and the main-session summary (model.md §5.4 step 5, §5.5, §5.6)."""
    inputs = run.inputs
    settings = ctx.settings
    deliver = bool(inputs.get("deliver", True))
    has_target = False
    record = None
    silent = result.status == "ok" and is_silent(result.reply, agent_of(settings, run.agent_id).heartbeat.ack_max_chars)
    if deliver and silent:
        ctx.metrics.deliveries.labels(str(inputs.get("channel") or "last"), "suppressed").inc()
    if result.status == "ok" and deliver and not silent:
        outcome = await deliver_reply(ctx, agent_id=run.agent_id, channel=str(inputs.get("channel") or "last"),
                                      to=inputs.get("to"), text=result.reply or "", run_id=run.run_id,
                                      session_key=run.session_key)
        has_target, record = outcome.has_target, outcome.record
    name = run.name
    summary = hook_summary_event(name=name, status=result.status, reply=result.reply, error=result.error,
                                 deliver=deliver, delivered=None, has_target=has_target,
                                 ack_max_chars=agent_of(settings, run.agent_id).heartbeat.ack_max_chars)
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
        if record is not None:
            tx.record_delivery(record, now)
        if summary is not None:
            tx.queue_system_event(main_session_key(target_agent), target_agent, summary, now, wake)

    await commit_outcome(ctx, commit, run.run_id)
