from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from hookgate.agents import ModelRejected, build_runtime, choose_model
from hookgate.config.agents import parse_every

if TYPE_CHECKING:
    from conftest import Kit

R = "plugins.entries.webhooks.config.routes"


# --- agents ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("0", 0), ("30m", 1800), ("45s", 45), ("2h", 7200), ("1d", 86400), ("007m", 420),
     # longer than a century is held at a century: every due time stays a 64-bit millisecond count
     ("36500d", 36500 * 86400), ("36501d", 36500 * 86400), ("9999999999999999d", 36500 * 86400),
     ("9" * 5000 + "s", 36500 * 86400)],
)
def test_parse_every(raw: str, seconds: int) -> None:
    assert parse_every(raw) == seconds


@pytest.mark.parametrize("raw", ["", "5", "1w", "m", "-1m", "1.5h", "0m0", "\uff13\uff10m"])
def test_parse_every_rejects(raw: str) -> None:
    assert parse_every(raw) is None


def test_agents_defaults_and_merge(kit: Kit) -> None:
    s = kit.load(
        {
            "agents": {
                "defaults": {
                    "runtime": {"kind": "openai", "apiKey": "k"},
                    "model": "openai/gpt",
                    "heartbeat": {"every": "1h", "ackMaxChars": 10, "prompt": "p"},
                    "systemPrompt": "sys",
                    "timeoutSeconds": 60,
                    "historyMessages": 0,
                    "maxConcurrentRuns": 2,
                    "envelopeTimezone": "utc",
                },
                "list": [
                    {"id": " First ", "heartbeat": {"every": "0"}},
                    {
                        "id": "Second",
                        "default": True,
                        "runtime": {"kind": "echo"},
                        "timeoutSeconds": 5,
                        "name": "Two",
                    },
                ],
            }
        }
    )
    a = s.agents
    assert [x.id for x in a.agents] == ["first", "second"]
    assert a.default_agent_id == "second"
    assert a.known_ids == {"first", "second"}
    first, second = a.agents
    assert first.runtime == {
        "kind": "openai",
        "baseUrl": "https://api.openai.com/v1",
        "headers": {},
        "requestTimeoutSeconds": 120,
    }
    assert first.runtime_secrets["apiKey"].value == "k"
    assert first.runtime_secrets["apiKey"].key_path == "agents.defaults.runtime.apiKey"
    assert (first.heartbeat.every_seconds, first.heartbeat.ack_max_chars, first.heartbeat.prompt) == (
        0,
        10,
        "p",
    )
    assert (first.model, first.system_prompt, first.timeout_seconds, first.thinking) == (
        "openai/gpt",
        "sys",
        60,
        "off",
    )
    assert second.runtime == {"kind": "echo"} and second.runtime_secrets == {}
    assert (second.timeout_seconds, second.name, second.heartbeat.every_seconds) == (5, "Two", 3600)
    assert (a.history_messages, a.max_concurrent_runs, a.envelope_timezone) == (0, 2, "utc")


def test_default_agent_is_first_without_flag(kit: Kit) -> None:
    assert kit.load({"agents": {"list": [{"id": "ops"}, {"id": "main"}]}}).agents.default_agent_id == "ops"


