"""Pure name and path normalisations shared by config and the request surfaces.

- agent ids (hooks.md "Terms") and an agent's main session key,
- the hooks base path (hooks.md §1.1 ``path``) and mapping ``match.path`` (§6.1),
- webhook route paths (webhooks.md §1.4 ``normalise``),
- channel names and their aliases (model.md §10.1),
- the template placeholder test (hooks.md §6.3).
"""

from __future__ import annotations

import re

_AGENT_ID_OK = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$", re.IGNORECASE)
_AGENT_ID_BAD_RUN = re.compile(r"[^a-z0-9_-]+")
_PLACEHOLDER = re.compile(r"\{\{[^}]+\}\}")

DEFAULT_AGENT_ID = "main"
DEFAULT_HOOKS_PATH = "/hooks"
DEFAULT_FILE_CHANNEL_PATH = "hookgate-deliveries.jsonl"  # channels.file without a path, beside the config file
ROUTE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
RESERVED_PATHS: tuple[str, ...] = ("/healthz", "/health", "/readyz", "/ready", "/metrics")

CHANNEL_IDS: tuple[str, ...] = (
    "telegram",
    "slack",
    "discord",
    "mattermost",
    "msteams",
    "googlechat",
    "line",
    "whatsapp",
    "signal",
    "irc",
    "webhook",
    "console",
    "file",
    "imessage",
)
CHANNEL_ALIASES: dict[str, str] = {
    "imsg": "imessage",
    "teams": "msteams",
    "gchat": "googlechat",
    "google-chat": "googlechat",
    "lark": "feishu",
    "zl": "zalo",
    "nc": "nextcloud-talk",
    "nc-talk": "nextcloud-talk",
}


def normalize_agent_id(raw: str) -> str:
    """Agent id normalisation: ``"MAIN"`` → ``main``, ``"Bad Id!"`` → ``bad-id``, blank → ``main``."""
    value = raw.strip()
    if not value:
        return DEFAULT_AGENT_ID
    if _AGENT_ID_OK.match(value):
        return value.lower()
    value = _AGENT_ID_BAD_RUN.sub("-", value.lower()).strip("-")[:64]
    return value or DEFAULT_AGENT_ID


def main_session_key(agent_id: str) -> str:
    """An agent's main session (model.md §3): where its wakes queue, its heartbeat runs and isolated
    runs summarise into."""
    return f"agent:{agent_id}:main"


def normalize_hooks_path(raw: str) -> str:
    """``hooks.path``: trim, empty → ``/hooks``, leading ``/``, strip all trailing ``/`` (may give ``""``)."""
    value = raw.strip()
    if not value:
        return DEFAULT_HOOKS_PATH
    if not value.startswith("/"):
        value = "/" + value
    if len(value) > 1:
        value = value.rstrip("/")
    return value


def normalize_route_path(raw: str) -> str:
    """webhooks.md §1.4 ``normalise``: trim, empty → ``/``, leading ``/``, strip ONE trailing ``/``."""
    value = raw.strip()
    if not value:
        return "/"
    if not value.startswith("/"):
        value = "/" + value
    if len(value) > 1 and value.endswith("/"):
        value = value[:-1]
    return value


def unreachable_path(path: str) -> str | None:
    """Why no request can reach a configured path, or ``None``: request paths are matched as their
    raw bytes (escapes not decoded) after their dot segments are removed (RFC 3986 §5.2.4)."""
    if any(not " " < ch <= "~" for ch in path):  # a request-target carries none of these raw
        return ("it holds a space, a control or a non-ASCII character, and request paths are matched "
                "without decoding escapes")
    if any(segment in (".", "..") for segment in path.split("/")):
        return "it holds a dot segment, and request paths are matched with theirs removed"
    if "?" in path or "#" in path:
        return 'it holds a "?" or "#", where a request\'s path ends'
    return None


def normalize_match_path(raw: str) -> str | None:
    """Mapping ``match.path``: trimmed, leading/trailing ``/`` removed; empty → ``None`` (no constraint)."""
    value = raw.strip().strip("/")
    return value or None


def path_is_under(path: str, base: str) -> bool:
    """``path`` equals ``base`` or lies below it (``base + "/"`` prefix)."""
    return path == base or path.startswith(base.rstrip("/") + "/")


def reserved_path_hit(path: str, *, casefold: bool = False) -> bool:
    """The path equals or falls under one of the reserved health/metrics paths (README §6)."""
    probe = path.casefold() if casefold else path
    return any(path_is_under(probe, reserved) for reserved in RESERVED_PATHS)


def normalize_channel_name(raw: str) -> str:
    """A requested channel name: trimmed, lower-cased, mapped through the aliases (model.md §10.1)."""
    value = raw.strip().lower()
    return CHANNEL_ALIASES.get(value, value)


def is_templated(value: str | None) -> bool:
    """The value contains at least one ``{{…}}`` placeholder (hooks.md §6.3)."""
    return value is not None and _PLACEHOLDER.search(value) is not None
