"""The HTTP channels (model.md §10.2): one small class per chat API over one JSON poster.

    HttpAdapter            posts one JSON request per part and classifies the answer (§10.4)
     ├── TelegramAdapter   POST <apiBaseUrl>/bot<token>/sendMessage        ok: true, result.message_id
     ├── SlackAdapter      POST <apiBaseUrl>/chat.postMessage, Bearer      ok: true, ts
     ├── DiscordAdapter    POST <apiBaseUrl>/channels/<to>/messages, Bot   id
     ├── MattermostAdapter POST <baseUrl>/api/v4/posts, Bearer             id
     ├── MsTeamsAdapter    POST <webhooks[to]>                             (no id)
     ├── GoogleChatAdapter POST <webhooks[to]>                             name
     ├── LineAdapter       POST <apiBaseUrl>/v2/bot/message/push, Bearer   sentMessages[0].id
     ├── WhatsAppAdapter   POST <apiBaseUrl>/<phoneNumberId>/messages      messages[0].id
     ├── SignalAdapter     POST <baseUrl>/v2/send                          timestamp
     ├── WebhookAdapter    POST <url>, Standard Webhooks signature         (no id), any 2xx
     └── ImessageAdapter   POST <serverUrl>/api/v1/message/text?password=  status: 200, data.guid

Failures become ``DeliveryError``: connection errors, timeouts, HTTP 408, 429 and 5xx are retryable
(with ``retry_after`` from ``Retry-After`` or Telegram's ``parameters.retry_after``); any other
answer is not. Error texts name the channel, the status and the API's own description (cut short,
with every configured secret value masked); never a URL (tokens live in some), the message text or
an httpx exception's text.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import hashlib
import hmac
import json
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import httpx
import msgspec

from hookgate import __version__
from hookgate.channels.base import (
    HTTP_TIMEOUT_SECONDS,
    MAX_CHARS,
    DeliveryError,
    Envelope,
    SentCallback,
    split_text,
)
from hookgate.config.schema import CHANNEL_SCHEMAS
from hookgate.config.settings import ChannelSettings
from hookgate.config.validate import MISSING
from hookgate.jsonbody import InvalidJSON, decode_answer
from hookgate.masking import CREDENTIAL_MIN_CHARS, header_credentials, mask
from hookgate.obs.logging import clean_text
from hookgate.signing import standard_webhooks_key

DESCRIPTION_MAX_CHARS = 200
USER_AGENT = f"hookgate/{__version__}"
RETRYABLE_STATUSES = frozenset({408, 429})
ECHO_MASK = "[text]"  # where an error quoted the delivered text


# --- pure helpers (unit-tested) -------------------------------------------------------------------

def retryable_status(status: int) -> bool:
    """model.md §10.4: HTTP 408, 429 and 5xx are worth another attempt; anything else is final."""
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


def parse_retry_after(value: str | None, now: float) -> float | None:
    """A ``Retry-After`` value (delay seconds or an HTTP-date) as seconds from ``now``; None if unusable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
        if seconds < 0:  # delay-seconds are non-negative (RFC 9110 §10.2.3): no usable value
            return None
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def clip(text: str, limit: int = DESCRIPTION_MAX_CHARS) -> str:
    """Control characters → space, whitespace collapsed, cut to ``limit`` characters (an ellipsis marks
    the cut): a remote API's text reaches logs and the stored ``lastError``."""
    flat = clean_text(text, limit=len(text))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


_PLAIN_HEADERS = frozenset({"content-type", "user-agent", "webhook-id", "webhook-timestamp"})
URL_PIECE_MIN_CHARS = 16  # a secret URL's path segment or query value this long is masked on its own
ECHO_MIN_CHARS = 12  # a quoted piece of the text this long is masked wherever it is in an error
ECHO_SHORT_MIN_CHARS = 8  # a shorter text is masked only whole, and only from this length
ECHO_SCAN_CHARS = 100_000  # an API quotes the start of what it got: the rest of a huge part is not read


