from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from hookgate.config.render import mask_url_password, redacted_effective, summary_line

if TYPE_CHECKING:
    from conftest import Kit


def base(token: str = "hook-secret", route_secret: str = "zap", bind: str = "127.0.0.1") -> dict[str, Any]:
    return {
        "gateway": {"bind": bind},
        "storage": {"redis": {"url": "redis://:pw@cache:6379/0"}},
        "hooks": {"enabled": True, "token": token, "mappings": [{"match": {"path": "x"}}]},
        "channels": {"telegram": {"botToken": {"source": "env", "id": "TG"}}, "console": {}},
        "plugins": {
            "entries": {
                "webhooks": {
                    "config": {
                        "routes": {
                            "zapier": {"sessionKey": "agent:main:main", "secret": route_secret},
                            "ci": {"sessionKey": "s", "auth": {"secrets": [{"source": "env", "id": "CI"}]}},
                        }
                    }
                }
            }
        },
    }


def test_hash_is_stable_and_secret_independent(kit: Kit) -> None:
    a = kit.load(base())
    assert a.config_hash == kit.load(base()).config_hash
    assert len(a.config_hash) == 16 and int(a.config_hash, 16) >= 0
    assert kit.load(base(token="other", route_secret="other")).config_hash == a.config_hash
    assert kit.load(base(), {"CI": "ci", "TG": "tg"}).config_hash == a.config_hash
    assert kit.load(base(bind="0.0.0.0")).config_hash != a.config_hash
    # key order in the file does not matter
    reordered = dict(reversed(list(base().items())))
    assert kit.load(reordered).config_hash == a.config_hash


def test_hash_differs_with_defaults_filled_equivalently(kit: Kit) -> None:
    assert kit.load({}).config_hash == kit.load({"gateway": {"port": 18789}}).config_hash


def test_route_defaults_are_in_the_effective_config(kit: Kit) -> None:
    """A route's path, controllerId and limits default per route and per plugin: `config show` prints
    them, and spelling them out does not change the hash."""
    def webhooks(route: dict[str, Any], **plugin: Any) -> dict[str, Any]:
        return {"plugins": {"entries": {"webhooks": {"config": {"routes": {"ci": route}, **plugin}}}}}

    bare = kit.load(webhooks({"sessionKey": "agent:main:main", "secret": "s"}, limits={"maxInFlight": 4}))
    spelled = kit.load(webhooks({"sessionKey": "agent:main:main", "secret": "s", "path": "/plugins/webhooks/ci",
                                 "controllerId": "webhooks/ci", "limits": {"bodyTimeoutSeconds": 15}},
                                limits={"maxInFlight": 4, "rateLimit": {"maxRequests": 120}}))
    assert bare.config_hash == spelled.config_hash
    route = redacted_effective(bare)["plugins"]["entries"]["webhooks"]["config"]["routes"]["ci"]
    assert (route["path"], route["controllerId"]) == ("/plugins/webhooks/ci", "webhooks/ci")
    assert route["limits"] == {"rateLimit": {"windowSeconds": 60, "maxRequests": 120}, "maxInFlight": 4,
                               "maxBodyBytes": 262_144, "bodyTimeoutSeconds": 15}
    other = kit.load(webhooks({"sessionKey": "agent:main:main", "secret": "s", "limits": {"maxInFlight": 5}},
                              limits={"maxInFlight": 4}))
    assert other.config_hash != bare.config_hash


def test_redacted_effective(kit: Kit) -> None:
    s = kit.load(base())
    shown = redacted_effective(s)
    text = json.dumps(shown)
    assert "hook-secret" not in text and 'zap"' not in text and ":pw@" not in text
    assert shown["hooks"]["token"] == "[redacted]"
    routes = shown["plugins"]["entries"]["webhooks"]["config"]["routes"]
    assert routes["zapier"]["secret"] == "[redacted]"
    assert routes["ci"]["auth"]["secrets"] == [{"source": "env", "id": "CI"}]
    assert shown["channels"]["telegram"]["botToken"] == {"source": "env", "id": "TG"}
    assert shown["storage"]["redis"]["url"] == "redis://:***@cache:6379/0"
    assert shown["hooks"]["maxBodyBytes"] == 262_144
    assert shown["agents"]["defaults"]["heartbeat"]["every"] == "30m"
    assert s.effective["hooks"]["token"] == "hook-secret"


def test_redacts_runtime_and_channel_secrets(kit: Kit) -> None:
    s = kit.load(
        {
            "agents": {"list": [{"id": "x", "runtime": {"kind": "openai", "apiKey": "sk-1"}}]},
            "channels": {"msteams": {"webhooks": {"ops": "https://hook/secret"}}, "irc": {"password": "p"}},
            "storage": {"postgres": {"dsn": "host=db user=u password=hunter2 dbname=x"}},
        }
    )
    shown = redacted_effective(s)
    assert shown["agents"]["list"][0]["runtime"]["apiKey"] == "[redacted]"
    assert shown["channels"]["msteams"]["webhooks"] == {"ops": "[redacted]"}
    assert shown["channels"]["irc"]["password"] == "[redacted]"
    assert shown["storage"]["postgres"]["dsn"] == "host=db user=u password=*** dbname=x"


