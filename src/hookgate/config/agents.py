"""``agents.*`` → ``AgentsSettings`` (model.md §7–§9): ids, defaults merged key by key, heartbeat."""

from __future__ import annotations

import os
import re
import zoneinfo
from collections.abc import Mapping
from typing import Any

from hookgate.config.modelrefs import alias_target, key_reference, resolve_model, runtime_provider
from hookgate.config.names import DEFAULT_AGENT_ID, normalize_agent_id
from hookgate.config.settings import AgentSettings, AgentsSettings, HeartbeatSettings, SecretSource

_EVERY = re.compile(r"^([0-9]+)([smhd])$")
# A longer interval is held at a century: the turn never comes either way, and every due time stays
# a 64-bit millisecond count (SQLite's INTEGER) — a 16-digit number of days did not.
MAX_EVERY_SECONDS = 100 * 365 * 86_400
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_MERGED_KEYS = ("runtime", "model", "thinking", "timeoutSeconds", "systemPrompt")


def parse_every(raw: str) -> int | None:
    """``heartbeat.every``: ``<integer><s|m|h|d>`` or ``0`` → seconds (0 disables); else ``None``."""
    value = raw.strip()
    if value == "0":
        return 0
    match = _EVERY.match(value)
    if match is None:
        return None
    digits = match.group(1).lstrip("0") or "0"
    if len(digits) > 12:  # past any bound (and int() refuses more than 4 300 digits)
        return MAX_EVERY_SECONDS
    return min(int(digits) * _UNIT_SECONDS[match.group(2)], MAX_EVERY_SECONDS)


def _check_timezone(tz: str, errors: list[str]) -> None:
    if tz in ("local", "utc"):
        return
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        errors.append(f'agents.defaults.envelopeTimezone: unknown time zone "{tz}"')


def _check_runtime(runtime: Mapping[str, Any], path: str, errors: list[str]) -> None:
    kind = runtime.get("kind")
    if kind == "anthropic" and "apiKey" not in runtime:
        errors.append(f'{path}.apiKey: required for runtime kind "anthropic"')
    if kind == "command":
        argv = runtime.get("command") or []
        if argv and not os.path.isabs(argv[0]):
            errors.append(f"{path}.command[0]: must be an absolute path")


def _heartbeat(
    defaults: Mapping[str, Any], entry: Mapping[str, Any] | None, path: str, errors: list[str]
) -> HeartbeatSettings:
    merged = {**defaults, **(entry or {})}
    every = parse_every(str(merged["every"]))
    if every is None:
        source = path if entry is not None and "every" in entry else "agents.defaults.heartbeat"
        errors.append(
            f'{source}.every: invalid interval "{merged["every"]}" (expected <integer><s|m|h|d> or 0)'
        )
        every = 0
    return HeartbeatSettings(
        every_seconds=every, ack_max_chars=int(merged["ackMaxChars"]), prompt=merged.get("prompt")
    )


def _agent(
    agent_id: str,
    entry: Mapping[str, Any],
    entry_path: str | None,
    defaults: Mapping[str, Any],
    secrets: Mapping[str, SecretSource],
    errors: list[str],
) -> AgentSettings:
    merged = {k: entry[k] if k in entry else defaults.get(k) for k in _MERGED_KEYS}
    runtime_path = f"{entry_path}.runtime" if entry_path and "runtime" in entry else "agents.defaults.runtime"
    runtime = dict(merged["runtime"] or {"kind": "echo"})
    runtime_secrets: dict[str, SecretSource] = {}
    if "apiKey" in runtime:
        del runtime["apiKey"]
        source = secrets.get(f"{runtime_path}.apiKey")
        if source is not None:
            runtime_secrets["apiKey"] = source
    hb_path = f"{entry_path}.heartbeat" if entry_path else "agents.defaults.heartbeat"
    return AgentSettings(
        id=agent_id,
        default=bool(entry.get("default", False)),
        name=entry.get("name"),
        runtime=runtime,
        runtime_secrets=runtime_secrets,
        model=merged["model"],
        thinking=merged["thinking"],
        timeout_seconds=int(merged["timeoutSeconds"] or defaults["timeoutSeconds"]),
        heartbeat=_heartbeat(defaults["heartbeat"], entry.get("heartbeat"), hb_path, errors),
        system_prompt=merged["systemPrompt"],
    )


