"""Log lines as operations.md §2 gives them: free text from outside (a user agent, a remote API's error)
without control characters, the request fields on every request line, `session_key` where known,
and `store.error` for a store failure on the request path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gateway import AUTH, GatewayFactory, hooks_config, raw_request, wait_for
from receiver import running_receiver

CONTROL = {chr(c) for c in range(0x20)} | {chr(c) for c in range(0x7F, 0xA0)}  # Unicode Cc


def _access_line(gw: Any, rid: str) -> dict[str, Any]:
    return next(e for e in gw.flushed_log_events() if e.get("request_id") == rid and e["event"] == "http.request")


def test_user_agent_c1_control_characters_are_sanitised_in_the_access_line(gateway_factory: GatewayFactory) -> None:
    # operations.md §2: "Free-text values that are logged (hook names, mapping ids, error messages) are
    # sanitised: control characters → space"; docs/operations.md: "the user agent (sanitised like every
    # logged free text: control characters → space, whitespace collapsed, at most 500 characters)".
    gw = gateway_factory(hooks_config())
    # 0x9b is CSI (a C1 control character: an ANSI escape introducer on a terminal)
    out, _ = raw_request(gw.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                  b"X-Request-Id: ua-c1\r\nUser-Agent: ab\x9b2Jcd\r\n\r\n", read_timeout=3)
    assert out.startswith(b"HTTP/1.1 200")
    ua = _access_line(gw, "ua-c1")["user_agent"]
    assert not (set(ua) & CONTROL), f"control character logged in user_agent: {ua!r}"


def test_unhandled_exception_line_carries_the_known_request_fields(gateway_factory: GatewayFactory,
                                                                  tmp_path: Path) -> None:
    # operations.md §2: "Every line has ts, level, event, instance, and where known request_id,
    # surface (hooks, webhooks, health), route (hooks: wake, agent, mapping:<id>, unmatched; …),
    # client_ip"; docs/operations.md: "every line about a request adds request_id, surface, route and
    # client_ip".
    tdir = tmp_path / "hooks" / "transforms"
    tdir.mkdir(parents=True)
    # a defect of hookgate's own past the transform, simulated by the transform (trusted code in the
    # process) replacing the wake's dispatch: a transform's own errors are `hook.mapping_failed`
    (tdir / "boom.py").write_text(
        "import hookgate.edge.hooks_surface as surface\n"
        "async def dispatch_wake(*args, **kwargs):\n"
        "    raise ValueError('quoted body text')\n"
        "surface.dispatch_wake = dispatch_wake\n"
        "def transform(ctx):\n"
        "    return {'text': 'x'}\n"
    )
    cfg = hooks_config(mappings=[{"id": "boom", "match": {"path": "boom"}, "action": "wake",
                                  "transform": {"module": "boom.py"}}])
    gw = gateway_factory(cfg)
    with gw.client() as c:
        r = c.post("/hooks/boom", json={}, headers={**AUTH, "X-Request-Id": "unhandled-1"})
    assert r.status_code == 500
    line = next(e for e in gw.flushed_log_events()
                if e.get("request_id") == "unhandled-1" and e["event"] != "http.request")
    assert line["event"] == "http.unhandled"
    assert (line.get("surface"), line.get("route"), line.get("client_ip")) == ("hooks", "mapping:boom", "127.0.0.1"), line
    # what failed and where, never the exception's message (it may quote a body or a secret)
    assert line.get("error_type") == "ValueError" and line.get("error_at", "").startswith("boom.py:3 in "), line
    assert "exc_info" not in line and "quoted body text" not in json.dumps(line), line


@contextmanager
def _failing_receiver(error_text: str) -> Iterator[str]:
    """A loopback API that answers every POST with 400 and a JSON error description."""
    with running_receiver() as rec:
        rec.always = 400
        rec.reply = lambda _headers, _doc: {"error": error_text}
        yield rec.url + "/in"


def test_delivery_error_from_a_remote_api_is_sanitised_in_the_log(gateway_factory: GatewayFactory) -> None:
    # operations.md §2: "Free-text values that are logged (hook names, mapping ids, error messages) are
    # sanitised: control characters → space, whitespace collapsed, cut to 500 characters."
    with _failing_receiver("bad\x1b[2J\x07thing") as url:
        cfg = hooks_config()
        cfg["channels"] = {"webhook": {"url": url}}
        gw = gateway_factory(cfg)
        with gw.client() as c:
            r = c.post("/hooks/agent", json={"message": "hi", "channel": "webhook", "to": "t"}, headers=AUTH)
            assert r.status_code == 200
        dead = wait_for(lambda: [e for e in gw.flushed_log_events() if e["event"] == "delivery.dead"], timeout=15)
    error = dead[0]["error"]
    assert "thing" in error
    assert not (set(error) & CONTROL), f"control characters logged in delivery.dead error: {error!r}"


def test_no_target_line_carries_the_run_session_key(gateway_factory: GatewayFactory) -> None:
    # operations.md §2: "… and where known request_id, surface, route, client_ip, run_id, flow_id,
    # task_id, agent_id, session_key, delivery_id" (the run being delivered has its session key).
    gw = gateway_factory(hooks_config())
    with gw.client() as c:
        run_id = c.post("/hooks/agent", json={"message": "hi", "sessionKey": None}, headers=AUTH).json()["runId"]
    line = wait_for(lambda: [e for e in gw.flushed_log_events() if e["event"] == "delivery.no_target"], timeout=10)[0]
    assert line["run_id"] == run_id
    assert line.get("session_key", "").startswith("agent:main:hook:"), line


def test_a_failed_store_commit_on_the_request_path_logs_store_error(gateway_factory: GatewayFactory,
                                                                   tmp_path: Path) -> None:
    # operations.md §2 event names: "… `store.error`, …"; README §5: "The store being unreachable or
    # failing a commit gives 503"; operations.md §4.2: "If the database cannot be written …, affected
    # requests get 503". The failure is counted (hookgate_store_errors_total) but never logged.
    import sqlite3

    cfg = hooks_config()
    cfg["storage"]["sqlite"]["busyTimeoutMs"] = 100
    gw = gateway_factory(cfg)
    holder = sqlite3.connect(tmp_path / "hookgate.db", isolation_level=None, timeout=5)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock (a CLI command)
        with gw.client() as c:
            r = c.post("/hooks/wake", json={"text": "x"}, headers={**AUTH, "X-Request-Id": "store-fail"})
        assert r.status_code == 503, r.text
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    events = [e["event"] for e in gw.flushed_log_events()]
    assert "store.error" in events, events


def test_access_line_has_the_body_size_and_hash_when_answered_before_the_body_was_read(
        gateway_factory: GatewayFactory) -> None:
    # operations.md §2: "One access line per request, http.request: … body_bytes, body_sha256 (first 16
    # hex characters of the body hash)". A 401 or a 405 is answered before the surface reads the body,
    # and a health check has none to read: their lines lacked both fields.
    import hashlib

    gw = gateway_factory(hooks_config())
    body = b'{"text":"not logged"}'
    for method, token, rid, status in (("POST", "nope", "early-401", 401), ("PUT", "hook-secret", "early-405", 405),
                                       ("POST", "hook-secret", "read", 200)):
        # head and body in one write: the server reads them together (as a webhook's POST arrives)
        out, _ = raw_request(gw.port, f"{method} /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                             f"X-Request-Id: {rid}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                             .encode() + body, read_timeout=5)
        assert out.startswith(f"HTTP/1.1 {status} ".encode()), out[:100]
    with gw.client() as c:
        assert c.get("/healthz", headers={"X-Request-Id": "no-body"}).status_code == 200
    digest = hashlib.sha256(body).hexdigest()[:16]
    for rid in ("early-401", "early-405", "read"):
        line = _access_line(gw, rid)
        assert (line.get("body_bytes"), line.get("body_sha256")) == (len(body), digest), line
    line = _access_line(gw, "no-body")
    assert (line.get("body_bytes"), line.get("body_sha256")) == (0, hashlib.sha256(b"").hexdigest()[:16]), line
    assert "not logged" not in gw.stderr()


def test_a_requested_model_is_logged_as_sanitised_free_text(gateway_factory: GatewayFactory) -> None:
    # hooks.md §5.2: `model` is any non-empty string of the request; operations.md §2: `run.finished`
    # carries the model, and "Free-text values that are logged … are sanitised: control characters →
    # space, whitespace collapsed, cut to 500 characters." (The echo runtime serves any model.)
    cfg = hooks_config()
    cfg["agents"]["defaults"] = {"runtime": {"kind": "echo"}}
    gw = gateway_factory(cfg)
    model = "probe\x1b[2J\x07model" + "m" * 2000
    with gw.client() as c:
        r = c.post("/hooks/agent", json={"message": "hi", "model": model}, headers=AUTH)
        assert r.status_code == 200
    run_id = r.json()["runId"]
    line = wait_for(lambda: [e for e in gw.flushed_log_events()
                             if e["event"] == "run.finished" and e.get("run_id") == run_id], timeout=10)[0]
    logged = line["model"]
    assert isinstance(logged, str) and "probe" in logged and "model" in logged, line
    assert not (set(logged) & CONTROL), f"control characters logged in run.finished model: {logged!r}"
    assert len(logged) <= 500, len(logged)


def test_a_long_session_key_from_the_payload_is_cut_in_every_log_line(gateway_factory: GatewayFactory) -> None:
    # operations.md §2: free text that is logged is "cut to 500 characters". A session key the caller
    # chose (or a template rendered from the payload) was logged whole in run.started, run.finished and
    # delivery.no_target: a 256 KB body made three 256 KB lines.
    gw = gateway_factory(hooks_config(allowRequestSessionKey=True, allowedSessionKeyPrefixes=["hook:"],
                                      maxBodyBytes=1_000_000))
    key = "hook:" + "k" * 200_000
    with gw.client() as c:
        r = c.post("/hooks/agent", json={"message": "hi", "sessionKey": key}, headers=AUTH)
    assert r.status_code == 200, r.text
    run_id = r.json()["runId"]
    wait_for(lambda: any(e["event"] == "run.finished" and e.get("run_id") == run_id
                         for e in gw.flushed_log_events()), timeout=15)
    lines = [e for e in gw.flushed_log_events() if e.get("run_id") == run_id]
    assert {"run.started", "run.finished"} <= {e["event"] for e in lines}, lines
    for e in lines:
        if "session_key" in e:
            assert e["session_key"] == ("agent:main:" + key)[:500], e["event"]
    assert max(len(json.dumps(e)) for e in gw.flushed_log_events()) < 4_000
