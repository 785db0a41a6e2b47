from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hookgate.agents import build_runtime, choose_model
from hookgate.config.hooks import GMAIL_MESSAGE_TEMPLATE

if TYPE_CHECKING:
    from conftest import Kit

TOKEN = {"enabled": True, "token": "hook-secret"}
PREFIXES_REQUIRED = (
    "hooks.allowedSessionKeyPrefixes is required when a hook mapping sessionKey uses templates, "
    "even if hooks.allowRequestSessionKey=true"
)


def hooks(**kw: Any) -> dict[str, Any]:
    return {"hooks": {**TOKEN, **kw}}


# --- #1–#5 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "", "   "])
def test_1_enabled_requires_token(kit: Kit, token: str | None) -> None:
    cfg: dict[str, Any] = {"enabled": True}
    if token is not None:
        cfg["token"] = token
    assert kit.errors({"hooks": cfg}) == ["hooks.enabled requires hooks.token"]


def test_disabled_hooks_need_no_token(kit: Kit) -> None:
    assert not kit.load({"hooks": {"enabled": False}}).hooks.enabled


def test_2_unresolvable_token_ref(kit: Kit) -> None:
    ref = {"source": "env", "provider": "default", "id": "HOOKS_TOKEN"}
    assert kit.errors({"hooks": {"enabled": True, "token": ref}}) == [
        'hooks.token: Environment variable "HOOKS_TOKEN" is missing or empty.'
    ]
    assert kit.errors({"hooks": {"enabled": True, "token": ref}}, {"HOOKS_TOKEN": "  "}) == [
        'hooks.token: Environment variable "HOOKS_TOKEN" is missing or empty.'
    ]
    assert kit.load({"hooks": {"enabled": True, "token": ref}}, {"HOOKS_TOKEN": " t "}).hooks.token == "t"


@pytest.mark.parametrize("path", ["/", "///", " / "])
def test_3_root_path(kit: Kit, path: str) -> None:
    assert kit.errors(hooks(path=path)) == ["hooks.path may not be '/'"]


@pytest.mark.parametrize(
    ("raw", "norm"), [("/metrics", "/metrics"), ("healthz/x/", "/healthz/x"), ("/ready", "/ready")]
)
def test_4_reserved_path(kit: Kit, raw: str, norm: str) -> None:
    assert kit.errors(hooks(path=raw)) == [f"hooks.path may not be a reserved path ({norm})"]


def test_path_normalisation(kit: Kit) -> None:
    assert kit.load(hooks(path="api/hooks/")).hooks.base_path == "/api/hooks"
    assert kit.load(hooks(path="")).hooks.base_path == "/hooks"
    assert kit.load(hooks(path="/healthzz")).hooks.base_path == "/healthzz"


def test_5_token_equals_gateway_token(kit: Kit) -> None:
    cfg = {
        "gateway": {"auth": {"mode": "token", "token": " same "}},
        "hooks": {"enabled": True, "token": "same"},
    }
    assert kit.errors(cfg) == [
        "hooks.token must not match gateway auth token. Set a distinct hooks.token for hook ingress."
    ]
    cfg["gateway"]["auth"]["mode"] = "none"
    assert kit.load(cfg).hooks.token == "same"


def test_errors_reported_in_table_order(kit: Kit) -> None:
    cfg = {
        "hooks": {
            "enabled": True,
            "path": "/",
            "allowedSessionKeyPrefixes": ["agent:"],
            "mappings": [{"sessionKey": "x:{{a}}", "transform": {"module": "/abs.js"}}],
        }
    }
    assert kit.errors(cfg) == [
        "hooks.enabled requires hooks.token",
        "hooks.path may not be '/'",
        "hooks.mappings[0].transform.module: module must be a safe relative path (no absolute paths)",
        "hooks.mappings[0].transform.module: only Python (.py) transforms are supported",
        "hooks.allowedSessionKeyPrefixes must include 'hook:' when hooks.defaultSessionKey is unset",
    ]


