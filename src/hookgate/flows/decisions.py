"""One pure decision per mutating action: the records to write and the answer (webhooks.md §3.4, §4, §5.3).

The wiring layer loads the owner-scoped records, calls a ``decide_*`` function, writes what the
decision says (in the same transaction, ``update_flow_if_revision`` for flows) and answers
``envelope(route_id, decision.outcome)``. ``None`` for a record means "nothing to write".
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hookgate.flows.model import FLOW_TERMINAL, MANAGED, TASK_ACTIVE, TASK_TERMINAL, Flow, Task
from hookgate.flows.results import (
    Outcome,
    cancel_done,
    cancel_not_found,
    cancel_pending,
    cancel_terminal,
    created_flow,
    mutation_applied,
    mutation_not_found,
    mutation_not_managed,
    revision_conflict,
    run_task_refused,
    task_created,
    task_updated,
    update_not_external,
    update_not_found,
    update_terminal,
)
from hookgate.flows.rules import (
    CHILD_SESSION_REFUSAL,
    ChildVerdict,
    Retention,
    TaskChange,
    apply_mutation,
    apply_task_update,
    cancel_executed_task,
    cancel_flow_record,
    find_retry_target,
    mark_cancel_requested,
    merge_retry,
    new_flow,
    new_task,
    run_task_refusal,
    settle,
)
from hookgate.webhooks.schema import CreateFlow, FlowMutation, RunTask, UpdateTask


class FlowDecision(msgspec.Struct, frozen=True):
    """An answer and the flow to write (``None``: nothing changes)."""

    outcome: Outcome
    flow: Flow | None = None


class CancelDecision(msgspec.Struct, frozen=True):
    outcome: Outcome
    flow: Flow | None = None  # the flow to write (revision already bumped once or twice)
    tasks: tuple[TaskChange, ...] = ()  # executed tasks cancelled: write them, abort their runs


class RunTaskDecision(msgspec.Struct, frozen=True):
    outcome: Outcome
    task: TaskChange | None = None  # the task to write (new or reused) and its notifications
    created: bool = False  # a new task (False with ``task`` set: an idempotent retry)
    enqueue_run: bool = False  # route ``execute: true``: enqueue a run of kind ``task`` (§5.4)
    record_child_session: bool = False  # record ``childSessionKey`` as a child of the route session


class UpdateTaskDecision(msgspec.Struct, frozen=True):
    outcome: Outcome
    task: TaskChange | None = None
    flow: Flow | None = None  # set only when the settle rule fired


def decide_create_flow(
    action: CreateFlow,
    *,
    flow_id: str,
    seq: int = 0,
    owner_key: str,
    route_controller_id: str,
    now: int,
    route_id: str | None = None,
) -> FlowDecision:
    flow = new_flow(
        action,
        flow_id=flow_id,
        seq=seq,
        owner_key=owner_key,
        route_controller_id=route_controller_id,
        now=now,
        route_id=route_id,
    )
    return FlowDecision(created_flow(flow), flow)


def decide_mutation(flow: Flow | None, action: FlowMutation, now: int) -> FlowDecision:
    """§3.4: not found → not managed → revision conflict → apply (+1 revision)."""
    if flow is None:
        return FlowDecision(mutation_not_found())
    if flow.sync_mode != MANAGED:
        return FlowDecision(mutation_not_managed(flow))
    if action.expected_revision != flow.revision:
        return FlowDecision(revision_conflict(flow))
    updated = apply_mutation(flow, action, now)
    return FlowDecision(mutation_applied(updated), updated)


def decide_cancel(flow: Flow | None, tasks: Sequence[Task], now: int, retention: Retention) -> CancelDecision:
    """``cancel_flow`` steps 1–6 over the owner-scoped flow and its tasks (webhooks.md §4.12)."""
    if flow is None:
        return CancelDecision(cancel_not_found())
    if flow.status in FLOW_TERMINAL:
        return CancelDecision(cancel_terminal(flow, tasks))
    current = flow
    changed = False
    if current.cancel_requested_at is None:
        current = mark_cancel_requested(current, now)
        changed = True
    changes: list[TaskChange] = []
    after: list[Task] = []
    for task in tasks:
        if task.executed and task.status in TASK_ACTIVE:
            change = cancel_executed_task(task, now, retention)
            changes.append(change)
            after.append(change.task)
        else:
            after.append(task)
    if any(task.status in TASK_ACTIVE for task in after):
        return CancelDecision(cancel_pending(current, after), current if changed else None, tuple(changes))
    final = cancel_flow_record(current, now)
    return CancelDecision(cancel_done(final, after), final, tuple(changes))


def decide_run_task(
    flow: Flow | None,
    tasks: Sequence[Task],
    action: RunTask,
    *,
    task_id: str,
    seq: int = 0,
    now: int,
    execute: bool = False,
    child_verdict: ChildVerdict | None = None,
) -> RunTaskDecision:
    """``run_task`` checks 1–5, then an idempotent retry or a new task (webhooks.md §4.13, §5.4).

    ``tasks`` are the flow's tasks (for retries); ``child_verdict`` is ``child_session_verdict`` for
    the request's ``childSessionKey`` (``None`` when none was sent); ``execute`` is the route's flag.
    """
    refusal = run_task_refusal(flow)
    if refusal is not None:
        return RunTaskDecision(run_task_refused(refusal, flow))
    assert flow is not None
    if action.child_session_key is not None and child_verdict == "outside":
        return RunTaskDecision(run_task_refused(CHILD_SESSION_REFUSAL, flow))
    record_child = action.child_session_key is not None and child_verdict == "unknown"
    existing = find_retry_target(tasks, action, flow)
    if existing is not None:
        reused = merge_retry(existing, action)
        return RunTaskDecision(
            task_created(flow, reused), TaskChange(reused), created=False, record_child_session=record_child
        )
    executed = execute and action.runtime == "subagent" and action.status == "queued"
    change = new_task(action, flow, task_id=task_id, seq=seq, now=now, executed=executed)
    return RunTaskDecision(
        task_created(flow, change.task),
        change,
        created=True,
        enqueue_run=executed,
        record_child_session=record_child,
    )


def decide_update_task(
    task: Task | None,
    flow: Flow | None,
    flow_tasks: Sequence[Task],
    action: UpdateTask,
    now: int,
    retention: Retention,
) -> UpdateTaskDecision:
    """``update_task`` (webhooks.md §5.3); ``task``/``flow`` are ``None`` when not visible to the owner."""
    if task is None or flow is None:
        return UpdateTaskDecision(update_not_found())
    if task.executed:
        return UpdateTaskDecision(update_not_external(task))
    if task.status in TASK_TERMINAL:
        return UpdateTaskDecision(update_terminal(task))
    change = apply_task_update(task, action, now, retention)
    settled = None
    if change.task.status in TASK_TERMINAL:
        settled = settle(flow, flow_tasks, change.task, now)
    return UpdateTaskDecision(task_updated(change.task, settled or flow), change, settled)
