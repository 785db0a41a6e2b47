"""Standard Webhooks signing keys, shared by the route auth (verifying) and the webhook channel (signing)."""

from __future__ import annotations

import base64
import binascii


def standard_webhooks_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: ``whsec_<base64>`` decoded, anything else as UTF-8."""
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret[6:], validate=True)
        except (binascii.Error, ValueError):
            return secret.encode("utf-8")
    return secret.encode("utf-8")
