"""Retention sweeps (model.md §2.5) and the operator reads behind `hookgate flows`, on a real SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from hookgate.clock import ManualClock
from hookgate.config.loader import load_settings
from hookgate.config.settings import RouteSettings, Settings
from hookgate.store import open_store
from hookgate.webhooks.schema import parse_action
from hookgate.webhooks.service import FlowService

DAY = 86_400.0


def settings_for(tmp_path: Path, retention: dict[str, Any]) -> Settings:
    import json

    cfg = {
        "storage": {"sqlite": {"path": "r.db"}, "retention": retention},
        "plugins": {"entries": {"webhooks": {"config": {"routes": {
            "ci": {"sessionKey": "agent:main:main", "secret": "s"}}}}}},
    }
    (tmp_path / "hookgate.json5").write_text(json.dumps(cfg))
    return load_settings(str(tmp_path / "hookgate.json5"), {}, cwd=str(tmp_path))


async def act(service: FlowService, route: RouteSettings, body: dict[str, Any]) -> dict[str, Any]:
    import json

    result = await service.execute(route, parse_action(body), body["action"], idempotency_key=None, body_sha256="x")
    return dict(json.loads(result.body))


async def test_terminal_tasks_and_old_flows_are_swept(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, {"taskDays": 7, "lostTaskDays": 1, "flowDays": 30})
    clock = ManualClock()
    store = open_store(settings.storage, clock=clock)
    await store.open("serve")
    try:
        service = FlowService(store, clock, lambda: settings)
        route = settings.webhooks.routes[0]
        flow = (await act(service, route, {"action": "create_flow", "goal": "g"}))["result"]["flow"]
        done = (await act(service, route, {"action": "run_task", "flowId": flow["flowId"], "runtime": "acp",
                                           "task": "a"}))["result"]["task"]
        lost = (await act(service, route, {"action": "run_task", "flowId": flow["flowId"], "runtime": "acp",
                                           "task": "b"}))["result"]["task"]
        active = (await act(service, route, {"action": "run_task", "flowId": flow["flowId"], "runtime": "acp",
                                             "task": "c"}))["result"]["task"]
        await act(service, route, {"action": "update_task", "taskId": done["taskId"], "status": "succeeded"})
        # model.md §2.5 gives lost tasks a shorter retention; an external executor cannot report "lost",
        # so mark it through the store the way an interrupted executed run would.
        def mark_lost(tx: Any) -> None:
            task = tx.get_task(lost["taskId"])
            tx.update_task(msgspec.structs.replace(task, status="lost", ended_at=clock.now_ms(),
                                               cleanup_after=clock.now_ms() + int(DAY * 1000)))

        await store.flow_write(mark_lost)
        finished = await act(service, route, {"action": "finish_flow", "flowId": flow["flowId"], "expectedRevision": 0})
        assert finished["ok"] is True

        clock.advance(DAY + 1)
        assert await service.sweep(clock.now_ms()) == (1, 0)  # the lost task only
        clock.advance(6 * DAY)
        assert await service.sweep(clock.now_ms()) == (1, 0)  # the succeeded task; the active one stays
        summary = await act(service, route, {"action": "get_task_summary", "flowId": flow["flowId"]})
        assert summary["result"]["summary"]["total"] == 1
        clock.advance(30 * DAY)
        assert await service.sweep(clock.now_ms()) == (0, 0)  # a flow with a remaining task is kept
        await act(service, route, {"action": "update_task", "taskId": active["taskId"], "status": "failed",
                                   "error": "boom"})
        clock.advance(7 * DAY + 1)
        assert await service.sweep(clock.now_ms()) == (1, 1)
        assert (await act(service, route, {"action": "get_flow", "flowId": flow["flowId"]}))["result"]["flow"] is None
    finally:
        await store.close()


async def test_non_terminal_flows_are_never_pruned_and_flow_days_zero_keeps(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, {"flowDays": 0})
    clock = ManualClock()
    store = open_store(settings.storage, clock=clock)
    await store.open("serve")
    try:
        service = FlowService(store, clock, lambda: settings)
        route = settings.webhooks.routes[0]
        waiting = (await act(service, route, {"action": "create_flow", "goal": "w", "status": "waiting"}))
        done = (await act(service, route, {"action": "create_flow", "goal": "d"}))["result"]["flow"]
        await act(service, route, {"action": "finish_flow", "flowId": done["flowId"], "expectedRevision": 0})
        clock.advance(400 * DAY)
        assert await service.sweep(clock.now_ms()) == (0, 0)
        flows = (await act(service, route, {"action": "list_flows"}))["result"]["flows"]
        assert {f["goal"] for f in flows} == {"w", "d"}
        assert waiting["ok"] is True
    finally:
        await store.close()
