"""Surface B at the edge: the request pipeline of hooks.md §2, step by step, in spec order."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from hookgate.edge.http import (
    Answer,
    BodyTimeout,
    BodyTooLarge,
    ClientGone,
    body_digest,
    error_b,
    json_answer,
    read_body,
)
from hookgate.edge.request import Request, bearer_token, header_token, secrets_equal
from hookgate.edge.throttle import MAX_TRACKED_CLIENTS
from hookgate.errors import HookgateError, RequestError, StoreUnavailable
from hookgate.hooks import actions
from hookgate.hooks.dispatch import dispatch_agent, dispatch_wake, prepare_agent
from hookgate.hooks.mappings import (
    MAPPING_FAILED,
    Lazy,
    RequestContext,
    match_mapping,
    request_headers,
    request_query,
    resolve,
)
from hookgate.hooks.payload import Payload, decode_hook_body, fields
from hookgate.hooks.transforms_loader import TransformFailed, TransformLoader
from hookgate.obs.logging import LineLimiter, clean_text, failure_text, info_line

_log_id = functools.lru_cache(maxsize=1024)(clean_text)

if TYPE_CHECKING:
    from hookgate.edge.app import Gateway

QUERY_TOKEN_ERROR = (
    "Hook token must be provided via Authorization: Bearer <token> or X-Hookgate-Token header "
    "(query parameters are not allowed)."
)
_THROTTLE_LOG_INTERVAL = 10.0

MappedHandler = Callable[[Request, str, Payload, bytes], Awaitable[Answer]]


def _has_query_token(query: bytes) -> bool:
    """A parameter named ``token`` once decoded (``%74oken`` is one): the quick test skips the parse
    only when neither the name nor a percent-escape is there."""
    if b"token" not in query and b"%" not in query:
        return False
    return any(k == "token" for k, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True))


class HooksSurface:
    """``POST <basePath>/…``: guard, authenticate, read, decode, route, dispatch."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        # hook.auth_throttled, per client IP: as many as the throttle tracks (each can be locked out)
        self._throttle_logged = LineLimiter(_THROTTLE_LOG_INTERVAL, MAX_TRACKED_CLIENTS)
        # Mapped hooks (hooks.md §6) plug in here; without mappings an unknown subPath is 404.
        self.transforms = TransformLoader()
        self._transform_observers: dict[str, Callable[[float], None]] = {}
        self.mapped: MappedHandler | None = self._mapped

    @staticmethod
    def context(req: Request) -> dict[str, Any]:
        """The fields every hook line carries where known (operations.md §2)."""
        return {"request_id": req.request_id, "surface": "hooks", "route": req.log["route"],
                "client_ip": req.client_ip}

    def route_label(self, sub_path: str) -> str:
        return sub_path if sub_path in ("wake", "agent") else "unmatched"

    async def handle(self, req: Request, sub_path: str) -> Answer | None:
        gw = self.gw
        hooks = gw.settings.hooks
        req.log["route"] = self.route_label(sub_path)
        if _has_query_token(req.query):
            return error_b(400, QUERY_TOKEN_ERROR, reason="query_token")
        if req.method != "POST":
            return error_b(405, "Method Not Allowed", headers=[(b"allow", b"POST")])
        rejected = self._authenticate(req)
        if rejected is not None:
            return rejected
        if not sub_path:
            return error_b(404, "Not Found")
        try:
            body = await read_body(req, hooks.max_body_bytes, hooks.body_timeout_seconds)
        except BodyTooLarge:
            gw.metrics.body_rejections.labels("hooks", "too_large").inc()
            return error_b(413, "payload too large", close=True, reason="too_large")
        except BodyTimeout:
            gw.metrics.body_rejections.labels("hooks", "timeout").inc()
            return error_b(408, "request body timeout", close=True, reason="timeout")
        except ClientGone:
            gw.log.info("hook.body_aborted", **self.context(req))
            return None
        req.log["body_bytes"] = len(body)
        req.log["body_sha256"] = body_digest(body)[:16]
        try:
            payload = decode_hook_body(body)
        except RequestError as exc:
            gw.metrics.body_rejections.labels("hooks", "invalid_json").inc()
            return error_b(400, exc.message, reason="invalid_json")
        try:
            if sub_path == "wake":
                return await self._wake(req, payload)
            if sub_path == "agent":
                return await self._agent(req, payload)
            if self.mapped is not None:
                return await self.mapped(req, sub_path, payload, body)
            return error_b(404, "Not Found")
        except StoreUnavailable as exc:  # the store counted it in hookgate_store_errors_total
            gw.log.warning("store.error", **self.context(req), operation=f"hooks.{req.log['route']}",
                           error=failure_text(exc))
            return error_b(503, "Service Unavailable", headers=[(b"retry-after", b"1")], reason="store")
        except RequestError as exc:
            gw.metrics.body_rejections.labels("hooks", "invalid_request").inc()
            gw.log.info("hook.rejected", **self.context(req), reason=exc.message)
            return error_b(exc.status, exc.message, reason="invalid_request")
        except HookgateError as exc:
            return error_b(exc.status, exc.message)

    def _authenticate(self, req: Request) -> Answer | None:
        """Token extraction and the timing-safe check with the auth-failure throttle (§2 steps 4–5)."""
        gw = self.gw
        compat = gw.settings.gateway.accept_openclaw_headers
        token = bearer_token(req.credential_header(b"authorization")) or header_token(
            req, b"x-hookgate-token", b"x-openclaw-token" if compat else None
        )
        client = req.client_ip
        if secrets_equal(token, gw.hooks_token):
            gw.throttle.record_success(client)
            return None
        locked = gw.throttle.locked_for(client)
        if locked:
            gw.metrics.rate_limited.inc(("hooks", "auth_lockout"))
            self._log_throttled(req)
            return error_b(429, "Too Many Requests", headers=[(b"retry-after", str(locked).encode())],
                           reason="auth_lockout")
        started = gw.throttle.record_failure(client)
        gw.metrics.auth_failures.inc(("hooks", str(req.log["route"])))
        gw.log.warning("hook.auth_failed", **self.context(req), lockout_started=started)
        return error_b(401, "Unauthorized", reason="unauthorized")

    def _log_throttled(self, req: Request) -> None:
        if (count := self._throttle_logged.due(req.client_ip)) is not None:
            self.gw.log.warning("hook.auth_throttled", **self.context(req), suppressed=count - 1)

    async def _wake(self, req: Request, payload: Payload) -> Answer:
        gw = self.gw
        action = actions.parse_wake(fields(payload))
        outcome = await dispatch_wake(action, gw.settings, gw.store, gw.clock)
        if outcome.mode == "now":
            gw.on_enqueue(0.3)  # the heartbeat is due 250 ms from now (wake coalescing)
        line = self.context(req)
        line["mode"], line["outcome"] = outcome.mode, outcome.outcome
        info_line("hook.accepted", line)
        return json_answer(200, {"ok": True, "mode": outcome.mode, "eventOutcome": outcome.outcome})

    async def _agent(self, req: Request, payload: Payload) -> Answer:
        gw = self.gw
        body = fields(payload)
        action = actions.parse_agent(body, gw.settings.enabled_channel_ids())
        prepared = prepare_agent(action, gw.settings)
        key = actions.idempotency_key(self.idempotency_headers(req), body)
        outcome = await dispatch_agent(prepared, path="agent", idempotency_key=key, settings=gw.settings,
                                       store=gw.store, clock=gw.clock)
        return self.agent_answer(req, outcome.run_id, outcome.replayed, outcome.agent_id)

    def request_context(self, req: Request, sub_path: str, payload: Payload) -> RequestContext:
        """§2 step 10: every header (lower-cased, repeats joined) and the decoded query."""
        url = req.raw_path.decode("latin-1") + (("?" + req.query.decode("latin-1")) if req.query else "")
        raw_headers, raw_query = req.raw_headers, req.query
        return RequestContext(
            payload=payload,
            headers=Lazy(lambda: request_headers(raw_headers)),
            query=Lazy(lambda: request_query(raw_query)),
            sub_path=sub_path,
            url=url,
            now_ms=self.gw.clock.now_ms(),
        )

    async def _mapped(self, req: Request, sub_path: str, payload: Payload, raw_body: bytes) -> Answer:
        """§6: match → build → transform → validate → dispatch through the shared path (§6.8)."""
        gw = self.gw
        mapping = match_mapping(gw.settings.hooks.mappings, sub_path, payload)
        if mapping is None:
            return error_b(404, "Not Found")
        log_id = _log_id(mapping.id)  # an id is free text: logged sanitised (operations.md §2)
        req.log["route"] = f"mapping:{log_id}"
        observe = self._transform_histogram(mapping.id) if mapping.transform_module is not None else None
        try:
            resolved = await resolve(mapping, self.request_context(req, sub_path, payload), gw.settings,
                                     self.transforms, on_transform=observe)
        except TransformFailed as exc:
            gw.log.warning("hook.mapping_failed", **self.context(req), mapping=log_id,
                           error_type=exc.kind, error=clean_text(exc.detail) if exc.ours else None)
            return error_b(500, MAPPING_FAILED, reason="mapping_failed")
        action = resolved.action
        if action is None:
            line = self.context(req)
            line["outcome"] = "skipped"
            info_line("hook.accepted", line)
            return Answer(204, None, reason="skipped")
        if isinstance(action, actions.WakeAction):
            outcome = await dispatch_wake(action, gw.settings, gw.store, gw.clock)
            if outcome.mode == "now":
                gw.on_enqueue(0.3)
            line = self.context(req)
            line["mode"], line["outcome"] = outcome.mode, outcome.outcome
            info_line("hook.accepted", line)
            return json_answer(200, {"ok": True, "mode": outcome.mode, "eventOutcome": outcome.outcome})
        prepared = prepare_agent(action, gw.settings, external_source=resolved.external_source,
                                 wrap=resolved.wrap)
        key = actions.idempotency_key(self.idempotency_headers(req), fields(payload))
        done = await dispatch_agent(prepared, path=sub_path, idempotency_key=key, settings=gw.settings,
                                    store=gw.store, clock=gw.clock)
        return self.agent_answer(req, done.run_id, done.replayed, done.agent_id)

    def _transform_histogram(self, mapping_id: str) -> Callable[[float], None]:
        observe = self._transform_observers.get(mapping_id)
        if observe is None:
            if len(self._transform_observers) > 1024:
                self._transform_observers.clear()
            observe = self.gw.metrics.transform_duration.labels(mapping_id).observe
            self._transform_observers[mapping_id] = observe
        return observe

    def idempotency_headers(self, req: Request) -> tuple[str | None, ...]:
        compat = self.gw.settings.gateway.accept_openclaw_headers
        return (
            req.text_header(b"idempotency-key"),
            req.text_header(b"x-hookgate-idempotency-key"),
            req.text_header(b"x-openclaw-idempotency-key") if compat else None,
        )

    def agent_answer(self, req: Request, run_id: str, replayed: bool, agent_id: str) -> Answer:
        gw = self.gw
        if replayed:
            gw.metrics.idempotent_replays.labels("hooks").inc()
            gw.log.info("hook.idempotent_replay", **self.context(req), run_id=run_id)
        else:
            gw.on_enqueue(0.0)
            line = self.context(req)
            line["run_id"], line["agent_id"] = run_id, agent_id
            info_line("hook.accepted", line)
        return json_answer(200, {"ok": True, "runId": run_id})
