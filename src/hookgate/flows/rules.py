"""Pure transition rules for flows and tasks (model.md §1.3–§1.5, §2.2, §2.5; webhooks.md §3.4, §4, §5.3).

Every function takes records and an explicit ``now`` and returns new records; nothing is mutated and
nothing is read or written. Callers check ownership, revisions and refusals first (``decisions``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal

import msgspec

from hookgate.flows.model import (
    BLOCKED,
    CANCELLED,
    CANCELLED_BY_OPERATOR,
    DELIVERY_DELIVERED,
    DELIVERY_PENDING,
    FAILED,
    FLOW_TERMINAL,
    LOST,
    MANAGED,
    NOTIFY_SILENT,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TASK_ACTIVE,
    TASK_TERMINAL,
    TIMED_OUT,
    WAITING,
    Flow,
    Task,
    agent_id_from_session_key,
    clean_summary,
)
from hookgate.flows.notifications import Notification, cut, with_notifications
from hookgate.webhooks.schema import (
    UNSET,
    CreateFlow,
    FailFlow,
    FinishFlow,
    FlowMutation,
    RequestCancel,
    ResumeFlow,
    RunTask,
    SetWaiting,
    Unset,
    UpdateTask,
)

DAY_MS: Final = 86_400_000
REPLY_SUMMARY_MAX_CHARS: Final = 2_000
LOST_RUN_ERROR: Final = "run interrupted; retry limit reached"
LINEAGE_MAX_STEPS: Final = 32


class Retention(msgspec.Struct, frozen=True):
    """``storage.retention`` days used for ``cleanupAfter`` (model.md §2.5)."""

    task_days: float = 7
    lost_task_days: float = 1


class TaskChange(msgspec.Struct, frozen=True):
    """A task after a transition, with the notifications the transition queues."""

    task: Task
    notifications: tuple[Notification, ...] = ()


# --------------------------------------------------------------------------------------------------
# Flows


def _patch_str(current: str | None, value: str | None | Unset) -> str | None:
    """NStr patch: absent keeps, ``null`` clears, a string replaces."""
    return current if value is UNSET else value


def _patch_json(current: Any, value: Any) -> Any:
    """Json patch: absent keeps; anything else (``None`` = JSON null) replaces."""
    return current if value is UNSET else value


def new_flow(
    action: CreateFlow,
    *,
    flow_id: str,
    seq: int = 0,
    owner_key: str,
    route_controller_id: str,
    now: int,
    route_id: str | None = None,
) -> Flow:
    """The managed flow ``create_flow`` creates: revision 0, ``createdAt = updatedAt = now``."""
    step = action.current_step
    return Flow(
        flow_id=flow_id,
        owner_key=owner_key,
        goal=action.goal,
        created_at=now,
        updated_at=now,
        seq=seq,
        sync_mode=MANAGED,
        controller_id=action.controller_id or route_controller_id,
        revision=0,
        status=action.status,
        notify_policy=action.notify_policy,
        current_step=step if isinstance(step, str) else None,
        state_json=action.state_json,
        wait_json=action.wait_json,
        created_by_route=route_id,
    )


def _bump(flow: Flow, now: int, **changes: Any) -> Flow:
    return msgspec.structs.replace(flow, revision=flow.revision + 1, updated_at=now, **changes)


def apply_set_waiting(flow: Flow, action: SetWaiting, now: int) -> Flow:
    """``blocked`` if the request carries a blocked field string, else ``waiting``; ``endedAt`` removed."""
    blocked = isinstance(action.blocked_task_id, str) or isinstance(action.blocked_summary, str)
    return _bump(
        flow,
        now,
        status=BLOCKED if blocked else WAITING,
        current_step=_patch_str(flow.current_step, action.current_step),
        state_json=_patch_json(flow.state_json, action.state_json),
        wait_json=_patch_json(flow.wait_json, action.wait_json),
        blocked_task_id=_patch_str(flow.blocked_task_id, action.blocked_task_id),
        blocked_summary=_patch_str(flow.blocked_summary, action.blocked_summary),
        ended_at=None,
    )


def apply_resume(flow: Flow, action: ResumeFlow, now: int) -> Flow:
    """The requested status; ``waitJson = null``; blocked fields and ``endedAt`` removed."""
    return _bump(
        flow,
        now,
        status=action.status,
        current_step=_patch_str(flow.current_step, action.current_step),
        state_json=_patch_json(flow.state_json, action.state_json),
        wait_json=None,
        blocked_task_id=None,
        blocked_summary=None,
        ended_at=None,
    )


def apply_finish(flow: Flow, action: FinishFlow, now: int) -> Flow:
    """``succeeded``, ``endedAt = now``, ``waitJson = null``, blocked fields removed."""
    return _bump(
        flow,
        now,
        status=SUCCEEDED,
        state_json=_patch_json(flow.state_json, action.state_json),
        wait_json=None,
        blocked_task_id=None,
        blocked_summary=None,
        ended_at=now,
    )


def apply_fail(flow: Flow, action: FailFlow, now: int) -> Flow:
    """``failed``, ``endedAt = now``, ``waitJson = null``, blocked fields as given."""
    return _bump(
        flow,
        now,
        status=FAILED,
        state_json=_patch_json(flow.state_json, action.state_json),
        wait_json=None,
        blocked_task_id=_patch_str(flow.blocked_task_id, action.blocked_task_id),
        blocked_summary=_patch_str(flow.blocked_summary, action.blocked_summary),
        ended_at=now,
    )


def apply_request_cancel(flow: Flow, action: RequestCancel, now: int) -> Flow:
    """``cancelRequestedAt = now`` (overwriting an earlier mark); status untouched."""
    del action
    return _bump(flow, now, cancel_requested_at=now)


def apply_mutation(flow: Flow, action: FlowMutation, now: int) -> Flow:
    """The patch of one of the five revision-checked mutations (no state-machine guard)."""
    if isinstance(action, SetWaiting):
        return apply_set_waiting(flow, action, now)
    if isinstance(action, ResumeFlow):
        return apply_resume(flow, action, now)
    if isinstance(action, FinishFlow):
        return apply_finish(flow, action, now)
    if isinstance(action, FailFlow):
        return apply_fail(flow, action, now)
    return apply_request_cancel(flow, action, now)


def mark_cancel_requested(flow: Flow, now: int) -> Flow:
    """``cancel_flow`` step 3: set ``cancelRequestedAt`` (+1 revision)."""
    return _bump(flow, now, cancel_requested_at=now)


def cancel_flow_record(flow: Flow, now: int, ended_at: int | None = None) -> Flow:
    """The final ``cancelled`` transition (``cancel_flow`` step 6, settle rule): +1 revision."""
    return _bump(
        flow,
        now,
        status=CANCELLED,
        blocked_task_id=None,
        blocked_summary=None,
        wait_json=None,
        ended_at=now if ended_at is None else ended_at,
    )


def may_settle(flow: Flow) -> bool:
    """Whether the settle rule can fire for ``flow`` at all (a managed flow with a cancel requested,
    not yet terminal): only then does it need the flow's tasks."""
    return flow.sync_mode == MANAGED and flow.cancel_requested_at is not None and flow.status not in FLOW_TERMINAL


