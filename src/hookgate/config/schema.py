"""THE table of every config key, type, range and default (README §4, operations.md §7).

Every default hookgate uses for a config value is written here once. ``CONFIG`` validates the whole
file; the tree it returns (defaults filled in) is the effective config of ``config show``.
"""

from __future__ import annotations

import re
from typing import Any

from hookgate.config.names import CHANNEL_IDS
from hookgate.config.validate import (
    AnyValue,
    Arr,
    Bool,
    Context,
    Enum,
    Field,
    Int,
    Map,
    Num,
    Obj,
    OneOf,
    Secret,
    Sensitive,
    Str,
    Tagged,
)

F = Field
URL = Sensitive(Str(), url=True)  # a URL: `config show` masks a password in it
MAX_BODY_BYTES = 33_554_432
MAX_RUN_TIMEOUT_SECONDS = 172_800
DEFAULT_PROVIDER = "default"
DEFAULT_HEARTBEAT_EVERY = "30m"
# upper bounds where the spec gives none: a lease, a sweep interval, a retention or idempotency
# lifetime past these turned into timestamps no clock or SQLite integer holds (an OverflowError in
# the worker or a request, not a config error)
_DAY_S = 86_400
_MAX_DAYS = 36_500

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")


class HeaderValue(Str):
    """A configured HTTP header value: printable ASCII, tabs allowed (no line breaks, no bytes an
    HTTP client would refuse to send — refused at startup, not retried at every delivery)."""

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        value = super().check(value, path, ctx)
        if isinstance(value, str) and not _HEADER_VALUE.fullmatch(value):
            return ctx.error(path, "invalid HTTP header value (printable ASCII only)")
        return value


class FilePath(Str):
    """A file path: no NUL character (the OS refuses such a path at every use)."""

    def check(self, value: Any, path: str, ctx: Context) -> Any:
        value = super().check(value, path, ctx)
        if isinstance(value, str) and "\x00" in value:
            return ctx.error(path, "must not contain a NUL character")
        return value


def _header_name(key: str, path: str, ctx: Context) -> bool:
    if _HEADER_NAME.fullmatch(key):
        return True
    ctx.error(path, "invalid HTTP header name")
    return False


# --- gateway (README §3–§7) -----------------------------------------------------------------------
GATEWAY = Obj(
    {
        "bind": F(Str(), "127.0.0.1"),
        "port": F(Int(0, 65535), 18789),
        "auth": F(Obj({"mode": F(Enum(("none", "token")), "none"), "token": F(Secret())}), fill=True),
        "trustedProxies": F(Arr(Str()), []),
        "allowRealIpFallback": F(Bool(), False),
        "compat": F(Obj({"acceptOpenclawHeaders": F(Bool(), True)}), fill=True),
        "http": F(
            Obj({"securityHeaders": F(Obj({"strictTransportSecurity": F(HeaderValue())}), fill=True)}),
            fill=True,
        ),
        "reload": F(Obj({"watch": F(Bool(), False)}), fill=True),
        "drainTimeoutSeconds": F(Num(0, 3600), 10),
    }
)

