"""``hooks.*`` → ``HooksSettings``: normalisation (hooks.md §1.1), mappings and presets (§6.1, §6.7),
and the startup checks of §1.3 in their order with their exact texts."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hookgate.config.names import (
    is_templated,
    normalize_agent_id,
    normalize_channel_name,
    normalize_hooks_path,
    normalize_match_path,
    reserved_path_hit,
    unreachable_path,
)
from hookgate.config.paths import ContainmentError, check_contained, is_safe_relative_module, transforms_root
from hookgate.config.settings import (
    AuthThrottleSettings,
    GmailSettings,
    HooksSettings,
    MappingSettings,
    SecretSource,
)

KNOWN_PRESETS = ("gmail",)
GMAIL_MESSAGE_TEMPLATE = (
    "New email from {{messages[0].from}}\n"
    "Subject: {{messages[0].subject}}\n"
    "{{messages[0].snippet}}\n"
    "{{messages[0].body}}"
)


@dataclass
class HooksContext:
    """What the hooks checks need from the rest of the config."""

    config_dir: str
    secrets: Mapping[str, SecretSource]
    gateway_token: str | None  # resolved, only when gateway.auth.mode is "token"
    enabled_channels: Sequence[str]
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _opt(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()


def _prefixes(raw: list[str] | None) -> tuple[str, ...] | None:
    if raw is None:
        return None
    out: list[str] = []
    for entry in raw:
        value = entry.strip().lower()
        if value and value not in out:
            out.append(value)
    return tuple(out) or None


def _allowed_agents(raw: list[str] | None) -> frozenset[str] | None:
    if raw is None:
        return None
    out: set[str] = set()
    for entry in raw:
        value = entry.strip()
        if not value:
            continue
        if value == "*":
            return None
        out.add(normalize_agent_id(value))
    return frozenset(out)


def _explicit_mapping(index: int, raw: Mapping[str, Any]) -> MappingSettings:
    match = raw.get("match") or {}
    transform = raw.get("transform")
    return MappingSettings(
        index=index,
        id=_opt(raw.get("id")) or f"mapping-{index + 1}",
        match_path=normalize_match_path(match.get("path", "")),
        match_source=_opt(match.get("source")),
        action=raw["action"],
        wake_mode=raw["wakeMode"],
        name=raw.get("name"),
        agent_id=_opt(raw.get("agentId")),
        session_key=raw.get("sessionKey"),
        message_template=raw.get("messageTemplate"),
        text_template=raw.get("textTemplate"),
        deliver=raw["deliver"],
        allow_unsafe_external_content=raw.get("allowUnsafeExternalContent"),
        channel=_opt(raw.get("channel")),
        to=raw.get("to"),
        model=raw.get("model"),
        thinking=raw.get("thinking"),
        timeout_seconds=raw.get("timeoutSeconds"),
        transform_module=None,
        transform_export=_opt(transform.get("export")) if transform is not None else None,
    )


def gmail_preset(index: int, gmail: Mapping[str, Any]) -> MappingSettings:
    """The mapping ``presets: ["gmail"]`` appends (hooks.md §6.7)."""
    unsafe = gmail.get("allowUnsafeExternalContent")
    return MappingSettings(
        index=index,
        id="gmail",
        match_path="gmail",
        match_source=None,
        action="agent",
        wake_mode="now",
        name="Gmail",
        session_key="hook:gmail:{{messages[0].id}}",
        message_template=GMAIL_MESSAGE_TEMPLATE,
        allow_unsafe_external_content=unsafe if isinstance(unsafe, bool) else None,
        from_preset="gmail",
    )


def _shadows(earlier: MappingSettings, later: MappingSettings) -> bool:
    path_ok = earlier.match_path is None or earlier.match_path == later.match_path
    source_ok = earlier.match_source is None or earlier.match_source == later.match_source
    return path_ok and source_ok


def effective_mappings(mappings: Sequence[MappingSettings]) -> list[MappingSettings]:
    """The mappings no earlier mapping shadows (hooks.md §1.3 notes)."""
    return [m for i, m in enumerate(mappings) if not any(_shadows(e, m) for e in mappings[:i])]


def _token(tree: Mapping[str, Any], ctx: HooksContext) -> str | None:
    """Checks #1 and #2; returns the resolved token (``None`` when absent or unresolved)."""
    raw = tree.get("token")
    source = ctx.secrets.get("hooks.token")
    value = source.value if source is not None else None
    if not tree["enabled"]:
        return value
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        ctx.errors.append("hooks.enabled requires hooks.token")
    elif source is not None and value is None:
        ctx.errors.append(f"hooks.token: {source.error}")
    return value


