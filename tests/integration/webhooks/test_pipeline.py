"""webhooks.md §2.1 (request pipeline, steps 1–9 in order), §1.4 (path matching) and §2.2 (limits)
against a real server. Surface A pipeline rejections never name the route (README §5)."""

from __future__ import annotations

import concurrent.futures
import socket
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway import GatewayFactory, RunningGateway, raw_request
from routeharness import (
    BEARER,
    CI_PATH,
    NOT_FOUND,
    SECRET,
    Api,
    ci_route,
    common_headers,
    dumps,
    exact,
    metric,
    raw_post,
    serving,
    split_response,
    webhooks_config,
)

METHOD = '{"ok":false,"code":"method_not_allowed","error":"Method Not Allowed"}'
RATE = '{"ok":false,"code":"rate_limited","error":"Too Many Requests"}'
MEDIA = '{"ok":false,"code":"unsupported_media_type","error":"Unsupported Media Type"}'
UNAUTHORIZED = '{"ok":false,"code":"unauthorized","error":"unauthorized"}'
TOO_LARGE = b'{"ok":false,"code":"payload_too_large","error":"Payload too large"}'
TIMEOUT = b'{"ok":false,"code":"request_timeout","error":"Request body timeout"}'
BAD_BODY = '{"ok":false,"code":"invalid_request_body","error":"invalid request body"}'
CREATE = {"action": "create_flow", "goal": "g"}
ACTION_CHOICES = (
    "'create_flow' | 'get_flow' | 'list_flows' | 'find_latest_flow' | 'resolve_flow' | 'get_task_summary' | "
    "'set_waiting' | 'resume_flow' | 'finish_flow' | 'fail_flow' | 'request_cancel' | 'cancel_flow' | 'run_task' | "
    "'get_task' | 'list_tasks' | 'update_task'"
)


def invalid(error: str) -> str:
    return dumps({"ok": False, "code": "invalid_request", "error": error})


def pipeline_config() -> dict[str, Any]:
    routes = {
        "ci": ci_route(),
        # the first 3 requests per raw path and client IP in a 60 s window
        "rl": ci_route(path="/plugins/webhooks/rl", limits={"rateLimit": {"windowSeconds": 60, "maxRequests": 3}}),
        "rl1": ci_route(path="/plugins/webhooks/rl1", limits={"rateLimit": {"windowSeconds": 1, "maxRequests": 1}}),
        "small": ci_route(path="/plugins/webhooks/small",
                          limits={"maxBodyBytes": 64, "bodyTimeoutSeconds": 1}),
        "inf": ci_route(path="/plugins/webhooks/inf", limits={"maxInFlight": 2, "maxBodyBytes": 64}),
        "off": ci_route(path="/plugins/webhooks/off", enabled=False),
        "utf": ci_route(path="/plugins/webhooks/utf", secret="pässwörd €"),
        "fffd": ci_route(path="/plugins/webhooks/fffd", secret="tok\ufffden"),
        "umlaut": ci_route(path="/plugins/webhooks/straße"),  # ß: Unicode case folding makes it "ss"
        " dflt ": {"sessionKey": "agent:ops:main", "secret": SECRET},  # id trimmed, default path and controller
    }
    return webhooks_config(routes, limits={"rateLimit": {"windowSeconds": 60, "maxRequests": 1000}},
                           gateway={"trustedProxies": ["127.0.0.0/8"]})


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    with serving(tmp_path_factory.mktemp("pipeline"), pipeline_config()) as running:
        yield running


def post(c: httpx.Client, path: str, body: Any = CREATE, headers: dict[str, str] | None = None,
         content_type: str | None = "application/json") -> httpx.Response:
    sent = {**BEARER, **(headers or {})}
    if content_type is not None:
        sent["Content-Type"] = content_type
    content = body if isinstance(body, bytes | str) else dumps(body)
    return c.post(path, content=content, headers=sent)


def pipeline_reject(r: httpx.Response, status: int, body: str | bytes) -> None:
    exact(r, status, body)
    assert b'"routeId"' not in r.content and b'"ci"' not in r.content


# --- step 1: route lookup (§1.4) ------------------------------------------------------------------


