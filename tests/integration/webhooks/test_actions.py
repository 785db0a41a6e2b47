"""The TaskFlow action API against a real server (webhooks.md §3–§9, model.md §1–§3): the worked
example of §9 end to end, every row of the §8 code table, the revision rules of §7, run_task,
the task extensions, task notifications and owner isolation."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from gateway import RunningGateway
from routeharness import (
    Api,
    ci_route,
    db,
    dumps,
    exact,
    heartbeat_requests,
    metric,
    now_ms,
    serving,
    system_events,
    webhooks_config,
)

OWNERS = ["o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8"]


def actions_config() -> dict[str, Any]:
    routes: dict[str, Any] = {
        "ci": ci_route(),
        "other": ci_route(path="/plugins/webhooks/other", sessionKey="agent:main:main", controllerId=None),
        "shared1": ci_route(path="/hooks-a/shared", sessionKey="agent:ops:shared"),
        "shared2": ci_route(path="/hooks-b/shared", sessionKey=" AGENT:OPS:SHARED ", secret="other-secret"),
    }
    del routes["other"]["controllerId"]
    routes["exec"] = ci_route(path="/plugins/webhooks/exec", sessionKey="agent:ops:exec", execute=True)
    for name in OWNERS:  # one fresh owner per test that lists or resolves flows
        routes[name] = ci_route(path=f"/plugins/webhooks/{name}", sessionKey=f"agent:ops:{name}")
    return webhooks_config(routes, limits={"rateLimit": {"windowSeconds": 60, "maxRequests": 100000}})


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    with serving(tmp_path_factory.mktemp("actions"), actions_config()) as running:
        yield running


@pytest.fixture
def api(gw: RunningGateway) -> Iterator[Api]:
    with gw.client() as c:
        yield Api(c)


def route_api(gw: RunningGateway, c: Any, route: str) -> Api:
    if route == "shared1":
        return Api(c, "/hooks-a/shared")
    if route == "shared2":
        return Api(c, "/hooks-b/shared", {"Authorization": "Bearer other-secret"})
    return Api(c, f"/plugins/webhooks/{route}")


def envelope(route: str, result: Any, code: str | None = None, error: str | None = None, ok: bool = False) -> str:
    body: dict[str, Any] = {"ok": ok, "routeId": route}
    if code is not None:
        body["code"] = code
    if error is not None:
        body["error"] = error
    body["result"] = result
    return dumps(body)


def insert_mirrored_flow(gw: RunningGateway, owner: str, **overrides: Any) -> str:
    """A ``task_mirrored`` flow (valid stored value that the action API never creates)."""
    flow_id = str(uuid.uuid4())
    row = {"flow_id": flow_id, "owner_key": owner, "sync_mode": "task_mirrored", "controller_id": None,
           "revision": 4, "status": "running", "notify_policy": "done_only", "goal": "mirrored",
           "created_at": now_ms(), "updated_at": now_ms(), **overrides}
    with db(gw) as conn:
        conn.execute(f"INSERT INTO flows ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", list(row.values()))
        conn.commit()
    return flow_id


# --- §9 worked example ----------------------------------------------------------------------------

SPEC_FLOW_ID = "6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33"
SPEC_TASK_ID = "0b9d7c1e-5a3f-4e2b-9c8d-7f6e5d4c3b2a"
SPEC_CREATED = (
    '{"ok":true,"routeId":"ci","result":{"created":true,"flow":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33",'
    '"syncMode":"managed","controllerId":"ci/nightly","currentStep":"build","revision":0,"status":"queued",'
    '"notifyPolicy":"done_only","goal":"Nightly release build 1234","stateJson":{"build":1234},'
    '"createdAt":1795330000000,"updatedAt":1795330000000}}}'
)
SPEC_RUN_TASK = (
    '{"ok":true,"routeId":"ci","result":{"created":true,"flow":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33",'
    '"syncMode":"managed","controllerId":"ci/nightly","currentStep":"build","revision":0,"status":"queued",'
    '"notifyPolicy":"done_only","goal":"Nightly release build 1234","stateJson":{"build":1234},'
    '"createdAt":1795330000000,"updatedAt":1795330000000},"task":{"taskId":"0b9d7c1e-5a3f-4e2b-9c8d-7f6e5d4c3b2a",'
    '"runtime":"subagent","parentFlowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33","agentId":"ops",'
    '"runId":"ci-88421-it","label":"integration-tests","progressSummary":"running on runner 7","scopeKind":"session",'
    '"task":"Run the integration test suite for build 1234","status":"running","deliveryStatus":"pending",'
    '"notifyPolicy":"done_only","createdAt":1795330001000,"startedAt":1795330001000,"lastEventAt":1795330001000}}}'
)
SPEC_WAITING = (
    '{"ok":true,"routeId":"ci","result":{"applied":true,"flow":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33",'
    '"syncMode":"managed","controllerId":"ci/nightly","currentStep":"await-approval","revision":1,"status":"waiting",'
    '"notifyPolicy":"done_only","goal":"Nightly release build 1234","stateJson":{"build":1234},'
    '"waitJson":{"approver":"release-manager"},"createdAt":1795330000000,"updatedAt":1795330060000}}}'
)
SPEC_CONFLICT = (
    '{"ok":false,"routeId":"ci","code":"revision_conflict","error":"TaskFlow changed since the caller\'s expected '
    'revision.","result":{"applied":false,"code":"revision_conflict","current":{"flowId":'
    '"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33","syncMode":"managed","controllerId":"ci/nightly","currentStep":'
    '"await-approval","revision":1,"status":"waiting","notifyPolicy":"done_only","goal":"Nightly release build 1234",'
    '"stateJson":{"build":1234},"waitJson":{"approver":"release-manager"},"createdAt":1795330000000,'
    '"updatedAt":1795330060000}}}'
)
SPEC_RESUMED = (
    '{"ok":true,"routeId":"ci","result":{"applied":true,"flow":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33",'
    '"syncMode":"managed","controllerId":"ci/nightly","currentStep":"deploy","revision":2,"status":"running",'
    '"notifyPolicy":"done_only","goal":"Nightly release build 1234","stateJson":{"build":1234},"waitJson":null,'
    '"createdAt":1795330000000,"updatedAt":1795330900000}}}'
)
SPEC_FINISHED = (
    '{"ok":true,"routeId":"ci","result":{"applied":true,"flow":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33",'
    '"syncMode":"managed","controllerId":"ci/nightly","currentStep":"deploy","revision":3,"status":"succeeded",'
    '"notifyPolicy":"done_only","goal":"Nightly release build 1234","stateJson":{"build":1234,"released":true},'
    '"waitJson":null,"createdAt":1795330000000,"updatedAt":1795331500000,"endedAt":1795331500000}}}'
)


def spec(text: str, **subs: Any) -> str:
    """The spec's example body with its ids and timestamps replaced by the actual ones."""
    for old, new in subs.items():
        key = {"flow": SPEC_FLOW_ID, "task": SPEC_TASK_ID}.get(old, old.lstrip("t"))
        text = text.replace(key, str(new))
    return text