def test_agents_errors(kit: Kit) -> None:
    lines = kit.errors(
        {
            "agents": {
                "defaults": {"envelopeTimezone": "Mars/Olympus"},
                "list": [
                    {"id": "a", "default": True},
                    {"id": "A", "default": True},
                    {"id": "b", "heartbeat": {"every": "5x"}},
                    {"name": "no id"},
                    {"id": "c", "runtime": {"kind": "anthropic"}},
                    {"id": "d", "runtime": {"kind": "command", "command": ["rel/bin"]}},
                ],
            }
        }
    )
    # list[3] has no id, so the list is set aside (checked once it validates, below) while the rest
    # of the section is still checked
    assert lines == ["agents.list[3].id: required", 'agents.defaults.envelopeTimezone: unknown time zone "Mars/Olympus"']
    del_id = kit.errors(
        {
            "agents": {
                "defaults": {"envelopeTimezone": "Mars/Olympus"},
                "list": [
                    {"id": "a", "default": True},
                    {"id": "A", "default": True},
                    {"id": "b", "heartbeat": {"every": "5x"}},
                    {"id": "c", "runtime": {"kind": "anthropic"}},
                    {"id": "d", "runtime": {"kind": "command", "command": ["rel/bin"]}},
                ],
            }
        }
    )
    assert del_id == [
        'agents.list[3].runtime.apiKey: required for runtime kind "anthropic"',
        "agents.list[4].runtime.command[0]: must be an absolute path",
        "agents.list[1].id: duplicates agents.list[0].id (a)",
        'agents.list[2].heartbeat.every: invalid interval "5x" (expected <integer><s|m|h|d> or 0)',
        "agents.list: only one agent may set default: true",
        'agents.defaults.envelopeTimezone: unknown time zone "Mars/Olympus"',
    ]


def test_a_configured_model_no_run_can_use_is_warned_about(kit: Kit) -> None:
    """model.md §9: a run resolves its model when it starts, so a bad configured model is valid
    config, but `config check` says which agent it breaks; each warned primary fails that agent's
    runs with the §9.2 text (unless an override replaces it), and each warned fallback is skipped."""
    s = kit.load({"agents": {
        "defaults": {
            "model": {"primary": "echo/a", "fallbacks": ["openai/gpt-4o", "echo/x", "bad model"]},
            "models": {"echo/*": {"alias": "e"}, "nope": {}, "echo/ x": {}, "openai/gpt-4o": {"alias": "big"}},
        },
        "list": [
            {"id": "main"},  # inherits the defaults: a sound primary, two fallbacks it never uses
            {"id": "p", "model": "/"},
            {"id": "b", "model": "big"},
            {"id": "c", "model": "e"},
            {"id": "d", "model": "echo/echo-2"},  # fine: the echo runtime serves any echo model
            {"id": "o", "model": "Big", "runtime": {"kind": "openai"}},  # fine: aliases ignore case
        ],
    }})
    assert s.warnings == (
        ('agents.defaults.model.fallbacks[0]: provider "openai" is not served by agent "main" (its runtime '
         'serves "echo"): agent "main" never uses it'),
        ('agents.defaults.model.fallbacks[2]: "bad model" is not a valid model reference (provider/model or '
         'an alias): agent "main" never uses it'),
        ('agents.list[1].model: "/" is not a valid model reference (provider/model or an alias): every run '
         'of agent "p" without a usable model override fails'),
        ('agents.list[2].model: provider "openai" is not served by agent "b" (its runtime serves "echo"): '
         'every run of agent "b" without a usable model override fails'),
        ('agents.list[3].model: "e" is the alias of "echo/*", which is not a model reference: every run of '
         'agent "c" without a usable model override fails'),
        ('agents.defaults.models: "nope" is not a model reference (provider/model or provider/*): the entry '
         "matches no model"),
        ('agents.defaults.models: "echo/ x" is not a model reference (provider/model or provider/*): the '
         "entry matches no model"),
    )
    models = s.agents.models
    expected = {"p": "model '/' rejected: invalid model: /",
                "b": "model 'big' rejected: provider 'openai' is not served by agent 'b'",
                "c": "model 'e' rejected: invalid model: e"}
    for agent in s.agents.agents:
        runtime = build_runtime(agent)
        try:
            choice = choose_model(override=None, gmail_default=None, agent=agent, defaults_model=None,
                                  models=models, runtime=runtime)
        except ModelRejected as exc:
            assert exc.message == expected.pop(agent.id)
            # a usable override still runs: hence "without a usable model override"
            ok = choose_model(override="echo/y", gmail_default=None, agent=agent, defaults_model=None,
                              models=models, runtime=runtime)
            assert (ok.provider, ok.model) == ("echo", "y")
        else:
            assert agent.id in ("main", "d", "o")
            if agent.id == "main":  # the warned fallbacks are skipped, the served one kept
                assert (choice.model, [(f[0], f[1]) for f in choice.fallbacks]) == ("a", [("echo", "x")])
    assert expected == {}
    fine = kit.load({"agents": {"defaults": {"model": {"primary": "echo/a", "fallbacks": ["b"]}}}})
    assert fine.warnings == ()


