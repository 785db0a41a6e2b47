"""hookgate's HTTP protocol on a real server: held writes still answer every request, in order; what
uvicorn leaves unbounded (head size, head time, unparsable bytes) gets a JSON answer and a close."""

from __future__ import annotations

import json
import re
import socket
import time

import pytest
from gateway import HOOKS_TOKEN, GatewayFactory, RunningGateway, hooks_config, raw_request

MAX_HEAD = 64 * 1024  # a request head's bytes (hookgate's limit, docs/operations.md)


def test_pipelined_requests_are_answered_in_order(gateway: RunningGateway) -> None:
    requests = b"".join(
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: req-%d\r\n\r\n" % i for i in range(5)
    ) + b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: req-last\r\nConnection: close\r\n\r\n"
    received, closed = raw_request(gateway.port, requests)
    assert closed
    responses = received.split(b"HTTP/1.1 ")[1:]
    assert [r.split(b"\r\n", 1)[0] for r in responses] == [b"200 OK"] * 6
    ids = [line.split(b": ", 1)[1] for r in responses for line in r.split(b"\r\n") if line.startswith(b"x-request-id")]
    assert ids == [b"req-%d" % i for i in range(5)] + [b"req-last"]
    assert all(r.rstrip(b"\r\n").endswith(b'"status":"live"}') for r in responses)


