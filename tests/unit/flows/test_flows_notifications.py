"""Task notifications (model.md §2.3): session, texts, and which transitions emit what."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hookgate.flows.model import Flow, Task
from hookgate.flows.notifications import (
    notification_session,
    notification_text,
    notifications_for,
    task_title,
)
from hookgate.flows.rules import Retention, apply_task_update, new_task
from hookgate.webhooks.schema import RunTask, UpdateTask

OWNER = "agent:ops:main"


def make_task(**changes: Any) -> Task:
    base = Task(
        task_id="t1",
        runtime="subagent",
        owner_key=OWNER,
        requester_session_key=OWNER,
        task="Run the suite",
        created_at=1000,
        seq=1,
        parent_flow_id="f1",
    )
    return msgspec.structs.replace(base, **changes)


FLOW = Flow(flow_id="f1", owner_key=OWNER, goal="g", created_at=1, updated_at=1, seq=1)


@pytest.mark.parametrize(
    ("owner", "default", "expected"),
    [
        ("agent:ops:main", "main", ("agent:ops:main", "ops")),
        ("Agent:OPS:Main", "main", ("agent:ops:main", "ops")),
        ("agent:ops:subagent:x", "main", ("agent:ops:main", "ops")),
        ("hook:github", "main", ("agent:main:main", "main")),
        ("global", "helper", ("agent:helper:main", "helper")),
    ],
)
def test_notification_session(owner: str, default: str, expected: tuple[str, str]) -> None:
    assert notification_session(owner, default) == expected


def test_spec_example_text() -> None:
    task = make_task(
        label="integration-tests",
        run_id="ci-88421-it",
        status="succeeded",
        terminal_summary="412 tests passed",
    )
    assert notification_text(task, "terminal") == (
        "Background task done: integration-tests (run ci-88421). 412 tests passed"
    )


@pytest.mark.parametrize(
    ("status", "error", "summary", "expected"),
    [
        ("succeeded", None, None, "Background task done: Run the suite."),
        ("succeeded", "ignored", "ok", "Background task done: Run the suite. ok"),
        ("failed", "boom", "sum", "Background task failed: Run the suite. boom"),
        ("failed", None, "sum", "Background task failed: Run the suite. sum"),
        ("timed_out", None, None, "Background task timed out: Run the suite."),
        (
            "cancelled",
            "Cancelled by operator.",
            None,
            "Background task cancelled: Run the suite. Cancelled by operator.",
        ),
        (
            "lost",
            "run interrupted; retry limit reached",
            None,
            "Background task lost: Run the suite. run interrupted; retry limit reached",
        ),
    ],
)
def test_terminal_texts(status: str, error: str | None, summary: str | None, expected: str) -> None:
    task = make_task(status=status, error=error, terminal_summary=summary)
    assert notification_text(task, "terminal") == expected


def test_non_terminal_texts() -> None:
    task = make_task(status="running", progress_summary="half way", run_id="abc")
    assert notification_text(task, "accepted") == "Background task accepted: Run the suite (run abc)."
    assert notification_text(task, "started") == "Background task started: Run the suite (run abc)."
    assert notification_text(task, "update") == "Background task update: Run the suite (run abc). half way"


def test_title_collapse_and_cut() -> None:
    assert task_title(make_task(task="  a \n\t b  ")) == "a b"
    assert task_title(make_task(label="lbl", task="t")) == "lbl"
    long = "x" * 121
    assert task_title(make_task(task=long)) == "x" * 120 + "…"
    assert task_title(make_task(task="y" * 120)) == "y" * 120


def test_detail_cut_to_500() -> None:
    task = make_task(status="failed", error="e" * 501)
    assert notification_text(task, "terminal") == "Background task failed: Run the suite. " + "e" * 500 + "…"
    exact = make_task(status="failed", error="e" * 500)
    assert notification_text(exact, "terminal").endswith(" " + "e" * 500)


def test_run_suffix_first_eight_characters() -> None:
    assert notification_text(make_task(run_id="12345678901"), "accepted").endswith("(run 12345678).")
    assert notification_text(make_task(run_id="short"), "accepted").endswith("(run short).")


# --- which notifications -----------------------------------------------------------------------


def kinds(old: Task | None, new: Task) -> list[str]:
    return [n.kind for n in notifications_for(old, new).notifications]


def test_state_changes_creation() -> None:
    assert kinds(None, make_task(notify_policy="state_changes")) == ["accepted"]
    assert kinds(None, make_task(notify_policy="state_changes", status="running")) == ["started"]
    assert kinds(None, make_task(notify_policy="done_only", status="running")) == []
    assert kinds(None, make_task(notify_policy="silent")) == []


def test_state_changes_transitions() -> None:
    queued = make_task(notify_policy="state_changes", notified_states=("accepted",))
    running = msgspec.structs.replace(queued, status="running", progress_summary="p1")
    assert kinds(queued, running) == ["started"]
    plan = notifications_for(queued, running)
    assert plan.notified_states == ("accepted", "started")
    running = msgspec.structs.replace(running, notified_states=plan.notified_states)
    assert kinds(running, msgspec.structs.replace(running, progress_summary="p2")) == ["update"]
    assert kinds(running, msgspec.structs.replace(running, progress_summary="p1")) == []
    assert kinds(running, msgspec.structs.replace(running, progress_summary=None)) == []
    assert kinds(running, msgspec.structs.replace(running, status="failed", error="x")) == ["terminal"]
    # started is sent only once
    again = msgspec.structs.replace(running, status="queued")
    assert kinds(again, running) == []


def test_terminal_delivery_status() -> None:
    for policy, expected_kinds, delivery in (
        ("done_only", ["terminal"], "session_queued"),
        ("state_changes", ["terminal"], "session_queued"),
        ("silent", [], "not_applicable"),
    ):
        old = make_task(status="running", notify_policy=policy)
        new = msgspec.structs.replace(old, status="succeeded")
        plan = notifications_for(old, new)
        assert [n.kind for n in plan.notifications] == expected_kinds
        assert plan.delivery_status == delivery
    old = make_task(status="running")
    assert notifications_for(old, old).delivery_status == "pending"


def test_policy_override_and_wake() -> None:
    old = make_task(status="running", notify_policy="silent")
    new = msgspec.structs.replace(old, status="succeeded")
    [note] = notifications_for(old, new, "done_only").notifications
    assert note.wakes and note.heartbeat_reason == "task:t1"
    created = notifications_for(None, make_task(notify_policy="state_changes")).notifications[0]
    assert not created.wakes and created.heartbeat_reason is None


def test_rules_attach_notifications() -> None:
    action = RunTask(flow_id="f1", runtime="subagent", task="t", notify_policy="state_changes")
    change = new_task(action, FLOW, task_id="t1", now=5)
    assert [n.kind for n in change.notifications] == ["accepted"]
    assert change.task.notified_states == ("accepted",)
    started = apply_task_update(
        change.task, UpdateTask("t1", status="running", progress_summary="p"), 6, Retention()
    )
    assert [n.text for n in started.notifications] == ["Background task started: t."]
    update = apply_task_update(started.task, UpdateTask("t1", progress_summary="q"), 7, Retention())
    assert [n.text for n in update.notifications] == ["Background task update: t. q"]
    done = apply_task_update(
        update.task, UpdateTask("t1", status="succeeded", terminal_summary="ok"), 8, Retention()
    )
    assert [n.text for n in done.notifications] == ["Background task done: t. ok"]
    assert done.task.delivery_status == "session_queued"
    assert done.task.notified_states == ("accepted", "started", "update", "terminal")
