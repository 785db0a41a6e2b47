"""Raw HTTP that client libraries hide, on every surface: an `Upgrade` offer hookgate does not take,
extension methods that are long or arrive in pieces, generated request ids (README §5, §6).

(An extension method pipelined behind another request in the same read still gets a 400: llhttp
refuses it and says nowhere where the request began. Clients do not pipeline such methods.)
"""

from __future__ import annotations

import socket
import sqlite3
import time
from typing import Any

import pytest
from gateway import HOOKS_TOKEN, GatewayFactory, RunningGateway, hooks_config, split_response

ROUTE_SECRET = "s3cret"
WAKE_OK = b'{"ok":true,"mode":"now","eventOutcome":"queued"}'
METHOD_NOT_ALLOWED = b'{"ok":false,"error":"Method Not Allowed"}'
NOT_FOUND = b'{"ok":false,"error":"Not Found"}'


def _config() -> dict[str, Any]:
    cfg = hooks_config(mappings=[{"match": {"path": "mapped-wake"}, "action": "wake",
                                  "textTemplate": "Mapped wake: {{payload.subject}}"}])
    cfg["plugins"] = {"entries": {"webhooks": {"config": {"routes": {
        "ci": {"path": "/plugins/webhooks/ci", "sessionKey": "agent:main:main", "secret": ROUTE_SECRET},
    }}}}}
    return cfg


@pytest.fixture
def gw(gateway_factory: GatewayFactory) -> RunningGateway:
    return gateway_factory(_config())


