"""The CLI as a user runs it (operations.md §1)."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clirun import cli_env, hookgate


def test_config_check_reports_every_error_with_its_key_path(tmp_path: Path) -> None:
    (tmp_path / "hookgate.json5").write_text("""{
      // two mistakes at once
      hooks: { enabled: true, token: "t", maxBodyBytes: "big", mappings: [{ matc: {} }] },
      gateway: { port: "80" },
      extra: 1,
    }""")
    r = hookgate(tmp_path, "config", "check")
    assert r.returncode == 2
    errors = r.stderr.splitlines()
    assert "error: hooks.mappings[0].matc: unknown key" in errors
    assert "error: extra: unknown key" in errors
    assert any(line.startswith("error: hooks.maxBodyBytes: expected ") for line in errors)
    assert any(line.startswith("error: gateway.port: expected ") for line in errors)


def test_config_check_ok_summary_and_warnings(tmp_path: Path) -> None:
    (tmp_path / "hookgate.json5").write_text(
        '{hooks: {enabled: true, token: "${TOK}", presets: ["nope"]}, channels: {console: {}}}'
    )
    r = hookgate(tmp_path, "config", "check", env={"TOK": "abc"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "warning: unknown hooks preset: nope" in lines
    assert f"config OK: {tmp_path / 'hookgate.json5'}" in lines
    assert lines[-1] == "hooks: enabled, 0 mappings, 0 presets; routes: 0 active, 0 skipped; agents: 1; channels: 1; store: sqlite"


def test_config_env_substitution_errors_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "hookgate.json5").write_text('{hooks: {enabled: true, token: "${MISSING_TOKEN}"}}')
    r = hookgate(tmp_path, "config", "check")
    assert r.returncode == 2
    assert 'error: hooks.token: environment variable "MISSING_TOKEN" is not set' in r.stderr.splitlines()
    r = hookgate(tmp_path, "--config", "nope.json5", "config", "check")
    assert r.returncode == 2 and "config file not found: nope.json5" in r.stderr
    r = hookgate(tmp_path, "config", "check", env={"HOOKGATE_CONFIG": str(tmp_path / "other.json5")})
    assert r.returncode == 2 and "config file not found:" in r.stderr


def test_config_show_redacts_secrets(tmp_path: Path) -> None:
    (tmp_path / "hookgate.json5").write_text(json.dumps({
        "hooks": {"enabled": True, "token": "super-secret-token"},
        "gateway": {"auth": {"mode": "token", "token": {"source": "env", "provider": "default", "id": "GW_TOKEN"}}},
        "storage": {"redis": {"url": "redis://user:pa55word@127.0.0.1:6379/0"}},
    }))
    r = hookgate(tmp_path, "config", "show", env={"GW_TOKEN": "gateway-secret"})
    assert r.returncode == 0, r.stderr
    assert "super-secret-token" not in r.stdout and "gateway-secret" not in r.stdout and "pa55word" not in r.stdout
    shown = json.loads(r.stdout)
    assert shown["hooks"]["token"] == "[redacted]"
    assert shown["gateway"]["auth"]["token"] == {"source": "env", "provider": "default", "id": "GW_TOKEN"}
    assert "***" in shown["storage"]["redis"]["url"]
    assert shown["hooks"]["maxBodyBytes"] == 262144  # defaults filled in
    assert len(shown["configHash"]) == 16


def test_secrets_check(tmp_path: Path) -> None:
    (tmp_path / "hookgate.json5").write_text(json.dumps({
        "hooks": {"enabled": True, "token": {"source": "env", "provider": "default", "id": "HOOK_TOKEN"}},
        "agents": {"list": [{"id": "main", "runtime": {"kind": "openai", "apiKey": {"source": "env", "id": "NO_KEY"}}}]},
    }))
    r = hookgate(tmp_path, "secrets", "check", env={"HOOK_TOKEN": "value-never-printed"})
    assert r.returncode == 1
    assert "value-never-printed" not in r.stdout + r.stderr
    assert "OK hooks.token env:default:HOOK_TOKEN" in r.stdout
    assert 'ERROR agents.list[0].runtime.apiKey env:default:NO_KEY Environment variable "NO_KEY" is missing or empty.' in r.stdout


@pytest.mark.parametrize("nbytes", [16, 32, 64])
def test_token_generate(tmp_path: Path, nbytes: int) -> None:
    r = hookgate(tmp_path, "token", "generate", "--bytes", str(nbytes))
    token = r.stdout.strip()
    assert r.returncode == 0 and "=" not in token
    assert len(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))) == nbytes
    assert hookgate(tmp_path, "token", "generate").stdout != hookgate(tmp_path, "token", "generate").stdout
    assert hookgate(tmp_path, "token", "generate", "--bytes", "8").returncode == 2


async def _nothing(settings: Any, store: Any) -> None:
    return None


def _seeded(tmp_path: Path, seed: Any) -> Any:
    """A hooks config in ``tmp_path`` and ``await seed(settings, store)`` run on its store."""
    import asyncio

    from hookgate.config.loader import load_settings
    from hookgate.store import open_store

    (tmp_path / "hookgate.json5").write_text('{hooks: {enabled: true, token: "t"}}')
    settings = load_settings(str(tmp_path / "hookgate.json5"), {}, cwd=str(tmp_path))

    async def run() -> Any:
        store = open_store(settings.storage)
        await store.open("cli")
        try:
            return await seed(settings, store)
        finally:
            await store.close()

    return asyncio.run(run())


def test_tables_keep_control_characters_off_the_terminal(tmp_path: Path) -> None:
    """An event's text comes from a webhook: in the table an escape sequence or a tab is a space."""
    from hookgate.clock import SystemClock
    from hookgate.hooks.actions import WakeAction
    from hookgate.hooks.dispatch import dispatch_wake

    async def seed(settings: Any, store: Any) -> None:
        await dispatch_wake(WakeAction("red\x1b[31m alert\tnow\x9b2J", "now"), settings, store, SystemClock())

    _seeded(tmp_path, seed)
    r = hookgate(tmp_path, "events", "list")
    assert r.returncode == 0
    row = r.stdout.splitlines()[1]
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in row), repr(row)
    assert row.endswith("red [31m alert now 2J")
    assert "\x1b" in json.loads(hookgate(tmp_path, "events", "list", "--json").stdout)[0]["text"]