def settle(flow: Flow, tasks: Iterable[Task], terminal_task: Task, now: int) -> Flow | None:
    """The settle rule (model.md §1.5) after ``terminal_task`` became terminal; ``None`` if it does not fire.

    ``tasks`` are the flow's tasks; ``terminal_task`` replaces its stored version among them. They
    are read only when ``may_settle(flow)``: otherwise the rule cannot fire, and ``()`` will do.
    """
    if not may_settle(flow):
        return None
    for task in tasks:
        current = terminal_task if task.task_id == terminal_task.task_id else task
        if current.status in TASK_ACTIVE:
            return None
    if terminal_task.status in TASK_ACTIVE:
        return None
    ended = terminal_task.ended_at
    if ended is None:
        ended = terminal_task.last_event_at
    return cancel_flow_record(flow, now, ended_at=now if ended is None else ended)


# --------------------------------------------------------------------------------------------------
# Tasks


def cleanup_after(task: Task, retention: Retention) -> int:
    """(``endedAt``, else ``lastEventAt``, else ``createdAt``) + the retention for the task's status."""
    base = task.ended_at
    if base is None:
        base = task.last_event_at if task.last_event_at is not None else task.created_at
    days = retention.lost_task_days if task.status == LOST else retention.task_days
    return base + int(days * DAY_MS)