# --- storage (operations.md §4.1) -----------------------------------------------------------------
STORAGE = Obj(
    {
        "backend": F(Enum(("sqlite", "postgres")), "sqlite"),
        "sqlite": F(
            Obj(
                {
                    "path": F(FilePath(), "hookgate.db"),
                    "durability": F(Enum(("full", "normal")), "full"),
                    "groupCommitMs": F(Num(0, 1000), 2),
                    "busyTimeoutMs": F(Int(0, 600_000), 5000),
                }
            ),
            fill=True,
        ),
        "postgres": F(
            Obj(
                {
                    "dsn": F(Secret(url=True)),
                    "poolSize": F(Int(1, 1000), 10),
                    "schema": F(Str(), "hookgate"),
                }
            ),
            fill=True,
        ),
        "redis": F(Obj({"url": F(Secret(url=True)), "prefix": F(Str(), "hookgate:")}), fill=True),
        "leaseSeconds": F(Num(hi=_DAY_S, gt=0), 30),
        "retention": F(
            Obj(
                {
                    "taskDays": F(Num(hi=_MAX_DAYS, gt=0), 7),
                    "lostTaskDays": F(Num(hi=_MAX_DAYS, gt=0), 1),
                    "flowDays": F(Num(lo=0, hi=_MAX_DAYS), 30),  # 0 keeps flows forever (model.md §2.5)
                    "runDays": F(Num(hi=_MAX_DAYS, gt=0), 30),
                    "deliveryDays": F(Num(hi=_MAX_DAYS, gt=0), 30),
                    "eventDays": F(Num(hi=_MAX_DAYS, gt=0), 7),
                    "sweepSeconds": F(Num(hi=_DAY_S, gt=0), 60),
                }
            ),
            fill=True,
        ),
    }
)

# --- secrets (webhooks.md §1.3) -------------------------------------------------------------------
_TIMEOUT_MS = Int(1, 600_000)
_BYTES = Int(1, 1_073_741_824)
SECRET_PROVIDER = Tagged(
    "source",
    {
        "env": Obj({"source": F(Str()), "allowlist": F(Arr(Str()))}),
        "file": Obj(
            {
                "source": F(Str()),
                "path": F(Str(), required=True),
                "mode": F(Enum(("json", "singleValue")), "json"),
                "timeoutMs": F(_TIMEOUT_MS, 5000),
                "maxBytes": F(_BYTES, 1_048_576),
                "allowInsecurePath": F(Bool(), False),
            }
        ),
        "exec": Obj(
            {
                "source": F(Str()),
                "command": F(Str(), required=True),
                "args": F(Arr(Str()), []),
                "passEnv": F(Arr(Str()), []),
                "env": F(Map(Sensitive(Str())), {}),
                "timeoutMs": F(_TIMEOUT_MS, 5000),
                "noOutputTimeoutMs": F(_TIMEOUT_MS),  # default: timeoutMs
                "maxOutputBytes": F(_BYTES, 1_048_576),
                "jsonOnly": F(Bool(), True),
                "allowSymlinkCommand": F(Bool(), False),
                "trustedDirs": F(Arr(Str()), []),
                "allowInsecurePath": F(Bool(), False),
            }
        ),
    },
)
SECRETS = Obj(
    {
        "providers": F(Map(SECRET_PROVIDER), {}, pivotal=True),
        "defaults": F(
            Obj(
                {
                    "env": F(Str(), DEFAULT_PROVIDER),
                    "file": F(Str(), DEFAULT_PROVIDER),
                    "exec": F(Str(), DEFAULT_PROVIDER),
                }
            ),
            fill=True,
            pivotal=True,
        ),
        "resolution": F(
            Obj(
                {
                    "maxProviderConcurrency": F(Int(1, 64), 4),
                    "maxRefsPerProvider": F(Int(1, 100_000), 512),
                    "maxBatchBytes": F(_BYTES, 262_144),
                }
            ),
            fill=True,
        ),
    }
)