def stamped(before: int, value: int) -> int:
    assert before <= value <= now_ms(), (before, value)
    return value


def test_worked_example_end_to_end(gw: RunningGateway, api: Api) -> None:
    before = now_ms()
    r = api.post('{"action":"create_flow","goal":"Nightly release build 1234","currentStep":"build",'
                 '"stateJson":{"build":1234}}')
    flow = r.json()["result"]["flow"]
    created = stamped(before, flow["createdAt"])
    ids = {"flow": flow["flowId"], "t1795330000000": created}
    exact(r, 200, spec(SPEC_CREATED, **ids))

    started = now_ms() - 1
    r = api.call("run_task", flowId=flow["flowId"], runtime="subagent", runId="ci-88421-it", label="integration-tests",
                 task="Run the integration test suite for build 1234", status="running", startedAt=started,
                 progressSummary="running on runner 7")
    task_id = r.json()["result"]["task"]["taskId"]
    ids["task"] = task_id
    exact(r, 200, spec(SPEC_RUN_TASK, **ids, t1795330001000=started))

    before = now_ms()
    waiting = {"action": "set_waiting", "flowId": flow["flowId"], "expectedRevision": 0, "currentStep": "await-approval",
               "waitJson": {"approver": "release-manager"}}
    r = api.post(waiting)
    ids["t1795330060000"] = stamped(before, r.json()["result"]["flow"]["updatedAt"])
    exact(r, 200, spec(SPEC_WAITING, **ids))
    exact(api.post(waiting), 409, spec(SPEC_CONFLICT, **ids))

    before = now_ms()
    r = api.call("resume_flow", flowId=flow["flowId"], expectedRevision=1, status="running", currentStep="deploy")
    ids["t1795330900000"] = stamped(before, r.json()["result"]["flow"]["updatedAt"])
    exact(r, 200, spec(SPEC_RESUMED, **ids))

    before = now_ms()
    r = api.call("finish_flow", flowId=flow["flowId"], expectedRevision=2, stateJson={"build": 1234, "released": True})
    ids["t1795331500000"] = stamped(before, r.json()["result"]["flow"]["updatedAt"])
    exact(r, 200, spec(SPEC_FINISHED, **ids))

    # the task is still running; the runner reports its end
    r = api.call("update_task", taskId=task_id, status="succeeded", terminalSummary="412 tests passed")
    assert r.status_code == 200, r.text
    task = r.json()["result"]["task"]
    assert task["status"] == "succeeded" and task["deliveryStatus"] == "session_queued"
    assert task["terminalOutcome"] == "succeeded" and task["terminalSummary"] == "412 tests passed"
    assert r.json()["result"]["flow"]["revision"] == 3  # no settle: the flow has no cancelRequestedAt
    text = "Background task done: integration-tests (run ci-88421). 412 tests passed"
    assert system_events(gw, text) == [("agent:ops:main", text)]
    assert ("ops", f"task:{task_id}") in heartbeat_requests(gw)

    finished = spec(SPEC_FINISHED, **ids)
    flow_view = json.loads(finished)["result"]["flow"]
    refused = {"found": True, "created": False, "reason": "Flow is already succeeded.", "flow": flow_view}
    exact(api.call("run_task", flowId=flow["flowId"], runtime="subagent", task="again"), 409,
          envelope("ci", refused, "terminal", "Flow is already succeeded."))
    r = api.call("cancel_flow", flowId=flow["flowId"])
    tasks = api.result("list_tasks", flowId=flow["flowId"])["tasks"]
    cancel = {"found": True, "cancelled": False, "reason": "Flow is already succeeded.", "flow": flow_view,
              "tasks": tasks}
    exact(r, 409, envelope("ci", cancel, "terminal", "Flow is already succeeded."))


# --- §8 code table --------------------------------------------------------------------------------

MUTATIONS = ["set_waiting", "resume_flow", "finish_flow", "fail_flow", "request_cancel"]


@pytest.mark.parametrize("action", MUTATIONS)
def test_mutation_not_found_for_missing_and_foreign_flows(gw: RunningGateway, api: Api, action: str) -> None:
    with gw.client() as c:
        foreign = route_api(gw, c, "other").create()
    body = envelope("ci", {"applied": False, "code": "not_found"}, "not_found", "TaskFlow not found.")
    for flow_id in (str(uuid.uuid4()), foreign["flowId"]):
        exact(api.call(action, flowId=flow_id, expectedRevision=0), 404, body)
    with gw.client() as c:
        assert route_api(gw, c, "other").flow(foreign["flowId"]) == foreign  # untouched


@pytest.mark.parametrize("action", MUTATIONS)
def test_mutation_not_managed(gw: RunningGateway, api: Api, action: str) -> None:
    flow_id = insert_mirrored_flow(gw, "agent:ops:main")
    current = api.flow(flow_id)
    assert current["syncMode"] == "task_mirrored" and "controllerId" not in current
    # not_managed comes before the revision check
    for revision in (4, 0):
        exact(api.call(action, flowId=flow_id, expectedRevision=revision), 409,
              envelope("ci", {"applied": False, "code": "not_managed", "current": current}, "not_managed",
                       "TaskFlow is not managed by this webhook surface."))
    assert api.flow(flow_id) == current


