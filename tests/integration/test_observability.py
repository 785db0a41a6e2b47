"""Log events and metrics of operations.md §2–§3 that the other suites do not reach, on a real server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gateway import AUTH, GatewayFactory, RunningGateway, hooks_config, wait_for

sys.path.insert(0, str(Path(__file__).parent / "webhooks"))

from routeharness import BEARER, CI_PATH, ci_route, metric


def logged(gw: RunningGateway, event: str) -> list[dict[str, Any]]:
    """The lines of ``event`` written so far (info lines leave the server's buffer every 100 ms)."""
    return [e for e in gw.flushed_log_events() if e.get("event") == event]


def test_unresolved_optional_secret_is_logged_and_counted(gateway_factory: GatewayFactory) -> None:
    cfg = hooks_config()
    cfg["channels"] = {"telegram": {"botToken": {"source": "env", "provider": "default", "id": "HG_NO_SUCH_VAR"}}}
    gw = gateway_factory(cfg, env={"HG_NO_SUCH_VAR": ""})
    entry = gw.wait_log("secret.unresolved")
    assert (entry["key"], entry["source"]) == ("channels.telegram.botToken", "env:default:HG_NO_SUCH_VAR")
    assert metric(gw, 'hookgate_secret_resolution_failures_total{source="env"}') == 1


def test_queue_cap_and_failed_turns_drop_events_with_a_log_line(gateway_factory: GatewayFactory) -> None:
    cfg = hooks_config()
    cfg["agents"] = {"list": [{"id": "main", "default": True, "heartbeat": {"every": "1s"}}]}
    cfg["storage"]["leaseSeconds"] = 1
    gw = gateway_factory(cfg)
    with gw.client() as c:
        # a failing turn three times drops the event (model.md §4.1)
        assert c.post("/hooks/wake", json={"text": "[[echo:fail]] doomed", "mode": "now"},
                      headers=AUTH).status_code == 200
        failed = wait_for(lambda: logged(gw, "event.dropped"), timeout=15)
    assert failed[0]["reason"] == "failed_turns" and failed[0]["count"] == 1
    assert metric(gw, 'hookgate_system_events_total{outcome="dropped"}') == 1
    assert metric(gw, 'hookgate_heartbeats_total{outcome="failed"}') == 3
    assert metric(gw, 'hookgate_run_duration_seconds_count{kind="heartbeat",runtime="echo"}') >= 3
    gw.stop()
    cfg["agents"] = {"list": [{"id": "main", "default": True, "heartbeat": {"every": "0"}}]}
    gw = gateway_factory(cfg)  # the same database; next-heartbeat wakes and no schedule: no turn consumes
    with gw.client() as c:
        for i in range(24):  # the 21st drops one, and so does every later one
            assert c.post("/hooks/wake", json={"text": f"event {i}", "mode": "next-heartbeat"},
                          headers=AUTH).status_code == 200
    capped = [e for e in logged(gw, "event.dropped") if e["reason"] == "queue_cap"]
    # one line per session per 10 s: a full queue does not log a warning per wake
    assert [(e["session_key"], e["count"]) for e in capped] == [("agent:main:main", 1)]
    assert metric(gw, 'hookgate_system_events_total{outcome="dropped"}') == 4  # this process's count


def test_silent_replies_count_as_suppressed_and_runs_log_their_claim(gateway_factory: GatewayFactory) -> None:
    cfg = hooks_config()
    cfg["channels"] = {"console": {}}
    gw = gateway_factory(cfg)
    with gw.client() as c:
        run_id = c.post("/hooks/agent", json={"message": "[[echo:heartbeat_ok]] quiet"}, headers=AUTH).json()["runId"]
        wait_for(lambda: metric(gw, 'hookgate_runs_total{kind="hook",status="ok"}') == 1)
        assert metric(gw, 'hookgate_deliveries_total{channel="last",status="suppressed"}') == 1
        assert c.post("/hooks/agent", json={"message": "  "}, headers=AUTH).status_code == 400
        assert metric(gw, 'hookgate_body_rejections_total{reason="invalid_request",surface="hooks"}') == 1
        wait_for(lambda: 'hookgate_queue_backlog{queue="heartbeats"}' in c.get("/metrics").text)
    assert [e["run_id"] for e in logged(gw, "run.claimed")] == [run_id]


def test_surface_a_accepted_rejected_and_rate_limited_lines(gateway_factory: GatewayFactory) -> None:
    cfg = {"storage": {"sqlite": {"path": "hookgate.db"}},
           "plugins": {"entries": {"webhooks": {"config": {
               "routes": {"ci": ci_route()}, "limits": {"rateLimit": {"windowSeconds": 60, "maxRequests": 3}}}}}}}
    gw = gateway_factory(cfg)
    with gw.client() as c:
        created = c.post(CI_PATH, json={"action": "create_flow", "goal": "g"}, headers=BEARER).json()
        stale = {"action": "finish_flow", "flowId": created["result"]["flow"]["flowId"], "expectedRevision": 7}
        assert c.post(CI_PATH, json=stale, headers=BEARER).status_code == 409
        assert c.post(CI_PATH, json={"action": "list_flows"}, headers=BEARER).status_code == 200
        for _ in range(3):  # the 4th to 6th hits of the window are 429s: one log line
            assert c.post(CI_PATH, json={"action": "list_flows"}, headers=BEARER).status_code == 429
    accepted = logged(gw, "webhook.accepted")
    assert [(e["route"], e["action"], e["flow_id"]) for e in accepted] == [
        ("ci", "create_flow", created["result"]["flow"]["flowId"])]  # reads are not "accepted" lines
    assert [(e["action"], e["code"]) for e in logged(gw, "webhook.rejected")] == [("finish_flow", "revision_conflict")]
    limited = logged(gw, "ratelimit.rejected")
    assert len(limited) == 1 and limited[0]["route"] == "ci" and limited[0]["retry_after"] >= 1
