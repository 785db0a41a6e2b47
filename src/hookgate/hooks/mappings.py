"""Mapped hooks (hooks.md §6): match a mapping, build its action from templates, run its transform,
merge and validate the result, and decide the external-content source and wrapping.

``resolve`` is shared by the edge (which then dispatches through ``hooks.dispatch``) and by
``hookgate hooks test`` (which only shows the outcome). Everything here except the transform call is
a pure function of its inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, urlencode

from hookgate.config.names import is_templated
from hookgate.config.paths import transforms_root
from hookgate.config.settings import MappingSettings, Settings
from hookgate.errors import RequestError
from hookgate.hooks.actions import (
    MODEL_REQUIRED,
    AgentAction,
    WakeAction,
    normalize_channel,
    parse_agent,
    parse_wake,
    timeout_seconds,
    wake_mode,
)
from hookgate.hooks.dispatch import ExternalSource, PreparedRun, prepare_agent
from hookgate.hooks.payload import Payload, decode_hook_body, fields, trimmed_str
from hookgate.hooks.templates import TemplateContext, render
from hookgate.hooks.transforms_loader import TransformFailed, TransformLoader
from hookgate.jstext import js_trim
from hookgate.runtime.events import sanitize_system_text
from hookgate.runtime.prompts import hook_prompt
from hookgate.transforms import Skip, TransformContext

REQUIRES_TEXT = "hook mapping requires text"
REQUIRES_MESSAGE = "hook mapping requires message"
MAPPING_FAILED = "hook mapping failed"

Draft = dict[str, Any]  # an action before normalisation, keyed by the spec's field names


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a mapping sees of the request (hooks.md §2 step 10)."""

    payload: Payload
    headers: Mapping[str, str]  # lower-cased names, repeats joined with ", "
    query: Mapping[str, str]  # decoded, last value wins
    sub_path: str  # raw subPath (leading "/" removed, trailing kept)
    url: str  # request target as received
    now_ms: int


@dataclass(frozen=True, slots=True)
class Resolved:
    """The outcome of a matched mapping: ``action`` is ``None`` when the transform returned SKIP."""

    mapping: MappingSettings
    action: WakeAction | AgentAction | None
    external_source: ExternalSource = "webhook"
    wrap: bool = True


class Lazy(Mapping[str, str]):
    """A mapping built on first use: most mappings never look at headers or the query string."""

    __slots__ = ("_build", "_data")

    def __init__(self, build: Callable[[], dict[str, str]]) -> None:
        self._build: Callable[[], dict[str, str]] | None = build
        self._data: dict[str, str] = {}

    def _get(self) -> dict[str, str]:
        # A transform may read it in its worker thread: two first reads both build, never fail.
        build = self._build
        if build is not None:
            self._data = build()
            self._build = None
        return self._data

    def __repr__(self) -> str:
        return repr(self._get())

    def __getitem__(self, key: str) -> str:
        return self._get()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._get().get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def request_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Every header with a lower-cased name and its value without the whitespace around it (RFC 9110
    §5.5: spaces and tabs around a field value are not part of it; the HTTP parser leaves trailing
    ones, and ``hooks test`` trimmed them); repeated headers joined with ``", "``."""
    out: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        text = value.strip(b" \t").decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def request_query(query: bytes) -> dict[str, str]:
    """Decoded query parameters; for repeats the last value wins."""
    text = query.decode("utf-8", "replace")
    return dict(parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="replace"))


def match_mapping(mappings: Sequence[MappingSettings], sub_path: str, payload: Payload) -> MappingSettings | None:
    """The first mapping whose path and source constraints hold (§6.2), else ``None``."""
    path = sub_path.strip("/")
    source = payload.get("source") if isinstance(payload, dict) else None
    for m in mappings:
        if m.match_path is not None and m.match_path != path:
            continue
        if m.match_source is not None and not (isinstance(source, str) and source == m.match_source):
            continue
        return m
    return None


def _rendered(template: str | None, ctx: TemplateContext) -> str | None:
    """A template rendered and trimmed; empty → ``None``."""
    if template is None:
        return None
    return js_trim(render(template, ctx)) or None


def base_action(m: MappingSettings, ctx: TemplateContext) -> Draft:
    """The action built from the mapping's fields (§6.4), before any transform."""
    if m.action == "wake":
        return {"kind": "wake", "text": render(m.text_template or "", ctx), "mode": m.wake_mode}
    source: str | None = None
    if is_templated(m.session_key):
        source = "mapping-templated"
    elif m.session_key is not None and m.session_key.strip():
        source = "mapping-static"
    return {
        "kind": "agent",
        "message": render(m.message_template or "", ctx),
        "name": _rendered(m.name, ctx),
        "agentId": m.agent_id,
        "wakeMode": m.wake_mode,
        "sessionKey": _rendered(m.session_key, ctx),
        "sessionKeySource": source,
        "deliver": m.deliver,
        "allowUnsafeExternalContent": m.allow_unsafe_external_content,
        "channel": m.channel,
        "to": _rendered(m.to, ctx),
        "model": _rendered(m.model, ctx),
        "thinking": _rendered(m.thinking, ctx),
        "timeoutSeconds": m.timeout_seconds,
    }


