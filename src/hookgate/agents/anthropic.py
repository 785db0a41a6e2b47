"""The ``anthropic`` runtime (model.md §8): one non-streaming Messages API call per attempt.

``POST <baseUrl>/v1/messages`` with ``x-api-key`` and ``anthropic-version: 2023-06-01``; the body is
``{"model", "max_tokens", "system"?, "messages"}`` plus, for a level with a budget (§9.3),
``thinking: {"type": "enabled", "budget_tokens": n}`` with ``max_tokens = maxTokens + n``, then the
model's ``params`` (which may not replace ``model``, ``system`` or ``messages``). The reply is the
``text`` content blocks concatenated. Failures: see ``agents.http``.
"""

from __future__ import annotations

from typing import Any

import httpx

from hookgate.agents.base import (
    ANTHROPIC_BASE_URL,
    ANTHROPIC_MAX_TOKENS,
    ANTHROPIC_VERSION,
    REQUEST_TIMEOUT_SECONDS,
    AgentRuntimeError,
    RuntimeRequest,
    configured_model_id,
)
from hookgate.agents.http import HttpClient, invalid_response, post_json
from hookgate.agents.models import THINKING_BUDGET_TOKENS
from hookgate.config.modelrefs import runtime_provider

_FIXED_KEYS = ("model", "system", "messages")


def reply_text(body: Any, kind: str = "anthropic") -> str:
    """The ``text`` blocks of a Messages API answer, concatenated."""
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, list):
        raise invalid_response(kind, "no content blocks")
    return "".join(
        block["text"]
        for block in content
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
    )


class AnthropicRuntime:
    kind = "anthropic"

    def __init__(
        self, config: dict[str, Any], *, api_key: str | None = None, http: httpx.AsyncClient | None = None
    ) -> None:
        self.provider = runtime_provider(config)
        self.default_model = configured_model_id(config, self.provider)
        self.base_url = str(config.get("baseUrl") or ANTHROPIC_BASE_URL).rstrip("/")
        self.timeout = float(config.get("requestTimeoutSeconds") or REQUEST_TIMEOUT_SECONDS)
        self.max_tokens = int(config.get("maxTokens") or ANTHROPIC_MAX_TOKENS)
        self.api_key = api_key
        self._http = HttpClient(http)

    def body(self, request: RuntimeRequest) -> dict[str, Any]:
        model = request.model or self.default_model
        if not model:
            raise AgentRuntimeError(f"{self.kind}: no model configured")
        # The Messages API refuses a first message that is not the user's (400 "first message must
        # use the user role"): a history window cut after a user message starts with the reply to it
        history = list(request.history)
        while history and history[0][0] != "user":
            del history[0]
        messages = [{"role": role, "content": content} for role, content in history]
        messages.append({"role": "user", "content": request.prompt})
        body: dict[str, Any] = {"model": model, "max_tokens": self.max_tokens}
        if request.system_prompt:
            body["system"] = request.system_prompt
        body["messages"] = messages
        budget = THINKING_BUDGET_TOKENS.get(request.thinking or "off")
        if budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            body["max_tokens"] = self.max_tokens + budget
        body.update({k: v for k, v in request.params.items() if k not in _FIXED_KEYS})
        return body

    async def complete(self, request: RuntimeRequest) -> str:
        if not self.api_key:
            raise AgentRuntimeError(f"{self.kind}: apiKey is not set")
        headers = httpx.Headers({"x-api-key": self.api_key, "anthropic-version": ANTHROPIC_VERSION})
        answer = await post_json(
            self._http.get(),
            kind=self.kind,
            url=f"{self.base_url}/v1/messages",
            headers=headers,
            body=self.body(request),
            timeout=self.timeout,
        )
        return reply_text(answer, self.kind)

    async def aclose(self) -> None:
        await self._http.aclose()
