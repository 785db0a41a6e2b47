"""The model of a run: the allowlist, fallbacks and thinking levels (model.md §5.3, §9); the reference
rules themselves (parsing, aliases) are in ``hookgate.config.modelrefs``, shared with ``config check``.

``choose_model`` picks the model of a run in the §5.3 order and applies the §9.2 checks to a per-run
override; ``complete_with_fallbacks`` calls the runtime with it and, on a retryable failure, with
each fallback in turn.

Configured models (the agent's ``model``, else ``agents.defaults.model``) are not overrides: they
pass the allowlist by definition. A configured primary that is invalid or names a provider the
agent's runtime does not serve fails the run with the same rejection text as an override would; an
invalid or foreign-provider *fallback* is skipped. The configured fallbacks follow whichever model
was chosen (an override included), minus that model itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hookgate.agents.base import AgentRuntime, AgentRuntimeError, RuntimeRequest
from hookgate.config.modelrefs import Reference, key_reference, resolve_model
from hookgate.config.settings import AgentSettings
from hookgate.errors import HookgateError

# §9.3: normalised input → level; level → openai reasoning_effort / anthropic budget_tokens.
THINKING_INPUTS: dict[str, str] = {
    "off": "off",
    "minimal": "minimal",
    "min": "minimal",
    "think": "minimal",
    "low": "low",
    "on": "low",
    "enable": "low",
    "enabled": "low",
    "thinkhard": "low",
    "medium": "medium",
    "mid": "medium",
    "med": "medium",
    "harder": "medium",
    "high": "high",
    "ultra": "high",
    "ultrathink": "high",
    "highest": "high",
    "xhigh": "xhigh",
    "extrahigh": "xhigh",
    "max": "max",
    "adaptive": "adaptive",
    "auto": "adaptive",
}
REASONING_EFFORT: dict[str, str] = {
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}
THINKING_BUDGET_TOKENS: dict[str, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
    "max": 32768,
}
_THINKING_STRIP = re.compile(r"[\s_-]+")


class ModelRejected(HookgateError):
    """A model check of §9.2 failed; the message is the run's exact error text."""

    code = "model_rejected"


@dataclass(frozen=True)
class ModelChoice:
    """The model of a run: ``model`` is the id after ``provider/`` ("" when nothing names one)."""

    provider: str
    model: str
    params: dict[str, Any] = field(default_factory=dict)
    fallbacks: tuple[tuple[str, str, dict[str, Any]], ...] = ()

    @property
    def reference(self) -> str:
        return model_reference(self.provider, self.model)


def model_reference(provider: str, model: str) -> str:
    """``provider/model``; just ``provider`` when the model id is empty (a runtime without a model)."""
    return f"{provider}/{model}" if model else provider


def normalize_thinking(value: str | None) -> str | None:
    """A thinking input → its level (§9.3); None when absent or unrecognised."""
    if value is None:
        return None
    return THINKING_INPUTS.get(_THINKING_STRIP.sub("", value.strip().lower()))


def is_allowlisted(ref: Reference, models: Mapping[str, Any]) -> bool:
    """True when the map is empty, or a key names ``ref`` exactly or as ``provider/*``."""
    if not models:
        return True
    provider, model = ref
    for key in models:
        parsed = key_reference(key)
        if parsed is not None and parsed[0] == provider and parsed[1] in (model, "*"):
            return True
    return False


def model_params(ref: Reference, models: Mapping[str, Any]) -> dict[str, Any]:
    """The ``params`` for a model: a ``provider/*`` entry's, overlaid by the exact entry's."""
    wildcard: dict[str, Any] = {}
    exact: dict[str, Any] = {}
    for key, entry in models.items():
        parsed = key_reference(key)
        if parsed is None or parsed[0] != ref[0] or not isinstance(entry, Mapping):
            continue
        params = entry.get("params")
        if not isinstance(params, Mapping):
            continue
        if parsed[1] == ref[1]:
            exact.update(params)
        elif parsed[1] == "*":
            wildcard.update(params)
    return {**wildcard, **exact}


