"""Request methods llhttp does not parse (RFC 9110 §9.1: any token is a method, case-sensitive): they
reach the app with their own method and get what any method but POST gets (hooks.md §2 step 3),
after the query-token check (step 2) — not the protocol's generic 400."""

from __future__ import annotations

import socket

import pytest
from gateway import AUTH, RunningGateway, raw_request, split_response

METHOD_NOT_ALLOWED = b'{"ok":false,"error":"Method Not Allowed"}'
QUERY_TOKEN_ERROR = (
    b'{"ok":false,"error":"Hook token must be provided via Authorization: Bearer <token> or X-Hookgate-Token '
    b'header (query parameters are not allowed)."}'
)


@pytest.mark.parametrize("method", [b"FOO", b"BREW", b"post"])
def test_any_non_post_method_gets_405_with_allow_post(gateway: RunningGateway, method: bytes) -> None:
    """hooks.md §2 step 3: "**Method.** Anything but `POST` → `405`, `Allow: POST`,
    `{"ok":false,"error":"Method Not Allowed"}`"; §3: "method ≠ POST | 405 + `Allow: POST`".

    `FOO`, `BREW` and `post` are syntactically valid request methods (RFC 9110 §9.1: a method is a
    token and is case-sensitive, so `post` is not `POST`); they are not POST, so 405 is required."""
    request = (method + b" /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hook-secret\r\n"
               b"Content-Length: 0\r\nConnection: close\r\n\r\n")
    data, _ = raw_request(gateway.port, request, read_timeout=5)
    status, headers, body = split_response(data)
    assert status.startswith(b"HTTP/1.1 405 "), data
    assert headers.get(b"allow") == b"POST", data
    assert body == METHOD_NOT_ALLOWED


def test_query_token_wins_over_an_extension_method(gateway: RunningGateway) -> None:
    """hooks.md §2 step 2: the query token check is "Checked before the method and before auth":
    `FOO /hooks/wake?token=x` must get the query-token 400 body, not a generic one."""
    request = b"FOO /hooks/wake?token=x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    data, _ = raw_request(gateway.port, request, read_timeout=5)
    status, _, body = split_response(data)
    assert status.startswith(b"HTTP/1.1 400 "), data
    assert body == QUERY_TOKEN_ERROR, body


def test_the_connection_goes_on_after_an_extension_method(gateway: RunningGateway) -> None:
    """A keep-alive connection: the request after a ``FOO`` is parsed as usual (its own method)."""
    token = AUTH["Authorization"].encode()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(b"FOO /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: " + token +
                     b"\r\nContent-Length: 0\r\n\r\n")
        first = b""
        while METHOD_NOT_ALLOWED not in first:
            chunk = sock.recv(65536)
            assert chunk, first
            first += chunk
        assert first.startswith(b"HTTP/1.1 405 ")
        body = b'{"text":"after FOO"}'
        sock.sendall(b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: " + token +
                     b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                     b"\r\nConnection: close\r\n\r\n" + body)
        second = b""
        while chunk := sock.recv(65536):
            second += chunk
    assert second.startswith(b"HTTP/1.1 200 "), second
    assert split_response(second)[2] == b'{"ok":true,"mode":"now","eventOutcome":"queued"}'