def test_revision_conflict_lower_or_higher(api: Api) -> None:
    flow = api.create()
    flow = api.result("set_waiting", flowId=flow["flowId"], expectedRevision=0)["flow"]
    for revision in (0, 2, 9007199254740991):
        exact(api.call("finish_flow", flowId=flow["flowId"], expectedRevision=revision), 409,
              envelope("ci", {"applied": False, "code": "revision_conflict", "current": flow}, "revision_conflict",
                       "TaskFlow changed since the caller's expected revision."))
    assert api.flow(flow["flowId"]) == flow


def test_cancel_flow_not_found(gw: RunningGateway, api: Api) -> None:
    with gw.client() as c:
        foreign = route_api(gw, c, "other").create()
    for flow_id in (str(uuid.uuid4()), foreign["flowId"]):
        exact(api.call("cancel_flow", flowId=flow_id), 404,
              envelope("ci", {"found": False, "cancelled": False, "reason": "Flow not found."}, "not_found",
                       "TaskFlow not found."))


def test_cancel_flow_on_a_fresh_flow_gains_two_revisions(api: Api) -> None:
    flow = api.create(currentStep="s", waitJson={"w": 1}, status="blocked")
    before = now_ms()
    r = api.call("cancel_flow", flowId=flow["flowId"])
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    done = result["flow"]
    assert list(result) == ["found", "cancelled", "flow", "tasks"] and result["tasks"] == []
    assert result["found"] is True and result["cancelled"] is True
    assert done["revision"] == 2 and done["status"] == "cancelled" and done["waitJson"] is None
    assert before <= done["cancelRequestedAt"] <= done["endedAt"] == done["updatedAt"] <= now_ms()
    assert list(done) == ["flowId", "syncMode", "controllerId", "currentStep", "revision", "status", "notifyPolicy",
                          "goal", "waitJson", "cancelRequestedAt", "createdAt", "updatedAt", "endedAt"]
    exact(r, 200, envelope("ci", result, ok=True))
    # terminal now; the answer lists the (no) tasks
    exact(api.call("cancel_flow", flowId=flow["flowId"]), 409,
          envelope("ci", {"found": True, "cancelled": False, "reason": "Flow is already cancelled.", "flow": done,
                          "tasks": []}, "terminal", "Flow is already cancelled."))
    # no transition guard: a cancelled flow can be set waiting, resumed, finished and failed
    flow_id = flow["flowId"]
    waiting = api.result("set_waiting", flowId=flow_id, expectedRevision=2, blockedSummary="b")["flow"]
    assert waiting["status"] == "blocked" and "endedAt" not in waiting and waiting["revision"] == 3
    assert waiting["cancelRequestedAt"] == done["cancelRequestedAt"]
    resumed = api.result("resume_flow", flowId=flow_id, expectedRevision=3)["flow"]
    assert resumed["status"] == "queued" and "blockedSummary" not in resumed
    finished = api.result("finish_flow", flowId=flow_id, expectedRevision=4)["flow"]
    assert finished["status"] == "succeeded" and finished["revision"] == 5
    again = api.result("finish_flow", flowId=flow_id, expectedRevision=5)["flow"]
    assert again["revision"] == 6 and again["endedAt"] >= finished["endedAt"]
    failed = api.result("fail_flow", flowId=flow_id, expectedRevision=6, blockedTaskId="t1")["flow"]
    assert failed["status"] == "failed" and failed["blockedTaskId"] == "t1" and failed["revision"] == 7


def test_cancel_pending_then_task_end_settles_the_flow(gw: RunningGateway, api: Api) -> None:
    flow = api.create()
    flow_id = flow["flowId"]
    task = api.run_task(flow_id, status="running", label="settle-me")["task"]
    queued = api.run_task(flow_id, label="settle-me-too")["task"]
    before_summary = api.result("get_task_summary", flowId=flow_id)["summary"]
    assert before_summary == {"total": 2, "active": 2, "terminal": 0, "failures": 0,
                              "byStatus": {"queued": 1, "running": 1, "succeeded": 0, "failed": 0, "timed_out": 0,
                                           "cancelled": 0, "lost": 0},
                              "byRuntime": {"subagent": 2, "acp": 0, "cli": 0, "cron": 0}}
    assert api.flow(flow_id)["revision"] == 0  # run_task does not touch the flow
    r = api.call("cancel_flow", flowId=flow_id)
    pending = r.json()["result"]
    assert pending["flow"]["revision"] == 1 and pending["flow"]["status"] == "queued"
    assert [t["taskId"] for t in pending["tasks"]] == [queued["taskId"], task["taskId"]]  # newest first
    assert pending["tasks"] == [queued, task]  # external tasks are left alone
    exact(r, 202, dumps({"ok": True, "routeId": "ci", "code": "cancel_pending",
                         "result": {"found": True, "cancelled": False,
                                    "reason": "One or more child tasks are still active.",
                                    "flow": pending["flow"], "tasks": pending["tasks"]}}))
    # repeating: the same answer without a new revision
    exact(api.call("cancel_flow", flowId=flow_id), 202, r.content)
    # run_task is refused while cancellation is requested
    exact(api.call("run_task", flowId=flow_id, runtime="acp", task="t"), 409,
          envelope("ci", {"found": True, "created": False, "reason": "Flow cancellation has already been requested.",
                          "flow": pending["flow"]}, "cancel_requested", "Flow cancellation has already been requested."))
    # one task ends: the other is still active, no settle
    r1 = api.result("update_task", taskId=queued["taskId"], status="cancelled", error="stopped   by\nrunner")
    assert r1["task"]["error"] == "stopped by runner" and r1["flow"] == pending["flow"]
    # the last active task ends: the settle rule cancels the flow (+1)
    ended = api.result("update_task", taskId=task["taskId"], status="failed", error="boom")
    settled = ended["flow"]
    assert settled["status"] == "cancelled" and settled["revision"] == 2
    assert settled["endedAt"] == ended["task"]["endedAt"] and settled["waitJson"] is None
    assert api.flow(flow_id) == settled
    summary = api.result("get_task_summary", flowId=flow_id)["summary"]
    assert summary["terminal"] == 2 and summary["failures"] == 1 and summary["byStatus"]["cancelled"] == 1
    # the terminal task cannot be updated again
    exact(api.call("update_task", taskId=task["taskId"], status="succeeded"), 409,
          envelope("ci", {"updated": False, "code": "terminal", "task": ended["task"]}, "terminal",
                   "Task is already failed."))