# --- agents (model.md §7–§9) ----------------------------------------------------------------------
_REQUEST_TIMEOUT = Num(gt=0)
HEADERS = Map(Sensitive(HeaderValue()), key_check=_header_name)  # values may be API keys
RUNTIME = Tagged(
    "kind",
    {
        "echo": Obj({"kind": F(Str())}),
        "openai": Obj(
            {
                "kind": F(Str()),
                "provider": F(Str()),
                "baseUrl": F(URL, "https://api.openai.com/v1"),
                "apiKey": F(Secret()),
                "model": F(Str()),
                "headers": F(HEADERS, {}),
                "requestTimeoutSeconds": F(_REQUEST_TIMEOUT, 120),
            }
        ),
        "anthropic": Obj(
            {
                "kind": F(Str()),
                "provider": F(Str()),
                "baseUrl": F(URL, "https://api.anthropic.com"),
                "apiKey": F(Secret()),
                "model": F(Str()),
                "maxTokens": F(Int(1, 1_000_000), 4096),
                "requestTimeoutSeconds": F(_REQUEST_TIMEOUT, 120),
            }
        ),
        "command": Obj(
            {
                "kind": F(Str()),
                "command": F(Arr(Str(), min_items=1), required=True),
                "input": F(Enum(("text", "json")), "text"),
                "env": F(Map(Sensitive(Str())), {}),
                "passEnv": F(Arr(Str()), []),
                "cwd": F(Str()),
            }
        ),
    },
)
MODEL = OneOf(Str(), Obj({"primary": F(Str(), required=True), "fallbacks": F(Arr(Str()), [])}))  # model.md §9.1
HEARTBEAT_KEYS = {"every": F(Str()), "ackMaxChars": F(Int(0, 100_000)), "prompt": F(Str())}
HEARTBEAT_DEFAULTS: dict[str, Any] = {"every": DEFAULT_HEARTBEAT_EVERY, "ackMaxChars": 300}
AGENT_DEFAULTS: dict[str, Any] = {
    "runtime": {"kind": "echo"},
    "thinking": "off",
    "timeoutSeconds": 600,
    "heartbeat": HEARTBEAT_DEFAULTS,
    "envelopeTimezone": "local",
    "historyMessages": 20,
    "maxConcurrentRuns": 4,
    "models": {},
}
AGENT_ENTRY = Obj(
    {
        "id": F(Str(), required=True),
        "default": F(Bool(), False),
        "name": F(Str()),
        "runtime": F(RUNTIME),
        "model": F(MODEL),
        "thinking": F(Str()),
        "timeoutSeconds": F(Int(1, MAX_RUN_TIMEOUT_SECONDS)),
        "heartbeat": F(Obj(HEARTBEAT_KEYS)),
        "systemPrompt": F(Str()),
    }
)
AGENTS = Obj(
    {
        "defaults": F(
            Obj(
                {
                    "runtime": F(RUNTIME, AGENT_DEFAULTS["runtime"]),
                    "model": F(MODEL),
                    "models": F(Map(Obj({"alias": F(Str()), "params": F(Map(AnyValue()))})), {}),
                    "thinking": F(Str(), AGENT_DEFAULTS["thinking"]),
                    "timeoutSeconds": F(Int(1, MAX_RUN_TIMEOUT_SECONDS), AGENT_DEFAULTS["timeoutSeconds"]),
                    "heartbeat": F(
                        Obj(
                            {
                                "every": F(Str(), DEFAULT_HEARTBEAT_EVERY),
                                "ackMaxChars": F(Int(0, 100_000), 300),
                                "prompt": F(Str()),
                            }
                        ),
                        fill=True,
                    ),
                    "systemPrompt": F(Str()),
                    "envelopeTimezone": F(Str(), AGENT_DEFAULTS["envelopeTimezone"]),
                    "historyMessages": F(Int(0, 200), AGENT_DEFAULTS["historyMessages"]),
                    "maxConcurrentRuns": F(Int(1, 64), AGENT_DEFAULTS["maxConcurrentRuns"]),
                }
            ),
            fill=True,
        ),
        "list": F(Arr(AGENT_ENTRY), []),
    }
)

# --- channels (model.md §10.2) --------------------------------------------------------------------
DEFAULT_RETRY_MAX_ATTEMPTS = 6


def _channel(keys: dict[str, Field]) -> Obj:
    common = {
        "enabled": F(Bool(), True, pivotal=True),
        "defaultTo": F(Str()),
        "retry": F(Obj({"maxAttempts": F(Int(1, 100), DEFAULT_RETRY_MAX_ATTEMPTS)}), fill=True),
    }
    return Obj({**common, **keys})


