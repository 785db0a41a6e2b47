"""webhooks.md §5.4: a route with `execute: true` runs its `subagent` tasks on the route's agent."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from gateway import GatewayFactory, RunningGateway, hooks_config, wait_for

HEADERS = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}


def config() -> dict[str, Any]:
    cfg = hooks_config()
    cfg["agents"] = {"list": [{"id": "main", "default": True}, {"id": "ops"}]}
    cfg["plugins"] = {"entries": {"webhooks": {"config": {"routes": {"ci": {
        "sessionKey": "agent:ops:main", "secret": "s3cret", "execute": True}}}}}}
    return cfg


def act(gw: RunningGateway, expect: tuple[int, ...] = (200, 202), **body: Any) -> dict[str, Any]:
    with gw.client() as c:
        r = c.post("/plugins/webhooks/ci", json=body, headers=HEADERS)
    assert r.status_code in expect, r.text
    return dict(r.json())


def task_of(gw: RunningGateway, task_id: str) -> dict[str, Any]:
    return dict(act(gw, action="get_task", taskId=task_id)["result"]["task"])


def test_subagent_task_runs_and_notifies(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config())
    flow = act(gw, action="create_flow", goal="g")["result"]["flow"]
    created = act(gw, action="run_task", flowId=flow["flowId"], runtime="subagent", label="lint",
                  task="Lint the repository", notifyPolicy="state_changes")["result"]["task"]
    done = wait_for(lambda: (t := task_of(gw, created["taskId"]))["status"] == "succeeded" and t)
    assert done["terminalSummary"].startswith("echo: ") and "Lint the repository" in done["terminalSummary"]
    assert done["terminalOutcome"] == "succeeded" and done["startedAt"] <= done["endedAt"]
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        run = conn.execute("SELECT kind, agent_id, session_key, status FROM runs WHERE kind = 'task'").fetchone()
        texts = [r[0] for r in conn.execute(
            "SELECT text FROM system_events WHERE session_key = 'agent:ops:main' ORDER BY seq")]
        prompt = conn.execute("SELECT text FROM transcript_messages WHERE role = 'user'").fetchone()[0]
    assert run == ("task", "ops", f"agent:ops:subagent:{created['taskId']}", "ok")
    assert texts[0] == "Background task accepted: lint."
    assert texts[1] == "Background task started: lint."
    assert texts[2].startswith("Background task done: lint. echo: ")
    assert prompt.startswith(f"Task: lint | Job ID: {created['taskId']} | Received: ")
    assert "Return your response as plain text" not in prompt
    # a task created running, or with runtime acp, stays record-only
    acp = act(gw, action="run_task", flowId=flow["flowId"], runtime="acp", task="external")["result"]["task"]
    time.sleep(0.5)
    assert task_of(gw, acp["taskId"])["status"] == "queued"
    upd = act(gw, (409,), action="update_task", taskId=created["taskId"], status="failed", error="x")
    assert upd["code"] == "not_external"


def test_failed_task_and_cancel_flow_cancels_running_children(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config())
    flow = act(gw, action="create_flow", goal="g")["result"]["flow"]
    failing = act(gw, action="run_task", flowId=flow["flowId"], runtime="subagent",
                  task="[[echo:fail]]")["result"]["task"]
    failed = wait_for(lambda: (t := task_of(gw, failing["taskId"]))["status"] == "failed" and t)
    assert failed["error"] == "echo runtime: requested failure"
    slow = act(gw, action="run_task", flowId=flow["flowId"], runtime="subagent",
               task="[[echo:sleep=30]] slow")["result"]["task"]
    wait_for(lambda: task_of(gw, slow["taskId"])["status"] == "running")
    external = act(gw, (409,), action="update_task", taskId=slow["taskId"], status="succeeded")
    assert external["code"] == "not_external"
    started = time.monotonic()
    cancelled = act(gw, action="cancel_flow", flowId=flow["flowId"])
    assert cancelled["ok"] is True and cancelled["result"]["cancelled"] is True  # 200, not 202
    assert cancelled["result"]["flow"]["status"] == "cancelled"
    task = next(t for t in cancelled["result"]["tasks"] if t["taskId"] == slow["taskId"])
    assert task["status"] == "cancelled" and task["error"] == "Cancelled by operator."
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        def run_status() -> str:
            row = conn.execute("SELECT status FROM runs WHERE kind = 'task' AND inputs LIKE ?",
                               (f'%{slow["taskId"]}%',)).fetchone()
            return str(row[0])
        wait_for(lambda: run_status() == "cancelled", timeout=5)
    assert time.monotonic() - started < 5  # the 30 s runtime call was aborted


def test_the_routes_agent_runs_tasks_that_name_none(gateway_factory: GatewayFactory) -> None:
    """webhooks.md §5.4: "Agent: the task's `agentId` if it names a known agent, else the route's
    `agentId`, else the agent of the route session key"; §1.2: the route's `agentId` is the "agent for
    executed tasks". A route whose session key names an agent (`agent:ops:main`) ran every task on
    that agent, never on its own `agentId`: run_task's Effect rule had filled the task's `agentId`
    from the owner key. (The task's `agentId` stays as that rule fills it, §4.13.)"""
    cfg = config()
    cfg["agents"]["list"].append({"id": "helper"})
    cfg["plugins"]["entries"]["webhooks"]["config"]["routes"]["ci"]["agentId"] = "helper"
    gw = gateway_factory(cfg)
    flow = act(gw, action="create_flow", goal="g")["result"]["flow"]
    plain = act(gw, action="run_task", flowId=flow["flowId"], runtime="subagent", task="a")["result"]["task"]
    named = act(gw, action="run_task", flowId=flow["flowId"], runtime="subagent", task="b",
                agentId="main")["result"]["task"]
    child = act(gw, action="run_task", flowId=flow["flowId"], runtime="subagent", task="c",
                childSessionKey="agent:ops:subagent:c1")["result"]["task"]
    ghost = act(gw, action="run_task", flowId=flow["flowId"], runtime="subagent", task="d",
                agentId="ghost")["result"]["task"]
    assert [t["agentId"] for t in (plain, named, child, ghost)] == ["ops", "main", "ops", "ghost"]
    for task in (plain, named, child, ghost):
        wait_for(lambda t=task: task_of(gw, t["taskId"])["status"] == "succeeded")
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        runs = {row[0]: row[1:] for row in conn.execute(
            "SELECT json_extract(inputs, '$.taskId'), agent_id, session_key FROM runs WHERE kind = 'task'")}
    assert runs[plain["taskId"]] == ("helper", f"agent:helper:subagent:{plain['taskId']}")
    assert runs[named["taskId"]] == ("main", f"agent:main:subagent:{named['taskId']}")
    assert runs[child["taskId"]] == ("ops", "agent:ops:subagent:c1")
    assert runs[ghost["taskId"]] == ("helper", f"agent:helper:subagent:{ghost['taskId']}")


def test_a_task_run_cancelled_after_its_last_attempt_crashed_keeps_attempt_2(gateway_factory: GatewayFactory) -> None:
    # Two kill -9s, then cancel_flow inside the dead process's lease: the claim that found attempt 2's
    # lease expired counted a third attempt, and the run ended `cancelled` with attempt 3 (model.md
    # §5.1: 1 or 2) and that claim's time as its startedAt, though nothing started then.
    cfg = config()
    cfg["storage"]["leaseSeconds"] = 4
    gw = gateway_factory(cfg)
    flow = act(gw, action="create_flow", goal="g")["result"]["flow"]
    task = act(gw, action="run_task", flowId=flow["flowId"], runtime="subagent",
               task="[[echo:sleep=60]] long")["result"]["task"]

    def run() -> dict[str, Any]:
        with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
            conn.row_factory = sqlite3.Row
            row = conn.execute("SELECT status, attempt, started_at FROM runs WHERE kind = 'task'").fetchone()
        return dict(row)

    wait_for(lambda: run()["status"] == "running")
    gw.kill9()
    gw.start()
    second = wait_for(lambda: (r := run())["attempt"] == 2 and r["status"] == "running" and r, timeout=15)
    gw.kill9()
    gw.start()
    cancelled = act(gw, action="cancel_flow", flowId=flow["flowId"])
    assert cancelled["result"]["flow"]["status"] == "cancelled"
    assert run()["status"] == "running"  # still the dead process's lease
    final = wait_for(lambda: (r := run())["status"] != "running" and r, timeout=15)
    assert final == {"status": "cancelled", "attempt": 2, "started_at": second["started_at"]}
    assert task_of(gw, task["taskId"])["status"] == "cancelled"
