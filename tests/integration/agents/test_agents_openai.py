"""The openai runtime against a real loopback server speaking the Chat Completions shape."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from hookgate.agents.base import AgentRuntimeError, RuntimeRequest, build_runtime
from hookgate.agents.models import choose_model, complete_with_fallbacks
from hookgate.agents.openai import OpenAIRuntime
from hookgate.config.settings import AgentSettings, SecretSource


def request(**changes: Any) -> RuntimeRequest:
    fields: dict[str, Any] = {
        "agent_id": "main",
        "run_kind": "hook",
        "session_key": "hook:gh",
        "run_id": "run-1",
        "model": "gpt-4o",
        "thinking": "off",
        "system_prompt": None,
        "history": (),
        "prompt": "Hello",
        "subject": "Hello",
    }
    fields.update(changes)
    return RuntimeRequest(**fields)


def agent(base_url: str, *, key: str | None = "sk-test", **runtime: Any) -> AgentSettings:
    secrets = {"apiKey": SecretSource("agents.defaults.runtime.apiKey", "string", key)} if key else {}
    return AgentSettings(
        id="main", runtime={"kind": "openai", "baseUrl": f"{base_url}/v1", **runtime}, runtime_secrets=secrets
    )


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=None) as client:
        yield client


async def test_request_shape_and_reply(model_api: Any, http: httpx.AsyncClient) -> None:
    rt = build_runtime(agent(model_api.url, headers={"X-Org": "acme"}), http=http)
    reply = await rt.complete(
        request(
            system_prompt="Be brief.",
            history=(("user", "earlier"), ("assistant", "ok")),
            thinking="medium",
            params={"temperature": 0.3, "max_tokens": 50},
        )
    )
    assert reply == "hello from gpt-4o"
    [rec] = model_api.requests
    assert (rec.method, rec.path) == ("POST", "/v1/chat/completions")
    assert rec.headers["authorization"] == "Bearer sk-test"
    assert rec.headers["x-org"] == "acme"
    assert rec.headers["content-type"] == "application/json"
    assert rec.body == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "Hello"},
        ],
        "stream": False,
        "reasoning_effort": "medium",
        "temperature": 0.3,
        "max_tokens": 50,
    }
    await rt.aclose()
    assert not http.is_closed  # a shared client is not the runtime's to close


@pytest.mark.parametrize(
    ("level", "effort"),
    [
        ("off", None),
        (None, None),
        ("adaptive", None),
        ("minimal", "minimal"),
        ("low", "low"),
        ("high", "high"),
        ("xhigh", "high"),
        ("max", "high"),
    ],
)
async def test_reasoning_effort(
    model_api: Any, http: httpx.AsyncClient, level: str | None, effort: str | None
) -> None:
    rt = build_runtime(agent(model_api.url), http=http)
    await rt.complete(request(thinking=level))
    body = model_api.requests[0].body
    assert body.get("reasoning_effort") == effort
    assert "system" not in [m["role"] for m in body["messages"]]


async def test_no_key_no_authorization_and_default_model(model_api: Any) -> None:
    rt = build_runtime(agent(model_api.url, key=None, model="openai/gpt-4.1-mini"))
    try:
        assert await rt.complete(request(model=None)) == "hello from gpt-4.1-mini"
    finally:
        await rt.aclose()  # closes its own client
    rec = model_api.requests[0]
    assert "authorization" not in rec.headers
    assert rec.body["model"] == "gpt-4.1-mini"


async def test_params_cannot_replace_the_fixed_keys(model_api: Any, http: httpx.AsyncClient) -> None:
    rt = build_runtime(agent(model_api.url), http=http)
    await rt.complete(request(params={"model": "x", "stream": True, "messages": [], "top_p": 0.5}))
    body = model_api.requests[0].body
    assert (body["model"], body["stream"], len(body["messages"]), body["top_p"]) == ("gpt-4o", False, 1, 0.5)


@pytest.mark.parametrize(
    ("content", "text"),
    [
        (
            [
                {"type": "text", "text": "Hello "},
                {"type": "image_url", "image_url": {}},
                {"type": "text", "text": "world"},
            ],
            "Hello world",
        ),
        (None, ""),
        ("  spaced reply \n", "  spaced reply \n"),
    ],
)
async def test_reply_content_shapes(model_api: Any, http: httpx.AsyncClient, content: Any, text: str) -> None:
    model_api.respond = lambda req: (
        200,
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]},
    )
    rt = build_runtime(agent(model_api.url), http=http)
    assert await rt.complete(request()) == text


async def test_http_500_is_retryable_with_the_exact_text(model_api: Any, http: httpx.AsyncClient) -> None:
    model_api.respond = lambda req: (500, {"error": {"message": "upstream error", "type": "server_error"}})
    rt = build_runtime(agent(model_api.url), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert info.value.message == "openai: HTTP 500: upstream error"
    assert info.value.retryable is True


async def test_http_429_is_retryable(model_api: Any, http: httpx.AsyncClient) -> None:
    model_api.respond = lambda req: (429, {"error": {"message": "Rate limit reached", "type": "requests"}})
    rt = build_runtime(agent(model_api.url), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert (info.value.message, info.value.retryable) == ("openai: HTTP 429: Rate limit reached", True)


async def test_http_400_is_not_retryable(model_api: Any, http: httpx.AsyncClient) -> None:
    model_api.respond = lambda req: (400, {"error": {"message": "Unknown parameter: 'foo'."}})
    rt = build_runtime(agent(model_api.url), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert (info.value.message, info.value.retryable) == (
        "openai: HTTP 400: Unknown parameter: 'foo'.",
        False,
    )


async def test_error_body_text_is_cut_to_200_characters(model_api: Any, http: httpx.AsyncClient) -> None:
    model_api.respond = lambda req: (502, "<html>\n  bad gateway " + "x" * 400 + "</html>")
    rt = build_runtime(agent(model_api.url), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    prefix = "openai: HTTP 502: "
    assert info.value.message.startswith(prefix + "<html> bad gateway xxx")
    assert len(info.value.message) == len(prefix) + 200
    assert info.value.retryable is True


async def test_invalid_json_answer_is_not_retryable(model_api: Any, http: httpx.AsyncClient) -> None:
    model_api.respond = lambda req: (200, "not json")
    rt = build_runtime(agent(model_api.url), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert (info.value.message, info.value.retryable) == ("openai: invalid response: body is not JSON", False)


@pytest.mark.parametrize("body", [
    b'{"choices":[{"message":{"role":"assistant","content":"caf\xe9"}}]}',  # Latin-1, not UTF-8
    b"[" * 200_000 + b"]" * 200_000,
])
async def test_an_answer_no_decoder_takes_is_an_invalid_response(model_api: Any, http: httpx.AsyncClient,
                                                                 body: bytes) -> None:
    """msgspec raises UnicodeDecodeError and RecursionError, not its DecodeError, for these: they
    escaped the runtime, the worker counted a crash, the run was retried and then ended `lost`."""
    model_api.respond = lambda req: (200, body)
    rt = build_runtime(agent(model_api.url), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert (info.value.message, info.value.retryable) == ("openai: invalid response: body is not JSON", False)
    # the same in an error answer: the status decides, the body gives no message
    model_api.respond = lambda req: (429, b'{"error":{"message":"slow down \xff"}}')
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert info.value.message.startswith("openai: HTTP 429: ") and info.value.retryable is True


async def test_an_error_quoting_the_api_key_is_masked_and_on_one_line(model_api: Any, http: httpx.AsyncClient) -> None:
    """A provider's 401 quotes the key it got (``Incorrect API key provided: sk-…``): the text becomes
    the run's stored error and the summary the main session (and its model) reads."""
    model_api.respond = lambda req: (401, {"error": {"message": "Incorrect API key provided: sk-test-0123456789.\x00\n"
                                                                "Header X-Org acme-secret-org."}})
    rt = build_runtime(agent(model_api.url, key="sk-test-0123456789", headers={"X-Org": "acme-secret-org"}), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert info.value.message == "openai: HTTP 401: Incorrect API key provided: ***. Header X-Org ***."
    # a key where the text is cut (200 characters): masked before the cut, so no prefix of it survives
    model_api.respond = lambda req: (401, {"error": {"message": "x" * 190 + " sk-test-0123456789 rejected"}})
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert "sk-" not in info.value.message and "x *** rej" in info.value.message, info.value.message


@pytest.mark.parametrize(("status", "body", "message"), [
    (302, "", "openai: HTTP 302: Found"),
    (204, None, "openai: invalid response: HTTP 204 with an empty body"),
])
async def test_a_redirect_or_an_empty_answer_says_so(model_api: Any, http: httpx.AsyncClient, status: int,
                                                    body: Any, message: str) -> None:
    model_api.respond = lambda req: (status, body if body is not None else b"")
    rt = build_runtime(agent(model_api.url), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert (info.value.message, info.value.retryable) == (message, False)


async def test_a_reply_holding_half_an_emoji_is_read(model_api: Any, http: httpx.AsyncClient) -> None:
    """RFC 8259 §8.2: ``"\\ud83d"`` is valid JSON (a reply cut inside a pair): U+FFFD in its place."""
    model_api.respond = lambda req: (200, b'{"choices":[{"message":{"role":"assistant","content":"ok \\ud83d"}}]}')
    rt = build_runtime(agent(model_api.url), http=http)
    assert await rt.complete(request()) == "ok \ufffd"


async def test_connection_refused_is_retryable(http: httpx.AsyncClient) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rt = build_runtime(agent(f"http://127.0.0.1:{port}"), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert info.value.message.startswith("openai: ")
    assert info.value.retryable is True


async def test_request_timeout_is_retryable(model_api: Any, http: httpx.AsyncClient) -> None:
    model_api.respond = lambda req: (0, None)  # never answers
    rt = build_runtime(agent(model_api.url, requestTimeoutSeconds=0.2), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert (info.value.message, info.value.retryable) == ("openai: request timed out after 0.2s", True)


async def test_fallback_to_the_next_model_on_5xx(model_api: Any, http: httpx.AsyncClient) -> None:
    def respond(req: Any) -> tuple[int, Any]:
        model = req.body["model"]
        if model == "o3":
            return 503, {"error": {"message": "overloaded"}}
        return 200, {"choices": [{"message": {"role": "assistant", "content": f"from {model}"}}]}

    model_api.respond = respond
    settings = AgentSettings(
        id="main",
        runtime={"kind": "openai", "baseUrl": f"{model_api.url}/v1"},
        model={"primary": "openai/o3", "fallbacks": ["openai/gpt-4o"]},
    )
    models = {"openai/gpt-4o": {"params": {"temperature": 0}}}
    rt = build_runtime(settings, http=http)
    choice = choose_model(
        override=None, gmail_default=None, agent=settings, defaults_model=None, models=models, runtime=rt
    )
    reply, used = await complete_with_fallbacks(rt, request(model=choice.model, params=choice.params), choice)
    assert (reply, used) == ("from gpt-4o", "openai/gpt-4o")
    assert [r.body["model"] for r in model_api.requests] == ["o3", "gpt-4o"]
    assert "temperature" not in model_api.requests[0].body
    assert model_api.requests[1].body["temperature"] == 0


async def test_no_fallback_on_4xx(model_api: Any, http: httpx.AsyncClient) -> None:
    model_api.respond = lambda req: (401, {"error": {"message": "Incorrect API key provided"}})
    settings = AgentSettings(
        id="main",
        runtime={"kind": "openai", "baseUrl": f"{model_api.url}/v1"},
        model={"primary": "openai/o3", "fallbacks": ["openai/gpt-4o"]},
    )
    rt = build_runtime(settings, http=http)
    choice = choose_model(
        override=None, gmail_default=None, agent=settings, defaults_model=None, models={}, runtime=rt
    )
    with pytest.raises(AgentRuntimeError) as info:
        await complete_with_fallbacks(rt, request(), choice)
    assert info.value.message == "openai: HTTP 401: Incorrect API key provided"
    assert len(model_api.requests) == 1


async def test_cancellation_aborts_the_request(model_api: Any, http: httpx.AsyncClient) -> None:
    model_api.respond = lambda req: (0, None)  # a slow server
    rt = build_runtime(agent(model_api.url), http=http)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(rt.complete(request()), 0.3)
    assert time.monotonic() - start < 2
    # the server sees the client close its connection
    assert await asyncio.to_thread(model_api.disconnected.wait, 5)
    assert len(model_api.requests) == 1


async def test_own_client_is_closed(model_api: Any) -> None:
    rt = build_runtime(agent(model_api.url))
    assert isinstance(rt, OpenAIRuntime)
    await rt.complete(request())
    client = rt._http.get()
    await rt.aclose()
    assert client.is_closed