def test_unknown_disabled_and_near_paths_get_the_global_404(gw: RunningGateway) -> None:
    with gw.client() as c:
        for path in ("/plugins/webhooks/nope", "/plugins/webhooks/off", "/plugins/webhooks/ci/x",
                     "/plugins/webhooks/ci//", "/plugins/webhooks/%63i", "/plugins/webhooks", "/plugins/webhooks/c"):
            exact(post(c, path), 404, NOT_FOUND)
            exact(c.get(path), 404, NOT_FOUND)
        # no route: the content type and the auth never matter
        exact(post(c, "/plugins/webhooks/nope", content_type="text/plain", headers={"Authorization": "x"}), 404,
              NOT_FOUND)


@pytest.mark.parametrize("path", ["/plugins/webhooks/ci", "/plugins/webhooks/ci/", "/plugins/webhooks/CI",
                                  "/Plugins/Webhooks/Ci/", "/plugins/webhooks/./ci", "/plugins/x/../webhooks/ci",
                                  "/plugins/webhooks/ci?x=1&secret=no"])
def test_route_matching_ignores_case_one_trailing_slash_dot_segments_and_query(gw: RunningGateway, path: str) -> None:
    with gw.client() as c:
        r = post(c, path)
    assert r.status_code == 200, r.text
    assert r.json()["routeId"] == "ci"


def test_route_matching_folds_only_ascii_case(gw: RunningGateway) -> None:
    """§1.4 "ignoring ASCII case", no decoding: ß is not "ss" (``str.casefold`` would make it so), and
    a percent-escape is not the character it encodes. (A raw non-ASCII byte in the target is refused
    by the HTTP parser: the JSON 400 of README §5.)"""
    body = dumps(CREATE).encode()
    for target, status in ((b"/plugins/webhooks/strasse", 404), (b"/plugins/webhooks/STRASSE", 404),
                           (b"/plugins/webhooks/stra%C3%9Fe", 404), (b"/plugins/webhooks/stra\xc3\x9fe", 400)):
        raw = raw_post(CI_PATH, body).replace(CI_PATH.encode(), target, 1)
        got, _, data = split_response(raw_request(gw.port, raw)[0])
        assert got == status, (target, data)
        assert data == (NOT_FOUND if status == 404 else b'{"ok":false,"error":"Bad Request"}')


def test_default_path_and_controller(gw: RunningGateway) -> None:
    with gw.client() as c:
        r = post(c, "/plugins/webhooks/dflt")
    assert r.status_code == 200, r.text
    assert r.json()["routeId"] == "dflt" and r.json()["result"]["flow"]["controllerId"] == "webhooks/dflt"


def test_plugin_disabled_has_no_routes(gateway_factory: GatewayFactory) -> None:
    cfg = webhooks_config()
    cfg["plugins"]["entries"]["webhooks"]["enabled"] = False
    gw = gateway_factory(cfg)
    with gw.client() as c:
        exact(post(c, CI_PATH), 404, NOT_FOUND)
        exact(c.get(CI_PATH), 404, NOT_FOUND)


# --- step 2: method -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_method_not_allowed(gw: RunningGateway, method: str) -> None:
    with gw.client() as c:
        r = c.request(method, CI_PATH, headers={"Authorization": "Bearer wrong", "Content-Type": "text/plain"})
    pipeline_reject(r, 405, METHOD)
    assert r.headers["allow"] == "POST"


def test_head_is_405_without_body(gw: RunningGateway) -> None:
    with gw.client() as c:
        r = c.head(CI_PATH + "/")
    assert r.status_code == 405 and r.content == b"" and r.headers["allow"] == "POST"


def test_method_check_comes_before_the_rate_limit(gw: RunningGateway) -> None:
    with gw.client(source="127.0.0.40") as c:
        for _ in range(5):
            assert c.get("/plugins/webhooks/rl").status_code == 405
        for _ in range(3):
            assert post(c, "/plugins/webhooks/rl").status_code == 200


# --- step 3: fixed-window rate limit --------------------------------------------------------------