def resolve_agent_id(action: RunTask, owner_key: str) -> str | None:
    """The request's ``agentId``, else the agent of ``childSessionKey``, else of the owner key."""
    return (
        action.agent_id
        or agent_id_from_session_key(action.child_session_key)
        or agent_id_from_session_key(owner_key)
    )


def normalise_session_key(key: str) -> str:
    """Session keys compare trimmed and case-insensitively; stored lower-case."""
    return key.strip().lower()


def new_task(
    action: RunTask, flow: Flow, *, task_id: str, now: int, seq: int = 0, executed: bool = False
) -> TaskChange:
    """The task ``run_task`` creates (timestamps per model.md §2.2), with its creation notifications."""
    running = action.status == RUNNING
    candidates = [now] + [t for t in (action.started_at, action.last_event_at) if t is not None]
    created_at = min(candidates)
    started_at = (action.started_at if action.started_at is not None else now) if running else None
    last_event_at = action.last_event_at
    if last_event_at is None:
        last_event_at = started_at if started_at is not None else created_at
    if started_at is not None and last_event_at < started_at:
        last_event_at = started_at
    summary = action.progress_summary
    task = Task(
        task_id=task_id,
        runtime=action.runtime,
        owner_key=flow.owner_key,
        requester_session_key=flow.owner_key,
        task=action.task,
        created_at=created_at,
        seq=seq,
        scope_kind="session",
        source_id=action.source_id,
        parent_task_id=action.parent_task_id,
        label=action.label,
        run_id=action.run_id,
        child_session_key=(
            normalise_session_key(action.child_session_key) if action.child_session_key else None
        ),
        parent_flow_id=flow.flow_id,
        agent_id=resolve_agent_id(action, flow.owner_key),
        status=RUNNING if running else QUEUED,
        delivery_status=DELIVERY_PENDING,
        notify_policy=action.notify_policy,
        progress_summary=clean_summary(summary) if running and isinstance(summary, str) else None,
        started_at=started_at,
        last_event_at=last_event_at,
        executed=executed,
    )
    done, notes = with_notifications(None, task)
    return TaskChange(done, notes)


def find_retry_target(tasks: Sequence[Task], action: RunTask, flow: Flow) -> Task | None:
    """The task a ``run_task`` retry reuses (same runId, runtime, owner, childSessionKey, flow), if any.

    An exact match (same label and task) wins; for runtime ``acp`` the earliest candidate is reused
    even without one. Earliest = lowest creation sequence.
    """
    if action.run_id is None:
        return None
    child = normalise_session_key(action.child_session_key) if action.child_session_key else None
    candidates = sorted(
        (
            task
            for task in tasks
            if task.run_id == action.run_id
            and task.runtime == action.runtime
            and task.owner_key == flow.owner_key
            and task.parent_flow_id == flow.flow_id
            and (normalise_session_key(task.child_session_key) if task.child_session_key else None) == child
        ),
        key=lambda task: task.seq,
    )
    for task in candidates:
        if task.label == action.label and task.task == action.task:
            return task
    if action.runtime == "acp" and candidates:
        return candidates[0]
    return None


