"""Answers and the ASGI plumbing every surface shares: headers, request ids, body reading (README §5, §8)."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.types import Receive, Send
from uvicorn.protocols.http.httptools_impl import HEADER_VALUE_RE, STATUS_LINE

from hookgate.clock import random_bytes

if TYPE_CHECKING:
    from hookgate.edge.request import Request

JSON_TYPE = b"application/json; charset=utf-8"
_encode = msgspec.json.Encoder().encode
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

Headers = list[tuple[bytes, bytes]]


@dataclass(slots=True)
class Answer:
    """A response a handler decided on; the app writes it, logs it and counts it."""

    status: int
    body: bytes | None  # None: no body and no Content-Type (204, and headers-only answers)
    headers: Headers = field(default_factory=list)
    close: bool = False
    content_type: bytes = JSON_TYPE
    reason: str | None = None  # a short machine reason for logs and metrics (never user content)
    after: Callable[[], None] | None = None  # runs once the response is written (or failed to be)


def json_answer(status: int, payload: Any, *, headers: Headers | None = None, close: bool = False,
                reason: str | None = None) -> Answer:
    return Answer(status, _encode(payload), headers or [], close, reason=reason)


def error_b(status: int, text: str, **kw: Any) -> Answer:
    """A Surface B error body ``{"ok":false,"error":…}``."""
    return json_answer(status, {"ok": False, "error": text}, **kw)


def request_id(given: bytes | None) -> str:
    """Echo a well-formed ``X-Request-Id``, else make a new random one (96 bits from the pooled CSPRNG:
    one id tells nothing about another)."""
    if given is not None:
        text = given.decode("latin-1")
        if _REQUEST_ID.fullmatch(text):
            return text
    return random_bytes(12).hex()


def first_headers(headers: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """Header name (lower-case bytes) → its first occurrence."""
    out: dict[bytes, bytes] = {}
    for name, value in headers:
        if name not in out:
            out[name] = value
    return out


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 on the raw path (percent-escapes are kept)."""
    if "/." not in path and not path.startswith("."):
        return path
    output: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == ".":
            if last:
                output.append("")
            continue
        if seg == "..":
            if len(output) > 1:
                output.pop()
            if last:
                output.append("")
            continue
        output.append(seg)
    result = "/".join(output)
    if path.startswith("/") and not result.startswith("/"):
        result = "/" + result
    return result


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    pass


class ClientGone(Exception):
    pass


def _already_read(receive: Receive) -> bool:
    """True when uvicorn (httptools) has already parsed the complete request body: its request cycle
    says no more body follows and the message is waiting. Any other server → False (the timed path)."""
    cycle = getattr(receive, "__self__", None)
    try:
        return cycle.more_body is False and cycle.message_event.is_set()  # type: ignore[union-attr]
    except AttributeError:
        return False


def body_digest(body: bytes) -> str:
    """The body's SHA-256 in hex: logged as ``body_sha256`` (its first 16 characters), and the
    idempotency fingerprint of Surface A."""
    return hashlib.sha256(body).hexdigest()


def body_pending(receive: Receive) -> bool:
    """True while uvicorn (httptools) still expects more of the request body from the client."""
    cycle = getattr(receive, "__self__", None)
    return getattr(cycle, "more_body", False) is True


async def read_body(req: Request, limit: int, timeout: float) -> bytes:
    """The request's whole body within ``limit`` bytes and ``timeout`` seconds from the first read:
    the one hookgate's protocol read with the head, else read through ASGI."""
    body = req.body
    if body is not None:
        if len(body) > limit:
            raise BodyTooLarge
        return body
    assert req.receive is not None
    return await read_asgi_body(req.headers, req.receive, limit, timeout)


async def read_asgi_body(headers: dict[bytes, bytes], receive: Receive, limit: int, timeout: float) -> bytes:
    """Read the whole body within ``limit`` bytes and ``timeout`` seconds from the first read."""
    length = headers.get(b"content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            declared = -1
        if declared > limit:
            raise BodyTooLarge
    if _already_read(receive):
        # The whole request is in the server's buffer: reading it cannot block, so no timer is armed
        # (a timer costs ~4 µs per request, a tenth of a whole wake on the hot path).
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        body: bytes = message.get("body", b"")
        if len(body) > limit:
            raise BodyTooLarge
        return body
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone
                chunk = message.get("body", b"")
                if chunk:
                    size += len(chunk)
                    if size > limit:
                        raise BodyTooLarge
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise BodyTimeout from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class Responder:
    """Writes answers with the common headers of README §5."""

    def __init__(self, hsts: str | None) -> None:
        common: Headers = [
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"),
            (b"cache-control", b"no-store"),
        ]
        if hsts:
            common.append((b"strict-transport-security", hsts.encode("latin-1")))
        self.common = common
        self._common_block = b"".join(name + b": " + value + b"\r\n" for name, value in common)
        # what uvicorn refuses to write (its check on every header of an ASGI response): a configured
        # value with a control character fails each answer alike on both paths (a 500)
        self._common_invalid = any(HEADER_VALUE_RE.search(value) for _, value in common)

    def encode(self, answer: Answer, rid: str, head: bool, default_headers: Headers, keep_alive: bool) -> bytes:
        """``answer`` as the bytes of an HTTP/1.1 response, the same head uvicorn writes for it through
        ``send`` (its ``date`` first, then the headers of ``send``), for hookgate's protocol to write
        itself. ``Connection: close`` when the answer closes or the connection is not kept alive."""
        if self._common_invalid:
            raise RuntimeError("Invalid HTTP header value.")
        return self._head_and_body(answer, rid, head, default_headers, not keep_alive)

    def _head_and_body(self, answer: Answer, rid: str, head: bool, default_headers: Sequence[tuple[bytes, bytes]],
                       close: bool) -> bytes:
        status = answer.status
        parts = [STATUS_LINE[status]]
        for name, value in default_headers:
            parts += (name, b": ", value, b"\r\n")
        parts += (self._common_block, b"x-request-id: ", rid.encode("latin-1"), b"\r\n")
        body = answer.body
        if body is not None:
            parts += (b"content-type: ", answer.content_type, b"\r\ncontent-length: ", str(len(body)).encode(),
                      b"\r\n")
        elif status != 204:
            parts.append(b"content-length: 0\r\n")
        for name, value in answer.headers:
            parts += (name, b": ", value, b"\r\n")
        if answer.close or close:
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        if body and not head:
            parts.append(body)
        return b"".join(parts)

    def closing_bytes(self, answer: Answer, rid: str, default_headers: Sequence[tuple[bytes, bytes]] = ()) -> bytes:
        """``answer`` as a complete HTTP/1.1 response that closes the connection, for the protocol to
        write itself when there is no request to answer through ASGI (a request it could not parse);
        ``default_headers``: the server's (its ``date``), as every other response has them."""
        return self._head_and_body(answer, rid, False, default_headers, True)

    async def send(self, send: Send, answer: Answer, rid: str, head: bool) -> None:
        headers = list(self.common)
        headers.append((b"x-request-id", rid.encode("latin-1")))
        body = answer.body
        if body is not None:
            headers.append((b"content-type", answer.content_type))
            headers.append((b"content-length", str(len(body)).encode()))
        elif answer.status != 204:
            headers.append((b"content-length", b"0"))
        headers.extend(answer.headers)
        if answer.close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if (head or body is None) else body})
