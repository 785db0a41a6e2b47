"""``Idempotency-Key`` (webhooks.md §3.5, hookgate extension) against a real server and SQLite file."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import pytest
from gateway import GatewayFactory, RunningGateway, raw_request
from routeharness import (
    Api,
    ci_route,
    db,
    dumps,
    exact,
    metric,
    raw_post,
    serving,
    split_response,
    webhooks_config,
)

REUSED = ('{"ok":false,"routeId":"%s","code":"idempotency_key_reused",'
          '"error":"Idempotency-Key was already used with a different request.","result":{}}')
BAD_KEY = '{"ok":false,"code":"invalid_request","error":"Idempotency-Key: must be 1-256 characters"}'
ROUTES = ["i1", "i2", "i3", "i4", "i5", "i6", "i7"]


def idem_config() -> dict[str, Any]:
    routes = {name: ci_route(path=f"/plugins/webhooks/{name}", sessionKey=f"agent:ops:{name}") for name in ROUTES}
    routes["twin"] = ci_route(path="/plugins/webhooks/twin", sessionKey="agent:ops:i1")  # shares i1's flows
    return webhooks_config(routes, limits={"rateLimit": {"windowSeconds": 60, "maxRequests": 100000},
                                           "maxInFlight": 64})


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    with serving(tmp_path_factory.mktemp("idempotency"), idem_config()) as running:
        yield running


def route(c: Any, name: str) -> Api:
    return Api(c, f"/plugins/webhooks/{name}")


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


def test_replay_is_byte_identical_and_runs_nothing(gw: RunningGateway) -> None:
    with gw.client() as c:
        api = route(c, "i1")
        body = {"action": "create_flow", "goal": "once"}
        first = api.post(body, key("create-1"))
        assert first.status_code == 200 and "idempotent-replayed" not in first.headers
        again = api.post(body, key("create-1"))
        exact(again, 200, first.content)
        assert again.headers["idempotent-replayed"] == "true"
        flows = api.result("list_flows")["flows"]
        assert [f["goal"] for f in flows] == ["once"]
        flow_id = flows[0]["flowId"]

        waiting = {"action": "set_waiting", "flowId": flow_id, "expectedRevision": 0}
        applied = api.post(waiting, key("wait-1"))
        assert applied.status_code == 200
        replay = api.post(waiting, key("wait-1"))
        exact(replay, 200, applied.content)
        assert replay.headers["idempotent-replayed"] == "true"
        assert api.flow(flow_id)["revision"] == 1  # not applied twice (and no 409 either)
        # without the key the same request is a conflict
        assert api.post(waiting).status_code == 409

        # rejections are stored and replayed as well
        stale = api.post(waiting, key("wait-2"))
        assert stale.status_code == 409
        api.result("resume_flow", flowId=flow_id, expectedRevision=1)
        replayed = api.post(waiting, key("wait-2"))
        exact(replayed, 409, stale.content)
        assert replayed.headers["idempotent-replayed"] == "true"

        # every mutating action is covered: a replayed run_task does not create a second task
        task_body = {"action": "run_task", "flowId": flow_id, "runtime": "subagent", "task": "t"}
        made = api.post(task_body, key("task-1"))
        exact(api.post(task_body, key("task-1")), 200, made.content)
        assert api.result("get_task_summary", flowId=flow_id)["summary"]["total"] == 1
        task_id = made.json()["result"]["task"]["taskId"]
        end = {"action": "update_task", "taskId": task_id, "status": "succeeded"}
        ended = api.post(end, key("end-1"))
        exact(api.post(end, key("end-1")), 200, ended.content)  # not 409 terminal
        cancel = {"action": "cancel_flow", "flowId": flow_id}
        cancelled = api.post(cancel, key("cancel-1"))
        assert cancelled.status_code == 200
        exact(api.post(cancel, key("cancel-1")), 200, cancelled.content)
    with db(gw) as conn:
        count = conn.execute("SELECT count(*) FROM webhook_idempotency WHERE route_id = 'i1'").fetchone()[0]
    assert count == 6


def test_same_key_with_another_body(gw: RunningGateway) -> None:
    with gw.client() as c:
        api = route(c, "i2")
        assert api.post({"action": "create_flow", "goal": "a"}, key("k")).status_code == 200
        for other in ({"action": "create_flow", "goal": "b"}, '{"action": "create_flow", "goal": "a"}',
                      '{"goal":"a","action":"create_flow"}'):
            r = api.post(other, key("k"))
            exact(r, 409, REUSED % "i2")
            assert "idempotent-replayed" not in r.headers
        # the key is scoped by route: another route with the same key runs normally
        other_route = route(c, "i3")
        assert other_route.post({"action": "create_flow", "goal": "b"}, key("k")).status_code == 200
        assert len(api.result("list_flows")["flows"]) == 1
        assert len(other_route.result("list_flows")["flows"]) == 1


def test_key_headers_trimming_and_length(gw: RunningGateway) -> None:
    with gw.client() as c:
        api = route(c, "i4")
        body = {"action": "create_flow", "goal": "g"}
        first = api.post(body, {"x-hookgate-idempotency-key": "alias-key"})
        exact(api.post(body, key("alias-key")), 200, first.content)
        exact(api.post(body, {"x-openclaw-idempotency-key": "alias-key"}), 200, first.content)
        # Idempotency-Key wins over the aliases
        second = api.post(body, {"Idempotency-Key": "primary", "x-hookgate-idempotency-key": "alias-key"})
        assert second.content != first.content and "idempotent-replayed" not in second.headers
        long_key = "k" * 256
        made = api.post(body, key(long_key))
        assert made.status_code == 200
        exact(api.post(body, key(long_key)), 200, made.content)
        for bad in ("k" * 257, "x" * 1000):
            exact(api.post(body, key(bad)), 400, BAD_KEY)
        assert len(api.result("list_flows")["flows"]) == 3
    # trimming (raw: clients refuse surrounding blanks) and an empty key
    body_bytes = dumps(body).encode()
    data, _ = raw_request(gw.port, raw_post("/plugins/webhooks/i4", body_bytes, headers={"Idempotency-Key": "  primary  "}))
    status, headers, content = split_response(data)
    assert status == 200 and headers["idempotent-replayed"] == "true" and content == second.content
    # the length counts characters, not bytes
    answers = []
    for value in ("é" * 256, "é" * 256, "é" * 257):
        raw = raw_post("/plugins/webhooks/i4", body_bytes).replace(b"Connection: close", b"Idempotency-Key: "
                                                                    + value.encode() + b"\r\nConnection: close")
        answers.append(split_response(raw_request(gw.port, raw)[0]))
    assert [a[0] for a in answers] == [200, 200, 400]
    assert answers[1][1]["idempotent-replayed"] == "true" and answers[1][2] == answers[0][2]
    for blank in ("", "   "):
        data, _ = raw_request(gw.port, raw_post("/plugins/webhooks/i4", body_bytes, headers={"Idempotency-Key": blank}))
        status, _, content = split_response(data)
        assert (status, content) == (400, BAD_KEY.encode())


def test_read_actions_ignore_the_key(gw: RunningGateway) -> None:
    with gw.client() as c:
        api = route(c, "i5")
        flow = api.create()
        for action, fields in (("get_flow", {"flowId": flow["flowId"]}), ("list_flows", {}),
                               ("find_latest_flow", {}), ("resolve_flow", {"token": flow["flowId"]}),
                               ("get_task_summary", {"flowId": flow["flowId"]}), ("list_tasks", {"flowId": flow["flowId"]}),
                               ("get_task", {"taskId": "x"})):
            for value in ("read-key", "r" * 300):
                r = api.call(action, key(value), **fields)
                assert r.status_code == 200 and "idempotent-replayed" not in r.headers, r.text
        # a read with the key does not take it: the first mutation with it runs
        first = api.result("get_flow", flowId=flow["flowId"])
        api.result("set_waiting", flowId=flow["flowId"], expectedRevision=0)
        assert api.call("get_flow", key("read-key"), flowId=flow["flowId"]).json()["result"] != first
        assert api.call("create_flow", key("read-key"), goal="x").headers.get("idempotent-replayed") is None


def test_concurrent_requests_with_one_key_run_once(gw: RunningGateway) -> None:
    body = {"action": "create_flow", "goal": "race"}

    def send(i: int) -> tuple[int, bytes, bool]:
        with gw.client(source=f"127.0.3.{i + 1}") as c:
            r = route(c, "i6").post(body, key("race-key"))
            return r.status_code, r.content, r.headers.get("idempotent-replayed") == "true"

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(send, range(24)))
    assert {status for status, _, _ in answers} == {200}
    assert len({content for _, content, _ in answers}) == 1
    assert sum(1 for _, _, replayed in answers if not replayed) == 1
    with gw.client() as c:
        assert len(route(c, "i6").result("list_flows")["flows"]) == 1


def test_concurrent_mutations_with_one_revision(gw: RunningGateway) -> None:
    with gw.client() as c:
        flow = route(c, "i7").create()

    def send(i: int) -> tuple[int, Any]:
        with gw.client(source=f"127.0.4.{i + 1}") as c:
            r = route(c, "i7").call("set_waiting", flowId=flow["flowId"], expectedRevision=0, currentStep=f"s{i}")
            return r.status_code, r.json()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(send, range(32)))
    winners = [body for status, body in answers if status == 200]
    losers = [body for status, body in answers if status == 409]
    assert len(winners) == 1 and len(losers) == 31
    assert {body["code"] for body in losers} == {"revision_conflict"}
    final = winners[0]["result"]["flow"]
    assert final["revision"] == 1
    assert all(body["result"]["current"] == final for body in losers)
    with gw.client() as c:
        assert route(c, "i7").flow(flow["flowId"]) == final


def test_replay_metric(gw: RunningGateway) -> None:
    label = 'hookgate_idempotent_replays_total{surface="webhooks"}'
    before = metric(gw, label)
    with gw.client() as c:
        api = route(c, "i3")
        for _ in range(3):
            api.post({"action": "create_flow", "goal": "metric"}, key("metric-key"))
    assert metric(gw, label) == before + 2


def test_replay_survives_a_restart(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(webhooks_config())
    body = {"action": "create_flow", "goal": "durable"}
    with gw.client() as c:
        first = Api(c).post(body, key("restart-key"))
    assert first.status_code == 200
    gw.stop()
    gw.start()
    with gw.client() as c:
        api = Api(c)
        again = api.post(body, key("restart-key"))
        exact(again, 200, first.content)
        assert again.headers["idempotent-replayed"] == "true"
        exact(api.post({"action": "create_flow", "goal": "other"}, key("restart-key")), 409, REUSED % "ci")
        assert len(api.result("list_flows")["flows"]) == 1