def _unusable(raw: str, provider: str, agent_id: str, models: Mapping[str, Any]) -> str | None:
    """Why agent ``agent_id`` (its runtime serving ``provider``) cannot use the model ``raw``; None: it can."""
    ref = resolve_model(raw, runtime_provider=provider, models=models)
    if ref is not None:
        if ref[0] == provider:
            return None
        return f'provider "{ref[0]}" is not served by agent "{agent_id}" (its runtime serves "{provider}")'
    target = alias_target(raw.strip(), models) if "/" not in raw else None
    if target is not None:
        return f'"{raw}" is the alias of "{target}", which is not a model reference'
    return f'"{raw}" is not a valid model reference (provider/model or an alias)'


def _model_warnings(
    agent: AgentSettings, source: str, models: Mapping[str, Any], warnings: list[str]
) -> None:
    """A configured model no run of ``agent`` can use (model.md §9): the run resolves its model when
    it starts, so such a model is valid config, but an invalid primary, or one whose provider the
    agent's runtime does not serve, fails every run and heartbeat of the agent that no usable model
    override (the request's, a Gmail default) replaces it in, and such a fallback is skipped.
    ``source`` is the key the model came from."""
    provider = runtime_provider(agent.runtime)
    model = agent.model
    if isinstance(model, Mapping):
        primary, fallbacks, at = model.get("primary"), list(model.get("fallbacks") or ()), f"{source}.primary"
    else:
        primary, fallbacks, at = model, [], source
    if isinstance(primary, str) and (why := _unusable(primary, provider, agent.id, models)) is not None:
        warnings.append(f'{at}: {why}: every run of agent "{agent.id}" without a usable model override '
                        "fails")
    for j, raw in enumerate(fallbacks):
        if (why := _unusable(raw, provider, agent.id, models)) is not None:
            warnings.append(f'{source}.fallbacks[{j}]: {why}: agent "{agent.id}" never uses it')


def build_agents(
    tree: Mapping[str, Any], secrets: Mapping[str, SecretSource], errors: list[str], warnings: list[str]
) -> AgentsSettings:
    """The agents with defaults merged in, the default agent, the agents errors of model.md §7, and
    warnings about configured models no run can use (§9)."""
    defaults: Mapping[str, Any] = tree["defaults"]
    entries: list[Mapping[str, Any]] = tree["list"]
    _check_runtime(defaults["runtime"], "agents.defaults.runtime", errors)
    for i, entry in enumerate(entries):
        if "runtime" in entry:
            _check_runtime(entry["runtime"], f"agents.list[{i}].runtime", errors)
    agents: list[AgentSettings] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        agent_id = normalize_agent_id(str(entry["id"]))
        if agent_id in seen:
            errors.append(f"agents.list[{i}].id: duplicates agents.list[{seen[agent_id]}].id ({agent_id})")
            continue
        seen[agent_id] = i
        agents.append(_agent(agent_id, entry, f"agents.list[{i}]", defaults, secrets, errors))
        source = f"agents.list[{i}].model" if "model" in entry else "agents.defaults.model"
        _model_warnings(agents[-1], source, defaults["models"], warnings)
    if sum(1 for e in entries if e.get("default") is True) > 1:
        errors.append("agents.list: only one agent may set default: true")
    _check_timezone(str(defaults["envelopeTimezone"]), errors)
    if not agents:
        agents.append(_agent(DEFAULT_AGENT_ID, {}, None, defaults, secrets, errors))
        _model_warnings(agents[-1], "agents.defaults.model", defaults["models"], warnings)
    for key in defaults["models"]:
        if key_reference(key) is None or any(ch.isspace() for ch in key.strip()):
            warnings.append(f'agents.defaults.models: "{key}" is not a model reference (provider/model or '
                            f'provider/*): the entry matches no model')
    default = next((a.id for a in agents if a.default), agents[0].id)
    return AgentsSettings(
        agents=tuple(agents),
        default_agent_id=default,
        models=dict(defaults["models"]),
        envelope_timezone=str(defaults["envelopeTimezone"]),
        history_messages=int(defaults["historyMessages"]),
        max_concurrent_runs=int(defaults["maxConcurrentRuns"]),
        default_thinking=defaults.get("thinking"),
    )
