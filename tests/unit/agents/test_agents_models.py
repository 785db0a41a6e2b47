"""Model references, allowlist, aliases, fallbacks and thinking levels (model.md §5.3, §9)."""

from __future__ import annotations

from typing import Any

import pytest

from hookgate.agents.base import AgentRuntimeError, RuntimeRequest
from hookgate.agents.echo import EchoRuntime
from hookgate.agents.models import (
    ModelChoice,
    ModelRejected,
    choose_model,
    complete_with_fallbacks,
    model_params,
    normalize_thinking,
)
from hookgate.config.modelrefs import resolve_model
from hookgate.config.settings import AgentSettings

# --- §9.3 thinking levels ----------------------------------------------------------------------------

THINKING_ROWS = [
    (["off"], "off"),
    (["minimal", "min", "think"], "minimal"),
    (["low", "on", "enable", "enabled", "thinkhard"], "low"),
    (["medium", "mid", "med", "harder"], "medium"),
    (["high", "ultra", "ultrathink", "highest"], "high"),
    (["xhigh", "extrahigh"], "xhigh"),
    (["max"], "max"),
    (["adaptive", "auto"], "adaptive"),
]


@pytest.mark.parametrize(("inputs", "level"), THINKING_ROWS)
def test_every_row_of_the_thinking_table(inputs: list[str], level: str) -> None:
    for value in inputs:
        assert normalize_thinking(value) == level, value


@pytest.mark.parametrize(
    ("raw", "level"),
    [
        ("  HIGH ", "high"),
        ("Think Hard", "low"),
        ("think-hard", "low"),
        ("THINK_HARD", "low"),
        ("extra-high", "xhigh"),
        ("Extra_High", "xhigh"),
        ("ultra think", "high"),
        ("x-high", "xhigh"),
        ("Auto", "adaptive"),
    ],
)
def test_thinking_input_is_trimmed_lowercased_and_separators_removed(raw: str, level: str) -> None:
    assert normalize_thinking(raw) == level


@pytest.mark.parametrize("raw", [None, "", "  ", "extreme", "hi", "medium-rare", "0"])
def test_unrecognised_thinking_is_none(raw: str | None) -> None:
    assert normalize_thinking(raw) is None


# --- §9.1 references -----------------------------------------------------------------------------------

MODELS: dict[str, Any] = {
    "openai/gpt-4o": {"alias": "GPT", "params": {"temperature": 0.2}},
    "openai/gpt-4o-mini": {"alias": "mini"},
    "local/*": {"params": {"top_p": 0.9}},
    "local/qwen2.5-7b-instruct": {"alias": "qwen", "params": {"temperature": 0.1}},
}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("openai/gpt-4o", ("openai", "gpt-4o")),
        ("OpenAI/gpt-4o", ("openai", "gpt-4o")),
        ("openai/GPT-4o", ("openai", "GPT-4o")),  # only the provider is lower-cased
        ("gpt", ("openai", "gpt-4o")),  # alias, case-insensitive
        ("GPT", ("openai", "gpt-4o")),
        ("Mini", ("openai", "gpt-4o-mini")),
        ("QWEN", ("local", "qwen2.5-7b-instruct")),
        ("gpt-5", ("openai", "gpt-5")),  # no alias: the runtime's provider
        ("meta/llama/3", ("meta", "llama/3")),  # split at the first "/"
        (" openai/gpt-4o ", ("openai", "gpt-4o")),
    ],
)
def test_resolve_model(raw: str, expected: tuple[str, str]) -> None:
    assert resolve_model(raw, runtime_provider="openai", models=MODELS) == expected


@pytest.mark.parametrize("raw", ["", "  ", "/gpt", "openai/", "/", "openai/gpt 4o", "gpt\t4", "openai/*"])
def test_invalid_references(raw: str) -> None:
    assert resolve_model(raw, runtime_provider="openai", models=MODELS) is None


def test_runtime_provider_is_lowercased_for_bare_ids() -> None:
    assert resolve_model("m1", runtime_provider="Local", models={}) == ("local", "m1")


def test_params_merge_wildcard_then_exact() -> None:
    assert model_params(("local", "qwen2.5-7b-instruct"), MODELS) == {"top_p": 0.9, "temperature": 0.1}
    assert model_params(("local", "other"), MODELS) == {"top_p": 0.9}
    assert model_params(("openai", "gpt-4o"), MODELS) == {"temperature": 0.2}
    assert model_params(("openai", "gpt-5"), MODELS) == {}


# --- §5.3 / §9.2 choose_model ------------------------------------------------------------------------------


class FakeRuntime:
    def __init__(self, provider: str = "openai", default_model: str | None = "gpt-default") -> None:
        self.kind = "openai"
        self.provider = provider
        self.default_model = default_model
        self.calls: list[tuple[str | None, dict[str, Any]]] = []
        self.failures: dict[str, AgentRuntimeError] = {}

    async def complete(self, request: RuntimeRequest) -> str:
        self.calls.append((request.model, request.params))
        error = self.failures.get(request.model or "")
        if error is not None:
            raise error
        return f"reply from {request.model}"

    async def aclose(self) -> None:
        return None


