"""The echo runtime (model.md §8.1) and the runtime factory / preflight (§5.4, §8)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from hookgate.agents.anthropic import AnthropicRuntime
from hookgate.agents.base import AgentRuntimeError, RuntimeRequest, UnknownRuntime, build_runtime, preflight
from hookgate.agents.command import CommandRuntime
from hookgate.agents.echo import EchoRuntime, sleep_seconds
from hookgate.agents.openai import OpenAIRuntime
from hookgate.config.settings import AgentSettings, SecretSource


def req(subject: str, kind: str = "hook") -> RuntimeRequest:
    return RuntimeRequest(
        agent_id="main",
        run_kind=kind,
        session_key="hook:x",
        run_id="r1",
        model=None,
        thinking="high",
        system_prompt=None,
        history=(),
        prompt=f"wrapped {subject}",
        subject=subject,
    )


async def test_echo_reply_is_the_subject() -> None:
    rt = EchoRuntime()
    assert (rt.kind, rt.provider, rt.default_model) == ("echo", "echo", "echo-1")
    assert await rt.complete(req("Merged PR #42")) == "echo: Merged PR #42"
    assert await rt.complete(req("")) == "echo: "


async def test_heartbeat_without_events_acks() -> None:
    rt = EchoRuntime()
    assert await rt.complete(req("", kind="heartbeat")) == "HEARTBEAT_OK"
    assert await rt.complete(req("System: [t] something", kind="heartbeat")) == "echo: System: [t] something"


async def test_heartbeat_ok_directive() -> None:
    assert await EchoRuntime().complete(req("all good [[echo:heartbeat_ok]]")) == "HEARTBEAT_OK"


async def test_fail_directive() -> None:
    with pytest.raises(AgentRuntimeError) as info:
        await EchoRuntime().complete(req("please [[echo:fail]] now"))
    assert info.value.message == "echo runtime: requested failure"
    assert info.value.retryable is False


@pytest.mark.parametrize(
    ("subject", "seconds"),
    [
        ("[[echo:sleep=2]]", 2.0),
        ("x [[echo:sleep=0.2]] y", 0.2),
        ("[[echo:sleep=.5]]", 0.5),
        ("[[echo:sleep=0]]", 0.0),
        ("[[echo:sleep=3600]]", 3600.0),
        ("[[echo:sleep=3601]] [[echo:sleep=1]]", 1.0),
        ("[[echo:sleep=3601]]", None),
        ("[[echo:sleep=-1]]", None),
        ("[[echo:sleep=abc]]", None),
        ("[[echo:sleep=]]", None),
        ("no directive", None),
    ],
)
def test_sleep_directive_parsing(subject: str, seconds: float | None) -> None:
    assert sleep_seconds(subject) == seconds


async def test_sleep_directive_delays_the_reply() -> None:
    start = time.monotonic()
    assert await EchoRuntime().complete(req("[[echo:sleep=0.2]] hi")) == "echo: [[echo:sleep=0.2]] hi"
    assert time.monotonic() - start >= 0.19


async def test_sleep_is_cancellable() -> None:
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(EchoRuntime().complete(req("[[echo:sleep=3600]]")), 0.05)
    assert time.monotonic() - start < 1


async def test_sleep_then_fail() -> None:
    with pytest.raises(AgentRuntimeError):
        await EchoRuntime().complete(req("[[echo:sleep=0.01]] [[echo:fail]]"))


# --- build_runtime / preflight -------------------------------------------------------------------------


def secret(value: str | None, error: str | None = None) -> SecretSource:
    return SecretSource("agents.defaults.runtime.apiKey", "env:default:KEY", value, error)


async def test_build_runtime_kinds() -> None:
    echo = build_runtime(AgentSettings(id="main"))
    assert isinstance(echo, EchoRuntime)
    oa = build_runtime(
        AgentSettings(
            id="main",
            runtime={"kind": "openai", "provider": "Local", "model": "local/q"},
            runtime_secrets={"apiKey": secret("k")},
        )
    )
    assert isinstance(oa, OpenAIRuntime)
    assert (oa.kind, oa.provider, oa.default_model) == ("openai", "local", "q")
    assert oa.headers["authorization"] == "Bearer k"
    an = build_runtime(
        AgentSettings(
            id="main",
            runtime={"kind": "anthropic", "model": "claude-x"},
            runtime_secrets={"apiKey": secret("k")},
        )
    )
    assert isinstance(an, AnthropicRuntime)
    assert (an.provider, an.default_model, an.max_tokens) == ("anthropic", "claude-x", 4096)
    cmd = build_runtime(AgentSettings(id="main", runtime={"kind": "command", "command": ["/bin/cat"]}))
    assert isinstance(cmd, CommandRuntime)
    assert (cmd.provider, cmd.default_model) == ("command", None)
    unknown = build_runtime(AgentSettings(id="main", runtime={"kind": "nope"}))
    assert isinstance(unknown, UnknownRuntime)
    with pytest.raises(AgentRuntimeError):
        await unknown.complete(req("x"))
    for rt in (echo, oa, an, cmd, unknown):
        await rt.aclose()


def test_openai_without_key_sends_no_authorization() -> None:
    rt = build_runtime(AgentSettings(id="main", runtime={"kind": "openai", "headers": {"X-Team": "a"}}))
    assert isinstance(rt, OpenAIRuntime)
    assert "authorization" not in rt.headers
    assert rt.headers["x-team"] == "a"


def test_preflight_usable() -> None:
    assert preflight(AgentSettings(id="main")) is None
    assert preflight(AgentSettings(id="main", runtime={"kind": "openai"})) is None
    assert (
        preflight(
            AgentSettings(id="main", runtime={"kind": "anthropic"}, runtime_secrets={"apiKey": secret("k")})
        )
        is None
    )


def test_preflight_unresolved_secret() -> None:
    agent = AgentSettings(
        id="main",
        runtime={"kind": "openai"},
        runtime_secrets={"apiKey": secret(None, 'environment variable "KEY" is not set')},
    )
    assert preflight(agent) == 'runtime secret unresolved: environment variable "KEY" is not set'
    agent = AgentSettings(
        id="main",
        runtime={"kind": "anthropic"},
        runtime_secrets={"apiKey": secret(None, "secret value is empty")},
    )
    assert preflight(agent) == "runtime secret unresolved: secret value is empty"


def test_preflight_anthropic_requires_a_key() -> None:
    assert preflight(AgentSettings(id="main", runtime={"kind": "anthropic"})) == (
        "runtime secret unresolved: apiKey is required for runtime kind anthropic"
    )


def test_preflight_command(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sh"
    assert preflight(AgentSettings(id="main", runtime={"kind": "command", "command": [str(missing)]})) == (
        f"runtime command not found: {missing}"
    )
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    os.chmod(script, 0o644)
    assert preflight(AgentSettings(id="main", runtime={"kind": "command", "command": [str(script)]})) == (
        f"runtime command not executable: {script}"
    )
    assert preflight(AgentSettings(id="main", runtime={"kind": "command", "command": [str(tmp_path)]})) == (
        f"runtime command not executable: {tmp_path}"
    )
    os.chmod(script, 0o755)
    assert preflight(AgentSettings(id="main", runtime={"kind": "command", "command": [str(script)]})) is None
    assert preflight(
        AgentSettings(
            id="main", runtime={"kind": "command", "command": [str(script)], "cwd": str(tmp_path / "nope")}
        )
    ) == (f"runtime cwd not found: {tmp_path / 'nope'}")


def test_preflight_unknown_kind() -> None:
    assert preflight(AgentSettings(id="main", runtime={"kind": "nope"})) == "unknown runtime kind: nope"
