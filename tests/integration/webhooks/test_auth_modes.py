"""Route authentication modes (webhooks.md §1.2.1, §2.3, hookgate extension) against a real server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway import RunningGateway, raw_request
from routeharness import dumps, exact, serving, split_response, webhooks_config

UNAUTHORIZED = '{"ok":false,"code":"unauthorized","error":"unauthorized"}'
SW_KEY = b"standard-webhooks-key-bytes-0123"
SW_SECRET = "whsec_" + base64.b64encode(SW_KEY).decode()
OLD_SW_SECRET = "whsec_" + base64.b64encode(b"retired-key").decode()
CREATE = b'{"action":"create_flow","goal":"signed"}'


def route(path: str, auth: dict[str, Any]) -> dict[str, Any]:
    return {"path": path, "sessionKey": "agent:ops:auth", "auth": auth}


def auth_config() -> dict[str, Any]:
    routes = {
        "bearer": route("/a/bearer", {"mode": "bearer", "secret": "tok", "prefix": "Token"}),
        "bearer-default": route("/a/bearer-default", {"secret": "tok"}),
        "rotate": route("/a/rotate", {"mode": "bearer", "secrets": ["old-token", "new-token"]}),
        "header": route("/a/header", {"mode": "header", "header": "X-Api-Key", "prefix": "key=", "secret": "abc"}),
        "header-utf": route("/a/header-utf", {"mode": "header", "header": "X-Key", "prefix": "clé:", "secret": "naïve"}),
        "header-plain": route("/a/header-plain", {"mode": "header", "header": " X-Token ", "secret": "abc"}),
        "hmac": route("/a/hmac", {"mode": "hmac-sha256", "header": "X-Signature", "prefix": "sha256=",
                                  "secret": "hmac-key"}),
        "sw": route("/a/sw", {"mode": "standard-webhooks", "secret": SW_SECRET, "toleranceSeconds": 60}),
        "sw-rotate": route("/a/sw-rotate", {"mode": "standard-webhooks", "secrets": [OLD_SW_SECRET, "plain-secret"]}),
    }
    return webhooks_config(routes, limits={"rateLimit": {"windowSeconds": 60, "maxRequests": 100000},
                                           "maxBodyBytes": 1024})


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    with serving(tmp_path_factory.mktemp("auth"), auth_config()) as running:
        yield running


@pytest.fixture
def c(gw: RunningGateway) -> Iterator[httpx.Client]:
    with gw.client() as client:
        yield client


def post(c: httpx.Client, path: str, headers: dict[str, str], body: bytes = CREATE) -> httpx.Response:
    return c.post(path, content=body, headers={"Content-Type": "application/json", **headers})


def ok(r: httpx.Response, route_id: str) -> None:
    assert r.status_code == 200, r.text
    assert r.json()["routeId"] == route_id


def hex_sig(body: bytes, secret: str = "hmac-key") -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def sw_sig(body: bytes, msg_id: str, ts: int, key: bytes = SW_KEY) -> str:
    signed = f"{msg_id}.{ts}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def sw_headers(body: bytes, msg_id: str = "msg_1", ts: int | None = None, key: bytes = SW_KEY,
               signature: str | None = None) -> dict[str, str]:
    ts = int(time.time()) if ts is None else ts
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts),
            "webhook-signature": signature if signature is not None else sw_sig(body, msg_id, ts, key)}


# --- bearer ---------------------------------------------------------------------------------------


def test_bearer_with_custom_prefix(c: httpx.Client) -> None:
    ok(post(c, "/a/bearer", {"Authorization": "Token tok"}), "bearer")
    ok(post(c, "/a/bearer", {"Authorization": "token   tok"}), "bearer")
    for headers in ({"Authorization": "Bearer tok"}, {"Authorization": "Tokentok"}, {"Authorization": "Token tok2"},
                    {"x-hookgate-webhook-secret": "tok"}, {"Authorization": "Token"}, {}):
        exact(post(c, "/a/bearer", headers), 401, UNAUTHORIZED)


def test_bearer_default_prefix_has_no_header_fallback(c: httpx.Client) -> None:
    ok(post(c, "/a/bearer-default", {"Authorization": "Bearer tok"}), "bearer-default")
    exact(post(c, "/a/bearer-default", {"x-hookgate-webhook-secret": "tok"}), 401, UNAUTHORIZED)


def test_bearer_rotation(c: httpx.Client) -> None:
    for token in ("old-token", "new-token"):
        ok(post(c, "/a/rotate", {"Authorization": f"Bearer {token}"}), "rotate")
    exact(post(c, "/a/rotate", {"Authorization": "Bearer other-token"}), 401, UNAUTHORIZED)


# --- header ---------------------------------------------------------------------------------------


def test_header_with_prefix(c: httpx.Client) -> None:
    ok(post(c, "/a/header", {"X-Api-Key": "key=abc"}), "header")
    ok(post(c, "/a/header", {"x-api-key": "key=  abc"}), "header")
    for headers in ({"X-Api-Key": "abc"}, {"X-Api-Key": "KEY=abc"}, {"X-Api-Key": "key="}, {"X-Api-Key": "key=abcd"},
                    {"Authorization": "Bearer abc"}, {"X-Other": "key=abc"}):
        exact(post(c, "/a/header", headers), 401, UNAUTHORIZED)


def test_header_without_prefix(c: httpx.Client) -> None:
    ok(post(c, "/a/header-plain", {"X-Token": "abc"}), "header-plain")
    for headers in ({"X-Token": "abcd"}, {"X-Token": ""}, {"Authorization": "Bearer abc"}):
        exact(post(c, "/a/header-plain", headers), 401, UNAUTHORIZED)


def test_header_values_are_read_as_utf8(gw: RunningGateway) -> None:
    for value, status in (("clé:naïve", 200), ("clé: naïve ", 200), ("cle:naïve", 401), ("clé:naive", 401)):
        raw = (b"POST /a/header-utf HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Key: "
               + value.encode() + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(CREATE) + CREATE)
        assert split_response(raw_request(gw.port, raw)[0])[0] == status, value


def test_standard_webhooks_signs_the_raw_webhook_id_bytes(gw: RunningGateway) -> None:
    msg_id = "msg_ünïcode"
    headers = sw_headers(CREATE, msg_id)
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    raw = (f"POST /a/sw HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{lines}"
           f"Content-Length: {len(CREATE)}\r\nConnection: close\r\n\r\n").encode() + CREATE
    status, _, body = split_response(raw_request(gw.port, raw)[0])
    assert status == 200, body


# --- hmac-sha256 ----------------------------------------------------------------------------------


def test_hmac_over_the_raw_body_bytes(c: httpx.Client) -> None:
    body = b'{ "action" : "create_flow",\n  "goal":"raw \xc3\xbc"  }\n'
    ok(post(c, "/a/hmac", {"X-Signature": "sha256=" + hex_sig(body)}, body), "hmac")
    ok(post(c, "/a/hmac", {"X-Signature": "sha256=" + hex_sig(body).upper()}, body), "hmac")
    # a signature over the re-serialised (compact) JSON does not match the raw bytes
    compact = dumps({"action": "create_flow", "goal": "raw ü"}).encode()
    exact(post(c, "/a/hmac", {"X-Signature": "sha256=" + hex_sig(compact)}, body), 401, UNAUTHORIZED)
    for headers in ({"X-Signature": hex_sig(body)},  # prefix missing
                    {"X-Signature": "sha256=" + hex_sig(body, "other-key")},
                    {"X-Signature": "sha256=" + hex_sig(body)[:-2]},
                    {"X-Signature": "sha256="},
                    {"Authorization": "Bearer hmac-key"},
                    {}):
        exact(post(c, "/a/hmac", headers, body), 401, UNAUTHORIZED)


def test_hmac_signature_check_sits_between_body_read_and_json(c: httpx.Client) -> None:
    invalid = b"{not json"
    # a signed invalid body reaches step 8; an unsigned one stops at step 7a
    r = post(c, "/a/hmac", {"X-Signature": "sha256=" + hex_sig(invalid)}, invalid)
    exact(r, 400, '{"ok":false,"code":"invalid_request_body","error":"invalid request body"}')
    exact(post(c, "/a/hmac", {"X-Signature": "sha256=00"}, invalid), 401, UNAUTHORIZED)
    # the size limit (step 7) comes before the signature (7a); a missing signature (6) before both
    big = b" " * 1025
    assert post(c, "/a/hmac", {"X-Signature": "sha256=00"}, big).status_code == 413
    exact(post(c, "/a/hmac", {}, big), 401, UNAUTHORIZED)


# --- standard-webhooks ----------------------------------------------------------------------------


def test_standard_webhooks(c: httpx.Client) -> None:
    ok(post(c, "/a/sw", sw_headers(CREATE, "msg_ok")), "sw")
    ts = int(time.time())
    good = sw_sig(CREATE, "msg_multi", ts)
    bad = sw_sig(CREATE, "msg_multi", ts, b"wrong")
    multi = {"webhook-id": "msg_multi", "webhook-timestamp": str(ts), "webhook-signature": f"v1,AAAA {bad} {good}"}
    ok(post(c, "/a/sw", multi), "sw")
    ok(post(c, "/a/sw", sw_headers(CREATE, "msg_old", ts=ts - 55)), "sw")  # inside ±60 s
    ok(post(c, "/a/sw", sw_headers(CREATE, "msg_new", ts=ts + 55)), "sw")


@pytest.mark.parametrize("case", ["stale", "future", "not-int", "no-id", "no-ts", "no-sig", "wrong-key", "v2",
                                  "other-id", "other-body", "b64-of-prefix-only"])
def test_standard_webhooks_rejections(c: httpx.Client, case: str) -> None:
    ts = int(time.time())
    headers = sw_headers(CREATE, "msg_x", ts)
    if case == "stale":
        headers = sw_headers(CREATE, "msg_x", ts - 120)
    elif case == "future":
        headers = sw_headers(CREATE, "msg_x", ts + 120)
    elif case == "not-int":
        headers["webhook-timestamp"] = f"{ts}.5"
    elif case.startswith("no-"):
        del headers[{"no-id": "webhook-id", "no-ts": "webhook-timestamp", "no-sig": "webhook-signature"}[case]]
    elif case == "wrong-key":
        headers = sw_headers(CREATE, "msg_x", ts, b"wrong")
    elif case == "v2":
        headers["webhook-signature"] = headers["webhook-signature"].replace("v1,", "v2,")
    elif case == "other-id":
        headers["webhook-id"] = "msg_y"
    elif case == "other-body":
        headers = sw_headers(CREATE + b" ", "msg_x", ts)
    elif case == "b64-of-prefix-only":  # the key is the decoded rest, not the whole "whsec_…" text
        headers = sw_headers(CREATE, "msg_x", ts, SW_SECRET.encode())
    exact(post(c, "/a/sw", headers), 401, UNAUTHORIZED)


def test_standard_webhooks_rotation_and_plain_secret(c: httpx.Client) -> None:
    # second secret has no whsec_ prefix: its UTF-8 bytes are the key
    ok(post(c, "/a/sw-rotate", sw_headers(CREATE, "rot_1", key=b"plain-secret")), "sw-rotate")
    ok(post(c, "/a/sw-rotate", sw_headers(CREATE, "rot_2", key=b"retired-key")), "sw-rotate")
    exact(post(c, "/a/sw-rotate", sw_headers(CREATE, "rot_3", key=SW_KEY)), 401, UNAUTHORIZED)


def test_webhook_id_doubles_as_idempotency_key(c: httpx.Client) -> None:
    headers = sw_headers(CREATE, "msg_idem")
    first = post(c, "/a/sw", headers)
    assert first.status_code == 200
    again = post(c, "/a/sw", sw_headers(CREATE, "msg_idem"))  # redelivery, fresh timestamp and signature
    exact(again, 200, first.content)
    assert again.headers["idempotent-replayed"] == "true"
    other = b'{"action":"create_flow","goal":"different"}'
    exact(post(c, "/a/sw", sw_headers(other, "msg_idem"), other), 409,
          '{"ok":false,"routeId":"sw","code":"idempotency_key_reused",'
          '"error":"Idempotency-Key was already used with a different request.","result":{}}')
    # an explicit Idempotency-Key wins over webhook-id
    fresh = post(c, "/a/sw", {**sw_headers(CREATE, "msg_idem"), "Idempotency-Key": "explicit"})
    assert fresh.status_code == 200 and "idempotent-replayed" not in fresh.headers
    assert fresh.content != first.content
    # read actions ignore webhook-id too
    read = b'{"action":"list_flows"}'
    assert post(c, "/a/sw", sw_headers(read, "msg_read"), read).status_code == 200
    second = post(c, "/a/sw", sw_headers(read, "msg_read"), read)
    assert second.status_code == 200 and "idempotent-replayed" not in second.headers
