"""The channel adapter protocol (model.md §10.2): one message shape, one error, one factory.

    HookgateError
     └── DeliveryError        a failed send; ``retryable`` (connection errors, timeouts, HTTP 408,
                              429 and 5xx), ``http_status`` when the channel answered, and
                              ``retry_after`` (seconds) when it asked for a pause

An adapter sends the *parts* of one reply (``split_text`` at the channel's limit) to one target, in
order, starting at ``start`` (parts before it were sent by an earlier attempt), and reports each part
it sent through ``sent`` so that the delivery job can record progress durably: a retry never sends a
part twice. Adapters do not retry, sleep or touch the store; the delivery job (``runtime.deliveries``)
does all of that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from hookgate.errors import HookgateError

# Every delivery default and limit, in one table (model.md §10.2, §10.4; operations.md §6).
HTTP_TIMEOUT_SECONDS = 15.0
RETRY_WAITS_SECONDS = (1.0, 5.0, 30.0, 120.0, 600.0)
RETRY_JITTER = 0.2
RETRY_AFTER_MAX_SECONDS = 600.0
ERROR_MAX_CHARS = 300
MAX_CHARS: dict[str, int | None] = {
    "telegram": 4096,
    "slack": 4000,
    "discord": 2000,
    "mattermost": 16383,
    "msteams": 28000,
    "googlechat": 4096,
    "line": 5000,
    "whatsapp": 4096,
    "signal": 4000,
    "imessage": 20000,
    "irc": None,  # per line: IRC_LINE_MAX_BYTES
    "webhook": None,
    "console": None,
    "file": None,
}
IRC_LINE_MAX_BYTES = 400


class DeliveryError(HookgateError):
    """A send that failed; ``message`` is the delivery's ``lastError`` (never a secret or the text)."""

    def __init__(self, message: str, *, retryable: bool, http_status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message[:ERROR_MAX_CHARS])
        self.retryable = retryable
        self.http_status = http_status
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Envelope:
    """What every adapter may use besides the text (the webhook, console and file channels send it)."""

    delivery_id: str
    run_id: str
    agent_id: str
    session_key: str
    created_at: int  # ms since the epoch: when the delivery was created


# Called after each part is sent: (index of the part, the channel's message id or None, the HTTP status
# of the chat API's answer or None for channels that are not HTTP).
SentCallback = Callable[[int, str | None, int | None], Awaitable[None]]


class ChannelAdapter(Protocol):
    channel: str

    def split(self, text: str) -> list[str]:
        """The parts to send, in order (one part when the channel has no limit)."""

    async def send(self, to: str, parts: Sequence[str], start: int, envelope: Envelope, sent: SentCallback) -> None:
        """Send ``parts[start:]`` to ``to`` in order; await ``sent(i, message_id, http_status)`` after each.

        Raises ``DeliveryError`` at the first part that fails (earlier parts stay sent).
        """

    async def aclose(self) -> None: ...


def split_text(text: str, limit: int | None) -> list[str]:
    """Split at the last blank line, else newline, else space before ``limit`` (model.md §10.2).

    The separator where a cut is made is dropped; a run of text with no separator is cut hard at
    ``limit``. Parts are never empty; text within the limit is one part, unchanged.
    """
    if limit is None or len(text) <= limit:
        return [text]
    parts: list[str] = []
    rest = text
    while len(rest) > limit:
        for sep in ("\n\n", "\n", " "):
            cut = rest.rfind(sep, 0, limit + len(sep))  # the part before the cut fits the limit
            if cut > 0:
                head, rest = rest[:cut], rest[cut + len(sep):]
                break
        else:
            head, rest = rest[:limit], rest[limit:]
        head = head.rstrip()
        if head:
            parts.append(head)
        rest = rest.lstrip("\n")
    if rest.strip():
        parts.append(rest.rstrip())
    return parts or [text[:limit]]
