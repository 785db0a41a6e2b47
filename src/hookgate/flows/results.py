"""Action outcomes, their ``result`` bodies and envelopes (webhooks.md §3.3, §3.4, §4, §5, §8).

An ``Outcome`` is what a decided action answers: HTTP status, envelope ``code``/``error`` and the
``result`` object (key order as in the spec). ``envelope(route_id, outcome)`` builds the response body.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import msgspec

from hookgate.flows.model import Flow, Task
from hookgate.flows.rules import (
    CANCEL_REQUESTED,
    CHILD_OUTSIDE_TREE,
    NOT_MANAGED_RUN_TASK,
    TASKFLOW_NOT_FOUND,
    Refusal,
)
from hookgate.flows.views import flow_view, summary_of_counts, task_view, task_views

TASK_NOT_FOUND: Final = "Task not found."
NOT_MANAGED_MUTATION: Final = "TaskFlow is not managed by this webhook surface."
REVISION_CONFLICT: Final = "TaskFlow changed since the caller's expected revision."
NOT_EXTERNAL: Final = "Task is executed by hookgate and cannot be updated externally."
IDEMPOTENCY_KEY_REUSED: Final = "Idempotency-Key was already used with a different request."
CHILD_TASKS_ACTIVE: Final = "One or more child tasks are still active."

CODES: Final[dict[str, tuple[int, tuple[str, ...]]]] = {
    "cancel_pending": (202, ()),
    "not_found": (404, (TASKFLOW_NOT_FOUND, TASK_NOT_FOUND)),
    "not_managed": (409, (NOT_MANAGED_MUTATION, NOT_MANAGED_RUN_TASK)),
    "revision_conflict": (409, (REVISION_CONFLICT,)),
    "terminal": (409, ("Flow is already <status>.", "Task is already <status>.")),
    "cancel_requested": (409, (CANCEL_REQUESTED,)),
    "task_not_created": (409, (CHILD_OUTSIDE_TREE,)),
    "not_external": (409, (NOT_EXTERNAL,)),
    "idempotency_key_reused": (409, (IDEMPOTENCY_KEY_REUSED,)),
}
"""webhooks.md §8: code → (HTTP status, error texts; several where actions differ)."""


class Outcome(msgspec.Struct, frozen=True):
    """A decided action's answer. ``code`` is ``None`` for 200; ``error`` is ``None`` for 2xx."""

    status: int
    result: dict[str, Any] = msgspec.field(default_factory=dict)
    code: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status < 400


def ok(result: dict[str, Any]) -> Outcome:
    return Outcome(200, result)


def envelope(route_id: str, outcome: Outcome) -> dict[str, Any]:
    """``{"ok","routeId",["code"],["error"],"result"}`` in the order of webhooks.md §3.3."""
    body: dict[str, Any] = {"ok": outcome.ok, "routeId": route_id}
    if outcome.code is not None:
        body["code"] = outcome.code
    if outcome.error is not None:
        body["error"] = outcome.error
    body["result"] = outcome.result
    return body


def idempotency_key_reused() -> Outcome:
    return Outcome(409, {}, "idempotency_key_reused", IDEMPOTENCY_KEY_REUSED)


# --- flow reads and create ---------------------------------------------------------------------


def created_flow(flow: Flow) -> Outcome:
    return ok({"created": True, "flow": flow_view(flow)})


def flow_result(flow: Flow | None) -> Outcome:
    """``get_flow``, ``find_latest_flow``, ``resolve_flow``: ``{"flow": FlowView | null}``."""
    return ok({"flow": flow_view(flow) if flow is not None else None})


def flows_result(views: msgspec.Raw) -> Outcome:
    """``list_flows``: every flow of the owner, newest first — the store's JSON array of FlowViews
    (``FlowTx.list_flow_views``), embedded as it is."""
    return ok({"flows": views})


def summary_result(counts: Iterable[tuple[str, str, int]] | None) -> Outcome:
    """``get_task_summary`` from the flow's task counts (``FlowTx.task_counts``): ``None`` when the
    flow is missing or not owned."""
    return ok({"summary": summary_of_counts(counts) if counts is not None else None})