def _quoted_forms(text: str, message: str) -> list[str]:
    """The forms ``message`` may quote ``text`` in, each normalised as ``clip`` leaves a message: the
    text as it is; and, only when the message holds a backslash (else no escaped form can add a
    match), the text as a JSON string's contents — escaped once or twice, non-ASCII as it is or as
    ``\\uXXXX`` (Python's ``json.dumps``), ``<``, ``>`` and ``&`` as ``\\u003c``… (Go's encoder), ``/`` as
    ``\\/`` (PHP's). Each form is searched in its first ``ECHO_SCAN_CHARS`` characters."""
    head = text[: 2 * ECHO_SCAN_CHARS]  # (whitespace runs shrink it)
    forms = [head]
    if "\\" in message:
        source = head[:ECHO_SCAN_CHARS]
        escaped = json.dumps(source, ensure_ascii=False)[1:-1]  # non-ASCII as it is
        ascii_escaped = json.dumps(source)[1:-1]  # non-ASCII as \\uXXXX
        forms += [escaped, json.dumps(escaped[:ECHO_SCAN_CHARS], ensure_ascii=False)[1:-1],
                  ascii_escaped, json.dumps(ascii_escaped[:ECHO_SCAN_CHARS])[1:-1]]
        if "<" in source or ">" in source or "&" in source:
            forms.append(escaped.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
        if "/" in source:
            forms.append(escaped.replace("/", "\\/"))
    flat = [clean_text(form[: 2 * ECHO_SCAN_CHARS], limit=ECHO_SCAN_CHARS) for form in forms]
    return list(dict.fromkeys(flat))  # the same form once (a text with nothing to escape)


def mask_echo(message: str, text: str) -> str:
    """``message`` without the delivered ``text``: every stretch of it that is covered by windows of
    ``ECHO_MIN_CHARS`` characters found in the text, as it is or in an escaped form an API may quote
    it in (``_quoted_forms``), becomes ``[text]`` (whole quotes, first lines, pieces). The text is
    normalised as the message was (``clip``: control characters and whitespace runs → one space).
    ``len(message)`` substring searches per form: linear in the text, on the error path only."""
    forms = _quoted_forms(text, message)
    flat = forms[0]
    if len(flat) < ECHO_MIN_CHARS:  # a short text is masked only whole, and only from its own 8 characters
        if len(flat) >= ECHO_SHORT_MIN_CHARS:
            for form in forms:
                message = message.replace(form, ECHO_MASK)
        return message
    covered = bytearray(len(message))
    for i in range(len(message) - ECHO_MIN_CHARS + 1):
        window = message[i:i + ECHO_MIN_CHARS]
        if any(window in form for form in forms):
            covered[i:i + ECHO_MIN_CHARS] = b"\x01" * ECHO_MIN_CHARS
    if not any(covered):
        return message
    out: list[str] = []
    for i, char in enumerate(message):
        if not covered[i]:
            out.append(char)
        elif i == 0 or not covered[i - 1]:
            out.append(ECHO_MASK)
    return "".join(out)


def dig(value: Any, *path: str | int) -> Any:
    """``value[p0][p1]…`` through dicts and lists; None as soon as a step is missing."""
    for step in path:
        if isinstance(step, int):
            if not isinstance(value, list) or not -len(value) <= step < len(value):
                return None
        elif not isinstance(value, dict):
            return None
        value = value[step] if isinstance(step, int) else value.get(step)
    return value


def describe(answer: Any) -> str | None:
    """The API's own error text from a decoded JSON answer, if it has one in a usual place."""
    for path in (("description",), ("error", "message"), ("error", "error"), ("error",), ("message",)):
        found = dig(answer, *path)
        if isinstance(found, str) and found.strip():
            return found
    return None


def _as_id(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    return str(value)


# --- the shared poster ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Request:
    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] | None = None


class HttpAdapter:
    """Post each part as one JSON request; subclasses say what to post and where the id is."""

    channel: str
    id_path: tuple[str | int, ...] | None = None  # where the answer carries the message id
    ok_flag = False  # the API answers 2xx with ``ok: false`` on errors (telegram, slack)
    retryable_errors: frozenset[str] = frozenset()  # ``error`` values of an ok: false that are transient

    def __init__(self, cfg: ChannelSettings, http: httpx.AsyncClient, *, timeout: float = HTTP_TIMEOUT_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.http = http
        self.timeout = timeout
        self.clock = clock

    def split(self, text: str) -> list[str]:
        return split_text(text, MAX_CHARS[self.channel])

    async def aclose(self) -> None:
        return None  # the client belongs to the worker

    async def send(self, to: str, parts: Sequence[str], start: int, envelope: Envelope, sent: SentCallback) -> None:
        for index in range(start, len(parts)):
            request = self.build(to, parts[index], envelope)
            response = await self._post(request)
            try:
                message_id = self.accept(response)
            except DeliveryError as exc:
                raise self._scrubbed(exc, parts[index], request) from None
            await sent(index, message_id, response.status_code)

    def _scrubbed(self, exc: DeliveryError, text: str, request: Request) -> DeliveryError:
        """A remote API's error as hookgate keeps and logs it: the API may quote what it was sent, so
        the request's credential headers (configured ones included) and the text are taken out."""
        quoted = header_credentials(request.headers.items(), _PLAIN_HEADERS)
        message = mask_echo(mask(exc.message, quoted), text)
        if message == exc.message:
            return exc
        return DeliveryError(message, retryable=exc.retryable, http_status=exc.http_status,
                             retry_after=exc.retry_after)

    # -- what a subclass provides ------------------------------------------------------------------

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        raise NotImplementedError

    def success(self, answer: Any, response: httpx.Response) -> str | None:
        """A 2xx answer: the message id, or ``DeliveryError`` when the body says it failed."""
        if self.ok_flag and (not isinstance(answer, dict) or answer.get("ok") is not True):
            error = describe(answer) or "unexpected answer"
            retryable = error in self.retryable_errors
            retry_after = self._retry_after(answer, response) if retryable else None
            raise self.error(self._clean(error), retryable=retryable, http_status=response.status_code,
                             retry_after=retry_after)
        return _as_id(dig(answer, *self.id_path)) if self.id_path else None

    def body_retry_after(self, answer: Any) -> float | None:
        return None

    # -- shared plumbing ---------------------------------------------------------------------------

    def error(self, detail: str, *, retryable: bool, http_status: int | None = None,
              retry_after: float | None = None) -> DeliveryError:
        return DeliveryError(f"{self.channel}: {detail}", retryable=retryable, http_status=http_status,
                             retry_after=retry_after)

    def secret(self, key: str, *, required: bool = True) -> str | None:
        """A resolved secret input; an absent required one or an unresolved one fails the send."""
        source = self.cfg.secrets.get(key)
        if source is None:
            if required:
                raise self.error(f"{key} is not configured", retryable=False)
            return None
        if source.value is None:
            raise self.error(f"{key}: {source.error or 'unresolved'}", retryable=False)
        return source.value

    def required_secret(self, key: str) -> str:
        value = self.secret(key)
        assert value is not None
        return value

    def option(self, key: str) -> str:
        """A string option, else its schema default; neither → a non-retryable failure."""
        value = self.cfg.options.get(key)
        if value is None:
            schema = CHANNEL_SCHEMAS[self.channel].fields.get(key)
            default = schema.default if schema is not None else MISSING
            value = None if default is MISSING else default
        if not isinstance(value, str) or not value.strip():
            raise self.error(f"{key} is not configured", retryable=False)
        return value.strip()

    def base_url(self, key: str) -> str:
        return self.option(key).rstrip("/")

    def json_request(self, url: str, payload: Any, *, bearer: str | None = None,
                     params: dict[str, str] | None = None) -> Request:
        headers = {"content-type": "application/json; charset=utf-8", "user-agent": USER_AGENT}
        if bearer is not None:
            headers["authorization"] = f"Bearer {bearer}"
        return Request(url, msgspec.json.encode(payload), headers, params)

    async def _post(self, request: Request) -> httpx.Response:
        # ``from None`` throughout: an httpx exception's text (and its chain) holds the URL.
        try:
            async with asyncio.timeout(self.timeout):  # the whole exchange, not each phase
                return await self.http.post(request.url, content=request.body, headers=request.headers,
                                            params=request.params, timeout=self.timeout)
        except (httpx.TimeoutException, TimeoutError):
            raise self.error("timeout", retryable=True) from None
        except httpx.UnsupportedProtocol:
            raise self.error("unsupported URL scheme", retryable=False) from None
        except httpx.InvalidURL:
            raise self.error("invalid URL", retryable=False) from None
        except httpx.LocalProtocolError:  # the request itself cannot be sent: every retry would fail alike
            raise self.error("request refused by the HTTP client", retryable=False) from None
        except httpx.TransportError:
            raise self.error("connection error", retryable=True) from None

    def accept(self, response: httpx.Response) -> str | None:
        answer = _decode(response)
        status = response.status_code
        if 200 <= status <= 299:
            return self.success(answer, response)
        retryable = retryable_status(status)
        detail = f"HTTP {status}"
        text = describe(answer) if answer is not None else _plain_text(response)
        if text:
            detail += f": {self._clean(text)}"
        raise self.error(detail, retryable=retryable, http_status=status,
                         retry_after=self._retry_after(answer, response) if retryable else None)

    def _retry_after(self, answer: Any, response: httpx.Response) -> float | None:
        header = parse_retry_after(response.headers.get("retry-after"), self.clock())
        return header if header is not None else self.body_retry_after(answer)

    def _clean(self, text: str) -> str:
        secrets: list[str] = []
        for source in self.cfg.secrets.values():
            if source.value:
                secrets += (source.value, *secret_url_pieces(source.value))
        return clip(mask(text, secrets))


def secret_url_pieces(value: str) -> list[str]:
    """The parts of a secret URL (a Teams or Google Chat webhook) an API error may quote on their own:
    its path with the query, the query, and each path segment and query value of
    ``URL_PIECE_MIN_CHARS`` or more, as sent and percent-decoded (``?key=…&token=…`` and Teams' ids are
    the credential, not only the whole URL; words like ``IncomingWebhook`` stay readable)."""
    if "://" not in value:
        return []
    try:
        parts = urlsplit(value)
    except ValueError:
        return []
    whole = [parts.path + ("?" + parts.query if parts.query else ""), parts.query]
    pieces = parts.path.split("/") + [p.split("=", 1)[-1] for p in parts.query.split("&")]
    pieces += [unquote(p) for p in parts.path.split("/")]
    pieces += [v for _, v in parse_qsl(parts.query, keep_blank_values=True)]
    return [p for p in dict.fromkeys(whole) if len(p) >= CREDENTIAL_MIN_CHARS] + [
        p for p in dict.fromkeys(pieces) if len(p) >= URL_PIECE_MIN_CHARS]


def _decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return decode_answer(response.content)
    except InvalidJSON:
        return None


def _plain_text(response: httpx.Response) -> str | None:
    """A short text/plain error body (Teams answers like that); HTML pages say nothing useful."""
    if not response.headers.get("content-type", "").lower().startswith("text/plain"):
        return None
    return response.content[:1000].decode("utf-8", "replace").strip() or None


# --- the channels ---------------------------------------------------------------------------------

class TelegramAdapter(HttpAdapter):
    channel = "telegram"
    ok_flag = True
    id_path = ("result", "message_id")

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        token = self.required_secret("botToken")
        return self.json_request(f"{self.base_url('apiBaseUrl')}/bot{token}/sendMessage",
                                 {"chat_id": to, "text": text})

    def body_retry_after(self, answer: Any) -> float | None:
        value = dig(answer, "parameters", "retry_after")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            return None  # as a negative Retry-After: no usable value, the usual wait
        return float(value)


class SlackAdapter(HttpAdapter):
    channel = "slack"
    ok_flag = True
    retryable_errors = frozenset({"ratelimited"})
    id_path = ("ts",)

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        return self.json_request(f"{self.base_url('apiBaseUrl')}/chat.postMessage",
                                 {"channel": to, "text": text}, bearer=self.required_secret("botToken"))


class DiscordAdapter(HttpAdapter):
    channel = "discord"
    id_path = ("id",)

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        token = self.required_secret("botToken")
        request = self.json_request(f"{self.base_url('apiBaseUrl')}/channels/{quote(to, safe='')}/messages",
                                    {"content": text})
        # Discord wants a bot User-Agent of this form and the ``Bot`` scheme.
        request.headers.update({"authorization": f"Bot {token}",
                                "user-agent": f"DiscordBot (hookgate, {__version__})"})
        return request


class MattermostAdapter(HttpAdapter):
    channel = "mattermost"
    id_path = ("id",)

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        return self.json_request(f"{self.base_url('baseUrl')}/api/v4/posts",
                                 {"channel_id": to, "message": text}, bearer=self.required_secret("token"))


class _WebhookMapAdapter(HttpAdapter):
    """Incoming webhooks: ``webhooks`` maps each target to its own secret URL."""

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        key = f"webhooks.{to}"
        if key not in self.cfg.secrets:
            raise self.error(f"unknown target {to}", retryable=False)
        return self.json_request(self.required_secret(key), {"text": text})


class MsTeamsAdapter(_WebhookMapAdapter):
    channel = "msteams"


class GoogleChatAdapter(_WebhookMapAdapter):
    channel = "googlechat"
    id_path = ("name",)  # the created message's resource name, spaces/<s>/messages/<m>


class LineAdapter(HttpAdapter):
    channel = "line"
    id_path = ("sentMessages", 0, "id")

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        return self.json_request(f"{self.base_url('apiBaseUrl')}/v2/bot/message/push",
                                 {"to": to, "messages": [{"type": "text", "text": text}]},
                                 bearer=self.required_secret("channelAccessToken"))


class WhatsAppAdapter(HttpAdapter):
    channel = "whatsapp"
    id_path = ("messages", 0, "id")

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        token = self.required_secret("accessToken")
        phone_number_id = quote(self.option("phoneNumberId"), safe="")
        return self.json_request(
            f"{self.base_url('apiBaseUrl')}/{phone_number_id}/messages",
            {"messaging_product": "whatsapp", "to": to, "type": "text", "text": {"body": text}},
            bearer=token,
        )


class SignalAdapter(HttpAdapter):
    channel = "signal"
    id_path = ("timestamp",)

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        return self.json_request(f"{self.base_url('baseUrl')}/v2/send",
                                 {"message": text, "number": self.option("number"), "recipients": [to]})


class WebhookBody(msgspec.Struct):
    channel: str
    to: str
    text: str
    runId: str
    agentId: str
    sessionKey: str
    createdAt: int


def standard_webhooks_signature(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`` with the key as receivers derive it."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(standard_webhooks_key(secret), signed, hashlib.sha256).digest()).decode()


class WebhookAdapter(HttpAdapter):
    channel = "webhook"

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        url = self.option("url")
        secret = self.secret("secret", required=False)
        body = msgspec.json.encode(WebhookBody("webhook", to, text, envelope.run_id, envelope.agent_id,
                                               envelope.session_key, envelope.created_at))
        extra = self.cfg.options.get("headers")
        headers = {str(k): str(v) for k, v in extra.items()} if isinstance(extra, Mapping) else {}
        # Configured headers first: they may not replace the content type or the signature.
        headers = {k: v for k, v in headers.items()
                   if k.lower() not in {"content-type", "webhook-id", "webhook-timestamp", "webhook-signature"}}
        if not any(k.lower() == "user-agent" for k in headers):  # a configured one replaces ours
            headers["user-agent"] = USER_AGENT
        headers["content-type"] = "application/json"
        if secret is not None:
            timestamp = int(self.clock())
            headers["webhook-id"] = envelope.delivery_id
            headers["webhook-timestamp"] = str(timestamp)
            headers["webhook-signature"] = standard_webhooks_signature(secret, envelope.delivery_id,
                                                                       timestamp, body)
        return Request(url, body, headers)


class ImessageAdapter(HttpAdapter):
    """BlueBubbles server REST API; the password goes in the query, as BlueBubbles expects."""

    channel = "imessage"
    id_path = ("data", "guid")

    def build(self, to: str, text: str, envelope: Envelope) -> Request:
        password = self.required_secret("password")
        payload = {"chatGuid": to, "message": text, "method": self.option("method"),
                   "tempGuid": str(uuid.uuid4())}
        return self.json_request(f"{self.base_url('serverUrl')}/api/v1/message/text", payload,
                                 params={"password": password})

    def success(self, answer: Any, response: httpx.Response) -> str | None:
        if dig(answer, "status") != 200:
            raise self.error(self._clean(describe(answer) or "unexpected answer"), retryable=False,
                             http_status=response.status_code)
        return super().success(answer, response)


HTTP_ADAPTERS: dict[str, type[HttpAdapter]] = {
    cls.channel: cls
    for cls in (TelegramAdapter, SlackAdapter, DiscordAdapter, MattermostAdapter, MsTeamsAdapter,
                GoogleChatAdapter, LineAdapter, WhatsAppAdapter, SignalAdapter, WebhookAdapter,
                ImessageAdapter)
}
