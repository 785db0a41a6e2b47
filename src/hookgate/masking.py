"""What hookgate keeps of a remote API's error text: the credentials it sent that API, masked.

A chat API or a model API may quote what it was sent (``Incorrect API key provided: sk-…``); its
error text becomes a delivery's ``lastError``, a run's error and the summary the main session's model
reads. Both adapters' errors go through the same two helpers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MASK = "***"
CREDENTIAL_MIN_CHARS = 8  # a header value this long may be a credential: masked where an error quotes it


def mask(text: str, secrets: Sequence[str]) -> str:
    """Every occurrence of every secret value replaced by ``***`` (longest first)."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    return text


def header_credentials(headers: Iterable[tuple[str, str]], plain: frozenset[str]) -> list[str]:
    """The values of the headers sent that may be credentials: every header not in ``plain`` (lower-case
    names), and for ``<scheme> <token>`` (``Bearer``) the token alone too. A value shorter than
    ``CREDENTIAL_MIN_CHARS`` (``X-Api-Version: 2``) is no credential, and masking it would garble the error."""
    quoted = [v for k, v in headers if k.lower() not in plain]
    quoted += [v.split(" ", 1)[1] for v in quoted if " " in v.strip()]
    return [v for v in quoted if len(v.strip()) >= CREDENTIAL_MIN_CHARS]