def test_rate_limit_counts_every_hit_per_raw_path_and_client_ip(gw: RunningGateway) -> None:
    with gw.client(source="127.0.0.41") as c, gw.client(source="127.0.0.42") as other:
        # rejected hits count: a 401 and a 415 use the budget like a 200
        assert post(c, "/plugins/webhooks/rl", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert post(c, "/plugins/webhooks/rl", content_type="text/plain").status_code == 415
        assert post(c, "/plugins/webhooks/rl").status_code == 200
        for _ in range(2):
            r = post(c, "/plugins/webhooks/rl")  # the right secret does not help
            pipeline_reject(r, 429, RATE)
            assert 1 <= int(r.headers["retry-after"]) <= 60
        # the raw path is the key: trailing slash and case are other buckets of the same route
        for path in ("/plugins/webhooks/rl/", "/plugins/webhooks/RL"):
            for _ in range(3):
                r = post(c, path)
                assert r.status_code == 200 and r.json()["routeId"] == "rl"
            assert post(c, path).status_code == 429
        # another client IP has its own bucket
        for _ in range(3):
            assert post(other, "/plugins/webhooks/rl").status_code == 200
        assert post(other, "/plugins/webhooks/rl").status_code == 429
        # the rate limit comes before the media type, the auth and the body
        r = post(c, "/plugins/webhooks/rl", b"{", content_type="text/plain", headers={"Authorization": "Bearer x"})
        pipeline_reject(r, 429, RATE)


def test_rate_limit_window_reopens_and_retry_after_is_at_least_one(gw: RunningGateway) -> None:
    with gw.client(source="127.0.0.43") as c:
        assert post(c, "/plugins/webhooks/rl1").status_code == 200
        r = post(c, "/plugins/webhooks/rl1")
        pipeline_reject(r, 429, RATE)
        assert r.headers["retry-after"] == "1"
        time.sleep(1.05)
        assert post(c, "/plugins/webhooks/rl1").status_code == 200


# --- step 4: media type ---------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx",
                                          "application/json-patch", "json", ""])
def test_unsupported_media_type(gw: RunningGateway, content_type: str | None) -> None:
    with gw.client() as c:
        # before auth: a wrong secret still gets 415
        r = post(c, CI_PATH, content_type=content_type, headers={"Authorization": "Bearer wrong"})
    pipeline_reject(r, 415, MEDIA)


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                                          "application/problem+json", "application/vnd.acme.v1+json ; x=y",
                                          "application/json ;charset=UTF-8"])
def test_accepted_media_types(gw: RunningGateway, content_type: str) -> None:
    with gw.client() as c:
        assert post(c, CI_PATH, content_type=content_type).status_code == 200


# --- step 5: in-flight limit ----------------------------------------------------------------------


def hold(port: int, path: str, source: str = "127.0.0.1", headers: dict[str, str] | None = None) -> socket.socket:
    """A request whose body is not finished: the server holds its in-flight slot."""
    body = dumps(CREATE).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    sock.sendall(raw_post(path, body[:5], content_length=len(body), headers=headers))
    return sock


