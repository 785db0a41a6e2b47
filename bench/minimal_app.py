"""The ceiling: a minimal ASGI app on hookgate's server stack (uvicorn + uvloop + httptools, with
hookgate's HTTP protocol: writes of a loop pass sent together, see ``hookgate.edge.protocol``).

It reads the body and answers 200 JSON — nothing else — so its requests/s is what this machine's
stack can do at best. Run: python bench/minimal_app.py PORT [--stock]  (``--stock``: uvicorn's own
httptools protocol, for comparison)
"""

from __future__ import annotations

import sys

import uvicorn

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


if __name__ == "__main__":
    http = "httptools" if "--stock" in sys.argv[2:] else HookgateHttpProtocol
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop", http=http,  # type: ignore[arg-type]
                lifespan="off", access_log=False, log_level="warning", server_header=False)
