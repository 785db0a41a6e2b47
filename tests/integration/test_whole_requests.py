"""Two ways into the gateway on hookgate's protocol (``hookgate.edge.protocol``): a request read whole
in one read goes to ``Gateway.serve_read``; one whose body is still arriving, or that asks for
``100 Continue``, goes through uvicorn's ASGI cycle. A client cannot tell which: the same request
gets the same status, headers and body either way, and both commit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from gateway import HOOKS_TOKEN, RunningGateway, raw_request, split_response

from hookgate.edge.protocol import HookgateHttpProtocol


def _wake(text: str, *extra: bytes) -> tuple[bytes, bytes]:
    body = json.dumps({"text": text, "mode": "next-heartbeat"}).encode()
    head = (b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + HOOKS_TOKEN.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
            + b"".join(extra) + b"Connection: close\r\n\r\n")
    return head, body


def _shape(received: bytes) -> tuple[bytes, list[bytes], dict[bytes, bytes], bytes]:
    status, headers, body = split_response(received)
    names = [line.split(b":", 1)[0].lower() for line in received.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]]
    return status, names, headers, body


def test_a_request_read_whole_and_one_read_in_parts_get_the_same_answer(gateway: RunningGateway) -> None:
    head, body = _wake("whole")
    whole, closed = raw_request(gateway.port, head + body)
    assert closed
    head, body = _wake("in parts")
    parts, closed = raw_request(gateway.port, head + body[:5], send_delay=0.2, rest=body[5:])
    assert closed
    for got in (_shape(whole), _shape(parts)):
        status, _names, headers, payload = got
        assert status == b"HTTP/1.1 200 OK"
        assert payload == b'{"ok":true,"mode":"next-heartbeat","eventOutcome":"queued"}'
        assert int(headers[b"content-length"]) == len(payload)
        assert headers[b"connection"] == b"close"
    assert _shape(whole)[1] == _shape(parts)[1]  # the same headers, in the same order
    assert _shape(whole)[1] == [b"date", b"x-content-type-options", b"referrer-policy", b"cache-control",
                                b"x-request-id", b"content-type", b"content-length", b"connection"]
    events = gateway.cli("events", "list", "--json", check=True).stdout
    assert "whole" in events and "in parts" in events


def test_errors_read_whole_match_errors_read_in_parts(gateway: RunningGateway) -> None:
    """A 400 with its JSON body and a 413 that closes, each sent both ways."""
    bad = b'{"text": 1}'
    head = (b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + HOOKS_TOKEN.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: " + str(len(bad)).encode() + b"\r\n\r\n")
    answers = [raw_request(gateway.port, head + bad, read_timeout=1)[0],
               raw_request(gateway.port, head + bad[:3], send_delay=0.2, rest=bad[3:], read_timeout=1)[0]]
    shapes = [_shape(a) for a in answers]
    assert shapes[0][0] == shapes[1][0] == b"HTTP/1.1 400 Bad Request"
    assert shapes[0][3] == shapes[1][3] and shapes[0][3].startswith(b'{"ok":false,"error":')
    assert shapes[0][1] == shapes[1][1]
    big = b'{"text":"' + b"x" * 300_000 + b'"}'
    big_head = head.replace(str(len(bad)).encode(), str(len(big)).encode())
    too_large = []
    for data, rest in ((big_head + big[:100], big[100:]), (big_head + big, b"")):
        received, closed = raw_request(gateway.port, data, send_delay=0.1, rest=rest)
        assert closed
        too_large.append(_shape(received))
    for status, _, headers, payload in too_large:
        assert status == b"HTTP/1.1 413 Request Entity Too Large"
        assert headers[b"connection"] == b"close" and payload == b'{"ok":false,"error":"payload too large"}'
    assert too_large[0][1] == too_large[1][1]


def test_a_request_pipelined_behind_an_unanswered_one_waits_its_turn(gateway: RunningGateway) -> None:
    """A wake (answered after its commit) and three requests behind it in the same segment: the ones
    behind go through uvicorn's pipeline and every answer comes back in request order."""
    head, body = _wake("first of a pipeline")
    head = head.replace(b"Connection: close\r\n", b"")
    behind = b"".join(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: behind-%d\r\n\r\n" % i for i in range(2))
    last = b"GET /readyz HTTP/1.1\r\nHost: x\r\nX-Request-Id: last\r\nConnection: close\r\n\r\n"
    received, closed = raw_request(gateway.port, head + body + behind + last)
    assert closed
    responses = [b"HTTP/1.1 " + r for r in received.split(b"HTTP/1.1 ")[1:]]
    assert [split_response(r)[0] for r in responses] == [b"HTTP/1.1 200 OK"] * 4
    assert [split_response(r)[1][b"x-request-id"] for r in responses[1:]] == [b"behind-0", b"behind-1", b"last"]
    assert responses[0].endswith(b'"eventOutcome":"queued"}')


def test_expect_100_continue_is_answered_before_the_body(gateway: RunningGateway) -> None:
    head, body = _wake("after a continue", b"Expect: 100-continue\r\n")
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    try:
        sock.sendall(head)
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    finally:
        sock.close()
    assert split_response(received)[0] == b"HTTP/1.1 200 OK"
    assert received.endswith(b'"eventOutcome":"queued"}')


def test_head_gets_the_headers_of_get_and_no_body(gateway: RunningGateway) -> None:
    get, _ = raw_request(gateway.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, closed = raw_request(gateway.port, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert closed
    assert _shape(head)[1] == _shape(get)[1]
    assert split_response(head)[1][b"content-length"] == split_response(get)[1][b"content-length"] != b"0"
    assert split_response(head)[2] == b""


def test_http_1_0_is_answered_and_closed(gateway: RunningGateway) -> None:
    received, closed = raw_request(gateway.port, b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n")
    assert closed
    status, headers, body = split_response(received)
    assert status == b"HTTP/1.1 200 OK" and headers[b"connection"] == b"close"
    assert body == b'{"ok":true,"status":"live"}'


# --- the protocol alone, on a real uvicorn server --------------------------------------------------------


class _TwoEntries:
    """An app with both entries, recording which one each request came through."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.entries.append(("asgi", body))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def serve_read(self, exchange: Any) -> None:
        self.entries.append(("whole", exchange.body))
        await asyncio.sleep(0.05)  # an answer that waits, as one waiting for its commit
        exchange.respond(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", not exchange.keep_alive)


@contextlib.contextmanager
def _server(app: Any, **config: Any) -> Iterator[int]:
    """A real uvicorn server on hookgate's protocol, in a thread."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, http=HookgateHttpProtocol, lifespan="off",  # type: ignore[arg-type]
                                           log_level="warning", proxy_headers=False, **config))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _post(body: bytes, *extra: bytes) -> tuple[bytes, bytes]:
    return (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
            + b"".join(extra) + b"\r\n"), body


def test_which_requests_are_read_whole() -> None:
    app = _TwoEntries()
    with _server(app) as port:
        head, body = _post(b"one read", b"Connection: close\r\n")
        assert raw_request(port, head + body)[0].endswith(b"ok")
        head, body = _post(b"two reads", b"Connection: close\r\n")
        assert raw_request(port, head + body[:3], send_delay=0.2, rest=body[3:])[0].endswith(b"ok")
        head, body = _post(b"continue", b"Expect: 100-continue\r\nConnection: close\r\n")
        assert raw_request(port, head + body)[0].endswith(b"ok")
        first, behind = _post(b"first"), _post(b"behind", b"Connection: close\r\n")
        received, closed = raw_request(port, first[0] + first[1] + behind[0] + behind[1])
        assert closed and received.count(b"HTTP/1.1 200 OK") == 2
    assert app.entries == [("whole", b"one read"), ("asgi", b"two reads"), ("asgi", b"continue"),
                           ("whole", b"first"), ("asgi", b"behind")]


def test_a_chunked_body_arrives_whole_read_at_once_or_in_parts() -> None:
    """A body of thousands of chunks: joined in place when they come in one read, and handed to
    uvicorn's cycle with what was read so far when the rest comes later."""
    app = _TwoEntries()
    body = bytes(range(256)) * 40
    chunked = b"".join(b"1\r\n" + body[i:i + 1] + b"\r\n" for i in range(len(body))) + b"0\r\n\r\n"
    head = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    with _server(app) as port:
        received, closed = raw_request(port, head + chunked)
        assert closed and received.endswith(b"ok")
        half = len(chunked) // 2
        received, closed = raw_request(port, head + chunked[:half], send_delay=0.2, rest=chunked[half:])
        assert closed and received.endswith(b"ok")
    assert [entry[1] for entry in app.entries] == [body, body]
    assert app.entries[1][0] == "asgi"
    assert all(type(entry[1]) is bytes for entry in app.entries)


def test_an_idle_keep_alive_connection_is_closed_after_the_timeout() -> None:
    """The keep-alive timeout is kept by the protocol's once-a-second sweep (no timer per response)."""
    with _server(_TwoEntries(), timeout_keep_alive=1) as port:
        busy = socket.create_connection(("127.0.0.1", port), timeout=10)
        idle = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            for sock in (busy, idle):
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                assert sock.recv(65536).endswith(b"\r\n\r\nok")
            started = time.monotonic()
            for _ in range(5):  # a request every 0.4 s keeps this one open
                time.sleep(0.4)
                busy.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                assert busy.recv(65536).endswith(b"\r\n\r\nok")
            idle.settimeout(5)
            assert idle.recv(65536) == b""  # closed within the timeout and the sweep's second
            assert 1.0 <= time.monotonic() - started < 4.5
        finally:
            busy.close()
            idle.close()


class _Failing(_TwoEntries):
    """``serve_read`` raises: at once (``boom``), after a wait (``late``), or after it answered (``after``)."""

    async def serve_read(self, exchange: Any) -> None:
        if exchange.body not in (b"boom", b"late", b"after"):
            await super().serve_read(exchange)
            return
        if exchange.body == b"late":
            await asyncio.sleep(0.05)
        if exchange.body == b"after":
            exchange.respond(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", False)
        raise RuntimeError("the app failed")


def test_an_exception_out_of_the_whole_request_entry_gets_a_plain_500_and_is_logged(
        caplog: Any) -> None:
    """As uvicorn does for an ASGI app: logged, a plain-text 500 when nothing was written, the
    connection closed; an answer already written stands and the connection stays usable."""
    errors = logging.getLogger("uvicorn.error")  # uvicorn's logging config keeps it from the root logger
    with _server(_Failing()) as port:
        errors.addHandler(caplog.handler)
        for body in (b"boom", b"late"):
            head, data = _post(body)
            received, closed = raw_request(port, head + data, read_timeout=5)
            assert closed
            status, headers, payload = split_response(received)
            assert status == b"HTTP/1.1 500 Internal Server Error"
            assert headers[b"content-type"] == b"text/plain; charset=utf-8" and headers[b"connection"] == b"close"
            assert payload == b"Internal Server Error"
        head, data = _post(b"after")
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            sock.sendall(head + data)
            assert sock.recv(65536) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert sock.recv(65536).endswith(b"\r\n\r\nok")
        finally:
            sock.close()
            errors.removeHandler(caplog.handler)
    failures = [r for r in caplog.records if r.getMessage().startswith("Exception in ASGI application")]
    assert len(failures) == 3
    assert all(isinstance(r.exc_info[1], RuntimeError) for r in failures if r.exc_info)