def test_a_closing_answer_arrives_whole_before_the_close(gateway: RunningGateway) -> None:
    body = b"x" * 100
    request = (b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + HOOKS_TOKEN.encode() + b"\r\n"
               b"Content-Type: application/json\r\nContent-Length: 999999999\r\n\r\n" + body)
    received, closed = raw_request(gateway.port, request)
    assert closed
    head, _, payload = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower()
    length = int(next(line.split(b": ")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    assert len(payload) == length > 0


def test_bytes_that_are_not_http_get_a_json_400_and_a_json_log_line(gateway: RunningGateway) -> None:
    """The parser refuses the request: README §5's JSON body and common headers, the connection closed,
    and only JSON lines on stderr (operations.md §2), the access line among them."""
    received, closed = raw_request(gateway.port, b"GARBAGE \x01\x02 nonsense\r\n\r\n", read_timeout=5)
    assert closed
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 400 Bad Request"
    headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
    assert headers[b"content-type"] == b"application/json; charset=utf-8"
    assert headers[b"x-content-type-options"] == b"nosniff" and headers[b"cache-control"] == b"no-store"
    assert headers[b"referrer-policy"] == b"no-referrer" and headers[b"connection"] == b"close"
    assert headers[b"date"].endswith(b" gmt")  # the server's headers, as on every other answer
    assert len(headers[b"x-request-id"]) > 0
    assert body == b'{"ok":false,"error":"Bad Request"}' and int(headers[b"content-length"]) == len(body)
    events = gateway.flushed_log_events()
    access = [e for e in events if e.get("event") == "http.request" and e.get("reason") == "malformed_request"]
    assert [(e["status"], e["request_id"]) for e in access] == [(400, headers[b"x-request-id"].decode())]
    assert [e["message"] for e in events if e.get("event") == "server.message"] == ["Invalid HTTP request received."]
    assert [line for line in gateway.stderr().splitlines() if line.strip() and not line.startswith("{")] == []


def _answer_and_close(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    sock.settimeout(timeout)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        return received, False
    except ConnectionResetError:
        pass
    return received, True


def test_a_request_head_past_64_kib_gets_431_and_the_connection_closed(gateway: RunningGateway) -> None:
    """uvicorn buffers request headers without a limit; hookgate refuses a head past 64 KiB."""
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(64):  # 4 MiB offered, one header line never finished
                sock.sendall(b"X-Pad: " + b"a" * 65536)
        except OSError:
            pass  # closed while sending: the refusal
        received, closed = _answer_and_close(sock, 5)
    finally:
        sock.close()
    assert closed
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), received[:200]
    assert body == b'{"ok":false,"error":"Request Header Fields Too Large"}'
    assert b"x-request-id: " in head and b"x-content-type-options: nosniff" in head
    # a head just under the limit is a request like any other
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 60_000 + b"\r\nConnection: close\r\n\r\n"
    received, closed = raw_request(gateway.port, big)
    assert received.startswith(b"HTTP/1.1 200 ") and closed


@pytest.mark.parametrize("first", [1_000, 40_000, 65_000])
def test_a_head_past_64_kib_in_two_reads_gets_431(gateway: RunningGateway, first: int) -> None:
    """A head that never ends is refused once it is past 64 KiB, counting the read it began in: only
    the reads after that one were counted, so a 40 KB read then a 30 KB one waited for the 15 s head
    timeout, and up to twice the limit was read. A head just under the limit is still served."""
    line = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: "
    rest = MAX_HEAD - len(line) - first + 10  # past the limit by 10 bytes, the header never ended
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    try:
        sock.sendall(line + b"a" * first)
        time.sleep(0.3)  # two reads
        try:
            sock.sendall(b"a" * rest)
        except OSError:
            pass
        received, closed = _answer_and_close(sock, 5)
    finally:
        sock.close()
    assert received.startswith(b"HTTP/1.1 431 ") and closed, received[:100]
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    try:
        sock.sendall(line + b"a" * first)
        time.sleep(0.3)
        sock.sendall(b"a" * (rest - 100) + b"\r\nConnection: close\r\n\r\n")  # 66 bytes under
        received, closed = _answer_and_close(sock, 5)
    finally:
        sock.close()
    assert received.startswith(b"HTTP/1.1 200 ") and closed, received[:100]


def test_a_refusal_counts_its_latency_from_the_first_byte_of_its_request(gateway: RunningGateway) -> None:
    """operations.md §3: `hookgate_ingest_latency_seconds` is "request start → response written, for
    every response", and §2's access line has its `duration_ms`. A head that arrives over a second and
    ends past 64 KiB took that second: the protocol's refusals (400, 408, 431) were recorded as 0 s."""
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 40_000)
        time.sleep(1.0)
        try:
            sock.sendall(b"a" * 30_000)
        except OSError:
            pass
        received, closed = _answer_and_close(sock, 5)
    finally:
        sock.close()
    assert received.startswith(b"HTTP/1.1 431 ") and closed
    lines = [e for e in gateway.flushed_log_events()
             if e.get("event") == "http.request" and e.get("reason") == "headers_too_large"]
    assert len(lines) == 1 and 950 <= lines[0]["duration_ms"] < 5000, lines
    with gateway.client() as c:
        metrics = c.get("/metrics").text
    total = re.search(r'^hookgate_ingest_latency_seconds_sum\{route="-",surface="other"\} (\S+)$', metrics, re.MULTILINE)
    assert total is not None and 0.95 <= float(total.group(1)) < 5, total


@pytest.mark.parametrize("pieces", [1, 4, 40])
@pytest.mark.parametrize("shape", ["one header", "many headers"])
def test_a_whole_head_past_64_kib_sent_at_once_gets_431(gateway: RunningGateway, pieces: int, shape: str) -> None:
    """The read that ends a head was not counted: a 70 KB or a 260 KB head that arrived complete in one
    read (or whose last read held most of it) was served. Sent whole or in pieces, the head is refused."""
    for size in (70_000, 260_000):
        if shape == "one header":
            fields = b"X-Big: " + b"a" * size + b"\r\n"
        else:
            fields = b"".join(b"X-%d: %s\r\n" % (i, b"b" * 90) for i in range(size // 100))
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + fields + b"Connection: close\r\n\r\n"
        sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
        try:
            step = -(-len(head) // pieces)
            try:
                for i in range(0, len(head), step):
                    sock.sendall(head[i:i + step])
                    time.sleep(0.01)
            except OSError:
                pass  # closed while sending: the refusal
            received, closed = _answer_and_close(sock, 5)
        finally:
            sock.close()
        assert received.startswith(b"HTTP/1.1 431 "), (size, received[:100])
        assert closed


def test_a_head_within_64_kib_is_served_whatever_its_spacing(gateway: RunningGateway) -> None:
    """The ended head's size is a lower bound of what was sent: a legal head of 65 000 bytes whose
    fields have no space after the colon, sent with its body in one read, is served (it got 431 when
    each field was counted with a space)."""
    fields = b"".join(b"X%d:%s\r\n" % (i, b"v" * 36) for i in range(1500))
    body = b'{"text":"spaced"}' + b" " * 2000
    head = (b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + HOOKS_TOKEN.encode() + b"\r\n"
            + fields + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
    assert 64_000 < len(head) <= 64 * 1024
    received, _ = raw_request(gateway.port, head + body)
    assert received.startswith(b"HTTP/1.1 200 "), received[:100]


@pytest.mark.parametrize("bad", ["head past 64 KiB", "bytes that are no request"])
def test_a_refusal_waits_for_the_answer_of_a_request_before_it(gateway: RunningGateway, bad: str) -> None:
    """A wake and, pipelined behind it in the same read, something to refuse: the wake's 200 (its
    event is committed) comes first, then the refusal, then the close. The refusal used to be written
    at once and the connection closed: the client read a 431 or 400 for a wake that was committed."""
    text = f"pipelined before a refusal ({bad})"
    body = json.dumps({"text": text}).encode()
    wake = (b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + HOOKS_TOKEN.encode()
            + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    after = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"
             if bad == "head past 64 KiB" else b"\x01\x02 not HTTP\r\n\r\n")
    received, closed = raw_request(gateway.port, wake + after)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", received)
    assert statuses == [b"200", b"431" if bad == "head past 64 KiB" else b"400"], received[:300]
    assert closed
    assert text in gateway.cli("events", "list", "--status", "all", "--json").stdout


def test_a_head_not_finished_in_15_s_is_closed(gateway: RunningGateway) -> None:
    """Slow-loris: a connection that sends nothing is closed; one that began a request and did not
    finish its headers gets a 408 first. A request whose headers came in time is not affected, however
    long the keep-alive connection then stays (uvicorn's own keep-alive timeout is 30 s)."""
    idle = socket.create_connection(("127.0.0.1", gateway.port))
    partial = socket.create_connection(("127.0.0.1", gateway.port))
    split = socket.create_connection(("127.0.0.1", gateway.port))
    served = socket.create_connection(("127.0.0.1", gateway.port))
    try:
        partial.sendall(b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\n")
        split.sendall(b"PO")  # a method in pieces: the head's 15 s count from here, not from its end
        served.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert served.recv(65536).startswith(b"HTTP/1.1 200 ")
        time.sleep(8)
        split.sendall(b"ST /hooks/wake HTTP/1.1\r\nHost: x\r\n")
        idle_data, idle_closed = _answer_and_close(idle, 20)  # HEAD_TIMEOUT_S is 15 s
        partial_data, partial_closed = _answer_and_close(partial, 5)
        split_data, split_closed = _answer_and_close(split, 3)  # (it got 15 s more: at ~23 s)
        served.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        again, again_closed = _answer_and_close(served, 5)
    finally:
        for sock in (idle, partial, split, served):
            sock.close()
    assert idle_closed and idle_data == b""
    for data, closed in ((partial_data, partial_closed), (split_data, split_closed)):
        assert closed and data.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), data
        assert data.endswith(b'{"ok":false,"error":"Request Timeout"}')
    assert again.startswith(b"HTTP/1.1 200 ") and again_closed


def _wake(text: str, *, chunked: bool = False) -> bytes:
    body = json.dumps({"text": text}).encode()
    head = (b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + HOOKS_TOKEN.encode() + b"\r\n"
            b"Content-Type: application/json\r\n")
    if chunked:
        return head + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def _half_closed(port: int, *pieces: bytes, pause: float = 0.0) -> tuple[bytes, bool]:
    """Send ``pieces`` (``pause`` s apart), shut the sending side at once, read until the server closes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        for i, piece in enumerate(pieces):
            if i and pause:
                time.sleep(pause)
            sock.sendall(piece)
        sock.shutdown(socket.SHUT_WR)
        return _answer_and_close(sock, 10)
    finally:
        sock.close()


def _events(gateway: RunningGateway) -> str:
    return gateway.cli("events", "list", "--status", "all", "--json").stdout


@pytest.mark.parametrize("shape", ["one request", "chunked", "three pipelined", "body in a later read",
                                   "agent", "HTTP/1.0"])
def test_requests_sent_whole_before_a_half_close_are_answered(gateway: RunningGateway, shape: str) -> None:
    """A client that shuts its sending side after its request (RFC 9112 §9.6: it may still read) gets
    the answer — the wake is committed by then, and a client without its 200 would send it again —
    and then the server closes. (The connection was closed unanswered, the effect committed.)"""
    tag = f"half-close {shape} {time.monotonic_ns()}"
    pause = 0.0
    if shape == "one request":
        pieces = [_wake(tag)]
    elif shape == "chunked":
        pieces = [_wake(tag, chunked=True)]
    elif shape == "three pipelined":
        pieces = [_wake(tag + " a") + _wake(tag + " b") + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"]
    elif shape == "body in a later read":  # uvicorn's cycle reads the rest of the body
        whole = _wake(tag)
        pieces, pause = [whole[:-5], whole[-5:]], 0.2
    elif shape == "agent":
        body = json.dumps({"message": tag, "deliver": False}).encode()
        pieces = [b"POST /hooks/agent HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + HOOKS_TOKEN.encode()
                  + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body]
    else:
        pieces = [_wake(tag).replace(b"HTTP/1.1", b"HTTP/1.0", 1)]
    received, closed = _half_closed(gateway.port, *pieces, pause=pause)
    assert closed
    statuses = re.findall(rb"HTTP/1\.[01] (\d{3}) ", received)
    assert statuses == ([b"200"] * 3 if shape == "three pipelined" else [b"200"]), received[:400]
    if shape == "agent":
        run_id = json.loads(received.partition(b"\r\n\r\n")[2])["runId"]
        assert tag in gateway.cli("runs", "show", run_id, "--content").stdout
    else:
        assert received.count(b'"eventOutcome":"queued"') == (2 if shape == "three pipelined" else 1)
        assert tag in _events(gateway)


def test_a_request_left_unfinished_by_a_half_close_is_not_committed(gateway: RunningGateway) -> None:
    """A half-close mid-body ends a request that can never finish: no answer, nothing committed — and
    a whole request before it in the same connection is still answered."""
    tag = f"unfinished {time.monotonic_ns()}"
    cut = _wake(tag + " cut")[:-8]
    received, closed = _half_closed(gateway.port, cut)
    assert closed and received == b""
    received, closed = _half_closed(gateway.port, _wake(tag + " whole") + cut)
    assert closed and re.findall(rb"HTTP/1\.1 (\d{3}) ", received) == [b"200"]
    # three whole requests ahead: the unfinished one waits in uvicorn's pipeline when the half-close
    # comes, and is dropped there, never started (it would wait out the body timeout)
    received, closed = _half_closed(gateway.port, b"".join(_wake(f"{tag} w{i}") for i in range(3)) + cut)
    assert closed and re.findall(rb"HTTP/1\.1 (\d{3}) ", received) == [b"200"] * 3, (closed, received[-300:])
    events = _events(gateway)
    assert tag + " whole" in events and tag + " cut" not in events
    assert all(f"{tag} w{i}" in events for i in range(3))


def test_a_body_the_parser_refuses_behind_pipelined_requests_gets_its_400(gateway: RunningGateway) -> None:
    """A chunked body the parser refuses, behind five whole requests in the same read: the five are
    answered, then the 400, and the connection closes. The refused request waited in uvicorn's
    pipeline, was started after them, and waited for a body that could never come: the body
    timeout's 408 came 30 s later, and the 400 was never sent."""
    wakes = b"".join(_wake(f"before refused {i}") for i in range(5))
    bad = (b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + HOOKS_TOKEN.encode() + b"\r\n"
           b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"tex\r\nZZ\r\nt\":\"x\"}\r\n0\r\n\r\n")
    started = time.monotonic()
    received, closed = raw_request(gateway.port, wakes + bad, read_timeout=10)
    assert closed and time.monotonic() - started < 5
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", received) == [b"200"] * 5 + [b"400"]


def test_repeated_parser_warnings_are_one_line_with_a_count(gateway_factory: GatewayFactory) -> None:
    """Each malformed request (an unauthenticated client's bytes) cost a `server.message` warning and a
    write(2) of its own besides its access line; the same message is now written once per 10 s."""
    gw = gateway_factory(hooks_config())
    for _ in range(30):
        received, _ = raw_request(gw.port, b"GARBAGE \x01\x02 nonsense\r\n\r\n", read_timeout=5)
        assert received.startswith(b"HTTP/1.1 400 ")
    events = gw.flushed_log_events()
    assert len([e for e in events if e.get("reason") == "malformed_request"]) == 30  # one access line each
    warnings = [e for e in events if e.get("event") == "server.message"]
    assert [(e["message"], e["count"]) for e in warnings] == [("Invalid HTTP request received.", 1)]
