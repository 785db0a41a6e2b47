"""Every HTTP channel against a real loopback server that speaks its API, plus console and file.

Each channel is pointed at the fake through its own base-URL option (or webhook URL) and checked for
what the API would see (method, path, query, auth header, JSON body) and what the delivery job would
see (message ids through ``sent``, ``DeliveryError`` with the §10.4 classification).
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import json
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from hookgate.channels.base import MAX_CHARS, DeliveryError, Envelope
from hookgate.channels.http import HTTP_ADAPTERS, HttpAdapter
from hookgate.channels.local import ConsoleAdapter, FileAdapter
from hookgate.channels.registry import build_adapter
from hookgate.config.schema import CHANNEL_SCHEMAS
from hookgate.config.settings import ChannelSettings, SecretSource

sys.path.insert(0, str(Path(__file__).parent))
from fakeapi import FakeApi, Recorded, Reply, closed_port_url

ENVELOPE = Envelope(delivery_id="dlv_01HX", run_id="run_42", agent_id="main", session_key="agent:main:main",
                    created_at=1_700_000_000_123)
WEBHOOK_KEY = b"hookgate-test-signing-key-32byte"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(WEBHOOK_KEY).decode()
NOW = 1_700_000_100.0


@dataclass(frozen=True)
class Case:
    channel: str
    to: str
    options: Callable[[str], dict[str, Any]]  # fake base URL → options
    secrets: Callable[[str], dict[str, str]]  # fake base URL → secret values (the first is the main one)
    path: Callable[[str], str]  # fake base URL → the request path the API sees
    body: Callable[[str], Any]  # text → the JSON body the API sees (without ``volatile`` keys)
    message_id: Callable[[int], str | None]  # the fake's request number → the id ``sent`` gets
    headers: dict[str, str] = field(default_factory=dict)  # expected request headers (auth)
    query: dict[str, str] = field(default_factory=dict)
    volatile: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.channel


TG_TOKEN = "123456:TG-SECRET-TOKEN"

CASES = [
    Case("telegram", "-100123",
         lambda u: {"apiBaseUrl": u}, lambda u: {"botToken": TG_TOKEN},
         lambda u: f"/bot{TG_TOKEN}/sendMessage",
         lambda t: {"chat_id": "-100123", "text": t}, str),
    Case("slack", "C0123",
         lambda u: {"apiBaseUrl": u + "/api"}, lambda u: {"botToken": "xoxb-SLACK-SECRET"},
         lambda u: "/api/chat.postMessage",
         lambda t: {"channel": "C0123", "text": t}, lambda n: f"1700000000.{n:06d}",
         headers={"authorization": "Bearer xoxb-SLACK-SECRET"}),
    Case("discord", "987654321",
         lambda u: {"apiBaseUrl": u + "/api/v10"}, lambda u: {"botToken": "DISCORD-SECRET"},
         lambda u: "/api/v10/channels/987654321/messages",
         lambda t: {"content": t}, lambda n: f"11{n:016d}",
         headers={"authorization": "Bot DISCORD-SECRET"}),
    Case("mattermost", "town-square",
         lambda u: {"baseUrl": u + "/"}, lambda u: {"token": "MM-SECRET"},
         lambda u: "/api/v4/posts",
         lambda t: {"channel_id": "town-square", "message": t}, lambda n: f"post{n}",
         headers={"authorization": "Bearer MM-SECRET"}),
    Case("msteams", "ops",
         lambda u: {}, lambda u: {"webhooks.ops": u + "/webhookb2/TEAMS-SECRET/IncomingWebhook/abc"},
         lambda u: "/webhookb2/TEAMS-SECRET/IncomingWebhook/abc",
         lambda t: {"text": t}, lambda n: None),
    Case("googlechat", "room",
         lambda u: {}, lambda u: {"webhooks.room": u + "/v1/spaces/AAA/messages?key=K&token=GCHAT-SECRET"},
         lambda u: "/v1/spaces/AAA/messages",
         lambda t: {"text": t}, lambda n: f"spaces/AAA/messages/m{n}",
         query={"key": "K", "token": "GCHAT-SECRET"}),
    Case("line", "U4af4980629",
         lambda u: {"apiBaseUrl": u}, lambda u: {"channelAccessToken": "LINE-SECRET"},
         lambda u: "/v2/bot/message/push",
         lambda t: {"to": "U4af4980629", "messages": [{"type": "text", "text": t}]}, lambda n: f"4612{n}",
         headers={"authorization": "Bearer LINE-SECRET"}),
    Case("whatsapp", "+15551234567",
         lambda u: {"apiBaseUrl": u + "/v21.0", "phoneNumberId": "1055"}, lambda u: {"accessToken": "WA-SECRET"},
         lambda u: "/v21.0/1055/messages",
         lambda t: {"messaging_product": "whatsapp", "to": "+15551234567", "type": "text", "text": {"body": t}},
         lambda n: f"wamid.{n}",
         headers={"authorization": "Bearer WA-SECRET"}),
    Case("signal", "group.abc=",
         lambda u: {"baseUrl": u, "number": "+15550000000"}, lambda u: {},
         lambda u: "/v2/send",
         lambda t: {"message": t, "number": "+15550000000", "recipients": ["group.abc="]},
         lambda n: str(1_700_000_000_000 + n)),
    Case("webhook", "ops-room",
         lambda u: {"url": u + "/hook/in", "headers": {"X-Team": "ops"}}, lambda u: {"secret": WEBHOOK_SECRET},
         lambda u: "/hook/in",
         lambda t: {"channel": "webhook", "to": "ops-room", "text": t, "runId": "run_42", "agentId": "main",
                    "sessionKey": "agent:main:main", "createdAt": 1_700_000_000_123},
         lambda n: None,
         headers={"x-team": "ops", "webhook-id": "dlv_01HX", "webhook-timestamp": str(int(NOW))}),
    Case("imessage", "iMessage;-;+15551234567",
         lambda u: {"serverUrl": u}, lambda u: {"password": "BB-SECRET"},
         lambda u: "/api/v1/message/text",
         lambda t: {"chatGuid": "iMessage;-;+15551234567", "message": t, "method": "private-api"},
         lambda n: f"p:0/GUID-{n}",
         query={"password": "BB-SECRET"}, volatile=("tempGuid",)),
]
WITH_SECRET = [c for c in CASES if c.secrets("http://x")]


def test_every_http_channel_has_a_case() -> None:
    assert sorted(c.channel for c in CASES) == sorted(HTTP_ADAPTERS)


def settings(channel: str, options: dict[str, Any], secrets: dict[str, str | SecretSource]) -> ChannelSettings:
    return ChannelSettings(
        id=channel, options=options,
        secrets={k: v if isinstance(v, SecretSource) else SecretSource(f"channels.{channel}.{k}", "string", v)
                 for k, v in secrets.items()},
    )


def make(case: Case, url: str, http: httpx.AsyncClient, *, timeout: float = 5.0,
         secrets: dict[str, str | SecretSource] | None = None) -> HttpAdapter:
    cfg = settings(case.channel, case.options(url), secrets if secrets is not None else dict(case.secrets(url)))
    return HTTP_ADAPTERS[case.channel](cfg, http, timeout=timeout, clock=lambda: NOW)


class Sent:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str | None]] = []
        self.statuses: list[int | None] = []

    async def __call__(self, index: int, message_id: str | None, http_status: int | None) -> None:
        self.calls.append((index, message_id))
        self.statuses.append(http_status)


def body_of(case: Case, req: Recorded) -> Any:
    body = dict(req.body)
    for key in case.volatile:
        body.pop(key)
    return body


def assert_clean(exc: DeliveryError, case: Case, url: str, *texts: str) -> None:
    """No secret, no URL, no message text in what becomes ``lastError``."""
    for secret in case.secrets(url).values():
        assert secret not in exc.message
    assert "SECRET" not in exc.message
    assert "127.0.0.1" not in exc.message and "://" not in exc.message
    for text in texts:
        assert text not in exc.message


async def failing_send(adapter: HttpAdapter, case: Case, parts: list[str], start: int = 0
                       ) -> tuple[DeliveryError, Sent]:
    sent = Sent()
    with pytest.raises(DeliveryError) as info:
        await adapter.send(case.to, parts, start, ENVELOPE, sent)
    return info.value, sent


# --- success ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=str)
async def test_one_message_reaches_the_api_as_documented(case: Case, fake_api: FakeApi,
                                                         http: httpx.AsyncClient) -> None:
    adapter = make(case, fake_api.url, http)
    assert adapter.channel == case.channel
    sent = Sent()
    await adapter.send(case.to, ["Hello, wörld"], 0, ENVELOPE, sent)

    [req] = fake_api.requests
    assert req.method == "POST"
    assert req.path == case.path(fake_api.url)
    assert req.query == case.query
    assert req.headers["content-type"].startswith("application/json")
    for name, value in case.headers.items():
        assert req.headers[name] == value
    assert body_of(case, req) == case.body("Hello, wörld")
    assert sent.calls == [(0, case.message_id(1))]
    [status] = sent.statuses  # the chat API's answer (200, 201, 204 by API) reaches the attempt log
    assert isinstance(status, int) and 200 <= status < 300


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_a_long_text_goes_out_as_several_messages_in_order(case: Case, fake_api: FakeApi,
                                                                 http: httpx.AsyncClient) -> None:
    adapter = make(case, fake_api.url, http)
    limit = MAX_CHARS[case.channel]
    paragraph = ("word " * 40).strip()
    text = "\n\n".join(f"{i}: {paragraph}" for i in range(3 * (limit or 1000) // len(paragraph) + 3))
    parts = adapter.split(text)
    if limit is None:
        assert parts == [text]
        parts = ["first", "second", "third"]  # the webhook still sends what it is given, in order
    else:
        assert len(parts) >= 3 and all(0 < len(p) <= limit for p in parts)
    sent = Sent()
    await adapter.send(case.to, parts, 0, ENVELOPE, sent)

    assert [body_of(case, r) for r in fake_api.requests] == [case.body(p) for p in parts]
    assert sent.calls == [(i, case.message_id(i + 1)) for i in range(len(parts))]


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_start_skips_the_parts_already_sent(case: Case, fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    sent = Sent()
    await make(case, fake_api.url, http).send(case.to, ["p0", "p1", "p2"], 1, ENVELOPE, sent)
    assert [body_of(case, r) for r in fake_api.requests] == [case.body("p1"), case.body("p2")]
    assert [i for i, _ in sent.calls] == [1, 2]


# --- failures --------------------------------------------------------------------------------------

def error_body(detail: str) -> dict[str, Any]:
    # the places the APIs put their text: telegram description, slack error, discord/line message, …
    return {"ok": False, "description": detail, "error": detail, "message": detail}


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_429_with_retry_after_is_retryable_and_paced(case: Case, fake_api: FakeApi,
                                                           http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(429, error_body("Too Many Requests"), {"Retry-After": "17"})
    exc, sent = await failing_send(make(case, fake_api.url, http), case, ["secret plan"])
    assert exc.retryable and exc.http_status == 429 and exc.retry_after == 17
    assert exc.message == f"{case.channel}: HTTP 429: Too Many Requests"
    assert sent.calls == []
    assert_clean(exc, case, fake_api.url, "secret plan")


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_503_is_retryable(case: Case, fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(503, None)
    exc, _ = await failing_send(make(case, fake_api.url, http), case, ["hi"])
    assert exc.retryable and exc.http_status == 503 and exc.retry_after is None
    assert exc.message == f"{case.channel}: HTTP 503"


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("status", [400, 403])
async def test_other_4xx_are_final_and_name_the_api_error(case: Case, status: int, fake_api: FakeApi,
                                                          http: httpx.AsyncClient) -> None:
    secrets = list(case.secrets(fake_api.url).values())
    # an API echoing a credential back must not put it into lastError
    detail = f"Forbidden: bot token {secrets[0]} rejected" if secrets else "Forbidden: rejected"
    fake_api.respond = lambda req: Reply(status, error_body(detail), {"Retry-After": "5"})
    exc, sent = await failing_send(make(case, fake_api.url, http), case, ["the confidential text"])
    assert not exc.retryable and exc.http_status == status and exc.retry_after is None
    masked = "Forbidden: bot token *** rejected" if secrets else detail
    assert exc.message == f"{case.channel}: HTTP {status}: {masked}"
    assert sent.calls == []
    assert_clean(exc, case, fake_api.url, "the confidential text")


@pytest.mark.parametrize("channel", ["msteams", "googlechat"])
async def test_an_error_quoting_part_of_a_secret_webhook_url_is_masked(channel: str, fake_api: FakeApi,
                                                                       http: httpx.AsyncClient) -> None:
    """The webhook URL is the credential: an API quoting its path or a query value alone (`?key=…`)
    must not put that into lastError either (only the whole URL was masked)."""
    key, token = "AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI", "q7Xk2mP9vR4tL8nB6wZ3yC1aD5eF0gH2"
    case = Case(channel, "room", lambda u: {}, lambda u: {"webhooks.room": f"{u}/v1/spaces/AAAA/messages?key={key}&token={token}"},
                lambda u: "/v1/spaces/AAAA/messages", lambda t: {"text": t}, lambda n: None)
    fake_api.respond = lambda req: Reply(400, error_body(
        f"bad request to /v1/spaces/AAAA/messages?key={key}&token={token}; key {key} invalid; token={token}"))
    exc, _ = await failing_send(make(case, fake_api.url, http), case, ["hi"])
    assert key not in exc.message and token not in exc.message, exc.message
    assert exc.message == f"{channel}: HTTP 400: bad request to ***; key *** invalid; token=***"


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_a_long_api_error_is_cut(case: Case, fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(400, error_body("x" * 5000))
    exc, _ = await failing_send(make(case, fake_api.url, http), case, ["hi"])
    assert len(exc.message) < len(case.channel) + 220


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_a_slow_api_times_out_retryably(case: Case, fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(slow=True)
    began = time.monotonic()
    exc, _ = await failing_send(make(case, fake_api.url, http, timeout=0.3), case, ["hi"])
    assert time.monotonic() - began < 3
    assert exc.retryable and exc.http_status is None
    assert exc.message == f"{case.channel}: timeout"


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_connection_refused_is_retryable(case: Case, http: httpx.AsyncClient) -> None:
    url = closed_port_url()
    exc, _ = await failing_send(make(case, url, http), case, ["hi"])
    assert exc.retryable and exc.http_status is None
    assert exc.message == f"{case.channel}: connection error"
    assert_clean(exc, case, url)


@pytest.mark.parametrize("case", WITH_SECRET, ids=str)
async def test_an_unresolved_secret_fails_without_a_request(case: Case, fake_api: FakeApi,
                                                            http: httpx.AsyncClient) -> None:
    secrets: dict[str, str | SecretSource] = dict(case.secrets(fake_api.url))
    key = next(iter(secrets))
    secrets[key] = SecretSource(f"channels.{case.channel}.{key}", "env:default:HG_TOKEN", None,
                                "Environment variable HG_TOKEN is missing or empty.")
    exc, sent = await failing_send(make(case, fake_api.url, http, secrets=secrets), case, ["hi"])
    assert not exc.retryable
    assert exc.message == f"{case.channel}: {key}: Environment variable HG_TOKEN is missing or empty."
    assert fake_api.requests == [] and sent.calls == []


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_a_failure_mid_text_keeps_the_earlier_parts_sent(case: Case, fake_api: FakeApi,
                                                               http: httpx.AsyncClient) -> None:
    from fakeapi import default_answer

    fake_api.respond = lambda req: Reply(500, None) if req.seq == 2 else default_answer(req)
    exc, sent = await failing_send(make(case, fake_api.url, http), case, ["a", "b", "c"])
    assert exc.retryable and exc.http_status == 500
    assert sent.calls == [(0, case.message_id(1))]
    assert len(fake_api.requests) == 2  # "c" was not tried


# --- channel specifics -----------------------------------------------------------------------------

CASE = {c.channel: c for c in CASES}


async def test_retry_after_as_an_http_date(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    when = email.utils.formatdate(NOW + 95, usegmt=True)
    fake_api.respond = lambda req: Reply(503, None, {"Retry-After": when})
    exc, _ = await failing_send(make(CASE["discord"], fake_api.url, http), CASE["discord"], ["hi"])
    assert exc.retryable and exc.retry_after == pytest.approx(95)


async def test_telegram_retry_after_from_the_body(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(429, {"ok": False, "error_code": 429,
                                               "description": "Too Many Requests: retry after 7",
                                               "parameters": {"retry_after": 7}})
    exc, _ = await failing_send(make(CASE["telegram"], fake_api.url, http), CASE["telegram"], ["hi"])
    assert exc.retryable and exc.retry_after == 7
    assert exc.message == "telegram: HTTP 429: Too Many Requests: retry after 7"
    # a negative one is no value, as a negative Retry-After header: the usual wait (it was 0: at once)
    fake_api.respond = lambda req: Reply(429, {"ok": False, "error_code": 429, "description": "slow down",
                                               "parameters": {"retry_after": -5}})
    exc, _ = await failing_send(make(CASE["telegram"], fake_api.url, http), CASE["telegram"], ["hi"])
    assert exc.retryable and exc.retry_after is None


@pytest.mark.parametrize("channel", ["telegram", "slack"])
async def test_ok_false_is_final(channel: str, fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(200, {"ok": False, "error": "channel_not_found",
                                               "description": "channel_not_found"})
    exc, sent = await failing_send(make(CASE[channel], fake_api.url, http), CASE[channel], ["hi"])
    assert not exc.retryable and exc.http_status == 200
    assert exc.message == f"{channel}: channel_not_found"
    assert sent.calls == []


async def test_slack_ratelimited_is_retryable(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(200, {"ok": False, "error": "ratelimited"}, {"Retry-After": "30"})
    exc, _ = await failing_send(make(CASE["slack"], fake_api.url, http), CASE["slack"], ["hi"])
    assert exc.retryable and exc.retry_after == 30 and exc.message == "slack: ratelimited"


@pytest.mark.parametrize("body", [b'{"ok":true,"status":"re\xe7u","id":"x"}', b"[" * 100_000 + b"]" * 100_000])
async def test_a_2xx_answer_no_decoder_takes_is_still_a_2xx(body: bytes, fake_api: FakeApi,
                                                            http: httpx.AsyncClient) -> None:
    """model.md §10.2: for the webhook channel any 2xx is delivered. msgspec raised UnicodeDecodeError
    (a Latin-1 byte) or RecursionError (deep nesting) on such an answer, not its DecodeError: the
    delivery counted as an internal error, was sent again twice and dead-lettered."""
    fake_api.respond = lambda req: Reply(200, body)
    case = CASE["webhook"]
    sent = Sent()
    await make(case, fake_api.url, http).send(case.to, ["hi"], 0, ENVELOPE, sent)
    assert len(fake_api.requests) == 1 and len(sent.calls) == 1


async def test_a_4xx_answer_no_decoder_takes_is_final(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(400, b'{"ok":false,"description":"bad \xff"}')
    exc, _ = await failing_send(make(CASE["telegram"], fake_api.url, http), CASE["telegram"], ["hi"])
    assert not exc.retryable and exc.http_status == 400 and exc.message.startswith("telegram: HTTP 400")


async def test_telegram_answer_that_is_not_its_shape_is_final(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(200, "<html>captive portal</html>")
    exc, _ = await failing_send(make(CASE["telegram"], fake_api.url, http), CASE["telegram"], ["hi"])
    assert not exc.retryable and exc.message == "telegram: unexpected answer"


@pytest.mark.parametrize("channel", ["msteams", "googlechat"])
async def test_unknown_webhook_target_is_final(channel: str, fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    case = CASE[channel]
    sent = Sent()
    with pytest.raises(DeliveryError) as info:
        await make(case, fake_api.url, http).send("nope", ["hi"], 0, ENVELOPE, sent)
    assert not info.value.retryable and info.value.message == f"{channel}: unknown target nope"
    assert fake_api.requests == []


async def test_msteams_plain_text_error_is_reported(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(400, "Bad payload received by generic incoming webhook.")
    exc, _ = await failing_send(make(CASE["msteams"], fake_api.url, http), CASE["msteams"], ["hi"])
    assert exc.message == "msteams: HTTP 400: Bad payload received by generic incoming webhook."


async def test_html_error_pages_are_not_quoted(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(502, None, {"content-type": "text/html"})
    exc, _ = await failing_send(make(CASE["line"], fake_api.url, http), CASE["line"], ["hi"])
    assert exc.message == "line: HTTP 502"


async def test_missing_required_option_is_final(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    cfg = settings("mattermost", {}, {"token": "MM-SECRET"})
    sent = Sent()
    with pytest.raises(DeliveryError) as info:
        await HTTP_ADAPTERS["mattermost"](cfg, http).send("c", ["hi"], 0, ENVELOPE, sent)
    assert not info.value.retryable and info.value.message == "mattermost: baseUrl is not configured"


async def test_default_api_base_urls_come_from_the_schema(http: httpx.AsyncClient) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"ok": True, "result": {"message_id": 1}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as mock:
        cfg = settings("telegram", {}, {"botToken": "T"})
        await HTTP_ADAPTERS["telegram"](cfg, mock).send("1", ["hi"], 0, ENVELOPE, Sent())
    assert seen == ["https://api.telegram.org/botT/sendMessage"]
    assert CHANNEL_SCHEMAS["telegram"].fields["apiBaseUrl"].default == "https://api.telegram.org"


def verify_standard_webhook(req: Recorded, key: bytes) -> bool:
    signed = f"{req.headers['webhook-id']}.{req.headers['webhook-timestamp']}.".encode() + req.raw
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    given = [e.split(",", 1)[1] for e in req.headers["webhook-signature"].split() if e.startswith("v1,")]
    return any(hmac.compare_digest(g, expected) for g in given)


async def test_webhook_is_signed_the_standard_webhooks_way(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    case = CASE["webhook"]
    options = case.options(fake_api.url)
    # a configured header cannot replace the signature headers
    options["headers"] = {**options["headers"], "webhook-signature": "v1,forged", "Authorization": "Bearer abc"}
    cfg = settings("webhook", options, {"secret": WEBHOOK_SECRET})
    await HTTP_ADAPTERS["webhook"](cfg, http, clock=lambda: NOW).send("ops-room", ["deploy done"], 0, ENVELOPE,
                                                                       Sent())
    [req] = fake_api.requests
    assert req.headers["webhook-id"] == "dlv_01HX"
    assert req.headers["webhook-timestamp"] == str(int(NOW))
    assert req.headers["authorization"] == "Bearer abc"
    assert verify_standard_webhook(req, WEBHOOK_KEY)
    assert not verify_standard_webhook(req, b"another key")
    assert json.loads(req.raw)["text"] == "deploy done"


async def test_webhook_configured_user_agent_replaces_hookgates(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    """A configured header may replace the user agent, whatever the case of its name: one User-Agent."""
    cfg = settings("webhook", {"url": fake_api.url + "/hook", "headers": {"User-Agent": "acme-bot/2"}}, {})
    await HTTP_ADAPTERS["webhook"](cfg, http).send("t", ["x"], 0, ENVELOPE, Sent())
    [req] = fake_api.requests
    assert req.headers["user-agent"] == "acme-bot/2"


async def test_quoted_credentials_are_masked_but_plain_header_values_kept(fake_api: FakeApi,
                                                                          http: httpx.AsyncClient) -> None:
    """An API that quotes the request back: a credential-length header value (and the token after its
    scheme) is masked in the error; a short plain one (X-Api-Version: 2) is not looked for, so the
    error's own text — HTTP 400 — stays whole."""
    headers = {"X-Api-Version": "2", "Authorization": "Bearer tok-7Qx1mZ93"}
    cfg = settings("webhook", {"url": fake_api.url + "/hook", "headers": headers}, {})
    fake_api.respond = lambda req: Reply(400, {"error": f"v2 rejected {req.headers['authorization']} "
                                                        f"and tok-7Qx1mZ93"})
    with pytest.raises(DeliveryError) as caught:
        await HTTP_ADAPTERS["webhook"](cfg, http).send("t", ["x"], 0, ENVELOPE, Sent())
    assert caught.value.message == "webhook: HTTP 400: v2 rejected *** and ***"


