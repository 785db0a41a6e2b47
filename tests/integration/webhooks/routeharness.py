"""Surface A helpers for integration tests: the route config of webhooks.md §9 and action calls."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import httpx
from gateway import RunningGateway

SECRET = "s3cret"
BEARER = {"Authorization": f"Bearer {SECRET}"}
CI_PATH = "/plugins/webhooks/ci"
NOT_FOUND = b'{"ok":false,"error":"Not Found"}'


def dumps(value: Any) -> str:
    """The wire form of README §5: compact, UTF-8, keys in the given order."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def ci_route(**overrides: Any) -> dict[str, Any]:
    route: dict[str, Any] = {"path": CI_PATH, "sessionKey": "agent:ops:main", "secret": SECRET,
                             "controllerId": "ci/nightly"}
    route.update(overrides)
    return route


def webhooks_config(routes: dict[str, Any] | None = None, *, limits: dict[str, Any] | None = None,
                    **extra: Any) -> dict[str, Any]:
    """Route ``ci`` of webhooks.md §9 (or ``routes``), agents ``main`` (default) and ``ops``."""
    plugin: dict[str, Any] = {"routes": routes if routes is not None else {"ci": ci_route()}}
    if limits is not None:
        plugin["limits"] = limits
    cfg: dict[str, Any] = {
        "storage": {"sqlite": {"path": "hookgate.db"}},
        "agents": {"list": [{"id": "main", "default": True}, {"id": "ops"}]},
        "plugins": {"entries": {"webhooks": {"config": plugin}}},
    }
    cfg.update(extra)
    return cfg


def exact(resp: httpx.Response, status: int, body: str | bytes) -> None:
    assert resp.status_code == status, resp.text
    expected = body.encode() if isinstance(body, str) else body
    assert resp.content == expected, resp.text
    assert resp.headers["content-type"] == "application/json; charset=utf-8"
    common_headers(resp.headers)


def common_headers(headers: Any) -> None:
    """README §5: on every response."""
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-store"
    assert headers["x-request-id"]


def now_ms() -> int:
    return int(time.time() * 1000)


class Api:
    """One route seen by one client: ``api.call("create_flow", goal=…)``."""

    def __init__(self, client: httpx.Client, path: str = CI_PATH, headers: dict[str, str] | None = None) -> None:
        self.client = client
        self.path = path
        self.headers = headers if headers is not None else dict(BEARER)

    def post(self, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        content = body if isinstance(body, bytes | str) else dumps(body)
        merged = {"Content-Type": "application/json", **self.headers, **(headers or {})}
        return self.client.post(self.path, content=content, headers=merged)

    def call(self, action: str, headers: dict[str, str] | None = None, **fields: Any) -> httpx.Response:
        return self.post({"action": action, **fields}, headers)

    def result(self, action: str, expect: int = 200, **fields: Any) -> Any:
        r = self.call(action, **fields)
        assert r.status_code == expect, r.text
        return r.json()["result"]

    def create(self, goal: str = "goal", **fields: Any) -> dict[str, Any]:
        flow: dict[str, Any] = self.result("create_flow", goal=goal, **fields)["flow"]
        return flow

    def run_task(self, flow_id: str, expect: int = 200, **fields: Any) -> Any:
        fields.setdefault("runtime", "subagent")
        fields.setdefault("task", "do it")
        return self.result("run_task", expect, flowId=flow_id, **fields)

    def flow(self, flow_id: str) -> Any:
        return self.result("get_flow", flowId=flow_id)["flow"]


@contextlib.contextmanager
def db(gw: RunningGateway) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(gw.workdir / "hookgate.db")
    try:
        yield conn
    finally:
        conn.close()


def system_events(gw: RunningGateway, needle: str) -> list[tuple[str, str]]:
    """(session key, text) of the queued system events whose text contains ``needle``, oldest first.

    A terminal notification also wakes the agent's heartbeat, which may consume the events right
    away; so a matching event must be ``pending`` or (later) ``consumed``, never ``dropped``.
    """
    with db(gw) as conn:
        rows = list(conn.execute("SELECT session_key, text, status FROM system_events WHERE instr(text, ?) > 0 "
                                 "ORDER BY seq", (needle,)))
    assert {status for _, _, status in rows} <= {"pending", "consumed"}, rows
    return [(key, text) for key, text, _ in rows]


def heartbeat_requests(gw: RunningGateway) -> list[tuple[str, str]]:
    with db(gw) as conn:
        return list(conn.execute("SELECT agent_id, reason FROM heartbeat_requests ORDER BY id"))


def raw_post(path: str, body: bytes, *, headers: dict[str, str] | None = None, content_length: int | None = None,
             close: bool = True) -> bytes:
    """An HTTP/1.1 POST head (and ``body``) as raw bytes."""
    lines = [f"POST {path} HTTP/1.1", "Host: x", "Content-Type: application/json", f"Authorization: Bearer {SECRET}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(body) if content_length is None else content_length}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def split_response(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), value.strip())
    return status, headers, body


@contextlib.contextmanager
def serving(workdir: Any, config: dict[str, Any], env: dict[str, str] | None = None) -> Iterator[RunningGateway]:
    """A gateway for a whole module (``workdir`` from ``tmp_path_factory``)."""
    gw = RunningGateway(workdir, config, env).start()
    try:
        yield gw
    finally:
        gw.stop()


def metric(gw: RunningGateway, line_start: str) -> float:
    """The value of the first ``/metrics`` sample whose line starts with ``line_start`` (0 when absent)."""
    with gw.client() as c:
        text = c.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