CHANNEL_SCHEMAS: dict[str, Obj] = {
    "telegram": _channel({"botToken": F(Secret()), "apiBaseUrl": F(URL, "https://api.telegram.org")}),
    "slack": _channel({"botToken": F(Secret()), "apiBaseUrl": F(URL, "https://slack.com/api")}),
    "discord": _channel({"botToken": F(Secret()), "apiBaseUrl": F(URL, "https://discord.com/api/v10")}),
    "mattermost": _channel({"baseUrl": F(URL), "token": F(Secret())}),
    "msteams": _channel({"webhooks": F(Map(Secret()), {})}),
    "googlechat": _channel({"webhooks": F(Map(Secret()), {})}),
    "line": _channel({"channelAccessToken": F(Secret()), "apiBaseUrl": F(URL, "https://api.line.me")}),
    "whatsapp": _channel(
        {
            "accessToken": F(Secret()),
            "phoneNumberId": F(Str()),
            "apiBaseUrl": F(URL, "https://graph.facebook.com/v21.0"),
        }
    ),
    "signal": _channel({"baseUrl": F(URL), "number": F(Str())}),
    "irc": _channel(
        {
            "server": F(Str()),
            "port": F(Int(1, 65535), 6697),
            "tls": F(Bool(), True),
            "nick": F(Str()),
            "password": F(Secret()),
        }
    ),
    "webhook": _channel({"url": F(URL), "secret": F(Secret()), "headers": F(HEADERS, {})}),
    "console": _channel({}),
    "file": _channel({"path": F(FilePath())}),
    "imessage": _channel(
        {
            "serverUrl": F(URL),
            "password": F(Secret()),
            "method": F(Enum(("private-api", "apple-script")), "private-api"),
        }
    ),
}
assert tuple(CHANNEL_SCHEMAS) == CHANNEL_IDS
CHANNELS = Obj({cid: F(node) for cid, node in CHANNEL_SCHEMAS.items()})

# --- hooks (hooks.md §1, §6) ----------------------------------------------------------------------
AUTH_THROTTLE = Obj(
    {
        "maxFailures": F(Int(1), 20),
        "windowSeconds": F(Int(1), 60),
        "lockoutSeconds": F(Int(1), 60),
    }
)
GMAIL = Obj(
    {
        "account": F(Str()),
        "label": F(Str()),
        "topic": F(Str()),
        "subscription": F(Str()),
        "pushToken": F(Sensitive(Str())),
        "hookUrl": F(URL),
        "includeBody": F(Bool()),
        "maxBytes": F(Int()),
        "renewEveryMinutes": F(Int()),
        "serve": F(Obj({"bind": F(Str()), "port": F(Int()), "path": F(Str())})),
        "tailscale": F(Obj({"mode": F(Str()), "path": F(Str()), "target": F(Str())})),
        "model": F(Str()),
        "thinking": F(Str()),
        "allowUnsafeExternalContent": F(Bool()),
    }
)
MAPPING = Obj(
    {
        "id": F(Str()),
        "match": F(Obj({"path": F(Str()), "source": F(Str())})),
        "action": F(Enum(("wake", "agent")), "agent", pivotal=True),
        "wakeMode": F(Enum(("now", "next-heartbeat")), "now"),
        "name": F(Str()),
        "agentId": F(Str()),
        "sessionKey": F(Str()),
        "messageTemplate": F(Str()),
        "textTemplate": F(Str()),
        "deliver": F(Bool(), True),
        "allowUnsafeExternalContent": F(Bool()),
        "channel": F(Str()),
        "to": F(Str()),
        "model": F(Str()),
        "thinking": F(Str()),
        "timeoutSeconds": F(Int(1)),
        "transform": F(Obj({"module": F(Str()), "export": F(Str())}), pivotal=True),
    }
)
HOOKS = Obj(
    {
        "enabled": F(Bool(), False, pivotal=True),
        "token": F(Secret()),
        "path": F(Str(), "/hooks"),
        "maxBodyBytes": F(Int(1, MAX_BODY_BYTES), 262_144),
        "bodyTimeoutSeconds": F(Int(1, 300), 30),
        "defaultSessionKey": F(Str()),
        "allowRequestSessionKey": F(Bool(), False),
        "allowedSessionKeyPrefixes": F(Arr(Str())),
        "allowedAgentIds": F(Arr(Str())),
        "presets": F(Arr(Str()), []),
        "transformsDir": F(Str(), pivotal=True),
        "mappings": F(Arr(MAPPING), []),
        "gmail": F(GMAIL, fill=True),
        "idempotencyTtlSeconds": F(Int(1, 86_400), 300),
        "transformTimeoutSeconds": F(Num(0.1, 60), 10),
        "authThrottle": F(AUTH_THROTTLE, fill=True),
        "internal": F(Map(AnyValue())),  # an object, accepted and ignored (hooks.md §1.1)
    }
)