def test_events_and_runs_commands(tmp_path: Path) -> None:
    from hookgate.clock import SystemClock
    from hookgate.hooks.actions import AgentAction, WakeAction
    from hookgate.hooks.dispatch import dispatch_agent, dispatch_wake, prepare_agent

    async def seed(settings: Any, store: Any) -> str:
        await dispatch_wake(WakeAction("Deploy finished\nsecond line", "now"), settings, store, SystemClock())
        out = await dispatch_agent(prepare_agent(AgentAction("summarise secret-message", name="Deploy"), settings),
                                   path="agent", idempotency_key=None, settings=settings, store=store,
                                   clock=SystemClock())
        return str(out.run_id)

    run_id = _seeded(tmp_path, seed)
    r = hookgate(tmp_path, "events", "list")
    assert r.returncode == 0
    header, row = r.stdout.splitlines()
    assert header.split() == ["SEQ", "SESSION", "STATUS", "CREATED", "TEXT"]
    assert "agent:main:main" in row and "pending" in row and row.endswith("Deploy finished")
    assert json.loads(hookgate(tmp_path, "events", "list", "--json").stdout)[0]["text"] == "Deploy finished\nsecond line"
    assert hookgate(tmp_path, "events", "list", "--status", "dropped").stdout.count("\n") == 1
    # an agent id as requests give it; a limit below 1 is a usage error
    assert hookgate(tmp_path, "events", "list", "--agent", " MAIN ").stdout == r.stdout
    assert hookgate(tmp_path, "events", "list", "--limit", "0").returncode == 2

    r = hookgate(tmp_path, "runs", "list")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["RUN", "ID", "KIND", "AGENT", "STATUS", "ATTEMPT", "CREATED", "DURATION", "NAME"]
    assert run_id in lines[1] and "queued" in lines[1] and lines[1].endswith("Deploy")
    assert hookgate(tmp_path, "runs", "list", "--kind", "heartbeat").stdout.count("\n") == 1
    assert hookgate(tmp_path, "runs", "list", "--since", "1h", "--json").stdout.count(run_id) == 1

    shown = json.loads(hookgate(tmp_path, "runs", "show", run_id).stdout)
    assert shown["runId"] == run_id and shown["status"] == "queued" and shown["attempt"] == 1
    assert shown["inputs"]["message"]["bytes"] == len("summarise secret-message")
    assert len(shown["inputs"]["message"]["sha256"]) == 16
    full = json.loads(hookgate(tmp_path, "runs", "show", run_id, "--content").stdout)
    assert full["inputs"]["message"] == "summarise secret-message"
    missing = hookgate(tmp_path, "runs", "show", "nope")
    assert missing.returncode == 1 and "run nope not found" in missing.stderr


