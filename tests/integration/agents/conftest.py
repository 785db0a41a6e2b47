"""A real loopback HTTP server that speaks the OpenAI Chat Completions and Anthropic Messages shapes.

``ModelApi`` records every request (method, path, headers, JSON body) and answers through
``respond``, which tests replace to script errors or slow answers. It runs in a thread, so it is
independent of the event loop under test.
"""

from __future__ import annotations

import json
import select
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any


Answer = tuple[int, Any]  # (status, JSON value or raw str)


def openai_reply(model: str, content: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def anthropic_reply(model: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def openai_error(message: str, kind: str = "server_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


def anthropic_error(message: str, kind: str = "api_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def default_answer(req: Recorded) -> Answer:
    model = str(req.body.get("model", ""))
    if req.path.endswith("/chat/completions"):
        return 200, openai_reply(model, f"hello from {model}")
    if req.path.endswith("/v1/messages"):
        messages = req.body.get("messages") or [{}]
        if messages[0].get("role") != "user":  # as the Messages API refuses it
            return 400, anthropic_error('messages: first message must use the "user" role', "invalid_request_error")
        return 200, anthropic_reply(model, [{"type": "text", "text": f"hello from {model}"}])
    return 404, {"error": {"message": "not found"}}


class ModelApi:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.respond: Callable[[Recorded], Answer] = default_answer
        self.release = threading.Event()  # ends every pending slow answer
        self.disconnected = threading.Event()  # a slow answer saw the client close the connection
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 5  # an idle keep-alive connection cannot hold up server_close

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                rec = Recorded(
                    "POST",
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    json.loads(raw) if raw else None,
                )
                api.requests.append(rec)
                status, payload = api.respond(rec)
                if status == 0:  # "slow": wait for the client to go away (or the test to end)
                    self._wait_for_disconnect()
                    return
                if isinstance(payload, bytes):  # sent as it is, declared JSON (a broken encoder's answer)
                    data, ctype = payload, "application/json"
                else:
                    data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                    ctype = "text/plain" if isinstance(payload, str) else "application/json"
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _wait_for_disconnect(self) -> None:
                while not api.release.is_set():
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    if readable and not self.connection.recv(1):
                        api.disconnected.set()
                        break
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ModelApi:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def model_api() -> Iterator[ModelApi]:
    api = ModelApi().start()
    yield api
    api.stop()
