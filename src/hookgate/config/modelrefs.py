"""Model references (model.md §9.1): parsing, alias lookup, allowlist keys, a runtime's provider.

Pure functions of the config, used both by ``config check`` (which warns about a configured model
no run can use) and by the runs that resolve a model (``hookgate.agents.models``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Reference = tuple[str, str]  # (provider lower-cased, model id)


def runtime_provider(config: Mapping[str, Any]) -> str:
    """The provider name of a runtime config: its `provider` key, default its kind (lower-cased)."""
    provider = config.get("provider")
    if isinstance(provider, str) and provider.strip():
        return provider.strip().lower()
    return str(config.get("kind") or "echo").strip().lower()


def parse_reference(raw: str) -> Reference | None:
    """``provider/model`` split at the first ``/`` (provider lower-cased); None when invalid."""
    if any(ch.isspace() for ch in raw):
        return None
    provider, sep, model = raw.partition("/")
    if not sep or not provider or not model or model == "*":
        return None
    return provider.lower(), model


def alias_target(alias: str, models: Mapping[str, Any]) -> str | None:
    """The ``agents.defaults.models`` key whose ``alias`` is ``alias`` (case-insensitive), if any."""
    wanted = alias.lower()
    for key in sorted(models):
        entry = models[key]
        if isinstance(entry, Mapping):
            name = entry.get("alias")
            if isinstance(name, str) and name.strip().lower() == wanted:
                return key
    return None


def resolve_model(raw: str, *, runtime_provider: str, models: Mapping[str, Any]) -> Reference | None:
    """A reference → (provider, model) after the alias lookup (§9.1); None when invalid."""
    value = raw.strip()
    if not value or any(ch.isspace() for ch in value):
        return None
    if "/" not in value:
        target = alias_target(value, models)
        if target is not None:
            return parse_reference(target.strip())
        return parse_reference(f"{runtime_provider.lower()}/{value}")
    return parse_reference(value)


def names_no_model(raw: str, models: Mapping[str, Any]) -> bool:
    """``raw`` names no model whatever the agent's runtime: whether a reference resolves does not
    depend on the runtime's provider (it only completes a bare model id), so any name stands in."""
    return resolve_model(raw, runtime_provider="any", models=models) is None


def key_reference(key: str) -> Reference | None:
    """An allowlist key → (provider, model or "*"); None for a malformed key."""
    provider, sep, model = key.strip().partition("/")
    if not sep or not provider or not model:
        return None
    return provider.lower(), model
