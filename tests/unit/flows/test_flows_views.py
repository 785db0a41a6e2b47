"""Views (webhooks.md §6), the summary (model.md §2.4) and the "newest first" order."""

from __future__ import annotations

from typing import Any

import msgspec

from hookgate.flows.model import Flow, Task
from hookgate.flows.views import (
    flow_view,
    newest_first,
    summary,
    summary_of_counts,
    task_view,
    task_views,
)
from hookgate.webhooks.schema import UNSET

OWNER = "agent:ops:main"


def make_flow(**changes: Any) -> Flow:
    base = Flow(flow_id="f1", owner_key=OWNER, goal="g", created_at=1000, updated_at=1000, seq=1)
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
    )
    return msgspec.structs.replace(base, **changes)


FLOW_KEYS = [
    "flowId",
    "syncMode",
    "controllerId",
    "currentStep",
    "blockedTaskId",
    "blockedSummary",
    "revision",
    "status",
    "notifyPolicy",
    "goal",
    "stateJson",
    "waitJson",
    "cancelRequestedAt",
    "createdAt",
    "updatedAt",
    "endedAt",
]
TASK_KEYS = [
    "taskId",
    "runtime",
    "sourceId",
    "childSessionKey",
    "parentFlowId",
    "parentTaskId",
    "agentId",
    "runId",
    "label",
    "error",
    "progressSummary",
    "terminalSummary",
    "terminalOutcome",
    "scopeKind",
    "task",
    "status",
    "deliveryStatus",
    "notifyPolicy",
    "createdAt",
    "startedAt",
    "endedAt",
    "lastEventAt",
    "cleanupAfter",
]


def test_flow_view_minimal() -> None:
    assert flow_view(make_flow()) == {
        "flowId": "f1",
        "syncMode": "managed",
        "revision": 0,
        "status": "queued",
        "notifyPolicy": "done_only",
        "goal": "g",
        "createdAt": 1000,
        "updatedAt": 1000,
    }


def test_flow_view_full_key_order() -> None:
    flow = make_flow(
        controller_id="c",
        current_step="s",
        blocked_task_id="b",
        blocked_summary="bs",
        state_json={"z": 1, "a": 2},
        wait_json=[1],
        cancel_requested_at=5,
        ended_at=9,
        created_by_route="ci",
    )
    view = flow_view(flow)
    assert list(view) == FLOW_KEYS
    assert msgspec.json.encode(view["stateJson"]) == b'{"z":1,"a":2}'


def test_flow_view_json_null_is_shown_and_empty_strings_hidden() -> None:
    view = flow_view(make_flow(state_json=None, wait_json=None, controller_id="", current_step=""))
    assert view["stateJson"] is None and view["waitJson"] is None
    assert "controllerId" not in view and "currentStep" not in view
    assert "stateJson" not in flow_view(make_flow(state_json=UNSET))


def test_flow_view_never_shows_owner_or_internal() -> None:
    encoded = msgspec.json.encode(flow_view(make_flow(created_by_route="ci", seq=77)))
    for word in (b"owner", b"agent:ops", b"seq", b"77", b"ci"):
        assert word not in encoded


def test_task_view_minimal() -> None:
    assert task_view(make_task()) == {
        "taskId": "t1",
        "runtime": "subagent",
        "scopeKind": "session",
        "task": "do",
        "status": "queued",
        "deliveryStatus": "pending",
        "notifyPolicy": "done_only",
        "createdAt": 1000,
    }


