from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import json5
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookgate.config.loader import join_surrogates, load_settings, locate_config, read_config_file
from hookgate.errors import ConfigError

if TYPE_CHECKING:
    from conftest import Kit

README_EXAMPLE = Path(__file__).with_name("readme_example.json5")
README_ENV = {"HOOKGATE_GATEWAY_TOKEN": "gw-token", "HOOKGATE_HOOKS_TOKEN": "hooks-token"}


# --- locating --------------------------------------------------------------------------------------


def test_locate_flag_wins(kit: Kit, tmp_path: Path) -> None:
    a = kit.write("{}", "a.json5")
    kit.write("{}", "b.json5")
    kit.write("{}")
    assert locate_config(str(a), {"HOOKGATE_CONFIG": "b.json5"}, str(tmp_path)) == str(a)
    assert locate_config(None, {"HOOKGATE_CONFIG": "b.json5"}, str(tmp_path)) == str(tmp_path / "b.json5")
    assert locate_config(None, {}, str(tmp_path)) == str(tmp_path / "hookgate.json5")


def test_locate_missing_paths(kit: Kit, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        locate_config("nope.json5", {}, str(tmp_path))
    assert info.value.lines == ["config file not found: nope.json5"]
    with pytest.raises(ConfigError) as info:
        locate_config(None, {"HOOKGATE_CONFIG": "/no/such.json5"}, str(tmp_path))
    assert info.value.lines == ["config file not found: /no/such.json5"]
    assert locate_config(None, {}, str(tmp_path)) is None
    # a flag given empty (--config "$UNSET") does not fall through to the next source or the empty config
    kit.write("{}")
    for flag in ("", " "):
        with pytest.raises(ConfigError) as info:
            locate_config(flag, {"HOOKGATE_CONFIG": "hookgate.json5"}, str(tmp_path))
        assert info.value.lines == [f"config file not found: {flag}"]
    # an empty variable counts as unset
    assert locate_config(None, {"HOOKGATE_CONFIG": ""}, str(tmp_path)) == str(tmp_path / "hookgate.json5")
    # a directory exists, but is no config file
    with pytest.raises(ConfigError) as info:
        locate_config(".", {}, str(tmp_path))
    assert info.value.lines == ["config file is a directory: ."]


def test_empty_config_defaults(kit: Kit, tmp_path: Path) -> None:
    s = load_settings(None, {}, cwd=str(tmp_path))
    assert s.config_path is None
    assert s.config_dir == str(tmp_path)
    assert not s.hooks.enabled
    assert s.webhooks.routes == ()
    assert [a.id for a in s.agents.agents] == ["main"]
    assert s.agents.default_agent_id == "main"
    assert s.agents.agents[0].runtime == {"kind": "echo"}
    assert s.storage.backend == "sqlite"
    assert s.storage.sqlite_path == str(tmp_path / "hookgate.db")
    assert s.gateway.port == 18789 and s.gateway.bind == "127.0.0.1"
    assert s.hooks.transforms_dir == str(tmp_path / "hooks" / "transforms")
    assert len(s.config_hash) == 16
    assert s.warnings


def test_load_missing_file(kit: Kit, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(str(tmp_path / "x.json5"), {})
    assert info.value.lines == [f"config file not found: {tmp_path / 'x.json5'}"]


def test_invalid_json5_and_non_object(kit: Kit, tmp_path: Path) -> None:
    lines = kit.errors("{ hooks: ")
    assert len(lines) == 1 and "invalid JSON5" in lines[0]
    assert kit.errors("[1]") == [f"{tmp_path / 'hookgate.json5'}: expected object, got array"]


def test_a_number_of_more_digits_than_python_converts_is_placed(kit: Kit, tmp_path: Path) -> None:
    # Python's own words were printed: "Exceeds the limit (4300 digits) for integer string conversion
    # … use sys.set_int_max_str_digits() to increase the limit", with no position.
    text = '{\n  hooks: { note: "' + "1" * 5_000 + '",\n    maxBodyBytes: -' + "9" * 10_000 + " } }"
    assert kit.errors(text) == [
        f"{tmp_path / 'hookgate.json5'}: invalid JSON5: line 3, column 19: a number of 10000 digits (integers are 64-bit)"]


def test_readme_example_loads(kit: Kit, tmp_path: Path) -> None:
    s = kit.load(README_EXAMPLE.read_text(), README_ENV)
    assert s.gateway.auth_token == "gw-token"
    assert s.hooks.token == "hooks-token"
    assert [m.id for m in s.hooks.mappings] == ["github", "gmail"]
    assert s.hooks.allowed_agent_ids == frozenset({"main", "ops"})
    assert [r.id for r in s.webhooks.routes] == ["zapier", "ci"]
    ci = s.webhooks.routes[1]
    assert ci.skipped_reason == 'Environment variable "CI_WEBHOOK_SECRET" is missing or empty.'
    assert ci.agent_id == "ops" and ci.controller_id == "ci/nightly"
    assert s.webhooks.routes[0].auth.secrets == ("zap-5f2b8c0e9d4a",)
    ops = s.agents.get("ops")
    assert ops is not None and ops.runtime["kind"] == "openai" and "apiKey" not in ops.runtime
    assert ops.runtime_secrets["apiKey"].value is None
    assert ops.heartbeat.every_seconds == 1800
    tg = s.channel("telegram")
    assert tg is not None and tg.default_to == "123456789" and tg.secrets["botToken"].value is None
    assert s.storage.sqlite_path == str(tmp_path / "hookgate.db")
    assert any(w.startswith("route ci: skipped") for w in s.warnings)
    full = kit.load(README_EXAMPLE.read_text(), {**README_ENV, "CI_WEBHOOK_SECRET": "ci-s"})
    assert full.webhooks.routes[1].skipped_reason is None
    assert full.webhooks.routes[1].auth.secrets == ("ci-s",)


# --- environment substitution ------------------------------------------------------------------------


def test_env_substitution(kit: Kit, tmp_path: Path) -> None:
    s = kit.load(
        {
            "gateway": {
                "bind": "${HOST}",
                "http": {"securityHeaders": {"strictTransportSecurity": "a$${B}c${N}"}},
            }
        },
        {"HOST": "0.0.0.0", "N": "1"},
    )
    assert s.gateway.bind == "0.0.0.0"
    assert s.gateway.strict_transport_security == "a${B}c1"


def test_env_substitution_never_in_keys_and_unset(kit: Kit, tmp_path: Path) -> None:
    lines = kit.errors(
        {"gateway": {"bind": "${NOPE}", "trustedProxies": ["${ALSO_NOPE}"]}, "${KEY}": 1},
        {"KEY": "x"},
    )
    assert lines == [
        'gateway.bind: environment variable "NOPE" is not set',
        'gateway.trustedProxies[0]: environment variable "ALSO_NOPE" is not set',
        "${KEY}: unknown key",
    ]


def test_env_value_is_substituted_before_validation(kit: Kit, tmp_path: Path) -> None:
    assert kit.errors({"hooks": {"path": "${P}", "maxBodyBytes": 1}}, {"P": "/metrics"}) == [
        "hooks.path may not be a reserved path (/metrics)"
    ]


# --- strictness ------------------------------------------------------------------------------------


def test_unknown_keys_all_reported(kit: Kit, tmp_path: Path) -> None:
    lines = kit.errors(
        {
            "nope": 1,
            "gateway": {"bnd": "x"},
            "hooks": {"mappings": [{"matc": {}}, {"match": {"pth": "x"}}]},
            "channels": {"sms": {}},
            "plugins": {"entries": {"other": {}, "webhooks": {"config": {"relay": {}}}}},
        },
    )
    assert lines == [
        "nope: unknown key",
        "gateway.bnd: unknown key",
        "hooks.mappings[0].matc: unknown key",
        "hooks.mappings[1].match.pth: unknown key",
        "channels.sms: unknown key",
        'plugins.entries.other: unknown plugin (hookgate supports only "webhooks")',
        "plugins.entries.webhooks.config.relay: unknown key",
    ]


def test_a_key_that_would_not_read_back_is_quoted_in_its_path(kit: Kit) -> None:
    # An empty key printed an empty path, and "a.b" printed as if it were "b" inside "a".
    lines = kit.errors({"": 1, "a.b": 1, "hooks": {"": 1, "to ken": 1, "x\ny": 1, "ok-key_é": 1},
                        "plugins": {"entries": {"webhooks": {"config": {"routes": {"a.b": {"sessionKey": 1}}}}}}})
    assert lines == [
        '[""]: unknown key',
        '["a.b"]: unknown key',
        'hooks[""]: unknown key',
        'hooks["to ken"]: unknown key',
        'hooks["x\\ny"]: unknown key',
        "hooks.ok-key_é: unknown key",
        'plugins.entries.webhooks.config.routes["a.b"].sessionKey: expected string, got integer',
    ], lines


def test_route_dispatch_keys_are_unknown(kit: Kit, tmp_path: Path) -> None:
    lines = kit.errors(
        {
            "plugins": {
                "entries": {
                    "webhooks": {
                        "config": {"routes": {"r": {"sessionKey": "s", "secret": "x", "dispatch": {}}}}
                    }
                }
            }
        },
    )
    assert lines == ["plugins.entries.webhooks.config.routes.r.dispatch: unknown key"]


def test_type_errors(kit: Kit, tmp_path: Path) -> None:
    lines = kit.errors(
        {
            "gateway": {"port": "80", "allowRealIpFallback": 1, "trustedProxies": "10.0.0.0/8"},
            "hooks": {"enabled": "true", "maxBodyBytes": 1.5, "token": 5, "presets": [1]},
            "agents": {"list": {}},
        },
    )
    assert lines == [
        "gateway.port: expected integer, got string",
        "gateway.allowRealIpFallback: expected boolean, got integer",
        "gateway.trustedProxies: expected array, got string",
        "hooks.enabled: expected boolean, got string",
        "hooks.maxBodyBytes: expected integer, got number",
        "hooks.token: expected string or SecretRef object, got integer",
        "hooks.presets[0]: expected string, got integer",
        "agents.list: expected array, got object",
    ]


def test_a_repeated_key_is_a_warning_and_the_last_value_wins(kit: Kit) -> None:
    # as in JSON5 and the JavaScript gateway the last value wins, but a second `gateway: {…}` section
    # silently dropping the first is worth saying, with the object's path
    s = kit.load('{gateway: {port: 1}, hooks: {enabled: true, token: "t", path: "/a", path: "/b"},'
                 ' gateway: {bind: "::1"}, agents: {list: [{id: "x", id: "y"}]}}')
    assert s.warnings[:3] == (
        '(top level): key "gateway" appears more than once; the last value is used',
        'hooks: key "path" appears more than once; the last value is used',
        'agents.list[0]: key "id" appears more than once; the last value is used',
    )
    assert s.gateway.port == 18789 and s.gateway.bind == "::1" and s.hooks.base_path == "/b"
    assert [a.id for a in s.agents.agents] == ["y"]
    # beside errors too: config check prints both
    with pytest.raises(ConfigError) as info:
        kit.load('{gateway: {port: "x"}, gateway: {port: "y"}}')
    assert info.value.lines == ["gateway.port: expected integer, got string"]
    assert info.value.warnings[0] == '(top level): key "gateway" appears more than once; the last value is used'


def test_an_integral_number_is_an_integer(kit: Kit) -> None:
    # JSON5 has one number type: 1e6 and 8080.0 are integers, as for the JavaScript gateway's files
    s = kit.load("{hooks: {enabled: true, token: 't', maxBodyBytes: 1e6}, gateway: {port: 8080.0}}")
    assert s.hooks.max_body_bytes == 1_000_000 and type(s.hooks.max_body_bytes) is int
    assert s.gateway.port == 8080 and type(s.gateway.port) is int
    assert s.effective["hooks"]["maxBodyBytes"] == 1_000_000 and type(s.effective["hooks"]["maxBodyBytes"]) is int
    assert kit.errors({"gateway": {"port": 1e300}}) == ["gateway.port: integer out of range"]
    assert kit.errors({"gateway": {"port": 8080.5}}) == ["gateway.port: expected integer, got number"]


@pytest.mark.parametrize(
    ("key", "bad", "good"),
    [
        ("maxBodyBytes", 33_554_433, 33_554_432),
        ("bodyTimeoutSeconds", 301, 300),
        ("idempotencyTtlSeconds", 0, 86_400),
        ("transformTimeoutSeconds", 0.05, 0.1),
    ],
)
def test_hooks_ranges(kit: Kit, tmp_path: Path, key: str, bad: float, good: float) -> None:
    lines = kit.errors({"hooks": {key: bad}})
    assert len(lines) == 1 and lines[0].startswith(f"hooks.{key}: must be between")
    assert kit.load({"hooks": {key: good}}).effective["hooks"][key] == good


def test_agent_ranges_and_enums(kit: Kit, tmp_path: Path) -> None:
    lines = kit.errors(
        {
            "agents": {
                "defaults": {"maxConcurrentRuns": 65, "historyMessages": 201, "timeoutSeconds": 172_801}
            },
            "storage": {"backend": "mysql"},
        },
    )
    assert lines == [  # file order
        "agents.defaults.maxConcurrentRuns: must be between 1 and 64",
        "agents.defaults.historyMessages: must be between 0 and 200",
        "agents.defaults.timeoutSeconds: must be between 1 and 172800",
        'storage.backend: expected one of "sqlite", "postgres", got "mysql"',
    ]


def test_secret_ref_is_strict(kit: Kit, tmp_path: Path) -> None:
    lines = kit.errors({"hooks": {"token": {"source": "vault", "id": "x", "extra": 1}}})
    assert lines == [
        'hooks.token.source: expected one of "env", "file", "exec", got "vault"',
        "hooks.token.extra: unknown key",
    ]
    assert kit.errors({"hooks": {"token": {"source": "env"}}}) == ["hooks.token.id: required"]


def test_channels_schema(kit: Kit, tmp_path: Path) -> None:
    s = kit.load(
        {
            "channels": {
                "file": {"path": "out/deliveries.jsonl"},
                "imessage": {"serverUrl": "http://x", "password": "pw"},
                "console": {"enabled": False, "retry": {"maxAttempts": 2}},
                "msteams": {"webhooks": {"ops": "https://teams/x", "ops.alerts": "https://teams/y"}},
            }
        },
    )
    ids = [c.id for c in s.channels]
    assert ids == ["file", "imessage", "console", "msteams"]
    assert s.enabled_channel_ids() == ("file", "imessage", "msteams")
    file_ch = s.channels[0]
    assert file_ch.options["path"] == str(tmp_path / "out" / "deliveries.jsonl")
    imsg = s.channels[1]
    assert imsg.options["method"] == "private-api" and imsg.secrets["password"].value == "pw"
    assert "password" not in imsg.options
    assert s.channels[2].retry_max_attempts == 2 and s.channel("console") is None
    assert s.channels[3].secrets["webhooks.ops"].value == "https://teams/x"
    assert s.channels[3].secrets["webhooks.ops.alerts"].value == "https://teams/y"  # a target name with a dot
    assert kit.errors({"channels": {"imessage": {"method": "sms"}}}) == [
        'channels.imessage.method: expected one of "private-api", "apple-script", got "sms"'
    ]


def test_a_channel_every_delivery_to_fails_is_a_warning(kit: Kit) -> None:
    """model.md §10.2 names what each channel sends with; an enabled channel missing it (or with an
    API URL that is not http(s)) loaded silently, and every delivery to it dead-lettered. The config
    stays valid (it may be filled in later); config check and serve's start say so. A blank
    defaultTo is no default target (it was used as the target "  ")."""
    s = kit.load({"channels": {
        "webhook": {}, "telegram": {"defaultTo": "  "}, "mattermost": {"token": "t", "baseUrl": " "},
        "slack": {"botToken": "x", "apiBaseUrl": "ftp://x"}, "msteams": {}, "irc": {"server": "irc.x", "nick": "n"},
        "discord": {"botToken": "x", "defaultTo": " #ops "}, "signal": {"enabled": False},
        "imessage": {"serverUrl": "HTTPS://mac.local", "password": "pw"}, "console": {}, "file": {},
    }})
    assert s.warnings == (
        "channels.webhook.url: not set: every delivery to channel webhook dead-letters",
        "channels.telegram.botToken: not set: every delivery to channel telegram dead-letters",
        "channels.telegram.defaultTo: blank: ignored (the channel has no default target)",
        "channels.mattermost.baseUrl: not set: every delivery to channel mattermost dead-letters",
        "channels.slack.apiBaseUrl: not an http(s) URL: every delivery to channel slack dead-letters",
        "channels.msteams.webhooks: not set: every delivery to channel msteams dead-letters",
    )
    assert s.channel("telegram").default_to is None and s.channel("discord").default_to == "#ops"


def test_configured_http_headers_must_be_sendable(kit: Kit) -> None:
    """A header no HTTP client can send is a startup error, not a delivery retried until it is dead."""
    webhook = {"url": "http://x", "headers": {"X Team": "ops", "X-Team": "équipe", "X-Line": "a\r\nb", "X-Ok": "v\t1"}}
    runtime = {"kind": "openai", "model": "m", "headers": {"Bad:Name": "x"}}
    assert kit.errors({"channels": {"webhook": webhook}, "agents": {"list": [{"id": "main", "runtime": runtime}]}}) == [
        'channels.webhook.headers["X Team"]: invalid HTTP header name',
        "channels.webhook.headers.X-Team: invalid HTTP header value (printable ASCII only)",
        "channels.webhook.headers.X-Line: invalid HTTP header value (printable ASCII only)",
        "agents.list[0].runtime.headers.Bad:Name: invalid HTTP header name",
    ]
    ok = kit.load({"channels": {"webhook": {"url": "http://x", "headers": {"X-Ok": "v\t1", "x_b.c~": ""}}}})
    assert ok.channels[0].options["headers"] == {"X-Ok": "v\t1", "x_b.c~": ""}


def test_gateway_settings(kit: Kit, tmp_path: Path) -> None:
    s = kit.load(
        {"gateway": {"trustedProxies": ["10.0.0.0/8", "::1"], "auth": {"mode": "token", "token": " t "}}},
    )
    assert [str(n) for n in s.gateway.trusted_proxies] == ["10.0.0.0/8", "::1/128"]
    assert s.gateway.auth_token == "t"
    assert kit.errors({"gateway": {"trustedProxies": ["nope"], "auth": {"mode": "token"}}}) == [
        'gateway.auth.token: required when gateway.auth.mode is "token"',
        'gateway.trustedProxies[0]: invalid IP address or CIDR "nope"',
    ]
    assert kit.errors({"gateway": {"auth": {"mode": "token", "token": {"source": "env", "id": "GW"}}}}) == [
        'gateway.auth.token: Environment variable "GW" is missing or empty.'
    ]


def test_storage_settings(kit: Kit, tmp_path: Path) -> None:
    sub = tmp_path / "conf"
    sub.mkdir()
    s = kit.load({"storage": {"sqlite": {"path": "../data/hg.db", "durability": "normal"}}}, directory=sub)
    assert s.storage.sqlite_path == str(tmp_path / "data" / "hg.db")
    assert s.storage.durability == "normal"
    assert kit.errors({"storage": {"backend": "postgres"}}) == [
        'storage.postgres.dsn: required when storage.backend is "postgres"',
        'storage.backend: "postgres" is not available in this build (SQLite only)',
    ]
    assert kit.errors({"storage": {"redis": {"url": {"source": "env", "id": "REDIS_URL"}}}}) == [
        'storage.redis.url: Environment variable "REDIS_URL" is missing or empty.'
    ]
    # the schema knows the PostgreSQL keys (a dsn resolves), but this build refuses the backend
    pg = kit.load({"storage": {"postgres": {"dsn": "${DSN}"}}}, {"DSN": "postgresql://u:p@h/db"})
    assert pg.storage.postgres_dsn == "postgresql://u:p@h/db"
    assert kit.errors(
        {"storage": {"backend": "postgres", "postgres": {"dsn": "${DSN}"}}}, {"DSN": "postgresql://u:p@h/db"}
    ) == ['storage.backend: "postgres" is not available in this build (SQLite only)']


def test_config_dir_is_file_dir(kit: Kit, tmp_path: Path) -> None:
    sub = tmp_path / "etc"
    sub.mkdir()
    path = kit.write("{}", directory=sub)
    s = load_settings("etc/hookgate.json5", {}, cwd=str(tmp_path))
    assert s.config_path == str(path) and s.config_dir == str(sub)
    assert os.path.isabs(s.storage.sqlite_path)


# --- every error in one pass (README §4: "All errors found are reported") ----------------------------

ROUTE = {"path": "/hooks/x", "sessionKey": "agent:main:x", "secret": "s"}


def _routes(**routes: dict[str, str]) -> dict[str, object]:
    return {"entries": {"webhooks": {"config": {"routes": routes}}}}


def test_cross_field_errors_of_sound_sections_are_reported_next_to_type_errors(kit: Kit) -> None:
    """A type error in one section does not hide the duplicate agent id, the route that shadows the
    hook ingress or the unknown preset of the others: one `config check` lists them all."""
    with pytest.raises(ConfigError) as info:
        kit.load({
            "gateway": {"port": "x"},
            "agents": {"list": [{"id": "a"}, {"id": "a"}]},
            "hooks": {"enabled": True, "token": "t0ken-abc", "presets": ["nosuch"]},
            "plugins": _routes(r1=ROUTE),
            "bogus": 1,
        })
    assert info.value.lines == [
        "gateway.port: expected integer, got string",
        "bogus: unknown key",
        "agents.list[1].id: duplicates agents.list[0].id (a)",
        "plugins.entries.webhooks.config.routes.r1.path conflicts with hooks.path (/hooks).",
    ]
    assert info.value.warnings == ("unknown hooks preset: nosuch",)


def test_a_section_with_errors_skips_only_the_checks_that_need_it(kit: Kit) -> None:
    # gateway has a type error: its own cross-field check (the proxy list) still runs, on the rest
    # of the section, but the hooks token is not compared with a gateway section in error
    assert kit.errors({
        "gateway": {"port": True, "trustedProxies": ["nope"], "auth": {"mode": "token", "token": "same-token"}},
        "hooks": {"enabled": True, "token": "same-token"},
    }) == ["gateway.port: expected integer, got boolean", 'gateway.trustedProxies[0]: invalid IP address or CIDR "nope"']
    assert kit.errors({
        "gateway": {"trustedProxies": ["nope"], "auth": {"mode": "token", "token": "same-token"}},
        "hooks": {"enabled": True, "token": "same-token"},
    }) == [  # the same config with gateway sound: both checks that waited
        'gateway.trustedProxies[0]: invalid IP address or CIDR "nope"',
        "hooks.token must not match gateway auth token. Set a distinct hooks.token for hook ingress.",
    ]
    # a ${VAR} error breaks its section like a type error: the routes that need hooks wait too,
    # while agents (which need neither) are still checked
    assert kit.errors({
        "agents": {"list": [{"id": "a"}, {"id": "a"}]},
        "hooks": {"enabled": True, "token": "${HOOKS_TOKEN}"},
        "plugins": _routes(r1=ROUTE),
    }) == [
        'hooks.token: environment variable "HOOKS_TOKEN" is not set',
        "agents.list[1].id: duplicates agents.list[0].id (a)",
    ]
    # routes wait for the agents their session keys are checked against; once the agents are sound
    # the route error shows
    routes = _routes(r1={**ROUTE, "path": "/plugins/x"}, r2={**ROUTE, "path": "/plugins/x"})
    assert kit.errors({"agents": {"list": [{"id": 5}]}, "plugins": routes}) == [
        "agents.list[0].id: expected string, got integer"
    ]
    assert kit.errors({"agents": {"list": [{"id": "a"}]}, "plugins": routes}) == [
        "plugins.entries.webhooks.config.routes.r2.path conflicts with routes.r1.path (/plugins/x)."
    ]


def test_a_broken_secrets_section_holds_back_every_check_that_reads_a_secret(kit: Kit) -> None:
    """Without valid providers no secret resolves; reporting 'required' or 'missing' for each input
    would be noise the next pass takes back, so only the schema errors are listed."""
    assert kit.errors({
        "secrets": {"providers": {"vault": {"source": "nosuch"}}},
        "gateway": {"auth": {"mode": "token", "token": {"source": "env", "provider": "vault", "id": "GW"}}},
        "agents": {"list": [{"id": "a"}, {"id": "a"}]},
    }) == ['secrets.providers.vault.source: expected one of "env", "file", "exec", got "nosuch"']


def test_a_section_in_error_is_still_cross_checked_with_its_bad_keys_set_aside(kit: Kit) -> None:
    """The repair pass: a key in error takes its default (or is left out) so the rest of its section
    is still checked, and no line about the stand-in is reported."""
    # a type error and an unknown key, each next to a cross-field error of the same section
    assert kit.errors({"hooks": {"enabled": True, "token": "t", "matc": 1, "path": "/"}}) == [
        "hooks.matc: unknown key",
        "hooks.path may not be '/'",
    ]
    assert kit.errors({
        "hooks": {"enabled": True, "token": "t", "path": "/",
                  "mappings": [{"match": {"path": "a"}, "action": "wake", "textTemplate": 5}]},
    }) == ["hooks.mappings[0].textTemplate: expected string, got integer", "hooks.path may not be '/'"]
    # the key in error is not reported again as missing: not "required when mode is token", not
    # "hooks.enabled requires hooks.token" for a token whose ${VAR} is unset
    assert kit.errors({"gateway": {"auth": {"mode": "token", "token": 5}}}) == [
        "gateway.auth.token: expected string or SecretRef object, got integer"
    ]
    assert kit.errors({"hooks": {"enabled": True, "token": "${T}", "path": "/"}}) == [
        'hooks.token: environment variable "T" is not set',
        "hooks.path may not be '/'",
    ]
    # a route set aside does not hide the routes whose ids start with its id ("a:b", "a-b")
    assert kit.errors({"plugins": _routes(a={**ROUTE, "path": 5}, **{"a:b": {"secret": "x"}})}) == [
        "plugins.entries.webhooks.config.routes.a.path: expected string, got integer",
        "plugins.entries.webhooks.config.routes.a:b.sessionKey: required",
    ]
    # nor the object holding it, named as a whole ("routes.r1: secret or auth is required"); the
    # other routes are still checked against each other
    assert kit.errors({"plugins": _routes(
        r1={**ROUTE, "path": "/plugins/a", "secret": 5},
        r2={**ROUTE, "path": "/plugins/b"},
        r3={**ROUTE, "path": "/plugins/b"},
    )}) == [
        "plugins.entries.webhooks.config.routes.r1.secret: expected string or SecretRef object, got integer",
        "plugins.entries.webhooks.config.routes.r3.path conflicts with routes.r2.path (/plugins/b).",
    ]
    # warnings of the rest of the section too
    with pytest.raises(ConfigError) as info:
        kit.load({"hooks": {"enabled": True, "token": "t", "presets": "gmail", "mappings": [
            {"match": {"path": "a"}, "action": "wake", "textTemplate": "x", "channel": "nosuch"}]}})
    assert info.value.lines == ["hooks.presets: expected array, got string"]
    assert info.value.warnings == ('hooks.mappings[0].channel: channel "nosuch" is not configured',)


def test_a_key_the_rest_is_read_by_sets_its_object_aside_instead_of_a_default(kit: Kit) -> None:
    """Pivotal keys (an action, an enabled flag, a route's path and secret, a SecretRef, the
    transforms directory) are not replaced by their defaults in the repair pass: a mapping read as the
    default "agent" action, or a route at its default path, would produce errors about what the file
    does not say."""
    hooks = {"enabled": True, "token": "t"}
    # a typo in action: not also check #11, which only agent mappings trigger
    assert kit.errors({"hooks": {**hooks, "mappings": [
        {"match": {"path": "a"}, "action": "wke", "sessionKey": "hook:{{x}}", "textTemplate": "hi"}]}}) == [
        'hooks.mappings[0].action: expected one of "wake", "agent", got "wke"'
    ]
    # a route whose path is in error: no conflict with the default path it would have had
    assert kit.errors({"plugins": _routes(
        a={**ROUTE, "path": 5}, b={**ROUTE, "path": "/plugins/webhooks/a", "secret": "s2"})}) == [
        "plugins.entries.webhooks.config.routes.a.path: expected string, got integer"
    ]
    # a SecretRef in error is not resolved with the default provider ("route a: skipped (...)")
    with pytest.raises(ConfigError) as info:
        kit.load({"plugins": _routes(a={**ROUTE, "secret": {"source": "env", "provider": 5, "id": "NOPE_X"}})})
    assert info.value.lines == ["plugins.entries.webhooks.config.routes.a.secret.provider: expected string, got integer"]
    assert info.value.warnings == ()
    # the transforms directory: no "module not found" under the default one
    with pytest.raises(ConfigError) as info:
        kit.load({"hooks": {**hooks, "transformsDir": 5, "mappings": [{"match": {"path": "a"},
                                                                        "transform": {"module": "x.py"}}]}})
    assert (info.value.lines, info.value.warnings) == (["hooks.transformsDir: expected string, got integer"], ())
    # a disabled route or plugin written as a string is not checked as an enabled one
    assert kit.errors({"plugins": _routes(a={"enabled": "no"})}) == [
        "plugins.entries.webhooks.config.routes.a.enabled: expected boolean, got string"
    ]


def test_a_key_in_error_does_not_hide_the_checks_of_its_neighbours(kit: Kit) -> None:
    assert kit.errors({"plugins": _routes(a={"sessionKey": "agent:main:main", "description": 5})}) == [
        "plugins.entries.webhooks.config.routes.a.description: expected string, got integer",
        "plugins.entries.webhooks.config.routes.a: secret or auth is required",
    ]
    assert kit.errors({"agents": {"list": [{"id": "a", "default": True, "name": 5}, {"id": "b", "default": True}]}}) == [
        "agents.list[0].name: expected string, got integer",
        "agents.list: only one agent may set default: true",
    ]
    # an unknown plugin id is left out, the webhooks entry still checked
    assert kit.errors({"plugins": {"entries": {"other": {}, "webhooks": {"config": {"routes": {"a": {}}}}}}}) == [
        'plugins.entries.other: unknown plugin (hookgate supports only "webhooks")',
        "plugins.entries.webhooks.config.routes.a: secret or auth is required",
        "plugins.entries.webhooks.config.routes.a.sessionKey: required",
    ]
    # a resolution limit in error: the secrets still resolve with its default, and the rest is checked
    assert kit.errors({
        "secrets": {"resolution": {"maxProviderConcurrency": 0}},
        "hooks": {"enabled": True},
        "agents": {"list": [{"id": "a"}, {"id": "a"}]},
    }) == [
        "secrets.resolution.maxProviderConcurrency: must be between 1 and 64",
        "agents.list[1].id: duplicates agents.list[0].id (a)",
        "hooks.enabled requires hooks.token",
    ]


def test_an_unset_variable_is_one_error_line(kit: Kit) -> None:
    # not also 'expected one of "none", "token", got "${MODE}"': the placeholder is not the user's value
    assert kit.errors({"gateway": {"auth": {"mode": "${MODE}"}}, "storage": {"backend": "${B}"}}) == [
        'gateway.auth.mode: environment variable "MODE" is not set',
        'storage.backend: environment variable "B" is not set',
    ]


def test_values_serve_could_not_use_are_config_errors(kit: Kit) -> None:
    # an integer past 64 bits (configHash and a model's params are encoded as JSON, which refused it
    # with a traceback), a header value with a line break (every response failed with a 500), an
    # empty SQLite path (it names the config directory)
    huge = "0x" + "f" * 4000
    assert kit.errors(f"{{hooks: {{authThrottle: {{maxFailures: {huge}}}}}}}") == [
        "hooks.authThrottle.maxFailures: integer out of range"
    ]
    assert kit.errors({"hooks": {"internal": {"n": 2**64}}}) == ["hooks.internal.n: integer out of range"]
    assert kit.errors({"gateway": {"http": {"securityHeaders": {"strictTransportSecurity": "max-age=1\nX-Evil: 1"}}}}) == [
        "gateway.http.securityHeaders.strictTransportSecurity: invalid HTTP header value (printable ASCII only)"
    ]
    for path in (" ", ""):
        assert kit.errors({"storage": {"sqlite": {"path": path}}}) == ["storage.sqlite.path: must not be empty"], path
    assert kit.errors({"storage": {"sqlite": {"path": "."}}}) == [
        "storage.sqlite.path: names a directory, not a database file"
    ]
    assert kit.errors({"storage": {"sqlite": {"path": "a\x00b"}}}) == [
        "storage.sqlite.path: must not contain a NUL character"
    ]
    # the file channel's path alike: every delivery to it failed
    for path in (" ", ""):
        assert kit.errors({"channels": {"file": {"path": path}}}) == ["channels.file.path: must not be empty"], path
    for path in (".", "/tmp"):
        assert kit.errors({"channels": {"file": {"path": path}}}) == [
            "channels.file.path: names a directory, not a file"
        ], path
    assert kit.errors({"channels": {"file": {"path": "out\x00.jsonl"}}}) == [
        "channels.file.path: must not contain a NUL character"
    ]
    assert kit.load({"channels": {"file": {"path": "out.jsonl"}}}).channels[0].options["path"] == str(kit.root / "out.jsonl")
    # without a path: the default name, beside the config file too (it was the working directory's)
    assert kit.load({"channels": {"file": {}}}).channels[0].options["path"] == str(kit.root / "hookgate-deliveries.jsonl")
    # lifetimes past what a timestamp holds (the worker's lease, idempotency records, retention)
    assert kit.errors({"storage": {"leaseSeconds": 1e16, "retention": {"runDays": 1e308}}}) == [
        "storage.leaseSeconds: must be at most 86400",
        "storage.retention.runDays: must be at most 36500",
    ]
    assert kit.errors({"plugins": {"entries": {"webhooks": {"config": {"idempotencyTtlHours": 1e308}}}}}) == [
        "plugins.entries.webhooks.config.idempotencyTtlHours: must be at most 876000"
    ]
    # an address serve can listen on: "" listened on every interface; a URL or host:port could not bind
    for bind in ("", " 127.0.0.1 ", "999.1.1.1", "127.0.0.1:8080", "http://127.0.0.1"):
        assert kit.errors({"gateway": {"bind": bind}}) == [
            f'gateway.bind: invalid address "{bind}" (an IP address or a host name)'
        ], bind
    for bind in ("127.0.0.1", "0.0.0.0", "::", "::1", "localhost", "gw-1.internal"):
        assert kit.load({"gateway": {"bind": bind}}).gateway.bind == bind


def test_surrogate_escapes_pair_up_and_an_unpaired_one_is_an_error(kit: Kit) -> None:
    """JSON5 means ``\\uD83D\\uDE80`` as one character (🚀); the json5 parser left two lone surrogates,
    which no UTF-8 encoder takes: `config check` said OK and serve crashed with a traceback (the
    token's bytes, the config hash). An unpaired one is an error line naming its key path."""
    settings = kit.load('{hooks: {enabled: true, token: "tok\\ud83d\\ude80en",'
                        ' mappings: [{match: {path: "\\uD83D\\uDE80"}, action: "wake", textTemplate: "\\ud83d\\ude80 up"}]},'
                        ' agents: {list: [{id: "main", name: "\\ud83d\\ude80 rocket"}]}}')
    assert settings.hooks.token == "tok\U0001f680en"
    assert settings.agents.agents[0].name == "\U0001f680 rocket"
    assert settings.config_hash  # the hash encodes every value as UTF-8
    assert kit.errors('{hooks: {enabled: true, token: "HOOK\\ud800TOK"}, agents: {list: [{id: "main", name: "x\\udfff"}]}}') == [
        "hooks.token: must not contain an unpaired surrogate (\\ud800)",
        "agents.list[0].name: must not contain an unpaired surrogate (\\udfff)",
    ]
    # in a key: named escaped (the line must print), then read as U+FFFD: its own checks still run
    assert kit.errors('{agents: {"\\udc00x": 1}}') == [
        "agents.\\udc00x: must not contain an unpaired surrogate (\\udc00)",
        "agents.\ufffdx: unknown key",
    ]
    # a key written as an escape pair and as its character is one key, repeated: the last value wins
    settings = kit.load('{agents: {defaults: {models: {"openai/\\ud83d\\ude80": {alias: "a"}, '
                        '"openai/🚀": {alias: "b"}}}}}')
    assert settings.agents.models == {"openai/🚀": {"alias": "b"}}
    assert 'agents.defaults.models: key "openai/🚀" appears more than once; the last value is used' \
        in settings.warnings, settings.warnings
    # below a key in error, the paths spell it as its own line does
    assert kit.errors('{agents: {"\\udc00x": {"a\\udc01": 1}}}')[:2] == [
        "agents.\\udc00x: must not contain an unpaired surrogate (\\udc00)",
        "agents.\\udc00x.a\\udc01: must not contain an unpaired surrogate (\\udc01)",
    ]
    # from the environment: an undecodable byte reads as a lone surrogate (surrogateescape)
    assert kit.errors('{hooks: {enabled: true, token: "${TOK}"}}', env={"TOK": "a\udcffb"}) == [
        "hooks.token: must not contain an unpaired surrogate (\\udcff)",
    ]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(JSON_VALUES, st.booleans(), st.sampled_from([None, 1]))
def test_a_plain_json_file_reads_as_json5_reads_it(value: object, ascii_only: bool, indent: int | None) -> None:
    # plain JSON takes Python's C parser (1 000 routes: 5 ms, not json5's 5 s): the same values, once
    # a surrogate pair's escapes are joined (json joins them itself, json5 leaves them to the loader)
    text = json.dumps({"k": value, "k2": [value, value]}, ensure_ascii=ascii_only, indent=indent)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.json"
        path.write_text(text, encoding="utf-8")
        ours = join_surrogates(read_config_file(str(path)), "", [])
        assert repr(ours) == repr(join_surrogates(json5.loads(text), "", []))


def test_a_json5_file_and_a_json_file_with_repeated_keys_read_alike(tmp_path: Path) -> None:
    plain, five = tmp_path / "a.json", tmp_path / "b.json5"
    plain.write_text('{"a": 1, "b": {"x": 1, "x": 2}, "a": 3}', encoding="utf-8")
    five.write_text('{a: 1, b: {x: 1, x: 2,}, a: 3, // both keep the last\n}', encoding="utf-8")
    got = [read_config_file(str(p)) for p in (plain, five)]
    assert got[0] == got[1] == {"a": 3, "b": {"x": 2}}
    assert [getattr(g, "repeated", ()) for g in got] == [("a",), ("a",)]
    assert [getattr(g["b"], "repeated", ()) for g in got] == [("x",), ("x",)]


@pytest.mark.parametrize(("depth", "error"), [(40, "x: unknown key"), (600, "nested"), (5000, "nested")])
def test_a_deeply_nested_json_file_reads_as_json5_reads_it(tmp_path: Path, depth: int, error: str) -> None:
    # json's C parser reads ~990 levels, json5's ~60: a plain-JSON file 600 deep got past the parser
    # and crashed the recursive walks after it (a RecursionError traceback from config check and serve)
    path = tmp_path / "deep.json"
    path.write_text('{"gateway": {"port": 18789}, "x": ' + "[" * depth + "]" * depth + "}", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(str(path), {})
    assert info.value.lines == [f"{path}: invalid JSON5: nested too deeply" if error == "nested" else error]
