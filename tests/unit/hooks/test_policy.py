from __future__ import annotations

import hashlib
import json

import pytest

from hookgate.config.settings import AgentSettings, AgentsSettings, HooksSettings
from hookgate.errors import RequestError
from hookgate.hooks.actions import AgentAction
from hookgate.hooks.policy import (
    SESSION_KEY_DISABLED,
    idempotency_record_key,
    logical_session_key,
    rebind_session_key,
    requested_session_key,
    resolve_agent,
    stored_session_key,
)

AGENTS = AgentsSettings(agents=(AgentSettings(id="main", default=True), AgentSettings(id="hooks")),
                        default_agent_id="main")


def hooks(**kw: object) -> HooksSettings:
    return HooksSettings(enabled=True, token="hook-secret", **kw)  # type: ignore[arg-type]


def err(fn: object, *args: object) -> str:
    with pytest.raises(RequestError) as info:
        fn(*args)  # type: ignore[operator]
    return info.value.message


def test_unknown_agent_falls_back_to_default() -> None:
    target = resolve_agent(AgentAction("hi", agent_id="missing-agent"), AGENTS, hooks())
    assert (target.effective, target.explicit) == ("main", False)
    target = resolve_agent(AgentAction("hi", agent_id=" HOOKS "), AGENTS, hooks())
    assert (target.effective, target.explicit) == ("hooks", True)


def test_allowed_agent_ids_policy_on_the_effective_agent() -> None:
    only_hooks = hooks(allowed_agent_ids=frozenset({"hooks"}))
    denied = "agentId is not allowed by hooks.allowedAgentIds"
    assert err(resolve_agent, AgentAction("hi"), AGENTS, only_hooks) == denied
    assert err(resolve_agent, AgentAction("hi", agent_id="missing"), AGENTS, only_hooks) == denied
    assert resolve_agent(AgentAction("hi", agent_id="HOOKS"), AGENTS, only_hooks).effective == "hooks"
    only_main = hooks(allowed_agent_ids=frozenset({"main"}))
    assert resolve_agent(AgentAction("hi", agent_id="missing"), AGENTS, only_main).effective == "main"
    nobody = hooks(allowed_agent_ids=frozenset())
    assert err(resolve_agent, AgentAction("hi", agent_id="main"), AGENTS, nobody) == denied


def test_request_session_key_needs_opt_in_and_prefixes() -> None:
    action = AgentAction("hi", session_key="agent:main:x", session_key_source="request")
    assert err(requested_session_key, action, hooks()) == SESSION_KEY_DISABLED
    h = hooks(allow_request_session_key=True, allowed_session_key_prefixes=("hook:", "ops:"))
    assert err(requested_session_key, action, h) == "sessionKey must start with one of: hook:, ops:"
    ok = AgentAction("hi", session_key="HOOK:abc", session_key_source="request")
    assert requested_session_key(ok, h) == "HOOK:abc"


def test_static_mapping_key_only_checks_prefixes() -> None:
    action = AgentAction("hi", session_key="hook:static", session_key_source="mapping-static")
    assert requested_session_key(action, hooks()) == "hook:static"
    templated = AgentAction("hi", session_key="hook:x", session_key_source="mapping-templated")
    assert err(requested_session_key, templated, hooks()) == SESSION_KEY_DISABLED


def test_logical_key_defaults() -> None:
    assert logical_session_key("k", hooks(default_session_key="hook:ingress"), "u") == "k"
    assert logical_session_key(None, hooks(default_session_key="hook:ingress"), "u") == "hook:ingress"
    assert logical_session_key(None, hooks(), "uuid") == "hook:uuid"


def test_rebinding_rechecks_prefixes() -> None:
    h = hooks(allowed_session_key_prefixes=("hook:", "agent:main:"))
    assert rebind_session_key("agent:main:x", "main", h) == "agent:main:x"
    assert err(rebind_session_key, "agent:main:x", "hooks", h) == "sessionKey must start with one of: hook:, agent:main:"
    assert rebind_session_key("agent:main:", "hooks", hooks()) == "agent:main:"
    assert rebind_session_key("hook:a:b", "hooks", h) == "hook:a:b"
    assert rebind_session_key("agent:x:y:z", "hooks", hooks()) == "agent:hooks:y:z"


def test_stored_session_key() -> None:
    assert stored_session_key("Agent:Main:X", "main") == "agent:main:x"
    assert stored_session_key("MAIN", "ops") == "agent:ops:main"
    assert stored_session_key("hook:gmail:ABC", "main") == "agent:main:hook:gmail:abc"


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def test_idempotency_record_key_matches_the_spec_formula() -> None:
    action = AgentAction("hi", name="Hook", channel="last")
    got = idempotency_record_key(token="t", path="agent", action=action, effective_agent="main",
                                 scope_session_key=None, key="k1")
    scope = json.dumps(
        {"path": "agent", "agentId": "main", "sessionKey": None, "message": "hi", "name": "Hook",
         "wakeMode": "now", "deliver": True, "channel": "last", "to": None, "model": None, "thinking": None,
         "timeoutSeconds": None},
        separators=(",", ":"),
    )
    assert got == sha(f"{sha('t')}:{sha(scope)}:{sha('k1')}")


def test_idempotency_record_key_changes_with_any_scope_field() -> None:
    base = {"token": "t", "path": "agent", "action": AgentAction("hi"), "effective_agent": "main",
                "scope_session_key": None, "key": "k1"}
    ref = idempotency_record_key(**base)  # type: ignore[arg-type]
    for change in ({"token": "u"}, {"path": "gh"}, {"action": AgentAction("ho")}, {"effective_agent": "ops"},
                   {"scope_session_key": "hook:x"}, {"key": "k2"}, {"action": AgentAction("hi", deliver=False)}):
        assert idempotency_record_key(**{**base, **change}) != ref  # type: ignore[arg-type]
