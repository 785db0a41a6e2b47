"""The CLI against the config: `secrets check`, parse errors, `--port`, `config show` redaction and
defaults, type errors; each as operations.md §1 and README §4 give it."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from gateway import GatewayFactory

from clirun import hookgate


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# --- secrets check -------------------------------------------------------------------------------

def test_secrets_check_prints_ERROR_line_for_unresolved_hooks_token(tmp_path: Path) -> None:
    # operations.md §1.8: "Resolves every secret input of the config and prints one line per key: `OK`
    # or `ERROR`, the key path, the source (...), and for errors the resolution error (...). Exit 1 if
    # any `ERROR`."  docs/operations.md: "`secrets check` | `OK`/`ERROR <key path> <source> [<error>]`
    # per secret input, never a value; exit 1 on any error".
    (tmp_path / "hookgate.json5").write_text(json.dumps({
        "hooks": {"enabled": True, "token": {"source": "env", "provider": "default", "id": "MISSING_HOOK_TOKEN"}},
    }))
    r = hookgate(tmp_path, "secrets", "check")
    assert ('ERROR hooks.token env:default:MISSING_HOOK_TOKEN '
            'Environment variable "MISSING_HOOK_TOKEN" is missing or empty.') in r.stdout.splitlines(), (r.stdout, r.stderr)
    assert r.returncode == 1


# --- config check: every error and warning in one pass --------------------------------------------

def test_config_check_lists_every_error_and_warning_together(tmp_path: Path) -> None:
    # README §4: "All errors found are reported, one per line"; operations.md §1.3: check prints
    # `warning:` and `error: <key path>: <message>` lines, exit 2 on an error. A type error in one
    # section used to stop the check before the cross-field checks of the others.
    (tmp_path / "hookgate.json5").write_text(json.dumps({
        "gateway": {"port": "18789"},
        "agents": {"list": [{"id": "ops"}, {"id": "OPS"}]},
        "hooks": {"enabled": True, "token": "hook-token-1", "presets": ["gmail", "jira"], "path": "/plugins"},
        "plugins": {"entries": {"webhooks": {"config": {"routes": {
            "ci": {"path": "/plugins/webhooks/ci", "sessionKey": "agent:main:ci", "secret": "s"},
        }}}}},
    }))
    r = hookgate(tmp_path, "config", "check")
    assert r.returncode == 2
    assert r.stdout.splitlines() == ["warning: unknown hooks preset: jira"]
    assert r.stderr.splitlines() == [
        "error: gateway.port: expected integer, got string",
        "error: agents.list[1].id: duplicates agents.list[0].id (ops)",
        # the gmail preset's templated sessionKey
        ("error: hooks.allowedSessionKeyPrefixes is required when a hook mapping sessionKey uses templates, "
         "even if hooks.allowRequestSessionKey=true"),
        "error: plugins.entries.webhooks.config.routes.ci.path conflicts with hooks.path (/plugins).",
    ]


def test_config_check_warns_about_secrets_a_valid_config_leaves_unresolved(tmp_path: Path) -> None:
    # webhooks.md §1.3: "an agent runtime `apiKey` that does not resolve makes that agent's runs end
    # `skipped` …; an unresolved channel secret makes that channel's deliveries dead-letter". The config
    # is valid, and `config check` said only `config OK` (`secrets check` and `serve`'s log said more).
    (tmp_path / "hookgate.json5").write_text(json.dumps({
        "channels": {"telegram": {"botToken": {"source": "env", "id": "HG_TEST_TG_TOKEN"}},
                     "slack": {"enabled": False, "botToken": {"source": "env", "id": "HG_TEST_SLACK_TOKEN"}}},
        "agents": {"list": [{"id": "main", "model": "openai/gpt-4o", "runtime": {
            "kind": "openai", "baseUrl": "http://127.0.0.1:9/v1", "apiKey": {"source": "env", "id": "HG_TEST_KEY"}}}]},
    }))
    r = hookgate(tmp_path, "config", "check")
    assert r.returncode == 0, r.stderr
    assert [line for line in r.stdout.splitlines() if line.startswith("warning: ")] == [
        ('warning: channels.telegram.botToken: secret unresolved (Environment variable "HG_TEST_TG_TOKEN" is '
         "missing or empty.): every delivery to channel telegram dead-letters (webhooks.md §1.3)"),
        ('warning: agents.list[0].runtime.apiKey: secret unresolved (Environment variable "HG_TEST_KEY" is '
         "missing or empty.): every run of an agent with this runtime ends skipped (model.md §5.4)"),
    ], r.stdout  # (the disabled slack channel delivers nothing: no warning)
    assert "config OK: " in r.stdout
    resolved = hookgate(tmp_path, "config", "check", env={"HG_TEST_TG_TOKEN": "t", "HG_TEST_KEY": "k"})
    assert resolved.returncode == 0 and "warning: " not in resolved.stdout, resolved.stdout


def test_config_check_prints_each_error_on_one_line(tmp_path: Path) -> None:
    # a message that carries text from outside (here a secret file's path with a line break) cannot
    # end its line and forge another "error:" line
    (tmp_path / "hookgate.json5").write_text(json.dumps({
        "secrets": {"providers": {"f": {"source": "file", "path": "x\nerror: hooks.fake: forged"}}},
        "hooks": {"enabled": True, "token": {"source": "file", "provider": "f", "id": "/t"}},
    }))
    r = hookgate(tmp_path, "config", "check")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f'error: hooks.token: File provider "f" cannot use {tmp_path}/x error: hooks.fake: forged: not found.'
    ]


# --- JSON5 parse errors --------------------------------------------------------------------------

def test_json5_parse_error_is_reported_on_one_line(tmp_path: Path) -> None:
    # README §4: "All errors found are reported, one per line, each naming the full key path";
    # operations.md §1.3: config check prints "`error: <key path>: <message>` lines".
    (tmp_path / "hookgate.json5").write_text('{\n  hooks: {\n    enabled: tru\n  }\n}\n')
    r = hookgate(tmp_path, "config", "check")
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("error: ") for line in lines), lines


def test_deeply_nested_config_is_a_config_error_not_a_traceback(tmp_path: Path) -> None:
    # operations.md §1: "Exit status: ... `2` usage error or invalid config."; §1.3: "Exit 2 if there is
    # an error." README §4: an unknown key is "`<full key path>: unknown key`".
    # 60 nested arrays under an unknown key: the file is invalid whatever the parser thinks of the depth.
    (tmp_path / "hookgate.json5").write_text("{bogus: " + _nested(60) + "}")
    r = hookgate(tmp_path, "config", "check")
    assert "Traceback" not in r.stderr, r.stderr[-300:]
    assert r.returncode == 2
    assert any(line.startswith("error: ") for line in r.stderr.splitlines())


def test_sighup_with_deeply_nested_config_logs_reload_failed(gateway_factory: GatewayFactory) -> None:
    # README §4 Reload: "An invalid new config is logged (`config.reload_failed` with the error lines)
    # and the old config stays active."
    gw = gateway_factory()
    gw.config_path.write_text("{bogus: " + _nested(60) + "}")
    gw.signal(signal.SIGHUP)
    failed = gw.wait_log("config.reload_failed", timeout=5.0)
    assert failed["errors"]


# --- serve flags ---------------------------------------------------------------------------------

def test_serve_port_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    # operations.md §1: "`2` usage error or invalid config" (a port outside 0…65535 in the file is exit 2
    # with `gateway.port: must be between 0 and 65535`; the flag is the same value, given on the command line).
    (tmp_path / "hookgate.json5").write_text('{storage: {sqlite: {path: "p.db"}}}')
    r = hookgate(tmp_path, "serve", "--port", "70000")
    assert "Traceback" not in r.stderr, r.stderr[-300:]
    assert r.returncode == 2


# --- config show: redaction ----------------------------------------------------------------------

def test_config_show_masks_postgres_dsn_password_containing_hash(tmp_path: Path) -> None:
    # operations.md §1.3: "passwords in `storage.postgres.dsn` and `storage.redis.url` become `***`";
    # §6: "tokens never appear in logs, metrics, `config show` or error bodies".
    # (libpq reads everything up to the last '@' before the host as user:password, '#' included.)
    (tmp_path / "hookgate.json5").write_text(json.dumps({
        "storage": {"postgres": {"dsn": "postgresql://app:s3cr#t-pw@db.internal:5432/hookgate"}},
    }))
    r = hookgate(tmp_path, "config", "show")
    assert r.returncode == 0, r.stderr
    assert "s3cr#t-pw" not in r.stdout
    assert json.loads(r.stdout)["storage"]["postgres"]["dsn"] == "postgresql://app:***@db.internal:5432/hookgate"


def test_config_show_masks_only_the_password_of_a_dsn_query(tmp_path: Path) -> None:
    # operations.md §1.3: "passwords in `storage.postgres.dsn` ... become `***`" — the password, not the
    # parameters after it.
    (tmp_path / "hookgate.json5").write_text(json.dumps({
        "storage": {"postgres": {"dsn": "postgresql://app@db/hookgate?password=pw&sslmode=require"}},
    }))
    r = hookgate(tmp_path, "config", "show")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["storage"]["postgres"]["dsn"] == "postgresql://app@db/hookgate?password=***&sslmode=require"


# --- types ---------------------------------------------------------------------------------------

def test_hooks_internal_of_the_wrong_type_is_a_type_error(tmp_path: Path) -> None:
    # hooks.md §1.1: "| `internal` | object | — | Accepted for configuration compatibility and ignored".
    # README §4: "A wrong type is `<key path>: expected <type>, got <type>`. ... exits with status 2."
    (tmp_path / "hookgate.json5").write_text("{hooks: {internal: 5}}")
    r = hookgate(tmp_path, "config", "check")
    assert "error: hooks.internal: expected object, got integer" in r.stderr.splitlines(), (r.stdout, r.stderr)
    assert r.returncode == 2


# --- config show: defaults -----------------------------------------------------------------------

def test_config_show_fills_in_the_mapping_id_default(tmp_path: Path) -> None:
    # operations.md §1.3: "`show`: the effective config with all defaults filled in, as JSON."
    # hooks.md §6.1: "| `id` | string | trimmed; default `mapping-<1-based index>` ..."
    (tmp_path / "hookgate.json5").write_text(json.dumps(
        {"hooks": {"enabled": True, "token": "t", "mappings": [{"match": {"path": "x"}, "action": "wake",
                                                                "textTemplate": "hi"}]}}))
    r = hookgate(tmp_path, "config", "show")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hooks"]["mappings"][0].get("id") == "mapping-1"


def test_config_show_fills_in_the_bearer_prefix_default(tmp_path: Path) -> None:
    # operations.md §1.3: "`show`: the effective config with all defaults filled in, as JSON."
    # webhooks.md §1.2.1: "| `prefix` | string | `bearer`: scheme word, default `Bearer`; ..."
    (tmp_path / "hookgate.json5").write_text(json.dumps({"plugins": {"entries": {"webhooks": {"config": {"routes": {
        "r": {"sessionKey": "agent:main:main", "auth": {"mode": "bearer", "secret": "abcdef"}}}}}}}}))
    r = hookgate(tmp_path, "config", "show")
    assert r.returncode == 0, r.stderr
    auth = json.loads(r.stdout)["plugins"]["entries"]["webhooks"]["config"]["routes"]["r"]["auth"]
    assert auth.get("prefix") == "Bearer"