def test_request_cancel_then_settle(api: Api) -> None:
    flow = api.create()
    flow_id = flow["flowId"]
    task = api.run_task(flow_id)["task"]
    marked = api.result("request_cancel", flowId=flow_id, expectedRevision=0)["flow"]
    assert marked["revision"] == 1 and marked["status"] == "queued" and "cancelRequestedAt" in marked
    again = api.result("request_cancel", flowId=flow_id, expectedRevision=1)["flow"]
    assert again["revision"] == 2 and again["cancelRequestedAt"] >= marked["cancelRequestedAt"]
    progress = api.result("update_task", taskId=task["taskId"], status="running", progressSummary="half")
    assert progress["flow"] == again and progress["task"]["startedAt"] >= task["createdAt"]
    done = api.result("update_task", taskId=task["taskId"], status="succeeded")
    assert done["flow"]["status"] == "cancelled" and done["flow"]["revision"] == 3


def test_request_cancel_without_tasks_keeps_the_status(api: Api) -> None:
    flow = api.create(status="running")
    marked = api.result("request_cancel", flowId=flow["flowId"], expectedRevision=0)["flow"]
    assert marked["status"] == "running"
    # finishing is still allowed (no guard); cancel_flow then sees a terminal flow
    finished = api.result("finish_flow", flowId=flow["flowId"], expectedRevision=1)["flow"]
    assert finished["status"] == "succeeded" and finished["cancelRequestedAt"] == marked["cancelRequestedAt"]
    assert api.call("cancel_flow", flowId=flow["flowId"]).status_code == 409
    # request_cancel is allowed on terminal flows
    assert api.result("request_cancel", flowId=flow["flowId"], expectedRevision=2)["flow"]["revision"] == 3


def test_cancel_flow_works_on_task_mirrored_flows(gw: RunningGateway, api: Api) -> None:
    flow_id = insert_mirrored_flow(gw, "agent:ops:main", revision=0)
    done = api.result("cancel_flow", flowId=flow_id)
    assert done["cancelled"] is True and done["flow"]["status"] == "cancelled" and done["flow"]["revision"] == 2


# --- run_task -------------------------------------------------------------------------------------


def test_run_task_refusals_in_order(gw: RunningGateway, api: Api) -> None:
    def refused(flow: Any, code: str, reason: str, error: str | None = None) -> str:
        result: dict[str, Any] = {"found": flow is not None, "created": False, "reason": reason}
        if flow is not None:
            result["flow"] = flow
        return envelope("ci", result, code, error or reason)

    with gw.client() as c:
        other = route_api(gw, c, "other")
        other.run_task(other.create()["flowId"], childSessionKey="agent:main:subagent:refusals")
    outside = {"childSessionKey": "agent:main:subagent:refusals"}  # known, outside the ci tree
    # 1: not found (before everything else)
    exact(api.call("run_task", flowId="nope", runtime="subagent", task="t", **outside), 404,
          refused(None, "not_found", "Flow not found.", "TaskFlow not found."))
    # 2: not managed, even when cancel-requested and terminal
    mirrored = insert_mirrored_flow(gw, "agent:ops:main", status="failed", cancel_requested_at=1, ended_at=2)
    exact(api.call("run_task", flowId=mirrored, runtime="subagent", task="t", **outside), 409,
          refused(api.flow(mirrored), "not_managed", "Flow does not accept managed child tasks."))
    # 3: cancel requested, even when terminal
    flow = api.create()
    api.result("request_cancel", flowId=flow["flowId"], expectedRevision=0)
    flow = api.result("finish_flow", flowId=flow["flowId"], expectedRevision=1)["flow"]
    exact(api.call("run_task", flowId=flow["flowId"], runtime="subagent", task="t", **outside), 409,
          refused(flow, "cancel_requested", "Flow cancellation has already been requested."))
    # 4: terminal, before the child session guard
    for end in ("finish_flow", "fail_flow"):
        flow = api.create()
        flow = api.result(end, flowId=flow["flowId"], expectedRevision=0)["flow"]
        text = f"Flow is already {flow['status']}."
        exact(api.call("run_task", flowId=flow["flowId"], runtime="subagent", task="t", **outside), 409,
              refused(flow, "terminal", text))
    # 5: the child session guard (blocked is not terminal)
    flow = api.create(status="blocked", currentStep="x")
    exact(api.call("run_task", flowId=flow["flowId"], runtime="subagent", task="t", **outside), 409,
          refused(flow, "task_not_created", "childSessionKey is outside the route's session tree"))
    assert api.result("list_tasks", flowId=flow["flowId"])["tasks"] == []


def test_child_session_guard(gw: RunningGateway, api: Api) -> None:
    with gw.client() as c:
        other = route_api(gw, c, "other")
        other_flow = other.create()
        # records agent:main:subagent:x as a child of the other route's session
        other.run_task(other_flow["flowId"], childSessionKey="agent:main:subagent:x")
        # a notification makes agent:main:main (another agent's main session) known to the store
        other.run_task(other_flow["flowId"], notifyPolicy="state_changes")
    flow = api.create()
    flow_id = flow["flowId"]
    # unknown → accepted and recorded as a child of the route session
    child = api.run_task(flow_id, childSessionKey=" Agent:Ops:Subagent:Job-1 ")["task"]
    assert child["childSessionKey"].lower() == "agent:ops:subagent:job-1" and child["agentId"] == "ops"
    with db(gw) as conn:
        row = conn.execute("SELECT agent_id, spawned_by FROM sessions WHERE key = ?",
                           ("agent:ops:subagent:job-1",)).fetchone()
    assert row == ("ops", "agent:ops:main")
    # now known as a descendant, and the route session itself → accepted
    for key in ("agent:ops:subagent:job-1", "AGENT:OPS:MAIN"):
        assert api.run_task(flow_id, childSessionKey=key)["created"] is True
    # an unknown key of another agent is recorded too; agentId comes from the child key
    assert api.run_task(flow_id, childSessionKey="agent:main:subagent:new")["task"]["agentId"] == "main"
    # a known key outside the tree: another route's child, another agent's main session
    for key in ("agent:main:subagent:x", "AGENT:MAIN:SUBAGENT:X", "agent:main:main"):
        r = api.call("run_task", flowId=flow_id, runtime="subagent", task="t", childSessionKey=key)
        exact(r, 409, envelope("ci", {"found": True, "created": False,
                                      "reason": "childSessionKey is outside the route's session tree", "flow": flow},
                               "task_not_created", "childSessionKey is outside the route's session tree"))
    assert api.result("get_task_summary", flowId=flow_id)["summary"]["total"] == 4