def test_flows_list_and_show(tmp_path: Path) -> None:
    import asyncio

    from hookgate.clock import SystemClock
    from hookgate.config.loader import load_settings
    from hookgate.store import open_store
    from hookgate.webhooks.schema import parse_action
    from hookgate.webhooks.service import FlowService

    (tmp_path / "hookgate.json5").write_text(json.dumps({"plugins": {"entries": {"webhooks": {"config": {"routes": {
        "ci": {"sessionKey": "agent:ops:main", "secret": "s"},
        "zap": {"sessionKey": "agent:main:main", "secret": "z"}}}}}},
        "agents": {"list": [{"id": "main", "default": True}, {"id": "ops"}]}}))
    settings = load_settings(str(tmp_path / "hookgate.json5"), {}, cwd=str(tmp_path))
    ci, zap = settings.webhooks.routes

    async def seed() -> str:
        store = open_store(settings.storage)
        await store.open("cli")
        service = FlowService(store, SystemClock(), lambda: settings)
        try:
            async def act(route: Any, body: dict[str, Any]) -> dict[str, Any]:
                r = await service.execute(route, parse_action(body), body["action"], idempotency_key=None,
                                          body_sha256="")
                return dict(json.loads(r.body))

            flow = (await act(ci, {"action": "create_flow", "goal": "Nightly release " + "x" * 80}))["result"]["flow"]
            await act(ci, {"action": "run_task", "flowId": flow["flowId"], "runtime": "subagent", "task": "tests"})
            await act(zap, {"action": "create_flow", "goal": "zapier", "status": "waiting"})
            return str(flow["flowId"])
        finally:
            await store.close()

    flow_id = asyncio.run(seed())
    r = hookgate(tmp_path, "flows", "list")
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["FLOW", "ID", "STATUS", "REV", "UPDATED", "GOAL"]
    assert len(lines) == 3 and "zapier" in lines[1]  # newest first
    assert lines[2].endswith("Nightly release " + "x" * 44)  # goal cut to 60 characters
    only_ci = hookgate(tmp_path, "flows", "list", "--route", "ci").stdout.splitlines()
    assert len(only_ci) == 2 and flow_id in only_ci[1]
    assert len(hookgate(tmp_path, "flows", "list", "--session", "AGENT:MAIN:MAIN").stdout.splitlines()) == 2
    assert len(hookgate(tmp_path, "flows", "list", "--status", "waiting").stdout.splitlines()) == 2
    assert hookgate(tmp_path, "flows", "list", "--route", "nope").returncode == 1
    # --session and --route combine (operations.md §1.4 lists both): the same session, or no flow
    assert hookgate(tmp_path, "flows", "list", "--route", "ci", "--session", " Agent:Ops:Main ").stdout.splitlines() \
        == only_ci
    assert len(hookgate(tmp_path, "flows", "list", "--route", "ci", "--session", "agent:main:main").stdout.splitlines()) == 1
    shown = json.loads(hookgate(tmp_path, "flows", "show", flow_id).stdout)
    assert list(shown) == ["flow", "tasks", "summary"]
    assert shown["flow"]["ownerKey"] == "agent:ops:main" and shown["flow"]["flowId"] == flow_id
    assert shown["tasks"][0]["task"] == "tests" and shown["summary"]["total"] == 1
    missing = hookgate(tmp_path, "flows", "show", "nope")
    assert missing.returncode == 1 and "flow nope not found" in missing.stderr


