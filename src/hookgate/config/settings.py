"""The typed, resolved settings every other package reads.

``config.loader.load_settings`` turns the JSON5 file into one frozen ``Settings``: defaults filled
in, values normalised as the spec says, secrets resolved (values kept in memory only), relative paths
made absolute against the config directory. Nothing outside ``config/`` parses raw config.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Literal

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class SecretSource:
    """Where a secret input came from: ``string`` or ``<source>:<provider>:<id>``; never the value."""

    key_path: str
    source: str
    value: str | None = field(repr=False)  # resolved, trimmed, non-empty; None when unresolved
    error: str | None = None  # the resolution error text when unresolved


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    bind: str = "127.0.0.1"
    port: int = 18789
    auth_mode: Literal["none", "token"] = "none"
    auth_token: str | None = field(default=None, repr=False)
    trusted_proxies: tuple[IPNetwork, ...] = ()
    allow_real_ip_fallback: bool = False
    accept_openclaw_headers: bool = True
    strict_transport_security: str | None = None
    reload_watch: bool = False
    drain_timeout_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    task_days: float = 7
    lost_task_days: float = 1
    flow_days: float = 30
    run_days: float = 30
    delivery_days: float = 30
    event_days: float = 7
    sweep_seconds: float = 60


# The schema knows storage.backend "postgres" (operations.md §4.3); this build has only SQLite, so
# the loader reports it as a config error (config check, serve and every store command exit 2).
POSTGRES_UNAVAILABLE = 'storage.backend: "postgres" is not available in this build (SQLite only)'
REDIS_UNAVAILABLE = (
    "storage.redis.url: shared limits through Redis are not available in this build; "
    "rate limits and auth lockouts are counted in this process"
)


@dataclass(frozen=True, slots=True)
class StorageSettings:
    backend: Literal["sqlite", "postgres"] = "sqlite"
    sqlite_path: str = "hookgate.db"  # absolute after loading
    durability: Literal["full", "normal"] = "full"
    group_commit_ms: float = 2.0
    busy_timeout_ms: int = 5000
    postgres_dsn: str | None = field(default=None, repr=False)
    postgres_pool_size: int = 10
    postgres_schema: str = "hookgate"
    redis_url: str | None = field(default=None, repr=False)
    redis_prefix: str = "hookgate:"
    lease_seconds: float = 30.0
    retention: RetentionSettings = field(default_factory=RetentionSettings)


@dataclass(frozen=True, slots=True)
class HeartbeatSettings:
    every_seconds: int = 1800  # 0 disables the schedule
    ack_max_chars: int = 300
    prompt: str | None = None


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """One agent with the defaults merged in (list values override defaults key by key)."""

    id: str
    default: bool = False
    name: str | None = None
    runtime: dict[str, Any] = field(default_factory=lambda: {"kind": "echo"})
    runtime_secrets: dict[str, SecretSource] = field(default_factory=dict)  # e.g. {"apiKey": …}
    model: str | dict[str, Any] | None = None
    thinking: str | None = None
    timeout_seconds: int = 600
    heartbeat: HeartbeatSettings = field(default_factory=HeartbeatSettings)
    system_prompt: str | None = None


@dataclass(frozen=True, slots=True)
class AgentsSettings:
    agents: tuple[AgentSettings, ...]  # config order; one `main` when the list is empty
    default_agent_id: str  # the `default: true` entry, else the first, else `main`
    models: dict[str, Any] = field(default_factory=dict)  # agents.defaults.models allowlist
    envelope_timezone: str = "local"
    history_messages: int = 20
    max_concurrent_runs: int = 4
    default_thinking: str | None = None  # agents.defaults.thinking, as written (model.md §5.3)

    @property
    def known_ids(self) -> frozenset[str]:
        return frozenset(a.id for a in self.agents) | {self.default_agent_id}

    def get(self, agent_id: str) -> AgentSettings | None:
        for a in self.agents:
            if a.id == agent_id:
                return a
        return None


@dataclass(frozen=True, slots=True)
class ChannelSettings:
    id: str  # channel id (telegram, slack, …, console, file)
    enabled: bool = True
    default_to: str | None = None
    retry_max_attempts: int = 6
    options: dict[str, Any] = field(default_factory=dict)  # adapter keys, non-secret, as configured
    secrets: dict[str, SecretSource] = field(default_factory=dict)  # adapter secret inputs, resolved


@dataclass(frozen=True, slots=True)
class AuthThrottleSettings:
    max_failures: int = 20
    window_seconds: int = 60
    lockout_seconds: int = 60


@dataclass(frozen=True, slots=True)
class GmailSettings:
    model: str | None = None
    thinking: str | None = None
    allow_unsafe_external_content: bool | None = None


@dataclass(frozen=True, slots=True)
class MappingSettings:
    """One resolved mapping of the final list (explicit mappings, then presets), hooks.md §6.1."""

    index: int  # 0-based position in the final list
    id: str
    match_path: str | None
    match_source: str | None
    action: Literal["wake", "agent"] = "agent"
    wake_mode: Literal["now", "next-heartbeat"] = "now"
    name: str | None = None
    agent_id: str | None = None
    session_key: str | None = None
    message_template: str | None = None
    text_template: str | None = None
    deliver: bool = True
    allow_unsafe_external_content: bool | None = None
    channel: str | None = None
    to: str | None = None
    model: str | None = None
    thinking: str | None = None
    timeout_seconds: int | None = None
    transform_module: str | None = None  # absolute path after loading
    transform_export: str | None = None
    from_preset: str | None = None
    transform_module_raw: str | None = None  # as configured, for re-running paths.check_contained


@dataclass(frozen=True, slots=True)
class HooksSettings:
    enabled: bool = False
    token: str | None = field(default=None, repr=False)  # resolved and trimmed
    base_path: str = "/hooks"
    max_body_bytes: int = 262_144
    body_timeout_seconds: int = 30
    default_session_key: str | None = None
    allow_request_session_key: bool = False
    allowed_session_key_prefixes: tuple[str, ...] | None = None  # None: no prefix policy
    allowed_agent_ids: frozenset[str] | None = None  # None: every agent allowed; empty: all denied
    presets: tuple[str, ...] = ()
    mappings: tuple[MappingSettings, ...] = ()  # the final list (§6.2)
    transforms_dir: str = ""  # absolute
    idempotency_ttl_seconds: int = 300
    transform_timeout_seconds: float = 10.0
    auth_throttle: AuthThrottleSettings = field(default_factory=AuthThrottleSettings)
    gmail: GmailSettings = field(default_factory=GmailSettings)


@dataclass(frozen=True, slots=True)
class RateLimitSettings:
    window_seconds: int = 60
    max_requests: int = 120


@dataclass(frozen=True, slots=True)
class LimitSettings:
    rate_limit: RateLimitSettings = field(default_factory=RateLimitSettings)
    max_in_flight: int = 8
    max_body_bytes: int = 262_144
    body_timeout_seconds: int = 15


@dataclass(frozen=True, slots=True)
class RouteAuthSettings:
    mode: Literal["bearer", "header", "hmac-sha256", "standard-webhooks", "legacy"] = "legacy"
    secrets: tuple[str, ...] = field(
        default=(), repr=False
    )  # resolved values (at least one when the route is active)
    header: str | None = None  # lower-cased header name
    prefix: str | None = None
    tolerance_seconds: int = 300


@dataclass(frozen=True, slots=True)
class RouteSettings:
    id: str
    path: str  # normalised (§1.4), original case
    session_key: str  # trimmed, lower-cased
    controller_id: str
    auth: RouteAuthSettings
    limits: LimitSettings
    enabled: bool = True
    description: str | None = None
    execute: bool = False
    agent_id: str | None = None
    skipped_reason: str | None = None  # set when no secret resolved: the route has no endpoint


@dataclass(frozen=True, slots=True)
class WebhooksSettings:
    enabled: bool = False
    routes: tuple[RouteSettings, ...] = ()  # enabled routes in config order, skipped ones included
    limits: LimitSettings = field(default_factory=LimitSettings)
    idempotency_ttl_hours: float = 24.0


@dataclass(frozen=True, slots=True)
class Settings:
    config_path: str | None  # None: no file, the empty config
    config_dir: str
    gateway: GatewaySettings
    storage: StorageSettings
    agents: AgentsSettings
    channels: tuple[ChannelSettings, ...]  # config order
    hooks: HooksSettings
    webhooks: WebhooksSettings
    effective: dict[str, Any] = field(repr=False)  # effective config, defaults filled, secrets as written
    config_hash: str  # 16 hex (README §6)
    warnings: tuple[str, ...] = ()
    secret_inputs: tuple[SecretSource, ...] = ()  # every secret input, for `secrets check`

    def enabled_channel_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.channels if c.enabled)

    def channel(self, channel_id: str) -> ChannelSettings | None:
        for c in self.channels:
            if c.id == channel_id and c.enabled:
                return c
        return None
