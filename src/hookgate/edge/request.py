"""The per-request view the surfaces work on, and the credential helpers they share."""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from starlette.types import Receive


@dataclass(slots=True)
class Request:
    method: str
    path: str  # raw request-target path, dot-segments removed, percent-escapes kept
    raw_path: bytes  # as sent
    query: bytes
    headers: dict[bytes, bytes]  # first occurrence of each header
    raw_headers: list[tuple[bytes, bytes]]  # every header, names lower-cased, in order
    peer: str  # normalised socket peer address
    client_ip: str
    request_id: str
    start: float  # time.perf_counter() when the request reached the app
    receive: Receive | None  # ASGI: where the body comes from; None when ``body`` holds it all
    body: bytes | None  # the whole body, when the server had read it before the app ran
    surface: str = "other"  # health | hooks | webhooks | other: for the access line and metrics
    log: dict[str, object] = field(default_factory=dict)  # extra fields for the access line

    def header(self, name: bytes) -> str | None:
        value = self.headers.get(name)
        return None if value is None else value.decode("latin-1")

    def text_header(self, name: bytes) -> str | None:
        """A header value as the client wrote it: its bytes read as UTF-8 (invalid bytes → U+FFFD).

        For values that are compared or measured as text — credentials (compared as UTF-8 bytes),
        idempotency keys (at most 256 characters). Trimming a latin-1 reading would cut the last
        byte of a character such as ``à`` (``c3 a0``: ``\xa0`` is whitespace to ``str.strip``)."""
        value = self.headers.get(name)
        return None if value is None else value.decode("utf-8", "replace")

    def credential_header(self, name: bytes) -> str | None:
        """A credential header as text that still holds the bytes sent: valid UTF-8 reads as usual,
        an invalid byte as a lone surrogate (``surrogateescape``), so ``secrets_equal`` compares
        exactly the bytes the client wrote (hooks.md §2 step 5)."""
        value = self.headers.get(name)
        return None if value is None else value.decode("utf-8", "surrogateescape")


def bearer_token(authorization: str | None, scheme: str = "bearer") -> str | None:
    """The non-empty value after ``<scheme> `` (case-insensitive), trimmed; else ``None``."""
    if authorization is None:
        return None
    value = authorization.strip()
    n = len(scheme)
    if len(value) > n and value[:n].lower() == scheme.lower() and value[n] == " ":
        token = value[n + 1 :].strip()
        return token or None
    return None


def header_token(req: Request, primary: bytes, alias: bytes | None) -> str | None:
    """A trimmed non-empty credential header; the alias only when compat headers are accepted."""
    for name in (primary, alias):
        if name is None:
            continue
        value = req.credential_header(name)
        if value is not None:
            value = value.strip()
            if value:
                return value
    return None


def secrets_equal(presented: str | None, expected: bytes) -> bool:
    """``presented`` comes from ``Request.credential_header``: the bytes sent, compared with the
    configured secret's UTF-8 bytes. Timing-safe: both sides padded to the longer length, compared in
    constant time, lengths equal."""
    if not presented or not expected:
        return False
    given = presented.encode("utf-8", "surrogateescape")
    size = max(len(given), len(expected))
    same = hmac.compare_digest(given.ljust(size, b"\0"), expected.ljust(size, b"\0"))
    return same and len(given) == len(expected)
