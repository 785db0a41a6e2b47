"""``plugins.entries.webhooks`` → ``WebhooksSettings`` (webhooks.md §1.1–§1.5, §2.2).

Route errors, path conflicts and reserved paths are config errors; a route whose secrets do not
resolve is kept with ``skipped_reason`` set (it has no endpoint) and a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hookgate.config.names import (
    ROUTE_ID_PATTERN,
    normalize_agent_id,
    normalize_route_path,
    path_is_under,
    reserved_path_hit,
    unreachable_path,
)
from hookgate.config.schema import LIMIT_DEFAULTS
from hookgate.config.settings import (
    AgentsSettings,
    LimitSettings,
    RateLimitSettings,
    RouteAuthSettings,
    RouteSettings,
    SecretSource,
    WebhooksSettings,
)
from hookgate.config.validate import join

ROUTES_PATH = "plugins.entries.webhooks.config.routes"


@dataclass
class RoutesContext:
    secrets: Mapping[str, SecretSource]
    agents: AgentsSettings
    hooks_enabled: bool
    hooks_base_path: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def merge_limits(*layers: Mapping[str, Any] | None) -> LimitSettings:
    """Defaults, then plugin limits, then route limits, key by key (``rateLimit`` field by field)."""
    merged: dict[str, Any] = dict(LIMIT_DEFAULTS)
    rate: dict[str, Any] = dict(LIMIT_DEFAULTS["rateLimit"])
    for layer in layers:
        if not layer:
            continue
        rate.update(layer.get("rateLimit") or {})
        merged.update({k: v for k, v in layer.items() if k != "rateLimit"})
    return LimitSettings(
        rate_limit=RateLimitSettings(window_seconds=rate["windowSeconds"], max_requests=rate["maxRequests"]),
        max_in_flight=merged["maxInFlight"],
        max_body_bytes=merged["maxBodyBytes"],
        body_timeout_seconds=merged["bodyTimeoutSeconds"],
    )


def limits_tree(limits: LimitSettings) -> dict[str, Any]:
    """``LimitSettings`` in the config's own keys (the effective config shows them)."""
    return {
        "rateLimit": {"windowSeconds": limits.rate_limit.window_seconds, "maxRequests": limits.rate_limit.max_requests},
        "maxInFlight": limits.max_in_flight,
        "maxBodyBytes": limits.max_body_bytes,
        "bodyTimeoutSeconds": limits.body_timeout_seconds,
    }


def _fill_defaults(cfg: dict[str, Any], plugin_limits: LimitSettings) -> None:
    """The defaults that depend on the route (path, controllerId, a bearer prefix) or on merging (limits), written into
    the validated tree before the routes are built from it: ``config show`` prints them and
    ``configHash`` no longer tells a route that spells out its defaults from one that leaves them out."""
    cfg["limits"] = limits_tree(plugin_limits)
    for raw_id, route in cfg["routes"].items():
        route_id = raw_id.strip()
        route.setdefault("path", f"/plugins/webhooks/{route_id}")
        controller = route.get("controllerId")
        if not (isinstance(controller, str) and controller.strip()):
            route["controllerId"] = f"webhooks/{route_id}"
        route["limits"] = limits_tree(merge_limits(cfg["limits"], route.get("limits")))
        auth = route.get("auth")
        if isinstance(auth, dict) and auth.get("mode") == "bearer":
            auth.setdefault("prefix", "Bearer")


def _secret_paths(r: str, route: Mapping[str, Any]) -> list[str]:
    if "secret" in route:
        return [f"{r}.secret"]
    auth = route.get("auth") or {}
    if "secret" in auth:
        return [f"{r}.auth.secret"]
    return [f"{r}.auth.secrets[{i}]" for i in range(len(auth.get("secrets") or []))]


def _auth(route: Mapping[str, Any], resolved: tuple[str, ...]) -> RouteAuthSettings:
    if "secret" in route:
        return RouteAuthSettings(mode="legacy", secrets=resolved)
    auth = route["auth"]
    mode = auth["mode"]
    header = auth.get("header")
    prefix = auth.get("prefix")
    if mode == "bearer" and prefix is None:
        prefix = "Bearer"
    return RouteAuthSettings(
        mode=mode,
        secrets=resolved,
        header=header.strip().lower() if isinstance(header, str) and header.strip() else None,
        prefix=prefix,
        tolerance_seconds=auth["toleranceSeconds"],
    )