# --- #6–#8 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module", ["../evil.py", "/etc/evil.py", "~/evil.py", "c:evil.py", "a/../../b.py", "a/../b.py"]
)
def test_6_unsafe_module(kit: Kit, module: str) -> None:
    assert kit.errors(hooks(mappings=[{"transform": {"module": module}}])) == [
        "hooks.mappings[0].transform.module: module must be a safe relative path (no absolute paths)"
    ]


@pytest.mark.parametrize("module", ["x.js", "x.py.txt", "x"])
def test_7_not_python(kit: Kit, module: str) -> None:
    assert kit.errors(hooks(mappings=[{}, {"transform": {"module": module}}])) == [
        "hooks.mappings[1].transform.module: only Python (.py) transforms are supported"
    ]


def test_nul_in_a_transform_path(kit: Kit) -> None:
    # os.stat refuses such a path with ValueError at every use: a config error, not a 500 per request
    assert kit.errors(hooks(mappings=[{"transform": {"module": "a\x00.py"}}])) == [
        "hooks.mappings[0].transform.module: must not contain a NUL character"
    ]
    assert kit.errors(hooks(transformsDir="real\x00", mappings=[{}])) == [
        "hooks.transformsDir: must not contain a NUL character"
    ]
    assert kit.load(hooks(transformsDir="real\x00")).hooks.enabled  # checked only when used, as #8
    # the modules' own errors are still reported beside it
    assert kit.errors(hooks(transformsDir="x\x00", mappings=[{"transform": {"module": "/abs.js"}}])) == [
        "hooks.transformsDir: must not contain a NUL character",
        "hooks.mappings[0].transform.module: module must be a safe relative path (no absolute paths)",
        "hooks.mappings[0].transform.module: only Python (.py) transforms are supported",
    ]


def root_of(kit: Kit) -> Path:
    return kit.root / "hooks" / "transforms"


@pytest.mark.parametrize("raw", ["..", "../other", "/tmp", "~"])
def test_8_transforms_dir_escapes(kit: Kit, raw: str) -> None:
    assert kit.errors(hooks(transformsDir=raw, mappings=[{}])) == [
        f"Hook transformsDir module path must be within {root_of(kit)}: {raw}"
    ]


def test_8_transforms_dir_only_checked_with_mappings(kit: Kit) -> None:
    assert kit.load(hooks(transformsDir="..")).hooks.enabled
    assert kit.errors(hooks(transformsDir="..", presets=["gmail"], allowedSessionKeyPrefixes=["hook:"])) == [
        f"Hook transformsDir module path must be within {root_of(kit)}: .."
    ]


def test_8_transforms_dir_inside(kit: Kit) -> None:
    s = kit.load(hooks(transformsDir=" sub/dir ", mappings=[{}]))
    assert s.hooks.transforms_dir == str(root_of(kit) / "sub" / "dir")


def test_8_module_required(kit: Kit) -> None:
    for transform in ({}, {"module": "  "}, {"export": "fn"}):
        assert kit.errors(hooks(mappings=[{"transform": transform}])) == [
            "Hook transform module path is required"
        ]


def test_8_module_resolves_and_missing_file_warns(kit: Kit) -> None:
    root_of(kit).mkdir(parents=True)
    (root_of(kit) / "github.py").write_text("def transform(ctx): return None\n")
    s = kit.load(
        hooks(
            mappings=[
                {"transform": {"module": "github.py", "export": " fn "}},
                {"transform": {"module": "later.py"}},
            ]
        )
    )
    first, second = s.hooks.mappings
    assert first.transform_module == str(root_of(kit) / "github.py") and first.transform_export == "fn"
    assert first.transform_module_raw == "github.py"
    assert second.transform_module == str(root_of(kit) / "later.py") and second.transform_export is None
    assert s.warnings == (f"hook transform module not found: {root_of(kit) / 'later.py'}",)