def _read_responses(sock: socket.socket, count: int, timeout: float = 5.0) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    """Read up to ``count`` complete responses (Content-Length framed) within ``timeout``."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    buf = b""
    out: list[tuple[bytes, dict[bytes, bytes], bytes]] = []
    closed = False
    while len(out) < count and time.monotonic() < deadline:
        while b"\r\n\r\n" in buf:
            status, headers, rest = split_response(buf)
            length = int(headers.get(b"content-length", b"0"))
            if len(rest) < length:
                break
            out.append((status, headers, rest[:length]))
            buf = rest[length:]
            if len(out) == count:
                return out
        if closed:
            break
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            closed = True
            continue
        if not chunk:
            closed = True
        buf += chunk
    return out


def _exchange(port: int, data: bytes, count: int = 1) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        return _read_responses(sock, count)


def _post(path: str, body: bytes, auth: str, extra: bytes = b"") -> bytes:
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + auth.encode() + b"\r\n"
            b"Content-Type: application/json\r\n" + extra +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


# --- an Upgrade header hookgate does not support -------------------------------------------------

UPGRADE = b"Connection: Upgrade\r\nUpgrade: h2c\r\n"


def test_an_ignored_upgrade_header_does_not_drop_the_request_body(gw: RunningGateway) -> None:
    """README §6: "HTTP/1.1 with keep-alive" (hookgate speaks HTTP/1.1 only, so an `Upgrade` offer is
    simply not taken and the request is an ordinary HTTP/1.1 request with its body);
    hooks.md §4/§9 example 1: a wake with text → `200 {"ok":true,"mode":…,"eventOutcome":"queued"}`;
    hooks.md §9 example 13: `POST /hooks/mapped-wake {"subject":"Email"}` → 200 and exactly one event
    `Mapped wake: Email`; webhooks.md §3.3: a create_flow → `200 {"ok":true,"routeId":…}`.

    Before the fix: with `Connection: Upgrade` + `Upgrade: h2c` the body bytes are discarded and the request
    is handled as if it had an empty body: /hooks/wake → 400 `text required`, Surface A → 400
    `invalid_request_body`, and the mapped wake is ACKNOWLEDGED (200) and commits the event
    `Mapped wake:` rendered from an empty payload instead of `Mapped wake: Email`."""
    results = {}
    for name, path, body, auth in (
        ("wake", "/hooks/wake", b'{"text":"upgrade wake"}', HOOKS_TOKEN),
        ("route", "/plugins/webhooks/ci", b'{"action":"create_flow","goal":"g"}', ROUTE_SECRET),
    ):
        [(status, _, payload)] = _exchange(gw.port, _post(path, body, auth, UPGRADE))
        results[name] = (status.split(b" ")[1], payload.startswith(b'{"ok":true'))
    [(status, _, payload)] = _exchange(gw.port, _post("/hooks/mapped-wake", b'{"subject":"Email"}', HOOKS_TOKEN, UPGRADE))
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        texts = [t for (t,) in conn.execute("SELECT text FROM system_events WHERE text LIKE 'Mapped wake%' ORDER BY seq")]
    results["mapped"] = (status.split(b" ")[1], texts)
    assert results == {
        "wake": (b"200", True),
        "route": (b"200", True),
        "mapped": (b"200", ["Mapped wake: Email"]),
    }


def test_a_request_after_an_ignored_upgrade_header_is_answered(gw: RunningGateway) -> None:
    """README §6: "HTTP/1.1 with keep-alive"; "`GET|HEAD /readyz` … → `200 {"ready":true,…}`".

    Two requests on one keep-alive connection, the first carrying an `Upgrade` offer hookgate does
    not take. Before the fix: the first is answered, the second never is (the connection stays open and
    silent: the parser stopped at the upgrade and every later byte is dropped)."""
    data = (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + UPGRADE + b"\r\n"
            b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    responses = _exchange(gw.port, data, count=2)
    assert [r[0].split(b" ")[1] for r in responses] == [b"200", b"200"], responses
    assert responses[1][2].startswith(b'{"ready":true,')


# --- request methods (any token is a method; hooks.md §2 step 3, README §5/§6) ---------------------


def test_a_long_extension_method_is_a_method_like_any_other(gw: RunningGateway) -> None:
    """hooks.md §2 step 3: "**Method.** Anything but `POST` → `405`, `Allow: POST`";
    README §6: "Other methods on these paths → `405` … with `Allow: GET, HEAD`";
    README §5: "Any other path: `404 {"ok":false,"error":"Not Found"}`".

    A method is any token (RFC 9110 §9.1), with no length limit; a 40-character one is as valid as
    `FOO` (which gets 405, tests/integration/hooks/test_extension_methods.py).
    Before the fix: `400 {"ok":false,"error":"Bad Request"}` on every path (the rewrite only looks at the
    first 32 characters)."""
    method = b"X" * 40
    got = {}
    for path in (b"/hooks/wake", b"/healthz", b"/nope"):
        [(status, headers, body)] = _exchange(
            gw.port, method + b" " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        got[path] = (status.split(b" ")[1], headers.get(b"allow"), body)
    assert got == {
        b"/hooks/wake": (b"405", b"POST", METHOD_NOT_ALLOWED),
        b"/healthz": (b"405", b"GET, HEAD", METHOD_NOT_ALLOWED),
        b"/nope": (b"404", None, NOT_FOUND),
    }


def test_an_extension_method_split_across_reads_gets_405(gw: RunningGateway) -> None:
    """hooks.md §2 step 3: "Anything but `POST` → `405`, `Allow: POST`, `{"ok":false,"error":"Method Not Allowed"}`".

    TCP is a byte stream: the method may arrive in two segments. Before the fix: `400 Bad Request` (the
    method rewrite only inspects the first read of a request)."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"FO")
        time.sleep(0.2)  # not a wait for a condition: it only makes the server read "FO" on its own
        sock.sendall(b"O /hooks/wake HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        [(status, headers, body)] = _read_responses(sock, 1)
    assert (status.split(b" ")[1], headers.get(b"allow"), body) == (b"405", b"POST", METHOD_NOT_ALLOWED)


# --- X-Request-Id ------------------------------------------------------------------------------------


def test_a_generated_request_id_is_random(gw: RunningGateway) -> None:
    """README §5: "`X-Request-Id` echoes the request's own `X-Request-Id` when it is 1–128 characters of
    `[A-Za-z0-9._:-]`, otherwise a new random id."

    Before the fix: the id is a fixed per-process prefix plus a counter (`…000000000001`, `…000000000002`):
    every id the gateway makes is predictable from any other. Random ids of this length would not
    share their first 12 characters."""
    ids = []
    for path in (b"/healthz", b"/nope", b"/hooks/wake", b"/plugins/webhooks/ci", b"/readyz"):
        [(_, headers, _)] = _exchange(gw.port, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        ids.append(headers[b"x-request-id"].decode())
    prefixes = [i[:12] for i in ids]
    assert len(set(prefixes)) == len(ids), ids


# --- message boundaries, CONNECT, many upgrades, the parser after an upgrade -----------------------


def _codes(responses: list[tuple[bytes, dict[bytes, bytes], bytes]]) -> list[bytes]:
    return [status.split(b" ")[1] for status, _, _ in responses]


def test_a_pipelined_requests_body_arriving_in_its_own_read_is_not_held(gw: RunningGateway) -> None:
    """`_at_message_start` is set by on_message_complete even when the same read goes on with the next
    request's head; the next read (the body of that pipelined request) is then taken for a method
    start and, being all token characters (`12345`), held until more bytes come — which they never
    do. Before the held-method change the body was fed to the parser and the request answered (400: not an object)."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + HOOKS_TOKEN.encode() +
                     b"\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n")
        time.sleep(0.3)  # only makes the server read the body on its own
        sock.sendall(b"12345")
        codes = _codes(_read_responses(sock, 2, timeout=5))
    assert len(codes) == 2 and codes[1] != b"408", codes


def test_a_pipelined_header_value_is_not_rewritten_into_a_method(gw: RunningGateway) -> None:
    """Same stale `_at_message_start`: the first read after a pipelined boundary is searched for a method.
    With the search widened from 34 to 258 bytes, a 40-character header value followed by a space is
    now taken for an extension method: the bytes are rewritten to `PATCH …` and the pipelined
    `GET /readyz` is dispatched with the header's text as its method (405). Before the held-method change: 200."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /readyz HTTP/1.1\r\nHost: x\r\nX-Trace: ")
        time.sleep(0.3)  # only makes the server read the rest on its own
        sock.sendall(b"a" * 40 + b" b\r\nConnection: close\r\n\r\n")
        codes = _codes(_read_responses(sock, 2, timeout=5))
    assert codes == [b"200", b"200"], codes


def test_connect_is_answered_not_a_recursion_error(gw: RunningGateway) -> None:
    """llhttp treats every CONNECT as an upgrade: `_without_upgrade` rebuilds the same head, llhttp
    raises HttpParserUpgrade again, and so on until RecursionError escapes data_received (asyncio:
    "Fatal error: protocol.data_received() call failed", the connection aborted, no answer)."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
        sock.sendall(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nConnection: close\r\n\r\n")
        codes = _codes(_read_responses(sock, 1, timeout=3))
    time.sleep(0.3)
    assert "RecursionError" not in gw.stderr()
    assert codes and codes[0] in (b"400", b"404", b"405"), codes


def test_many_pipelined_upgrade_offers_are_all_answered(gw: RunningGateway) -> None:
    """Each ignored upgrade re-enters data_received from inside data_received with the rest of the
    read: N pipelined `Upgrade: h2c` requests in one read nest 2N frames and ~600 of them exceed the
    recursion limit (the connection is aborted). The same requests without `Upgrade` are all answered."""
    n = 600
    for extra in (b"", UPGRADE):
        req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n"
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
            sock.sendall(req * n)
            codes = _codes(_read_responses(sock, n, timeout=10))
        assert codes == [b"200"] * n, (extra, len(codes))
    assert "RecursionError" not in gw.stderr()


def test_after_an_ignored_upgrade_a_close_request_with_trailing_bytes_is_still_answered(gw: RunningGateway) -> None:
    """uvicorn sets `lenient_data_after_close` on its parser so a `Connection: close` request followed by
    more bytes is answered; `_without_upgrade` replaces the parser with a bare HttpRequestParser for the
    rest of the connection, so after one Upgrade offer such a request gets the 400 instead (the answer
    already under way is lost). Same bytes without the Upgrade offer: 200, 200."""
    tail = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    got = {}
    for name, extra in (("plain", b""), ("upgrade", UPGRADE)):
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n" + tail)
            got[name] = _codes(_read_responses(sock, 2, timeout=3))
    assert got == {"plain": [b"200", b"200"], "upgrade": [b"200", b"200"]}


def test_an_extension_method_after_an_empty_line_gets_405(gw: RunningGateway) -> None:
    """RFC 9112 §2.2: a server ignores empty lines before a request line. An extension method after
    one (a keep-alive client's stray CRLF) was refused as malformed (400) instead of getting 405."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = _read_responses(sock, 1)
        sock.sendall(b"\r\nFOO /hooks/wake HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        second = _read_responses(sock, 1)
    assert _codes(first) == [b"200"]
    assert [(r[0].split(b" ")[1], r[1].get(b"allow"), r[2]) for r in second] == [(b"405", b"POST", METHOD_NOT_ALLOWED)]
