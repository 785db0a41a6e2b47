"""Delivery through a real `hookgate serve`: POST /hooks/agent → the reply at a loopback receiver,
a pending delivery surviving a restart, dead letters, `hookgate replay`, and the delivery metrics."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from gateway import AUTH, GatewayFactory, RunningGateway, hooks_config, wait_for
from receiver import Receiver, running_receiver


def config(url: str, **channel: Any) -> dict[str, Any]:
    cfg = hooks_config()
    cfg["channels"] = {"webhook": {"url": url, **channel}}
    cfg["storage"]["leaseSeconds"] = 2
    return cfg


def post_agent(gw: RunningGateway, **body: Any) -> str:
    with gw.client() as c:
        r = c.post("/hooks/agent", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    return str(r.json()["runId"])


def deliveries(gw: RunningGateway, run_id: str) -> list[dict[str, Any]]:
    return list(json.loads(gw.cli("runs", "show", run_id, check=True).stdout)["deliveries"])


def events(gw: RunningGateway) -> list[str]:
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        return [r[0] for r in conn.execute("SELECT text FROM system_events ORDER BY seq")]


def test_agent_reply_reaches_the_webhook_channel_signed(gateway_factory: GatewayFactory, receiver: Receiver) -> None:
    secret = "whsec_" + "c2VjcmV0LWtleS1mb3ItdGVzdHM="  # base64 of "secret-key-for-tests"
    gw = gateway_factory(config(receiver.url + "/hook", secret=secret, headers={"X-Team": "ops"}))
    run_id = post_agent(gw, message="deploy done", name="Deploy", channel="webhook", to="ops-room")
    wait_for(lambda: receiver.received)
    path, headers, body = receiver.received[0]
    assert path == "/hook" and headers["x-team"] == "ops"
    assert body["channel"] == "webhook" and body["to"] == "ops-room" and body["text"] == "echo: deploy done"
    assert body["runId"] == run_id and body["agentId"] == "main" and isinstance(body["createdAt"], int)
    assert headers["webhook-id"] and headers["webhook-signature"].startswith("v1,")
    [d] = wait_for(lambda: [d for d in deliveries(gw, run_id) if d["status"] == "delivered"])
    assert d["attempts"] == 1 and d["to"] == "ops-room" and d["attemptLog"][0]["outcome"] == "delivered"
    assert not [e for e in events(gw) if e.startswith("Hook Deploy")]  # delivered: no summary
    # the explicit channel became the last route: `last` now follows it
    second = post_agent(gw, message="again", name="Deploy")
    wait_for(lambda: len(receiver.received) == 2)
    assert receiver.received[1][2]["to"] == "ops-room" and receiver.received[1][2]["runId"] == second
    with gw.client() as c:
        metrics = c.get("/metrics").text
    assert 'hookgate_deliveries_total{channel="webhook",status="delivered"} 2.0' in metrics
    assert 'hookgate_delivery_attempt_seconds_count{channel="webhook"} 2.0' in metrics
    assert 'hookgate_delivery_latency_seconds_count{channel="webhook"} 2.0' in metrics
    assert 'hookgate_queue_backlog{queue="deliveries"}' in metrics
    log = gw.stderr()
    assert "echo: deploy done" not in log and secret not in log  # never the text or the secret


def test_pending_delivery_survives_a_restart_and_is_sent_once(gateway_factory: GatewayFactory,
                                                                receiver: Receiver) -> None:
    gw = gateway_factory(config(receiver.url))
    receiver.script = [(503, {"Retry-After": "3"})]
    run_id = post_agent(gw, message="durable", channel="webhook", to="t")
    wait_for(lambda: [d for d in deliveries(gw, run_id) if d["attempts"] == 1])
    gw.stop()
    assert len(receiver.received) == 1
    gw.start()
    [d] = wait_for(lambda: [d for d in deliveries(gw, run_id) if d["status"] == "delivered"], timeout=15)
    assert d["attempts"] == 2 and [a["outcome"] for a in d["attemptLog"]] == ["retry", "delivered"]
    assert d["attemptLog"][0]["httpStatus"] == 503
    time.sleep(1.5)
    assert len(receiver.received) == 2  # the failed attempt and the one that succeeded, nothing more


def test_dead_delivery_summary_and_replay(gateway_factory: GatewayFactory, receiver: Receiver) -> None:
    gw = gateway_factory(config(receiver.url))
    receiver.script = [(410, {})]
    run_id = post_agent(gw, message="gone", name="Alert", channel="webhook", to="t")
    [d] = wait_for(lambda: [d for d in deliveries(gw, run_id) if d["status"] == "dead"])
    assert d["lastError"].startswith("webhook: HTTP 410")
    assert wait_for(lambda: [e for e in events(gw) if e == "Hook Alert: echo: gone"])
    # not dead → refused; dry run counts; replay sends it again
    other = post_agent(gw, message="fine", channel="webhook", to="u")
    [ok] = wait_for(lambda: [x for x in deliveries(gw, other) if x["status"] == "delivered"])
    refused = gw.cli("replay", "delivery", ok["deliveryId"])
    assert refused.returncode == 1
    assert refused.stderr.strip() == f"delivery {ok['deliveryId']} is delivered; only dead deliveries can be replayed"
    assert gw.cli("replay", "deliveries", "--dead", "--channel", "webhook", "--dry-run", check=True
                  ).stdout.strip() == "would requeue 1 deliveries"
    # a channel name as requests give it: trimmed, lower-cased, through the aliases (model.md §10.1)
    assert gw.cli("replay", "deliveries", "--dead", "--channel", " WebHook ", "--dry-run", check=True
                  ).stdout.strip() == "would requeue 1 deliveries"
    assert gw.cli("replay", "deliveries", "--dead", "--channel", "slack", check=True
                  ).stdout.strip() == "requeued 0 deliveries"
    assert gw.cli("replay", "delivery", d["deliveryId"], check=True).stdout.strip() == (
        f"requeued delivery {d['deliveryId']}")
    [again] = wait_for(lambda: [x for x in deliveries(gw, run_id) if x["status"] == "delivered"])
    assert [a["outcome"] for a in again["attemptLog"]] == ["dead", "delivered"]
    assert [body["text"] for _, _, body in receiver.received].count("echo: gone") == 2
    # re-running the hook run: a new run with the same inputs, delivered like the first
    out = gw.cli("replay", "run", run_id, check=True).stdout.strip()
    assert out.startswith(f"replayed run {run_id} as ")
    new_id = out.rsplit(" ", 1)[1]
    wait_for(lambda: [x for x in deliveries(gw, new_id) if x["status"] == "delivered"])
    assert [body["runId"] for _, _, body in receiver.received][-1] == new_id
    missing = gw.cli("replay", "run", "no-such-run")
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_console_and_file_channels(gateway_factory: GatewayFactory, receiver: Receiver) -> None:
    cfg = config(receiver.url)
    cfg["channels"] = {"console": {}, "file": {"path": "out/deliveries.jsonl"}}
    gw = gateway_factory(cfg)
    (gw.workdir / "out").mkdir(exist_ok=True)
    first = post_agent(gw, message="to the file", channel="file", to="audit")
    line = wait_for(lambda: (gw.workdir / "out" / "deliveries.jsonl").exists()
                    and (gw.workdir / "out" / "deliveries.jsonl").read_text().splitlines())
    record = json.loads(line[0])
    assert {k: record[k] for k in ("channel", "to", "text", "runId", "agentId")} == {
        "channel": "file", "to": "audit", "text": "echo: to the file", "runId": first, "agentId": "main"}
    assert isinstance(record["ts"], int)
    second = post_agent(gw, message="to the console", channel="console", to="ops")
    out = wait_for(lambda: [json.loads(x) for x in gw.read_stdout().splitlines() if x.startswith('{"channel"')])
    assert out[0] == {"channel": "console", "to": "ops", "text": "echo: to the console", "runId": second,
                      "agentId": "main"}
    assert "to the console" not in gw.stderr() and "to the file" not in gw.stderr()  # texts never logged


def _store_commits(gw: RunningGateway) -> float:
    with gw.client() as c:
        text = c.get("/metrics").text
    return float(next(line.rsplit(" ", 1)[1] for line in text.splitlines()
                      if line.startswith('hookgate_store_commit_seconds_count{backend="sqlite"}')))


def test_a_delivery_waiting_behind_one_in_flight_does_not_spin_the_worker(gateway_factory: GatewayFactory,
                                                                         receiver: Receiver) -> None:
    """The second delivery to a target is due but waits for the first (one at a time per target). The
    worker once counted it as "due now" and ticked without pause — ~6 000 write transactions a second —
    for as long as the first was in flight. It now waits for the first one's end (or its poll)."""
    receiver.delay = 3.0
    gw = gateway_factory(config(receiver.url + "/in"))
    first = post_agent(gw, message="one", channel="webhook", to="room")
    second = post_agent(gw, message="two", channel="webhook", to="room")
    wait_for(lambda: len(receiver.received) == 1)  # the first is in flight for 3 s
    before = _store_commits(gw)
    time.sleep(1.5)
    during = _store_commits(gw) - before
    assert during < 20, f"{during:.0f} commits in 1.5 s while nothing could be claimed"
    wait_for(lambda: len(receiver.received) == 2, timeout=15)
    assert [body["runId"] for _, _, body in receiver.received] == [first, second]