_OVERRIDABLE = ("name", "agentId", "channel", "to", "model", "thinking", "timeoutSeconds")


def _plain(value: Any) -> Any:
    """A transform's string as a plain ``str`` (a ``str`` subclass is a string, §6.5, but cannot be
    stored as one); a lone surrogate is a bad value, not a crash at commit."""
    if not isinstance(value, str):
        return value
    value = str.__str__(value)  # an exact str: for a subclass, a copy
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise TransformFailed("TransformResultError", "transform returned a string that is not valid Unicode",
                              ours=True) from None
    return value


def merge(base: Draft, o: Mapping[Any, Any]) -> Draft:
    """A transform's dict merged over the base action (§6.5). A bad ``kind`` raises ``TransformFailed``."""
    kind = o["kind"] if "kind" in o else base["kind"]  # present means "wake" or "agent"; null is neither
    if kind not in ("wake", "agent"):
        raise TransformFailed("TransformResultError", "transform returned an invalid kind", ours=True)
    same = base if base["kind"] == kind else None
    if kind == "wake":
        text = _plain(o.get("text"))
        return {
            "kind": "wake",
            "text": text if isinstance(text, str) else (same["text"] if same else ""),
            "mode": "next-heartbeat" if o.get("mode") == "next-heartbeat" else (same["mode"] if same else "now"),
        }
    message = _plain(o.get("message"))
    out: Draft = {
        "kind": "agent",
        "message": message if isinstance(message, str) else (same["message"] if same else ""),
        "wakeMode": "next-heartbeat" if o.get("wakeMode") == "next-heartbeat"
        else (same["wakeMode"] if same else "now"),
    }
    for key in _OVERRIDABLE:
        out[key] = _plain(o[key]) if o.get(key) is not None else (same.get(key) if same else None)
    # a model the transform gives is a request field (§5.1: present → a non-empty string); the
    # mapping's own model template is not checked (§6.1)
    out["modelGiven"] = o.get("model") is not None
    for key in ("deliver", "allowUnsafeExternalContent"):
        value = o.get(key)
        out[key] = value if isinstance(value, bool) else (same.get(key) if same else None)
    if o.get("sessionKey") is not None:
        out["sessionKey"] = _plain(o["sessionKey"])
        out["sessionKeySource"] = "mapping-templated"  # a transform is as external as a template
    else:
        out["sessionKey"] = same.get("sessionKey") if same else None
        out["sessionKeySource"] = same.get("sessionKeySource") if same else None
    return out


def _check_sizes(draft: Draft, limit: int) -> None:
    """A transform's strings are bounded as a request's body is (``hooks.maxBodyBytes``, in
    characters): one returning 100 MB held the event loop 14 s and wrote 400 MB to the store."""
    for key, value in draft.items():
        if isinstance(value, str) and len(value) > limit:
            raise TransformFailed("TransformResultError", f"transform returned a {key} longer than "
                                                          f"hooks.maxBodyBytes ({limit} characters)", ours=True)


