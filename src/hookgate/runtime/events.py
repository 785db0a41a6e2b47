"""System-event text rules (model.md §4.2): the system-tag sanitiser shared by events and run names."""

from __future__ import annotations

import re

from hookgate.jstext import js_trim

_TAG = re.compile(r"\[\s*(system\s+message|system|assistant|internal)\s*\]", re.IGNORECASE)
_TAG_REPLACEMENT = {
    "system message": "(System Message)",
    "system": "(System)",
    "assistant": "(Assistant)",
    "internal": "(Internal)",
}
# a line starts where the renderer starts one (``prompts.render_events``): after \n, \r or \r\n
_SYSTEM_LINE = re.compile(r"(?:\A|(?<=[\r\n]))([ \t]*)(system):(?=\s|\Z)", re.IGNORECASE)

MAX_PENDING_EVENTS = 20


def _tag(match: re.Match[str]) -> str:
    word = " ".join(match.group(1).lower().split())
    return _TAG_REPLACEMENT[word]


def sanitize_system_text(text: str) -> str:
    """Neutralise spoofed system tags and ``System:`` line prefixes (model.md §4.2)."""
    if "[" not in text and ":" not in text:  # neither pattern can match: the common case, no regex
        return text
    text = _TAG.sub(_tag, text)
    return _SYSTEM_LINE.sub(r"\1\2 (untrusted):", text)


def prepare_event_text(text: str) -> str:
    """The text as the queue stores it: sanitised, then trimmed (empty → not stored)."""
    return js_trim(sanitize_system_text(text))