def merge_retry(existing: Task, action: RunTask) -> Task:
    """The reused task of an idempotent retry; its status is not changed.

    Missing ``sourceId``/``parentTaskId``/``agentId`` are filled; ``label``/``task`` are overwritten
    only with ``preferMetadata`` (a missing label is always filled); ``notifyPolicy`` is upgraded
    only from ``silent``; ``deliveryStatus`` returns to ``pending`` unless ``delivered``.
    """
    label = existing.label
    text = existing.task
    if action.prefer_metadata:
        label = action.label or label
        text = action.task
    elif label is None:
        label = action.label
    policy = existing.notify_policy
    if policy == NOTIFY_SILENT and action.notify_policy != NOTIFY_SILENT:
        policy = action.notify_policy
    delivery = existing.delivery_status
    if delivery != DELIVERY_DELIVERED:
        delivery = DELIVERY_PENDING
    return msgspec.structs.replace(
        existing,
        source_id=existing.source_id or action.source_id,
        parent_task_id=existing.parent_task_id or action.parent_task_id,
        agent_id=existing.agent_id or resolve_agent_id(action, existing.owner_key),
        label=label,
        task=text,
        notify_policy=policy,
        delivery_status=delivery,
    )


def _event_time(task: Task, value: int) -> int:
    """``lastEventAt`` never below ``startedAt``."""
    if task.started_at is not None and value < task.started_at:
        return task.started_at
    return value


def _patch_summary(current: str | None, value: str | None | Unset) -> str | None:
    if value is UNSET:
        return current
    return clean_summary(value)


def _finish_task(task: Task, status: str, now: int, retention: Retention, **changes: Any) -> Task:
    ended = msgspec.structs.replace(
        task,
        status=status,
        ended_at=now,
        terminal_outcome=SUCCEEDED if status == SUCCEEDED else task.terminal_outcome,
        **changes,
    )
    return msgspec.structs.replace(ended, cleanup_after=cleanup_after(ended, retention))


def apply_task_update(task: Task, action: UpdateTask, now: int, retention: Retention) -> TaskChange:
    """``update_task`` on a non-terminal task (webhooks.md §5.3), with the notifications it queues."""
    status = task.status
    started_at = task.started_at
    if action.status == RUNNING and status == QUEUED:
        status = RUNNING
    if status == RUNNING and started_at is None:
        started_at = now
    moved = msgspec.structs.replace(
        task,
        status=status,
        started_at=started_at,
        progress_summary=_patch_summary(task.progress_summary, action.progress_summary),
        terminal_summary=_patch_summary(task.terminal_summary, action.terminal_summary),
        error=_patch_summary(task.error, action.error),
    )
    moved = msgspec.structs.replace(
        moved,
        last_event_at=_event_time(moved, action.last_event_at if action.last_event_at is not None else now),
    )
    if action.status is not None and action.status in TASK_TERMINAL:
        moved = _finish_task(moved, action.status, now, retention)
    done, notes = with_notifications(task, moved)
    return TaskChange(done, notes)


def cancel_executed_task(task: Task, now: int, retention: Retention) -> TaskChange:
    """``cancel_flow`` step 4 for a queued/running task hookgate executes."""
    moved = _finish_task(
        task, CANCELLED, now, retention, error=CANCELLED_BY_OPERATOR, last_event_at=_event_time(task, now)
    )
    done, notes = with_notifications(task, moved)
    return TaskChange(done, notes)


RunEnd = Literal["ok", "error", "skipped", "timed_out", "lost"]


def apply_run_started(task: Task, now: int, run_ref: str | None = None) -> TaskChange:
    """An executed task's run started: ``running`` with ``startedAt``/``lastEventAt``."""
    moved = msgspec.structs.replace(
        task,
        status=RUNNING,
        started_at=task.started_at if task.started_at is not None else now,
        last_event_at=now,
        run_ref=run_ref if run_ref is not None else task.run_ref,
    )
    done, notes = with_notifications(task, moved)
    return TaskChange(done, notes)