def test_a_child_key_with_an_empty_rest_names_no_agent(gw: RunningGateway, api: Api) -> None:
    """`agent:main:` is no agent session (hooks.md §5.3: a non-empty rest): its task's agentId comes
    from the owner key, and the child session is recorded for the same agent (the route's), not main."""
    flow = api.create()
    task = api.run_task(flow["flowId"], childSessionKey="agent:main:")["task"]
    assert task["agentId"] == "ops"
    with db(gw) as conn:
        row = conn.execute("SELECT agent_id, spawned_by FROM sessions WHERE key = 'agent:main:'").fetchone()
    assert row == ("ops", "agent:ops:main")


def test_child_session_guard_knows_every_configured_agents_main_session(tmp_path: Any) -> None:
    """webhooks.md §4.13 names "another agent's main session" as a key to refuse. On a fresh store
    nothing has recorded agent:main:main yet (no wake, summary or notification), and it was accepted
    as "unknown" and recorded as the ci route's child — by whichever route came first. The same held
    for another route's session before that route's first flow: the ci route could claim it, and then
    run tasks in it."""
    routes = {"ci": ci_route(),
              "deploy": ci_route(path="/plugins/webhooks/deploy", sessionKey=" Hook:Deploy "),
              "lab-jobs": ci_route(path="/plugins/webhooks/lab", sessionKey="agent:lab:subagent:jobs")}
    config = webhooks_config(routes)
    config["agents"]["list"].append({"id": "lab"})  # neither the default agent nor the route's
    others = "SELECT key FROM sessions WHERE key != 'agent:ops:main'"
    with serving(tmp_path, config) as fresh, fresh.client() as c:
        api = Api(c)
        flow = api.create()
        with db(fresh) as conn:
            assert conn.execute(others).fetchall() == []
        refusal = "childSessionKey is outside the route's session tree"
        for key in ("agent:main:main", " Agent:Main:Main ", "agent:lab:main",
                    "hook:deploy", "HOOK:DEPLOY", "agent:lab:subagent:jobs"):
            r = api.call("run_task", flowId=flow["flowId"], runtime="subagent", task="t", childSessionKey=key)
            exact(r, 409, envelope("ci", {"found": True, "created": False, "reason": refusal, "flow": flow},
                                   "task_not_created", refusal))
        with db(fresh) as conn:  # nothing recorded by the refusals
            assert conn.execute(others).fetchall() == []
        # the deploy route still owns its session: its first flow and a task in its own session
        deploy = route_api(fresh, c, "deploy")
        deploy_flow = deploy.create()
        assert deploy.run_task(deploy_flow["flowId"], childSessionKey="hook:deploy")["created"] is True
        # the route's own main session (a control), and the main session of an agent not configured
        # (unknown to the store and to the config: recorded as the route's child, as §4.13 says)
        for key in ("agent:ops:main", "agent:ghost:main"):
            assert api.run_task(flow["flowId"], childSessionKey=key)["created"] is True, key
        with db(fresh) as conn:
            row = conn.execute("SELECT spawned_by FROM sessions WHERE key = 'agent:ghost:main'").fetchone()
        assert row == ("agent:ops:main",)


def test_run_task_idempotent_by_run_id(api: Api) -> None:
    flow = api.create()
    flow_id = flow["flowId"]
    first = api.run_task(flow_id, runId="r-1", label="build", task="make", notifyPolicy="silent")["task"]
    again = api.run_task(flow_id, runId="r-1", label="build", task="make", sourceId="src", agentId="main",
                         notifyPolicy="state_changes")
    assert again["created"] is True and again["task"]["taskId"] == first["taskId"]
    assert again["task"]["sourceId"] == "src" and again["task"]["agentId"] == "ops"  # filled only when missing
    assert again["task"]["notifyPolicy"] == "state_changes"  # upgraded from silent
    assert api.run_task(flow_id, runId="r-1", label="build", task="make", notifyPolicy="silent")["task"][
        "notifyPolicy"] == "state_changes"
    # subagent: another label is not an exact match → a new task
    other = api.run_task(flow_id, runId="r-1", label="lint", task="make")["task"]
    assert other["taskId"] != first["taskId"]
    # another runtime or child session is never the same task
    assert api.run_task(flow_id, runId="r-1", runtime="acp", label="build", task="make")["task"]["taskId"] not in (
        first["taskId"], other["taskId"])
    # acp: the earliest task with the run id is reused even without an exact match
    acp = api.run_task(flow_id, runId="acp-1", runtime="acp", task="one")["task"]
    reused = api.run_task(flow_id, runId="acp-1", runtime="acp", label="named", task="two")["task"]
    assert reused["taskId"] == acp["taskId"] and reused["label"] == "named" and reused["task"] == "one"
    meta = api.run_task(flow_id, runId="acp-1", runtime="acp", label="renamed", task="three",
                        preferMetadata=True)["task"]
    assert meta["taskId"] == acp["taskId"] and meta["label"] == "renamed" and meta["task"] == "three"
    # the summary counts each task once
    summary = api.result("get_task_summary", flowId=flow_id)["summary"]
    assert summary["total"] == 4 and summary["byRuntime"] == {"subagent": 2, "acp": 2, "cli": 0, "cron": 0}
    # a retry after the task ended does not change its status
    api.result("update_task", taskId=first["taskId"], status="succeeded")
    retry = api.run_task(flow_id, runId="r-1", label="build", task="make")["task"]
    assert retry["taskId"] == first["taskId"] and retry["status"] == "succeeded"
    assert retry["deliveryStatus"] == "pending"  # back to pending unless delivered
    # the child session key compares trimmed and case-insensitively; another flow's task is never reused
    child = api.run_task(flow_id, runId="c-1", childSessionKey="agent:ops:sub:1", task="t")["task"]
    assert api.run_task(flow_id, runId="c-1", childSessionKey=" Agent:Ops:Sub:1 ", task="t")["task"][
        "taskId"] == child["taskId"]
    elsewhere = api.create()
    assert api.run_task(elsewhere["flowId"], runId="r-1", label="build", task="make")["task"]["taskId"] not in (
        first["taskId"], other["taskId"])


