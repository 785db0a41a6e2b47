"""The agent runtime protocol (model.md §8): one request shape, one error, one factory.

    HookgateError
     └── AgentRuntimeError      a failed runtime call; ``message`` is the run's error text and
                                ``retryable`` says whether a fallback model may be tried (§5.4)

``build_runtime`` turns an agent's ``runtime`` config into an ``AgentRuntime``; ``preflight`` says
whether that runtime is usable at all (secrets resolved, command present) before a run starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from hookgate.config.settings import AgentSettings
from hookgate.errors import HookgateError
from hookgate.obs.logging import clean_text

if TYPE_CHECKING:
    import httpx  # loaded with the HTTP runtimes only, not at start-up

# Every runtime default and limit, in one table (model.md §8).
OPENAI_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
ANTHROPIC_MAX_TOKENS = 4096
REQUEST_TIMEOUT_SECONDS = 120.0
ERROR_MESSAGE_MAX_CHARS = 200
ECHO_DEFAULT_MODEL = "echo-1"
ECHO_MAX_SLEEP_SECONDS = 3600.0
COMMAND_OUTPUT_MAX_BYTES = 1_048_576
COMMAND_KILL_GRACE_SECONDS = 5.0
COMMAND_EXIT_DRAIN_SECONDS = 1.0  # after a command exits, how long its stdout may stay open (a child holding it)
COMMAND_PROTOCOL_VERSION = 1
KINDS = ("echo", "openai", "anthropic", "command")
HTTP_KINDS = ("openai", "anthropic")


@dataclass(frozen=True, slots=True)
class RuntimeRequest:
    """Everything a runtime receives for one call (model.md §8)."""

    agent_id: str
    run_kind: str  # "hook" | "task" | "heartbeat"
    session_key: str
    run_id: str
    model: str | None  # the model id after "provider/"; None: the runtime's default
    thinking: str | None  # a normalised level (models.normalize_thinking) or None
    system_prompt: str | None
    history: tuple[tuple[str, str], ...]  # (role "user"|"assistant", content), oldest first
    prompt: str
    subject: str  # echo only (model.md §8.1)
    params: dict[str, Any] = field(default_factory=dict)  # the model's allowlist `params`


class AgentRuntimeError(HookgateError):
    """A runtime call failed; the message is the run's error text (model.md §5.4)."""

    code = "agent_runtime_error"

    def __init__(self, message: str, *, retryable: bool = False, signal: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.signal = signal  # a command killed by a signal: which (its exit code is minus that)


class AgentRuntime(Protocol):
    kind: str
    provider: str  # the runtime's `provider` key (lower-cased), default its kind
    default_model: str | None  # the runtime's configured `model` (id part)

    async def complete(self, request: RuntimeRequest) -> str:
        """The reply text (untrimmed); raises ``AgentRuntimeError``."""
        ...

    async def aclose(self) -> None: ...


def configured_model_id(config: dict[str, Any], provider: str) -> str | None:
    """The runtime's `model` key as a model id: a leading ``<provider>/`` is dropped."""
    model = config.get("model")
    if not isinstance(model, str) or not model.strip():
        return None
    model = model.strip()
    head, sep, tail = model.partition("/")
    if sep and head.lower() == provider and tail:
        return tail
    return model


def clip_error_message(text: str) -> str:
    """Control characters → space, whitespace collapsed, cut to ``ERROR_MESSAGE_MAX_CHARS`` characters
    (``clean_text``): a provider's text becomes the run's stored error and the summary the main
    session reads."""
    return clean_text(text, ERROR_MESSAGE_MAX_CHARS)


class UnknownRuntime:
    """Stands in for a runtime kind this build does not know; every call fails (never retried)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.provider = kind
        self.default_model: str | None = None

    async def complete(self, request: RuntimeRequest) -> str:
        raise AgentRuntimeError(f"unknown runtime kind: {self.kind}")

    async def aclose(self) -> None:
        return None


def runtime_kind(agent: AgentSettings) -> str:
    return str(agent.runtime.get("kind") or "echo")


def speaks_http(agent: AgentSettings) -> bool:
    """Whether the agent's runtime calls a model API over HTTP (and so needs the shared client)."""
    return runtime_kind(agent) in HTTP_KINDS


def build_runtime(
    agent: AgentSettings, *, http: httpx.AsyncClient | Callable[[], httpx.AsyncClient] | None = None
) -> AgentRuntime:
    """The runtime for ``agent.runtime``. Never raises: problems surface in ``preflight`` or per call.

    ``http`` is a shared client (not closed by the runtime), or a function that returns it — called
    only for a runtime that speaks HTTP, so a gateway whose agents are all echo or command runtimes
    never creates one. Without it, the HTTP runtimes create their own and close it in ``aclose``.
    """
    config = agent.runtime
    kind = runtime_kind(agent)
    api_key = _secret(agent, "apiKey")
    # Each runtime's module is loaded when an agent uses it: the HTTP ones bring httpx.
    if kind == "echo":
        from hookgate.agents.echo import EchoRuntime

        return EchoRuntime(config)
    if kind == "openai":
        from hookgate.agents.openai import OpenAIRuntime

        return OpenAIRuntime(config, api_key=api_key, http=http() if callable(http) else http)
    if kind == "anthropic":
        from hookgate.agents.anthropic import AnthropicRuntime

        return AnthropicRuntime(config, api_key=api_key, http=http() if callable(http) else http)
    if kind == "command":
        from hookgate.agents.command import CommandRuntime

        return CommandRuntime(config)
    return UnknownRuntime(kind)


def preflight(agent: AgentSettings) -> str | None:
    """None when the agent's runtime is usable, else the run's ``skipped`` reason (model.md §5.4)."""
    config = agent.runtime
    kind = str(config.get("kind") or "echo")
    if kind not in KINDS:
        return f"unknown runtime kind: {kind}"
    for name in sorted(agent.runtime_secrets):
        source = agent.runtime_secrets[name]
        if source.value is None:
            return f"runtime secret unresolved: {source.error or f'{source.key_path} has no value'}"
    if kind == "anthropic" and "apiKey" not in agent.runtime_secrets:
        return "runtime secret unresolved: apiKey is required for runtime kind anthropic"
    if kind == "command":
        return _command_preflight(config)
    return None


def _secret(agent: AgentSettings, name: str) -> str | None:
    source = agent.runtime_secrets.get(name)
    return source.value if source is not None else None


def _command_preflight(config: dict[str, Any]) -> str | None:
    argv = config.get("command")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return "runtime command not configured"
    path = argv[0]
    if not os.path.isabs(path):
        return f"runtime command must be an absolute path: {path}"
    if not os.path.exists(path):
        return f"runtime command not found: {path}"
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        return f"runtime command not executable: {path}"
    cwd = config.get("cwd")
    if isinstance(cwd, str) and cwd and not os.path.isdir(cwd):
        return f"runtime cwd not found: {cwd}"
    return None
