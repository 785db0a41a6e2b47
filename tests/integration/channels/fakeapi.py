"""A real loopback HTTP server that answers like the chat APIs hookgate delivers to.

``FakeApi`` records every request (method, path, query, headers, raw and JSON body) and answers
through ``respond``, which tests replace to script errors (429 with ``Retry-After``, 5xx, 4xx) or
slow answers (``Reply(slow=True)`` holds the request until the client gives up). It runs in a
thread, so it is independent of the event loop under test. ``default_answer`` speaks each API's
success shape, routed by path.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Recorded:
    method: str
    path: str  # without the query
    query: dict[str, str]  # last value of each parameter
    headers: dict[str, str]  # lower-cased names
    raw: bytes
    body: Any  # the decoded JSON, or None
    seq: int  # 1-based position among the requests this server received


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON value; a str is sent as text/plain; bytes as they are (JSON); None → empty body
    headers: dict[str, str] = field(default_factory=dict)
    slow: bool = False  # never answer: wait for the client to close the connection


def default_answer(req: Recorded) -> Reply:
    """Each API's success answer, chosen by the request path; ids derive from ``req.seq``."""
    n = req.seq
    path = req.path
    if re.fullmatch(r"/bot[^/]+/sendMessage", path):
        chat = req.body.get("chat_id")
        return Reply(200, {"ok": True, "result": {"message_id": n, "chat": {"id": chat}, "date": 0,
                                                   "text": req.body.get("text")}})
    if path.endswith("/chat.postMessage"):
        return Reply(200, {"ok": True, "channel": req.body.get("channel"), "ts": f"1700000000.{n:06d}"})
    if re.fullmatch(r".*/channels/[^/]+/messages", path):
        return Reply(200, {"id": f"11{n:016d}", "content": req.body.get("content")})
    if path.endswith("/api/v4/posts"):
        return Reply(201, {"id": f"post{n}", "channel_id": req.body.get("channel_id")})
    if path.endswith("/v2/bot/message/push"):
        return Reply(200, {"sentMessages": [{"id": f"4612{n}", "quoteToken": "q"}]})
    if path.endswith("/v2/send"):
        return Reply(201, {"timestamp": str(1700000000000 + n)})
    if path.endswith("/api/v1/message/text"):
        return Reply(200, {"status": 200, "message": "Message sent!",
                           "data": {"guid": f"p:0/GUID-{n}", "text": req.body.get("message")}})
    if path.endswith("/messages") and isinstance(req.body, dict) and req.body.get("messaging_product"):
        return Reply(200, {"messaging_product": "whatsapp", "contacts": [{"input": req.body.get("to")}],
                           "messages": [{"id": f"wamid.{n}"}]})
    if path.startswith("/v1/spaces/"):  # google chat incoming webhook
        return Reply(200, {"name": f"spaces/AAA/messages/m{n}", "text": req.body.get("text")})
    if path.startswith("/webhookb2/"):  # teams incoming webhook answers a bare "1"
        return Reply(200, "1")
    if path.startswith("/hook"):  # a generic webhook receiver
        return Reply(204)
    return Reply(404, {"error": "not found"})


class FakeApi:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.respond: Callable[[Recorded], Reply] = default_answer
        self.release = threading.Event()  # ends every pending slow answer
        self.disconnected = threading.Event()  # a slow answer saw the client close the connection
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 5  # an idle keep-alive connection cannot hold up the test

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                self._handle("POST")

            def do_GET(self) -> None:
                self._handle("GET")

            def _handle(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                parts = urlsplit(self.path)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                with api._lock:
                    rec = Recorded(method, parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()},
                                   {k.lower(): v for k, v in self.headers.items()}, raw, body,
                                   len(api.requests) + 1)
                    api.requests.append(rec)
                reply = api.respond(rec)
                if reply.slow:
                    self._wait_for_disconnect()
                    return
                if reply.body is None:
                    data, ctype = b"", None
                elif isinstance(reply.body, str):
                    data, ctype = reply.body.encode(), "text/plain; charset=utf-8"
                elif isinstance(reply.body, bytes):
                    data, ctype = reply.body, "application/json"
                else:
                    data, ctype = json.dumps(reply.body).encode(), "application/json"
                self.send_response(reply.status)
                if ctype:
                    self.send_header("content-type", ctype)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.status not in (204, 304):
                    self.send_header("content-length", str(len(data)))
                self.end_headers()
                if data:
                    self.wfile.write(data)

            def _wait_for_disconnect(self) -> None:
                while not api.release.is_set():
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    if readable and not self.connection.recv(1):
                        api.disconnected.set()
                        break
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01})

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeApi:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def closed_port_url() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
