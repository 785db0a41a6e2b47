"""The ``openai`` runtime (model.md §8): one non-streaming Chat Completions call per attempt.

``POST <baseUrl>/chat/completions`` with ``Authorization: Bearer <apiKey>`` when a key is set and the
configured ``headers``; the body is ``{"model", "messages", "stream": false}`` plus
``reasoning_effort`` (§9.3, omitted for off/adaptive) and the model's ``params`` (which may not
replace ``model``, ``messages`` or ``stream``). The reply is ``choices[0].message.content``: a string,
or a list of parts whose text parts are concatenated. Failures: see ``agents.http``.
"""

from __future__ import annotations

from typing import Any

import httpx

from hookgate.agents.base import (
    OPENAI_BASE_URL,
    REQUEST_TIMEOUT_SECONDS,
    AgentRuntimeError,
    RuntimeRequest,
    configured_model_id,
)
from hookgate.agents.http import HttpClient, invalid_response, post_json
from hookgate.agents.models import REASONING_EFFORT
from hookgate.config.modelrefs import runtime_provider

_FIXED_KEYS = ("model", "messages", "stream")


def chat_messages(request: RuntimeRequest) -> list[dict[str, str]]:
    """System prompt (when set), the history, then the prompt as the last user message."""
    messages = [{"role": "system", "content": request.system_prompt}] if request.system_prompt else []
    messages.extend({"role": role, "content": content} for role, content in request.history)
    messages.append({"role": "user", "content": request.prompt})
    return messages


def reply_text(body: Any, kind: str = "openai") -> str:
    """``choices[0].message.content`` of a chat completion as text."""
    try:
        content = body["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise invalid_response(kind, "no choices[0].message") from None
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") in ("text", "output_text"):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "".join(parts)
    raise invalid_response(kind, "message.content is not text")


class OpenAIRuntime:
    kind = "openai"

    def __init__(
        self, config: dict[str, Any], *, api_key: str | None = None, http: httpx.AsyncClient | None = None
    ) -> None:
        self.provider = runtime_provider(config)
        self.default_model = configured_model_id(config, self.provider)
        self.base_url = str(config.get("baseUrl") or OPENAI_BASE_URL).rstrip("/")
        self.timeout = float(config.get("requestTimeoutSeconds") or REQUEST_TIMEOUT_SECONDS)
        self.headers = httpx.Headers(dict(config.get("headers") or {}))
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"
        self._http = HttpClient(http)

    def body(self, request: RuntimeRequest) -> dict[str, Any]:
        model = request.model or self.default_model
        if not model:
            raise AgentRuntimeError(f"{self.kind}: no model configured")
        body: dict[str, Any] = {"model": model, "messages": chat_messages(request), "stream": False}
        effort = REASONING_EFFORT.get(request.thinking or "off")
        if effort is not None:
            body["reasoning_effort"] = effort
        body.update({k: v for k, v in request.params.items() if k not in _FIXED_KEYS})
        return body

    async def complete(self, request: RuntimeRequest) -> str:
        answer = await post_json(
            self._http.get(),
            kind=self.kind,
            url=f"{self.base_url}/chat/completions",
            headers=self.headers,
            body=self.body(request),
            timeout=self.timeout,
        )
        return reply_text(answer, self.kind)

    async def aclose(self) -> None:
        await self._http.aclose()