def test_runtime_schema(kit: Kit) -> None:
    assert kit.errors({"agents": {"defaults": {"runtime": {"kind": "gpt"}}}}) == [
        'agents.defaults.runtime.kind: expected one of "echo", "openai", "anthropic", "command", got "gpt"'
    ]
    assert kit.errors({"agents": {"defaults": {"runtime": {"kind": "echo", "baseUrl": "x"}}}}) == [
        "agents.defaults.runtime.baseUrl: unknown key"
    ]
    assert kit.errors({"agents": {"defaults": {"runtime": {}}}}) == ["agents.defaults.runtime.kind: required"]
    s = kit.load(
        {
            "agents": {
                "list": [
                    {"id": "x", "runtime": {"kind": "anthropic", "apiKey": {"source": "env", "id": "AK"}}}
                ]
            }
        }
    )
    key = s.agents.agents[0].runtime_secrets["apiKey"]
    assert (key.value, key.error, key.source) == (
        None,
        'Environment variable "AK" is missing or empty.',
        "env:default:AK",
    )
    assert s.agents.agents[0].runtime["maxTokens"] == 4096
    m = kit.load({"agents": {"list": [{"id": "x", "model": {"primary": "a/b", "fallbacks": ["c/d"]}}]}})
    assert m.agents.agents[0].model == {"primary": "a/b", "fallbacks": ["c/d"]}
    # model.md §9.1: {primary, fallbacks?} — fallbacks alone is not a model
    assert "agents.list[0].model.primary: required" in kit.errors(
        {"agents": {"list": [{"id": "x", "model": {"fallbacks": ["c/d"]}}]}})


# --- routes ----------------------------------------------------------------------------------------


def routes(routes: dict[str, Any], limits: dict[str, Any] | None = None, **plugin: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"routes": routes}
    if limits is not None:
        config["limits"] = limits
    return {"plugins": {"entries": {"webhooks": {**plugin, "config": config}}}}


def test_route_defaults(kit: Kit) -> None:
    s = kit.load(routes({"zapier": {"sessionKey": " Agent:Main:Main ", "secret": " s "}}))
    (r,) = s.webhooks.routes
    assert s.webhooks.enabled
    assert (r.id, r.path, r.session_key, r.controller_id) == (
        "zapier",
        "/plugins/webhooks/zapier",
        "agent:main:main",
        "webhooks/zapier",
    )
    assert (r.auth.mode, r.auth.secrets, r.agent_id, r.execute, r.skipped_reason) == (
        "legacy",
        ("s",),
        "main",
        False,
        None,
    )
    assert r.limits.rate_limit.max_requests == 120 and r.limits.max_in_flight == 8
    assert r.limits.max_body_bytes == 262_144 and r.limits.body_timeout_seconds == 15
    assert s.webhooks.idempotency_ttl_hours == 24


def test_route_errors(kit: Kit) -> None:
    lines = kit.errors(
        {
            "agents": {"list": [{"id": "main"}]},
            **routes(
                {
                    "none": {"sessionKey": "s"},
                    "both": {"sessionKey": "s", "secret": "x", "auth": {"secret": "y"}},
                    "nokey": {"secret": "x", "sessionKey": "  "},
                    "hdr": {"sessionKey": "s", "auth": {"mode": "hmac-sha256", "secret": "x"}},
                    "hdr2": {"sessionKey": "s", "auth": {"mode": "header", "secret": "x", "header": " "}},
                    "agent": {"sessionKey": "s", "secret": "x", "agentId": "Ghost"},
                    "bad id!": {"sessionKey": "s", "secret": "x"},
                }
            ),
        }
    )
    assert lines == [
        f"{R}.none: secret or auth is required",
        f"{R}.both: use either secret or auth, not both",
        f"{R}.nokey.sessionKey: required",
        f"{R}.hdr.auth.header: header is required for header and hmac-sha256 auth",
        f"{R}.hdr2.auth.header: header is required for header and hmac-sha256 auth",
        f'{R}.agent.agentId: unknown agent "Ghost"',
        f'{R}["bad id!"]: invalid route id (expected ^[A-Za-z0-9][A-Za-z0-9_.:-]{{0,127}}$)',
    ]