def test_8_symlinks(kit: Kit, tmp_path: Path) -> None:
    root = root_of(kit)
    (root / "inner").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text("")
    (root / "inner" / "ok.py").write_text("")
    os.symlink(outside / "evil.py", root / "link.py")
    os.symlink(root / "inner" / "ok.py", root / "alias.py")
    os.symlink(outside, root / "outdir")
    os.symlink(root / "inner", root / "indir")
    assert kit.errors(hooks(mappings=[{"transform": {"module": "link.py"}}])) == [
        f"Hook transform module path must be within {root}: link.py"
    ]
    assert kit.errors(hooks(mappings=[{"transform": {"module": "outdir/new.py"}}])) == [
        f"Hook transform module path must be within {root}: outdir/new.py"
    ]
    assert kit.errors(hooks(transformsDir="outdir", mappings=[{}])) == [
        f"Hook transformsDir module path must be within {root}: outdir"
    ]
    s = kit.load(hooks(transformsDir="indir", mappings=[{"transform": {"module": "ok.py"}}]))
    assert s.hooks.mappings[0].transform_module == str(root / "indir" / "ok.py")
    assert kit.load(hooks(mappings=[{"transform": {"module": "alias.py"}}])).warnings == ()


def test_8_module_within_custom_dir(kit: Kit) -> None:
    sub = root_of(kit) / "sub"
    sub.mkdir(parents=True)
    (root_of(kit) / "up.py").write_text("")
    os.symlink(root_of(kit) / "up.py", sub / "up.py")
    assert kit.errors(hooks(transformsDir="sub", mappings=[{"transform": {"module": "up.py"}}])) == [
        f"Hook transform module path must be within {sub}: up.py"
    ]


# --- #9–#11 ----------------------------------------------------------------------------------------


def test_9_default_key_must_match_prefixes(kit: Kit) -> None:
    assert kit.errors(hooks(defaultSessionKey="Other:x", allowedSessionKeyPrefixes=["hook:"])) == [
        "hooks.defaultSessionKey must match hooks.allowedSessionKeyPrefixes"
    ]
    s = kit.load(
        hooks(defaultSessionKey=" HOOK:Ingress ", allowedSessionKeyPrefixes=[" Hook: ", "", "hook:"])
    )
    assert s.hooks.default_session_key == "HOOK:Ingress"
    assert s.hooks.allowed_session_key_prefixes == ("hook:",)


def test_10_prefixes_need_hook_when_no_default(kit: Kit) -> None:
    assert kit.errors(hooks(allowedSessionKeyPrefixes=["agent:"])) == [
        "hooks.allowedSessionKeyPrefixes must include 'hook:' when hooks.defaultSessionKey is unset"
    ]
    assert kit.load(hooks(allowedSessionKeyPrefixes=["hook:ex"])).hooks.allowed_session_key_prefixes == (
        "hook:ex",
    )
    assert kit.load(hooks(allowedSessionKeyPrefixes=["  "])).hooks.allowed_session_key_prefixes is None


def test_11_templated_session_key(kit: Kit) -> None:
    assert kit.errors(hooks(mappings=[{"match": {"path": "gh"}, "sessionKey": "hook:{{ repo }}"}])) == [
        PREFIXES_REQUIRED
    ]
    assert kit.errors(hooks(presets=["gmail"], allowRequestSessionKey=True)) == [PREFIXES_REQUIRED]
    kit.load(hooks(mappings=[{"action": "wake", "sessionKey": "hook:{{repo}}"}]))
    kit.load(hooks(mappings=[{"sessionKey": "hook:static"}]))
    kit.load(hooks(presets=["gmail"], allowedSessionKeyPrefixes=["hook:"]))


def test_11_shadowed_mappings_are_not_effective(kit: Kit) -> None:
    s = kit.load(
        hooks(presets=["gmail"], mappings=[{"match": {"path": "/gmail/"}, "sessionKey": "hook:gmail"}])
    )
    assert [m.id for m in s.hooks.mappings] == ["mapping-1", "gmail"]
    kit.load(hooks(mappings=[{}, {"match": {"path": "x"}, "sessionKey": "{{a}}"}]))
    # an earlier mapping with a different source does not shadow
    assert kit.errors(
        hooks(
            presets=["gmail"],
            mappings=[{"match": {"path": "gmail", "source": "other"}, "sessionKey": "hook:x"}],
        )
    ) == [PREFIXES_REQUIRED]
    kit.load(
        hooks(
            mappings=[
                {"match": {"source": "s"}},
                {"match": {"source": "s", "path": "p"}, "sessionKey": "{{a}}"},
            ]
        )
    )