def _transforms(
    tree: Mapping[str, Any], explicit: list[MappingSettings], needs_checks: bool, ctx: HooksContext
) -> tuple[str, list[MappingSettings]]:
    """Checks #6, #7 and #8; returns the transforms directory and the mappings with module paths."""
    root = transforms_root(ctx.config_dir)
    raw_dir = tree.get("transformsDir")
    modules: dict[int, str] = {}
    for m, raw in zip(explicit, tree["mappings"], strict=True):
        module = (raw.get("transform") or {}).get("module")
        if raw.get("transform") is not None:
            modules[m.index] = module if isinstance(module, str) else ""
    bad: set[int] = set()
    nul_dir = isinstance(raw_dir, str) and "\x00" in raw_dir  # no directory has one: every use would fail
    if nul_dir and needs_checks:
        ctx.errors.append("hooks.transformsDir: must not contain a NUL character")
    for i, module in modules.items():
        if "\x00" in module:
            ctx.errors.append(f"hooks.mappings[{i}].transform.module: must not contain a NUL character")
            bad.add(i)
        elif module.strip() and not is_safe_relative_module(module.strip()):
            ctx.errors.append(
                f"hooks.mappings[{i}].transform.module: module must be a safe relative path (no absolute paths)"
            )
            bad.add(i)
    for i, module in modules.items():
        if "\x00" not in module and module.strip() and not module.strip().endswith(".py"):
            ctx.errors.append(
                f"hooks.mappings[{i}].transform.module: only Python (.py) transforms are supported"
            )
            bad.add(i)
    if nul_dir:  # the modules' own checks above still ran: every error is reported at once
        return root, explicit
    try:
        transforms_dir = check_contained(root, raw_dir or "", kind="transformsDir")
    except ContainmentError as exc:
        if needs_checks:
            ctx.errors.append(exc.message)
        return os.path.normpath(os.path.join(root, os.path.expanduser((raw_dir or "").strip()))), explicit
    if not needs_checks:
        return transforms_dir, explicit
    resolved: dict[int, str] = {}
    for i, module in modules.items():
        if i in bad:
            continue
        try:
            resolved[i] = check_contained(transforms_dir, module, kind="module")
        except ContainmentError as exc:
            ctx.errors.append(exc.message)
            continue
        if not os.path.exists(resolved[i]):
            ctx.warnings.append(f"hook transform module not found: {resolved[i]}")
    out = [_with_module(m, resolved.get(m.index), modules.get(m.index)) for m in explicit]
    return transforms_dir, out


def _with_module(m: MappingSettings, module: str | None, raw: str | None) -> MappingSettings:
    return m if module is None else replace(m, transform_module=module, transform_module_raw=raw)


