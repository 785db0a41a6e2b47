"""The one HTTP call the model-API runtimes make, and how its failures become run errors (§5.4).

- HTTP status >= 400 → ``<kind>: HTTP <status>: <message>``, the message taken from the JSON body's
  ``error.message`` (else the body text, else the reason phrase), whitespace collapsed, at most 200
  characters; retryable for 429 and 5xx.
- A request taking longer than ``requestTimeoutSeconds`` in all → ``<kind>: request timed out after
  <n>s``; any other transport failure → ``<kind>: <error>``; both retryable.
- A 2xx body that is not JSON → ``<kind>: invalid response: …`` (not retryable).

Cancelling the call (the run timeout) aborts the request: httpx closes the connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import msgspec

from hookgate.agents.base import AgentRuntimeError, clip_error_message
from hookgate.jsonbody import InvalidJSON, decode_answer
from hookgate.masking import header_credentials, mask


class HttpClient:
    """A shared ``httpx.AsyncClient`` when given (never closed here), else an owned one."""

    def __init__(self, shared: httpx.AsyncClient | None) -> None:
        self._shared = shared
        self._owned: httpx.AsyncClient | None = None

    def get(self) -> httpx.AsyncClient:
        if self._shared is not None:
            return self._shared
        if self._owned is None:
            self._owned = httpx.AsyncClient(timeout=None)
        return self._owned

    async def aclose(self) -> None:
        if self._owned is not None:
            owned, self._owned = self._owned, None
            await owned.aclose()


_PLAIN_HEADERS = frozenset({"content-type", "accept", "user-agent", "anthropic-version"})


def _error_message(response: httpx.Response, sent: httpx.Headers) -> str:
    """The provider's error text as a run keeps it: the credentials sent masked — before the text is
    cut, so that no key cut in two survives as a prefix —, control characters as spaces, short."""
    text = mask(_provider_text(response), header_credentials(sent.items(), _PLAIN_HEADERS))
    return clip_error_message(text) or response.reason_phrase or "error"


def _provider_text(response: httpx.Response) -> str:
    """``error.message``, ``error`` or ``message`` of a JSON error body, else the body as text."""
    try:
        body = decode_answer(response.content)
    except InvalidJSON:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"].strip():
            return str(error["message"])
        if isinstance(error, str) and error.strip():
            return error
        if isinstance(body.get("message"), str) and body["message"].strip():
            return str(body["message"])
    return response.text


def _transport_error(kind: str, exc: httpx.HTTPError, timeout: float) -> AgentRuntimeError:
    if isinstance(exc, httpx.TimeoutException):
        return AgentRuntimeError(f"{kind}: request timed out after {timeout:g}s", retryable=True)
    detail = clip_error_message(str(exc)) or type(exc).__name__
    retryable = isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.UnsupportedProtocol)
    return AgentRuntimeError(f"{kind}: {detail}", retryable=retryable)


async def post_json(
    client: httpx.AsyncClient,
    *,
    kind: str,
    url: str,
    headers: httpx.Headers,
    body: dict[str, Any],
    timeout: float,
) -> Any:
    """POST ``body`` as JSON and return the decoded 2xx JSON answer; raises ``AgentRuntimeError``."""
    sent = httpx.Headers({"content-type": "application/json", "accept": "application/json"})
    sent.update(headers)
    try:
        async with asyncio.timeout(timeout):  # the whole request; httpx's timeout is per phase
            response = await client.post(
                url, content=msgspec.json.encode(body), headers=sent, timeout=httpx.Timeout(timeout)
            )
    except TimeoutError:
        raise AgentRuntimeError(f"{kind}: request timed out after {timeout:g}s", retryable=True) from None
    except httpx.InvalidURL as exc:
        raise AgentRuntimeError(f"{kind}: invalid URL: {exc}") from None
    except httpx.HTTPError as exc:
        raise _transport_error(kind, exc, timeout) from None
    status = response.status_code
    if status >= 300:  # a redirect is not followed: the base URL is wrong, and a retry will not mend it
        retryable = status == 429 or status >= 500
        message = _error_message(response, sent)
        raise AgentRuntimeError(f"{kind}: HTTP {status}: {message}", retryable=retryable)
    if not response.content:
        raise AgentRuntimeError(f"{kind}: invalid response: HTTP {status} with an empty body")
    try:
        return decode_answer(response.content)
    except InvalidJSON:
        raise AgentRuntimeError(f"{kind}: invalid response: body is not JSON") from None


def invalid_response(kind: str, what: str) -> AgentRuntimeError:
    return AgentRuntimeError(f"{kind}: invalid response: {what}")