def test_version_before_or_after_the_subcommand(tmp_path: Path) -> None:
    from hookgate import __version__

    for args in (("--version",), ("serve", "--version"), ("config", "check", "--version")):
        r = hookgate(tmp_path, *args)
        assert (r.returncode, r.stdout.strip()) == (0, f"hookgate {__version__}"), args


def test_worker_needs_postgres_which_this_build_refuses_as_a_config_error(tmp_path: Path) -> None:
    r = hookgate(tmp_path, "worker")  # no config: SQLite
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == 'error: hookgate worker requires storage.backend "postgres"'
    (tmp_path / "hookgate.json5").write_text('{storage: {backend: "postgres", postgres: {dsn: "postgresql://x"}}}')
    # a backend this build does not have is a config error, the same in config check as in the
    # commands that would open the store (operations.md §1.3: check does what serve does first)
    unavailable = 'error: storage.backend: "postgres" is not available in this build (SQLite only)'
    for args in (("config", "check"), ("worker",), ("serve", "--port", "0"), ("runs", "list"), ("events", "list")):
        r = hookgate(tmp_path, *args)
        assert (r.returncode, r.stderr.strip().splitlines()) == (2, [unavailable]), args
        assert "config OK" not in r.stdout, args


def test_a_redis_url_is_accepted_with_a_warning_that_limits_stay_in_process(tmp_path: Path) -> None:
    """Shared limits through Redis (operations.md §4.5) are not built: config check says so rather
    than letting a scale-out setup believe its lockouts are shared."""
    (tmp_path / "hookgate.json5").write_text('{storage: {redis: {url: "redis://127.0.0.1:6379/0"}}}')
    r = hookgate(tmp_path, "config", "check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("warning: storage.redis.url: shared limits through Redis are not available in this build; "
            "rate limits and auth lockouts are counted in this process") in r.stdout


def test_hooks_test_reports_an_unreadable_payload_and_sends_headers_as_utf8(tmp_path: Path) -> None:
    """operations.md §1.7: `hooks test` runs a request through the pipeline. A --payload it cannot read
    is a usage error (it was a traceback), and a header value outside Latin-1 reaches the mapping as
    the UTF-8 bytes a client sends — decoded as the server decodes every header (it was a crash)."""
    (tmp_path / "hookgate.json5").write_text(json.dumps({"hooks": {"enabled": True, "token": "t", "mappings": [
        {"match": {"path": "x"}, "action": "wake", "textTemplate": "from {{headers.x-a}}"}]}}))
    for missing in (tmp_path / "nope.json", tmp_path):
        r = hookgate(tmp_path, "hooks", "test", "x", "--payload", str(missing))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.startswith(f"error: cannot read --payload {missing}: "), r.stderr
    (tmp_path / "p.json").write_text('{"text": "x"}')
    r = hookgate(tmp_path, "hooks", "test", "x", "--payload", str(tmp_path / "p.json"), "--header", "X-A: 日本")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["action"]["text"] == "from " + "日本".encode().decode("latin-1")


