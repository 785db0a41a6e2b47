"""Load the JSON5 config file into one resolved ``Settings`` (README §4).

Pipeline: locate → read JSON5 → ``${NAME}`` substitution → strict schema validation (every error)
→ secret resolution → section builders with the semantic checks → effective config and hash.
Any error raises ``ConfigError`` carrying every error line found.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import json5

from hookgate.config.agents import build_agents
from hookgate.config.hooks import HooksContext, build_hooks
from hookgate.config.modelrefs import names_no_model
from hookgate.config.names import DEFAULT_FILE_CHANNEL_PATH
from hookgate.config.paths import resolve_config_path
from hookgate.config.render import config_hash
from hookgate.config.routes import RoutesContext, build_webhooks
from hookgate.config.schema import CHANNEL_SCHEMAS, CONFIG, URL
from hookgate.config.secrets import resolve_secret_inputs
from hookgate.config.settings import (
    POSTGRES_UNAVAILABLE,
    REDIS_UNAVAILABLE,
    ChannelSettings,
    GatewaySettings,
    IPNetwork,
    RetentionSettings,
    SecretSource,
    Settings,
    StorageSettings,
)
from hookgate.config.validate import (
    INVALID,
    SURROGATE,
    UNSET,
    Context,
    Map,
    Secret,
    join,
    json_type,
    unpaired_surrogate,
)
from hookgate.errors import ConfigError
from hookgate.jsonbody import depth_exceeds

CONFIG_ENV = "HOOKGATE_CONFIG"
DEFAULT_CONFIG_NAME = "hookgate.json5"
NO_CONFIG_WARNING = "no config file found; using the empty config"
_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def locate_config(flag: str | None, environ: Mapping[str, str], cwd: str) -> str | None:
    """``--config``, else ``HOOKGATE_CONFIG``, else ``./hookgate.json5``; ``None`` → the empty config.

    A flag given empty (``--config "$UNSET"``) is a path that does not exist, not a missing flag: it
    must not fall through to the empty config. An empty ``HOOKGATE_CONFIG`` counts as unset."""
    given = flag if flag is not None else environ.get(CONFIG_ENV) or None
    if given is not None:
        if not given.strip():
            raise ConfigError([f"config file not found: {given}"])
        path = os.path.abspath(os.path.join(cwd, os.path.expanduser(given)))
        _check_config_file(path, given)
        return path
    default = os.path.join(cwd, DEFAULT_CONFIG_NAME)
    return os.path.abspath(default) if os.path.isfile(default) else None


def _check_config_file(abs_path: str, shown: str) -> None:
    """A config path that is no readable file is a startup error (README §4), named as given."""
    if os.path.isdir(abs_path):
        raise ConfigError([f"config file is a directory: {shown}"])
    if not os.path.isfile(abs_path):
        raise ConfigError([f"config file not found: {shown}"])


def substitute_env(value: Any, path: str, environ: Mapping[str, str], errors: list[str]) -> Any:
    """Replace ``${NAME}`` in every string value (never keys); ``$${`` → a literal ``${``.

    A string naming an unset variable becomes ``UNSET`` (after its error line), which fails every
    schema node without a second line about the ``${NAME}`` text."""
    if isinstance(value, str):
        before = len(errors)

        def repl(match: re.Match[str]) -> str:
            name = match.group(1)
            if name is None:
                return "${"
            if name not in environ:
                errors.append(f'{path}: environment variable "{name}" is not set')
                return match.group(0)
            return environ[name]

        out = _ENV_REF.sub(repl, value)
        if out is not value and (lone := SURROGATE.search(out)):  # an undecodable byte of the environment
            errors.append(unpaired_surrogate(path, lone.group()))
        return UNSET if len(errors) > before else out
    if isinstance(value, dict):
        return {k: substitute_env(v, join(path, str(k)), environ, errors) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, f"{path}[{i}]", environ, errors) for i, v in enumerate(value)]
    return value


def read_config_file(path: str) -> Any:
    try:
        with open(path, encoding="utf-8-sig") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{path}: cannot read config file: {exc}"]) from None
    try:
        # A file that is plain JSON (what a generator writes) means the same in JSON5, and Python's
        # C parser reads it ~1 000 times faster than json5's: 400 KB (1 000 routes) in 5 ms, not 5 s.
        # Only a tree json5 surely reads too: json5 stops at ~60 levels ("nested too deeply"), which
        # also keeps the recursive walks over the tree that follow within Python's stack.
        tree = json.loads(text, object_pairs_hook=_object)
        if not depth_exceeds(tree, _JSON_FAST_DEPTH):
            return tree
    except (ValueError, RecursionError):
        pass
    try:
        return json5.loads(text, object_pairs_hook=_object)
    except ValueError as exc:
        message = (_long_number_message(text) if "integer string conversion" in str(exc) else None) \
            or _json5_message(str(exc))
        raise ConfigError([f"{path}: invalid JSON5: {message}"]) from None
    except RecursionError:  # json5's parser recurses a few frames per level: ~60 levels exhaust it
        raise ConfigError([f"{path}: invalid JSON5: nested too deeply"]) from None


_JSON_FAST_DEPTH = 32  # a real config nests under 10 levels


class _Repeated(dict[str, Any]):
    """An object of the file in which a key appears more than once (the last value is kept, as
    JSON5 itself and the JavaScript gateway keep it): ``duplicate_key_warnings`` names them."""

    repeated: tuple[str, ...] = ()


def _object(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    pairs = list(items)
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    twice: dict[str, None] = {}  # in file order, each once
    for key, _ in pairs:
        if key in seen:
            twice[key] = None
        seen.add(key)
    repeated = _Repeated(obj)
    repeated.repeated = tuple(twice)
    return repeated


def duplicate_key_warnings(value: Any, path: str = "") -> list[str]:
    """``<path>: key "<k>" appears more than once; the last value is used`` for each repeated key, in
    file order: a second ``hooks: {…}`` section silently replaced the first."""
    out: list[str] = []
    if isinstance(value, dict):
        for key in getattr(value, "repeated", ()):
            out.append(f'{path or "(top level)"}: key "{key}" appears more than once; the last value is used')
        for key, item in value.items():
            out.extend(duplicate_key_warnings(item, join(path, str(key))))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.extend(duplicate_key_warnings(item, f"{path}[{i}]"))
    return out


_JSON5_POSITION = re.compile(r"<string>:(\d+) (.*) at column (\d+)", re.DOTALL)


_LONG_NUMBER = re.compile(r"""(?<![0-9A-Za-z_$.'"])[+-]?[0-9]{""" + str(sys.get_int_max_str_digits() + 1) + ",}")


def _long_number_message(text: str) -> str | None:
    """For a file with an integer of more digits than Python converts (4 300), where json5's error was
    Python's own (``Exceeds the limit … use sys.set_int_max_str_digits()``): where it is, and why."""
    if (match := _LONG_NUMBER.search(text)) is None:
        return None
    line = text.count("\n", 0, match.start()) + 1
    column = match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1
    return f"line {line}, column {column}: a number of {len(match[0].lstrip('+-'))} digits (integers are 64-bit)"


def _json5_message(text: str) -> str:
    """json5's ``<string>:3 Unexpected "\n" at column 17`` as one line: ``line 3, column 17: …``."""
    match = _JSON5_POSITION.fullmatch(text)
    if match is not None:
        text = f"line {match[1]}, column {match[3]}: {match[2]}"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


_HOST_NAME = re.compile(r"(?=.*[A-Za-z])[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")


def valid_bind(bind: str) -> bool:
    """An IP address or a host name: not "" (which listens on every interface), a URL or host:port."""
    try:
        ipaddress.ip_address(bind)
        return True
    except ValueError:
        return _HOST_NAME.fullmatch(bind) is not None


def _gateway(
    tree: Mapping[str, Any], secrets: Mapping[str, SecretSource], errors: list[str]
) -> GatewaySettings:
    auth = tree["auth"]
    token_source = secrets.get("gateway.auth.token")
    if token_source is not None and token_source.value is None:
        errors.append(f"gateway.auth.token: {token_source.error}")
    elif auth["mode"] == "token" and token_source is None:
        errors.append('gateway.auth.token: required when gateway.auth.mode is "token"')
    proxies: list[IPNetwork] = []
    for i, raw in enumerate(tree["trustedProxies"]):
        try:
            proxies.append(ipaddress.ip_network(raw.strip(), strict=False))
        except ValueError:
            errors.append(f'gateway.trustedProxies[{i}]: invalid IP address or CIDR "{raw}"')
    if not valid_bind(tree["bind"]):
        errors.append(f'gateway.bind: invalid address "{tree["bind"]}" (an IP address or a host name)')
    hsts = tree["http"]["securityHeaders"].get("strictTransportSecurity")
    return GatewaySettings(
        bind=tree["bind"],
        port=tree["port"],
        auth_mode=auth["mode"],
        auth_token=token_source.value if token_source is not None else None,
        trusted_proxies=tuple(proxies),
        allow_real_ip_fallback=tree["allowRealIpFallback"],
        accept_openclaw_headers=tree["compat"]["acceptOpenclawHeaders"],
        strict_transport_security=hsts.strip() if isinstance(hsts, str) and hsts.strip() else None,
        reload_watch=tree["reload"]["watch"],
        drain_timeout_seconds=float(tree["drainTimeoutSeconds"]),
    )


def _storage(
    tree: Mapping[str, Any], config_dir: str, secrets: Mapping[str, SecretSource], errors: list[str]
) -> StorageSettings:
    resolved: dict[str, str | None] = {}
    for key in ("postgres.dsn", "redis.url"):
        source = secrets.get(f"storage.{key}")
        if source is not None and source.value is None:
            errors.append(f"storage.{key}: {source.error}")
        resolved[key] = source.value if source is not None else None
    if tree["backend"] == "postgres" and "dsn" not in tree["postgres"]:
        errors.append('storage.postgres.dsn: required when storage.backend is "postgres"')
    sqlite, postgres, redis, ret = tree["sqlite"], tree["postgres"], tree["redis"], tree["retention"]
    return StorageSettings(
        backend=tree["backend"],
        sqlite_path=_file_path(config_dir, sqlite["path"], "storage.sqlite.path", "a database file", errors),
        durability=sqlite["durability"],
        group_commit_ms=float(sqlite["groupCommitMs"]),
        busy_timeout_ms=sqlite["busyTimeoutMs"],
        postgres_dsn=resolved["postgres.dsn"],
        postgres_pool_size=postgres["poolSize"],
        postgres_schema=postgres["schema"],
        redis_url=resolved["redis.url"],
        redis_prefix=redis["prefix"],
        lease_seconds=float(tree["leaseSeconds"]),
        retention=RetentionSettings(
            task_days=ret["taskDays"],
            lost_task_days=ret["lostTaskDays"],
            flow_days=ret["flowDays"],
            run_days=ret["runDays"],
            delivery_days=ret["deliveryDays"],
            event_days=ret["eventDays"],
            sweep_seconds=ret["sweepSeconds"],
        ),
    )


_CHANNEL_COMMON = ("enabled", "defaultTo", "retry")

# What each channel cannot send without (model.md §10.2): an enabled channel missing one is valid —
# the config may be filled in later — but every delivery to it dead-letters, which config check says
_CHANNEL_NEEDS: dict[str, tuple[str, ...]] = {
    "telegram": ("botToken",), "slack": ("botToken",), "discord": ("botToken",),
    "mattermost": ("baseUrl", "token"), "msteams": ("webhooks",), "googlechat": ("webhooks",),
    "line": ("channelAccessToken",), "whatsapp": ("accessToken", "phoneNumberId"),
    "signal": ("baseUrl", "number"), "irc": ("server", "nick"), "webhook": ("url",),
    "imessage": ("serverUrl", "password"),
}


def _channel_warnings(cid: str, cfg: Mapping[str, Any]) -> list[str]:
    """An enabled channel that every delivery to fails, and a blank ``defaultTo`` (taken as none)."""
    dead = f"every delivery to channel {cid} dead-letters"
    lines = [f"channels.{cid}.{key}: not set: {dead}" for key in _CHANNEL_NEEDS.get(cid, ())
             if cfg.get(key) in (None, {}) or (isinstance(cfg[key], str) and not cfg[key].strip())]
    urls = {key for key, field in CHANNEL_SCHEMAS[cid].fields.items() if field.node is URL}  # the API URLs
    for key in sorted(urls & set(cfg)):
        value = cfg[key]
        if isinstance(value, str) and value.strip() and urlsplit(value.strip()).scheme.lower() not in ("http", "https"):
            lines.append(f"channels.{cid}.{key}: not an http(s) URL: {dead}")
    default_to = cfg.get("defaultTo")
    if isinstance(default_to, str) and not default_to.strip():
        lines.append(f"channels.{cid}.defaultTo: blank: ignored (the channel has no default target)")
    return lines if cfg["enabled"] else []


def _file_path(config_dir: str, raw: str, key: str, kind: str, errors: list[str]) -> str:
    """A file the gateway writes, resolved against the config directory (a NUL is refused by the
    schema's ``FilePath``): one that is empty or names a directory fails at every use."""
    path = resolve_config_path(config_dir, raw)
    if not raw.strip():
        errors.append(f"{key}: must not be empty")
    elif os.path.isdir(path):
        errors.append(f"{key}: names a directory, not {kind}")
    return path


def _channels(
    tree: Mapping[str, Any], config_dir: str, secrets: Mapping[str, SecretSource], errors: list[str],
    warnings: list[str],
) -> tuple[ChannelSettings, ...]:
    out: list[ChannelSettings] = []
    for cid, cfg in tree.items():
        warnings.extend(_channel_warnings(cid, cfg))
        schema = CHANNEL_SCHEMAS[cid]
        options: dict[str, Any] = {}
        channel_secrets: dict[str, SecretSource] = {}
        for key, value in cfg.items():
            if key in _CHANNEL_COMMON:
                continue
            node = schema.fields[key].node
            if isinstance(node, Secret):
                channel_secrets[key] = secrets[join(f"channels.{cid}", key)]
            elif isinstance(node, Map) and isinstance(node.value, Secret):
                for target in value:
                    channel_secrets[f"{key}.{target}"] = secrets[join(join(f"channels.{cid}", key), target)]
            else:
                options[key] = value
        if cid == "file":  # relative to the config directory (model.md §10.2), the default name too
            raw = options["path"] if isinstance(options.get("path"), str) else DEFAULT_FILE_CHANNEL_PATH
            options["path"] = _file_path(config_dir, raw, "channels.file.path", "a file", errors)
        out.append(
            ChannelSettings(
                id=cid,
                enabled=cfg["enabled"],
                default_to=cfg["defaultTo"].strip() or None if isinstance(cfg.get("defaultTo"), str) else None,
                retry_max_attempts=cfg["retry"]["maxAttempts"],
                options=options,
                secrets=channel_secrets,
            )
        )
    return tuple(out)


def _anchor_provider_paths(secrets_cfg: dict[str, Any], config_dir: str) -> dict[str, Any]:
    """File-provider paths, like every relative path in the config, resolve against the config dir."""
    providers = dict(secrets_cfg.get("providers") or {})
    for name, provider in providers.items():
        if isinstance(provider, dict) and provider.get("source") == "file" and isinstance(provider.get("path"), str):
            path = os.path.expanduser(provider["path"])
            providers[name] = {**provider, "path": os.path.join(config_dir, path)}
    return {**secrets_cfg, "providers": providers}


def _dedupe(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def _section(path: str) -> str:
    """The top-level key an error line's key path starts with (``hooks.mappings[0].id`` → ``hooks``)."""
    return re.split(r"[.\[:]", path, maxsplit=1)[0]


def _names_set_aside(line: str, repaired: list[str]) -> bool:
    """Whether a cross-field line names a key the repair pass set aside, or anything below it: such
    a line would be about the stand-in default, not the file."""
    return any(re.search(re.escape(path) + r"(?![\w-]|:\S)", line) for path in repaired)


def settings_from_tree(
    raw: Any, config_path: str | None, config_dir: str, environ: Mapping[str, str]
) -> Settings:
    """Validate an already-parsed config tree and build the resolved ``Settings``.

    Every error is reported together (README §4). The schema pass finds every type, unknown-key and
    ``${VAR}`` error. A section that had one is checked a second time in a *repair* pass, where each
    key in error takes its default (or is left out), so that its own cross-field checks still run —
    the duplicate agent id next to a wrong ``agents.defaults`` value — while any line they produce
    that names a repaired key is dropped (it would be about the default). Keys the rest of their
    object is read by (``pivotal``: an ``action``, an ``enabled``, a route's path and secret, the
    secret providers) are never replaced: their object is set aside instead, as is a list with an
    entry in error (a map's entry in error is left out). Sections that need another one use it only
    when it had no error — hooks the channels, routes the agents and hooks, the hooks-token
    comparison the gateway — except ``secrets``: every section's secrets are resolved first, so a
    ``secrets`` section whose providers are in error holds every other check back.
    """
    if not isinstance(raw, dict):
        raise ConfigError([f"{config_path or 'config'}: expected object, got {json_type(raw)}"])
    errors: list[str] = []
    substituted = substitute_env(raw, "", environ, errors)
    ctx = Context()
    sections, _ = CONFIG.check_fields(substituted, "", ctx)  # an unsound top level is in ctx.errors
    broken = {_section(line) for line in errors} | {k for k, v in sections.items() if v is INVALID}
    errors.extend(ctx.errors)
    sound = {k for k in sections if k not in broken}  # validated: what other sections may rely on
    tree = {k: v for k, v in sections.items() if k in sound}
    inputs = [(path, value) for path, value in ctx.secrets if _section(path) in sound]
    repaired: list[str] = []
    for key in sorted(broken & set(raw) & set(CONFIG.fields), key=list(CONFIG.fields).index):
        rctx = Context(repair=True)
        value = CONFIG.fields[key].node.check(substituted[key], key, rctx)
        if value is not INVALID:
            tree[key] = value
            repaired.extend(rctx.repaired)
            inputs.extend(rctx.secrets)
    # every section's checks read resolved secrets; a repaired ``secrets`` section still has its
    # providers and defaults as written (they are pivotal), only a resolution limit may be a default
    checked = set(tree) if "secrets" in tree else set()
    secrets: dict[str, SecretSource] = {}
    if "secrets" in tree:
        for provider in tree["secrets"]["providers"].values():  # a default that is another key's value
            if provider.get("source") == "exec" and "noOutputTimeoutMs" not in provider:
                provider["noOutputTimeoutMs"] = provider["timeoutMs"]
        secrets = resolve_secret_inputs(inputs, _anchor_provider_paths(tree["secrets"], config_dir), environ)
    found: list[str] = []  # the cross-field errors
    warnings: list[str] = []
    gateway = _gateway(tree["gateway"], secrets, found) if "gateway" in checked else None
    storage = _storage(tree["storage"], config_dir, secrets, found) if "storage" in checked else None
    if storage is not None and storage.backend == "postgres":
        found.append(POSTGRES_UNAVAILABLE)
    if storage is not None and storage.redis_url:
        warnings.append(REDIS_UNAVAILABLE)
    agents = build_agents(tree["agents"], secrets, found, warnings) if "agents" in checked else None
    channels = _channels(tree["channels"], config_dir, secrets, found, warnings) if "channels" in checked else None
    hooks = None
    if "hooks" in checked and channels is not None and "channels" in sound:
        hooks_ctx = HooksContext(
            config_dir=config_dir,
            secrets=secrets,
            gateway_token=(gateway.auth_token if gateway is not None and "gateway" in sound
                           and gateway.auth_mode == "token" else None),
            enabled_channels=[c.id for c in channels if c.enabled],
        )
        hooks = build_hooks(tree["hooks"], hooks_ctx)
        found.extend(hooks_ctx.errors)
        warnings.extend(hooks_ctx.warnings)
    if hooks is not None and agents is not None and hooks.gmail.model is not None \
            and names_no_model(hooks.gmail.model, agents.models):
        warnings.append(f'hooks.gmail.model: "{hooks.gmail.model}" is not a valid model reference (provider/model '
                        "or an alias): Gmail runs ignore it (model.md §9.2)")
    webhooks = None
    if "plugins" in checked and agents is not None and hooks is not None and {"agents", "hooks"} <= sound:
        routes_ctx = RoutesContext(
            secrets=secrets, agents=agents, hooks_enabled=hooks.enabled, hooks_base_path=hooks.base_path
        )
        webhooks = build_webhooks(tree["plugins"], routes_ctx)
        found.extend(routes_ctx.errors)
        warnings.extend(routes_ctx.warnings)
    if repaired:
        found = [line for line in found if not _names_set_aside(line, repaired)]
        warnings = [line for line in warnings if not _names_set_aside(line, repaired)]
    errors.extend(found)
    if errors:
        raise ConfigError(_dedupe(errors), tuple(secrets.values()), tuple(_dedupe(warnings)), hooks, config_dir)
    assert gateway and storage and agents is not None and channels is not None and hooks and webhooks
    return Settings(
        config_path=config_path,
        config_dir=config_dir,
        gateway=gateway,
        storage=storage,
        agents=agents,
        channels=channels,
        hooks=hooks,
        webhooks=webhooks,
        effective=tree,
        config_hash=config_hash(tree),
        warnings=tuple(_dedupe(warnings)),
        secret_inputs=tuple(secrets.values()),
    )


def load_settings(
    path: str | None, environ: Mapping[str, str] | None = None, *, cwd: str | None = None
) -> Settings:
    """Read, validate and resolve the config at ``path`` (``None``: the empty config ``{}``).

    Relative paths resolve against the file's directory (else ``cwd``, default the process cwd).
    Raises ``ConfigError`` with every error line.
    """
    env = os.environ if environ is None else environ
    base = os.path.abspath(cwd if cwd is not None else os.getcwd())
    if path is None:
        settings = settings_from_tree({}, None, base, env)
        return replace(settings, warnings=(NO_CONFIG_WARNING, *settings.warnings))
    abs_path = os.path.abspath(os.path.join(base, path))
    _check_config_file(abs_path, path)
    unpaired: list[str] = []
    tree = join_surrogates(read_config_file(abs_path), "", unpaired)
    repeated = tuple(duplicate_key_warnings(tree))
    try:
        settings = settings_from_tree(tree, abs_path, os.path.dirname(abs_path), env)
    except ConfigError as exc:
        exc.lines = [*unpaired, *exc.lines]
        exc.warnings = (*repeated, *exc.warnings)
        raise
    if unpaired:
        raise ConfigError(unpaired, warnings=(*repeated, *settings.warnings))
    return replace(settings, warnings=(*repeated, *settings.warnings)) if repeated else settings


def join_surrogates(value: Any, path: str, errors: list[str]) -> Any:
    """Every string (key or value) with its ``\\uD83D\\uDE80`` escape pairs as the characters they
    stand for, as JSON5 means them: the json5 parser leaves each escape a lone UTF-16 surrogate, and
    a string holding one cannot be written as UTF-8 (the config hash, a token's bytes, a log line).
    A surrogate left without its other half is an error line (``<path>: must not contain an unpaired
    surrogate (\\ud800)``) and reads as U+FFFD meanwhile, so the other checks still run. Nothing is
    rebuilt in a config without surrogates."""
    if isinstance(value, str):
        if not SURROGATE.search(value):
            return value
        joined = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        if (lone := SURROGATE.search(joined)) is None:
            return joined
        errors.append(unpaired_surrogate(path or "config", lone.group()))
        return SURROGATE.sub("\ufffd", joined)
    if isinstance(value, dict):
        if any(SURROGATE.search(key) for key in value):
            mended = _Repeated()
            repeated = [join_surrogates(key, "", []) for key in getattr(value, "repeated", ())]  # mended too
            for key, item in value.items():
                shown = join(path, key.encode("utf-8", "backslashreplace").decode())
                before = len(errors)
                new_key = join_surrogates(key, shown, errors)
                if new_key in mended and new_key not in repeated:  # "\uD83D\uDE80" beside "🚀": one key
                    repeated.append(new_key)
                # below a key in error, paths spell it as its line did
                mended[new_key] = join_surrogates(item, shown if len(errors) > before else join(path, new_key), errors)
            mended.repeated = tuple(repeated)
            return mended
        for key, item in value.items():
            value[key] = join_surrogates(item, join(path, key), errors)
        return value
    if isinstance(value, list):
        for i, item in enumerate(value):
            value[i] = join_surrogates(item, f"{path}[{i}]", errors)
    return value