# --- values and warnings ---------------------------------------------------------------------------


def test_mapping_resolution(kit: Kit) -> None:
    s = kit.load(
        {
            "channels": {"telegram": {"botToken": "t"}, "slack": {"enabled": False}},
            "hooks": {
                **TOKEN,
                "allowedSessionKeyPrefixes": ["hook:"],
                "presets": ["gmail", "nope", "gmail"],
                "gmail": {"allowUnsafeExternalContent": True, "model": " m ", "account": "a@b"},
                "mappings": [
                    {
                        "id": "  ",
                        "match": {"path": " /a/b/ ", "source": " src "},
                        "action": "wake",
                        "textTemplate": "x",
                    },
                    {
                        "id": " gh ",
                        "agentId": " Ops ",
                        "channel": " TG ",
                        "timeoutSeconds": 5,
                        "deliver": False,
                    },
                    {"channel": "Slack"},
                    {"channel": "last"},
                ],
            },
        }
    )
    m = s.hooks.mappings
    assert [x.id for x in m] == ["mapping-1", "gh", "mapping-3", "mapping-4", "gmail"]
    assert [x.index for x in m] == [0, 1, 2, 3, 4]
    assert (m[0].match_path, m[0].match_source, m[0].action, m[0].text_template) == (
        "a/b",
        "src",
        "wake",
        "x",
    )
    assert (m[1].agent_id, m[1].channel, m[1].timeout_seconds, m[1].deliver) == ("Ops", "TG", 5, False)
    gmail = m[4]
    assert gmail.from_preset == "gmail" and gmail.match_path == "gmail" and gmail.name == "Gmail"
    assert gmail.session_key == "hook:gmail:{{messages[0].id}}"
    assert gmail.message_template == GMAIL_MESSAGE_TEMPLATE
    assert GMAIL_MESSAGE_TEMPLATE.count("\n") == 3
    assert gmail.allow_unsafe_external_content is True
    assert s.hooks.gmail.model == "m"
    assert s.hooks.presets == ("gmail",)
    assert s.warnings == (
        "unknown hooks preset: nope",
        'hooks.mappings[1].channel: channel "TG" is not configured',
        'hooks.mappings[2].channel: channel "Slack" is not configured',
    )


def test_mapping_channel_blank_is_error(kit: Kit) -> None:
    assert kit.errors(hooks(mappings=[{"channel": " "}])) == [
        "hooks.mappings[0].channel: must be a non-empty string"
    ]


def test_internal_is_ignored_with_warning(kit: Kit) -> None:
    assert kit.load(hooks(internal={"anything": [1]})).warnings == (
        "hooks.internal is not supported and is ignored",
    )


def test_a_repeated_mapping_id_is_warned_about(kit: Kit) -> None:
    # ids label a mapping's requests in metrics and logs (hooks.md §6.1); the spec does not make them
    # unique, so a repeat loads, and config check says what it costs
    wake = {"action": "wake", "textTemplate": "x"}
    s = kit.load(hooks(presets=["gmail"], allowedSessionKeyPrefixes=["hook:"], mappings=[
        {"id": "ci", "match": {"path": "a"}, **wake}, {"id": " ci ", "match": {"path": "b"}, **wake},
        {"match": {"path": "c"}, **wake}, {"id": "mapping-3", "match": {"path": "d"}, **wake},
        {"id": "gmail", "match": {"path": "e"}, **wake}, {"id": "other", "match": {"path": "f"}, **wake},
        {"id": "mapping-8", "match": {"path": "g"}, **wake}, {"match": {"path": "h"}, **wake},
    ]))
    assert s.warnings == (
        'hooks.mappings[1].id: "ci" is also hooks.mappings[0]\'s: their requests share one label in metrics and logs',
        ('hooks.mappings[3].id: "mapping-3" is also hooks.mappings[2]\'s: their requests share one label in '
         "metrics and logs"),
        'hooks.mappings[4].id: "gmail" is also the gmail preset\'s: their requests share one label in metrics and logs',
        ('hooks.mappings[7]: its default id "mapping-8" is also hooks.mappings[6]\'s: their requests share one label '
         "in metrics and logs"),
    )


