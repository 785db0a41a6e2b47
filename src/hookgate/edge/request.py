"""The per-request view the surfaces work on, and the credential helpers they share."""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from starlette.types import Receive, Scope


@dataclass(slots=True)
class Request:
    scope: Scope
    receive: Receive
    method: str
    path: str  # raw request-target path, dot-segments removed, percent-escapes kept
    query: bytes
    headers: dict[bytes, bytes]  # first occurrence of each header
    peer: str  # normalised socket peer address
    client_ip: str
    request_id: str
    log: dict[str, object] = field(default_factory=dict)  # extra fields for the access line

    def header(self, name: bytes) -> str | None:
        value = self.headers.get(name)
        return None if value is None else value.decode("latin-1")


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
    """A trimmed non-empty header value; the alias only when compat headers are accepted."""
    for name in (primary, alias):
        if name is None:
            continue
        value = req.header(name)
        if value is not None:
            value = value.strip()
            if value:
                return value
    return None


def secrets_equal(presented: str | None, expected: bytes) -> bool:
    """``presented`` comes from a header (latin-1 decoded). Timing-safe: both sides padded to the longer length, compared in constant time, lengths equal."""
    if not presented or not expected:
        return False
    # Header values arrive as bytes decoded with latin-1: encoding back yields the exact bytes sent,
    # which are compared with the UTF-8 bytes of the configured secret.
    given = presented.encode("latin-1", errors="replace")
    size = max(len(given), len(expected))
    same = hmac.compare_digest(given.ljust(size, b"\0"), expected.ljust(size, b"\0"))
    return same and len(given) == len(expected)
