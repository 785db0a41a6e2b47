"""Reply rules (model.md §5.5, §5.6, §6.4; webhooks.md §5.4): acks, silent replies and summaries."""

from __future__ import annotations

import re

from hookgate.runtime.events import sanitize_system_text

HEARTBEAT_TOKEN = "HEARTBEAT_OK"
NO_REPLY_TOKEN = "NO_REPLY"
DEFAULT_ACK_MAX_CHARS = 300
SUMMARY_MAX_CHARS = 2000
ELLIPSIS = "…"

_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>|<!--.*?-->", re.DOTALL)
_MARKUP_CHARS = str.maketrans("", "", "*_`~")
_WHITESPACE = re.compile(r"\s+")


def _strip_markup(text: str) -> str:
    """HTML tags and the characters ``*_`~`` removed, except the ``_`` inside ``HEARTBEAT_OK`` itself."""
    parts = _HTML_TAG.sub("", text).split(HEARTBEAT_TOKEN)
    return HEARTBEAT_TOKEN.join(part.translate(_MARKUP_CHARS) for part in parts)


def is_heartbeat_ack(reply: str, ack_max_chars: int = DEFAULT_ACK_MAX_CHARS) -> bool:
    """§6.4: after removing HTML tags and ``*_`~`` and trimming, the reply starts or ends with
    ``HEARTBEAT_OK`` and at most ``ack_max_chars`` characters remain once that token is removed."""
    text = _strip_markup(reply).strip()
    candidates: list[str] = []
    if text.startswith(HEARTBEAT_TOKEN):
        candidates.append(text[len(HEARTBEAT_TOKEN) :])
    if text.endswith(HEARTBEAT_TOKEN):
        candidates.append(text[: len(text) - len(HEARTBEAT_TOKEN)])
    return any(len(rest.strip()) <= ack_max_chars for rest in candidates)


def is_silent(reply: str | None, ack_max_chars: int = DEFAULT_ACK_MAX_CHARS) -> bool:
    """§5.5: empty (after trimming), starting with ``NO_REPLY``, or a heartbeat ack → never delivered."""
    text = (reply or "").strip()
    return not text or text.startswith(NO_REPLY_TOKEN) or is_heartbeat_ack(text, ack_max_chars)


def cut(text: str, limit: int = SUMMARY_MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters plus ``…`` when longer (exactly ``limit`` stays as is)."""
    return text if len(text) <= limit else text[:limit] + ELLIPSIS


def summary_text(reply_or_error: str | None, status: str) -> str:
    """``<summary>`` of §5.6: ``ok`` → the reply trimmed and cut; else the error text trimmed;
    an empty result → the status word."""
    text = (reply_or_error or "").strip()
    if status == "ok":
        text = cut(text)
    return text or status


def _summary_line(name: str, status: str | None, summary: str) -> str:
    label = sanitize_system_text(name).strip()
    head = f"Hook {label}" if status is None else f"Hook {label} ({status})"
    return f"{head}: {summary}".strip()


def hook_summary_event(
    *,
    name: str,
    status: str,
    reply: str | None,
    error: str | None,
    deliver: bool,
    delivered: bool | None,
    has_target: bool,
    ack_max_chars: int = DEFAULT_ACK_MAX_CHARS,
) -> str | None:
    """The main-session summary event of a finished hook run (model.md §5.6 table), or ``None``.

    ====================================  ======================================
    status ≠ ``ok`` (whatever ``deliver``)  ``Hook <name> (<status>): <error>``
    ``ok``, ``deliver`` false               none
    ``ok``, silent reply                    none
    ``ok``, delivered or still pending      none
    ``ok``, no target / dead-lettered       ``Hook <name>: <reply>``
    ====================================  ======================================

    ``delivered``: ``True`` delivered, ``False`` dead-lettered, ``None`` still pending (no event now;
    the delivery layer posts :func:`dead_letter_summary` if it dead-letters). ``has_target=False``
    means the reply could not be routed ("not delivered") and is summarised at completion.
    """
    if status != "ok":
        return _summary_line(name, status, summary_text(error, status))
    if not deliver or is_silent(reply, ack_max_chars):
        return None
    if has_target and delivered is not False:
        return None
    return _summary_line(name, None, summary_text(reply, status))


def dead_letter_summary(name: str, reply: str) -> str:
    """``Hook <name>: <summary>`` for an ``ok`` reply whose delivery was dead-lettered (§5.6)."""
    return _summary_line(name, None, summary_text(reply, "ok"))


def task_terminal_summary(reply: str) -> str:
    """A task's ``terminalSummary`` (webhooks.md §5.4): whitespace collapsed, cut to 2 000 + ``…``."""
    return cut(_WHITESPACE.sub(" ", reply).strip())