def wait_held(c: httpx.Client, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """The first 429 once the server has taken the held slots (a busy machine may need a moment)."""
    deadline = time.monotonic() + 5
    while True:
        # a wrong secret: a probe that gets through changes nothing
        r = post(c, path, headers={"Authorization": "Bearer wrong", **(headers or {})})
        if r.status_code == 429 or time.monotonic() > deadline:
            return r
        assert r.status_code == 401, r.text
        time.sleep(0.05)


def finish(sock: socket.socket) -> bytes:
    try:
        sock.sendall(dumps(CREATE).encode()[5:])
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data
    finally:
        sock.close()


def test_in_flight_limit_per_normalised_path_and_peer(gw: RunningGateway) -> None:
    source = "127.0.0.44"
    label = 'hookgate_rate_limited_total{reason="in_flight",surface="webhooks"}'
    before = metric(gw, label)
    held = [hold(gw.port, "/plugins/webhooks/inf", source), hold(gw.port, "/plugins/webhooks/INF/", source)]
    try:
        with gw.client(source=source) as c, gw.client(source="127.0.0.45") as other:
            probes = before + 1
            pipeline_reject(wait_held(c, "/plugins/webhooks/inf"), 429, RATE)
            for path in ("/plugins/webhooks/inf", "/plugins/webhooks/inf/"):
                # the slot check comes after the media type and before the auth
                r = post(c, path, headers={"Authorization": "Bearer wrong"})
                pipeline_reject(r, 429, RATE)
                assert r.headers["retry-after"] == "1"
            assert post(c, "/plugins/webhooks/inf", content_type="text/plain").status_code == 415
            assert metric(gw, label) == probes + 2
            assert post(other, "/plugins/webhooks/inf").status_code == 200
            assert post(c, CI_PATH).status_code == 200  # another route
            answers = [finish(sock) for sock in held]
            held = []
            for data in answers:
                status, _, body = split_response(data)
                assert status == 200, body
            # slots are released once the responses are written (also after 401, 400 and 413)
            for _ in range(3):
                assert post(c, "/plugins/webhooks/inf", headers={"Authorization": "Bearer wrong"}).status_code == 401
                assert post(c, "/plugins/webhooks/inf", b"{").status_code == 400
                assert post(c, "/plugins/webhooks/inf", b"x" * 65).status_code == 413
                assert post(c, "/plugins/webhooks/inf").status_code == 200
    finally:
        for sock in held:
            sock.close()


def test_in_flight_slot_released_when_client_goes_away(gw: RunningGateway) -> None:
    source = "127.0.0.46"
    with gw.client(source=source) as c:
        held = [hold(gw.port, "/plugins/webhooks/inf", source) for _ in range(2)]
        assert wait_held(c, "/plugins/webhooks/inf").status_code == 429
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 3
        while post(c, "/plugins/webhooks/inf").status_code == 429 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert post(c, "/plugins/webhooks/inf").status_code == 200
        assert post(c, "/plugins/webhooks/inf").status_code == 200


def test_rate_limit_uses_the_forwarded_client_ip_and_in_flight_the_peer(gw: RunningGateway) -> None:
    peer = "127.0.0.50"
    with gw.client(source=peer) as c:
        for _ in range(3):
            assert post(c, "/plugins/webhooks/rl", headers={"X-Forwarded-For": "198.51.100.7"}).status_code == 200
        assert post(c, "/plugins/webhooks/rl", headers={"X-Forwarded-For": "198.51.100.7"}).status_code == 429
        assert post(c, "/plugins/webhooks/rl", headers={"X-Forwarded-For": "198.51.100.8"}).status_code == 200
        held = [hold(gw.port, "/plugins/webhooks/inf", peer, {"X-Forwarded-For": f"198.51.100.{i}"}) for i in (1, 2)]
        try:
            r = wait_held(c, "/plugins/webhooks/inf", {"X-Forwarded-For": "198.51.100.3"})
            pipeline_reject(r, 429, RATE)
            assert r.headers["retry-after"] == "1"
        finally:
            for sock in held:
                sock.close()


# --- step 6: authentication (legacy secret) -------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Bearer {SECRET}x"},
    {"Authorization": f"Bearer {SECRET[:-1]}"},
    {"Authorization": "Bearer wrong", "x-hookgate-webhook-secret": SECRET},
    {"Authorization": "Bearer wrong", "x-openclaw-webhook-secret": SECRET},
    {"Authorization": SECRET},
    {"Authorization": f"Basic {SECRET}"},
    {"x-hookgate-webhook-secret": "wrong"},
    {"x-hookgate-token": SECRET},
])
def test_unauthorized(gw: RunningGateway, headers: dict[str, str]) -> None:
    with gw.client() as c:
        r = c.post(CI_PATH, content=dumps(CREATE), headers={"Content-Type": "application/json", **headers})
    pipeline_reject(r, 401, UNAUTHORIZED)


@pytest.mark.parametrize("headers", [
    {"Authorization": f"Bearer {SECRET}"},
    {"Authorization": f"bearer   {SECRET}"},
    {"Authorization": f"BEARER {SECRET}"},
    {"x-hookgate-webhook-secret": SECRET},
    {"x-openclaw-webhook-secret": SECRET},
    {"Authorization": "Basic d3Jvbmc=", "x-hookgate-webhook-secret": SECRET},
    {"x-hookgate-webhook-secret": "", "x-openclaw-webhook-secret": SECRET},
])
def test_authorized(gw: RunningGateway, headers: dict[str, str]) -> None:
    with gw.client() as c:
        r = c.post(CI_PATH, content=dumps(CREATE), headers={"Content-Type": "application/json", **headers})
    assert r.status_code == 200, r.text


def test_secret_in_query_or_body_is_never_read(gw: RunningGateway) -> None:
    with gw.client() as c:
        r = c.post(CI_PATH + f"?secret={SECRET}&token={SECRET}", content=dumps({**CREATE, "secret": SECRET}),
                   headers={"Content-Type": "application/json"})
    pipeline_reject(r, 401, UNAUTHORIZED)


