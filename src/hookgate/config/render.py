"""Secret-free views of the effective config: ``config show``, the config hash, the summary line.

Which values are secrets is read from the schema (``Secret`` nodes), never guessed from key names.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from hookgate.config.schema import CONFIG
from hookgate.config.settings import Settings
from hookgate.config.validate import Arr, Map, Node, Obj, OneOf, Secret, Sensitive, Tagged

REDACTED = "[redacted]"
_URL_USERINFO = re.compile(r"(://[^:/@\s]*:)(\S*)")
_PORT_THEN_PATH = re.compile(r"\d+(?:[/?#]|$)")
# in a URI's query a parameter ends at "&"; in a key=value DSN a value ends at whitespace (or is quoted)
# ``password`` and libpq's ``sslpassword`` (the passphrase of the client key); in a URL's query also
# the parameters services authenticate a webhook URL with (``?token=``, ``?key=``, ``?sig=``, …)
_QUERY_PASSWORD = re.compile(
    r"([?&](?:(?:ssl)?password|pass|token|access_token|auth|api_?key|key|secret|client_secret|sig|signature)=)"
    r"([^&#\s]*)",
    re.IGNORECASE,
)
_KV_PASSWORD = re.compile(r"(?<![?&])(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def _mask_userinfo(match: re.Match[str]) -> str:
    """``user:`` and what follows it, with the password masked when there is one.

    The authority ends at the first ``/``, ``?`` or ``#``; an ``@`` inside it ends the userinfo (at the
    last one). Without one there, a password holding a raw ``/``, ``?`` or ``#`` (libpq takes some
    unescaped) runs to the last ``@`` before the ``/`` that follows the first ``@`` — unless what
    follows the ``:`` is a port and a path (``host:8443/users/@me`` has no password)."""
    rest = match[2]
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        return f"{match[1]}***{rest[authority.rfind('@'):]}"
    first_at = rest.find("@")
    if first_at < 0 or _PORT_THEN_PATH.match(rest):
        return match[0]
    slash = rest.find("/", first_at)
    last_at = (rest if slash < 0 else rest[:slash]).rfind("@")
    return f"{match[1]}***{rest[last_at:]}"


def mask_url_password(value: str) -> str:
    """``postgresql://u:secret@h/db`` → ``postgresql://u:***@h/db``; also ``password=…`` in a DSN,
    and ``password``, ``token``, ``key``, ``sig`` and their kin in a URI's query (only those parameters:
    the others stay)."""
    value = _QUERY_PASSWORD.sub(r"\1***", value)
    value = _URL_USERINFO.sub(_mask_userinfo, value)
    return _KV_PASSWORD.sub(r"\1***", value)


def _redact(node: Node, value: Any, shown: bool = True) -> Any:
    """``shown``: for ``config show``; else for the hash, which keeps ``Sensitive`` values (they are
    no secret inputs, and a changed header or env value must change ``configHash``)."""
    if isinstance(node, Sensitive):
        if not shown:
            return value
        if isinstance(value, str):
            return mask_url_password(value) if node.url else REDACTED
        return _redact(node.inner, value, shown)
    if isinstance(node, Secret):
        if isinstance(value, str):
            return mask_url_password(value) if node.url else REDACTED
        return value
    if isinstance(node, Obj) and isinstance(value, dict):
        return {k: _redact(node.fields[k].node, v, shown) if k in node.fields else v for k, v in value.items()}
    if isinstance(node, Map) and isinstance(value, dict):
        return {k: _redact(node.value, v, shown) for k, v in value.items()}
    if isinstance(node, Arr) and isinstance(value, list):
        return [_redact(node.item, v, shown) for v in value]
    if isinstance(node, Tagged) and isinstance(value, dict):
        variant = node.variants.get(str(value.get(node.tag)))
        return _redact(variant, value, shown) if variant is not None else value
    if isinstance(node, OneOf):
        return _redact(node.obj if isinstance(value, dict) else node.string, value, shown)
    return value


def redact_tree(effective: dict[str, Any], *, shown: bool = True) -> dict[str, Any]:
    """The effective config with secret strings redacted and URL passwords masked (``shown=False``:
    the hash's view, which keeps the values that are no secret inputs)."""
    out = _redact(CONFIG, effective, shown)
    assert isinstance(out, dict)
    return out


def config_hash(effective: dict[str, Any]) -> str:
    """First 16 hex of SHA-256 over the canonical JSON of the secret-free effective config."""
    canonical = json.dumps(redact_tree(effective, shown=False), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def redacted_effective(settings: Settings) -> dict[str, Any]:
    """What ``hookgate config show`` prints (operations.md §1.3)."""
    return redact_tree(settings.effective)


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def summary_line(settings: Settings) -> str:
    """``hooks: enabled, 1 mapping, 1 preset; routes: 2 active, 0 skipped; agents: 2; …``."""
    hooks = settings.hooks
    explicit = sum(1 for m in hooks.mappings if m.from_preset is None)
    state = "enabled" if hooks.enabled else "disabled"
    routes = settings.webhooks.routes
    skipped = sum(1 for r in routes if r.skipped_reason is not None)
    return (
        f"hooks: {state}, {_count(explicit, 'mapping')}, {_count(len(hooks.presets), 'preset')}; "
        f"routes: {len(routes) - skipped} active, {skipped} skipped; "
        f"agents: {len(settings.agents.agents)}; "
        f"channels: {len(settings.enabled_channel_ids())}; "
        f"store: {settings.storage.backend}"
    )