def _check_route(r: str, route: Mapping[str, Any], ctx: RoutesContext) -> str | None:
    """The per-route config errors; returns the resolved agent id (``None`` when unknown)."""
    auth = route.get("auth")
    if "secret" not in route and auth is None:
        ctx.errors.append(f"{r}: secret or auth is required")
    elif "secret" in route and auth is not None:
        ctx.errors.append(f"{r}: use either secret or auth, not both")
    elif auth is not None:
        if "secret" in auth and "secrets" in auth:
            ctx.errors.append(f"{r}.auth: use either secret or secrets, not both")
        elif "secret" not in auth and "secrets" not in auth:
            ctx.errors.append(f"{r}.auth: secret or secrets is required")
    session_key = route.get("sessionKey")
    if not isinstance(session_key, str) or not session_key.strip():
        ctx.errors.append(f"{r}.sessionKey: required")
    if auth is not None and auth["mode"] in ("header", "hmac-sha256"):
        header = auth.get("header")
        if not isinstance(header, str) or not header.strip():
            ctx.errors.append(f"{r}.auth.header: header is required for header and hmac-sha256 auth")
    agent_raw = route.get("agentId")
    if isinstance(agent_raw, str):
        agent_id = normalize_agent_id(agent_raw)
        if agent_id not in ctx.agents.known_ids:
            ctx.errors.append(f'{r}.agentId: unknown agent "{agent_raw.strip()}"')
            return None
        return agent_id
    if isinstance(session_key, str):
        parts = session_key.strip().lower().split(":")
        if len(parts) >= 3 and parts[0] == "agent" and normalize_agent_id(parts[1]) in ctx.agents.known_ids:
            return normalize_agent_id(parts[1])
    return ctx.agents.default_agent_id


def build_webhooks(plugins: Mapping[str, Any], ctx: RoutesContext) -> WebhooksSettings:
    """The enabled routes in config order (skipped ones included) and the plugin-wide settings."""
    entry = plugins["entries"].get("webhooks")
    if entry is None:
        return WebhooksSettings()
    cfg = entry["config"]
    plugin_limits = merge_limits(cfg.get("limits"))
    _fill_defaults(cfg, plugin_limits)
    ttl = float(cfg["idempotencyTtlHours"])
    if entry["enabled"] is not True:
        return WebhooksSettings(enabled=False, limits=plugin_limits, idempotency_ttl_hours=ttl)
    routes: list[RouteSettings] = []
    claimed: dict[str, str] = {}
    ids: dict[str, str] = {}  # trimmed id → the key as written
    for raw_id, route in cfg["routes"].items():
        r = join(ROUTES_PATH, raw_id)
        route_id = raw_id.strip()
        if not ROUTE_ID_PATTERN.match(route_id):
            ctx.errors.append(f"{r}: invalid route id (expected ^[A-Za-z0-9][A-Za-z0-9_.:-]{{0,127}}$)")
            continue
        if route["enabled"] is not True:
            continue
        if route_id in ids:  # two active keys equal once trimmed (" a " and "a"): one id, one controller
            ctx.errors.append(f'{r}: duplicate route id "{route_id}" (also {join(ROUTES_PATH, ids[route_id])}; ids are trimmed)')
            continue
        ids[route_id] = raw_id
        agent_id = _check_route(r, route, ctx)
        path = normalize_route_path(route["path"])
        folded = path.casefold()
        if folded in claimed:
            ctx.errors.append(f"{r}.path conflicts with {join('routes', claimed[folded])}.path ({path}).")
        else:
            claimed[folded] = route_id
        if ctx.hooks_enabled and path_is_under(folded, ctx.hooks_base_path.casefold()):
            ctx.errors.append(f"{r}.path conflicts with hooks.path ({ctx.hooks_base_path}).")
        if reserved_path_hit(path, casefold=True):
            ctx.errors.append(f"{r}.path conflicts with reserved path ({path}).")
        unreachable = unreachable_path(path)
        if unreachable is not None:
            ctx.warnings.append(f"{r}.path ({path}): no request can reach it: {unreachable}")
        resolved: list[str] = []
        failures: list[tuple[str, str]] = []
        for key_path in _secret_paths(r, route):
            source = ctx.secrets.get(key_path)
            if source is None:
                continue
            if source.value is not None:
                resolved.append(source.value)
            else:
                failures.append((key_path, source.error or "unresolved"))
        skipped: str | None = None
        if not resolved and failures:
            skipped = failures[0][1]
            ctx.warnings.append(f"route {route_id}: skipped ({skipped})")
        else:
            ctx.warnings.extend(f"{key_path}: {error}" for key_path, error in failures)
        session_key = route.get("sessionKey")
        routes.append(
            RouteSettings(
                id=route_id,
                path=path,
                session_key=session_key.strip().lower() if isinstance(session_key, str) else "",
                controller_id=route["controllerId"].strip(),
                auth=_auth(route, tuple(resolved))
                if ("secret" in route) != ("auth" in route)
                else RouteAuthSettings(),
                limits=merge_limits(route["limits"]),
                enabled=True,
                description=route.get("description"),
                execute=route["execute"] is True,
                agent_id=agent_id,
                skipped_reason=skipped,
            )
        )
    return WebhooksSettings(
        enabled=True, routes=tuple(routes), limits=plugin_limits, idempotency_ttl_hours=ttl
    )
