"""hooks.md §3 mapping rows and §9 examples 13–16 against a real server and a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from gateway import AUTH, GatewayFactory, RunningGateway, hooks_config, raw_request

TRANSFORM = """
import time
from hookgate.transforms import SKIP
def transform(ctx):
    kind = ctx.payload.get("kind") if isinstance(ctx.payload, dict) else None
    if kind == "skip":
        return SKIP
    if kind == "raise":
        raise RuntimeError("secret payload detail")
    if kind == "slow":
        time.sleep(3)
    if kind == "wake":
        return {"kind": "wake", "text": "Ping " + ctx.payload.get("who", "")}
    if kind == "null-kind":
        return {"kind": None, "message": "m"}
    return {"message": "v1 " + ctx.headers.get("x-foo", "") + " " + ctx.query.get("q", "")}
"""


def db(gw: RunningGateway) -> sqlite3.Connection:
    return sqlite3.connect(gw.workdir / "hookgate.db")


def exact(resp: Any, status: int, body: str) -> None:
    assert resp.status_code == status, resp.text
    assert resp.content == body.encode()


def config(tmp: Path) -> dict[str, Any]:
    d = tmp / "hooks" / "transforms"
    d.mkdir(parents=True, exist_ok=True)
    (d / "t.py").write_text(TRANSFORM)
    (d / "nofn.py").write_text("transform = 'not a function'\n")
    return hooks_config(
        transformTimeoutSeconds=1, allowRequestSessionKey=True, allowedSessionKeyPrefixes=["hook:"],
        presets=["gmail"],
        mappings=[
            {"match": {"path": "mapped-wake"}, "action": "wake", "textTemplate": "Mapped wake: {{payload.subject}}"},
            {"id": "t", "match": {"path": "t"}, "messageTemplate": "base", "transform": {"module": "t.py"}},
            {"id": "tpl", "match": {"path": "tpl"}, "action": "wake",
             "textTemplate": "[{{__proto__}}{{constructor.name}}{{items.length}}{{toString}}]"
                             "{{items.1.id}} {{headers.X-Foo}}"},
            {"id": "gh", "match": {"path": "gh", "source": "github"}, "sessionKey": "hook:gh:{{repo}}",
             "messageTemplate": "PR {{number}}"},
            {"id": "empty", "match": {"path": "empty"}, "messageTemplate": "{{missing}}"},
            {"id": "chan", "match": {"path": "chan"}, "messageTemplate": "x", "channel": "sms"},
            {"id": "nofn", "match": {"path": "nofn"}, "messageTemplate": "x", "transform": {"module": "nofn.py"}},
            {"id": "any", "match": {"source": "any-name"}, "messageTemplate": "x"},  # any name, by source
        ])


def test_mapped_routes(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    gw = gateway_factory(config(tmp_path))
    # the banner names every mapping's path, "*" for one that matches any name (operations.md §1.1)
    assert (f"hooks: POST http://127.0.0.1:{gw.port}/hooks/wake, /hooks/agent, "
            "/hooks/<mapped-wake|t|tpl|gh|empty|chan|nofn|*|gmail>") in gw.stdout_lines
    with gw.client() as c:
        # §9 example 13
        exact(c.post("/hooks/mapped-wake", json={"subject": "Email"}, headers=AUTH), 200,
              '{"ok":true,"mode":"now","eventOutcome":"queued"}')
        with db(gw) as conn:
            assert list(conn.execute("SELECT text FROM system_events")) == [("Mapped wake: Email",)]
        # §9 example 14
        r = c.post("/hooks/t", json={"kind": "skip"}, headers=AUTH)
        assert r.status_code == 204 and r.content == b"" and "content-type" not in r.headers
        exact(c.post("/hooks/t", json={"kind": "raise"}, headers=AUTH), 500,
              '{"ok":false,"error":"hook mapping failed"}')
        exact(c.post("/hooks/t", json={"kind": "wake", "who": "Ada"}, headers=AUTH), 200,
              '{"ok":true,"mode":"now","eventOutcome":"queued"}')
        with db(gw) as conn:
            assert ("Ping Ada",) in list(conn.execute("SELECT text FROM system_events"))
        # §9 example 16
        r = c.post("/hooks/tpl", json={"items": [{"id": "a"}, {"id": "b"}]}, headers={**AUTH, "X-Foo": "foo"})
        assert r.status_code == 200
        with db(gw) as conn:
            assert ("[]b foo",) in list(conn.execute("SELECT text FROM system_events"))
        # mapped agent, source match, idempotent replay with scope path = subPath
        h = {**AUTH, "Idempotency-Key": "k1"}
        r1 = c.post("/hooks/gh", json={"source": "github", "repo": "octo", "number": 7}, headers=h)
        r2 = c.post("/hooks/gh", json={"source": "github", "repo": "octo", "number": 7}, headers=h)
        assert r1.status_code == 200 and r1.json() == r2.json()
        with db(gw) as conn:
            rows = list(conn.execute("SELECT session_key, inputs FROM runs WHERE kind = 'hook'"))
        assert len(rows) == 1 and rows[0][0] == "agent:main:hook:gh:octo"
        inputs = json.loads(rows[0][1])
        assert inputs["message"] == "PR 7" and inputs["wrap"] is True and inputs["externalContentSource"] == "webhook"
        # no match (source mismatch), validation, channel
        exact(c.post("/hooks/gh", json={"source": "GitHub"}, headers=AUTH), 404, '{"ok":false,"error":"Not Found"}')
        exact(c.post("/hooks/empty", json={}, headers=AUTH), 400,
              '{"ok":false,"error":"hook mapping requires message"}')
        exact(c.post("/hooks/chan", json={}, headers=AUTH), 400, '{"ok":false,"error":"channel must be last"}')
        bad = c.post("/hooks/nothing", content=b"{bad", headers=AUTH)  # decoded before any mapping is looked up
        assert bad.status_code == 400 and bad.json()["ok"] is False
        assert bad.json()["error"].startswith("invalid JSON: ")
        exact(c.post("/hooks/nothing", json={}, headers=AUTH), 404, '{"ok":false,"error":"Not Found"}')
        exact(c.post("/hooks/t", json={}), 401, '{"ok":false,"error":"Unauthorized"}')
        # gmail preset: gmail source, wrapped, session key from the first message
        r = c.post("/hooks/gmail", json={"source": "gmail", "messages": [{"id": "M1", "from": "Ada"}]}, headers=AUTH)
        assert r.status_code == 200
        with db(gw) as conn:
            key, raw = conn.execute("SELECT session_key, inputs FROM runs WHERE run_id = ?",
                                    (r.json()["runId"],)).fetchone()
        assert key == "agent:main:hook:gmail:m1" and json.loads(raw)["externalContentSource"] == "gmail"
        metrics = c.get("/metrics").text
    failed = gw.wait_log("hook.mapping_failed")
    assert failed["mapping"] == "t" and failed["error_type"] == "RuntimeError" and failed["error"] is None
    assert "secret payload detail" not in gw.stderr()
    assert 'hookgate_transform_duration_seconds_count{mapping="t"}' in metrics
    assert any(e.get("event") == "http.request" and e.get("route") == "mapping:t" for e in gw.log_events())


def test_a_header_value_is_read_without_the_whitespace_around_it(gateway_factory: GatewayFactory,
                                                               tmp_path: Path) -> None:
    """RFC 9110 §5.5: spaces and tabs around a field value are not part of it. The HTTP parser left the
    trailing ones, so `{{headers.x-foo}}` and a transform's ctx.headers saw `foo \t` where `hookgate
    hooks test` (and Node.js) gave `foo`."""
    cfg = config(tmp_path)
    cfg["hooks"]["mappings"].insert(0, {"match": {"path": "hdr"}, "action": "wake", "textTemplate": "<{{headers.x-foo}}>"})
    gw = gateway_factory(cfg)
    head = (b"POST /hooks/hdr HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hook-secret\r\n"
            b"X-Foo:  foo \t \r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
    out, _ = raw_request(gw.port, head)
    assert out.startswith(b"HTTP/1.1 200"), out
    with db(gw) as conn:
        assert [t for (t,) in conn.execute("SELECT text FROM system_events")] == ["<foo>"]


def test_slow_transform_times_out_while_server_answers(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    gw = gateway_factory(config(tmp_path))
    out: dict[str, Any] = {}

    def slow() -> None:
        with gw.client() as c:
            started = time.monotonic()
            out["resp"] = c.post("/hooks/t", json={"kind": "slow"}, headers=AUTH)
            out["took"] = time.monotonic() - started

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.2)
    with gw.client() as c:
        r = c.post("/hooks/mapped-wake", json={"subject": "quick"}, headers=AUTH)
        assert r.status_code == 200 and thread.is_alive()  # answered while the slow transform still runs
    thread.join()
    exact(out["resp"], 500, '{"ok":false,"error":"hook mapping failed"}')
    assert 0.9 < out["took"] < 2.9  # the 1 s transform timeout, not the transform's own 3 s
    assert gw.wait_log("hook.mapping_failed")["error_type"] == "TimeoutError"


def test_transform_reloads_after_edit(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    gw = gateway_factory(config(tmp_path))
    f = tmp_path / "hooks" / "transforms" / "t.py"
    with gw.client() as c:
        r = c.post("/hooks/t?q=1&q=2", json={}, headers={**AUTH, "X-Foo": "a"})
        assert r.status_code == 200
        f.write_text(TRANSFORM.replace('"v1 "', '"v2 "'))
        r2 = c.post("/hooks/t?q=3", json={}, headers=AUTH)
        assert r2.status_code == 200
        f.unlink()
        exact(c.post("/hooks/t", json={}, headers=AUTH), 500, '{"ok":false,"error":"hook mapping failed"}')
    with db(gw) as conn:
        messages = {run_id: json.loads(raw)["message"] for run_id, raw in conn.execute(
            "SELECT run_id, inputs FROM runs WHERE kind = 'hook'")}
    assert messages[r.json()["runId"]] == "v1 a 2"
    assert messages[r2.json()["runId"]] == "v2  3"


def test_transform_failures_of_hookgates_own_making_log_their_text(gateway_factory: GatewayFactory,
                                                                   tmp_path: Path) -> None:
    gw = gateway_factory(config(tmp_path))
    with gw.client() as c:
        # hooks.md §6.4: no callable → 500, logged as "hook transform module must export a function"
        exact(c.post("/hooks/nofn", json={}, headers=AUTH), 500, '{"ok":false,"error":"hook mapping failed"}')
        failed = gw.wait_log("hook.mapping_failed")
        assert (failed["mapping"], failed["error_type"]) == ("nofn", "TransformExportError")
        assert failed["error"] == "hook transform module must export a function"
        # §6.5: a present "kind" must be "wake" or "agent" — null is not "absent"
        exact(c.post("/hooks/t", json={"kind": "null-kind"}, headers=AUTH), 500,
              '{"ok":false,"error":"hook mapping failed"}')
    kinds = [e for e in gw.flushed_log_events() if e.get("event") == "hook.mapping_failed" and e.get("mapping") == "t"]
    assert kinds and kinds[-1]["error"] == "transform returned an invalid kind"
    with db(gw) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