def apply_run_ended(task: Task, end: RunEnd, text: str | None, now: int, retention: Retention) -> TaskChange:
    """An executed task's run ended (webhooks.md §5.4): ``text`` is the reply (ok) or the error."""
    event = _event_time(task, now)
    if end == "ok":
        summary = clean_summary(text)
        summary = cut(summary, REPLY_SUMMARY_MAX_CHARS) if summary else None
        moved = _finish_task(task, SUCCEEDED, now, retention, terminal_summary=summary, last_event_at=event)
    elif end == "timed_out":
        moved = _finish_task(
            task, TIMED_OUT, now, retention, error=clean_summary(text) or task.error, last_event_at=event
        )
    elif end == "lost":
        moved = _finish_task(task, LOST, now, retention, error=LOST_RUN_ERROR, last_event_at=event)
    else:
        moved = _finish_task(task, FAILED, now, retention, error=clean_summary(text), last_event_at=event)
    done, notes = with_notifications(task, moved)
    return TaskChange(done, notes)


# --------------------------------------------------------------------------------------------------
# run_task refusals and the child-session guard


class Refusal(msgspec.Struct, frozen=True):
    """A ``run_task`` that creates nothing: HTTP status, code, result ``reason`` and envelope ``error``."""

    status: int
    code: str
    reason: str
    error: str


FLOW_NOT_FOUND_REASON: Final = "Flow not found."
TASKFLOW_NOT_FOUND: Final = "TaskFlow not found."
NOT_MANAGED_RUN_TASK: Final = "Flow does not accept managed child tasks."
CANCEL_REQUESTED: Final = "Flow cancellation has already been requested."
CHILD_OUTSIDE_TREE: Final = "childSessionKey is outside the route's session tree"


def flow_terminal_text(status: str) -> str:
    return f"Flow is already {status}."


def run_task_refusal(flow: Flow | None) -> Refusal | None:
    """``run_task`` checks 1–4 (webhooks.md §4.13) on the owner-scoped flow (``None`` = not found)."""
    if flow is None:
        return Refusal(404, "not_found", FLOW_NOT_FOUND_REASON, TASKFLOW_NOT_FOUND)
    if flow.sync_mode != MANAGED:
        return Refusal(409, "not_managed", NOT_MANAGED_RUN_TASK, NOT_MANAGED_RUN_TASK)
    if flow.cancel_requested_at is not None:
        return Refusal(409, "cancel_requested", CANCEL_REQUESTED, CANCEL_REQUESTED)
    if flow.status in FLOW_TERMINAL:
        text = flow_terminal_text(flow.status)
        return Refusal(409, "terminal", text, text)
    return None


CHILD_SESSION_REFUSAL: Final = Refusal(409, "task_not_created", CHILD_OUTSIDE_TREE, CHILD_OUTSIDE_TREE)

ChildVerdict = Literal["route", "descendant", "unknown", "outside"]


def child_session_verdict(
    child_key: str, route_session_key: str, ancestors: Sequence[str] | None
) -> ChildVerdict:
    """Check 5, the child-session guard, over the lineage the store knows.

    ``ancestors`` is the ``spawnedBy`` chain of ``child_key`` (parent first), or ``None`` when the
    store has no session ``child_key``. ``unknown`` → accept and record it as a child of the route
    session; ``outside`` → refuse with ``CHILD_SESSION_REFUSAL``.
    """
    child = normalise_session_key(child_key)
    route = normalise_session_key(route_session_key)
    if child == route:
        return "route"
    if ancestors is None:
        return "unknown"
    for parent in list(ancestors)[:LINEAGE_MAX_STEPS]:
        if normalise_session_key(parent) == route:
            return "descendant"
    return "outside"