def test_usage_errors_of_the_list_commands_and_serve(tmp_path: Path) -> None:
    # a typo in a status filter is a usage error (exit 2), not an empty table
    for command, status in (("runs", "bogus"), ("runs", "OK"), ("flows", "done")):
        r = hookgate(tmp_path, command, "list", "--status", status)
        assert r.returncode == 2 and f"invalid status '{status}'" in r.stderr, (command, r.stderr)
    _seeded(tmp_path, _nothing)  # a database to list from
    assert hookgate(tmp_path, "runs", "list", "--status", "timed_out").returncode == 0
    assert hookgate(tmp_path, "flows", "list", "--status", "waiting").returncode == 0
    # what SQLite and a timestamp hold: one line and exit 2, not an OverflowError's traceback
    for command, option, value in (("flows", "--limit", "9223372036854775808"), ("events", "--limit", "1" + "0" * 30),
                                   ("runs", "--since", "999999999999999999s"), ("runs", "--since", "36501d")):
        r = hookgate(tmp_path, command, "list", option, value)
        assert r.returncode == 2 and "Traceback" not in r.stderr and f"argument {option}: " in r.stderr, r.stderr
    assert hookgate(tmp_path, "runs", "list", "--since", "36500d", "--limit", "9223372036854775807").returncode == 0
    # serve --bind gets gateway.bind's check ("" was ignored, a bad name failed later with exit 1)
    for bind in ("", "bad host!", "http://h"):
        r = hookgate(tmp_path, "serve", "--bind", bind, "--port", "0")
        assert r.returncode == 2 and f'argument --bind: invalid address "{bind}"' in r.stderr, r.stderr


