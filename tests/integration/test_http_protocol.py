"""hookgate's HTTP protocol on a real server: held writes still answer every request, in order."""

from __future__ import annotations

from gateway import HOOKS_TOKEN, RunningGateway, raw_request


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