def test_redacts_values_that_may_carry_credentials(kit: Kit) -> None:
    """operations.md §6: tokens never appear in `config show` — not only in secret inputs, but in API
    headers, a command's environment, URLs with a password and the (inert) Gmail push token."""
    s = kit.load(
        {
            "agents": {"list": [
                {"id": "x", "runtime": {"kind": "openai", "baseUrl": "https://u:pw@llm.local/v1",
                                        "headers": {"X-Api-Key": "sk-header"}}},
                {"id": "y", "runtime": {"kind": "command", "command": ["/bin/run"], "env": {"VAULT_TOKEN": "vt"}}},
            ]},
            "channels": {"webhook": {"url": "https://bot:hunter2@chat.local/in", "headers": {"Authorization": "t"}}},
            "hooks": {"enabled": True, "token": "hook-secret", "gmail": {"pushToken": "push-secret"}},
        }
    )
    shown = redacted_effective(s)
    text = json.dumps(shown)
    for secret in ("sk-header", "vt", "hunter2", "push-secret", ":pw@", '"t"'):
        assert secret not in text
    x, y = shown["agents"]["list"]
    assert x["runtime"]["headers"] == {"X-Api-Key": "[redacted]"}
    assert x["runtime"]["baseUrl"] == "https://u:***@llm.local/v1"
    assert y["runtime"]["env"] == {"VAULT_TOKEN": "[redacted]"}
    assert shown["channels"]["webhook"]["url"] == "https://bot:***@chat.local/in"
    assert shown["hooks"]["gmail"]["pushToken"] == "[redacted]"
    assert shown["agents"]["defaults"] == redacted_effective(kit.load({}))["agents"]["defaults"]


@pytest.mark.parametrize(
    ("raw", "masked"),
    [
        ("postgresql://u:p@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("redis://h:6379", "redis://h:6379"),
        ("redis://:secret@h", "redis://:***@h"),
        ("postgresql://u:pa@ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p@s:w@h:5432/db?sslmode=require", "postgresql://u:***@h:5432/db?sslmode=require"),
        ("redis://:pw@h:6379/0 redis://:x@y", "redis://:***@h:6379/0 redis://:***@y"),
        # libpq's sslpassword (the client key's passphrase), in a URI's query and in a key=value DSN
        ("postgresql://u:PW7@h/d?sslpassword=PW8&sslmode=require",
         "postgresql://u:***@h/d?sslpassword=***&sslmode=require"),
        ("host=h sslpassword=PW8 password='a b' dbname=d", "host=h sslpassword=*** password=*** dbname=d"),
        # a webhook URL that authenticates by its query: the credential parameters only
        ("https://chat.local/in?token=QS2&a=1&Key=K3&sig=S4#f", "https://chat.local/in?token=***&a=1&Key=***&sig=***#f"),
        ("https://h/x?api_key=A&apikey=B&access_token=C&signature=D&secret=E&auth=F&mykey=G&keys=H",
         "https://h/x?api_key=***&apikey=***&access_token=***&signature=***&secret=***&auth=***&mykey=G&keys=H"),
    ],
)
def test_mask_url_password(raw: str, masked: str) -> None:
    assert mask_url_password(raw) == masked


def test_summary_line(kit: Kit) -> None:
    cfg = base()
    cfg["agents"] = {"list": [{"id": "main"}, {"id": "ops"}]}
    cfg["hooks"].update({"presets": ["gmail"], "allowedSessionKeyPrefixes": ["hook:"]})
    s = kit.load(cfg)
    assert (
        summary_line(s)
        == "hooks: enabled, 1 mapping, 1 preset; routes: 1 active, 1 skipped; agents: 2; channels: 2; store: sqlite"
    )
    assert (
        summary_line(kit.load({}))
        == "hooks: disabled, 0 mappings, 0 presets; routes: 0 active, 0 skipped; agents: 1; channels: 0; store: sqlite"
    )


def test_secret_inputs_listed(kit: Kit) -> None:
    s = kit.load(base())
    assert [(x.key_path, x.source, x.value is not None) for x in s.secret_inputs] == [
        ("storage.redis.url", "string", True),
        ("hooks.token", "string", True),
        ("channels.telegram.botToken", "env:default:TG", False),
        ("plugins.entries.webhooks.config.routes.zapier.secret", "string", True),
        ("plugins.entries.webhooks.config.routes.ci.auth.secrets[0]", "env:default:CI", False),
    ]


def test_repr_never_shows_secret_values(kit: Kit) -> None:
    cfg = base(token="hook-token-xyz", route_secret="route-secret-xyz")
    cfg["gateway"]["auth"] = {"mode": "token", "token": "gw-token-xyz"}
    s = kit.load(cfg)
    text = repr(s)
    for secret in ("hook-token-xyz", "route-secret-xyz", "gw-token-xyz", ":pw@"):
        assert secret not in text


def test_exec_provider_idle_timeout_default_is_in_the_effective_config(kit: Kit) -> None:
    def cfg(**provider: Any) -> dict[str, Any]:
        return {"secrets": {"providers": {"vault": {"source": "exec", "command": "/bin/true", "timeoutMs": 700,
                                                    **provider}}}}

    bare = kit.load(cfg())
    assert redacted_effective(bare)["secrets"]["providers"]["vault"]["noOutputTimeoutMs"] == 700  # = timeoutMs
    assert kit.load(cfg(noOutputTimeoutMs=700)).config_hash == bare.config_hash
    assert kit.load(cfg(noOutputTimeoutMs=300)).config_hash != bare.config_hash