def test_empty_bearer_falls_back_to_the_secret_header(gw: RunningGateway) -> None:
    body = dumps(CREATE).encode()
    raw = raw_post(CI_PATH, body).replace(f"Authorization: Bearer {SECRET}".encode(),
                                          f"Authorization: Bearer \r\nx-hookgate-webhook-secret: {SECRET}".encode())
    status, _, data = split_response(raw_request(gw.port, raw)[0])
    assert status == 200, data


def test_non_ascii_secret_is_compared_as_utf8_bytes(gw: RunningGateway) -> None:
    body = dumps(CREATE).encode()
    for presented, status in (("pässwörd €".encode(), 200), ("pässwörd €".encode("latin-1", "replace"), 401),
                              ("pässwörd".encode(), 401), ("PÄSSWÖRD €".encode(), 401)):
        for name in (b"Authorization: Bearer ", b"x-hookgate-webhook-secret: "):
            raw = raw_post("/plugins/webhooks/utf", body).replace(f"Authorization: Bearer {SECRET}".encode(),
                                                                   name + presented)
            got, _, data = split_response(raw_request(gw.port, raw)[0])
            assert got == status, (presented, name, data)


def test_secret_is_compared_with_the_bytes_sent(gw: RunningGateway) -> None:
    """Bytes that are not UTF-8 are not turned into U+FFFD before the comparison: ``tok\\xffen`` is not
    the secret ``tok\ufffden`` (whose UTF-8 is ``tok\\xef\\xbf\\xbden``)."""
    body = dumps(CREATE).encode()
    for presented, status in ((b"tok\xffen", 401), ("tok\ufffden".encode(), 200)):
        for name in (b"Authorization: Bearer ", b"x-hookgate-webhook-secret: "):
            raw = raw_post("/plugins/webhooks/fffd", body).replace(f"Authorization: Bearer {SECRET}".encode(),
                                                                    name + presented)
            got, _, data = split_response(raw_request(gw.port, raw)[0])
            assert got == status, (presented, name, data)


def test_auth_comes_before_the_body(gw: RunningGateway) -> None:
    with gw.client() as c:
        r = post(c, "/plugins/webhooks/small", b"x" * 100, headers={"Authorization": "Bearer wrong"})
        pipeline_reject(r, 401, UNAUTHORIZED)
        pipeline_reject(post(c, CI_PATH, b"{", headers={"Authorization": "Bearer wrong"}), 401, UNAUTHORIZED)


