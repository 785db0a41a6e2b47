"""The anthropic runtime against a real loopback server speaking the Messages API shape."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from hookgate.agents.base import AgentRuntimeError, RuntimeRequest, build_runtime
from hookgate.agents.models import choose_model, complete_with_fallbacks
from hookgate.config.settings import AgentSettings, SecretSource


def request(**changes: Any) -> RuntimeRequest:
    fields: dict[str, Any] = {
        "agent_id": "main",
        "run_kind": "heartbeat",
        "session_key": "agent:main:main",
        "run_id": "run-2",
        "model": "claude-sonnet-4-5",
        "thinking": "off",
        "system_prompt": None,
        "history": (),
        "prompt": "Review the system events above",
        "subject": "",
    }
    fields.update(changes)
    return RuntimeRequest(**fields)


def agent(base_url: str, **runtime: Any) -> AgentSettings:
    return AgentSettings(
        id="main",
        runtime={"kind": "anthropic", "baseUrl": base_url, **runtime},
        runtime_secrets={"apiKey": SecretSource("agents.defaults.runtime.apiKey", "string", "sk-ant-test")},
    )


def message(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": list(blocks),
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=None) as client:
        yield client


async def test_request_shape_and_reply(model_api: Any, http: httpx.AsyncClient) -> None:
    rt = build_runtime(agent(model_api.url, maxTokens=1000), http=http)
    reply = await rt.complete(
        request(
            system_prompt="You are the ops agent.",
            history=(("user", "earlier"), ("assistant", "noted")),
            params={"temperature": 1, "top_k": 5},
        )
    )
    assert reply == "hello from claude-sonnet-4-5"
    [rec] = model_api.requests
    assert (rec.method, rec.path) == ("POST", "/v1/messages")
    assert rec.headers["x-api-key"] == "sk-ant-test"
    assert rec.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in rec.headers
    assert rec.body == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1000,
        "system": "You are the ops agent.",
        "messages": [
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": "noted"},
            {"role": "user", "content": "Review the system events above"},
        ],
        "temperature": 1,
        "top_k": 5,
    }


async def test_history_starts_with_a_user_message(model_api: Any, http: httpx.AsyncClient) -> None:
    # a window of historyMessages cut after a user message (any odd count) began with an assistant
    # message, which the Messages API refuses with a 400: every heartbeat of the agent failed
    rt = build_runtime(agent(model_api.url), http=http)
    history = (("assistant", "first"), ("user", "second"), ("assistant", "third"))
    assert await rt.complete(request(history=history)) == "hello from claude-sonnet-4-5"
    [rec] = model_api.requests
    assert rec.body["messages"] == [
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "third"},
        {"role": "user", "content": "Review the system events above"},
    ]
    only_assistant = (("assistant", "a"), ("assistant", "b"))
    assert await rt.complete(request(history=only_assistant)) == "hello from claude-sonnet-4-5"
    assert model_api.requests[1].body["messages"] == [{"role": "user", "content": "Review the system events above"}]


@pytest.mark.parametrize(
    ("level", "budget"),
    [
        ("off", None),
        (None, None),
        ("adaptive", None),
        ("minimal", 1024),
        ("low", 2048),
        ("medium", 8192),
        ("high", 16384),
        ("xhigh", 32768),
        ("max", 32768),
    ],
)
async def test_thinking_budget(
    model_api: Any, http: httpx.AsyncClient, level: str | None, budget: int | None
) -> None:
    rt = build_runtime(agent(model_api.url), http=http)
    await rt.complete(request(thinking=level))
    body = model_api.requests[0].body
    assert "system" not in body
    if budget is None:
        assert "thinking" not in body
        assert body["max_tokens"] == 4096
    else:
        assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert body["max_tokens"] == 4096 + budget


async def test_text_blocks_are_concatenated(model_api: Any, http: httpx.AsyncClient) -> None:
    model_api.respond = lambda req: (
        200,
        message(
            {"type": "thinking", "thinking": "hmm", "signature": "x"},
            {"type": "text", "text": "Deploy "},
            {"type": "tool_use", "id": "t", "name": "n", "input": {}},
            {"type": "text", "text": "finished."},
        ),
    )
    rt = build_runtime(agent(model_api.url), http=http)
    assert await rt.complete(request(thinking="high")) == "Deploy finished."


async def test_default_model_from_the_runtime(model_api: Any, http: httpx.AsyncClient) -> None:
    rt = build_runtime(agent(model_api.url, model="anthropic/claude-haiku-4-5"), http=http)
    assert rt.default_model == "claude-haiku-4-5"
    assert await rt.complete(request(model=None)) == "hello from claude-haiku-4-5"


@pytest.mark.parametrize(
    ("status", "retryable"), [(500, True), (529, True), (429, True), (400, False), (401, False), (404, False)]
)
async def test_http_errors(model_api: Any, http: httpx.AsyncClient, status: int, retryable: bool) -> None:
    model_api.respond = lambda req: (
        status,
        {"type": "error", "error": {"type": "x", "message": "upstream error"}},
    )
    rt = build_runtime(agent(model_api.url), http=http)
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert info.value.message == f"anthropic: HTTP {status}: upstream error"
    assert info.value.retryable is retryable


async def test_missing_key_fails_without_a_request(model_api: Any, http: httpx.AsyncClient) -> None:
    rt = build_runtime(
        AgentSettings(id="main", runtime={"kind": "anthropic", "baseUrl": model_api.url}), http=http
    )
    with pytest.raises(AgentRuntimeError) as info:
        await rt.complete(request())
    assert (info.value.message, info.value.retryable) == ("anthropic: apiKey is not set", False)
    assert model_api.requests == []


async def test_fallback_on_overloaded(model_api: Any, http: httpx.AsyncClient) -> None:
    def respond(req: Any) -> tuple[int, Any]:
        if req.body["model"] == "claude-opus-4-1":
            return 529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return 200, message({"type": "text", "text": "fallback ok"})

    model_api.respond = respond
    settings = AgentSettings(
        id="main",
        runtime={"kind": "anthropic", "baseUrl": model_api.url},
        runtime_secrets={"apiKey": SecretSource("k", "string", "sk")},
        model={"primary": "anthropic/claude-opus-4-1", "fallbacks": ["claude-sonnet-4-5"]},
    )
    rt = build_runtime(settings, http=http)
    choice = choose_model(
        override=None, gmail_default=None, agent=settings, defaults_model=None, models={}, runtime=rt
    )
    assert await complete_with_fallbacks(rt, request(), choice) == (
        "fallback ok",
        "anthropic/claude-sonnet-4-5",
    )
    assert [r.body["model"] for r in model_api.requests] == ["claude-opus-4-1", "claude-sonnet-4-5"]


async def test_cancellation_aborts_the_request(model_api: Any, http: httpx.AsyncClient) -> None:
    model_api.respond = lambda req: (0, None)
    rt = build_runtime(agent(model_api.url), http=http)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(rt.complete(request()), 0.3)
    assert time.monotonic() - start < 2
    assert await asyncio.to_thread(model_api.disconnected.wait, 5)
