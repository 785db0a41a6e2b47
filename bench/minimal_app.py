"""The ceiling: a minimal ASGI app on hookgate's server stack (uvicorn + uvloop + httptools).

It reads the body and answers 200 JSON — nothing else — so its requests/s is what this machine's
stack can do at best. Run: python bench/minimal_app.py PORT
"""

from __future__ import annotations

import sys

import uvicorn

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
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop", http="httptools",
                lifespan="off", access_log=False, log_level="warning", server_header=False)
