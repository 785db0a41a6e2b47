"""Wake and agent actions: request-field normalisation (hooks.md §4, §5.1).

An action is what every Surface B entry point (direct endpoints and mappings) produces before the
shared policy and dispatch steps in ``hooks.policy`` and ``hooks.dispatch``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import msgspec

from hookgate.config.names import CHANNEL_ALIASES
from hookgate.errors import RequestError
from hookgate.hooks.payload import trimmed_str
from hookgate.jstext import js_trim

WakeMode = Literal["now", "next-heartbeat"]
SessionKeySource = Literal["request", "mapping-static", "mapping-templated"]

MAX_TIMEOUT_SECONDS = 172_800
MAX_IDEMPOTENCY_KEY_CHARS = 256
MODEL_REQUIRED = "model required"



class WakeAction(msgspec.Struct, frozen=True):
    text: str
    mode: WakeMode


class AgentAction(msgspec.Struct, frozen=True):
    message: str
    name: str = "Hook"
    agent_id: str | None = None  # as given (trimmed), before normalisation
    wake_mode: WakeMode = "now"
    session_key: str | None = None
    session_key_source: SessionKeySource | None = None
    deliver: bool = True
    channel: str = "last"  # normalised and validated
    to: str | None = None
    model: str | None = None
    thinking: str | None = None
    timeout_seconds: int | None = None
    allow_unsafe_external_content: bool | None = None


def wake_mode(value: Any) -> WakeMode:
    """Exactly ``"next-heartbeat"`` selects it; anything else is ``now`` (never an error)."""
    return "next-heartbeat" if value == "next-heartbeat" else "now"


def parse_wake(payload: dict[str, Any]) -> WakeAction:
    text = trimmed_str(payload.get("text"))
    if text is None:
        raise RequestError("text required")
    return WakeAction(text=text, mode=wake_mode(payload.get("mode")))


def timeout_seconds(value: Any) -> int | None:
    """A JSON number (not a boolean) ≥ 1 → floor, capped at 172 800; anything else → absent."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value < 1:
        return None
    return min(math.floor(value), MAX_TIMEOUT_SECONDS)


def normalize_channel(value: Any, enabled_channels: tuple[str, ...]) -> str:
    """Absent/null/blank → ``last``; a string is trimmed, lower-cased and aliased; must be available."""
    if value is None:
        return "last"
    if isinstance(value, str):
        name = js_trim(value).lower()
        if not name:
            return "last"
        name = CHANNEL_ALIASES.get(name, name)
        if name == "last" or name in enabled_channels:
            return name
    raise RequestError("channel must be " + "|".join(("last", *enabled_channels)))


def parse_agent(payload: dict[str, Any], enabled_channels: tuple[str, ...]) -> AgentAction:
    """Normalise ``/hooks/agent`` fields; validation order message → channel → model (§5.1)."""
    message = trimmed_str(payload.get("message"))
    if message is None:
        raise RequestError("message required")
    channel = normalize_channel(payload.get("channel"), enabled_channels)
    model: str | None = None
    if "model" in payload:
        model = trimmed_str(payload["model"])
        if model is None:
            raise RequestError(MODEL_REQUIRED)
    session_key = trimmed_str(payload.get("sessionKey"))
    return AgentAction(
        message=message,
        name=trimmed_str(payload.get("name")) or "Hook",
        agent_id=trimmed_str(payload.get("agentId")),
        wake_mode=wake_mode(payload.get("wakeMode")),
        session_key=session_key,
        session_key_source="request" if session_key is not None else None,
        deliver=payload.get("deliver") is not False,
        channel=channel,
        to=trimmed_str(payload.get("to")),
        model=model,
        thinking=trimmed_str(payload.get("thinking")),
        timeout_seconds=timeout_seconds(payload.get("timeoutSeconds")),
    )


def idempotency_key(header_values: tuple[str | None, ...], payload: dict[str, Any]) -> str | None:
    """First non-empty trimmed value among the headers (in precedence order), then the body field.

    A value longer than 256 characters is ignored: the request then has no key (§2 step 11).
    """
    for value in (*header_values, payload.get("idempotencyKey")):
        key = trimmed_str(value)
        if key is not None:
            return key if len(key) <= MAX_IDEMPOTENCY_KEY_CHARS else None
    return None
