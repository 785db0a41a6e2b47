"""Agent and session-key policy, idempotency scope (hooks.md §5.2–§5.4). Pure functions."""

from __future__ import annotations

import hashlib

import msgspec

from hookgate.config.names import main_session_key, normalize_agent_id
from hookgate.config.settings import AgentsSettings, HooksSettings
from hookgate.errors import RequestError
from hookgate.hooks.actions import AgentAction

SESSION_KEY_DISABLED = (
    "sessionKey is disabled for externally supplied hook payload values; "
    "set hooks.allowRequestSessionKey=true to enable"
)
AGENT_NOT_ALLOWED = "agentId is not allowed by hooks.allowedAgentIds"


class AgentTarget(msgspec.Struct, frozen=True):
    effective: str  # the agent that runs
    explicit: bool  # the request named a known agent


def resolve_agent(action: AgentAction, agents: AgentsSettings, hooks: HooksSettings) -> AgentTarget:
    """Target agent, effective agent and the ``allowedAgentIds`` policy (§5.2)."""
    target: str | None = None
    if action.agent_id is not None:
        normalized = normalize_agent_id(action.agent_id)
        if normalized in agents.known_ids:
            target = normalized
    effective = target or agents.default_agent_id
    allowed = hooks.allowed_agent_ids
    if allowed is not None and effective not in allowed:
        raise RequestError(AGENT_NOT_ALLOWED)
    return AgentTarget(effective=effective, explicit=target is not None)


def _check_prefixes(key: str, hooks: HooksSettings) -> None:
    prefixes = hooks.allowed_session_key_prefixes
    if prefixes is not None and not key.lower().startswith(prefixes):
        raise RequestError("sessionKey must start with one of: " + ", ".join(prefixes))


def requested_session_key(action: AgentAction, hooks: HooksSettings) -> str | None:
    """Session policy steps 1–2: the requested key after its checks (``None`` when absent)."""
    key = action.session_key
    if key is None:
        return None
    if action.session_key_source in ("request", "mapping-templated") and not hooks.allow_request_session_key:
        raise RequestError(SESSION_KEY_DISABLED)
    _check_prefixes(key, hooks)
    return key


def logical_session_key(requested: str | None, hooks: HooksSettings, new_id: str) -> str:
    """Step 3: the requested key, else ``defaultSessionKey``, else ``hook:<uuid>``."""
    if requested is not None:
        return requested
    if hooks.default_session_key is not None:
        return hooks.default_session_key
    return f"hook:{new_id}"


def rebind_session_key(key: str, agent_id: str, hooks: HooksSettings) -> str:
    """Step 4: ``agent:<x>:<rest>`` becomes ``agent:<A>:<rest>``; the prefix check runs again."""
    parts = key.split(":", 2)
    if len(parts) == 3 and parts[0].lower() == "agent" and parts[2]:
        key = f"agent:{agent_id}:{parts[2]}"
        _check_prefixes(key, hooks)
    return key


def stored_session_key(key: str, agent_id: str) -> str:
    """Step 5: the session key a run is stored under."""
    if key.lower().startswith("agent:"):
        return key.lower()
    if key.lower() == "main":
        return main_session_key(agent_id)
    return f"agent:{agent_id}:{key.lower()}"


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def idempotency_record_key(
    *, token: str, path: str, action: AgentAction, effective_agent: str, scope_session_key: str | None, key: str
) -> str:
    """Durable record key: ``sha256(sha(token) + ":" + sha(scope) + ":" + sha(key))`` (§5.4)."""
    scope = {
        "path": path,
        "agentId": effective_agent,
        "sessionKey": scope_session_key,
        "message": action.message,
        "name": action.name,
        "wakeMode": action.wake_mode,
        "deliver": action.deliver,
        "channel": action.channel,
        "to": action.to,
        "model": action.model,
        "thinking": action.thinking,
        "timeoutSeconds": action.timeout_seconds,
    }
    scope_json = msgspec.json.encode(scope).decode("utf-8")
    return _sha(f"{_sha(token)}:{_sha(scope_json)}:{_sha(key)}")