def finalize(draft: Draft, enabled_channels: tuple[str, ...]) -> WakeAction | AgentAction:
    """Validate and normalise the merged action (§6.4, then §5.1 rules). Raises ``RequestError``."""
    if draft["kind"] == "wake":
        text = draft["text"]
        if not js_trim(text):
            raise RequestError(REQUIRES_TEXT)
        return WakeAction(text=text, mode=wake_mode(draft["mode"]))
    message = draft["message"]
    if not js_trim(message):
        raise RequestError(REQUIRES_MESSAGE)
    channel = normalize_channel(draft.get("channel"), enabled_channels)
    model = trimmed_str(draft.get("model"))
    if model is None and draft.get("modelGiven"):
        raise RequestError(MODEL_REQUIRED)
    session_key = trimmed_str(draft.get("sessionKey"))
    deliver = draft.get("deliver")
    unsafe = draft.get("allowUnsafeExternalContent")
    return AgentAction(
        message=message,
        name=trimmed_str(draft.get("name")) or "Hook",
        agent_id=trimmed_str(draft.get("agentId")),
        wake_mode=wake_mode(draft.get("wakeMode")),
        session_key=session_key,
        session_key_source=draft.get("sessionKeySource") if session_key is not None else None,
        deliver=deliver is not False,
        channel=channel,
        to=trimmed_str(draft.get("to")),
        model=model,
        thinking=trimmed_str(draft.get("thinking")),
        timeout_seconds=timeout_seconds(draft.get("timeoutSeconds")),
        allow_unsafe_external_content=unsafe if isinstance(unsafe, bool) else None,
    )


def external_source(sub_path: str, payload: Payload, session_key: str | None) -> ExternalSource:
    """§6.8 step 6: Gmail by path or ``payload.source``, else by the key before rebinding."""
    source = payload.get("source") if isinstance(payload, dict) else None
    if sub_path == "gmail" or (isinstance(source, str) and js_trim(source).lower() == "gmail"):
        return "gmail"
    if session_key is not None and session_key.lower().startswith("hook:gmail:"):
        return "gmail"
    return "webhook"


def should_wrap(action: AgentAction, source: ExternalSource, settings: Settings) -> bool:
    """§7.1: wrapped unless the action or (for Gmail runs) ``hooks.gmail`` allows unsafe content."""
    if action.allow_unsafe_external_content is True:
        return False
    return not (source == "gmail" and settings.hooks.gmail.allow_unsafe_external_content is True)


async def resolve(
    mapping: MappingSettings,
    rctx: RequestContext,
    settings: Settings,
    loader: TransformLoader,
    *,
    on_transform: Callable[[float], None] | None = None,
) -> Resolved:
    """Build, transform, merge and validate the action of a matched mapping.

    Raises ``RequestError`` (400) for validation failures and ``TransformFailed`` (500) when the
    transform cannot be loaded, raises, times out or returns a bad value.
    """
    tctx = TemplateContext(rctx.payload, rctx.headers, rctx.query, rctx.sub_path, rctx.now_ms)
    draft = base_action(mapping, tctx)
    if mapping.transform_module is not None:
        started = time.perf_counter()
        try:
            result = await _run_transform(mapping, rctx, settings, loader)
        finally:
            if on_transform is not None:
                on_transform(time.perf_counter() - started)
        if isinstance(result, Skip):
            return Resolved(mapping, None)
        if isinstance(result, dict):
            try:
                draft = merge(draft, result)
            except TransformFailed:
                raise
            except Exception as exc:  # a dict (subclass) of the transform's that raises when read
                raise TransformFailed(type(exc).__name__, str(exc)) from exc
            _check_sizes(draft, settings.hooks.max_body_bytes)
        elif result is not None:
            raise TransformFailed("TransformResultError", f"transform returned {type(result).__name__}", ours=True)
        try:
            action = finalize(draft, settings.enabled_channel_ids())
        except RequestError:
            raise
        except Exception as exc:  # a value of the transform's whose own methods raise (an int subclass's <)
            raise TransformFailed(type(exc).__name__, str(exc)) from exc
    else:
        action = finalize(draft, settings.enabled_channel_ids())
    if isinstance(action, WakeAction):
        return Resolved(mapping, action)
    key = action.session_key or settings.hooks.default_session_key
    source = external_source(rctx.sub_path, rctx.payload, key)
    return Resolved(mapping, action, source, should_wrap(action, source, settings))