@pytest.mark.parametrize("model", ["/", "openai/", "/gpt", "openai/*", "open ai/gpt", "wild", "*"])
def test_a_gmail_model_no_run_can_use_is_warned_about(kit: Kit, model: str) -> None:
    """model.md §9.2: Gmail runs silently ignore an unusable hooks.gmail.model; `config check` says so
    for one that is no model reference at all (valid config: it is resolved per run), an alias of a
    `provider/*` key included."""
    s = kit.load({**hooks(gmail={"model": f" {model} "}),
                  "agents": {"defaults": {"models": {"echo/*": {"alias": "wild"}}}}})
    assert s.warnings == (
        (f'hooks.gmail.model: "{model}" is not a valid model reference (provider/model or an alias): Gmail '
         "runs ignore it (model.md §9.2)"),
    )
    agent = s.agents.agents[0]
    choice = choose_model(override=None, gmail_default=s.hooks.gmail.model, agent=agent, defaults_model=None,
                          models=s.agents.models, runtime=build_runtime(agent))
    assert (choice.provider, choice.model) == ("echo", "echo-1")  # ignored: the agent's model


@pytest.mark.parametrize("model", ["qwen", "openai/gpt-4o", "Local/Qwen2.5"])
def test_a_plausible_gmail_model_is_not_warned_about(kit: Kit, model: str) -> None:
    assert kit.load(hooks(gmail={"model": model})).warnings == ()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        (["*", "x"], None),
        ([], frozenset()),
        (["  "], frozenset()),
        ([" MAIN ", "Bad Id!", ""], frozenset({"main", "bad-id"})),
    ],
)
def test_allowed_agent_ids(kit: Kit, raw: list[str] | None, expected: frozenset[str] | None) -> None:
    cfg = hooks() if raw is None else hooks(allowedAgentIds=raw)
    assert kit.load(cfg).hooks.allowed_agent_ids == expected


def test_hooks_defaults_of_the_spec(kit: Kit) -> None:
    """hooks.md §1.1 / §9 example 12: 256 KiB bodies, a 30 s body timeout, the 20/60 s/60 s throttle."""
    h = kit.load(hooks()).hooks
    assert (h.max_body_bytes, h.body_timeout_seconds) == (262_144, 30)
    t = h.auth_throttle
    assert (t.max_failures, t.window_seconds, t.lockout_seconds) == (20, 60, 60)


def test_hooks_values(kit: Kit) -> None:
    s = kit.load(
        hooks(
            maxBodyBytes=10,
            bodyTimeoutSeconds=2,
            idempotencyTtlSeconds=9,
            transformTimeoutSeconds=0.5,
            authThrottle={"maxFailures": 3},
            defaultSessionKey="   ",
            allowRequestSessionKey=True,
        )
    )
    h = s.hooks
    assert (h.max_body_bytes, h.body_timeout_seconds, h.idempotency_ttl_seconds) == (10, 2, 9)
    assert h.transform_timeout_seconds == 0.5
    assert (
        h.auth_throttle.max_failures,
        h.auth_throttle.window_seconds,
        h.auth_throttle.lockout_seconds,
    ) == (3, 60, 60)
    assert h.default_session_key is None and h.allow_request_session_key
    assert kit.errors(hooks(authThrottle={"lockoutSeconds": 0})) == [
        "hooks.authThrottle.lockoutSeconds: must be at least 1"
    ]
    assert kit.errors(hooks(gmail={"foo": 1})) == ["hooks.gmail.foo: unknown key"]