def test_task_view_full_key_order_and_hidden_fields() -> None:
    task = make_task(
        source_id="s",
        child_session_key="agent:ops:sub",
        parent_flow_id="f1",
        parent_task_id="p",
        agent_id="ops",
        run_id="r",
        label="l",
        error="e",
        progress_summary="ps",
        terminal_summary="ts",
        terminal_outcome="succeeded",
        started_at=1,
        ended_at=2,
        last_event_at=3,
        cleanup_after=4,
        executed=True,
        run_ref="run-9",
        notified_states=("terminal",),
        requester_agent_id="req",
        task_kind="k",
        metadata={"m": 1},
    )
    view = task_view(task)
    assert list(view) == TASK_KEYS
    encoded = msgspec.json.encode(view)
    for word in (
        b"requester",
        b"ownerKey",
        b"agent:ops:main",
        b"executed",
        b"run-9",
        b"notified",
        b"metadata",
        b"taskKind",
    ):
        assert word not in encoded


def test_task_view_empty_strings_hidden() -> None:
    view = task_view(make_task(label="", error="", run_id=""))
    assert "label" not in view and "error" not in view and "runId" not in view


def test_summary_empty_has_every_key() -> None:
    assert msgspec.json.encode(summary([])) == (
        b'{"total":0,"active":0,"terminal":0,"failures":0,"byStatus":{"queued":0,"running":0,"succeeded":0,'
        b'"failed":0,"timed_out":0,"cancelled":0,"lost":0},"byRuntime":{"subagent":0,"acp":0,"cli":0,"cron":0}}'
    )


def test_summary_spec_example() -> None:
    tasks = [make_task(status="running"), make_task(task_id="t2", status="failed", runtime="acp")]
    assert msgspec.json.encode(summary(tasks)) == (
        b'{"total":2,"active":1,"terminal":1,"failures":1,"byStatus":{"queued":0,"running":1,"succeeded":0,'
        b'"failed":1,"timed_out":0,"cancelled":0,"lost":0},"byRuntime":{"subagent":1,"acp":1,"cli":0,"cron":0}}'
    )


def test_summary_counts() -> None:
    statuses = ["queued", "queued", "running", "succeeded", "failed", "timed_out", "cancelled", "lost"]
    tasks = [
        make_task(task_id=str(i), status=s, runtime="cron" if i % 2 else "cli")
        for i, s in enumerate(statuses)
    ]
    out = summary(iter(tasks))
    assert (out["total"], out["active"], out["terminal"], out["failures"]) == (8, 3, 5, 3)
    assert out["byStatus"]["queued"] == 2
    assert out["byRuntime"] == {"subagent": 0, "acp": 0, "cli": 4, "cron": 4}


def test_newest_first_ties_by_later_seq() -> None:
    a = make_flow(flow_id="a", created_at=10, seq=1)
    b = make_flow(flow_id="b", created_at=20, seq=2)
    c = make_flow(flow_id="c", created_at=10, seq=3)
    assert [f.flow_id for f in newest_first([a, b, c])] == ["b", "c", "a"]
    t1 = make_task(task_id="x", created_at=5, seq=9)
    t2 = make_task(task_id="y", created_at=5, seq=10)
    t3 = make_task(task_id="z", created_at=4, seq=11)
    assert [v["taskId"] for v in task_views([t1, t2, t3])] == ["y", "x", "z"]


def test_summary_of_counts_is_summary_of_the_tasks() -> None:
    """What the store counts by (status, runtime) gives the summary of the tasks themselves, unknown
    statuses and runtimes (stored by another version) counted in the total only."""
    tasks = [make_task(task_id=str(i), status=s, runtime=r) for i, (s, r) in enumerate(
        [("queued", "cli"), ("queued", "cli"), ("running", "acp"), ("failed", "cron"), ("lost", "subagent"),
         ("succeeded", "cli"), ("weird", "cli"), ("queued", "other")])]
    groups: dict[tuple[str, str], int] = {}
    for t in tasks:
        groups[(t.status, t.runtime)] = groups.get((t.status, t.runtime), 0) + 1
    counts = [(s, r, n) for (s, r), n in groups.items()]
    assert summary_of_counts(counts) == summary(tasks)
    assert summary_of_counts(counts)["total"] == 8 and summary_of_counts([]) == summary([])