def json_copy(value: Any) -> Any:
    """A deep copy of decoded JSON data (dicts, lists and immutable scalars): the transform's own."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


async def _run_transform(
    mapping: MappingSettings, rctx: RequestContext, settings: Settings, loader: TransformLoader
) -> Any:
    try:
        payload = json_copy(rctx.payload)
    except RecursionError:  # ~1000 levels of nesting: the decoder's own limit is just above
        raise TransformFailed("RecursionError", "payload nested too deeply to copy", ours=True) from None
    ctx = TransformContext(
        payload=payload,
        # read-only views, built only if the transform looks at them
        headers=rctx.headers if isinstance(rctx.headers, Lazy) else MappingProxyType(dict(rctx.headers)),
        query=rctx.query if isinstance(rctx.query, Lazy) else MappingProxyType(dict(rctx.query)),
        path=rctx.sub_path,
        url=rctx.url,
        mapping_id=mapping.id,
    )
    return await loader.call(mapping, ctx, settings.hooks.transforms_dir, transforms_root(settings.config_dir),
                             settings.hooks.transform_timeout_seconds)



# --- `hookgate hooks test` (operations.md §1.7) ---------------------------------------------------

TEST_RUN_ID = "00000000-0000-0000-0000-000000000000"


def _agent_view(prepared: PreparedRun) -> dict[str, Any]:
    a = prepared.action
    return {
        "kind": "agent",
        "message": a.message,
        "name": a.name,
        "agentId": prepared.agent_id,
        "sessionKey": a.session_key if a.session_key is not None else prepared.logical_key,
        "sessionKeySource": a.session_key_source,
        "storedSessionKey": prepared.session_key,
        "wakeMode": a.wake_mode,
        "deliver": a.deliver,
        "channel": a.channel,
        "to": a.to,
        "model": a.model,
        "thinking": a.thinking,
        "timeoutSeconds": a.timeout_seconds,
        "allowUnsafeExternalContent": a.allow_unsafe_external_content is True,
        "externalContentSource": prepared.external_source,
    }


def _wire(text: str) -> bytes:
    """A ``--header`` as a client such as curl sends it: the text's UTF-8 bytes (bytes of the command
    line that were not UTF-8 as they were)."""
    return text.encode("utf-8", "surrogateescape")


async def hook_test(
    settings: Settings,
    name: str,
    body: bytes,
    headers: Sequence[tuple[str, str]],
    query: Sequence[tuple[str, str]],
    *,
    prompt: bool = False,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """Run the pipeline from body decoding to policy for ``POST <basePath>/<name>`` without writing
    anything; the JSON result of operations.md §1.7."""
    sub_path = name.lstrip("/")
    mapping_id: str | None = None
    if not sub_path:
        return {"status": 404, "mapping": None, "error": "Not Found"}
    try:
        payload = decode_hook_body(body)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        source: ExternalSource = "webhook"
        wrap = True
        action: WakeAction | AgentAction
        if sub_path == "wake":
            action = parse_wake(fields(payload))
        elif sub_path == "agent":
            action = parse_agent(fields(payload), settings.enabled_channel_ids())
        else:
            mapping = match_mapping(settings.hooks.mappings, sub_path, payload)
            if mapping is None:
                return {"status": 404, "mapping": None, "error": "Not Found"}
            mapping_id = mapping.id
            raw_query = urlencode(list(query)).encode()
            target = f"{settings.hooks.base_path}/{sub_path}" + (f"?{raw_query.decode()}" if query else "")
            rctx = RequestContext(
                payload=payload,
                headers=request_headers((_wire(k), _wire(v)) for k, v in headers),
                query=request_query(raw_query),
                sub_path=sub_path,
                url=target,
                now_ms=now,
            )
            try:
                resolved = await resolve(mapping, rctx, settings, TransformLoader())
            except TransformFailed as exc:
                return {"status": 500, "mapping": mapping_id, "error": MAPPING_FAILED,
                        "exception": f"{exc.kind}: {exc.detail}"}
            if resolved.action is None:
                return {"status": 204, "mapping": mapping_id, "skipped": True}
            action, source, wrap = resolved.action, resolved.external_source, resolved.wrap
        if isinstance(action, WakeAction):
            return {"status": 200, "mapping": mapping_id,
                    "action": {"kind": "wake", "text": action.text, "mode": action.mode}}
        prepared = prepare_agent(action, settings, external_source=source, wrap=wrap)
        if prepared.rebind_error is not None:
            raise prepared.rebind_error
    except RequestError as exc:
        return {"status": exc.status, "mapping": mapping_id, "error": exc.message}
    out: dict[str, Any] = {"status": 200, "mapping": mapping_id, "action": _agent_view(prepared)}
    if prompt:
        out["prompt"] = hook_prompt(
            run_id=TEST_RUN_ID, name=sanitize_system_text(action.name), message=action.message,
            received_ms=now, now_ms=now, tz_setting=settings.agents.envelope_timezone, wrap=wrap,
            source=source, deliver=action.deliver,
        )
    return out