def agent(model: str | dict[str, Any] | None = None, agent_id: str = "main") -> AgentSettings:
    return AgentSettings(id=agent_id, runtime={"kind": "openai"}, model=model)


def choose(
    override: str | None = None,
    *,
    gmail: str | None = None,
    model: str | dict[str, Any] | None = None,
    defaults_model: str | dict[str, Any] | None = None,
    models: dict[str, Any] | None = None,
    runtime: FakeRuntime | None = None,
) -> ModelChoice:
    return choose_model(
        override=override,
        gmail_default=gmail,
        agent=agent(model),
        defaults_model=defaults_model,
        models=MODELS if models is None else models,
        runtime=runtime or FakeRuntime(),
    )


ALLOWLIST_KEYS = "local/*, local/qwen2.5-7b-instruct, openai/gpt-4o, openai/gpt-4o-mini"


def test_order_override_first() -> None:
    c = choose("gpt", gmail="mini", model="openai/gpt-4o-mini")
    assert (c.provider, c.model, c.params) == ("openai", "gpt-4o", {"temperature": 0.2})


def test_order_gmail_default_before_agent_model() -> None:
    c = choose(None, gmail="mini", model="openai/gpt-4o")
    assert c.reference == "openai/gpt-4o-mini"


def test_order_agent_model_then_defaults_then_runtime() -> None:
    assert choose(model="openai/gpt-4o", defaults_model="openai/gpt-4o-mini").reference == "openai/gpt-4o"
    assert choose(defaults_model="openai/gpt-4o-mini").reference == "openai/gpt-4o-mini"
    assert choose(defaults_model={"primary": "mini"}).reference == "openai/gpt-4o-mini"
    c = choose()
    assert (c.provider, c.model, c.params, c.fallbacks) == ("openai", "gpt-default", {}, ())


def test_runtime_without_a_model_gives_an_empty_id() -> None:
    c = choose(runtime=FakeRuntime(default_model=None))
    assert (c.model, c.reference) == ("", "openai")


def test_bare_configured_model_uses_the_runtime_provider() -> None:
    c = choose(model="gpt-4.1", models={})
    assert c.reference == "openai/gpt-4.1"


def test_rejected_invalid_reference() -> None:
    with pytest.raises(ModelRejected) as info:
        choose("openai/gpt 4o")
    assert info.value.message == "model 'openai/gpt 4o' rejected: invalid model: openai/gpt 4o"
    with pytest.raises(ModelRejected) as info:
        choose("/x")
    assert info.value.message == "model '/x' rejected: invalid model: /x"


def test_rejected_by_allowlist_lists_the_sorted_keys() -> None:
    with pytest.raises(ModelRejected) as info:
        choose("gpt-5")
    assert info.value.message == (
        "model 'gpt-5' rejected by agents.defaults.models allowlist: "
        f"openai/gpt-5 is not in [{ALLOWLIST_KEYS}]"
    )
    with pytest.raises(ModelRejected) as info:
        choose("Anthropic/claude-x")
    assert info.value.message == (
        "model 'Anthropic/claude-x' rejected by agents.defaults.models allowlist: "
        f"anthropic/claude-x is not in [{ALLOWLIST_KEYS}]"
    )


def test_rejected_provider_not_served() -> None:
    with pytest.raises(ModelRejected) as info:
        choose("qwen")  # allowed (alias of local/qwen…), but the runtime serves "openai"
    assert info.value.message == "model 'qwen' rejected: provider 'local' is not served by agent 'main'"
    with pytest.raises(ModelRejected) as info:
        choose("local/anything")  # allowed by local/*
    assert (
        info.value.message
        == "model 'local/anything' rejected: provider 'local' is not served by agent 'main'"
    )


def test_empty_allowlist_allows_any_model_of_the_provider() -> None:
    assert choose("openai/gpt-5", models={}).reference == "openai/gpt-5"
    with pytest.raises(ModelRejected) as info:
        choose("anthropic/claude", models={})
    assert (
        info.value.message
        == "model 'anthropic/claude' rejected: provider 'anthropic' is not served by agent 'main'"
    )


def test_wildcard_allowlist_entry() -> None:
    c = choose("local/new-model", runtime=FakeRuntime(provider="local"))
    assert (c.reference, c.params) == ("local/new-model", {"top_p": 0.9})


def test_configured_model_and_fallbacks_are_always_allowed() -> None:
    model = {"primary": "openai/o3", "fallbacks": ["openai/o4-mini", "gpt-4o"]}
    c = choose("openai/o3", model=model)
    assert c.reference == "openai/o3"
    assert choose("o4-mini", model=model).reference == "openai/o4-mini"
    assert choose("openai/o3", model="openai/o3").reference == "openai/o3"
    with pytest.raises(ModelRejected):
        choose("openai/o1", model=model)


