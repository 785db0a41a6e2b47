"""Action decisions and result bodies (webhooks.md §3.3, §3.4, §4.12, §4.13, §5.3, §7, §8)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hookgate.flows.decisions import (
    decide_cancel,
    decide_create_flow,
    decide_mutation,
    decide_run_task,
    decide_update_task,
)
from hookgate.flows.model import Flow, Task
from hookgate.flows.results import (
    CODES,
    Outcome,
    envelope,
    flow_result,
    flows_result,
    idempotency_key_reused,
    summary_result,
    task_result,
    tasks_result,
)
from hookgate.flows.rules import Retention
from hookgate.flows.views import flow_view, task_view
from hookgate.webhooks.schema import (
    CreateFlow,
    FailFlow,
    FinishFlow,
    FlowMutation,
    RequestCancel,
    ResumeFlow,
    RunTask,
    SetWaiting,
    UpdateTask,
)

OWNER = "agent:ops:main"
RET = Retention()


def make_flow(**changes: Any) -> Flow:
    base = Flow(
        flow_id="f1", owner_key=OWNER, goal="g", created_at=1000, updated_at=1000, seq=1, controller_id="c"
    )
    return msgspec.structs.replace(base, **changes)


def make_task(**changes: Any) -> Task:
    base = Task(
        task_id="t1",
        runtime="subagent",
        owner_key=OWNER,
        requester_session_key=OWNER,
        task="do",
        created_at=1000,
        seq=1,
        parent_flow_id="f1",
        last_event_at=1000,
    )
    return msgspec.structs.replace(base, **changes)


def run(**fields: Any) -> RunTask:
    values: dict[str, Any] = {"flow_id": "f1", "runtime": "subagent", "task": "do"}
    values.update(fields)
    return RunTask(**values)


def body(outcome: Outcome, route: str = "ci") -> bytes:
    return msgspec.json.encode(envelope(route, outcome))


# --- envelopes and the code table --------------------------------------------------------------


def test_envelopes() -> None:
    assert body(Outcome(200, {"x": 1})) == b'{"ok":true,"routeId":"ci","result":{"x":1}}'
    assert (
        body(Outcome(202, {}, "cancel_pending"))
        == b'{"ok":true,"routeId":"ci","code":"cancel_pending","result":{}}'
    )
    assert body(Outcome(409, {}, "terminal", "Flow is already failed.")) == (
        b'{"ok":false,"routeId":"ci","code":"terminal","error":"Flow is already failed.","result":{}}'
    )
    assert body(idempotency_key_reused()) == (
        b'{"ok":false,"routeId":"ci","code":"idempotency_key_reused","error":"Idempotency-Key was already used '
        b'with a different request.","result":{}}'
    )


def test_code_table() -> None:
    assert {code: status for code, (status, _) in CODES.items()} == {
        "cancel_pending": 202,
        "not_found": 404,
        "not_managed": 409,
        "revision_conflict": 409,
        "terminal": 409,
        "cancel_requested": 409,
        "task_not_created": 409,
        "not_external": 409,
        "idempotency_key_reused": 409,
    }
    assert CODES["not_found"][1] == ("TaskFlow not found.", "Task not found.")
    assert CODES["not_managed"][1] == (
        "TaskFlow is not managed by this webhook surface.",
        "Flow does not accept managed child tasks.",
    )


# --- reads -------------------------------------------------------------------------------------


def test_read_results() -> None:
    flow = make_flow()
    assert flow_result(None).result == {"flow": None}
    assert flow_result(flow).result == {"flow": flow_view(flow)}
    assert msgspec.json.encode(flows_result(msgspec.Raw("[]")).result) == b'{"flows":[]}'
    assert summary_result(None).result == {"summary": None}
    assert summary_result([]).result["summary"]["total"] == 0
    assert summary_result([("queued", "cli", 2), ("failed", "acp", 1)]).result["summary"]["failures"] == 1
    assert task_result(None).result == {"task": None}
    assert tasks_result(None).result == {"tasks": None}
    task = make_task()
    assert tasks_result([task]).result == {"tasks": [task_view(task)]}


# --- create_flow and the five mutations (§3.4, §7) ----------------------------------------------


def test_create_flow_revision_zero() -> None:
    decision = decide_create_flow(
        CreateFlow(goal="g"), flow_id="f", seq=1, owner_key=OWNER, route_controller_id="webhooks/x", now=5
    )
    assert decision.flow is not None and decision.flow.revision == 0
    assert decision.outcome.result == {"created": True, "flow": flow_view(decision.flow)}


MUTATIONS: list[FlowMutation] = [
    SetWaiting("f1", 3),
    ResumeFlow("f1", 3),
    FinishFlow("f1", 3),
    FailFlow("f1", 3),
    RequestCancel("f1", 3),
]


@pytest.mark.parametrize("action", MUTATIONS)
def test_mutation_not_found(action: FlowMutation) -> None:
    decision = decide_mutation(None, action, 5)
    assert decision.flow is None
    assert body(decision.outcome) == (
        b'{"ok":false,"routeId":"ci","code":"not_found","error":"TaskFlow not found.",'
        b'"result":{"applied":false,"code":"not_found"}}'
    )


@pytest.mark.parametrize("action", MUTATIONS)
def test_mutation_not_managed_before_revision(action: FlowMutation) -> None:
    flow = make_flow(sync_mode="task_mirrored", revision=0)
    decision = decide_mutation(flow, action, 5)
    assert decision.flow is None
    assert (decision.outcome.status, decision.outcome.code, decision.outcome.error) == (
        409,
        "not_managed",
        "TaskFlow is not managed by this webhook surface.",
    )
    assert decision.outcome.result == {"applied": False, "code": "not_managed", "current": flow_view(flow)}


@pytest.mark.parametrize("stored", [2, 4])
@pytest.mark.parametrize("action", MUTATIONS)
def test_mutation_revision_conflict_lower_or_higher(action: FlowMutation, stored: int) -> None:
    flow = make_flow(revision=stored)
    decision = decide_mutation(flow, action, 5)
    assert decision.flow is None
    assert decision.outcome.status == 409 and decision.outcome.code == "revision_conflict"
    assert decision.outcome.result == {
        "applied": False,
        "code": "revision_conflict",
        "current": flow_view(flow),
    }


@pytest.mark.parametrize("status", ["queued", "succeeded", "failed", "cancelled", "lost", "blocked"])
@pytest.mark.parametrize("action", MUTATIONS)
def test_mutation_applies_from_any_status(action: FlowMutation, status: str) -> None:
    flow = make_flow(revision=3, status=status)
    decision = decide_mutation(flow, action, 5000)
    assert decision.flow is not None
    assert (decision.flow.revision, decision.flow.updated_at) == (4, 5000)
    assert decision.outcome.result == {"applied": True, "flow": flow_view(decision.flow)}


# --- cancel_flow (§4.12) -----------------------------------------------------------------------


def test_cancel_not_found() -> None:
    decision = decide_cancel(None, [], 5, RET)
    assert body(decision.outcome) == (
        b'{"ok":false,"routeId":"ci","code":"not_found","error":"TaskFlow not found.",'
        b'"result":{"found":false,"cancelled":false,"reason":"Flow not found."}}'
    )


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled", "lost"])
def test_cancel_terminal(status: str) -> None:
    flow = make_flow(status=status)
    older = make_task(task_id="a", created_at=1, seq=1, status="running")
    newer = make_task(task_id="b", created_at=2, seq=2)
    decision = decide_cancel(flow, [older, newer], 5, RET)
    assert decision.flow is None and decision.tasks == ()
    text = f"Flow is already {status}."
    assert (decision.outcome.status, decision.outcome.code, decision.outcome.error) == (409, "terminal", text)
    assert decision.outcome.result == {
        "found": True,
        "cancelled": False,
        "reason": text,
        "flow": flow_view(flow),
        "tasks": [task_view(newer), task_view(older)],
    }


def test_cancel_fresh_flow_without_tasks_gains_two_revisions() -> None:
    flow = make_flow(
        revision=0, status="blocked", blocked_task_id="b", blocked_summary="s", wait_json={"w": 1}
    )
    decision = decide_cancel(flow, [], 9000, RET)
    final = decision.flow
    assert final is not None
    assert (final.status, final.revision, final.cancel_requested_at, final.ended_at, final.updated_at) == (
        "cancelled",
        2,
        9000,
        9000,
        9000,
    )
    assert (final.blocked_task_id, final.blocked_summary, final.wait_json) == (None, None, None)
    assert decision.outcome.status == 200 and decision.outcome.code is None
    assert list(decision.outcome.result) == ["found", "cancelled", "flow", "tasks"]
    assert decision.outcome.result["cancelled"] is True


def test_cancel_already_requested_gains_one_revision() -> None:
    flow = make_flow(revision=5, cancel_requested_at=100)
    decision = decide_cancel(flow, [make_task(status="succeeded")], 9000, RET)
    assert decision.flow is not None
    assert (decision.flow.revision, decision.flow.cancel_requested_at) == (6, 100)


def test_cancel_pending_with_external_task_then_repeat_without_new_revision() -> None:
    flow = make_flow(revision=1)
    external = make_task(status="running", executed=False)
    first = decide_cancel(flow, [external], 9000, RET)
    assert first.flow is not None and first.flow.revision == 2 and first.flow.cancel_requested_at == 9000
    assert first.tasks == ()
    assert (
        first.outcome.status == 202 and first.outcome.code == "cancel_pending" and first.outcome.error is None
    )
    assert first.outcome.result == {
        "found": True,
        "cancelled": False,
        "reason": "One or more child tasks are still active.",
        "flow": flow_view(first.flow),
        "tasks": [task_view(external)],
    }
    second = decide_cancel(first.flow, [external], 9500, RET)
    assert second.flow is None  # no new revision
    assert second.outcome.status == 202 and second.outcome.result["flow"]["revision"] == 2


def test_cancel_cancels_executed_tasks_then_flow() -> None:
    flow = make_flow(revision=0)
    executed = make_task(task_id="e", status="running", executed=True, started_at=1000, created_at=2, seq=2)
    done = make_task(task_id="d", status="succeeded", created_at=1, seq=1)
    decision = decide_cancel(flow, [done, executed], 9000, RET)
    [change] = decision.tasks
    assert (change.task.task_id, change.task.status, change.task.error) == (
        "e",
        "cancelled",
        "Cancelled by operator.",
    )
    assert [n.kind for n in change.notifications] == ["terminal"]
    assert decision.flow is not None and decision.flow.status == "cancelled" and decision.flow.revision == 2
    assert [t["taskId"] for t in decision.outcome.result["tasks"]] == ["e", "d"]
    assert decision.outcome.result["tasks"][0]["status"] == "cancelled"


def test_cancel_mixed_executed_and_external_is_pending() -> None:
    flow = make_flow()
    executed = make_task(task_id="e", status="queued", executed=True)
    external = make_task(task_id="x", status="queued", created_at=3, seq=3)
    decision = decide_cancel(flow, [executed, external], 9000, RET)
    assert decision.outcome.status == 202
    assert [c.task.status for c in decision.tasks] == ["cancelled"]
    assert decision.flow is not None and decision.flow.status == "queued"


# --- run_task (§4.13, §5.4) --------------------------------------------------------------------


def test_run_task_not_found_omits_flow() -> None:
    decision = decide_run_task(None, [], run(), task_id="t", seq=1, now=5)
    assert decision.task is None
    assert body(decision.outcome) == (
        b'{"ok":false,"routeId":"ci","code":"not_found","error":"TaskFlow not found.",'
        b'"result":{"found":false,"created":false,"reason":"Flow not found."}}'
    )


@pytest.mark.parametrize(
    ("changes", "code", "reason"),
    [
        ({"sync_mode": "task_mirrored"}, "not_managed", "Flow does not accept managed child tasks."),
        ({"cancel_requested_at": 1}, "cancel_requested", "Flow cancellation has already been requested."),
        ({"status": "failed"}, "terminal", "Flow is already failed."),
    ],
)
def test_run_task_refused_with_flow(changes: dict[str, Any], code: str, reason: str) -> None:
    flow = make_flow(**changes)
    decision = decide_run_task(flow, [], run(), task_id="t", seq=1, now=5)
    assert (decision.outcome.status, decision.outcome.code, decision.outcome.error) == (409, code, reason)
    assert decision.outcome.result == {
        "found": True,
        "created": False,
        "reason": reason,
        "flow": flow_view(flow),
    }


def test_run_task_child_session_guard() -> None:
    flow = make_flow()
    outside = decide_run_task(
        flow, [], run(child_session_key="agent:x:main"), task_id="t", seq=1, now=5, child_verdict="outside"
    )
    assert (outside.outcome.status, outside.outcome.code, outside.outcome.error) == (
        409,
        "task_not_created",
        "childSessionKey is outside the route's session tree",
    )
    assert outside.outcome.result["reason"] == "childSessionKey is outside the route's session tree"
    unknown = decide_run_task(
        flow, [], run(child_session_key="agent:ops:c"), task_id="t", seq=1, now=5, child_verdict="unknown"
    )
    assert unknown.created and unknown.record_child_session
    known = decide_run_task(
        flow, [], run(child_session_key="agent:ops:c"), task_id="t", seq=1, now=5, child_verdict="descendant"
    )
    assert known.created and not known.record_child_session


def test_run_task_created_does_not_touch_flow() -> None:
    flow = make_flow(revision=7)
    decision = decide_run_task(flow, [], run(), task_id="t9", seq=3, now=5)
    assert decision.created and decision.task is not None
    assert decision.outcome.result == {
        "created": True,
        "flow": flow_view(flow),
        "task": task_view(decision.task.task),
    }
    assert decision.outcome.result["flow"]["revision"] == 7


def test_run_task_idempotent_retry_reuses_task() -> None:
    flow = make_flow()
    existing = make_task(task_id="t1", run_id="r", notify_policy="silent", delivery_status="not_applicable")
    decision = decide_run_task(
        flow,
        [existing],
        run(run_id="r", source_id="s", notify_policy="state_changes"),
        task_id="new",
        seq=9,
        now=5,
        execute=True,
    )
    assert not decision.created and not decision.enqueue_run
    assert decision.task is not None and decision.task.notifications == ()
    reused = decision.task.task
    assert (reused.task_id, reused.source_id, reused.notify_policy, reused.delivery_status) == (
        "t1",
        "s",
        "state_changes",
        "pending",
    )
    assert decision.outcome.result["task"]["taskId"] == "t1"


@pytest.mark.parametrize(
    ("fields", "execute", "enqueue"),
    [
        ({}, True, True),
        ({}, False, False),
        ({"runtime": "acp"}, True, False),
        ({"status": "running"}, True, False),
    ],
)
def test_run_task_execute(fields: dict[str, Any], execute: bool, enqueue: bool) -> None:
    decision = decide_run_task(make_flow(), [], run(**fields), task_id="t", seq=1, now=5, execute=execute)
    assert decision.enqueue_run is enqueue
    assert decision.task is not None and decision.task.task.executed is enqueue


# --- update_task (§5.3) ------------------------------------------------------------------------


def test_update_not_found() -> None:
    decision = decide_update_task(None, None, [], UpdateTask("t"), 5, RET)
    assert body(decision.outcome) == (
        b'{"ok":false,"routeId":"ci","code":"not_found","error":"Task not found.",'
        b'"result":{"updated":false,"code":"not_found"}}'
    )


def test_update_not_external() -> None:
    task = make_task(executed=True, status="succeeded")
    decision = decide_update_task(task, make_flow(), [task], UpdateTask("t1"), 5, RET)
    assert (decision.outcome.status, decision.outcome.code, decision.outcome.error) == (
        409,
        "not_external",
        "Task is executed by hookgate and cannot be updated externally.",
    )
    assert decision.outcome.result == {"updated": False, "code": "not_external", "task": task_view(task)}


@pytest.mark.parametrize("status", ["succeeded", "failed", "timed_out", "cancelled", "lost"])
def test_update_terminal_task(status: str) -> None:
    task = make_task(status=status)
    decision = decide_update_task(task, make_flow(), [task], UpdateTask("t1", status="running"), 5, RET)
    assert (decision.outcome.status, decision.outcome.code, decision.outcome.error) == (
        409,
        "terminal",
        f"Task is already {status}.",
    )
    assert decision.outcome.result == {"updated": False, "code": "terminal", "task": task_view(task)}
    assert decision.task is None


def test_update_progress_leaves_flow_revision() -> None:
    flow = make_flow(revision=4)
    task = make_task(status="running", started_at=1000)
    decision = decide_update_task(task, flow, [task], UpdateTask("t1", progress_summary="p"), 5000, RET)
    assert decision.flow is None and decision.task is not None
    assert decision.outcome.result == {
        "updated": True,
        "task": task_view(decision.task.task),
        "flow": flow_view(flow),
    }
    assert list(decision.outcome.result) == ["updated", "task", "flow"]


def test_update_terminal_settles_cancel_requested_flow() -> None:
    flow = make_flow(revision=4, cancel_requested_at=100, status="running")
    task = make_task(status="running", started_at=1000)
    decision = decide_update_task(task, flow, [task], UpdateTask("t1", status="cancelled"), 5000, RET)
    assert decision.flow is not None
    assert (decision.flow.status, decision.flow.revision, decision.flow.ended_at) == ("cancelled", 5, 5000)
    assert decision.outcome.result["flow"]["status"] == "cancelled"


def test_update_terminal_without_settle_when_another_task_active() -> None:
    flow = make_flow(cancel_requested_at=100)
    task = make_task(status="running")
    other = make_task(task_id="t2", status="queued")
    decision = decide_update_task(task, flow, [task, other], UpdateTask("t1", status="succeeded"), 5000, RET)
    assert decision.flow is None and decision.outcome.result["flow"]["revision"] == 0


def test_request_cancel_then_last_task_ends_settles() -> None:
    flow = make_flow(revision=0)
    task = make_task(status="running")
    marked = decide_mutation(flow, RequestCancel("f1", 0), 100).flow
    assert marked is not None and marked.revision == 1 and marked.status == "queued"
    refused = decide_run_task(marked, [task], run(), task_id="x", seq=2, now=150)
    assert refused.outcome.code == "cancel_requested"
    decision = decide_update_task(
        task, marked, [task], UpdateTask("t1", status="failed", error="x"), 200, RET
    )
    assert decision.flow is not None and decision.flow.status == "cancelled" and decision.flow.revision == 2
