"""Route authentication (webhooks.md §2.3): a header phase (step 6) and a body phase (step 7a).

Every comparison is constant-time; the presented values and the secrets never leave this module.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable

import msgspec

from hookgate.config.settings import RouteAuthSettings
from hookgate.signing import standard_webhooks_key

HeaderGetter = Callable[[bytes], str | None]


def constant_time_equal(presented: bytes, expected: bytes) -> bool:
    """Both sides padded to the longer length and compared in constant time; lengths must match."""
    if not presented or not expected:
        return False
    size = max(len(presented), len(expected))
    same = hmac.compare_digest(presented.ljust(size, b"\0"), expected.ljust(size, b"\0"))
    return same and len(presented) == len(expected)


def _any_secret(presented: str | None, secrets: tuple[str, ...]) -> bool:
    if not presented:
        return False
    given = presented.encode("utf-8", "surrogateescape")
    matched = False
    for secret in secrets:  # try every secret: the time does not tell which one matched
        matched |= constant_time_equal(given, secret.encode("utf-8"))
    return matched


def _scheme_value(header: str | None, scheme: str) -> str | None:
    if header is None:
        return None
    value = header.strip()
    n = len(scheme)
    if len(value) > n and value[:n].lower() == scheme.lower() and value[n] == " ":
        return value[n + 1 :].strip()
    return None


def _prefixed(header: str | None, prefix: str | None) -> str | None:
    if header is None:
        return None
    value = header.strip()
    if prefix:
        if not value.startswith(prefix):
            return None
        value = value[len(prefix) :].strip()
    return value or None


class PendingSignature(msgspec.Struct, frozen=True):
    """What the header phase found for a signature mode, checked against the raw body later."""

    signature: str  # hmac-sha256: hex; standard-webhooks: the raw webhook-signature header
    webhook_id: str = ""
    timestamp: str = ""


def check_headers(
    auth: RouteAuthSettings, header: HeaderGetter, *, compat: bool, now_s: float
) -> PendingSignature | bool:
    """Step 6. ``False`` → 401; ``True`` → authenticated; a ``PendingSignature`` → check the body."""
    if auth.mode == "legacy":
        token = _scheme_value(header(b"authorization"), "bearer")
        if not token:
            for name in (b"x-hookgate-webhook-secret", b"x-openclaw-webhook-secret" if compat else None):
                if name is None:
                    continue
                value = header(name)
                token = value.strip() if value else None
                if token:
                    break
        return _any_secret(token, auth.secrets)
    if auth.mode == "bearer":
        return _any_secret(_scheme_value(header(b"authorization"), auth.prefix or "Bearer"), auth.secrets)
    if auth.mode == "header":
        assert auth.header is not None
        return _any_secret(_prefixed(header(auth.header.encode("latin-1")), auth.prefix), auth.secrets)
    if auth.mode == "hmac-sha256":
        assert auth.header is not None
        signature = _prefixed(header(auth.header.encode("latin-1")), auth.prefix)
        return PendingSignature(signature) if signature else False
    # standard-webhooks
    webhook_id = (header(b"webhook-id") or "").strip()
    timestamp = (header(b"webhook-timestamp") or "").strip()
    signature = (header(b"webhook-signature") or "").strip()
    if not (webhook_id and timestamp and signature):
        return False
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    if abs(int(now_s) - ts) > auth.tolerance_seconds:  # in unix seconds, as the timestamp: ± is symmetric
        return False
    return PendingSignature(signature, webhook_id, timestamp)


def check_body(auth: RouteAuthSettings, pending: PendingSignature, body: bytes) -> bool:
    """Step 7a: the signature over the **raw** body bytes."""
    matched = False
    if auth.mode == "hmac-sha256":
        given = pending.signature.lower().encode("ascii", "replace")
        for secret in auth.secrets:
            expected = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest().encode()
            matched |= constant_time_equal(given, expected)
        return matched
    signed = f"{pending.webhook_id}.{pending.timestamp}.".encode("utf-8", "surrogateescape") + body
    entries = [e.split(",", 1)[1] for e in pending.signature.split() if e.startswith("v1,")]
    for secret in auth.secrets:
        expected = base64.b64encode(hmac.new(standard_webhooks_key(secret), signed, hashlib.sha256).digest())
        for entry in entries:
            matched |= constant_time_equal(entry.encode("ascii", "replace"), expected)
    return matched
