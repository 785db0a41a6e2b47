"""What must never reach the logs (operations.md §2, §6) even when others hand it back: a chat API that
quotes the credential header or the text it was sent, a transform that exits with payload in its message."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

from gateway import AUTH, GatewayFactory, RunningGateway, hooks_config, wait_for
from receiver import Receiver, running_receiver

CHANNEL_HEADER_TOKEN = "chan-hdr-Zq81xVb7"  # a token configured as a webhook-channel header value


@contextmanager
def echoing_api(status: int = 401) -> Iterator[Receiver]:
    """A chat API that refuses every message and, like many real APIs, quotes what it was sent."""
    with running_receiver() as api:
        api.always = status
        api.reply = lambda headers, doc: {"ok": False, "error": {
            "message": f"rejected {headers.get('authorization', '')} for text {doc.get('text', '')}"}}
        yield api


def _dead_delivery_gateway(gateway_factory: GatewayFactory, api: Receiver) -> RunningGateway:
    cfg = hooks_config()
    cfg["channels"] = {"webhook": {"url": f"{api.url}/notify", "retry": {"maxAttempts": 1},
                                   "headers": {"Authorization": f"Bearer {CHANNEL_HEADER_TOKEN}"}}}
    return gateway_factory(cfg)


def _post_and_wait_dead(gw: RunningGateway, message: str) -> str:
    with gw.client() as c:
        r = c.post("/hooks/agent", json={"message": message, "channel": "webhook", "to": "ops"}, headers=AUTH)
    assert r.status_code == 200, r.text
    run_id = str(r.json()["runId"])
    wait_for(lambda: any(e.get("event") == "delivery.dead" for e in gw.log_events()), timeout=20)
    return run_id


def test_channel_header_token_echoed_by_api_is_not_logged(gateway_factory: GatewayFactory) -> None:
    # operations.md §2: "Never logged: tokens, secrets, resolved secret values, `Authorization` and
    # secret headers, ...". operations.md §6: "tokens never appear in logs".
    # The webhook channel's configured `headers` carry a token (config show redacts them); an API that
    # quotes the Authorization header in its error text must not get that token into the log, nor the
    # delivery's lastError.
    with echoing_api() as api:
        gw = _dead_delivery_gateway(gateway_factory, api)
        _post_and_wait_dead(gw, "deploy finished")
        assert api.received and api.received[0][1]["authorization"] == f"Bearer {CHANNEL_HEADER_TOKEN}"
        log = "\n".join(json.dumps(e) for e in gw.flushed_log_events())
        assert CHANNEL_HEADER_TOKEN not in log, [e for e in gw.log_events() if e.get("event") == "delivery.dead"]


def test_delivered_text_echoed_by_api_is_not_logged(gateway_factory: GatewayFactory) -> None:
    # operations.md §2: "Never logged: ... message and reply texts, event texts, prompts, delivered text.
    # Sizes and hashes only."
    secret_text = "quarterly-numbers-Kx93Lp"
    with echoing_api(status=400) as api:
        gw = _dead_delivery_gateway(gateway_factory, api)
        _post_and_wait_dead(gw, secret_text)
        assert api.received and secret_text in api.received[0][2]["text"]
        log = "\n".join(json.dumps(e) for e in gw.flushed_log_events())
        assert secret_text not in log, [e for e in gw.log_events() if e.get("event") == "delivery.dead"]


PAYLOAD_SECRET = "payload-field-Wm42Qa"


def _transform_gateway(gateway_factory: GatewayFactory, source: str) -> RunningGateway:
    cfg = hooks_config(mappings=[{"id": "t", "match": {"path": "t"}, "action": "agent", "messageTemplate": "m",
                                  "transform": {"module": "t.py"}}])
    gw = gateway_factory(cfg, start=False)
    tdir = gw.workdir / "hooks" / "transforms"
    tdir.mkdir(parents=True, exist_ok=True)
    (tdir / "t.py").write_text(source)
    return gw.start()


def test_async_transform_calling_sys_exit_is_a_500_not_a_crash(gateway_factory: GatewayFactory) -> None:
    # hooks.md §6.5: "anything else, an invalid `kind`, or an exception → `500 {"ok":false,"error":"hook
    # mapping failed"}` and a warning `hook.mapping_failed` naming the mapping id and exception type
    # (never the payload)."  operations.md §2: payload fields are never logged.
    gw = _transform_gateway(gateway_factory, (
        "import sys\n"
        "async def transform(ctx):\n"
        "    sys.exit('bad ' + ctx.payload['x'])  # a BaseException from trusted code\n"
    ))
    with gw.client() as c:
        r = c.post("/hooks/t", json={"x": PAYLOAD_SECRET}, headers=AUTH)
    time.sleep(0.5)
    stderr = gw.stderr()
    # SystemExit from an asyncio task escapes the event loop: the process would exit and Python
    # would print the exit message, i.e. the payload field, on stderr.
    assert PAYLOAD_SECRET not in stderr, stderr[-600:]
    assert gw.proc is not None and gw.proc.poll() is None, "the gateway process died"
    assert r.status_code == 500 and r.json() == {"ok": False, "error": "hook mapping failed"}, r.text


def test_async_transform_keyboard_interrupt_is_a_500_too(gateway_factory: GatewayFactory) -> None:
    gw = _transform_gateway(gateway_factory, (
        "async def transform(ctx):\n"
        "    raise KeyboardInterrupt(ctx.payload['x'])\n"
    ))
    with gw.client() as c:
        r = c.post("/hooks/t", json={"x": PAYLOAD_SECRET}, headers=AUTH)
        assert (r.status_code, r.json()) == (500, {"ok": False, "error": "hook mapping failed"})
        assert c.get("/healthz").status_code == 200
    failed = [e for e in gw.flushed_log_events() if e.get("event") == "hook.mapping_failed"]
    assert failed[-1]["error_type"] == "KeyboardInterrupt"
    assert PAYLOAD_SECRET not in gw.stderr()
