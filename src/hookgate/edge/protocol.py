"""hookgate's HTTP protocol: uvicorn's httptools protocol, with each loop pass's writes sent together.

uvicorn writes a response as two ``transport.write`` calls, the status line and headers and then the
body, and each is a ``send(2)`` at once. Under load that is two system calls per response. Worse, a
response written while its client sleeps wakes the client, one wake-up per response when the
responses of a commit group trickle out between other work. On a VM that wake-up (an
inter-processor interrupt) cost the writing thread ~20 µs of system time.

Here a connection's writes are held until the end of the event loop's current pass: one
``send(2)`` per connection and pass, and the responses a commit group completed leave back to back.
Nothing waits longer than the rest of the pass it was written in. Closing a connection sends what
it holds first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class PassTransport:
    """A transport whose ``write``s are joined and sent at the end of the loop pass."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        held = self._held
        if not held:
            self._loop.call_soon(self.send_held)
        held.append(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def send_held(self) -> None:
        held = self._held
        if not held:
            return
        self._held = []
        if self._transport.is_closing():
            return  # aborted, or the peer is gone: nothing can be delivered
        self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.send_held()
        self._transport.close()

    def write_eof(self) -> None:
        self.send_held()
        self._transport.write_eof()

    def __getattr__(self, name: str) -> Any:  # is_closing, abort, get_extra_info, pause_reading, …
        return getattr(self._transport, name)


class HookgateHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a ``PassTransport``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(PassTransport(transport, self.loop))  # type: ignore[arg-type]