def build_hooks(tree: Mapping[str, Any], ctx: HooksContext) -> HooksSettings:
    """Build the hooks settings; errors and warnings go to ``ctx`` in the order of hooks.md §1.3."""
    enabled = tree["enabled"] is True
    token = _token(tree, ctx)
    base_path = normalize_hooks_path(tree["path"])
    if base_path in ("", "/"):
        ctx.errors.append("hooks.path may not be '/'")
    elif reserved_path_hit(base_path):
        ctx.errors.append(f"hooks.path may not be a reserved path ({base_path})")
    elif (unreachable := unreachable_path(base_path)) is not None:
        ctx.warnings.append(f"hooks.path ({base_path}): no request can reach it: {unreachable}")
    if token is not None and ctx.gateway_token is not None and token == ctx.gateway_token:
        ctx.errors.append(
            "hooks.token must not match gateway auth token. Set a distinct hooks.token for hook ingress."
        )
    presets: list[str] = []
    for name in tree["presets"]:
        if name not in KNOWN_PRESETS:
            ctx.warnings.append(f"unknown hooks preset: {name}")
        elif name not in presets:
            presets.append(name)
    explicit = [_explicit_mapping(i, raw) for i, raw in enumerate(tree["mappings"])]
    first_with: dict[str, int] = {}
    repeated_ids: list[str] = []  # told after the channel lines
    for m in explicit:
        raw_mapping = tree["mappings"][m.index]
        given = _opt(raw_mapping.get("id")) is not None
        if not given:
            raw_mapping["id"] = m.id  # the default id, written into the tree: `config show` prints it
        # the spec makes ids neither unique nor not; a user who repeats one lost a label
        if (first := first_with.setdefault(m.id, m.index)) != m.index:
            also = f"hooks.mappings[{first}]'s"
        elif m.id == "gmail" and "gmail" in presets:
            also = "the gmail preset's"
        else:
            also = None
        if also is not None:
            named = f"hooks.mappings[{m.index}].id:" if given else f"hooks.mappings[{m.index}]: its default id"
            repeated_ids.append(f'{named} "{m.id}" is also {also}: their requests share one label in metrics and logs')
        raw_channel = raw_mapping.get("channel")
        if raw_channel is not None and m.channel is None:
            ctx.errors.append(f"hooks.mappings[{m.index}].channel: must be a non-empty string")
        elif m.channel is not None and normalize_channel_name(m.channel) not in (
            "last",
            *ctx.enabled_channels,
        ):
            ctx.warnings.append(f'hooks.mappings[{m.index}].channel: channel "{m.channel}" is not configured')
    ctx.warnings.extend(repeated_ids)
    transforms_dir, explicit = _transforms(tree, explicit, bool(explicit or presets), ctx)
    mappings = explicit + [gmail_preset(len(explicit) + k, tree["gmail"]) for k, _ in enumerate(presets)]
    default_key = _opt(tree.get("defaultSessionKey"))
    prefixes = _prefixes(tree.get("allowedSessionKeyPrefixes"))
    if default_key is not None and prefixes is not None and not default_key.lower().startswith(prefixes):
        ctx.errors.append("hooks.defaultSessionKey must match hooks.allowedSessionKeyPrefixes")
    if default_key is None and prefixes is not None and not "hook:example".startswith(prefixes):
        ctx.errors.append(
            "hooks.allowedSessionKeyPrefixes must include 'hook:' when hooks.defaultSessionKey is unset"
        )
    if prefixes is None and any(
        m.action == "agent" and is_templated(m.session_key) for m in effective_mappings(mappings)
    ):
        ctx.errors.append(
            "hooks.allowedSessionKeyPrefixes is required when a hook mapping sessionKey uses templates, "
            "even if hooks.allowRequestSessionKey=true"
        )
    if "internal" in tree:
        ctx.warnings.append("hooks.internal is not supported and is ignored")
    gmail = tree["gmail"]
    throttle = tree["authThrottle"]
    return HooksSettings(
        enabled=enabled,
        token=token,
        base_path=base_path,
        max_body_bytes=tree["maxBodyBytes"],
        body_timeout_seconds=tree["bodyTimeoutSeconds"],
        default_session_key=default_key,
        allow_request_session_key=tree["allowRequestSessionKey"] is True,
        allowed_session_key_prefixes=prefixes,
        allowed_agent_ids=_allowed_agents(tree.get("allowedAgentIds")),
        presets=tuple(presets),
        mappings=tuple(mappings),
        transforms_dir=transforms_dir,
        idempotency_ttl_seconds=tree["idempotencyTtlSeconds"],
        transform_timeout_seconds=float(tree["transformTimeoutSeconds"]),
        auth_throttle=AuthThrottleSettings(
            max_failures=throttle["maxFailures"],
            window_seconds=throttle["windowSeconds"],
            lockout_seconds=throttle["lockoutSeconds"],
        ),
        gmail=GmailSettings(
            model=_opt(gmail.get("model")),
            thinking=_opt(gmail.get("thinking")),
            allow_unsafe_external_content=gmail.get("allowUnsafeExternalContent"),
        ),
    )