# --- plugins.entries.webhooks (webhooks.md §1–§2.2) -----------------------------------------------
LIMITS = Obj(
    {
        "rateLimit": F(Obj({"windowSeconds": F(Int(1, 86_400)), "maxRequests": F(Int(1))})),
        "maxInFlight": F(Int(1)),
        "maxBodyBytes": F(Int(1, MAX_BODY_BYTES)),
        "bodyTimeoutSeconds": F(Int(1, 300)),
    }
)
LIMIT_DEFAULTS: dict[str, Any] = {
    "rateLimit": {"windowSeconds": 60, "maxRequests": 120},
    "maxInFlight": 8,
    "maxBodyBytes": 262_144,
    "bodyTimeoutSeconds": 15,
}
ROUTE_AUTH = Obj(
    {
        "mode": F(Enum(("bearer", "header", "hmac-sha256", "standard-webhooks")), "bearer"),
        "secret": F(Secret()),
        "secrets": F(Arr(Secret(), min_items=1, max_items=5)),
        "header": F(Str()),
        "prefix": F(Str()),
        "toleranceSeconds": F(Int(1, 3600), 300),
    }
)
ROUTE = Obj(
    {
        "enabled": F(Bool(), True, pivotal=True),
        "path": F(Str(), pivotal=True),
        "sessionKey": F(Str()),
        "secret": F(Secret(), pivotal=True),
        "auth": F(ROUTE_AUTH, pivotal=True),
        "controllerId": F(Str()),
        "description": F(Str()),
        "execute": F(Bool(), False),
        "agentId": F(Str()),
        "limits": F(LIMITS),
    }
)
WEBHOOKS_ENTRY = Obj(
    {
        "enabled": F(Bool(), True, pivotal=True),
        "config": F(
            Obj(
                {
                    "routes": F(Map(ROUTE), {}),
                    "limits": F(LIMITS),
                    "idempotencyTtlHours": F(Num(hi=_MAX_DAYS * 24, gt=0), 24),
                }
            ),
            fill=True,
        ),
    }
)


def _plugin_id(key: str, path: str, ctx: Context) -> bool:
    if key == "webhooks":
        return True
    ctx.error(path, 'unknown plugin (hookgate supports only "webhooks")')
    return False


PLUGINS = Obj({"entries": F(Map(WEBHOOKS_ENTRY, key_check=_plugin_id), {})})

CONFIG = Obj(
    {
        "gateway": F(GATEWAY, fill=True),
        "storage": F(STORAGE, fill=True),
        "secrets": F(SECRETS, fill=True),
        "agents": F(AGENTS, fill=True),
        "channels": F(CHANNELS, {}),
        "hooks": F(HOOKS, fill=True),
        "plugins": F(PLUGINS, fill=True),
    }
)