def test_run_task_timestamps_and_views(api: Api) -> None:
    flow = api.create()
    before = now_ms()
    queued = api.run_task(flow["flowId"], task="  spaced\n  text ", parentTaskId="p", sourceId="s")["task"]
    assert list(queued) == ["taskId", "runtime", "sourceId", "parentFlowId", "parentTaskId", "agentId", "scopeKind",
                            "task", "status", "deliveryStatus", "notifyPolicy", "createdAt", "lastEventAt"]
    assert queued["task"] == "spaced\n  text" and queued["status"] == "queued"
    assert before <= queued["createdAt"] == queued["lastEventAt"] <= now_ms()
    # createdAt is lowered to the earliest given time; lastEventAt is never below startedAt
    running = api.run_task(flow["flowId"], status="running", startedAt=1000, lastEventAt=500)["task"]
    assert running["createdAt"] == 500 and running["startedAt"] == 1000 and running["lastEventAt"] == 1000
    default_start = api.run_task(flow["flowId"], status="running", agentId="main")["task"]
    assert default_start["agentId"] == "main" and before <= default_start["startedAt"] <= now_ms()


def test_update_task_refuses_tasks_executed_by_hookgate(gw: RunningGateway) -> None:
    with gw.client() as c:
        api = route_api(gw, c, "exec")
        flow = api.create()
        executed = api.run_task(flow["flowId"], label="executed-here")["task"]
        # created running or with runtime acp: record-only even on an execute route
        external = api.run_task(flow["flowId"], status="running")["task"]
        for status in ("running", "succeeded", None):
            fields = {"status": status} if status else {"progressSummary": "p"}
            r = api.call("update_task", taskId=executed["taskId"], **fields)
            task = r.json()["result"]["task"]
            assert task["taskId"] == executed["taskId"]
            exact(r, 409, envelope("exec", {"updated": False, "code": "not_external", "task": task}, "not_external",
                                   "Task is executed by hookgate and cannot be updated externally."))
        assert api.result("update_task", taskId=external["taskId"], status="succeeded")["updated"] is True


# --- get_task, list_tasks, update_task -----------------------------------------------------------


def test_task_reads_and_updates(gw: RunningGateway, api: Api) -> None:
    flow = api.create()
    flow_id = flow["flowId"]
    first = api.run_task(flow_id, label="first")["task"]
    second = api.run_task(flow_id, label="second")["task"]
    assert api.result("get_task", taskId=first["taskId"]) == {"task": first}
    assert api.result("list_tasks", flowId=flow_id) == {"tasks": [second, first]}
    for missing in ({"taskId": "nope"}, {"taskId": str(uuid.uuid4())}):
        exact(api.call("get_task", **missing), 200, '{"ok":true,"routeId":"ci","result":{"task":null}}')
    exact(api.call("list_tasks", flowId="nope"), 200, '{"ok":true,"routeId":"ci","result":{"tasks":null}}')
    exact(api.call("get_task_summary", flowId="nope"), 200, '{"ok":true,"routeId":"ci","result":{"summary":null}}')
    exact(api.call("update_task", taskId="nope", status="running"), 404,
          envelope("ci", {"updated": False, "code": "not_found"}, "not_found", "Task not found."))
    # another owner sees nothing
    with gw.client() as c:
        other = route_api(gw, c, "other")
        assert other.result("get_task", taskId=first["taskId"]) == {"task": None}
        assert other.result("list_tasks", flowId=flow_id) == {"tasks": None}
        exact(other.call("update_task", taskId=first["taskId"], status="failed"), 404,
              envelope("other", {"updated": False, "code": "not_found"}, "not_found", "Task not found."))
    # progress without a status change; queued → running; lastEventAt never below startedAt
    before = now_ms()
    upd = api.result("update_task", taskId=first["taskId"], progressSummary="  50 %\t done ")
    assert upd["task"]["progressSummary"] == "50 % done" and upd["task"]["status"] == "queued"
    assert before <= upd["task"]["lastEventAt"] <= now_ms() and upd["flow"] == flow
    run = api.result("update_task", taskId=first["taskId"], status="running", lastEventAt=1)["task"]
    assert run["status"] == "running" and run["lastEventAt"] == run["startedAt"] >= before
    cleared = api.result("update_task", taskId=first["taskId"], progressSummary=None, lastEventAt=run["startedAt"] + 5)
    assert "progressSummary" not in cleared["task"] and cleared["task"]["lastEventAt"] == run["startedAt"] + 5
    ended = api.result("update_task", taskId=first["taskId"], status="timed_out", error="slow",
                       terminalSummary="partial")["task"]
    assert ended["status"] == "timed_out" and ended["error"] == "slow" and ended["terminalSummary"] == "partial"
    assert "terminalOutcome" not in ended
    assert ended["cleanupAfter"] == ended["endedAt"] + 7 * 86_400_000
    exact(api.call("update_task", taskId=first["taskId"], status="running"), 409,
          envelope("ci", {"updated": False, "code": "terminal", "task": ended}, "terminal",
                   "Task is already timed_out."))
    assert api.flow(flow_id) == flow  # update_task without settle never changes the flow


# --- notifications (model.md §2.3) ----------------------------------------------------------------


def events_about(gw: RunningGateway, needle: str) -> list[tuple[str, str]]:
    return system_events(gw, needle)