def test_openclaw_secret_header_ignored_with_compat_off(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(webhooks_config(gateway={"compat": {"acceptOpenclawHeaders": False}}))
    with gw.client() as c:
        api = Api(c, headers={"x-openclaw-webhook-secret": SECRET})
        exact(api.post(CREATE), 401, UNAUTHORIZED)
        api.headers = {"x-hookgate-webhook-secret": SECRET}
        assert api.post(CREATE).status_code == 200
        # the idempotency alias is ignored too: two flows are created
        api.headers = dict(BEARER)
        first = api.post(CREATE, {"x-openclaw-idempotency-key": "k"})
        second = api.post(CREATE, {"x-openclaw-idempotency-key": "k"})
        assert first.status_code == second.status_code == 200
        assert "idempotent-replayed" not in second.headers and first.content != second.content


# --- step 7: body size and timeout ----------------------------------------------------------------


def test_declared_body_over_the_limit_is_413_then_close(gw: RunningGateway) -> None:
    data, closed = raw_request(gw.port, raw_post("/plugins/webhooks/small", b"", content_length=65, close=False))
    status, headers, body = split_response(data)
    assert status == 413 and body == TOO_LARGE
    assert headers["connection"] == "close" and closed
    common_headers(headers)
    assert headers["content-type"] == "application/json; charset=utf-8"


def test_chunked_body_over_the_limit_is_413_then_close(gw: RunningGateway) -> None:
    head = raw_post("/plugins/webhooks/small", b"", close=False).replace(b"Content-Length: 0",
                                                                          b"Transfer-Encoding: chunked")
    chunks = b"".join(b"20\r\n" + b" " * 32 + b"\r\n" for _ in range(3)) + b"0\r\n\r\n"
    data, closed = raw_request(gw.port, head + chunks)
    status, headers, body = split_response(data)
    assert status == 413 and body == TOO_LARGE and headers["connection"] == "close" and closed


def test_body_of_exactly_the_limit_is_accepted(gw: RunningGateway) -> None:
    body = dumps({"action": "create_flow", "goal": "g" * 20}).encode()
    body = body[:-1] + b" " * (64 - len(body)) + b"}"
    assert len(body) == 64
    with gw.client() as c:
        r = post(c, "/plugins/webhooks/small", body)
        assert r.status_code == 200, r.text
        pipeline_reject(post(c, "/plugins/webhooks/small", body + b" "), 413, TOO_LARGE)
        assert r.json()["routeId"] == "small"
    # chunked, exactly at the limit
    head = raw_post("/plugins/webhooks/small", b"").replace(b"Content-Length: 0", b"Transfer-Encoding: chunked")
    data, _ = raw_request(gw.port, head + b"20\r\n" + body[:32] + b"\r\n20\r\n" + body[32:] + b"\r\n0\r\n\r\n")
    assert split_response(data)[0] == 200


@pytest.mark.slow
def test_slow_body_is_408_then_close(gw: RunningGateway) -> None:
    started = time.monotonic()
    data, closed = raw_request(gw.port, raw_post("/plugins/webhooks/small", b'{"act', content_length=30, close=False),
                               read_timeout=5)
    status, headers, body = split_response(data)
    assert status == 408 and body == TIMEOUT
    assert headers["connection"] == "close" and closed
    common_headers(headers)
    assert 0.9 <= time.monotonic() - started < 5


@pytest.mark.slow
def test_body_timeout_is_for_the_whole_body(gw: RunningGateway) -> None:
    """A client that trickles bytes (each within the timeout) still gets 408 after the whole-body timeout."""
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    try:
        sock.sendall(raw_post("/plugins/webhooks/small", b"{", content_length=40, close=False))
        deadline = time.monotonic() + 3
        data = b""
        sock.settimeout(0.25)
        while time.monotonic() < deadline and not data:
            try:
                sock.sendall(b" ")
            except OSError:
                pass
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
    finally:
        sock.close()
    assert split_response(data)[0] == 408


# --- step 8: body decoding ------------------------------------------------------------------------


@pytest.mark.parametrize("body", [
    b"",
    b"   \r\n",
    b"{",
    b'{"action":"create_flow","goal":"g"} x',
    b"{'action':'create_flow'}",
    b'{"action":"create_flow","goal":"\xff"}',
    b'{"action":"create_flow","goal":"\xed\xa0\x80"}',
    b'{"action":"create_flow","goal":"g","stateJson":9223372036854775808}',
    b'{"action":"create_flow","goal":"g","stateJson":[-9223372036854775809]}',
    b'{"action":"create_flow","goal":"g","stateJson":{"a":{"b":123456789012345678901234567890}}}',
    b'{"action":"create_flow","goal":"g","stateJson":NaN}',
    # deeper than jsonbody.MAX_DEPTH (128 levels, the body object being the first): RFC 8259 §9 allows a limit
    b'{"action":"create_flow","goal":"g","stateJson":' + b"[" * 128 + b"1" + b"]" * 128 + b"}",
    b'{"action":"create_flow","goal":"g","stateJson":' + b"[" * 900 + b"1234567890123456789" + b"]" * 900 + b"}",
    b'{"action":"create_flow","goal":"g","stateJson":' + b"[" * 900 + b"9223372036854775808" + b"]" * 900 + b"}",
    b"[" * 5000 + b"]" * 5000,
])
def test_invalid_request_body(gw: RunningGateway, body: bytes) -> None:
    with gw.client() as c:
        pipeline_reject(post(c, CI_PATH, body), 400, BAD_BODY)


def test_int64_bounds_and_large_floats_are_valid_json(gw: RunningGateway) -> None:
    state = {"max": 9223372036854775807, "min": -9223372036854775808, "s": "ü €", "f": 1e300}
    with gw.client() as c:
        r = post(c, CI_PATH, {"action": "create_flow", "goal": "g", "stateJson": state})
    assert r.status_code == 200, r.text
    assert '"stateJson":{"max":9223372036854775807,"min":-9223372036854775808,"s":"ü €","f":'.encode() in r.content
    assert r.json()["result"]["flow"]["stateJson"]["f"] == 1e300


def test_a_lone_surrogate_escape_is_stored_as_a_replacement_character(gw: RunningGateway) -> None:
    """RFC 8259 §8.2: an escaped unpaired surrogate is valid JSON (JavaScript writes one for a string
    cut inside a pair); the flow keeps U+FFFD in its place and reads back as stored. An encoded one
    (the bytes ED A0 80) is invalid UTF-8 and stays a 400 (test_invalid_request_body)."""
    with gw.client() as c:
        r = post(c, CI_PATH, b'{"action":"create_flow","goal":"g\\ud83d","stateJson":{"k\\udc00":"\\ud83d\\ude00"}}')
        assert r.status_code == 200, r.text
        flow = r.json()["result"]["flow"]
        got = post(c, CI_PATH, {"action": "get_flow", "flowId": flow["flowId"]}).json()["result"]["flow"]
    assert flow["goal"] == got["goal"] == "g\ufffd"
    assert flow["stateJson"] == got["stateJson"] == {"k\ufffd": "\U0001f600"}


def test_nesting_up_to_the_limit_is_valid_and_reads_back(gw: RunningGateway) -> None:
    """128 levels in all (the body object and 127 arrays) are accepted, stored and read back whole."""
    state = 9223372036854775807
    for _ in range(127):
        state = [state]
    with gw.client() as c:
        r = post(c, CI_PATH, {"action": "create_flow", "goal": "g", "stateJson": state})
        assert r.status_code == 200, r.text
        flow_id = r.json()["result"]["flow"]["flowId"]
        got = post(c, CI_PATH, {"action": "get_flow", "flowId": flow_id})
    assert got.status_code == 200 and got.json()["result"]["flow"]["stateJson"] == state


# --- step 9: strict action schema -----------------------------------------------------------------


SCHEMA_CASES: list[tuple[Any, str]] = [
    ([], "Invalid input: expected object, received array"),
    ('"x"', "Invalid input: expected object, received string"),
    (None, "Invalid input: expected object, received null"),
    (1, "Invalid input: expected object, received number"),
    ({}, f"action: Invalid discriminator value. Expected {ACTION_CHOICES}"),
    ({"action": "dispatch"}, f"action: Invalid discriminator value. Expected {ACTION_CHOICES}"),
    ({"action": 1}, f"action: Invalid discriminator value. Expected {ACTION_CHOICES}"),
    ({"action": "create_flow"}, "goal: Invalid input: expected string, received undefined"),
    ({"action": "create_flow", "goal": 5}, "goal: Invalid input: expected string, received number"),
    ({"action": "create_flow", "goal": " \t "}, "goal: Too small: expected string to have >=1 characters"),
    ({"action": "create_flow", "goal": "g", "status": "done"},
     'status: Invalid option: expected one of "queued"|"running"|"waiting"|"blocked"'),
    ({"action": "create_flow", "goal": "g", "notifyPolicy": None},
     'notifyPolicy: Invalid option: expected one of "done_only"|"state_changes"|"silent"'),
    ({"action": "create_flow", "goal": "g", "extra": 1}, 'Unrecognized key: "extra"'),
    ({"action": "create_flow", "goal": "g", "b": 1, "a": 2}, 'Unrecognized keys: "b", "a"'),
    ({"action": "get_flow"}, "flowId: Invalid input: expected string, received undefined"),
    ({"action": "list_flows", "flowId": "x"}, 'Unrecognized key: "flowId"'),
    ({"action": "set_waiting", "flowId": "f", "expectedRevision": 1.5},
     "expectedRevision: Invalid input: expected int, received number"),
    ({"action": "set_waiting", "flowId": "f", "expectedRevision": -1},
     "expectedRevision: Too small: expected number to be >=0"),
    ({"action": "set_waiting", "flowId": "f", "expectedRevision": 9007199254740992},
     "expectedRevision: Too big: expected number to be <=9007199254740991"),
    ({"action": "set_waiting", "flowId": "f", "expectedRevision": "1"},
     "expectedRevision: Invalid input: expected number, received string"),
    ({"action": "set_waiting", "flowId": "f"}, "expectedRevision: Invalid input: expected number, received undefined"),
    ({"action": "cancel_flow", "flowId": "f", "expectedRevision": 0}, 'Unrecognized key: "expectedRevision"'),
    ({"action": "run_task", "flowId": "f", "runtime": "cli", "task": "t"},
     'runtime: Invalid option: expected one of "subagent"|"acp"'),
    ({"action": "run_task", "flowId": "f", "runtime": "acp", "task": "t", "preferMetadata": "yes"},
     "preferMetadata: Invalid input: expected boolean, received string"),
    ({"action": "run_task", "flowId": "f", "runtime": "acp", "task": "t", "startedAt": 1},
     "status: status must be running when startedAt, lastEventAt, or progressSummary is provided"),
    ({"action": "run_task", "flowId": "f", "runtime": "acp", "task": "t", "status": "queued", "progressSummary": None},
     "status: status must be running when startedAt, lastEventAt, or progressSummary is provided"),
    ({"action": "update_task", "taskId": "t", "terminalSummary": "x"},
     "terminalSummary: terminalSummary requires status succeeded, failed, timed_out or cancelled"),
    ({"action": "update_task", "taskId": "t", "status": "succeeded", "error": "x"},
     "error: error requires status failed, timed_out or cancelled"),
]


@pytest.mark.parametrize(("body", "error"), SCHEMA_CASES)
def test_invalid_request(gw: RunningGateway, body: Any, error: str) -> None:
    with gw.client() as c:
        pipeline_reject(post(c, CI_PATH, body), 400, invalid(error))


# --- order of the steps ---------------------------------------------------------------------------


def test_the_first_failing_step_answers(gw: RunningGateway) -> None:
    wrong = {"Authorization": "Bearer wrong"}
    with gw.client() as c:
        pipeline_reject(c.get("/plugins/webhooks/small", headers=wrong), 405, METHOD)  # 2 before 4, 6
        pipeline_reject(post(c, "/plugins/webhooks/small", b"x" * 100, wrong, "text/plain"), 415, MEDIA)  # 4 before 6
        pipeline_reject(post(c, "/plugins/webhooks/small", b"x" * 100, wrong), 401, UNAUTHORIZED)  # 6 before 7
        pipeline_reject(post(c, "/plugins/webhooks/small", b"{" * 65), 413, TOO_LARGE)  # 7 before 8
        pipeline_reject(post(c, CI_PATH, b"[1,"), 400, BAD_BODY)  # 8 before 9
        # 9 before 10: an invalid body with a bad Idempotency-Key is a schema error
        pipeline_reject(post(c, CI_PATH, {"action": "create_flow"}, {"Idempotency-Key": "k" * 300}), 400,
                        invalid("goal: Invalid input: expected string, received undefined"))


def test_pipeline_rejections_are_counted(gw: RunningGateway) -> None:
    label = 'hookgate_rate_limited_total{reason="window",surface="webhooks"}'
    before = metric(gw, label)
    with gw.client(source="127.0.0.47") as c:
        for _ in range(5):
            post(c, "/plugins/webhooks/rl")
    assert metric(gw, label) == before + 2


def test_concurrent_slow_bodies_only_block_their_own_key(gw: RunningGateway) -> None:
    """Held slots for one peer never slow down other peers (the server stays responsive)."""
    held = [hold(gw.port, "/plugins/webhooks/inf", "127.0.0.48") for _ in range(2)]
    try:
        with gw.client(source="127.0.0.48") as c:
            assert wait_held(c, "/plugins/webhooks/inf").status_code == 429
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            def one(i: int) -> int:
                with gw.client(source=f"127.0.1.{i + 1}") as c:
                    return post(c, "/plugins/webhooks/inf").status_code
            assert list(pool.map(one, range(8))) == [200] * 8
    finally:
        for sock in held:
            sock.close()


def test_unexpected_error_gets_the_surface_a_500_body(gateway_factory: GatewayFactory) -> None:
    """webhooks.md §3.3: an unexpected error is 500 internal_error, in Surface A's shape."""
    gw = gateway_factory(webhooks_config())
    # A trigger that aborts every flow insert: SQLite reports it as a constraint failure, an error the
    # gateway has no rule for (unlike a busy or broken store, which is 503).
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        conn.execute("CREATE TRIGGER boom BEFORE INSERT ON flows BEGIN SELECT RAISE(ABORT, 'boom'); END")
    with gw.client() as c:
        r = post(c, CI_PATH)
        exact(r, 500, '{"ok":false,"code":"internal_error","error":"internal error"}')
        assert "boom" not in r.text
        with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
            conn.execute("DROP TRIGGER boom")
            assert conn.execute("SELECT count(*) FROM flows").fetchone()[0] == 0
        assert post(c, CI_PATH).status_code == 200  # the gateway goes on
    assert any(e["event"] == "http.unhandled" for e in gw.log_events())