def test_route_ids_equal_once_trimmed_are_one_id(kit: Kit) -> None:
    cfg = routes({"a": {"sessionKey": "s", "secret": "x"}, " a ": {"sessionKey": "s", "secret": "y", "path": "/other"}})
    assert kit.errors(cfg) == [f'{R}[" a "]: duplicate route id "a" (also {R}.a; ids are trimmed)']
    # a disabled key is no route: a stale one beside the active route still loads
    cfg = routes({"a": {"sessionKey": "s", "secret": "x"}, " a ": {"sessionKey": "s", "secret": "y", "enabled": False}})
    assert [r.id for r in kit.load(cfg).webhooks.routes] == ["a"]


def test_route_auth_settings(kit: Kit) -> None:
    s = kit.load(
        {
            "agents": {"list": [{"id": "main"}, {"id": "ops"}]},
            **routes(
                {
                    "a": {"sessionKey": "agent:ops:x", "auth": {"secret": "s1"}},
                    "b": {
                        "sessionKey": "s",
                        "agentId": "OPS",
                        "auth": {
                            "mode": "hmac-sha256",
                            "header": " X-Sig ",
                            "prefix": "sha256=",
                            "secrets": ["s1", "s2"],
                        },
                        "limits": {"maxInFlight": 2, "rateLimit": {"maxRequests": 5}},
                        "execute": True,
                    },
                    "c": {
                        "sessionKey": "agent:ghost:x",
                        "auth": {"mode": "standard-webhooks", "secret": "whsec_x", "toleranceSeconds": 60},
                    },
                    "off": {"enabled": False},
                },
                limits={"rateLimit": {"windowSeconds": 10}, "maxBodyBytes": 100},
            ),
        }
    )
    a, b, c = s.webhooks.routes
    assert (a.auth.mode, a.auth.prefix, a.auth.secrets, a.agent_id) == ("bearer", "Bearer", ("s1",), "ops")
    assert (b.auth.mode, b.auth.header, b.auth.prefix, b.auth.secrets) == (
        "hmac-sha256",
        "x-sig",
        "sha256=",
        ("s1", "s2"),
    )
    assert (b.agent_id, b.execute) == ("ops", True)
    assert (b.limits.rate_limit.window_seconds, b.limits.rate_limit.max_requests) == (10, 5)
    assert (b.limits.max_in_flight, b.limits.max_body_bytes, b.limits.body_timeout_seconds) == (2, 100, 15)
    assert (c.auth.mode, c.auth.tolerance_seconds, c.agent_id) == ("standard-webhooks", 60, "main")
    assert s.webhooks.limits.rate_limit.window_seconds == 10
    assert kit.errors(routes({"x": {"sessionKey": "s", "auth": {"secrets": []}}})) == [
        f"{R}.x.auth.secrets: must have 1 to 5 entries"
    ]
    assert kit.errors(routes({"x": {"sessionKey": "s", "auth": {"secrets": ["a"] * 6}}})) == [
        f"{R}.x.auth.secrets: must have 1 to 5 entries"
    ]


def test_route_secret_skipping(kit: Kit) -> None:
    ref = {"source": "env", "id": "MISSING"}
    s = kit.load(
        routes(
            {
                "skip": {"sessionKey": "s", "secret": ref},
                "partial": {"sessionKey": "s", "auth": {"secrets": [ref, "ok"]}},
            }
        )
    )
    skip, partial = s.webhooks.routes
    assert skip.skipped_reason == 'Environment variable "MISSING" is missing or empty.'
    assert skip.auth.secrets == ()
    assert partial.skipped_reason is None and partial.auth.secrets == ("ok",)
    assert s.warnings == (
        'route skip: skipped (Environment variable "MISSING" is missing or empty.)',
        f'{R}.partial.auth.secrets[0]: Environment variable "MISSING" is missing or empty.',
    )