def test_notify_policies(gw: RunningGateway, api: Api) -> None:
    flow = api.create(notifyPolicy="silent")  # the flow-level policy has no behaviour
    silent = api.run_task(flow["flowId"], label="quiet-task", notifyPolicy="silent", status="running")["task"]
    done = api.result("update_task", taskId=silent["taskId"], status="succeeded", terminalSummary="x")["task"]
    assert done["deliveryStatus"] == "not_applicable"
    assert events_about(gw, "quiet-task") == []
    assert ("ops", f"task:{silent['taskId']}") not in heartbeat_requests(gw)

    loud = api.run_task(flow["flowId"], label="chatty-task", runId="run-12345678-x", notifyPolicy="state_changes")[
        "task"]
    assert loud["deliveryStatus"] == "pending"
    api.result("update_task", taskId=loud["taskId"], status="running")
    api.result("update_task", taskId=loud["taskId"], progressSummary="step 1")
    api.result("update_task", taskId=loud["taskId"], progressSummary="step 1")  # unchanged: no event
    end = api.result("update_task", taskId=loud["taskId"], status="failed", error="exit   code 2",
                     terminalSummary="ignored")["task"]
    assert end["deliveryStatus"] == "session_queued"
    assert events_about(gw, "chatty-task") == [
        ("agent:ops:main", "Background task accepted: chatty-task (run run-1234)."),
        ("agent:ops:main", "Background task started: chatty-task (run run-1234)."),
        ("agent:ops:main", "Background task update: chatty-task (run run-1234). step 1"),
        ("agent:ops:main", "Background task failed: chatty-task (run run-1234). exit code 2"),
    ]
    reasons = [reason for agent, reason in heartbeat_requests(gw) if reason == f"task:{loud['taskId']}"]
    assert reasons == [f"task:{loud['taskId']}"]  # only the terminal notification wakes the agent

    started = api.run_task(flow["flowId"], task="untitled   job text", notifyPolicy="state_changes",
                           status="running")["task"]
    api.result("update_task", taskId=started["taskId"], status="cancelled")
    assert [e[1] for e in events_about(gw, "untitled job text")] == [
        "Background task started: untitled job text.",
        "Background task cancelled: untitled job text.",
    ]


def test_notification_title_and_detail_are_cut(gw: RunningGateway, api: Api) -> None:
    flow = api.create()
    label = "long-title-" + "t" * 200
    task = api.run_task(flow["flowId"], label=label, runId="abc")["task"]
    api.result("update_task", taskId=task["taskId"], status="succeeded", terminalSummary="s" * 400 + "  \n " + "z" * 300)
    detail = ("s" * 400 + " " + "z" * 300)[:500]
    assert system_events(gw, "long-title-") == [
        ("agent:ops:main", f"Background task done: {label[:120]}… (run abc). {detail}…")]


def test_notifications_of_another_agent_owner_go_to_its_main_session(gw: RunningGateway) -> None:
    with gw.client() as c:
        other = route_api(gw, c, "other")
        flow = other.create()
        task = other.run_task(flow["flowId"], label="main-agent-task", status="running")["task"]
        other.result("update_task", taskId=task["taskId"], status="succeeded", terminalSummary="ok")
    assert events_about(gw, "main-agent-task") == [
        ("agent:main:main", "Background task done: main-agent-task. ok")]
    assert ("main", f"task:{task['taskId']}") in heartbeat_requests(gw)


# --- reads: list, latest, resolve -----------------------------------------------------------------


def test_list_latest_and_resolve(gw: RunningGateway) -> None:
    with gw.client() as c:
        api = route_api(gw, c, "o1")
        empty = api.result("list_flows")
        assert empty == {"flows": []}
        assert api.result("find_latest_flow") == {"flow": None}
        assert api.result("resolve_flow", token="agent:ops:o1") == {"flow": None}
        a = api.create("a")
        b = api.create("b", status="running")
        c_flow = api.create("c")
        assert [f["goal"] for f in api.result("list_flows")["flows"]] == ["c", "b", "a"]
        assert api.result("find_latest_flow")["flow"] == c_flow
        # by id first; then the session key → newest non-terminal flow
        assert api.result("resolve_flow", token=f" {a['flowId']} ")["flow"] == a
        api.result("finish_flow", flowId=c_flow["flowId"], expectedRevision=0)
        assert api.result("resolve_flow", token="AGENT:OPS:O1")["flow"] == b
        api.result("fail_flow", flowId=b["flowId"], expectedRevision=0)
        assert api.result("resolve_flow", token="agent:ops:o1")["flow"]["flowId"] == a["flowId"]
        api.result("cancel_flow", flowId=a["flowId"])
        # all terminal → the newest flow
        assert api.result("resolve_flow", token="agent:ops:o1")["flow"]["flowId"] == c_flow["flowId"]
        assert api.result("resolve_flow", token="agent:ops:o2") == {"flow": None}
        assert api.result("resolve_flow", token=str(uuid.uuid4())) == {"flow": None}
        # another owner's flow id does not resolve
        foreign = route_api(gw, c, "o2").create()
        assert api.result("resolve_flow", token=foreign["flowId"]) == {"flow": None}
        # the session key of a route resolves its flows, whatever the controller
        assert api.result("find_latest_flow")["flow"]["flowId"] == c_flow["flowId"]


def test_list_flows_lists_each_flow_as_get_flow_shows_it(gw: RunningGateway) -> None:
    """list_flows reads its rows in one statement (as one JSON array): every value comes back as it
    was stored — text of any kind, JSON state of any shape, absent and null fields — in the §4.3
    order, ties on createdAt included."""
    owner = "agent:ops:o6"
    with gw.client() as c:
        api = route_api(gw, c, "o6")
        created = [
            api.create("emoji 🚀, ümlaut, שלום, \"quotes\", back\\slash, tab\t, newline\n, \u2028, end",
                       stateJson={"nested": [1, 2.5, -3, 9007199254740991, True, False, None, "x"], "empty": {}},
                       waitJson={"until": "2026-12-01T00:00:00Z"}),
            api.create("numbers", stateJson=1.5e-7, waitJson=[0.1, 1e21, -0.0]),
            api.create("plain", currentStep="step ✓", stateJson=None),
            api.create("a string as state", stateJson="[not json, just text]"),
        ]
        waiting = api.result("set_waiting", flowId=created[2]["flowId"], expectedRevision=0,
                             currentStep="blocked", waitJson={"on": "review"})["flow"]
        api.result("request_cancel", flowId=created[3]["flowId"], expectedRevision=0)
        api.result("finish_flow", flowId=created[1]["flowId"], expectedRevision=0)
        tie = now_ms() + 60_000  # newer than the others; two flows with one createdAt
        first = insert_mirrored_flow(gw, owner, created_at=tie, goal="tie, inserted first")
        second = insert_mirrored_flow(gw, owner, created_at=tie, goal="tie, inserted second", current_step=None,
                                      state_json='{"k": [1, {"deep": "ok"}]}')

        listed = api.result("list_flows")["flows"]
        assert [f["flowId"] for f in listed[:2]] == [second, first]
        assert {f["flowId"] for f in listed[2:]} == {f["flowId"] for f in created}
        assert listed == [api.flow(f["flowId"]) for f in listed]
        assert [(f["createdAt"], f["goal"]) for f in listed] == sorted(
            [(f["createdAt"], f["goal"]) for f in listed], key=lambda k: k[0], reverse=True)
        by_id = {f["flowId"]: f for f in listed}
        assert by_id[created[0]["flowId"]]["goal"] == created[0]["goal"]
        assert by_id[created[0]["flowId"]]["stateJson"] == created[0]["stateJson"]
        assert by_id[created[2]["flowId"]] == waiting
        assert by_id[second]["stateJson"] == {"k": [1, {"deep": "ok"}]}
        assert by_id[created[3]["flowId"]]["stateJson"] == "[not json, just text]"


