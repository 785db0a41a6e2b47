"""The ceiling: a minimal ASGI app on hookgate's server stack (uvicorn + uvloop + httptools, with
hookgate's HTTP protocol: writes of a loop pass sent together, see ``hookgate.edge.protocol``).

It reads the body and answers 200 JSON — nothing else — so its requests/s is what this machine's
stack can do at best for an ASGI app. Run: python bench/minimal_app.py PORT [--stock|--bare]
(``--stock``: uvicorn's own httptools protocol, for comparison; ``--bare``: no uvicorn and no ASGI,
a bare uvloop + httptools protocol that answers each request as soon as it is parsed — the floor
under any Python server on this machine, and a reference, not the ceiling: hookgate answers a
request read whole without uvicorn's ASGI cycle, see ``hookgate.edge.protocol``)
"""

from __future__ import annotations

import asyncio
import sys

import httptools
import uvicorn
import uvloop

from hookgate.edge.protocol import HookgateHttpProtocol

BODY = b'{"ok":true}'
HEADERS = [(b"content-type", b"application/json; charset=utf-8"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: 11\r\n\r\n" + BODY


class BareProtocol(asyncio.Protocol):
    """httptools on a uvloop transport, nothing else: one write per request, no task, no timers."""

    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)

    def on_message_complete(self) -> None:
        self.transport.write(RESPONSE)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()


async def bare(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(BareProtocol, "127.0.0.1", port)
    await server.serve_forever()


if __name__ == "__main__":
    if "--bare" in sys.argv[2:]:
        uvloop.run(bare(int(sys.argv[1])))
        sys.exit(0)
    http = "httptools" if "--stock" in sys.argv[2:] else HookgateHttpProtocol
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop", http=http,  # type: ignore[arg-type]
                lifespan="off", access_log=False, log_level="warning", server_header=False,
                proxy_headers=False)  # as `hookgate serve` runs it (uvicorn's default wraps the app in a middleware)
