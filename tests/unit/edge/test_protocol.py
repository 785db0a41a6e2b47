"""PassTransport: a connection's writes of one loop pass leave as one write, at the end of the pass."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from hookgate.edge.protocol import HookgateHttpProtocol, PassTransport, _sweep


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.eof = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.writes.append(data)

    def write_eof(self) -> None:
        self.eof = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> Any:
        return {"peername": ("127.0.0.1", 5)}.get(name)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_writes_of_one_pass_leave_together_at_its_end() -> None:
    raw = RecordingTransport()
    t = PassTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    t.write(b"ok")
    assert raw.writes == []  # held until the end of the pass
    await asyncio.sleep(0)
    assert raw.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
    t.write(b"next")  # a later pass: a write of its own
    await asyncio.sleep(0)
    assert raw.writes[1:] == [b"next"]


async def test_other_connections_writes_of_the_pass_leave_back_to_back() -> None:
    loop = asyncio.get_running_loop()
    raws = [RecordingTransport() for _ in range(3)]
    ts = [PassTransport(r, loop) for r in raws]  # type: ignore[arg-type]
    sent_meanwhile: list[int] = []

    async def respond(i: int) -> None:  # three tasks woken in one pass, as by a landed commit group
        ts[i].write(b"head%d" % i)
        ts[i].write(b"body%d" % i)
        sent_meanwhile.append(sum(len(r.writes) for r in raws))

    await asyncio.gather(*(respond(i) for i in range(3)))
    assert sent_meanwhile == [0, 0, 0]  # nothing left while the responses were being written
    assert [r.writes for r in raws] == [[b"head0body0"], [b"head1body1"], [b"head2body2"]]


async def test_close_and_write_eof_send_what_is_held_first() -> None:
    loop = asyncio.get_running_loop()
    raw = RecordingTransport()
    t = PassTransport(raw, loop)  # type: ignore[arg-type]
    t.write(b"last words")
    t.close()
    assert raw.writes == [b"last words"] and raw.closed
    await asyncio.sleep(0)  # the pass-end send finds nothing left
    assert raw.writes == [b"last words"]

    raw2 = RecordingTransport()
    t2 = PassTransport(raw2, loop)  # type: ignore[arg-type]
    t2.writelines([b"a", b"b"])
    t2.write_eof()
    assert raw2.writes == [b"ab"] and raw2.eof


async def test_held_bytes_of_a_connection_closed_meanwhile_are_dropped() -> None:
    raw = RecordingTransport()
    t = PassTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"for nobody")
    raw.close()  # aborted underneath (the peer went away)
    await asyncio.sleep(0)
    assert raw.writes == []


async def test_everything_else_is_the_transport_s() -> None:
    raw = RecordingTransport()
    t = PassTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    assert t.get_extra_info("peername") == ("127.0.0.1", 5)
    assert t.is_closing() is False


async def _answer_ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


class _Later:
    """The event loop as the once-a-second sweep sees it, ``seconds`` from now."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop, self.seconds = loop, seconds

    def time(self) -> float:
        return self.loop.time() + self.seconds

    def call_later(self, *args: Any) -> None:
        pass


async def test_empty_lines_do_not_keep_an_idle_connection_open() -> None:
    """RFC 9112 §2.2 lets a client send empty lines before a request; they begin none, so they do not
    restart the 30 s keep-alive clock (two bytes every 25 s held a connection open for ever)."""
    loop = asyncio.get_running_loop()
    config = uvicorn.Config(_answer_ok, loop="none", http=HookgateHttpProtocol, lifespan="off", log_config=None,
                            timeout_keep_alive=30)
    state = ServerState()
    conns = []
    for lines in (b"", b"\r\n", b"\r\n\r\n\r"):
        proto = HookgateHttpProtocol(config=config, server_state=state, app_state={}, _loop=loop)
        raw = RecordingTransport()
        proto.connection_made(raw)  # type: ignore[arg-type]
        proto.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0.01)  # the app answers; the answer leaves at the end of the pass
        assert raw.writes and raw.writes[0].startswith(b"HTTP/1.1 200 ")
        for _ in range(3):
            if lines:
                proto.data_received(lines)
        conns.append(raw)
    _sweep(_Later(loop, 20), state)  # type: ignore[arg-type]
    assert [raw.closed for raw in conns] == [False, False, False]
    _sweep(_Later(loop, 31), state)  # type: ignore[arg-type]
    assert [raw.closed for raw in conns] == [True, True, True]