def test_create_flow_defaults_and_options(gw: RunningGateway) -> None:
    with gw.client() as c:
        other = route_api(gw, c, "other")
        flow = other.create("  trimmed goal ", currentStep=None, stateJson=None, waitJson=[1, {"a": None}])
        assert flow["controllerId"] == "webhooks/other" and flow["goal"] == "trimmed goal"
        assert "currentStep" not in flow and flow["stateJson"] is None and flow["waitJson"] == [1, {"a": None}]
        explicit = other.create(controllerId=" ctl ", status="waiting", notifyPolicy="state_changes")
        assert explicit["controllerId"] == "ctl" and explicit["status"] == "waiting"
        assert explicit["notifyPolicy"] == "state_changes" and explicit["revision"] == 0
        assert uuid.UUID(explicit["flowId"]).version == 4


def test_patch_rules(api: Api) -> None:
    flow = api.create(currentStep="one", stateJson={"a": 1})
    fid = flow["flowId"]
    blocked = api.result("set_waiting", flowId=fid, expectedRevision=0, blockedTaskId="t", blockedSummary="why",
                         waitJson=None)["flow"]
    assert blocked["status"] == "blocked" and blocked["waitJson"] is None and blocked["currentStep"] == "one"
    # stored blocked fields stay when the request carries none: waiting with an old blockedTaskId
    waiting = api.result("set_waiting", flowId=fid, expectedRevision=1, currentStep=None, stateJson=None)["flow"]
    assert waiting["status"] == "waiting" and waiting["blockedTaskId"] == "t" and "currentStep" not in waiting
    assert waiting["stateJson"] is None
    cleared = api.result("set_waiting", flowId=fid, expectedRevision=2, blockedTaskId=None,
                         blockedSummary=None)["flow"]
    assert "blockedTaskId" not in cleared and "blockedSummary" not in cleared
    failed = api.result("fail_flow", flowId=fid, expectedRevision=3, blockedSummary="bad")["flow"]
    assert failed["status"] == "failed" and failed["blockedSummary"] == "bad" and failed["waitJson"] is None


# --- owner isolation (§3.2) -----------------------------------------------------------------------


def test_owner_isolation_and_shared_session_keys(gw: RunningGateway) -> None:
    with gw.client() as c:
        mine, theirs = route_api(gw, c, "o3"), route_api(gw, c, "o4")
        a, b = mine.create("mine"), theirs.create("theirs")
        task = mine.run_task(a["flowId"])["task"]
        assert theirs.result("get_flow", flowId=a["flowId"]) == {"flow": None}
        assert theirs.result("get_task_summary", flowId=a["flowId"]) == {"summary": None}
        for action in MUTATIONS:
            assert theirs.call(action, flowId=a["flowId"], expectedRevision=0).status_code == 404
        assert theirs.call("cancel_flow", flowId=a["flowId"]).status_code == 404
        assert theirs.call("run_task", flowId=a["flowId"], runtime="acp", task="x").status_code == 404
        assert theirs.call("update_task", taskId=task["taskId"], status="failed").status_code == 404
        assert [f["flowId"] for f in mine.result("list_flows")["flows"]] == [a["flowId"]]
        assert [f["flowId"] for f in theirs.result("list_flows")["flows"]] == [b["flowId"]]
        assert mine.flow(a["flowId"]) == a and mine.result("get_task", taskId=task["taskId"])["task"] == task

        # routes with the same (normalised) session key share their flows
        one, two = route_api(gw, c, "shared1"), route_api(gw, c, "shared2")
        shared = one.create("shared", controllerId="x")
        assert two.flow(shared["flowId"]) == shared
        moved = two.result("set_waiting", flowId=shared["flowId"], expectedRevision=0)["flow"]
        assert one.flow(shared["flowId"]) == moved
        assert two.result("resolve_flow", token="agent:ops:shared")["flow"] == moved
        t = one.run_task(shared["flowId"])["task"]
        assert two.result("update_task", taskId=t["taskId"], status="succeeded")["updated"] is True


# --- metrics --------------------------------------------------------------------------------------


def test_flow_action_metrics(gw: RunningGateway) -> None:
    def count(action: str, code: str) -> float:
        return metric(gw, f'hookgate_flow_actions_total{{action="{action}",code="{code}"}}')

    with gw.client() as c:
        api = route_api(gw, c, "o5")
        before = {k: count(*k) for k in [("create_flow", "ok"), ("set_waiting", "revision_conflict"),
                                         ("cancel_flow", "cancel_pending"), ("get_flow", "ok"),
                                         ("run_task", "not_found")]}
        flow = api.create()
        api.create()
        api.result("set_waiting", 409, flowId=flow["flowId"], expectedRevision=7)
        api.run_task(flow["flowId"])
        api.result("cancel_flow", 202, flowId=flow["flowId"])
        api.flow(flow["flowId"])
        api.result("run_task", 404, flowId="nope", runtime="acp", task="t")
    assert count("create_flow", "ok") == before[("create_flow", "ok")] + 2
    assert count("set_waiting", "revision_conflict") == before[("set_waiting", "revision_conflict")] + 1
    assert count("cancel_flow", "cancel_pending") == before[("cancel_flow", "cancel_pending")] + 1
    assert count("get_flow", "ok") == before[("get_flow", "ok")] + 1
    assert count("run_task", "not_found") == before[("run_task", "not_found")] + 1
