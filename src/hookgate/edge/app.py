"""The application: dispatch of README §6 (health/metrics → hooks → routes → 404).

Two entries to one pipeline: a plain ASGI callable in Starlette's contract (``starlette.types``), and
``serve_read`` for a request hookgate's protocol has read whole (``hookgate.edge.protocol``). The hot
path has no router, no framework Request object and no middleware stack, only the steps the spec names.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from starlette.types import Receive, Scope, Send

from hookgate.clock import Clock, SystemClock
from hookgate.config.settings import Settings
from hookgate.edge.clientip import client_ip, normalize_peer
from hookgate.edge.hooks_surface import HooksSurface
from hookgate.edge.http import (
    Answer,
    Responder,
    body_digest,
    body_pending,
    error_b,
    first_headers,
    json_answer,
    remove_dot_segments,
    request_id,
)
from hookgate.edge.protocol import Exchange
from hookgate.edge.request import Request, bearer_token, secrets_equal
from hookgate.edge.routes_surface import RoutesSurface
from hookgate.edge.throttle import AuthThrottle
from hookgate.errors import HookgateError
from hookgate.obs import metrics as metrics_mod
from hookgate.obs.logging import clean_text, get_logger, info_line
from hookgate.store.base import Store
from hookgate.webhooks.service import FlowService

HEALTH_PATHS = {"/healthz": "live", "/health": "live", "/readyz": "ready", "/ready": "ready", "/metrics": "metrics"}
READY_STORE_TIMEOUT = 1.0
_ALLOW_GET_HEAD = [(b"allow", b"GET, HEAD")]


_REFUSALS = {400: "Bad Request", 408: "Request Timeout", 431: "Request Header Fields Too Large"}


class Gateway:
    """Everything a request needs, swapped atomically on reload (``apply_settings``)."""

    def __init__(self, settings: Settings, store: Store, *, metrics: metrics_mod.Metrics, clock: Clock | None = None) -> None:
        self.store = store
        self.metrics = metrics
        self.clock = clock or SystemClock()
        self.log = get_logger()
        self.started = time.monotonic()
        self.shutting_down = False
        self.on_enqueue: Callable[[float], None] = lambda delay: None  # the embedded worker's wake-up
        self.hooks = HooksSurface(self)
        self.route_surface: RoutesSurface | None = None
        self.apply_settings(settings)
        self.route_surface = RoutesSurface(self, FlowService(store, self.clock, lambda: self.settings))

    def apply_settings(self, settings: Settings) -> None:
        token, gw_token = settings.hooks.token, settings.gateway.auth_token
        hooks_token = token.encode("utf-8") if token else b""  # what can fail, before anything changes
        metrics_token = gw_token.encode("utf-8") if gw_token else b""
        self.settings = settings
        self.hooks_token, self.metrics_token = hooks_token, metrics_token
        old = getattr(self, "throttle", None)
        if old is None:
            self.throttle = AuthThrottle(settings.hooks.auth_throttle, self.clock)
        else:  # new limits apply from now on; a reload forgives no client's failures or lockout
            old.settings = settings.hooks.auth_throttle
        self.responder = Responder(settings.gateway.strict_transport_security)
        self.hooks_enabled = settings.hooks.enabled
        self.base_path = settings.hooks.base_path
        if self.route_surface is not None:
            self.route_surface.apply_settings(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry: requests whose body is still arriving, and any server but hookgate's own."""
        if scope["type"] != "http":
            return
        req = self.request(scope["method"], scope.get("raw_path") or scope["path"].encode(),
                           scope.get("query_string", b""), scope["headers"], scope.get("client"), receive, None)
        answer = await self.answer(req)
        if answer is None:
            return
        if body_pending(receive):
            # answered before the body ended (401, 429, 405, …): the connection closes after the answer
            # instead of reading and discarding whatever the client still sends, of any size
            answer.close = True
        try:
            await self.responder.send(send, answer, req.request_id, req.method == "HEAD")
        except OSError:
            return
        finally:
            if answer.after is not None:
                answer.after()
        self._account(req, answer)

    async def serve_read(self, exchange: Exchange) -> None:
        """The entry of hookgate's protocol for a request it has read whole, head and body: the same
        pipeline as ``__call__``, without an ASGI scope, receive and send (on uvicorn, two thirds of
        a minimal request's cost). The answer leaves through ``exchange.respond``."""
        req = self.request(exchange.method, exchange.raw_path, exchange.query, exchange.headers, exchange.client,
                           None, exchange.body)
        answer = await self.answer(req)
        if answer is None:  # not reached: only a body read through ASGI can end without an answer
            exchange.respond(None, True)
            return
        try:
            keep_alive = exchange.keep_alive
            exchange.respond(self.responder.encode(answer, req.request_id, req.method == "HEAD",
                                                   exchange.default_headers, keep_alive),
                             answer.close or not keep_alive)
        finally:
            if answer.after is not None:
                answer.after()
        self._account(req, answer)

    def request(self, method: str, raw_path: bytes, query: bytes, raw_headers: list[tuple[bytes, bytes]],
                client: tuple[str, int] | None, receive: Receive | None, body: bytes | None) -> Request:
        start = time.perf_counter()
        headers = first_headers(raw_headers)
        rid = request_id(headers.get(b"x-request-id"))
        path = remove_dot_segments(raw_path.decode("latin-1"))
        peer = normalize_peer(client[0] if client else None)
        gateway = self.settings.gateway
        if gateway.trusted_proxies:
            xff = headers.get(b"x-forwarded-for")
            real = headers.get(b"x-real-ip")
            ip = client_ip(peer, xff.decode("latin-1") if xff else None, real.decode("latin-1") if real else None,
                           gateway.trusted_proxies, gateway.allow_real_ip_fallback)
        else:
            ip = peer
        return Request(method, path, raw_path, query, headers, raw_headers, peer, ip, rid, start, receive, body)

    async def answer(self, req: Request) -> Answer | None:
        """README §6's dispatch, with the surface's JSON 500 for whatever escapes it."""
        path = req.path
        answer: Answer | None
        try:
            kind = HEALTH_PATHS.get(path)
            if kind is not None:
                req.surface = "health"
                req.log["route"] = path.lstrip("/")
                answer = await self._health(req, kind)
            elif self.hooks_enabled and (path == self.base_path or path.startswith(self.base_path + "/")):
                req.surface = "hooks"
                answer = await self.hooks.handle(req, path[len(self.base_path):].lstrip("/"))
            elif self.route_surface is not None and (route := self.route_surface.table.match(path)) is not None:
                req.surface = "webhooks"  # before the await: an unexpected error gets Surface A's 500 body
                answer = await self.route_surface.handle(req, route)
            else:
                answer = error_b(404, "Not Found")
        except asyncio.CancelledError:
            if not self.shutting_down:
                raise
            # the drain's deadline cut this request (uvicorn cancels what is left): it still gets the
            # surface's JSON 500 — whether its write landed is unknown, so not a 503 "nothing committed"
            self.log.warning("http.cut_by_drain", request_id=req.request_id, surface=req.surface,
                             route=req.log.get("route", "-"), client_ip=req.client_ip)
            answer = _internal_error(req.surface)
        except Exception:
            self.log.exception("http.unhandled", request_id=req.request_id, surface=req.surface,
                               route=req.log.get("route", "-"), client_ip=req.client_ip)
            answer = _internal_error(req.surface)
        if answer is not None and self.shutting_down:
            answer.close = True
        return answer

    def refuse(self, status: int, reason: str, client: tuple[str, int] | None, elapsed: float,
               default_headers: Sequence[tuple[bytes, bytes]] = ()) -> bytes:
        """The protocol's own answers, where there is no request to hand to the app: bytes that are
        not HTTP (400), a head past its size (431) or its time (408). JSON with the common headers
        (README §5), counted and logged like any request; the protocol then closes the connection."""
        answer = error_b(status, _REFUSALS[status])
        rid = request_id(None)
        self.metrics.observe_request("other", "-", status, elapsed)
        info_line("http.request", {"request_id": rid, "surface": "other", "route": "-",
                                   "client_ip": normalize_peer(client[0] if client else None),
                                   "method": None, "path": None, "status": status,
                                   "duration_ms": round(elapsed * 1000, 3),
                                   "user_agent": None, "reason": reason})
        return self.responder.closing_bytes(answer, rid, default_headers)

    def _account(self, req: Request, answer: Answer) -> None:
        elapsed = time.perf_counter() - req.start
        surface = req.surface
        route = str(req.log.pop("route", "-"))
        self.metrics.observe_request(surface, route, answer.status, elapsed)
        ua = req.headers.get(b"user-agent")
        line = {
            "request_id": req.request_id,
            "surface": surface,
            "route": route,
            "client_ip": req.client_ip,
            "method": req.method,
            "path": req.path[:500],
            "status": answer.status,
            "duration_ms": round(elapsed * 1000, 3),
            "user_agent": clean_text(ua.decode("latin-1")) if ua else None,
        }
        log = req.log
        if "body_bytes" not in log and req.body is not None:
            # answered before its surface read the body (401, 405, a health check): the protocol had
            # read it whole with the head, so the line still has its size and hash (operations.md §2)
            log["body_bytes"] = len(req.body)
            log["body_sha256"] = body_digest(req.body)[:16]
        line.update(log)
        info_line("http.request", line)

    async def _health(self, req: Request, kind: str) -> Answer:
        if req.method not in ("GET", "HEAD"):
            return error_b(405, "Method Not Allowed", headers=list(_ALLOW_GET_HEAD))
        if kind == "live":
            return json_answer(200, {"ok": True, "status": "live"})
        if kind == "ready":
            return await self._ready()
        if self.settings.gateway.auth_mode == "token":
            token = bearer_token(req.credential_header(b"authorization"))
            if not secrets_equal(token, self.metrics_token):
                self.metrics.auth_failures.inc(("health", "metrics"))
                return error_b(401, "Unauthorized")
        return Answer(200, await self.metrics.scrape(), content_type=metrics_mod.CONTENT_TYPE.encode())

    async def _ready(self) -> Answer:
        failing: list[str] = []
        try:
            ok = await asyncio.wait_for(self.store.ping(READY_STORE_TIMEOUT), READY_STORE_TIMEOUT)
        except (TimeoutError, HookgateError, OSError):
            ok = False
        if not ok:
            failing.append("store")
        if self.shutting_down:
            failing.append("shutdown")
        body = {
            "ready": not failing,
            "failing": failing,
            "uptimeMs": int((time.monotonic() - self.started) * 1000),
            "configHash": self.settings.config_hash,
        }
        return json_answer(200 if not failing else 503, body)


def _internal_error(surface: str) -> Answer:
    """README §5: an unexpected failure's 500, in the surface's own body."""
    if surface == "webhooks":
        return json_answer(500, {"ok": False, "code": "internal_error", "error": "internal error"})
    return error_b(500, "Internal Server Error")