async def test_webhook_without_a_secret_is_unsigned(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    cfg = settings("webhook", {"url": fake_api.url + "/hook"}, {})
    await HTTP_ADAPTERS["webhook"](cfg, http).send("t", ["x"], 0, ENVELOPE, Sent())
    [req] = fake_api.requests
    assert not {"webhook-id", "webhook-timestamp", "webhook-signature"} & set(req.headers)
    assert req.body["to"] == "t"


@pytest.mark.parametrize("status", [200, 201, 202, 204])
async def test_webhook_any_2xx_is_delivered(status: int, fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(status, None if status == 204 else "whatever")
    sent = Sent()
    await make(CASE["webhook"], fake_api.url, http).send("t", ["x"], 0, ENVELOPE, sent)
    assert sent.calls == [(0, None)]


async def test_webhook_410_is_final(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(410, None)
    exc, _ = await failing_send(make(CASE["webhook"], fake_api.url, http), CASE["webhook"], ["x"])
    assert not exc.retryable and exc.message == "webhook: HTTP 410"


async def test_imessage_fresh_temp_guid_and_method(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    cfg = settings("imessage", {"serverUrl": fake_api.url, "method": "apple-script"}, {"password": "BB-SECRET"})
    await HTTP_ADAPTERS["imessage"](cfg, http).send("iMessage;-;a@b.c", ["one", "two"], 0, ENVELOPE, Sent())
    guids = [r.body["tempGuid"] for r in fake_api.requests]
    assert len(set(guids)) == 2 and all(uuid.UUID(g) for g in guids)
    assert [r.body["method"] for r in fake_api.requests] == ["apple-script", "apple-script"]


async def test_imessage_body_status_must_be_200(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    fake_api.respond = lambda req: Reply(200, {"status": 400, "message": "Chat does not exist",
                                               "error": {"type": "Validation Error", "error": "no chat"}})
    exc, sent = await failing_send(make(CASE["imessage"], fake_api.url, http), CASE["imessage"], ["hi"])
    assert not exc.retryable and exc.message == "imessage: no chat" and sent.calls == []


@pytest.mark.parametrize("url", ["ftp://ops.example.com/in", "ops.example.com/in"])
async def test_a_url_httpx_cannot_use_is_final(url: str, http: httpx.AsyncClient) -> None:
    cfg = settings("webhook", {"url": url}, {})
    with pytest.raises(DeliveryError) as info:
        await HTTP_ADAPTERS["webhook"](cfg, http).send("t", ["x"], 0, ENVELOPE, Sent())
    assert not info.value.retryable and info.value.message == "webhook: unsupported URL scheme"

# --- the factory -----------------------------------------------------------------------------------

async def test_build_adapter_knows_every_channel(http: httpx.AsyncClient) -> None:
    for channel in CHANNEL_SCHEMAS:
        adapter = build_adapter(ChannelSettings(id=channel), http)
        assert adapter.channel == channel
        await adapter.aclose()
    assert isinstance(build_adapter(ChannelSettings(id="console"), http), ConsoleAdapter)
    assert isinstance(build_adapter(ChannelSettings(id="file"), http), FileAdapter)
    with pytest.raises(ValueError):
        build_adapter(ChannelSettings(id="carrier-pigeon"), http)


# --- console and file ------------------------------------------------------------------------------

async def test_console_writes_one_json_line_per_part_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    adapter = ConsoleAdapter(ChannelSettings(id="console"))
    assert adapter.split("x" * 50_000) == ["x" * 50_000]
    sent = Sent()
    await adapter.send("ops", ["héllo\nworld", "second"], 0, ENVELOPE, sent)
    out, err = capsys.readouterr()
    assert [json.loads(line) for line in out.splitlines()] == [
        {"channel": "console", "to": "ops", "text": "héllo\nworld", "runId": "run_42", "agentId": "main"},
        {"channel": "console", "to": "ops", "text": "second", "runId": "run_42", "agentId": "main"},
    ]
    assert err == ""
    assert sent.calls == [(0, None), (1, None)]


async def test_file_appends_lines_with_ts(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.jsonl"
    path.write_text('{"earlier":true}\n')
    adapter = FileAdapter(ChannelSettings(id="file", options={"path": str(path)}), clock=lambda: NOW)
    sent = Sent()
    await adapter.send("audit", ["one"], 0, ENVELOPE, sent)
    await adapter.send("audit", ["skipped", "two"], 1, ENVELOPE, sent)
    lines = [msgspec.json.decode(line) for line in path.read_bytes().splitlines()]
    base = {"channel": "file", "to": "audit", "runId": "run_42", "agentId": "main", "ts": int(NOW * 1000)}
    assert lines == [{"earlier": True}, {**base, "text": "one"}, {**base, "text": "two"}]
    assert sent.calls == [(0, None), (1, None)]


async def test_file_default_path_is_in_the_working_directory(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    await FileAdapter(ChannelSettings(id="file")).send("t", ["x"], 0, ENVELOPE, Sent())
    [line] = (tmp_path / "hookgate-deliveries.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["text"] == "x" and isinstance(record["ts"], int)


async def test_file_os_error_is_final(tmp_path: Path) -> None:
    adapter = FileAdapter(ChannelSettings(id="file", options={"path": str(tmp_path)}))  # a directory
    sent = Sent()
    with pytest.raises(DeliveryError) as info:
        await adapter.send("t", ["secret words"], 0, ENVELOPE, sent)
    assert not info.value.retryable
    assert info.value.message == "file: Is a directory"
    assert sent.calls == []



async def test_a_request_the_client_refuses_to_send_is_not_retried(fake_api: FakeApi, http: httpx.AsyncClient) -> None:
    """A header httpx will not put on the wire (config validation refuses such headers; this is the
    adapter's own guard): no request leaves, and retrying could never succeed — dead, not retry."""
    case = CASE["webhook"]
    options = case.options(fake_api.url)
    options["headers"] = {"X Team": "ops"}
    adapter = HTTP_ADAPTERS["webhook"](settings("webhook", options, {}), http, clock=lambda: NOW)
    exc, sent = await failing_send(adapter, case, ["hi"])
    assert not exc.retryable and exc.http_status is None
    assert exc.message == "webhook: request refused by the HTTP client"
    assert fake_api.requests == [] and sent.calls == []
