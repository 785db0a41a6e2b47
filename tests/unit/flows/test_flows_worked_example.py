"""webhooks.md §9 worked example, reproduced byte-for-byte through the pure core."""

from __future__ import annotations

from typing import Any

import msgspec

from hookgate.flows.decisions import (
    decide_cancel,
    decide_create_flow,
    decide_mutation,
    decide_run_task,
    decide_update_task,
)
from hookgate.flows.notifications import notification_session
from hookgate.flows.results import envelope
from hookgate.flows.rules import Retention
from hookgate.webhooks.schema import CreateFlow, FlowMutation, RunTask, UpdateTask, parse_action

FLOW_ID = "6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33"
TASK_ID = "0b9d7c1e-5a3f-4e2b-9c8d-7f6e5d4c3b2a"
OWNER = "agent:ops:main"


def encode(body: Any) -> bytes:
    return msgspec.json.encode(body)


def parse(text: bytes) -> Any:
    return parse_action(msgspec.json.decode(text))


def test_worked_example() -> None:
    # 1. create_flow
    create = parse(
        b'{"action":"create_flow","goal":"Nightly release build 1234","currentStep":"build",'
        b'"stateJson":{"build":1234}}'
    )
    assert isinstance(create, CreateFlow)
    decision = decide_create_flow(
        create, flow_id=FLOW_ID, seq=1, owner_key=OWNER, route_controller_id="ci/nightly", now=1795330000000
    )
    assert decision.outcome.status == 200
    assert encode(envelope("ci", decision.outcome)) == (
        b'{"ok":true,"routeId":"ci","result":{"created":true,"flow":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-'
        b'2b7d5a9e1c33","syncMode":"managed","controllerId":"ci/nightly","currentStep":"build","revision":0,'
        b'"status":"queued","notifyPolicy":"done_only","goal":"Nightly release build 1234","stateJson":'
        b'{"build":1234},"createdAt":1795330000000,"updatedAt":1795330000000}}}'
    )
    flow = decision.flow
    assert flow is not None

    # 2. run_task
    run = parse(
        b'{"action":"run_task","flowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33","runtime":"subagent",'
        b'"runId":"ci-88421-it","label":"integration-tests","task":"Run the integration test suite for '
        b'build 1234","status":"running","startedAt":1795330001000,"progressSummary":"running on runner 7"}'
    )
    assert isinstance(run, RunTask)
    run_decision = decide_run_task(flow, [], run, task_id=TASK_ID, seq=1, now=1795330001200)
    assert run_decision.outcome.status == 200 and run_decision.created and not run_decision.enqueue_run
    assert encode(envelope("ci", run_decision.outcome)) == (
        b'{"ok":true,"routeId":"ci","result":{"created":true,"flow":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-'
        b'2b7d5a9e1c33","syncMode":"managed","controllerId":"ci/nightly","currentStep":"build","revision":0,'
        b'"status":"queued","notifyPolicy":"done_only","goal":"Nightly release build 1234","stateJson":'
        b'{"build":1234},"createdAt":1795330000000,"updatedAt":1795330000000},"task":{"taskId":"0b9d7c1e-'
        b'5a3f-4e2b-9c8d-7f6e5d4c3b2a","runtime":"subagent","parentFlowId":"6f1c2a4e-8d2b-4c51-9f0e-'
        b'2b7d5a9e1c33","agentId":"ops","runId":"ci-88421-it","label":"integration-tests","progressSummary":'
        b'"running on runner 7","scopeKind":"session","task":"Run the integration test suite for build 1234",'
        b'"status":"running","deliveryStatus":"pending","notifyPolicy":"done_only","createdAt":1795330001000,'
        b'"startedAt":1795330001000,"lastEventAt":1795330001000}}}'
    )
    assert run_decision.task is not None
    task = run_decision.task.task
    assert run_decision.task.notifications == ()  # done_only: nothing until terminal

    # 3. set_waiting, then the stale retry
    waiting_req = parse(
        b'{"action":"set_waiting","flowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33","expectedRevision":0,'
        b'"currentStep":"await-approval","waitJson":{"approver":"release-manager"}}'
    )
    assert isinstance(waiting_req, FlowMutation)
    waiting = decide_mutation(flow, waiting_req, 1795330060000)
    assert encode(envelope("ci", waiting.outcome)) == (
        b'{"ok":true,"routeId":"ci","result":{"applied":true,"flow":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-'
        b'2b7d5a9e1c33","syncMode":"managed","controllerId":"ci/nightly","currentStep":"await-approval",'
        b'"revision":1,"status":"waiting","notifyPolicy":"done_only","goal":"Nightly release build 1234",'
        b'"stateJson":{"build":1234},"waitJson":{"approver":"release-manager"},"createdAt":1795330000000,'
        b'"updatedAt":1795330060000}}}'
    )
    assert waiting.flow is not None
    flow = waiting.flow
    stale = decide_mutation(flow, waiting_req, 1795330070000)
    assert stale.flow is None and stale.outcome.status == 409
    assert encode(envelope("ci", stale.outcome)) == (
        b'{"ok":false,"routeId":"ci","code":"revision_conflict","error":"TaskFlow changed since the '
        b'caller\'s expected revision.","result":{"applied":false,"code":"revision_conflict",'
        b'"current":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33","syncMode":"managed","controllerId":'
        b'"ci/nightly","currentStep":"await-approval","revision":1,"status":"waiting","notifyPolicy":'
        b'"done_only","goal":"Nightly release build 1234","stateJson":{"build":1234},"waitJson":{"approver":'
        b'"release-manager"},"createdAt":1795330000000,"updatedAt":1795330060000}}}'
    )

    # 4. resume_flow
    resume_req = parse(
        b'{"action":"resume_flow","flowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33","expectedRevision":1,'
        b'"status":"running","currentStep":"deploy"}'
    )
    assert isinstance(resume_req, FlowMutation)
    resumed = decide_mutation(flow, resume_req, 1795330900000)
    assert encode(envelope("ci", resumed.outcome)) == (
        b'{"ok":true,"routeId":"ci","result":{"applied":true,"flow":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-'
        b'2b7d5a9e1c33","syncMode":"managed","controllerId":"ci/nightly","currentStep":"deploy","revision":2,'
        b'"status":"running","notifyPolicy":"done_only","goal":"Nightly release build 1234","stateJson":'
        b'{"build":1234},"waitJson":null,"createdAt":1795330000000,"updatedAt":1795330900000}}}'
    )
    assert resumed.flow is not None
    flow = resumed.flow

    # 5. finish_flow
    finish_req = parse(
        b'{"action":"finish_flow","flowId":"6f1c2a4e-8d2b-4c51-9f0e-2b7d5a9e1c33","expectedRevision":2,'
        b'"stateJson":{"build":1234,"released":true}}'
    )
    assert isinstance(finish_req, FlowMutation)
    finished = decide_mutation(flow, finish_req, 1795331500000)
    assert encode(envelope("ci", finished.outcome)) == (
        b'{"ok":true,"routeId":"ci","result":{"applied":true,"flow":{"flowId":"6f1c2a4e-8d2b-4c51-9f0e-'
        b'2b7d5a9e1c33","syncMode":"managed","controllerId":"ci/nightly","currentStep":"deploy","revision":3,'
        b'"status":"succeeded","notifyPolicy":"done_only","goal":"Nightly release build 1234","stateJson":'
        b'{"build":1234,"released":true},"waitJson":null,"createdAt":1795330000000,"updatedAt":1795331500000,'
        b'"endedAt":1795331500000}}}'
    )
    assert finished.flow is not None
    flow = finished.flow
    assert task.status == "running"  # the flow's status does not follow its tasks

    # The runner reports the end of the task.
    update = parse(
        b'{"action":"update_task","taskId":"0b9d7c1e-5a3f-4e2b-9c8d-7f6e5d4c3b2a","status":"succeeded",'
        b'"terminalSummary":"412 tests passed"}'
    )
    assert isinstance(update, UpdateTask)
    updated = decide_update_task(task, flow, [task], update, 1795331600000, Retention())
    assert updated.outcome.status == 200 and updated.flow is None
    assert updated.task is not None
    [note] = updated.task.notifications
    assert note.text == "Background task done: integration-tests (run ci-88421). 412 tests passed"
    assert note.heartbeat_reason == f"task:{TASK_ID}"
    assert notification_session(OWNER, "main") == ("agent:ops:main", "ops")
    assert updated.task.task.delivery_status == "session_queued"

    # run_task and cancel_flow on the finished flow answer 409 terminal.
    refused = decide_run_task(flow, [task], run, task_id="other", seq=2, now=1795331700000)
    assert (refused.outcome.status, refused.outcome.code, refused.outcome.error) == (
        409,
        "terminal",
        "Flow is already succeeded.",
    )
    cancel = decide_cancel(flow, [updated.task.task], 1795331700000, Retention())
    assert (cancel.outcome.status, cancel.outcome.code, cancel.outcome.error) == (
        409,
        "terminal",
        "Flow is already succeeded.",
    )
