"""Health, readiness, metrics, common headers, client IP, reload, shutdown and durability (README §5–§7, §9)."""

from __future__ import annotations

import concurrent.futures
import json
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway import AUTH, GatewayFactory, RunningGateway, hooks_config, raw_request, wait_for


def test_health_and_ready(gateway: RunningGateway) -> None:
    with gateway.client() as c:
        for path in ("/healthz", "/health"):
            r = c.get(path)
            assert r.status_code == 200 and r.content == b'{"ok":true,"status":"live"}'
        for path in ("/readyz", "/ready"):
            r = c.get(path)
            body = r.json()
            assert r.status_code == 200
            assert list(body) == ["ready", "failing", "uptimeMs", "configHash"]
            assert body["ready"] is True and body["failing"] == [] and isinstance(body["uptimeMs"], int)
            assert len(body["configHash"]) == 16
        head = c.head("/healthz")
        assert head.status_code == 200 and head.content == b""
        r = c.post("/healthz")
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
        assert r.content == b'{"ok":false,"error":"Method Not Allowed"}'


def test_config_hash_matches_cli_and_ignores_secrets(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory()
    with gw.client() as c:
        ready_hash = c.get("/readyz").json()["configHash"]
    shown = json.loads(gw.cli("config", "show").stdout)
    assert shown["configHash"] == ready_hash
    assert shown["hooks"]["token"] == "[redacted]"


def test_common_headers_and_request_id(gateway_factory: GatewayFactory) -> None:
    cfg = hooks_config()
    cfg["gateway"] = {"http": {"securityHeaders": {"strictTransportSecurity": "max-age=63072000"}}}
    gw = gateway_factory(cfg)
    with gw.client() as c:
        for r in (c.get("/healthz"), c.post("/nowhere"), c.post("/hooks/wake", json={"text": "a"}, headers=AUTH)):
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["referrer-policy"] == "no-referrer"
            assert r.headers["cache-control"] == "no-store"
            assert r.headers["strict-transport-security"] == "max-age=63072000"
            assert r.headers["content-type"] == "application/json; charset=utf-8"
            assert 1 <= len(r.headers["x-request-id"]) <= 128
        assert c.get("/healthz", headers={"X-Request-Id": "abc.DEF:1-2_3"}).headers["x-request-id"] == "abc.DEF:1-2_3"
        bad = c.get("/healthz", headers={"X-Request-Id": "no spaces allowed"}).headers["x-request-id"]
        assert bad != "no spaces allowed"
        r = c.post("/nowhere")
        assert r.status_code == 404 and r.content == b'{"ok":false,"error":"Not Found"}'


def test_metrics_open_and_token_protected(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory()
    with gw.client() as c:
        c.post("/hooks/wake", json={"text": "a"}, headers=AUTH)
        c.post("/hooks/wake", json={"text": "a"}, headers={"Authorization": "Bearer wrong"})
        r = c.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = r.text
    assert 'hookgate_requests_total{route="wake",status="200",surface="hooks"} 1.0' in text
    assert 'hookgate_auth_failures_total{route="wake",surface="hooks"} 1.0' in text
    assert 'hookgate_system_events_total{outcome="queued"} 1.0' in text
    assert "hookgate_ingest_latency_seconds_bucket" in text
    assert 'hookgate_store_commit_seconds_count{backend="sqlite"}' in text
    group_counts = [line for line in text.splitlines() if line.startswith("hookgate_store_group_size_count ")]
    assert len(group_counts) == 1 and float(group_counts[0].split()[1]) >= 1  # the wake's commit
    assert "hookgate_build_info{" in text and "process_resident_memory_bytes" in text
    gw.stop()

    cfg = hooks_config()
    cfg["gateway"] = {"auth": {"mode": "token", "token": "metrics-token"}}
    gw2 = gateway_factory(cfg)
    with gw2.client() as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers={"Authorization": "Bearer nope"}).content == b'{"ok":false,"error":"Unauthorized"}'
        assert c.get("/metrics", headers={"Authorization": "Bearer metrics-token"}).status_code == 200
        assert c.get("/healthz").status_code == 200  # only /metrics is protected


def test_trusted_proxy_client_ip_keys_the_throttle(gateway_factory: GatewayFactory) -> None:
    cfg = hooks_config(authThrottle={"maxFailures": 2, "windowSeconds": 60, "lockoutSeconds": 60})
    cfg["gateway"] = {"trustedProxies": ["127.0.0.0/8"]}
    gw = gateway_factory(cfg)
    wrong = {"Authorization": "Bearer wrong"}
    with gw.client() as c:
        for _ in range(2):
            c.post("/hooks/wake", json={}, headers={**wrong, "X-Forwarded-For": "198.51.100.1"})
        assert c.post("/hooks/wake", json={}, headers={**wrong, "X-Forwarded-For": "198.51.100.1"}).status_code == 429
        # same proxy, another forwarded client: its own budget
        assert c.post("/hooks/wake", json={}, headers={**wrong, "X-Forwarded-For": "198.51.100.2"}).status_code == 401
        # mapped IPv6 form of the same client shares the budget
        r = c.post("/hooks/wake", json={}, headers={**wrong, "X-Forwarded-For": "::ffff:198.51.100.1"})
        assert r.status_code == 429
    lines = [e for e in gw.flushed_log_events() if e.get("event") == "http.request" and e.get("status") == 429]
    assert {e["client_ip"] for e in lines} == {"198.51.100.1"}


def test_a_reload_that_changes_the_throttle_keeps_its_lockouts(gateway_factory: GatewayFactory) -> None:
    """A client locked out stays locked out across a SIGHUP that changes hooks.authThrottle (the
    lockout ends when it was due to); its later failures count against the new limits."""
    cfg = hooks_config(authThrottle={"maxFailures": 2, "windowSeconds": 60, "lockoutSeconds": 60})
    gw = gateway_factory(cfg)
    wrong = {"Authorization": "Bearer wrong"}
    with gw.client() as c:
        for _ in range(2):
            c.post("/hooks/wake", json={}, headers=wrong)
        assert c.post("/hooks/wake", json={}, headers=wrong).status_code == 429
        cfg["hooks"]["authThrottle"] = {"maxFailures": 5, "windowSeconds": 60, "lockoutSeconds": 30}
        gw.config_path.write_text(json.dumps(cfg))
        gw.signal(signal.SIGHUP)
        assert wait_for(lambda: any(e["event"] == "config.loaded" and e.get("trigger") == "signal"
                                    for e in gw.flushed_log_events()))
        r = c.post("/hooks/wake", json={}, headers=wrong)
        assert r.status_code == 429 and 50 <= int(r.headers["retry-after"]) <= 60


def test_logs_never_contain_tokens_or_bodies(gateway: RunningGateway) -> None:
    with gateway.client() as c:
        c.post("/hooks/wake", json={"text": "TOP-SECRET-WAKE-TEXT"}, headers=AUTH)
        c.post("/hooks/agent", json={"message": "TOP-SECRET-MESSAGE"}, headers=AUTH)
        c.post("/hooks/wake", json={"text": "x"}, headers={"Authorization": "Bearer WRONG-TOKEN-VALUE"})
        c.post("/hooks/wake?token=QUERY-TOKEN-VALUE", json={"text": "x"})
    gateway.stop()
    log = gateway.stderr()
    for secret in ("hook-secret", "TOP-SECRET", "WRONG-TOKEN-VALUE", "QUERY-TOKEN-VALUE"):
        assert secret not in log
    access = [e for e in gateway.log_events() if e.get("event") == "http.request"]
    assert len(access) == 4
    first = access[0]
    for key in ("ts", "level", "instance", "request_id", "surface", "route", "client_ip", "method", "path",
                "status", "duration_ms", "body_bytes", "body_sha256"):
        assert key in first, key
    assert first["path"] == "/hooks/wake" and len(first["body_sha256"]) == 16


def test_sighup_reload_applies_valid_and_keeps_old_on_invalid(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory()
    with gw.client() as c:
        old_hash = c.get("/readyz").json()["configHash"]
        gw.config_path.write_text(json.dumps(hooks_config(path="/in")))
        gw.signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while c.get("/readyz").json()["configHash"] == old_hash and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.post("/in/wake", json={"text": "a"}, headers=AUTH).status_code == 200
        assert c.post("/hooks/wake", json={"text": "a"}, headers=AUTH).status_code == 404
        new_hash = c.get("/readyz").json()["configHash"]
        gw.config_path.write_text('{hooks: {enabled: true, tokn: "x"}}')
        gw.signal(signal.SIGHUP)
        failed = gw.wait_log("config.reload_failed")
        assert any("hooks.tokn: unknown key" in line for line in failed["errors"])
        assert c.get("/readyz").json()["configHash"] == new_hash
        assert c.post("/in/wake", json={"text": "b"}, headers=AUTH).status_code == 200


def test_reload_of_the_address_needs_a_restart_until_it_is_reverted(gateway_factory: GatewayFactory) -> None:
    """Restart-only keys are compared with what the process runs with: the address it listens on
    (``--port`` chose the port here, so the file's port does not matter) and its storage."""
    gw = gateway_factory()
    cfg = hooks_config()

    def reload(gateway: dict[str, Any]) -> list[list[str]]:
        cfg["gateway"] = gateway
        gw.config_path.write_text(json.dumps(cfg))
        loaded = len([e for e in gw.log_events() if e.get("event") == "config.loaded"])
        gw.signal(signal.SIGHUP)
        wait_for(lambda: len([e for e in gw.log_events() if e.get("event") == "config.loaded"]) > loaded)
        return [e["keys"] for e in gw.flushed_log_events() if e.get("event") == "config.reload_restart_required"]

    assert reload({"bind": "0.0.0.0", "port": 1}) == [["gateway.bind"]]
    assert reload({}) == [["gateway.bind"]]  # back to what it listens on: nothing more to restart for
    assert reload({"port": 2}) == [["gateway.bind"]]
    with gw.client() as c:
        assert c.get("/healthz").status_code == 200


def test_sigterm_drains_in_flight_request_and_exits_zero(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(hooks_config(bodyTimeoutSeconds=10))
    head = (b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hook-secret\r\n"
            b"Content-Length: 14\r\n\r\n{\"text\":")
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)  # connected before the signal
    try:
        sock.sendall(head)
        time.sleep(0.3)  # the server is reading the body
        gw.signal(signal.SIGTERM)
        time.sleep(0.5)
        sock.sendall(b'"bye"}')
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    finally:
        sock.close()
    assert data.startswith(b"HTTP/1.1 200 ")
    assert b"connection: close" in data.lower()
    assert gw.proc is not None and gw.proc.wait(10) == 0
    events = [e.get("event") for e in gw.log_events()]
    assert "shutdown.started" in events and "shutdown.completed" in events
    with pytest.raises(httpx.ConnectError):
        httpx.get(gw.url + "/healthz")


def test_sigterm_answers_a_request_whose_head_was_arriving(gateway_factory: GatewayFactory) -> None:
    """operations.md §1.1 SIGTERM: "requests in progress finish (their responses carry `Connection:
    close`; `/readyz` asked on a still-open connection answers 503 with `"failing":["shutdown"]`)". A
    request whose head had begun to arrive at the signal is in progress: its connection was closed
    with no answer (uvicorn took it for idle), so that 503 could never be seen, and a wake sent just
    then was lost unanswered. An idle keep-alive connection still closes at once."""
    gw = gateway_factory(hooks_config())
    conns = [socket.create_connection(("127.0.0.1", gw.port), timeout=10) for _ in range(3)]
    idle, ready, wake = conns
    try:
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert idle.recv(65536).startswith(b"HTTP/1.1 200 ")
        ready.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n")
        wake.sendall(b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hook-secret\r\n")
        time.sleep(1.0)  # the server has read the heads' beginnings (nothing shows it: a loaded machine)
        gw.signal(signal.SIGTERM)
        gw.wait_log("shutdown.started")
        time.sleep(0.5)
        assert _read_all(idle) == b""  # closed, with nothing to answer
        ready.sendall(b"\r\n")
        answer = _read_all(ready)
        body = b'{"text":"late wake"}'
        wake.sendall(b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        woken = _read_all(wake)
    finally:
        for conn in conns:
            conn.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ") and b"connection: close" in head.lower(), answer[:300]
    assert json.loads(body)["failing"] == ["shutdown"]
    assert woken.startswith(b"HTTP/1.1 200 ") and b"connection: close" in woken.lower(), woken[:300]
    assert gw.proc is not None and gw.proc.wait(10) == 0
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        assert [row[0] for row in conn.execute("SELECT text FROM system_events")] == ["late wake"]


def test_second_serve_on_same_database_refuses(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory()
    second = gw.cli("serve", "--port", "0")
    assert second.returncode != 0
    assert f"database {gw.workdir / 'hookgate.db'} is in use by another hookgate serve process" in second.stderr


def test_kill9_loses_nothing_acknowledged(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory()
    acked_events: set[str] = set()
    acked_runs: dict[str, str] = {}

    def fire(i: int) -> None:
        with gw.client() as c:
            for j in range(40):
                n = i * 1000 + j
                try:
                    if n % 2:
                        r = c.post("/hooks/wake", json={"text": f"event {n}", "mode": "next-heartbeat"}, headers=AUTH)
                        if r.status_code == 200:
                            acked_events.add(f"event {n}")
                    else:
                        r = c.post("/hooks/agent", json={"message": f"run {n}"},
                                   headers={**AUTH, "Idempotency-Key": f"key-{n}"})
                        if r.status_code == 200:
                            acked_runs[f"key-{n}"] = r.json()["runId"]
                except httpx.HTTPError:
                    return

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(fire, i) for i in range(8)]
        deadline = time.monotonic() + 10
        while (len(acked_events) < 5 or len(acked_runs) < 5) and time.monotonic() < deadline:
            time.sleep(0.02)
        gw.kill9()
        for f in futures:
            f.result()
    assert acked_events and acked_runs
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        stored_events = {row[0] for row in conn.execute("SELECT text FROM system_events")}
        stored_runs = {row[0] for row in conn.execute("SELECT run_id FROM runs")}
    # at most 20 events stay pending per session; dropped ones are still stored rows
    assert acked_events <= stored_events
    assert set(acked_runs.values()) <= stored_runs
    gw.start()
    with gw.client() as c:
        for key, run_id in list(acked_runs.items())[:20]:
            n = int(key.split("-")[1])
            r = c.post("/hooks/agent", json={"message": f"run {n}"}, headers={**AUTH, "Idempotency-Key": key})
            assert r.json()["runId"] == run_id


def test_store_unavailable_gives_503_and_commits_nothing(gateway_factory: GatewayFactory) -> None:
    cfg = hooks_config()
    cfg["storage"]["sqlite"]["busyTimeoutMs"] = 200
    gw = gateway_factory(cfg)
    blocker = sqlite3.connect(gw.workdir / "hookgate.db", isolation_level=None, timeout=5)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock longer than busyTimeoutMs
    try:
        with gw.client() as c:
            r = c.post("/hooks/wake", json={"text": "lost?"}, headers=AUTH)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.content == b'{"ok":false,"error":"Service Unavailable"}'
            r = c.post("/hooks/agent", json={"message": "m"}, headers={**AUTH, "Idempotency-Key": "k"})
            assert r.status_code == 503
            ready = c.get("/readyz")
            assert ready.status_code == 503 and ready.json()["failing"] == ["store"]
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    with gw.client() as c:
        # readiness comes back by itself: a probe write, a second after the last failed commit
        wait_for(lambda: c.get("/readyz").status_code == 200, timeout=5)
        first = c.post("/hooks/agent", json={"message": "m"}, headers={**AUTH, "Idempotency-Key": "k"})
        assert first.status_code == 200  # the 503 left no idempotency record behind
        assert c.post("/hooks/wake", json={"text": "lost?"}, headers=AUTH).json()["eventOutcome"] == "queued"
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs WHERE kind = 'hook'").fetchone()[0] == 1
    samples = [line for line in httpx.get(gw.url + "/metrics").text.splitlines()
               if line.startswith('hookgate_store_errors_total{backend="sqlite"} ')]
    assert len(samples) == 1 and float(samples[0].rsplit(" ", 1)[1]) >= 2  # the wake's and the agent's 503
    # (and any worker tick that ran into the lock: exact counts are the next test's)


def test_a_failed_write_is_one_store_error(gateway_factory: GatewayFactory) -> None:
    """operations.md §3: hookgate_store_errors_total counts failed store operations — one 503, one error."""
    cfg = hooks_config()
    cfg["storage"]["sqlite"]["busyTimeoutMs"] = 200
    gw = gateway_factory(cfg, args=("--no-worker",))  # nothing else writes
    blocker = sqlite3.connect(gw.workdir / "hookgate.db", isolation_level=None, timeout=5)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with gw.client() as c:
            assert c.post("/hooks/wake", json={"text": "x"}, headers=AUTH).status_code == 503
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    samples = [line for line in httpx.get(gw.url + "/metrics").text.splitlines()
               if line.startswith('hookgate_store_errors_total{backend="sqlite"} ')]
    assert samples == ['hookgate_store_errors_total{backend="sqlite"} 1.0']


def test_reload_watch_follows_the_file_and_can_be_turned_off(gateway_factory: GatewayFactory) -> None:
    """gateway.reload.watch: a change of the file reloads it (checked every 2 s); a reload may turn it off."""
    cfg = hooks_config()
    cfg["gateway"] = {"reload": {"watch": True}}
    gw = gateway_factory(cfg)
    with gw.client() as c:
        first = c.get("/readyz").json()["configHash"]
        cfg["hooks"]["path"] = "/in"
        cfg["gateway"] = {"reload": {"watch": False}}  # this change turns watching off
        gw.config_path.write_text(json.dumps(cfg))
        assert wait_for(lambda: c.post("/in/wake", json={"text": "a"}, headers=AUTH).status_code == 200, timeout=6)
        second = c.get("/readyz").json()["configHash"]
        assert second != first
        cfg["hooks"]["path"] = "/again"
        gw.config_path.write_text(json.dumps(cfg))
        time.sleep(4.5)  # two watch ticks: nothing happens
        assert c.get("/readyz").json()["configHash"] == second
        gw.signal(signal.SIGHUP)
        assert wait_for(lambda: c.post("/again/wake", json={"text": "b"}, headers=AUTH).status_code == 200)
    assert [e["trigger"] for e in gw.flushed_log_events() if e["event"] == "config.loaded" and "trigger" in e] == [
        "watch", "signal"]


def test_a_change_right_after_the_reload_that_turns_watching_on_is_seen(gateway_factory: GatewayFactory) -> None:
    """The watch's baseline is the file as that reload read it, not as the first tick after it finds it."""
    cfg = hooks_config()
    gw = gateway_factory(cfg)
    with gw.client() as c:
        cfg["gateway"] = {"reload": {"watch": True}}
        gw.config_path.write_text(json.dumps(cfg))
        gw.signal(signal.SIGHUP)
        assert wait_for(lambda: any(e["event"] == "config.loaded" and e.get("trigger") == "signal"
                                    for e in gw.flushed_log_events()))
        cfg["hooks"]["path"] = "/soon"  # before the watch's next tick (every 2 s)
        gw.config_path.write_text(json.dumps(cfg))
        assert wait_for(lambda: c.post("/soon/wake", json={"text": "a"}, headers=AUTH).status_code == 200, timeout=6)
    assert [e["trigger"] for e in gw.flushed_log_events() if e["event"] == "config.loaded" and "trigger" in e] == [
        "signal", "watch"]


def test_a_broken_log_pipe_loses_log_lines_not_answers(tmp_path: Path) -> None:
    """`hookgate serve 2>&1 | shipper` and the shipper dies: every committed effect still gets its 2xx."""
    (tmp_path / "hookgate.json5").write_text(json.dumps(hooks_config()))
    proc = subprocess.Popen([sys.executable, "-m", "hookgate.cli", "serve", "--config", "hookgate.json5",
                             "--port", "0", "--log-format", "json"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        url = None
        while url is None:
            line = proc.stdout.readline().decode()
            assert line, "hookgate exited before it was ready"
            if " listening on " in line:
                url = line.split(" listening on ")[1].split()[0]
        proc.stderr.close()  # the log reader is gone: every write to stderr is EPIPE from now on
        with httpx.Client(base_url=url, timeout=10) as c:
            for i in range(400):  # ~120 KB of access lines: past the 64 KiB the server writes at once
                r = c.post("/hooks/wake", json={"text": f"e{i}", "mode": "next-heartbeat"}, headers=AUTH)
                assert r.status_code == 200, (i, r.text)
            assert c.post("/hooks/wake", json={"text": "x"}, headers={"Authorization": "Bearer no"}).status_code == 401
            run = c.post("/hooks/agent", json={"message": "still answered"}, headers=AUTH)
            assert run.status_code == 200 and run.json()["ok"] is True
        with sqlite3.connect(tmp_path / "hookgate.db") as conn:
            assert conn.execute("SELECT count(*) FROM system_events WHERE text LIKE 'e%'").fetchone()[0] == 400
            assert conn.execute("SELECT count(*) FROM runs WHERE run_id = ?", (run.json()["runId"],)).fetchone()[0] == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


# --- shutdown with a reloaded drain, and the listener (operations.md §1.1) ------------------------

SLOW_HEAD = (b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hook-secret\r\n"
             b"Content-Length: 14\r\n\r\n{\"text\":")
SLOW_REST = b'"bye"}'


def _reload(gw: RunningGateway, cfg: dict[str, Any]) -> None:
    """Write ``cfg`` and SIGHUP; wait until the new config is logged as loaded."""
    loaded = len([e for e in gw.log_events() if e.get("event") == "config.loaded"])
    gw.config_path.write_text(json.dumps(cfg))
    gw.signal(signal.SIGHUP)
    wait_for(lambda: len([e for e in gw.log_events() if e.get("event") == "config.loaded"]) > loaded)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


def _run_status(gw: RunningGateway, run_id: str) -> tuple[str, int]:
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        row = conn.execute("SELECT status, attempt FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return str(row[0]), int(row[1])


def test_reloaded_drain_timeout_does_not_cut_a_request_in_progress_early(gateway_factory: GatewayFactory) -> None:
    """operations.md §1.1 SIGTERM: "requests in progress finish (their responses carry `Connection: close` …)";
    README §4 Reload: only "`gateway.bind`, `gateway.port` and `storage.*` changes need a restart" — so a
    reloaded `gateway.drainTimeoutSeconds` (1 → 10) is in force.

    A request in progress whose body completes 2.5 s after SIGTERM (well inside the reloaded 10 s drain)
    must finish with its 200. It was cut at the startup value (1 s) with a 500
    (`http.cut_by_drain`), because uvicorn's `timeout_graceful_shutdown` is fixed at start
    (server.py Service._serve)."""
    cfg = hooks_config(bodyTimeoutSeconds=20)
    cfg["gateway"] = {"drainTimeoutSeconds": 1}
    gw = gateway_factory(cfg)
    cfg["gateway"] = {"drainTimeoutSeconds": 10}
    _reload(gw, cfg)
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=15)
    try:
        sock.sendall(SLOW_HEAD)
        gw.flushed_log_events()  # a later request answered: the slow one's head has been read
        gw.signal(signal.SIGTERM)
        gw.wait_log("shutdown.started")
        # the client is slow: the rest of its body comes 2.5 s later, unless the server answers first
        readable, _, _ = select.select([sock], [], [], 2.5)
        if not readable:
            sock.sendall(SLOW_REST)
        data = _read_all(sock)
    finally:
        sock.close()
    assert data.startswith(b"HTTP/1.1 200 "), data[:200]
    assert gw.proc is not None and gw.proc.wait(15) == 0


def test_reloaded_drain_timeout_aborts_running_jobs_while_requests_drain(gateway_factory: GatewayFactory) -> None:
    """operations.md §1.1 SIGTERM: "running jobs get up to `gateway.drainTimeoutSeconds` (default 10) to
    finish. Jobs still running then are aborted and their leases released **without consuming an
    attempt**"; README §4: `drainTimeoutSeconds` is not among the restart-only keys.

    drainTimeoutSeconds reloaded 10 → 1; a run that needs ~3 s is running at SIGTERM while an HTTP
    request is still in progress. Expected: at ~1 s the run is aborted and released (status `queued`,
    attempt 1). The run went on and ended `ok` ~3 s after the signal — the worker's drain
    (and its deadline) only starts once the HTTP drain is over (server.py Service._serve awaits
    `serving` before `worker.drain`), and the HTTP drain uses the startup 10 s."""
    cfg = hooks_config(bodyTimeoutSeconds=20)
    cfg["gateway"] = {"drainTimeoutSeconds": 10}
    gw = gateway_factory(cfg)
    cfg["gateway"] = {"drainTimeoutSeconds": 1}
    _reload(gw, cfg)
    with gw.client() as c:
        run_id = c.post("/hooks/agent", json={"message": "job [[echo:sleep=3]]"}, headers=AUTH).json()["runId"]
    wait_for(lambda: _run_status(gw, run_id)[0] == "running")
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=15)
    try:
        sock.sendall(SLOW_HEAD)  # a request in progress during the drain
        gw.flushed_log_events()  # a later request answered: the slow one's head has been read
        gw.signal(signal.SIGTERM)
        gw.wait_log("shutdown.started")
        # the slow request stays in progress until the run's fate is settled (or 6 s passed)
        deadline = time.monotonic() + 6
        while _run_status(gw, run_id)[0] == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            sock.sendall(SLOW_REST)
        except OSError:
            pass
        _read_all(sock)
    finally:
        sock.close()
    assert gw.proc is not None and gw.proc.wait(15) == 0
    assert _run_status(gw, run_id) == ("queued", 1)


def test_no_new_connection_is_served_once_shutdown_began(gateway_factory: GatewayFactory) -> None:
    """operations.md §1.1 SIGTERM/SIGINT: "graceful shutdown. The listener stops accepting new
    connections; requests in progress finish".

    Connections opened after the signal was handled must be refused. They were accepted and served
    for up to ~100 ms (uvicorn checks `should_exit` every 0.1 s; the signal handler only set it):
    137 – 226 answers `/readyz` 503 `"failing":["shutdown"]`, from a server that knew it was
    stopping. (One such answer can be honest: a connection accepted just before the signal whose
    request is read just after it.)"""
    gw = gateway_factory()
    gw.signal(signal.SIGTERM)
    served_during_shutdown: list[bytes] = []
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            data, _ = raw_request(gw.port, b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                  read_timeout=2)
        except OSError:
            break  # refused: the listener is closed
        if b'"shutdown"' in data:
            served_during_shutdown.append(data.split(b"\r\n", 1)[0])
    assert gw.proc is not None and gw.proc.wait(15) == 0
    assert len(served_during_shutdown) <= 1, f"{len(served_during_shutdown)} new connections served after SIGTERM"


def _caught(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def test_sigterm_before_the_server_started_shuts_down(gateway_factory: GatewayFactory) -> None:
    """operations.md §1.1: "`SIGTERM` / `SIGINT`: graceful shutdown … Exit 0."

    A SIGTERM handled after hookgate installed its handlers but before uvicorn started (during the
    worker's start; with an HTTP agent that loads httpx, ~0.1 s): the handler read the listeners
    uvicorn had not made yet and failed, and the process went on serving; before that change, the
    socket uvicorn closed at once was read for its port: exit 1."""
    cfg = hooks_config()
    cfg["agents"]["list"].append({"id": "ops", "runtime": {"kind": "openai", "baseUrl": "http://127.0.0.1:9/v1",
                                                           "apiKey": "k"}, "model": "m"})
    gw = gateway_factory(cfg, start=False)
    cmd = [sys.executable, "-m", "hookgate.cli", "serve", "--config", str(gw.config_path), "--port", "0",
           "--log-format", "json"]
    with open(gw.stderr_path, "ab") as err:
        proc = subprocess.Popen(cmd, cwd=gw.workdir, env=gw.env, stdout=subprocess.PIPE, stderr=err)
    try:
        hup = 1 << (signal.SIGHUP - 1)
        deadline = time.monotonic() + 20
        while not _caught(proc.pid) & hup and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.0005)
        assert _caught(proc.pid) & hup, "signal handlers not installed in time"
        proc.send_signal(signal.SIGTERM)  # the handlers are installed: this one is hookgate's to handle
        try:
            code = proc.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        out = proc.stdout.read() if code is not None else b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    stderr = Path(gw.stderr_path).read_text()
    assert code == 0, f"still running 10 s after SIGTERM (exit {code}); {out!r}; log: {stderr[-1500:]}"
