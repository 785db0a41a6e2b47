"""Agent runtimes behind one protocol (model.md §8): echo, openai, anthropic, command.

``base`` holds the protocol, the request, the error and the factory; ``models`` the model choice,
allowlist, fallbacks and thinking levels (§9).
"""

from hookgate.agents.base import (
    AgentRuntime,
    AgentRuntimeError,
    RuntimeRequest,
    build_runtime,
    preflight,
)
from hookgate.agents.models import (
    ModelChoice,
    ModelRejected,
    choose_model,
    complete_with_fallbacks,
    normalize_thinking,
)
from hookgate.config.modelrefs import resolve_model

__all__ = [
    "AgentRuntime",
    "AgentRuntimeError",
    "ModelChoice",
    "ModelRejected",
    "RuntimeRequest",
    "build_runtime",
    "choose_model",
    "complete_with_fallbacks",
    "normalize_thinking",
    "preflight",
    "resolve_model",
]