def test_an_answer_the_adapter_cannot_read_is_retried_and_its_attempt_timed(gateway_factory: GatewayFactory,
                                                                            receiver: Receiver) -> None:
    """A 200 whose body cannot be decoded (gzip announced, none sent) ends the attempt in
    delivery.adapter_error: retried like a failure, and counted in the attempt histogram like any
    attempt (it was not)."""
    gw = gateway_factory(config(receiver.url))
    receiver.script = [(200, {"Content-Encoding": "gzip"})]
    run_id = post_agent(gw, message="undecodable", channel="webhook", to="t")
    [d] = wait_for(lambda: [d for d in deliveries(gw, run_id) if d["status"] == "delivered"], timeout=15)
    assert [a["outcome"] for a in d["attemptLog"]] == ["retry", "delivered"]
    assert "internal error" in d["attemptLog"][0]["error"]
    with gw.client() as c:
        metrics = c.get("/metrics").text
    assert 'hookgate_delivery_attempt_seconds_count{channel="webhook"} 2.0' in metrics
    assert len(receiver.received) == 2


def test_a_slow_chat_api_holds_no_other_channels_deliveries(gateway_factory: GatewayFactory,
                                                            receiver: Receiver) -> None:
    """A chat API that answers slowly (here 6 s; one that hangs takes the 15 s timeout) for 20
    chats: its sends held all 16 delivery slots of the worker, and a reply to another channel,
    whose API answers at once, waited for them. One channel now takes at most 16 of 64 slots."""
    receiver.delay = 6.0
    with running_receiver() as fast:
        cfg = config(receiver.url + "/slow")
        cfg["channels"]["slack"] = {"botToken": "xoxb-test", "apiBaseUrl": fast.url}
        cfg["gateway"] = {"drainTimeoutSeconds": 1}
        gw = gateway_factory(cfg)
        for i in range(20):
            post_agent(gw, message=f"m{i}", channel="webhook", to=f"chat-{i}")
        wait_for(lambda: len(receiver.received) == 16)
        time.sleep(0.5)
        assert len(receiver.received) == 16  # the channel's share, while its sends are slow
        post_agent(gw, message="other", channel="slack", to="C1")
        wait_for(lambda: fast.received, timeout=3)
        assert fast.received[0][2]["channel"] == "C1"
