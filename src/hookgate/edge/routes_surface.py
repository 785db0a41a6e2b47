"""Surface A at the edge: the request pipeline of webhooks.md §2.1, steps 1–11 in spec order."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

import msgspec

from hookgate import jsonbody
from hookgate.config.names import normalize_route_path
from hookgate.config.settings import RouteSettings, Settings
from hookgate.edge.http import (
    Answer,
    BodyTimeout,
    BodyTooLarge,
    ClientGone,
    body_digest,
    json_answer,
    read_body,
)
from hookgate.edge.limits import FixedWindowLimiter, InFlightLimiter
from hookgate.edge.request import Request
from hookgate.errors import StoreUnavailable
from hookgate.obs.logging import failure_text, info_line
from hookgate.webhooks import auth as route_auth
from hookgate.webhooks.schema import MUTATING_ACTIONS, SchemaError, parse_action
from hookgate.webhooks.service import FlowService

if TYPE_CHECKING:
    from hookgate.edge.app import Gateway

_decoder = jsonbody.decoder()
_LONG_INT = re.compile(rb"\d{19,}")


def _reject(status: int, code: str, error: str, **kw: Any) -> Answer:
    return json_answer(status, {"ok": False, "code": code, "error": error}, reason=code, **kw)


def _context(req: Request, route: RouteSettings) -> dict[str, Any]:
    """The fields every route line carries where known (operations.md §2)."""
    return {"request_id": req.request_id, "surface": "webhooks", "route": route.id, "client_ip": req.client_ip}


def header_text(req: Request) -> route_auth.HeaderGetter:
    """Header values as the client wrote them: the raw bytes read as UTF-8 (``req.header`` is latin-1).

    Secrets are compared as UTF-8 bytes and key lengths count characters (webhooks.md §2.3, §3.5).
    An invalid UTF-8 byte reads as a lone surrogate (``surrogateescape``): a secret is compared with
    exactly the bytes sent, and ``_idempotency_key`` turns such a byte into U+FFFD before storing.
    """
    return req.credential_header


def decode_route_body(body: bytes) -> Any:
    """Step 8: UTF-8 and strict JSON; empty, invalid UTF-8, out-of-int64 integers and nesting deeper
    than ``jsonbody.MAX_DEPTH`` are invalid."""
    if not body.strip():
        raise ValueError("empty body")
    body.decode("utf-8")  # UnicodeDecodeError is a ValueError
    value = jsonbody.decode(_decoder, body)
    if _LONG_INT.search(body) and jsonbody.out_of_int64(value):
        raise ValueError("integer out of range")
    return value


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_fold(path: str) -> str:
    """Lower-case A–Z only: routes match "ignoring ASCII case" (webhooks.md §1.4), so ``ß`` is not ``ss``."""
    return path.lower() if path.isascii() else path.translate(_ASCII_LOWER)


class RouteTable:
    """Active routes by ASCII-case-folded normalised path (webhooks.md §1.4)."""

    def __init__(self, settings: Settings) -> None:
        self.by_path: dict[str, RouteSettings] = {}
        if settings.webhooks.enabled:
            for route in settings.webhooks.routes:
                if route.enabled and route.skipped_reason is None:
                    self.by_path.setdefault(ascii_fold(route.path), route)

    def match(self, path: str) -> RouteSettings | None:
        return self.by_path.get(ascii_fold(normalize_route_path(path)))


class RoutesSurface:
    """``POST <route path>``: limits, media type, auth, body, schema, idempotency, action."""

    def __init__(self, gw: Gateway, service: FlowService) -> None:
        self.gw = gw
        self.service = service
        self.window = FixedWindowLimiter(gw.clock)
        self.in_flight = InFlightLimiter()
        self.apply_settings(gw.settings)

    def apply_settings(self, settings: Settings) -> None:
        self.table = RouteTable(settings)

    async def handle(self, req: Request, route: RouteSettings) -> Answer | None:
        """A request whose path is ``route``'s (``self.table.match``); ``None``: the client is gone."""
        req.log["route"] = route.id
        m = self.gw.metrics
        if req.method != "POST":
            return _reject(405, "method_not_allowed", "Method Not Allowed", headers=[(b"allow", b"POST")])
        limits = route.limits
        window_key = f"{req.path}:{req.client_ip}"
        retry = self.window.hit(window_key, limits.rate_limit.max_requests, limits.rate_limit.window_seconds)
        if retry:
            m.rate_limited.inc(("webhooks", "window"))
            if self.window.hits(window_key) == limits.rate_limit.max_requests + 1:  # once per key and window
                self.gw.log.warning("ratelimit.rejected", **_context(req, route), retry_after=retry)
            return _reject(429, "rate_limited", "Too Many Requests", headers=[(b"retry-after", str(retry).encode())])
        media = (req.header(b"content-type") or "").split(";", 1)[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            m.body_rejections.labels("webhooks", "unsupported_media_type").inc()
            return _reject(415, "unsupported_media_type", "Unsupported Media Type")
        slot = f"{ascii_fold(route.path)}:{req.peer}"
        if not self.in_flight.acquire(slot, limits.max_in_flight):
            m.rate_limited.inc(("webhooks", "in_flight"))
            return _reject(429, "rate_limited", "Too Many Requests", headers=[(b"retry-after", b"1")])
        try:
            answer = await self._authenticated(req, route)
        except BaseException:
            self.in_flight.release(slot)
            raise
        if answer is None:
            self.in_flight.release(slot)
        else:
            answer.after = lambda: self.in_flight.release(slot)
        return answer

    async def _authenticated(self, req: Request, route: RouteSettings) -> Answer | None:
        gw = self.gw
        m = gw.metrics
        compat = gw.settings.gateway.accept_openclaw_headers
        header = header_text(req)
        verdict = route_auth.check_headers(route.auth, header, compat=compat, now_s=time.time())
        if verdict is False:
            return self._unauthorized(req, route)
        limits = route.limits
        try:
            body = await read_body(req, limits.max_body_bytes, limits.body_timeout_seconds)
        except BodyTooLarge:
            m.body_rejections.labels("webhooks", "too_large").inc()
            return _reject(413, "payload_too_large", "Payload too large", close=True)
        except BodyTimeout:
            m.body_rejections.labels("webhooks", "timeout").inc()
            return _reject(408, "request_timeout", "Request body timeout", close=True)
        except ClientGone:
            gw.log.info("webhook.body_aborted", **_context(req, route))
            return None
        req.log["body_bytes"] = len(body)
        digest = body_digest(body)
        req.log["body_sha256"] = digest[:16]
        if isinstance(verdict, route_auth.PendingSignature) and not route_auth.check_body(route.auth, verdict, body):
            return self._unauthorized(req, route)
        try:
            payload = decode_route_body(body)
        except (ValueError, msgspec.DecodeError):
            m.body_rejections.labels("webhooks", "invalid_json").inc()
            return _reject(400, "invalid_request_body", "invalid request body")
        try:
            action = parse_action(payload)
        except SchemaError as exc:
            m.body_rejections.labels("webhooks", "invalid_request").inc()
            gw.log.info("webhook.rejected", **_context(req, route), code="invalid_request")
            return _reject(400, "invalid_request", exc.message)
        name = payload["action"]
        req.log["action"] = name
        key: str | None = None
        if name in MUTATING_ACTIONS:
            found = self._idempotency_key(header, verdict)
            if isinstance(found, Answer):
                return found
            key = found
        try:
            result = await self.service.execute(route, action, name, idempotency_key=key, body_sha256=digest)
        except StoreUnavailable as exc:  # the store counted it in hookgate_store_errors_total
            gw.log.warning("store.error", **_context(req, route), operation=f"webhooks.{name}",
                           error=failure_text(exc))
            return _reject(503, "store_unavailable", "store unavailable", headers=[(b"retry-after", b"1")])
        headers = [(b"idempotent-replayed", b"true")] if result.replayed else []
        if result.replayed:
            m.idempotent_replays.labels("webhooks").inc()
            gw.log.info("webhook.idempotent_replay", **_context(req, route), action=name)
        else:
            m.flow_actions.inc((name, result.code))
            if result.status >= 400:
                gw.log.info("webhook.rejected", **_context(req, route), action=name,
                            code=result.code)
            elif name in MUTATING_ACTIONS:
                line = _context(req, route)
                line["action"], line["code"], line["flow_id"] = name, result.code, result.flow_id
                info_line("webhook.accepted", line)
        if result.flow_id:
            req.log["flow_id"] = result.flow_id
        return Answer(result.status, result.body, headers, reason=result.code)

    def _idempotency_key(self, header: route_auth.HeaderGetter, verdict: object) -> str | None | Answer:
        compat = self.gw.settings.gateway.accept_openclaw_headers
        raw = None
        for name in (b"idempotency-key", b"x-hookgate-idempotency-key", b"x-openclaw-idempotency-key" if compat else None):
            if name is not None and (value := header(name)) is not None:
                raw = value
                break
        if raw is None and isinstance(verdict, route_auth.PendingSignature) and verdict.webhook_id:
            raw = verdict.webhook_id
        if raw is None:
            return None
        key = raw.strip()
        if not key.isascii():  # bytes that were not UTF-8 become U+FFFD: the key is stored as text
            key = key.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        if not 1 <= len(key) <= 256:
            self.gw.metrics.body_rejections.labels("webhooks", "invalid_request").inc()
            return _reject(400, "invalid_request", "Idempotency-Key: must be 1-256 characters")
        return key

    def _unauthorized(self, req: Request, route: RouteSettings) -> Answer:
        self.gw.metrics.auth_failures.inc(("webhooks", route.id))
        self.gw.log.warning("webhook.rejected", **_context(req, route), code="unauthorized")
        return _reject(401, "unauthorized", "unauthorized")


