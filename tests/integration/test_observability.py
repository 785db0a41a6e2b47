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


def test_request_lines_carry_the_surface_route_and_client_ip(gateway_factory: GatewayFactory) -> None:
    """operations.md §2: every line has, where known, request_id, surface, route and client_ip."""
    cfg = hooks_config()
    cfg["plugins"] = {"entries": {"webhooks": {"config": {"routes": {"ci": ci_route()}}}}}
    gw = gateway_factory(cfg, args=("--no-worker",))
    with gw.client() as c:
        assert c.post("/hooks/wake", json={"text": "a"}, headers=AUTH).status_code == 200
        assert c.post("/hooks/agent", json={"message": "m"}, headers=AUTH).status_code == 200
        assert c.post("/hooks/wake", json={"text": "a"}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/hooks/wake", json={"mode": "now"}, headers=AUTH).status_code == 400
        assert c.post(CI_PATH, json={"action": "create_flow", "goal": "g"}, headers=BEARER).status_code == 200
        assert c.post(CI_PATH, json={"action": "create_flow"}, headers=BEARER).status_code == 400
        assert c.post(CI_PATH, json={"action": "list_flows"}, headers={"Authorization": "Bearer no"}).status_code == 401
    seen = [(e["event"], e.get("surface"), e.get("route"), e.get("client_ip"), bool(e.get("request_id")))
            for e in gw.flushed_log_events()
            if e.get("event") in ("hook.accepted", "hook.auth_failed", "hook.rejected", "webhook.accepted",
                                  "webhook.rejected")]
    assert seen == [
        ("hook.accepted", "hooks", "wake", "127.0.0.1", True),
        ("hook.accepted", "hooks", "agent", "127.0.0.1", True),
        ("hook.auth_failed", "hooks", "wake", "127.0.0.1", True),
        ("hook.rejected", "hooks", "wake", "127.0.0.1", True),
        ("webhook.accepted", "webhooks", "ci", "127.0.0.1", True),
        ("webhook.rejected", "webhooks", "ci", "127.0.0.1", True),
        ("webhook.rejected", "webhooks", "ci", "127.0.0.1", True),
    ]


def test_run_and_delivery_lines_carry_the_agent_and_session(gateway_factory: GatewayFactory) -> None:
    """operations.md §2: run_id, agent_id, session_key and delivery_id where known."""
    cfg = hooks_config()
    cfg["channels"] = {"console": {}}
    gw = gateway_factory(cfg)
    with gw.client() as c:
        run_id = c.post("/hooks/agent", json={"message": "hi", "channel": "console", "to": "x"},
                        headers=AUTH).json()["runId"]
    started = wait_for(lambda: logged(gw, "run.started"))[0]
    finished = wait_for(lambda: logged(gw, "run.finished"))[0]
    sent = wait_for(lambda: logged(gw, "delivery.sent"))[0]
    for line in (started, finished, sent):
        assert line["run_id"] == run_id and line["agent_id"] == "main", line
        assert line["session_key"].startswith("agent:main:hook:"), line
    assert sent["delivery_id"] and sent["channel"] == "console"


def test_the_user_agent_is_logged_sanitised(gateway_factory: GatewayFactory) -> None:
    """operations.md §2: free text that is logged — control characters → space, whitespace collapsed,
    cut to 500 characters."""
    gw = gateway_factory(hooks_config(), args=("--no-worker",))
    agent = "probe\tagent   with spaces " + "u" * 600
    with gw.client() as c:
        c.get("/healthz", headers={"User-Agent": agent, "X-Request-Id": "ua-probe"})
    line = next(e for e in gw.flushed_log_events() if e.get("request_id") == "ua-probe")
    assert line["user_agent"] == ("probe agent with spaces " + "u" * 600)[:500]


def test_python_runtime_metrics_are_exported(gateway: RunningGateway) -> None:
    """operations.md §3: prometheus-client's process_* and python_* metrics are included."""
    with gateway.client() as c:
        text = c.get("/metrics").text
    for name in ("process_resident_memory_bytes", "python_info", "python_gc_objects_collected_total"):
        assert f"\n{name}" in text, name
