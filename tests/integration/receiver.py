"""A loopback HTTP receiver for delivery tests: records each POST and answers from a script."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Receiver:
    """A loopback HTTP server: records each POST (path, headers, JSON) and answers from ``script``."""

    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)  # answers in order, then 200
    received: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    url: str = ""
    delay: float = 0.0  # seconds each answer waits (a slow chat API)
    always: int | None = None  # every answer's status (a refusing API), instead of the script
    # the answer's JSON from the request's headers and body (an API that quotes what it got)
    reply: Callable[[dict[str, str], Any], Any] | None = None

    def answer(self) -> tuple[int, dict[str, str]]:
        if self.always is not None:
            return self.always, {}
        return self.script.pop(0) if self.script else (200, {})


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    rec = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            got = {k.lower(): v for k, v in self.headers.items()}
            doc = json.loads(body)
            rec.received.append((self.path, got, doc))
            if rec.delay:
                time.sleep(rec.delay)
            status, headers = rec.answer()
            answer = rec.reply(got, doc) if rec.reply else {"ok": status < 300, "id": f"m{len(rec.received)}"}
            payload = json.dumps(answer).encode()
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            try:
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sender gave up waiting (a delayed answer past its timeout): nothing to tell it

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    rec.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()