def test_plugin_disabled_and_absent(kit: Kit) -> None:
    assert not kit.load({}).webhooks.enabled
    s = kit.load(routes({"x": {}}, enabled=False))
    assert not s.webhooks.enabled and s.webhooks.routes == ()


def test_route_path_conflicts(kit: Kit) -> None:
    lines = kit.errors(
        {
            "hooks": {"enabled": True, "token": "t", "path": "/Hooks"},
            **routes(
                {
                    "a": {"sessionKey": "s", "secret": "x", "path": "/shared/"},
                    "b": {"sessionKey": "s", "secret": "x", "path": "SHARED"},
                    "c": {"sessionKey": "s", "secret": "x", "path": "/hooks/c"},
                    "d": {"sessionKey": "s", "secret": "x", "path": "/Metrics/x"},
                    "e": {"sessionKey": "s", "secret": "x", "path": "/healthz"},
                    "f": {"enabled": False, "path": "/shared"},
                    "g": {"sessionKey": "s", "secret": {"source": "env", "id": "NOPE"}, "path": "/shared"},
                }
            ),
        }
    )
    assert lines == [
        f"{R}.b.path conflicts with routes.a.path (/SHARED).",
        f"{R}.c.path conflicts with hooks.path (/Hooks).",
        f"{R}.d.path conflicts with reserved path (/Metrics/x).",
        f"{R}.e.path conflicts with reserved path (/healthz).",
        f"{R}.g.path conflicts with routes.a.path (/shared).",
    ]


def test_route_under_disabled_hooks_path_is_fine(kit: Kit) -> None:
    s = kit.load(routes({"c": {"sessionKey": "s", "secret": "x", "path": "/hooks/c"}}))
    assert s.webhooks.routes[0].path == "/hooks/c"


def test_a_route_path_no_request_can_carry_is_warned_about(kit: Kit) -> None:
    """webhooks.md §1.4: paths match without decoding; a raw non-ASCII byte or a space cannot appear in
    a request-target, so such a route is unreachable: `config check` says so (it said nothing)."""
    s = kit.load(routes({"de": {"sessionKey": "s", "secret": "x", "path": "/hooks-in/straße"},
                         "ok": {"sessionKey": "s", "secret": "x", "path": "/hooks-in/other"}}))
    warning = (f"{R}.de.path (/hooks-in/straße): no request can reach it: it holds a space, a control or a "
               "non-ASCII character, and request paths are matched without decoding escapes")
    assert s.warnings == (warning,)
    # nor a dot segment: a request's path is matched with its dot segments removed
    s = kit.load(routes({"dot": {"sessionKey": "s", "secret": "x", "path": "/a/../b"}}))
    assert s.warnings == ((f"{R}.dot.path (/a/../b): no request can reach it: it holds a dot segment, and request "
                          "paths are matched with theirs removed"),)


def test_a_hooks_path_no_request_can_carry_is_warned_about(kit: Kit) -> None:
    for path, why in (("/./hooks", "it holds a dot segment, and request paths are matched with theirs removed"),
                      ("/h ooks", ("it holds a space, a control or a non-ASCII character, and request paths are "
                                  "matched without decoding escapes")),
                      ("/hooks?x=1", 'it holds a "?" or "#", where a request\'s path ends'),
                      ("/hooks#in", 'it holds a "?" or "#", where a request\'s path ends')):
        s = kit.load({"hooks": {"enabled": True, "token": "t", "path": path}})
        assert s.warnings == (f"hooks.path ({path}): no request can reach it: {why}",), path
    assert kit.load({"hooks": {"enabled": True, "token": "t", "path": "/in/hooks"}}).warnings == ()