def _configured(value: str | dict[str, Any] | None) -> tuple[str | None, tuple[str, ...]]:
    if isinstance(value, str):
        return value, ()
    if isinstance(value, Mapping):
        primary = value.get("primary")
        fallbacks = value.get("fallbacks") or ()
        return (
            primary if isinstance(primary, str) else None,
            tuple(f for f in fallbacks if isinstance(f, str)),
        )
    return None, ()


def _invalid(raw: str) -> ModelRejected:
    return ModelRejected(f"model '{raw}' rejected: invalid model: {raw}")


def _not_served(raw: str, provider: str, agent_id: str) -> ModelRejected:
    return ModelRejected(f"model '{raw}' rejected: provider '{provider}' is not served by agent '{agent_id}'")


def check_override(
    raw: str,
    *,
    agent_id: str,
    runtime_provider: str,
    models: dict[str, Any],
    always_allowed: frozenset[Reference] = frozenset(),
) -> Reference:
    """A per-run model override through the §9.2 checks; raises ``ModelRejected`` with the exact text."""
    ref = resolve_model(raw, runtime_provider=runtime_provider, models=models)
    if ref is None:
        raise _invalid(raw)
    if ref not in always_allowed and not is_allowlisted(ref, models):
        keys = ", ".join(sorted(models))
        raise ModelRejected(
            f"model '{raw}' rejected by agents.defaults.models allowlist: "
            f"{ref[0]}/{ref[1]} is not in [{keys}]"
        )
    if ref[0] != runtime_provider.lower():
        raise _not_served(raw, ref[0], agent_id)
    return ref


def choose_model(
    *,
    override: str | None,
    gmail_default: str | None,
    agent: AgentSettings,
    defaults_model: str | dict[str, Any] | None,
    models: dict[str, Any],
    runtime: AgentRuntime,
) -> ModelChoice:
    """The run's model in the §5.3 order: override → Gmail default (when usable) → the agent's model →
    ``defaults_model`` → the runtime's model. Raises ``ModelRejected`` for a bad override (or a bad
    configured primary); a bad Gmail default is ignored."""
    provider = runtime.provider.lower()
    primary_raw, fallback_raws = _configured(agent.model if agent.model is not None else defaults_model)

    def resolve(raw: str) -> Reference | None:
        return resolve_model(raw, runtime_provider=provider, models=models)

    fallbacks: list[Reference] = []
    for raw in fallback_raws:
        ref = resolve(raw)
        if ref is not None and ref[0] == provider and ref not in fallbacks:
            fallbacks.append(ref)
    primary = resolve(primary_raw) if primary_raw is not None else None
    always = frozenset([*fallbacks, *([primary] if primary is not None else [])])

    chosen: Reference | None = None
    if override is not None and override.strip():
        chosen = check_override(
            override, agent_id=agent.id, runtime_provider=provider, models=models, always_allowed=always
        )
    elif gmail_default is not None and gmail_default.strip():
        try:
            chosen = check_override(
                gmail_default,
                agent_id=agent.id,
                runtime_provider=provider,
                models=models,
                always_allowed=always,
            )
        except ModelRejected:
            chosen = None
    if chosen is None and primary_raw is not None:
        if primary is None:
            raise _invalid(primary_raw)
        if primary[0] != provider:
            raise _not_served(primary_raw, primary[0], agent.id)
        chosen = primary
    if chosen is None:
        chosen = (provider, runtime.default_model or "")
    return ModelChoice(
        provider=chosen[0],
        model=chosen[1],
        params=model_params(chosen, models),
        fallbacks=tuple((p, m, model_params((p, m), models)) for p, m in fallbacks if (p, m) != chosen),
    )


async def complete_with_fallbacks(
    runtime: AgentRuntime, request: RuntimeRequest, choice: ModelChoice
) -> tuple[str, str]:
    """(reply, "provider/model" used). A retryable failure moves on to the next fallback; a
    non-retryable one, or the last model's failure, is raised."""
    attempts = [(choice.provider, choice.model, choice.params), *choice.fallbacks]
    last: AgentRuntimeError | None = None
    for provider, model, params in attempts:
        try:
            reply = await runtime.complete(replace(request, model=model or None, params=dict(params)))
        except AgentRuntimeError as exc:
            if not exc.retryable:
                raise
            last = exc
            continue
        return reply, model_reference(provider, model)
    assert last is not None
    raise last