def test_an_empty_or_directory_config_path_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "hookgate.json5").write_text("{}")
    # `--config "$CFG"` with CFG unset must not fall through to ./hookgate.json5 or the empty config
    r = hookgate(tmp_path, "--config", "", "config", "check")
    assert r.returncode == 2 and "config file not found: " in r.stderr
    r = hookgate(tmp_path, "--config", str(tmp_path), "config", "check")
    assert r.returncode == 2 and f"config file is a directory: {tmp_path}" in r.stderr
    # an empty variable counts as unset
    r = hookgate(tmp_path, "config", "check", env={"HOOKGATE_CONFIG": ""})
    assert r.returncode == 0 and f"config OK: {tmp_path / 'hookgate.json5'}" in r.stdout


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path) -> None:
    # `hookgate config show | head -1`: the pipe closes before the command writes
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "hookgate.cli", "config", "show"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(60) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_commands_that_only_read_change_no_database(tmp_path: Path) -> None:
    """`events`, `runs` and `flows` (and a dry run of `replay deliveries`) read: a mistyped
    storage path is an error, not a new empty store, and an older schema is not migrated under a
    running server of the older version (`serve` migrates at start, operations.md §1.1)."""
    import hashlib
    import sqlite3

    (tmp_path / "hookgate.json5").write_text('{storage: {sqlite: {path: "typo.db"}}}')
    reads = (("events", "list"), ("runs", "list"), ("runs", "show", "x"), ("flows", "list"), ("flows", "show", "x"),
             ("replay", "deliveries", "--dead", "--dry-run"))
    for argv in reads:
        r = hookgate(tmp_path, *argv)
        assert r.returncode == 1 and f"error: cannot open database {tmp_path / 'typo.db'}: no such file" in r.stderr, argv
    assert not (tmp_path / "typo.db").exists()

    _seeded(tmp_path, _nothing)  # a store of this version, then made to look one migration older
    db = tmp_path / "hookgate.db"
    with sqlite3.connect(db) as conn:
        latest = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
        conn.execute("DELETE FROM schema_migrations WHERE version = ?", (latest,))
    conn.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for argv in reads:
        r = hookgate(tmp_path, *argv)
        assert r.returncode == 1, argv
        assert f"error: database schema version {latest - 1} is older than this hookgate ({latest})" in r.stderr, argv
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    # a command that writes does not migrate the file under a serve process still running on it (one
    # of this version would have migrated it: it is an older one), here the serve lock held
    import fcntl
    import os

    fd = os.open(tmp_path / "hookgate.db.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = hookgate(tmp_path, "replay", "deliveries", "--dead")
    finally:
        os.close(fd)
    assert r.returncode == 1 and r.stderr == (
        f"error: database {db} is of schema version {latest - 1} and a hookgate serve process is running on it: "
        f"a serve of this version migrates it to {latest} when it starts; run this command after that\n"), r.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    # with no serve running, a command that writes still migrates, as before — also beside another
    # command migrating it (which holds the lock shared)
    fd = os.open(tmp_path / "hookgate.db.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        r = hookgate(tmp_path, "replay", "deliveries", "--dead")
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    assert hookgate(tmp_path, "events", "list").returncode == 0


def test_a_read_leaves_the_wal_of_a_killed_server_where_it_is(tmp_path: Path) -> None:
    """A command that only reads changes nothing in the file: it reads what a server killed with
    SIGKILL left in the WAL without folding it into the database file (its connection, the last to
    close, checkpointed it there)."""
    import hashlib

    _seeded(tmp_path, _nothing)
    child = subprocess.run([sys.executable, "-c", """if True:
        import asyncio, os, signal
        from hookgate.store.sqlite import SqliteStore

        async def main():
            store = SqliteStore("hookgate.db")
            await store.open("serve")
            await store.queue_system_event(session_key="agent:main:main", agent_id="main", text="in the wal",
                                           now_ms=1_700_000_000_000, wake_reason=None)
            os.kill(os.getpid(), signal.SIGKILL)

        asyncio.run(main())
        """], cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=60, check=False)
    assert child.returncode == -signal.SIGKILL, child.stderr
    files = ("hookgate.db", "hookgate.db-wal")

    def digests() -> list[str]:
        return [hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in files]

    before = digests()
    for argv in (("events", "list"), ("runs", "list"), ("flows", "list")):
        r = hookgate(tmp_path, *argv)
        assert r.returncode == 0, (argv, r.stderr)
        if argv[0] == "events":
            assert "in the wal" in r.stdout
        assert digests() == before, argv
    # the path as written in the config, with two leading slashes (as POSIX allows)
    (tmp_path / "hookgate.json5").write_text(
        '{hooks: {enabled: true, token: "t"}, storage: {sqlite: {path: "/%s"}}}' % (tmp_path / "hookgate.db"))
    r = hookgate(tmp_path, "events", "list")
    assert r.returncode == 0 and "in the wal" in r.stdout, r.stderr
    # a command that writes, the last connection to close, folds it in (as serve's would)
    assert hookgate(tmp_path, "replay", "deliveries", "--dead").returncode == 0
    assert not (tmp_path / "hookgate.db-wal").exists()
    assert "in the wal" in hookgate(tmp_path, "events", "list").stdout


def test_errors_repeat_what_was_typed_on_one_line(tmp_path: Path) -> None:
    _seeded(tmp_path, _nothing)
    typed = "a\nb\x1b[2J\r\x07\u202ec"
    for argv in (("flows", "show", typed), ("runs", "show", typed), ("replay", "run", typed),
                 ("replay", "delivery", typed), ("flows", "list", "--route", typed)):
        r = hookgate(tmp_path, *argv)
        assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, (argv, r.stderr)
        assert not any(not c.isprintable() for c in r.stderr.rstrip("\n")), (argv, r.stderr)
    # an empty filter is a filter: no route has the id "", no flow the owner ""
    r = hookgate(tmp_path, "flows", "list", "--route", "")
    assert r.returncode == 1 and "route  not found" in r.stderr
    assert hookgate(tmp_path, "flows", "list", "--session", "").stdout.splitlines()[1:] == []


def test_a_full_disk_on_stdout_is_one_error_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "hookgate.cli", "config", "show"], cwd=tmp_path, stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert r.returncode == 1
    assert r.stderr.splitlines() == ["error: cannot write the output: [Errno 28] No space left on device"], r.stderr
    # a closed stdout (`>&-`: sys.stdout is None) is no failure: print writes nothing, as before
    code = "import os, sys; os.close(1); from hookgate.cli import main; sys.stdout = None; sys.exit(main(['token', 'generate']))"
    r = subprocess.run([sys.executable, "-c", code],
                       cwd=tmp_path, stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def test_ctrl_c_ends_a_command_with_130_and_no_traceback(tmp_path: Path) -> None:
    # Ctrl-C during a slow exec provider printed a KeyboardInterrupt traceback; the provider has a
    # session of its own, so it does not get the SIGINT: its timeout still ends it
    provider = tmp_path / "slow.sh"
    started = tmp_path / "started"
    provider.write_text(f"#!/bin/sh\ntouch {started}\nsleep 60\n")
    provider.chmod(0o700)
    (tmp_path / "c.json5").write_text(json.dumps({
        "secrets": {"providers": {"ex": {"source": "exec", "command": str(provider), "timeoutMs": 1500}}},
        "hooks": {"enabled": True, "token": {"source": "exec", "provider": "ex", "id": "a"}}}))
    # as in a terminal, whatever this test run's own SIGINT disposition (a background job ignores it)
    as_typed = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                "sys.argv = ['hookgate', 'config', 'check', '--config', 'c.json5']; "
                "runpy.run_module('hookgate.cli', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", as_typed], cwd=tmp_path, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:  # the command is inside the resolution
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.strip() == "interrupted" and "Traceback" not in out + err


def test_serve_logs_the_migration_it_runs(tmp_path: Path) -> None:
    """A start that migrates an existing file says so, before and after (a big file takes seconds
    before the gateway listens); a new file's first migration is no news."""
    import sqlite3

    _seeded(tmp_path, _nothing)
    db = tmp_path / "hookgate.db"
    with sqlite3.connect(db) as conn:  # made to look one migration older
        latest = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
        conn.execute("DELETE FROM schema_migrations WHERE version = ?", (latest,))
    conn.close()

    def serve_log() -> list[dict[str, Any]]:
        proc = subprocess.Popen([sys.executable, "-m", "hookgate.cli", "serve", "--port", "0", "--no-worker",
                                 "--log-format", "json"], cwd=tmp_path, env=cli_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while " listening on " not in proc.stdout.readline() and time.monotonic() < deadline:
            pass
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        return [json.loads(line) for line in err.splitlines()]

    lines = [e for e in serve_log() if e["event"].startswith("store.migrat")]
    assert [(e["event"], e["level"], e["from_version"], e["to_version"]) for e in lines] == [
        ("store.migrating", "info", latest - 1, latest), ("store.migrated", "info", latest - 1, latest)]
    assert isinstance(lines[1]["duration_ms"], int) and lines[1]["duration_ms"] >= 0
    assert not [e for e in serve_log() if e["event"].startswith("store.migrat")]  # nothing to migrate now
    db.unlink()
    assert not [e for e in serve_log() if e["event"].startswith("store.migrat")]  # a new file


def test_a_store_failure_says_what_failed(tmp_path: Path) -> None:
    """`error: store unavailable` alone left the user guessing (a full disk? a lock?): SQLite's reason
    follows it — here another process holding the write lock past `busyTimeoutMs`."""
    import sqlite3

    _seeded(tmp_path, _nothing)
    (tmp_path / "hookgate.json5").write_text('{hooks: {enabled: true, token: "t"}, storage: {sqlite: {busyTimeoutMs: 200}}}')
    holder = sqlite3.connect(tmp_path / "hookgate.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held
    try:
        r = hookgate(tmp_path, "replay", "deliveries", "--dead")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert r.returncode == 1 and r.stderr == "error: store unavailable (database is locked)\n", r.stderr


def test_a_serve_waiting_for_a_migrating_command_says_so_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """A command migrating the file holds the serve lock shared; a serve started meanwhile waits for
    it. It waited silently, a Ctrl-C did not stop the wait, and once the command was done it migrated
    the file anyway before it exited."""
    import fcntl
    import os

    _seeded(tmp_path, _nothing)
    db = tmp_path / "hookgate.db"
    before = db.read_bytes()
    fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # a command, migrating
        proc = subprocess.Popen([sys.executable, "-m", "hookgate.cli", "serve", "--port", "0", "--log-format", "json"],
                                cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        os.close(fd)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    waiting = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [e["event"] for e in waiting] == ["store.waiting"], err
    assert " listening on " not in out and db.read_bytes() == before
