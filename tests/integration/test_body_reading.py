"""Reading request bodies on the real server stack (uvicorn + httptools on 127.0.0.1).

``read_body`` skips its timer when the server has already parsed the whole request (one segment, the
common case for small webhook bodies) and keeps the timed path for bodies still arriving. These tests
pin both paths on the stack hookgate runs on, so an upgrade of uvicorn that changes what the fast path
looks at shows up here instead of as a silent slowdown.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from hookgate.edge.http import BodyTimeout, BodyTooLarge, _already_read, read_asgi_body


class _App:
    def __init__(self, limit: int, timeout: float) -> None:
        self.limit, self.timeout = limit, timeout
        self.seen: list[tuple[bool, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        fast = _already_read(receive)
        try:
            body = await read_asgi_body({}, receive, self.limit, self.timeout)
            status, outcome = 200, body
        except BodyTooLarge:
            status, outcome = 413, "too large"
        except BodyTimeout:
            status, outcome = 408, "timeout"
        self.seen.append((fast, outcome))
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
async def server() -> AsyncIterator[tuple[_App, int]]:
    app = _App(limit=64, timeout=0.5)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http="httptools", loop="none", lifespan="off", log_config=None, access_log=False)
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve(sockets=[sock]))
    while not srv.started:
        await asyncio.sleep(0.01)
    yield app, port
    srv.should_exit = True
    await task


async def _exchange(port: int, *parts: bytes, pause: float = 0.2) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i, part in enumerate(parts):
        if i:
            await asyncio.sleep(pause)
        writer.write(part)
        await writer.drain()
    status = await reader.readline()
    writer.close()
    return status


def _head(length: int) -> bytes:
    return f"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: {length}\r\n\r\n".encode()


async def test_one_segment_body_is_read_without_a_timer(server: tuple[_App, int]) -> None:
    app, port = server
    assert (await _exchange(port, _head(7) + b'{"a":1}')).startswith(b"HTTP/1.1 200")
    assert app.seen == [(True, b'{"a":1}')]


async def test_body_arriving_later_takes_the_timed_path(server: tuple[_App, int]) -> None:
    app, port = server
    assert (await _exchange(port, _head(7), b'{"a":1}')).startswith(b"HTTP/1.1 200")
    assert app.seen == [(False, b'{"a":1}')]


async def test_body_that_never_arrives_times_out(server: tuple[_App, int]) -> None:
    app, port = server
    assert (await _exchange(port, _head(7) + b"{", b"", pause=0)).startswith(b"HTTP/1.1 408")
    assert app.seen == [(False, "timeout")]


async def test_one_segment_chunked_body_over_the_limit_is_413(server: tuple[_App, int]) -> None:
    app, port = server
    chunked = b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n" + b"x" * 65 + b"\r\n0\r\n\r\n"
    assert (await _exchange(port, chunked)).startswith(b"HTTP/1.1 413")
    assert app.seen == [(True, "too large")]


async def test_a_receive_that_is_not_uvicorns_takes_the_timed_path() -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"abc", "more_body": False}

    assert _already_read(receive) is False
    assert await read_asgi_body({}, receive, 64, 1.0) == b"abc"
