"""Wire views of flows and tasks (webhooks.md §6), the task summary (model.md §2.4) and "newest first".

Views are plain dicts in the spec's exact key order; ``msgspec.json.encode`` keeps that order.
A ``*`` key appears only for a non-empty string, a ``?`` key only when set (a JSON field holding
``null`` is set). Owner, requester and internal fields never appear.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from hookgate.flows.model import (
    TASK_ACTIVE,
    TASK_FAILURES,
    TASK_RUNTIMES,
    TASK_STATUSES,
    Flow,
    Task,
)
from hookgate.webhooks.schema import UNSET


def _put_str(view: dict[str, Any], key: str, value: str | None) -> None:
    if isinstance(value, str) and value:
        view[key] = value


def _put_int(view: dict[str, Any], key: str, value: int | None) -> None:
    if value is not None:
        view[key] = value


# FlowView as data: its keys in the spec's order, each with its record field and its rule —
# ``str``/``int`` always there; ``str*`` only a non-empty string; ``int?`` only when not None;
# ``json?`` only when set (not UNSET; a JSON null is set). ``flow_view`` is this table written out;
# the SQLite store renders ``list_flows`` from it in SQL (``store/sqlite/flows.py``), and a unit test
# holds the two to each other.
FLOW_VIEW_LAYOUT: tuple[tuple[str, str, str], ...] = (
    ("flowId", "flow_id", "str"),
    ("syncMode", "sync_mode", "str"),
    ("controllerId", "controller_id", "str*"),
    ("currentStep", "current_step", "str*"),
    ("blockedTaskId", "blocked_task_id", "str*"),
    ("blockedSummary", "blocked_summary", "str*"),
    ("revision", "revision", "int"),
    ("status", "status", "str"),
    ("notifyPolicy", "notify_policy", "str"),
    ("goal", "goal", "str"),
    ("stateJson", "state_json", "json?"),
    ("waitJson", "wait_json", "json?"),
    ("cancelRequestedAt", "cancel_requested_at", "int?"),
    ("createdAt", "created_at", "int"),
    ("updatedAt", "updated_at", "int"),
    ("endedAt", "ended_at", "int?"),
)


def flow_view(flow: Flow) -> dict[str, Any]:
    """FlowView: ``flowId``, ``syncMode``, ``controllerId*`` … ``updatedAt``, ``endedAt?``.

    ``FLOW_VIEW_LAYOUT`` written out: every response of Surface A builds at least one of these
    views."""
    view: dict[str, Any] = {"flowId": flow.flow_id, "syncMode": flow.sync_mode}
    if flow.controller_id:
        view["controllerId"] = flow.controller_id
    if flow.current_step:
        view["currentStep"] = flow.current_step
    if flow.blocked_task_id:
        view["blockedTaskId"] = flow.blocked_task_id
    if flow.blocked_summary:
        view["blockedSummary"] = flow.blocked_summary
    view["revision"] = flow.revision
    view["status"] = flow.status
    view["notifyPolicy"] = flow.notify_policy
    view["goal"] = flow.goal
    if flow.state_json is not UNSET:
        view["stateJson"] = flow.state_json
    if flow.wait_json is not UNSET:
        view["waitJson"] = flow.wait_json
    if flow.cancel_requested_at is not None:
        view["cancelRequestedAt"] = flow.cancel_requested_at
    view["createdAt"] = flow.created_at
    view["updatedAt"] = flow.updated_at
    if flow.ended_at is not None:
        view["endedAt"] = flow.ended_at
    return view


def task_view(task: Task) -> dict[str, Any]:
    """TaskView: ``taskId``, ``runtime``, ``sourceId*`` … ``createdAt``, ``startedAt?`` … ``cleanupAfter?``."""
    view: dict[str, Any] = {"taskId": task.task_id, "runtime": task.runtime}
    _put_str(view, "sourceId", task.source_id)
    _put_str(view, "childSessionKey", task.child_session_key)
    _put_str(view, "parentFlowId", task.parent_flow_id)
    _put_str(view, "parentTaskId", task.parent_task_id)
    _put_str(view, "agentId", task.agent_id)
    _put_str(view, "runId", task.run_id)
    _put_str(view, "label", task.label)
    _put_str(view, "error", task.error)
    _put_str(view, "progressSummary", task.progress_summary)
    _put_str(view, "terminalSummary", task.terminal_summary)
    _put_str(view, "terminalOutcome", task.terminal_outcome)
    view["scopeKind"] = task.scope_kind
    view["task"] = task.task
    view["status"] = task.status
    view["deliveryStatus"] = task.delivery_status
    view["notifyPolicy"] = task.notify_policy
    view["createdAt"] = task.created_at
    _put_int(view, "startedAt", task.started_at)
    _put_int(view, "endedAt", task.ended_at)
    _put_int(view, "lastEventAt", task.last_event_at)
    _put_int(view, "cleanupAfter", task.cleanup_after)
    return view


def summary(tasks: Iterable[Task]) -> dict[str, Any]:
    """The task summary of model.md §2.4; every key is always present, in the spec's order."""
    return summary_of_counts((task.status, task.runtime, 1) for task in tasks)


def summary_of_counts(counts: Iterable[tuple[str, str, int]]) -> dict[str, Any]:
    """``summary`` from ``(status, runtime, number of tasks)`` groups — what a store can count
    without reading every task (``FlowTx.task_counts``)."""
    by_status = {status: 0 for status in TASK_STATUSES}
    by_runtime = {runtime: 0 for runtime in TASK_RUNTIMES}
    total = 0
    for status, runtime, n in counts:
        total += n
        if status in by_status:
            by_status[status] += n
        if runtime in by_runtime:
            by_runtime[runtime] += n
    active = sum(by_status[status] for status in TASK_ACTIVE)
    return {
        "total": total,
        "active": active,
        "terminal": sum(n for status, n in by_status.items() if status not in TASK_ACTIVE),
        "failures": sum(by_status[status] for status in TASK_FAILURES),
        "byStatus": by_status,
        "byRuntime": by_runtime,
    }


R = TypeVar("R", Flow, Task)


def newest_first(records: Iterable[R]) -> list[R]:
    """Greatest ``createdAt`` first; equal ``createdAt`` → the later creation sequence first."""
    return sorted(records, key=lambda record: (record.created_at, record.seq), reverse=True)


def task_views(tasks: Iterable[Task]) -> list[dict[str, Any]]:
    return [task_view(task) for task in newest_first(tasks)]