def task_result(task: Task | None) -> Outcome:
    """``get_task``."""
    return ok({"task": task_view(task) if task is not None else None})


def tasks_result(tasks: Iterable[Task] | None) -> Outcome:
    """``list_tasks``: newest first, ``None`` when the flow is missing or not owned."""
    return ok({"tasks": task_views(tasks) if tasks is not None else None})


# --- the five revision-checked mutations -------------------------------------------------------


def mutation_not_found() -> Outcome:
    return Outcome(404, {"applied": False, "code": "not_found"}, "not_found", TASKFLOW_NOT_FOUND)


def mutation_not_managed(flow: Flow) -> Outcome:
    result = {"applied": False, "code": "not_managed", "current": flow_view(flow)}
    return Outcome(409, result, "not_managed", NOT_MANAGED_MUTATION)


def revision_conflict(flow: Flow) -> Outcome:
    result = {"applied": False, "code": "revision_conflict", "current": flow_view(flow)}
    return Outcome(409, result, "revision_conflict", REVISION_CONFLICT)


def mutation_applied(flow: Flow) -> Outcome:
    return ok({"applied": True, "flow": flow_view(flow)})


# --- cancel_flow -------------------------------------------------------------------------------


def cancel_not_found() -> Outcome:
    result = {"found": False, "cancelled": False, "reason": "Flow not found."}
    return Outcome(404, result, "not_found", TASKFLOW_NOT_FOUND)


def cancel_body(flow: Flow, tasks: Iterable[Task], *, cancelled: bool, reason: str | None) -> dict[str, Any]:
    """``{"found":true,"cancelled":…,["reason"],"flow","tasks"}``; ``reason`` only when not cancelled."""
    body: dict[str, Any] = {"found": True, "cancelled": cancelled}
    if not cancelled and reason is not None:
        body["reason"] = reason
    body["flow"] = flow_view(flow)
    body["tasks"] = task_views(tasks)
    return body


def cancel_terminal(flow: Flow, tasks: Iterable[Task]) -> Outcome:
    text = f"Flow is already {flow.status}."
    return Outcome(409, cancel_body(flow, tasks, cancelled=False, reason=text), "terminal", text)


def cancel_pending(flow: Flow, tasks: Iterable[Task]) -> Outcome:
    body = cancel_body(flow, tasks, cancelled=False, reason=CHILD_TASKS_ACTIVE)
    return Outcome(202, body, "cancel_pending", None)


def cancel_done(flow: Flow, tasks: Iterable[Task]) -> Outcome:
    return ok(cancel_body(flow, tasks, cancelled=True, reason=None))


# --- run_task ----------------------------------------------------------------------------------


def run_task_refused(refusal: Refusal, flow: Flow | None) -> Outcome:
    """``{"found","created":false,"reason",["flow"]}``; ``flow`` omitted when not found."""
    result: dict[str, Any] = {"found": flow is not None, "created": False, "reason": refusal.reason}
    if flow is not None:
        result["flow"] = flow_view(flow)
    return Outcome(refusal.status, result, refusal.code, refusal.error)


def task_created(flow: Flow, task: Task) -> Outcome:
    return ok({"created": True, "flow": flow_view(flow), "task": task_view(task)})


# --- update_task -------------------------------------------------------------------------------


def update_not_found() -> Outcome:
    return Outcome(404, {"updated": False, "code": "not_found"}, "not_found", TASK_NOT_FOUND)


def update_not_external(task: Task) -> Outcome:
    result = {"updated": False, "code": "not_external", "task": task_view(task)}
    return Outcome(409, result, "not_external", NOT_EXTERNAL)


def update_terminal(task: Task) -> Outcome:
    result = {"updated": False, "code": "terminal", "task": task_view(task)}
    return Outcome(409, result, "terminal", f"Task is already {task.status}.")


def task_updated(task: Task, flow: Flow) -> Outcome:
    return ok({"updated": True, "task": task_view(task), "flow": flow_view(flow)})
