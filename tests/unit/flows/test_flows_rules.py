"""Flow and task transition rules (model.md §1.3–§1.5, §2.2, §2.5; webhooks.md §3.4, §4, §5.3, §7)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hookgate.flows.model import Flow, Task, agent_id_from_session_key, clean_summary, is_terminal
from hookgate.flows.rules import (
    CHILD_SESSION_REFUSAL,
    Refusal,
    Retention,
    apply_fail,
    apply_finish,
    apply_request_cancel,
    apply_resume,
    apply_run_ended,
    apply_run_started,
    apply_set_waiting,
    apply_task_update,
    cancel_executed_task,
    child_session_verdict,
    cleanup_after,
    find_retry_target,
    merge_retry,
    new_flow,
    new_task,
    run_task_refusal,
    settle,
)
from hookgate.webhooks.schema import (
    UNSET,
    CreateFlow,
    FailFlow,
    FinishFlow,
    RequestCancel,
    ResumeFlow,
    RunTask,
    SetWaiting,
    UpdateTask,
)

OWNER = "agent:ops:main"
DAY = 86_400_000


def make_flow(**changes: Any) -> Flow:
    base = Flow(
        flow_id="f1",
        owner_key=OWNER,
        goal="g",
        created_at=1000,
        updated_at=1000,
        seq=1,
        controller_id="c",
    )
    return msgspec.structs.replace(base, **changes)


def make_task(**changes: Any) -> Task:
    base = Task(
        task_id="t1",
        runtime="subagent",
        owner_key=OWNER,
        requester_session_key=OWNER,
        task="do it",
        created_at=1000,
        seq=1,
        parent_flow_id="f1",
        last_event_at=1000,
    )
    return msgspec.structs.replace(base, **changes)


def run_action(**fields: Any) -> RunTask:
    values: dict[str, Any] = {"flow_id": "f1", "runtime": "subagent", "task": "do it"}
    values.update(fields)
    return RunTask(**values)


# --- model helpers -----------------------------------------------------------------------------


def test_is_terminal() -> None:
    assert [is_terminal(s) for s in ("queued", "running", "waiting", "blocked")] == [False] * 4
    assert all(is_terminal(s) for s in ("succeeded", "failed", "timed_out", "cancelled", "lost"))


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [(None, None), ("", None), ("  \n\t ", None), ("  a \n\n b\tc  ", "a b c"), ("x\u00a0\u3000y", "x y")],
)
def test_clean_summary(text: str | None, cleaned: str | None) -> None:
    assert clean_summary(text) == cleaned


@pytest.mark.parametrize(
    ("key", "agent"),
    [
        ("agent:ops:main", "ops"),
        ("Agent:OPS:sub:1", "ops"),
        ("agent::main", None),
        ("agent:ops", None),
        ("hook:x:y", None),
        (None, None),
        ("", None),
    ],
)
def test_agent_id_from_session_key(key: str | None, agent: str | None) -> None:
    assert agent_id_from_session_key(key) == agent


# --- create_flow -------------------------------------------------------------------------------


def test_new_flow_defaults() -> None:
    flow = new_flow(
        CreateFlow(goal="g", current_step=None),
        flow_id="f",
        seq=3,
        owner_key=OWNER,
        route_controller_id="webhooks/ci",
        now=50,
        route_id="ci",
    )
    assert flow == Flow(
        flow_id="f",
        owner_key=OWNER,
        goal="g",
        created_at=50,
        updated_at=50,
        seq=3,
        sync_mode="managed",
        controller_id="webhooks/ci",
        revision=0,
        status="queued",
        notify_policy="done_only",
        current_step=None,
        state_json=UNSET,
        wait_json=UNSET,
        created_by_route="ci",
    )
    assert flow.ended_at is None


def test_new_flow_with_request_values() -> None:
    action = CreateFlow(
        goal="g",
        controller_id="mine",
        status="blocked",
        notify_policy="silent",
        current_step="s",
        state_json=None,
        wait_json={"w": 1},
    )
    flow = new_flow(action, flow_id="f", owner_key=OWNER, route_controller_id="x", now=5)
    assert (flow.controller_id, flow.status, flow.notify_policy, flow.current_step) == (
        "mine",
        "blocked",
        "silent",
        "s",
    )
    assert flow.state_json is None and flow.wait_json == {"w": 1}


# --- the five mutations ------------------------------------------------------------------------


def test_set_waiting_waiting_and_patches() -> None:
    flow = make_flow(status="succeeded", ended_at=900, current_step="a", state_json={"x": 1}, revision=4)
    out = apply_set_waiting(flow, SetWaiting("f1", 4, current_step="b", wait_json={"w": 1}), 2000)
    assert out.status == "waiting"
    assert out.ended_at is None
    assert (out.current_step, out.state_json, out.wait_json) == ("b", {"x": 1}, {"w": 1})
    assert (out.revision, out.updated_at, out.created_at) == (5, 2000, 1000)
    assert flow.status == "succeeded" and flow.revision == 4  # never mutated


def test_set_waiting_null_clears_strings_and_stores_json_null() -> None:
    flow = make_flow(current_step="a", blocked_task_id="b", blocked_summary="s", state_json={"x": 1})
    out = apply_set_waiting(
        flow,
        SetWaiting(
            "f1",
            0,
            current_step=None,
            state_json=None,
            wait_json=None,
            blocked_task_id=None,
            blocked_summary=None,
        ),
        2000,
    )
    assert out.current_step is None and out.blocked_task_id is None and out.blocked_summary is None
    assert out.state_json is None and out.wait_json is None
    assert out.status == "waiting"


@pytest.mark.parametrize(
    "fields",
    [
        {"blocked_task_id": "t9"},
        {"blocked_summary": "needs approval"},
        {"blocked_task_id": "t", "blocked_summary": None},
    ],
)
def test_set_waiting_blocked_when_the_request_carries_blocked_info(fields: dict[str, Any]) -> None:
    assert apply_set_waiting(make_flow(), SetWaiting("f1", 0, **fields), 5).status == "blocked"


def test_set_waiting_keeps_stored_blocked_fields_but_is_waiting() -> None:
    flow = make_flow(status="blocked", blocked_task_id="old")
    out = apply_set_waiting(flow, SetWaiting("f1", 0), 5)
    assert out.status == "waiting" and out.blocked_task_id == "old"


def test_resume() -> None:
    flow = make_flow(
        status="cancelled",
        ended_at=5,
        wait_json={"w": 1},
        blocked_task_id="b",
        blocked_summary="s",
        current_step="a",
        state_json=1,
    )
    out = apply_resume(flow, ResumeFlow("f1", 0), 7000)
    assert (out.status, out.wait_json, out.blocked_task_id, out.blocked_summary, out.ended_at) == (
        "queued",
        None,
        None,
        None,
        None,
    )
    assert (out.current_step, out.state_json, out.revision, out.updated_at) == ("a", 1, 1, 7000)
    running = apply_resume(
        make_flow(), ResumeFlow("f1", 0, status="running", current_step=None, state_json=None), 1
    )
    assert running.status == "running" and running.current_step is None and running.state_json is None


def test_resume_sets_wait_json_null_even_when_absent() -> None:
    out = apply_resume(make_flow(wait_json=UNSET), ResumeFlow("f1", 0), 1)
    assert out.wait_json is None


def test_finish_twice_bumps_revision_and_ended_at() -> None:
    flow = make_flow(current_step="deploy", blocked_task_id="b", wait_json={"w": 1})
    once = apply_finish(flow, FinishFlow("f1", 0, state_json={"done": True}), 10)
    assert (once.status, once.ended_at, once.updated_at, once.revision) == ("succeeded", 10, 10, 1)
    assert (once.wait_json, once.blocked_task_id, once.current_step, once.state_json) == (
        None,
        None,
        "deploy",
        {"done": True},
    )
    twice = apply_finish(once, FinishFlow("f1", 1), 20)
    assert (twice.ended_at, twice.revision, twice.state_json) == (20, 2, {"done": True})


def test_fail_blocked_fields_as_given() -> None:
    flow = make_flow(blocked_task_id="b", blocked_summary="s", wait_json={"w": 1})
    kept = apply_fail(flow, FailFlow("f1", 0), 10)
    assert (kept.status, kept.ended_at, kept.wait_json) == ("failed", 10, None)
    assert (kept.blocked_task_id, kept.blocked_summary) == ("b", "s")
    changed = apply_fail(
        flow, FailFlow("f1", 0, blocked_task_id=None, blocked_summary="new", state_json=[1]), 10
    )
    assert (changed.blocked_task_id, changed.blocked_summary, changed.state_json) == (None, "new", [1])


def test_request_cancel_overwrites_and_keeps_status() -> None:
    flow = make_flow(status="failed", cancel_requested_at=5)
    out = apply_request_cancel(flow, RequestCancel("f1", 0), 99)
    assert (out.status, out.cancel_requested_at, out.revision, out.updated_at) == ("failed", 99, 1, 99)


# --- settle rule -------------------------------------------------------------------------------


def test_settle_fires_when_last_active_task_ends() -> None:
    flow = make_flow(
        status="waiting", cancel_requested_at=50, blocked_summary="s", wait_json={"w": 1}, revision=2
    )
    done = make_task(status="succeeded", ended_at=300, last_event_at=300)
    other = make_task(task_id="t2", status="failed", ended_at=200)
    out = settle(flow, [make_task(status="running"), other], done, 400)
    assert out is not None
    assert (out.status, out.ended_at, out.updated_at, out.revision) == ("cancelled", 300, 400, 3)
    assert (out.blocked_summary, out.wait_json) == (None, None)


@pytest.mark.parametrize(
    ("flow_changes", "others"),
    [
        ({"cancel_requested_at": None}, []),
        ({"cancel_requested_at": 5, "status": "succeeded"}, []),
        ({"cancel_requested_at": 5, "status": "cancelled"}, []),
        ({"cancel_requested_at": 5, "sync_mode": "task_mirrored"}, []),
        ({"cancel_requested_at": 5}, [{"task_id": "t2", "status": "queued"}]),
        ({"cancel_requested_at": 5}, [{"task_id": "t2", "status": "running"}]),
    ],
)
def test_settle_does_not_fire(flow_changes: dict[str, Any], others: list[dict[str, Any]]) -> None:
    done = make_task(status="succeeded", ended_at=300)
    tasks = [done] + [make_task(**o) for o in others]
    assert settle(make_flow(**flow_changes), tasks, done, 400) is None


def test_settle_blocked_flow_is_not_terminal() -> None:
    done = make_task(status="cancelled", ended_at=300)
    out = settle(make_flow(status="blocked", cancel_requested_at=1), [done], done, 400)
    assert out is not None and out.status == "cancelled"


def test_settle_ended_at_fallbacks() -> None:
    flow = make_flow(cancel_requested_at=1)
    by_event = make_task(status="lost", ended_at=None, last_event_at=250)
    assert (out := settle(flow, [], by_event, 400)) is not None and out.ended_at == 250
    by_now = make_task(status="lost", ended_at=None, last_event_at=None)
    assert (out := settle(flow, [], by_now, 400)) is not None and out.ended_at == 400


# --- run_task creation -------------------------------------------------------------------------


def test_new_task_queued_defaults() -> None:
    change = new_task(run_action(), make_flow(), task_id="t9", seq=4, now=5000)
    task = change.task
    assert task == Task(
        task_id="t9",
        runtime="subagent",
        owner_key=OWNER,
        requester_session_key=OWNER,
        task="do it",
        created_at=5000,
        seq=4,
        scope_kind="session",
        parent_flow_id="f1",
        agent_id="ops",
        status="queued",
        delivery_status="pending",
        notify_policy="done_only",
        last_event_at=5000,
    )
    assert change.notifications == ()


def test_new_task_running_defaults_to_now() -> None:
    task = new_task(run_action(status="running"), make_flow(), task_id="t", now=5000).task
    assert (task.created_at, task.started_at, task.last_event_at) == (5000, 5000, 5000)


def test_new_task_created_at_is_earliest() -> None:
    action = run_action(status="running", started_at=4000, last_event_at=3000)
    task = new_task(action, make_flow(), task_id="t", now=5000).task
    # createdAt = min(now, startedAt, lastEventAt); lastEventAt never below startedAt.
    assert (task.created_at, task.started_at, task.last_event_at) == (3000, 4000, 4000)


def test_new_task_future_timestamps() -> None:
    action = run_action(status="running", started_at=6000, last_event_at=7000)
    task = new_task(action, make_flow(), task_id="t", now=5000).task
    assert (task.created_at, task.started_at, task.last_event_at) == (5000, 6000, 7000)


def test_new_task_last_event_without_started() -> None:
    action = run_action(status="running", last_event_at=4500)
    task = new_task(action, make_flow(), task_id="t", now=5000).task
    # running without startedAt → startedAt = now; lastEventAt raised to it.
    assert (task.created_at, task.started_at, task.last_event_at) == (4500, 5000, 5000)


def test_new_task_fields_and_agent_resolution() -> None:
    action = run_action(
        source_id="s",
        parent_task_id="p",
        run_id="r",
        label="l",
        child_session_key=" Agent:Build:Sub:1 ",
        notify_policy="silent",
        status="running",
        progress_summary="  a \n b ",
    )
    task = new_task(action, make_flow(), task_id="t", now=1).task
    assert (task.source_id, task.parent_task_id, task.run_id, task.label) == ("s", "p", "r", "l")
    assert task.child_session_key == "agent:build:sub:1"
    assert task.agent_id == "build"
    assert task.notify_policy == "silent" and task.progress_summary == "a b"
    explicit = new_task(
        run_action(agent_id="Writer", child_session_key="agent:x:y"), make_flow(), task_id="t", now=1
    )
    assert explicit.task.agent_id == "Writer"
    none = new_task(run_action(), make_flow(owner_key="hook:x"), task_id="t", now=1)
    assert none.task.agent_id is None


def test_new_task_executed_flag() -> None:
    assert new_task(run_action(), make_flow(), task_id="t", now=1, executed=True).task.executed


# --- retries -----------------------------------------------------------------------------------


def test_find_retry_target_exact_match() -> None:
    flow = make_flow()
    a = make_task(task_id="a", run_id="r", label="l", seq=1, task="x")
    b = make_task(task_id="b", run_id="r", label="l", seq=2)
    assert find_retry_target([a, b], run_action(run_id="r", label="l"), flow) == b
    assert find_retry_target([a, b], run_action(run_id="r", label="other"), flow) is None
    assert find_retry_target([a, b], run_action(run_id=None, label="l"), flow) is None


@pytest.mark.parametrize(
    "mismatch",
    [
        {"runtime": "acp"},
        {"owner_key": "agent:x:main"},
        {"parent_flow_id": "f2"},
        {"child_session_key": "agent:ops:c"},
    ],
)
def test_find_retry_target_requires_same_identity(mismatch: dict[str, Any]) -> None:
    task = make_task(run_id="r", **mismatch)
    assert find_retry_target([task], run_action(run_id="r"), make_flow()) is None


def test_find_retry_target_child_session_compares_case_insensitively() -> None:
    task = make_task(run_id="r", child_session_key="agent:ops:c")
    assert (
        find_retry_target([task], run_action(run_id="r", child_session_key="AGENT:ops:C"), make_flow())
        == task
    )


def test_find_retry_target_acp_earliest_without_exact_match() -> None:
    a = make_task(task_id="a", runtime="acp", run_id="r", seq=5, task="x")
    b = make_task(task_id="b", runtime="acp", run_id="r", seq=2, task="y")
    assert find_retry_target([a, b], run_action(runtime="acp", run_id="r", task="z"), make_flow()) == b


def test_merge_retry_fills_missing_and_keeps_metadata() -> None:
    existing = make_task(
        run_id="r", status="running", delivery_status="session_queued", notify_policy="done_only"
    )
    action = run_action(
        run_id="r",
        source_id="s",
        parent_task_id="p",
        agent_id="a",
        label="new",
        task="other",
        notify_policy="state_changes",
    )
    out = merge_retry(existing, action)
    assert (out.source_id, out.parent_task_id, out.agent_id) == ("s", "p", "a")
    assert (out.label, out.task) == ("new", "do it")  # missing label filled, task kept
    assert out.notify_policy == "done_only"  # upgraded only from silent
    assert out.delivery_status == "pending"
    assert out.status == "running" and out.task_id == existing.task_id


def test_merge_retry_does_not_overwrite_existing_fields() -> None:
    existing = make_task(source_id="s0", parent_task_id="p0", agent_id="a0", label="l0")
    out = merge_retry(existing, run_action(source_id="s", parent_task_id="p", agent_id="a", label="l"))
    assert (out.source_id, out.parent_task_id, out.agent_id, out.label) == ("s0", "p0", "a0", "l0")


def test_merge_retry_prefer_metadata() -> None:
    existing = make_task(label="l0", task="t0")
    out = merge_retry(existing, run_action(label="l1", task="t1", prefer_metadata=True))
    assert (out.label, out.task) == ("l1", "t1")
    kept = merge_retry(existing, run_action(task="t1", prefer_metadata=True))
    assert (kept.label, kept.task) == ("l0", "t1")


@pytest.mark.parametrize(
    ("old", "requested", "result"),
    [
        ("silent", "state_changes", "state_changes"),
        ("silent", "done_only", "done_only"),
        ("silent", "silent", "silent"),
        ("state_changes", "done_only", "state_changes"),
        ("done_only", "silent", "done_only"),
    ],
)
def test_merge_retry_notify_policy_upgrade(old: str, requested: str, result: str) -> None:
    assert (
        merge_retry(make_task(notify_policy=old), run_action(notify_policy=requested)).notify_policy == result
    )


def test_merge_retry_keeps_delivered() -> None:
    assert merge_retry(make_task(delivery_status="delivered"), run_action()).delivery_status == "delivered"
    assert merge_retry(make_task(delivery_status="not_applicable"), run_action()).delivery_status == "pending"


def test_merge_retry_agent_from_owner_when_missing() -> None:
    assert merge_retry(make_task(agent_id=None), run_action()).agent_id == "ops"


# --- update_task -------------------------------------------------------------------------------

RET = Retention()


def test_update_running_from_queued() -> None:
    change = apply_task_update(make_task(), UpdateTask("t1", status="running"), 2000, RET)
    assert (change.task.status, change.task.started_at, change.task.last_event_at) == ("running", 2000, 2000)


def test_update_keeps_started_at_and_uses_given_last_event() -> None:
    task = make_task(status="running", started_at=1500)
    change = apply_task_update(
        task, UpdateTask("t1", progress_summary=" p \n q ", last_event_at=1800), 2000, RET
    )
    assert (change.task.started_at, change.task.last_event_at, change.task.progress_summary) == (
        1500,
        1800,
        "p q",
    )


def test_update_last_event_never_below_started() -> None:
    task = make_task(status="running", started_at=1500)
    assert apply_task_update(task, UpdateTask("t1", last_event_at=10), 2000, RET).task.last_event_at == 1500


def test_update_progress_null_clears_and_blank_after_collapse_is_absent() -> None:
    task = make_task(status="running", started_at=1, progress_summary="p")
    assert (
        apply_task_update(task, UpdateTask("t1", progress_summary=None), 2, RET).task.progress_summary is None
    )
    assert apply_task_update(task, UpdateTask("t1"), 2, RET).task.progress_summary == "p"


def test_update_progress_on_queued_task_stays_queued() -> None:
    change = apply_task_update(make_task(), UpdateTask("t1", progress_summary="p"), 2000, RET)
    assert (change.task.status, change.task.started_at, change.task.progress_summary) == ("queued", None, "p")


@pytest.mark.parametrize("status", ["succeeded", "failed", "timed_out", "cancelled"])
def test_update_terminal(status: str) -> None:
    task = make_task(status="running", started_at=1000)
    action = UpdateTask(
        "t1",
        status=status,
        terminal_summary=" all \n good ",
        error="boom  here" if status != "succeeded" else UNSET,
    )
    out = apply_task_update(task, action, 5000, RET).task
    assert (out.status, out.ended_at, out.last_event_at) == (status, 5000, 5000)
    assert out.terminal_summary == "all good"
    assert out.error == (None if status == "succeeded" else "boom here")
    assert out.terminal_outcome == ("succeeded" if status == "succeeded" else None)
    assert out.cleanup_after == 5000 + 7 * DAY


def test_update_terminal_from_queued_leaves_started_unset() -> None:
    out = apply_task_update(make_task(), UpdateTask("t1", status="failed"), 5000, RET).task
    assert (out.status, out.started_at, out.ended_at) == ("failed", None, 5000)


# --- cleanupAfter ------------------------------------------------------------------------------


def test_cleanup_after_bases_and_retention() -> None:
    ret = Retention(task_days=2, lost_task_days=0.5)
    assert cleanup_after(make_task(status="failed", ended_at=10, last_event_at=5), ret) == 10 + 2 * DAY
    assert cleanup_after(make_task(status="failed", last_event_at=5), ret) == 5 + 2 * DAY
    assert cleanup_after(make_task(status="failed", last_event_at=None, created_at=3), ret) == 3 + 2 * DAY
    assert cleanup_after(make_task(status="lost", ended_at=10), ret) == 10 + DAY // 2
    assert cleanup_after(make_task(status="lost", ended_at=10), Retention()) == 10 + DAY


# --- executed tasks ----------------------------------------------------------------------------


def test_cancel_executed_task() -> None:
    change = cancel_executed_task(make_task(status="running", started_at=1000, executed=True), 3000, RET)
    out = change.task
    assert (out.status, out.error, out.ended_at, out.last_event_at) == (
        "cancelled",
        "Cancelled by operator.",
        3000,
        3000,
    )
    assert out.cleanup_after == 3000 + 7 * DAY
    assert out.delivery_status == "session_queued"
    [note] = change.notifications
    assert note.text == "Background task cancelled: do it. Cancelled by operator."


def test_run_lifecycle() -> None:
    started = apply_run_started(make_task(executed=True), 2000, run_ref="run-1").task
    assert (started.status, started.started_at, started.last_event_at, started.run_ref) == (
        "running",
        2000,
        2000,
        "run-1",
    )
    ok = apply_run_ended(started, "ok", "  line1\n\nline2 " + "x" * 3000, 3000, RET).task
    assert ok.status == "succeeded" and ok.terminal_outcome == "succeeded"
    assert ok.terminal_summary is not None and ok.terminal_summary.startswith("line1 line2 x")
    assert len(ok.terminal_summary) == 2001 and ok.terminal_summary.endswith("…")
    failed = apply_run_ended(started, "error", "model exploded", 3000, RET).task
    assert (failed.status, failed.error) == ("failed", "model exploded")
    skipped = apply_run_ended(started, "skipped", "no api key", 3000, RET).task
    assert (skipped.status, skipped.error) == ("failed", "no api key")
    timed = apply_run_ended(started, "timed_out", "timeout", 3000, RET).task
    assert timed.status == "timed_out"
    lost = apply_run_ended(started, "lost", None, 3000, RET).task
    assert (lost.status, lost.error, lost.cleanup_after) == (
        "lost",
        "run interrupted; retry limit reached",
        3000 + DAY,
    )


# --- refusals and the child-session guard ------------------------------------------------------


@pytest.mark.parametrize(
    ("flow", "refusal"),
    [
        (None, Refusal(404, "not_found", "Flow not found.", "TaskFlow not found.")),
        (
            make_flow(sync_mode="task_mirrored"),
            Refusal(
                409,
                "not_managed",
                "Flow does not accept managed child tasks.",
                "Flow does not accept managed child tasks.",
            ),
        ),
        (
            make_flow(cancel_requested_at=5, status="succeeded"),
            Refusal(
                409,
                "cancel_requested",
                "Flow cancellation has already been requested.",
                "Flow cancellation has already been requested.",
            ),
        ),
        (
            make_flow(status="lost"),
            Refusal(409, "terminal", "Flow is already lost.", "Flow is already lost."),
        ),
        (
            make_flow(status="cancelled"),
            Refusal(409, "terminal", "Flow is already cancelled.", "Flow is already cancelled."),
        ),
    ],
)
def test_run_task_refusals(flow: Flow | None, refusal: Refusal) -> None:
    assert run_task_refusal(flow) == refusal


@pytest.mark.parametrize("status", ["queued", "running", "waiting", "blocked"])
def test_run_task_accepted_statuses(status: str) -> None:
    assert run_task_refusal(make_flow(status=status)) is None


def test_child_session_verdicts() -> None:
    assert CHILD_SESSION_REFUSAL.reason == "childSessionKey is outside the route's session tree"
    assert child_session_verdict(" AGENT:ops:MAIN ", OWNER, ["x"]) == "route"
    assert child_session_verdict("agent:ops:sub:1", OWNER, None) == "unknown"
    assert (
        child_session_verdict("agent:ops:sub:2", OWNER, ["agent:ops:sub:1", "Agent:Ops:Main"]) == "descendant"
    )
    assert child_session_verdict("agent:other:main", OWNER, []) == "outside"
    assert child_session_verdict("hook:x", OWNER, ["agent:other:main"]) == "outside"
    deep = [f"agent:ops:s{i}" for i in range(32)] + [OWNER]
    assert child_session_verdict("agent:ops:deep", OWNER, deep) == "outside"
    assert child_session_verdict("agent:ops:deep", OWNER, deep[1:]) == "descendant"
