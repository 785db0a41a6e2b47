"""The built-in ``echo`` runtime (model.md §8.1): deterministic, no network.

Directives found anywhere in the run's *subject*:

- ``[[echo:sleep=<n>]]`` — wait ``n`` seconds first; ``n`` is a decimal number (``2``, ``0.2``)
  from 0 to 3600, a value outside that range or not a number is not a directive. The wait is an
  ``asyncio.sleep``, so cancelling the call (the run timeout) ends it at once.
- ``[[echo:heartbeat_ok]]`` — reply ``HEARTBEAT_OK`` (also a heartbeat with an empty subject);
- ``[[echo:fail]]`` — fail with ``echo runtime: requested failure`` (not retryable).

Otherwise the reply is ``echo: <subject>``, directives included. ``heartbeat_ok`` wins over ``fail``.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from hookgate.agents.base import (
    ECHO_DEFAULT_MODEL,
    ECHO_MAX_SLEEP_SECONDS,
    AgentRuntimeError,
    RuntimeRequest,
    configured_model_id,
)
from hookgate.config.modelrefs import runtime_provider

HEARTBEAT_OK = "HEARTBEAT_OK"
FAIL_DIRECTIVE = "[[echo:fail]]"
HEARTBEAT_OK_DIRECTIVE = "[[echo:heartbeat_ok]]"
FAILURE_TEXT = "echo runtime: requested failure"
_SLEEP = re.compile(r"\[\[echo:sleep=(\d+(?:\.\d+)?|\.\d+)\]\]")


def sleep_seconds(subject: str) -> float | None:
    """The first valid ``[[echo:sleep=<n>]]`` of the subject, in seconds, else None."""
    for match in _SLEEP.finditer(subject):
        seconds = float(match.group(1))
        if 0 <= seconds <= ECHO_MAX_SLEEP_SECONDS:
            return seconds
    return None


def echo_reply(run_kind: str, subject: str) -> str:
    """The reply (or the failure) for a subject, without the sleep."""
    if HEARTBEAT_OK_DIRECTIVE in subject or (run_kind == "heartbeat" and not subject.strip()):
        return HEARTBEAT_OK
    if FAIL_DIRECTIVE in subject:
        raise AgentRuntimeError(FAILURE_TEXT, retryable=False)
    return f"echo: {subject}"


class EchoRuntime:
    kind = "echo"

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        config = config or {"kind": "echo"}
        self.provider = runtime_provider(config)
        self.default_model: str | None = configured_model_id(config, self.provider) or ECHO_DEFAULT_MODEL

    async def complete(self, request: RuntimeRequest) -> str:
        seconds = sleep_seconds(request.subject)
        if seconds is not None:
            await asyncio.sleep(seconds)
        return echo_reply(request.run_kind, request.subject)

    async def aclose(self) -> None:
        return None