def test_fallbacks_of_the_configured_model() -> None:
    model = {
        "primary": "openai/o3",
        "fallbacks": ["openai/o4-mini", "gpt", "openai/o3", "local/x", "bad ref"],
    }
    c = choose(model=model)
    assert c.reference == "openai/o3"
    # duplicates, the chosen model itself, foreign providers and invalid references are dropped
    assert c.fallbacks == (("openai", "o4-mini", {}), ("openai", "gpt-4o", {"temperature": 0.2}))
    # an override keeps the configured fallbacks (minus itself)
    c = choose("o4-mini", model=model)
    assert c.reference == "openai/o4-mini"
    assert [f[:2] for f in c.fallbacks] == [("openai", "gpt-4o"), ("openai", "o3")]


def test_gmail_default_is_silently_ignored_when_unusable() -> None:
    for bad in ("bad ref", "gpt-5", "qwen", "local/x", "/"):
        assert choose(gmail=bad, model="openai/gpt-4o").reference == "openai/gpt-4o", bad
    assert choose(gmail="gpt-5").reference == "openai/gpt-default"


def test_blank_override_is_absent() -> None:
    assert choose("  ", model="openai/gpt-4o").reference == "openai/gpt-4o"


def test_configured_primary_of_another_provider_fails_the_run() -> None:
    with pytest.raises(ModelRejected) as info:
        choose(model="anthropic/claude")
    assert (
        info.value.message
        == "model 'anthropic/claude' rejected: provider 'anthropic' is not served by agent 'main'"
    )


def test_agent_id_in_provider_text() -> None:
    with pytest.raises(ModelRejected) as info:
        choose_model(
            override="local/x",
            gmail_default=None,
            agent=agent(agent_id="ops"),
            defaults_model=None,
            models={},
            runtime=FakeRuntime(),
        )
    assert info.value.message == "model 'local/x' rejected: provider 'local' is not served by agent 'ops'"


def test_echo_runtime_default_model() -> None:
    c = choose_model(
        override=None,
        gmail_default=None,
        agent=AgentSettings(id="main"),
        defaults_model=None,
        models={},
        runtime=EchoRuntime(),
    )
    assert c.reference == "echo/echo-1"
    c = choose_model(
        override="echo-2",
        gmail_default=None,
        agent=AgentSettings(id="main"),
        defaults_model=None,
        models={},
        runtime=EchoRuntime(),
    )
    assert c.reference == "echo/echo-2"


# --- complete_with_fallbacks -----------------------------------------------------------------------------


def request() -> RuntimeRequest:
    return RuntimeRequest(
        agent_id="main",
        run_kind="hook",
        session_key="hook:x",
        run_id="r1",
        model=None,
        thinking=None,
        system_prompt=None,
        history=(),
        prompt="hi",
        subject="hi",
    )


CHOICE = ModelChoice("openai", "a", {"p": 1}, (("openai", "b", {"p": 2}), ("openai", "c", {})))


async def test_first_model_succeeds() -> None:
    rt = FakeRuntime()
    assert await complete_with_fallbacks(rt, request(), CHOICE) == ("reply from a", "openai/a")
    assert rt.calls == [("a", {"p": 1})]


async def test_retryable_failure_moves_to_next_fallback() -> None:
    rt = FakeRuntime()
    rt.failures["a"] = AgentRuntimeError("openai: HTTP 500: upstream error", retryable=True)
    rt.failures["b"] = AgentRuntimeError("openai: HTTP 429: slow down", retryable=True)
    assert await complete_with_fallbacks(rt, request(), CHOICE) == ("reply from c", "openai/c")
    assert rt.calls == [("a", {"p": 1}), ("b", {"p": 2}), ("c", {})]


async def test_non_retryable_failure_stops() -> None:
    rt = FakeRuntime()
    rt.failures["a"] = AgentRuntimeError("openai: HTTP 400: bad request", retryable=False)
    with pytest.raises(AgentRuntimeError) as info:
        await complete_with_fallbacks(rt, request(), CHOICE)
    assert info.value.message == "openai: HTTP 400: bad request"
    assert len(rt.calls) == 1


async def test_last_error_is_raised_when_all_fail() -> None:
    rt = FakeRuntime()
    for m in "abc":
        rt.failures[m] = AgentRuntimeError(f"openai: HTTP 503: down {m}", retryable=True)
    with pytest.raises(AgentRuntimeError) as info:
        await complete_with_fallbacks(rt, request(), CHOICE)
    assert info.value.message == "openai: HTTP 503: down c"


async def test_empty_model_id_means_runtime_default() -> None:
    rt = FakeRuntime()
    assert await complete_with_fallbacks(rt, request(), ModelChoice("openai", "")) == (
        "reply from None",
        "openai",
    )
    assert rt.calls == [(None, {})]
